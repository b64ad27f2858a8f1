// kiln/core/pack.hpp: pack<T...>, a tuple of values without std::tuple's machinery.
//
// std::tuple's constructors are constrained templates: a class of N element types instantiates
// its recursive bases and, for each constructor it considers, conjunctions of is_constructible
// and is_convertible over the N types (std::__and_, _TupleConstraints). kiln holds tuples of
// expression types (an optimizer's updates) and of tensors (tensor_set), whose types are large
// and many: those instantiations were most of what a training step's types cost the compiler
// before any pass ran (docs/build-cost.md). pack is an aggregate, one base per element.
#pragma once

#include <cstddef>
#include <utility>

namespace kiln::detail {

template <std::size_t I, class T>
struct pack_leaf {
  T value;
};

template <class Seq, class... T>
struct pack_of;
template <std::size_t... I, class... T>
struct pack_of<std::index_sequence<I...>, T...> : pack_leaf<I, T>... {
  static constexpr std::size_t size = sizeof...(T);
};

/// The values T... as one aggregate: `pack<A, B>{{a}, {b}}`, or make_pack(a, b).
template <class... T>
using pack = pack_of<std::index_sequence_for<T...>, T...>;

template <class... T>
constexpr pack<T...> make_pack(const T&... t) {
  return {{t}...};
}

/// Element I of a pack.
template <std::size_t I, class T>
constexpr T& get(pack_leaf<I, T>& p) {
  return p.value;
}
template <std::size_t I, class T>
constexpr const T& get(const pack_leaf<I, T>& p) {
  return p.value;
}

}  // namespace kiln::detail
