// kiln/graph/binding.hpp: tensors bound to placeholders by type.
//
//   using X = input<"x", f32, shape<dyn, 784>>;
//   using W = param<"w", f32, shape<784, 10>>;
//   auto y = eval(relu(matmul(X{}, W{})), X{} = xv, W{} = wv);   // a typed_feed each
//   tensor_set<std::tuple<W>> ps;                                 // one tensor per placeholder type
//   ps.get<W>() = wv;  auto y2 = eval(relu(matmul(X{}, W{})), X{} = xv, ps);
//
// A placeholder's name, dtype and shape are part of its type, so eval and compile check the
// binding while the program compiles (eval.hpp): every placeholder of the expression bound
// once, every feed a placeholder of the expression. The mistakes are the error types below,
// whose arguments name the placeholder; run-time extents (dyn) are still checked when it runs.
// Strings remain for names that are run-time data: a checkpoint's keys (the state_dict
// conversions of tensor_set, and kiln::feed in eval.hpp).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "../core/expr_fwd.hpp"
#include "../core/fixed_string.hpp"
#include "../core/pack.hpp"
#include "../core/tensor.hpp"
#include "graph.hpp"
#include "ops.hpp"

namespace kiln {

/// A placeholder type: kiln::input<...> or kiln::param<...> (graph/expr.hpp).
template <class P>
concept placeholder = expression<P> && requires {
  P::name.view();
  typename P::shape_type;
} && (P::make().o == op::input || P::make().o == op::param);

namespace error {

/// A placeholder's name as a type, for the messages below. g++ prints a string template argument
/// as a string (named<fixed_string<3>{"w1"}>); clang 14 prints its characters as numbers, so
/// there the name is spelt as characters (named<'w', '1'>).
#if defined(__clang__)
template <char... C> struct named {};
template <fixed_string S, class I = std::make_index_sequence<S.size()>> struct named_of;
template <fixed_string S, std::size_t... I>
struct named_of<S, std::index_sequence<I...>> {
  using type = named<S.chars[I]...>;
};
template <fixed_string S> using named_t = typename named_of<S>::type;
#else
template <fixed_string S> struct named {};
template <fixed_string S> using named_t = named<S>;
#endif

#define KILN_BINDING_ERROR(NAME, PARAMS, MESSAGE) \
  template <PARAMS, bool Ok>                      \
  struct NAME {                                   \
    static_assert(Ok, "kiln: " MESSAGE);          \
    static constexpr bool value = Ok;             \
  }
#define KILN_COMMA ,

KILN_BINDING_ERROR(no_tensor_bound_to, op Kind KILN_COMMA class Name,
                   "eval: no tensor is bound to this placeholder of the expression (the error type names it); "
                   "bind one with `Placeholder{} = tensor`");
KILN_BINDING_ERROR(not_a_placeholder_of_this_expression, op Kind KILN_COMMA class Name,
                   "eval: a tensor is bound to a placeholder that the expression does not have (the error type "
                   "names it): a misspelt name, or another expression's placeholder?");
KILN_BINDING_ERROR(placeholder_declared_otherwise, op Kind KILN_COMMA class Name KILN_COMMA dtype Bound
                       KILN_COMMA class BoundShape,
                   "eval: the expression's placeholder of this name has another kind, dtype or shape than the "
                   "one bound (the error type names the one bound)");
KILN_BINDING_ERROR(placeholder_bound_twice, op Kind KILN_COMMA class Name,
                   "eval: two tensors are bound to this placeholder (the error type names it)");
KILN_BINDING_ERROR(tensor_does_not_fit_placeholder,
                   op Kind KILN_COMMA class Name KILN_COMMA dtype Declared KILN_COMMA class DeclaredShape
                       KILN_COMMA class Tensor,
                   "the bound tensor's element type or rank is not the placeholder's (the error type names both)");
KILN_BINDING_ERROR(not_in_this_set, op Kind KILN_COMMA class Name,
                   "tensor_set: this placeholder is not one of the set's (the error type names it)");
KILN_BINDING_ERROR(set_names_a_placeholder_twice, op Kind KILN_COMMA class Name,
                   "tensor_set: two placeholders of the set have this name (the error type names it)");

#undef KILN_COMMA
#undef KILN_BINDING_ERROR

}  // namespace error

namespace detail {
/// A placeholder as data (name, kind, dtype, declared shape): what the code that binds and
/// checks its tensors needs, so that code is compiled once, not once per placeholder type.
struct slot_info {
  std::string_view name;
  op kind = op::input;
  dtype dt = dtype::f32;
  dims shape;
  friend constexpr bool operator==(const slot_info&, const slot_info&) = default;
};
template <class P>
inline constexpr slot_info slot_info_of{P::name.view(), P::make().o, P::dt, P::shape};
/// The position of `s` in `info`, or -1.
constexpr int find_slot(std::span<const slot_info> info, const slot_info& s) {
  for (std::size_t i = 0; i < info.size(); ++i)
    if (info[i] == s) return static_cast<int>(i);
  return -1;
}
}  // namespace detail

/// What eval, compile and the trainer accept as tensors bound by type: a typed_feed (`X{} = x`)
/// or a tensor_set. Each names its placeholder types, describes them as data (`info`) and
/// lists its tensors in that order (`tensors()`): the code that binds them is one loop, not an
/// instantiation per placeholder type (whose names, with every placeholder of a large set in
/// them, cost g++ more than the kernels; docs/build-cost.md).
struct typed_feeds_base {};
template <class A>
concept typed_feeds = std::derived_from<std::remove_cvref_t<A>, typed_feeds_base>;

/// A tensor bound to placeholder P, made by `P{} = t` (the placeholders' operator=).
template <class P>
struct typed_feed : typed_feeds_base {
  using placeholders = std::tuple<P>;
  static constexpr std::array<detail::slot_info, 1> info{detail::slot_info_of<P>};
  any_tensor value;

