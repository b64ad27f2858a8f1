// kiln/graph/trace.hpp: expression type -> graph value, and the run-time leaf table.
//
// Each sub-expression type is traced once into its own frozen constant (traced<E>::value), and
// a node's trace appends its operands' frozen graphs. No single constant evaluation recurses
// through the whole expression, so deep expressions stay inside the compilers' constexpr depth
// limit (512), and an operand type that appears in several places is traced once.
#pragma once

#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/tensor.hpp"
#include "graph.hpp"

namespace kiln {

template <class E>
struct traced;

namespace detail {
template <class E, class... K>
constexpr graph build(std::tuple<K...>*) {
  graph g;
  int ids[sizeof...(K) + 1]{};
  int i = 0;
  ((ids[i++] = g.append(traced<K>::value)), ...);
  node n = E::make();
  for (int j = 0; j < static_cast<int>(sizeof...(K)); ++j) n.in[j] = ids[j];
  if (kind_of(n.o) == op_kind::leaf) n.slot = g.leaves++;
  g.outputs = {g.add(n)};
  return g;
}
}  // namespace detail

/// The frozen graph of expression type E (one output: the expression's value).
template <class E>
struct traced {
  static constexpr auto value = freeze([] { return detail::build<E>(static_cast<typename E::kids*>(nullptr)); });
};

/// The graph of an expression, as a run-time value.
template <expression E>
constexpr graph trace(const E&) {
  return traced<E>::value.thaw();
}

template <expression E>
void collect_leaves(const E& e, std::vector<any_tensor>& out);

namespace detail {
template <class E, std::size_t... I>
void collect_kids(const E& e, std::vector<any_tensor>& out, std::index_sequence<I...>) {
  const auto kids = e.children();
  (collect_leaves(std::get<I>(kids), out), ...);
}
}  // namespace detail

/// Appends the run-time values of e's leaves in slot order (the order trace numbers them):
/// bound tensors and scalars carry their value, named placeholders an undefined tensor.
/// (Two template levels per expression level, no std::apply: g++ stops at a depth of 900.)
template <expression E>
void collect_leaves(const E& e, std::vector<any_tensor>& out) {
  constexpr std::size_t k = std::tuple_size_v<typename E::kids>;
  if constexpr (k == 0) out.push_back(e.leaf_value());
  else detail::collect_kids(e, out, std::make_index_sequence<k>{});
}

}  // namespace kiln