  std::array<const any_tensor*, 1> tensors() const { return {&value}; }
  template <class F>
  void for_each(F&& f) const {
    f(std::type_identity<P>{}, value);
  }
};

namespace detail {
template <class T> struct typed_tensor : std::false_type {};
template <class T, int R> struct typed_tensor<tensor<T, R>> : std::true_type {};
}  // namespace detail

/// What `P{} = t` takes: a kiln::tensor<T, R> (its dtype and rank checked now) or an any_tensor.
template <class T>
concept bindable_tensor =
    std::same_as<std::remove_cvref_t<T>, any_tensor> || detail::typed_tensor<std::remove_cvref_t<T>>::value;

/// `P{} = t`: the typed feed of t for placeholder P.
template <class P, bindable_tensor T>
typed_feed<P> bind_to(const T& t) {
  if constexpr (detail::typed_tensor<T>::value) {
    (void)error::tensor_does_not_fit_placeholder<P::make().o, error::named_t<P::name>, P::dt, typename P::shape_type,
                                                 T, T::dt == P::dt && T::rank == P::shape.rank>::value;
    return typed_feed<P>{{}, t.any()};
  } else {
    return typed_feed<P>{{}, t};
  }
}

namespace detail {
/// Whether placeholders P have distinct names (else the error names the first repeated one).
template <class... P>
constexpr bool distinct_names() {
  constexpr int repeated = [] {
    const std::string_view names[] = {P::name.view()..., {}};
    for (std::size_t i = 0; i < sizeof...(P); ++i)
      for (std::size_t j = 0; j < i; ++j)
        if (names[i] == names[j]) return static_cast<int>(i);
    return -1;
  }();
  if constexpr (repeated < 0) return true;
  else {
    using Q = std::tuple_element_t<static_cast<std::size_t>(repeated), std::tuple<P...>>;
    return error::set_names_a_placeholder_twice<Q::make().o, error::named_t<Q::name>, false>::value;
  }
}
}  // namespace detail

namespace detail {
/// "param 'w1'", for messages.
KILN_LAZY std::string slot_what(const slot_info& s);
/// Zero tensors of each slot's shape (left undefined where the shape has a dyn extent).
KILN_LAZY void zero_slots(std::span<const slot_info> info, std::span<any_tensor* const> slots);
/// Each slot's tensor from `by_name` (tensor_set's constructor from a state_dict): all are
/// checked before any slot is written.
KILN_LAZY void take_slots(const std::map<std::string, any_tensor>& by_name, std::span<const slot_info> info,
                          std::span<any_tensor* const> slots);
KILN_LAZY std::map<std::string, any_tensor> slots_by_name(std::span<const slot_info> info,
                                                          std::span<any_tensor* const> slots);
/// The slot named `name`, or nullptr.
KILN_LAZY any_tensor* slot_named(std::span<const slot_info> info, std::span<any_tensor* const> slots,
                                 std::string_view name);
}  // namespace detail

/// One tensor for each placeholder type of the tuple Ps, reached by type: a model's parameters
/// (nn::param_set), an optimizer's states. Usable as one argument of eval, compile and the
/// trainer. Tensors are handles: copying a set, or converting it to or from tensors by name,
/// shares their storage.
template <class Ps>
class tensor_set;

template <class... P>
class tensor_set<std::tuple<P...>> : public typed_feeds_base {
  static_assert((placeholder<P> && ...), "kiln: tensor_set holds tensors for kiln::input or kiln::param types");

  static_assert(detail::distinct_names<P...>());

 public:
  using placeholders = std::tuple<P...>;
  template <class Q>
  using tensor_type = tensor<storage_t<Q::dt>, Q::shape.rank>;

  static constexpr std::size_t size() { return sizeof...(P); }
  /// Each placeholder as data, in the set's order.
  static constexpr std::array<detail::slot_info, sizeof...(P)> info{detail::slot_info_of<P>...};

  /// The position of Q in the set, or -1.
  template <class Q>
  static constexpr int index_of() {
    return detail::find_slot(info, detail::slot_info_of<Q>);
  }

  /// Zero tensors of each placeholder's shape (undefined where the shape has a dyn extent).
  tensor_set() { detail::zero_slots(info, slots()); }

  /// The tensors of `by_name` under each placeholder's name, sharing their storage: each must
  /// have its placeholder's dtype and shape, and every name must be a placeholder's.
  explicit tensor_set(const std::map<std::string, any_tensor>& by_name) { detail::take_slots(by_name, info, slots()); }

  /// The tensor of placeholder Q (a compile error names Q if it is not in the set).
  template <class Q>
  tensor_type<Q>& get() {
    if constexpr (index_of<Q>() < 0) return not_in_set<Q>();
    else return detail::get<static_cast<std::size_t>(index_of<Q>())>(t_);
  }
  template <class Q>
  const tensor_type<Q>& get() const {
    if constexpr (index_of<Q>() < 0) return not_in_set<Q>();
    else return detail::get<static_cast<std::size_t>(index_of<Q>())>(t_);
  }

  /// Whether a placeholder of the set has this run-time name.
  static bool has(std::string_view name) {
    for (const detail::slot_info& i : info)
      if (i.name == name) return true;
    return false;
  }
  /// The tensor under a run-time name (a checkpoint's key); throws std::out_of_range.
  const any_tensor& at(std::string_view name) const {
    if (const any_tensor* r = detail::slot_named(info, slots(), name)) return *r;
    throw std::out_of_range("kiln: tensor_set: no placeholder named '" + std::string(name) + "'");
  }

  /// The tensors by name (a state_dict, what safetensors files hold), sharing storage.
  std::map<std::string, any_tensor> by_name() const { return detail::slots_by_name(info, slots()); }
  operator std::map<std::string, any_tensor>() const { return by_name(); }  // NOLINT: a state_dict where one is wanted

  /// Calls f(std::type_identity<Q>{}, tensor) for each placeholder Q, in order.
  template <class F>
  void for_each(F&& f) const {
    (f(std::type_identity<P>{}, get<P>().any()), ...);
  }
  /// The same with the typed tensors, which f may rebind.
  template <class F>
  void for_each_typed(F&& f) {
    (f(std::type_identity<P>{}, get<P>()), ...);
  }

  /// The tensors in the order of `info`, for code that does not depend on the placeholder types.
  /// Each is the handle of the typed tensor get<P>() returns; rebinding one through the pointer
  /// must keep its placeholder's dtype and rank.
  std::array<any_tensor*, sizeof...(P)> tensors() { return slots(); }
  std::array<const any_tensor*, sizeof...(P)> tensors() const {
    std::array<const any_tensor*, sizeof...(P)> r{};
    const auto s = slots();
    std::copy(s.begin(), s.end(), r.begin());
    return r;
  }

 private:
  /// The typed tensors' handles, for the code that does not depend on the placeholder types
  /// (each typed tensor is its handle; the set owns them, so writing through one is sound).
  std::array<any_tensor*, sizeof...(P)> slots() const {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::array<any_tensor*, sizeof...(P)>{const_cast<any_tensor*>(&detail::get<I>(t_).any())...};
    }(std::index_sequence_for<P...>{});
  }

  template <class Q>
  static tensor_type<Q>& not_in_set() {
    (void)error::not_in_this_set<Q::make().o, error::named_t<Q::name>, false>::value;
    static tensor_type<Q> none;
    return none;
  }

  detail::pack<tensor_type<P>...> t_;  // (not a std::tuple: core/pack.hpp says why)
};

#if KILN_DEFINE_RUNTIME
namespace detail {
KILN_LAZY_DEF std::string slot_what(const slot_info& s) { return placeholder_what(s.kind, s.name); }

KILN_LAZY_DEF void zero_slots(std::span<const slot_info> info, std::span<any_tensor* const> slots) {
  for (std::size_t i = 0; i < info.size(); ++i)
    if (info[i].shape.is_static()) *slots[i] = any_tensor(info[i].dt, info[i].shape);
}

KILN_LAZY_DEF void take_slots(const std::map<std::string, any_tensor>& by_name, std::span<const slot_info> info,
                              std::span<any_tensor* const> slots) {
  std::vector<const any_tensor*> found(info.size());
  for (std::size_t i = 0; i < info.size(); ++i) {
    const slot_info& s = info[i];
    const auto it = by_name.find(std::string(s.name));
    if (it == by_name.end()) throw std::invalid_argument("kiln: no tensor for " + slot_what(s));
    const any_tensor& t = it->second;
    if (!t.defined()) throw std::invalid_argument("kiln: the tensor for " + slot_what(s) + " is undefined");
    if (t.dt() != s.dt) throw dtype_error(slot_what(s), s.dt, t.dt());
    if (!fits_declared(s.shape, t.shape()))
      throw shape_error(slot_what(s), s.shape, t.shape(), "differ (declared, given)");
    found[i] = &t;
  }
  if (by_name.size() != info.size())
    for (const auto& [key, t] : by_name)
      if (!slot_named(info, slots, key))
        throw std::invalid_argument("kiln: '" + key + "' is not the name of a placeholder of the set");
  for (std::size_t i = 0; i < info.size(); ++i) *slots[i] = *found[i];
}

KILN_LAZY_DEF std::map<std::string, any_tensor> slots_by_name(std::span<const slot_info> info,
                                                              std::span<any_tensor* const> slots) {
  std::map<std::string, any_tensor> m;
  for (std::size_t i = 0; i < info.size(); ++i) m[std::string(info[i].name)] = *slots[i];
  return m;
}

KILN_LAZY_DEF any_tensor* slot_named(std::span<const slot_info> info, std::span<any_tensor* const> slots,
                                     std::string_view name) {
  for (std::size_t i = 0; i < info.size(); ++i)
    if (info[i].name == name) return slots[i];
  return nullptr;
}
}  // namespace detail
#endif  // KILN_DEFINE_RUNTIME

}  // namespace kiln
