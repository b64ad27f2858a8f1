// kiln/eval.hpp: evaluating an expression now, with the default backend (the CPU backend's
// fused kernels of the expression's plan) or any other (backend/backend.hpp).
//
//   tensor<float, 2> c = a + b * 2;                       // bound tensors: eager style
//   using X = input<"x", f32, shape<dyn, 4>>;
//   using W = param<"w", f32, shape<4, 3>>;
//   auto y = relu(matmul(X{}, W{}));
//   auto out = eval(y, X{} = x, W{} = w);                // placeholders bound by type
//   auto ref = eval(y, X{} = x, W{} = w, eager::backend);  // the reference
//   auto f = compile(y);                                 // kiln::default_backend
//   auto out2 = f(X{} = x, W{} = w);
//
// Binding by type is checked while the program compiles: every placeholder of the expression
// bound once, every feed a placeholder of it (graph/binding.hpp names the errors). Binding by
// name (`eval(y, {{"x", x}, {"w", w}})`, kiln::feed) is checked when it runs; it is for names
// that are run-time data.
#pragma once

#include <bit>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.hpp"
#include "backend/default.hpp"
#include "debug/logs.hpp"
#include "core/tensor.hpp"
#include "graph/binding.hpp"
#include "graph/expr.hpp"
#include "graph/expr_nn.hpp"
#include "graph/grad.hpp"
#include "graph/trace.hpp"
#include "passes/pipeline.hpp"

namespace kiln {

/// A tensor bound to a placeholder by name.
struct feed {
  std::string_view name;
  any_tensor value;
};

namespace detail {
/// The leaf table of a graph (its nodes and leaf count) with an expression's bound tensors and
/// C++ scalars in place (tensor i to slot tensor_slot[i], scalar i to scalar_slot[i]); the
/// placeholders' slots are left for the caller. Not a template: an expression type passes its
/// arrays as spans (build cost, docs/build-cost.md).
KILN_LAZY std::vector<any_tensor> leaves_with_data(std::span<const node> nodes, int n_leaves,
                                                   std::span<const int> tensor_slot,
                                                   std::span<const any_tensor> tensors,
                                                   std::span<const int> scalar_slot,
                                                   std::span<const scalar_value> scalars);

/// The same for frozen graph g of expression value e.
template <class G, traceable E>
std::vector<any_tensor> leaves_with_data(const G& g, const E& e) {
  constexpr const auto& bind = traced<E>::binding;
  return leaves_with_data(g.nodes, g.leaves, bind.first, e.data.tensors, bind.second, e.data.scalars);
}

/// Checks a tensor bound to a placeholder (`what`: "param 'w1'") against its declaration.
inline void check_bound(const any_tensor& t, dtype dt, const dims& shape, const auto& what) {
  if (!t.defined()) throw std::invalid_argument("kiln: eval: the tensor bound to " + what() + " is undefined");
  if (t.dt() != dt) throw dtype_error(what(), dt, t.dt());
  if (!fits_declared(shape, t.shape())) throw shape_error(what(), shape, t.shape(), "differ (declared, bound)");
}

/// Checks each tensor of a typed feed against its placeholder (info[i]) and puts it in the leaf
/// table at its slots (slots[offsets[i]] .. slots[offsets[i + 1]]): what binding by type does,
/// compiled once rather than per placeholder type. Every tensor is checked before any is bound.
KILN_LAZY void bind_tensors(std::vector<any_tensor>& leaves, std::span<const slot_info> info,
                            std::span<const any_tensor* const> tensors, std::span<const int> offsets,
                            std::span<const int> slots);
}  // namespace detail

namespace detail {
/// Binds the placeholders of a graph's nodes from `feeds` into its leaf table (bind_leaves).
KILN_LAZY std::vector<any_tensor> bind_feeds(std::span<const node> nodes, std::vector<any_tensor> leaves,
                                             std::span<const feed> feeds);
}  // namespace detail

/// The leaf table of graph g for expression value e, with placeholders bound from `feeds`.
/// Throws if a placeholder has no tensor, a tensor has the wrong dtype or shape, or a feed
/// names no placeholder of the graph.
template <class G, traceable E>
std::vector<any_tensor> bind_leaves(const G& g, const E& e, std::span<const feed> feeds) {
  return detail::bind_feeds(g.nodes, detail::leaves_with_data(g, e), feeds);
}

template <class G, traceable E>
std::vector<any_tensor> bind_leaves(const G& g, const E& e, std::initializer_list<feed> feeds) {
  return bind_leaves(g, e, std::span<const feed>(feeds.begin(), feeds.size()));
}

// ---- binding by type (graph/binding.hpp) ---------------------------------------------------

namespace detail {
enum class bind_mistake { none, twice, not_a_placeholder, declared_otherwise, unbound };
struct bind_finding {
  bind_mistake what = bind_mistake::none;
  int at = 0;  ///< the feed (twice, not_a_placeholder, declared_otherwise) or the node (unbound)
};
constexpr bool is_placeholder_node(const node& n) { return n.o == op::input || n.o == op::param; }

/// The indices of the placeholder nodes of E's graph (one pass over the graph, shared by the
/// checks below, so that they cost placeholders x feeds, not nodes x feeds).
template <class E>
struct placeholder_nodes {
  static constexpr std::size_t count = [] {
    std::size_t c = 0;
    for (const node& x : traced<E>::value.nodes) c += is_placeholder_node(x);
    return c;
  }();
  static constexpr std::array<int, count> value = [] {
    std::array<int, count> r{};
    std::size_t c = 0;
    const auto& nodes = traced<E>::value.nodes;
    for (std::size_t k = 0; k < nodes.size(); ++k)
      if (is_placeholder_node(nodes[k])) r[c++] = static_cast<int>(k);
    return r;
  }();
};

/// The first mistake in binding placeholder types P... to the graph of E: a placeholder bound
/// twice, a feed for a placeholder that E does not have (or has with another kind, dtype or
/// shape), or a placeholder of E left without a tensor.
template <class E, class... P>
constexpr bind_finding find_binding_mistake() {
  constexpr int n = sizeof...(P);
  const node keys[] = {P::make()..., node{}};
  const auto& nodes = traced<E>::value.nodes;
  constexpr const auto& holders = placeholder_nodes<E>::value;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < i; ++j)
      if (same_placeholder(keys[i], keys[j])) return {bind_mistake::twice, i};
  for (int i = 0; i < n; ++i) {
    bool exact = false, named = false;
    for (const int k : holders)
      if (nodes[k].label() == keys[i].label()) {
        named = true;
        exact = exact || same_placeholder(nodes[k], keys[i]);
      }
    if (!exact) return {named ? bind_mistake::declared_otherwise : bind_mistake::not_a_placeholder, i};
  }
  for (const int k : holders) {
    bool bound = false;
    for (int i = 0; i < n && !bound; ++i) bound = same_placeholder(nodes[k], keys[i]);
    if (!bound) return {bind_mistake::unbound, k};
  }
  return {};
}

/// The name of node K of E's graph as a template argument.
template <class E, std::size_t K>
constexpr auto node_name() {
  constexpr std::string_view l = traced<E>::value.nodes[K].label();
  fixed_string<l.size() + 1> r;
  for (std::size_t i = 0; i < l.size(); ++i) r.chars[i] = l[i];
  return r;
}

/// The mistake in binding placeholder types P... to E's graph as one error type that says what
/// is wrong and names the placeholder (graph/binding.hpp); nothing if the binding is right.
template <class E, class... P>
void report_binding(std::tuple<P...>*) {
  constexpr bind_finding f = find_binding_mistake<E, P...>();
  if constexpr (f.what == bind_mistake::unbound) {
    constexpr auto k = static_cast<std::size_t>(f.at);
    (void)error::no_tensor_bound_to<traced<E>::value.nodes[k].o, error::named_t<node_name<E, k>()>, false>::value;
  } else if constexpr (f.what != bind_mistake::none) {
    using Q = std::tuple_element_t<static_cast<std::size_t>(f.at), std::tuple<P...>>;
    constexpr op kind = Q::make().o;
    using N = error::named_t<Q::name>;
    if constexpr (f.what == bind_mistake::twice) (void)error::placeholder_bound_twice<kind, N, false>::value;
    else if constexpr (f.what == bind_mistake::not_a_placeholder)
      (void)error::not_a_placeholder_of_this_expression<kind, N, false>::value;
    else (void)error::placeholder_declared_otherwise<kind, N, Q::dt, typename Q::shape_type, false>::value;
  }
}
template <class E, class... P>
constexpr bool binding_is_right(std::tuple<P...>*) {
  return find_binding_mistake<E, P...>().what == bind_mistake::none;
}

/// For each tensor of typed feed A (in the order of A::info), the leaf-table slots of E's graph
/// that take it: slots[offsets[i]] .. slots[offsets[i + 1]]. One table per expression and feed
/// type, computed while the program compiles.
template <std::size_t N, std::size_t C>
struct feed_table {
  std::array<int, N + 1> offsets{};
  std::array<int, C> slots{};
};
constexpr bool is_placeholder_of(const node& n, const slot_info& s) {
  return slot_info{n.label(), n.o, n.dt, n.shape} == s;
}
template <class E, class A>
struct feed_slots {
  static constexpr std::size_t count = [] {
    std::size_t c = 0;
    for (const slot_info& s : A::info)
      for (const int k : placeholder_nodes<E>::value) c += is_placeholder_of(traced<E>::value.nodes[k], s);
    return c;
  }();
  static constexpr feed_table<A::info.size(), count> value = [] {
    feed_table<A::info.size(), count> r;
    std::size_t c = 0;
    for (std::size_t i = 0; i < A::info.size(); ++i) {
      r.offsets[i] = static_cast<int>(c);
      for (const int k : placeholder_nodes<E>::value)
        if (is_placeholder_of(traced<E>::value.nodes[k], A::info[i])) r.slots[c++] = traced<E>::value.nodes[k].slot;
    }
    r.offsets[A::info.size()] = static_cast<int>(c);
    return r;
  }();
};

/// The placeholder types of typed-feed arguments A... (other arguments contribute none).
template <class A>
struct placeholders_of {
  using type = std::tuple<>;
};
template <typed_feeds A>
struct placeholders_of<A> {
  using type = typename A::placeholders;
};
template <class... A>
using placeholders_in =
    decltype(std::tuple_cat(std::declval<typename placeholders_of<std::remove_cvref_t<A>>::type>()...));

/// A null pointer to the tuple of the placeholder types of arguments A..., to pass them on.
template <class... A>
inline constexpr placeholders_in<A...>* placeholders_of_args = nullptr;

template <class... A>
struct last_arg {
  using type = void;
};
template <class A0, class... A>
struct last_arg<A0, A...> {
  using type = std::remove_cvref_t<std::tuple_element_t<sizeof...(A), std::tuple<A0, A...>>>;
};
template <class... A>
inline constexpr std::size_t typed_count = (std::size_t{0} + ... + std::size_t{typed_feeds<A>});

/// Arguments of eval and eval_all: typed feeds, then perhaps a backend.
template <class... A>
concept feeds_then_backend = typed_count<A...> == sizeof...(A) ||
                             (typed_count<A...> + 1 == sizeof...(A) && backend_type<typename last_arg<A...>::type>);
template <class... A>
using backend_of =
    std::conditional_t<backend_type<typename last_arg<A...>::type>, typename last_arg<A...>::type, default_backend>;
/// Arguments of a compiled expression's call: typed feeds, then perhaps an out= vector.
template <class... A>
concept feeds_then_out =
    typed_count<A...> == sizeof...(A) ||
    (typed_count<A...> + 1 == sizeof...(A) && std::same_as<std::tuple_element_t<sizeof...(A) - 1, std::tuple<A...>>,
                                                           std::vector<any_tensor>&>);

/// Binds the tensors of argument a, if it is a typed feed, into E's leaf table.
template <class E, class A>
void bind_feed(std::vector<any_tensor>& leaves, const A& a) {
  if constexpr (typed_feeds<A>) {
    constexpr const auto& t = feed_slots<E, A>::value;
    bind_tensors(leaves, A::info, a.tensors(), t.offsets, t.slots);
  }
}
/// The leaf table of e's graph with its placeholders bound from the typed feeds among a...
/// (other arguments, a backend or an out= vector, are skipped). kiln::binds has checked the
/// binding at compile time; this checks what only run time knows: the dtype of an any_tensor,
/// and the extents.
template <traceable E, class... A>
std::vector<any_tensor> bind_typed(const E& e, const A&... a) {
  std::vector<any_tensor> leaves = leaves_with_data(traced<E>::value, e);
  (bind_feed<E>(leaves, a), ...);
  return leaves;
}
}  // namespace detail

/// Whether typed feeds A... (`X{} = x`, tensor_sets) bind the placeholders of E: each
/// placeholder of E bound once, each feed a placeholder of E. Where it is false, eval, compile
/// and the trainer call detail::report_binding, one compile error naming the placeholder.
template <traceable E, class... A>
inline constexpr bool binds = detail::binding_is_right<E>(detail::placeholders_of_args<A...>);

/// Evaluates an expression, or each expression of kiln::outputs(...), with backend B (the
/// default backend unless named: `eval_all(e, feeds, kiln::eager::backend)`).
template <traceable E, backend_type B = default_backend>
std::vector<any_tensor> eval_all(const E& e, std::span<const feed> feeds, B = B{}) {
  // the leaf table is laid out by the captured graph; every later stage keeps its slots
  return B::template run<program<E>>(bind_leaves(traced<E>::value, e, feeds), {});
}
template <traceable E, backend_type B = default_backend>
std::vector<any_tensor> eval_all(const E& e, std::initializer_list<feed> feeds, B b = B{}) {
  return eval_all(e, std::span<const feed>(feeds.begin(), feeds.size()), b);
}
/// The same with placeholders bound by type: `eval_all(step, X{} = x, W{} = w[, backend])`.
template <traceable E, class... A>
  requires detail::feeds_then_backend<A...>
std::vector<any_tensor> eval_all(const E& e, const A&... a) {
  if constexpr (!binds<E, A...>) {
    detail::report_binding<E>(detail::placeholders_of_args<A...>);  // one compile error
    return std::vector<any_tensor>{};
  } else {
    return detail::backend_of<A...>::template run<program<E>>(detail::bind_typed(e, a...), {});
  }
}

/// Evaluates an expression, returning a dtype-erased tensor.
template <expression E, backend_type B = default_backend>
any_tensor eval_any(const E& e, std::initializer_list<feed> feeds, B b = B{}) {
  if constexpr (E::shape.poisoned()) return any_tensor{};  // the mistake was reported where it was made
  else return eval_all(e, feeds, b)[0];
}
template <expression E>
any_tensor eval_any(const E& e) {
  return eval_any(e, {});
}

/// Evaluates an expression with backend B straight into `dest`'s elements (its shape must be
/// the expression's), or into new storage if `dest` is undefined. A destination that shares
/// storage with an operand gets the result through a copy, so `a = transpose(a) + a` reads only
/// old values.
template <expression E, backend_type B = default_backend>
void eval_into(const E& e, any_tensor& dest, B = B{}) {
  // a mistake in the expression was reported where it was made; an expression with placeholders
  // has no tensor bound to them
  if constexpr (E::shape.poisoned()) return;
  else if constexpr (!binds<E>) detail::report_binding<E>(detail::placeholders_of_args<>);
  else {
    const std::vector<any_tensor> leaves = detail::bind_typed(e);
    if (!dest.defined()) dest = B::template run<program<E>>(leaves, {})[0];
    else B::template run<program<E>>(leaves, std::span<const any_tensor>(&dest, 1));
  }
}

/// Tensor assignment (`tensor c = expr;`, `c = expr;`) evaluates with the default backend.
template <expression E>
struct evaluator<E> {
  static void into(const E& e, any_tensor& dest) { eval_into(e, dest); }
};

/// Evaluates an expression into a new tensor of its dtype and rank.
template <expression E, backend_type B = default_backend>
auto eval(const E& e, std::span<const feed> feeds, B b = B{}) {
  if constexpr (E::shape.poisoned()) return any_tensor{};  // the mistake was reported where it was made
  else return tensor<storage_t<E::dt>, E::shape.rank>(std::move(eval_all(e, feeds, b)[0]));
}
template <expression E, backend_type B = default_backend>
auto eval(const E& e, std::initializer_list<feed> feeds, B b = B{}) {
  return eval(e, std::span<const feed>(feeds.begin(), feeds.size()), b);
}
/// The same with placeholders bound by type, checked at compile time: `eval(y, X{} = x,
/// W{} = w)`, `eval(logits, X{} = x, params)` (a tensor_set), `eval(y, X{} = x, eager::backend)`.
template <expression E, class... A>
  requires detail::feeds_then_backend<A...>
auto eval(const E& e, const A&... a) {
  if constexpr (E::shape.poisoned()) return any_tensor{};  // the mistake was reported where it was made
  else if constexpr (!binds<E, A...>) {
    detail::report_binding<E>(detail::placeholders_of_args<A...>);  // one compile error
    return any_tensor{};
  } else {
    std::vector<any_tensor> out = detail::backend_of<A...>::template run<program<E>>(detail::bind_typed(e, a...), {});
    return tensor<storage_t<E::dt>, E::shape.rank>(std::move(out[0]));
  }
}

/// An expression compiled for a backend: call it with the tensors of its placeholders.
///   auto f = kiln::compile(gelu(linear(x, w, b)));   // kiln::default_backend
///   tensor<float, 2> y = f(X{} = xv, W{} = wv, B{} = bv);
/// An expression gives one tensor of its dtype and rank; kiln::outputs(...) gives a vector.
template <traceable E, backend_type B = default_backend>
class compiled {
 public:
  explicit compiled(const E& e) : e_(e) { (void)plan<E>::schedule; }
  auto operator()(std::initializer_list<feed> feeds) const {
    std::vector<any_tensor> out = eval_all(e_, feeds, B{});
    if constexpr (expression<E>) return tensor<storage_t<E::dt>, E::shape.rank>(std::move(out[0]));
    else return out;
  }
  auto operator()(std::span<const feed> feeds) const {
    std::vector<any_tensor> out = eval_all(e_, feeds, B{});
    if constexpr (expression<E>) return tensor<storage_t<E::dt>, E::shape.rank>(std::move(out[0]));
    else return out;
  }
  /// The same, writing output q into out[q] when that is defined with the output's dtype and
  /// shape (it may be a strided view), else into a new tensor stored in out[q] (out is resized
  /// to the number of outputs): repeated calls reuse the caller's memory, like torch's `out=`.
  void operator()(std::span<const feed> feeds, std::vector<any_tensor>& out) const {
    out.resize(traced<E>::value.outputs.size());
    out = B::template run<program<E>>(bind_leaves(traced<E>::value, e_, feeds), out);
  }
  void operator()(std::initializer_list<feed> feeds, std::vector<any_tensor>& out) const {
    (*this)(std::span<const feed>(feeds.begin(), feeds.size()), out);
  }
  /// With placeholders bound by type, checked at compile time: `f(X{} = x, W{} = w)`, and with
  /// an out= vector last, `f(X{} = x, W{} = w, out)`.
  template <class... A>
    requires detail::feeds_then_out<A...>
  auto operator()(A&&... a) const {
    if constexpr (detail::typed_count<A...> == sizeof...(A)) {
      if constexpr (!binds<E, A...>) {
        detail::report_binding<E>(detail::placeholders_of_args<A...>);  // one compile error
        return any_tensor{};
      } else {
        std::vector<any_tensor> out = B::template run<program<E>>(detail::bind_typed(e_, a...), {});
        if constexpr (expression<E>) return tensor<storage_t<E::dt>, E::shape.rank>(std::move(out[0]));
        else return out;
      }
    } else if constexpr (!binds<E, A...>) {
      detail::report_binding<E>(detail::placeholders_of_args<A...>);
    } else {
      std::vector<any_tensor>& out = std::get<sizeof...(A) - 1>(std::forward_as_tuple(a...));
    out.resize(traced<E>::value.outputs.size());
      out = B::template run<program<E>>(detail::bind_typed(e_, a...), out);
    }
  }
  /// The frozen plan the calls run.
  static constexpr const auto& schedule = plan<E>::schedule;

 private:
  E e_;
};

template <traceable E, backend_type B = default_backend>
compiled<E, B> compile(const E& e, B = B{}) {
  return compiled<E, B>(e);
}

#if KILN_DEFINE_RUNTIME
namespace detail {
KILN_LAZY_DEF std::vector<any_tensor> leaves_with_data(std::span<const node> nodes, int n_leaves,
                                                       std::span<const int> tensor_slot,
                                                       std::span<const any_tensor> tensors,
                                                       std::span<const int> scalar_slot,
                                                       std::span<const scalar_value> scalars) {
  std::vector<any_tensor> leaves(static_cast<std::size_t>(n_leaves));
  // bound tensors and C++ scalars: each data item to its slot (a shared subtree's later uses
  // map to the first use's slots, and must hold the same values)
  const auto shared_mismatch = [](const char* what) {
    return std::logic_error(std::string("kiln: a subexpression that kiln traces once (the loss under several grad "
                                        "nodes, or another structurally equal use of it) holds different ") +
                            what + " in two of its uses; make the two expressions differ in structure, or bind the "
                                   "value through a kiln::input");
  };
  for (std::size_t i = 0; i < tensor_slot.size(); ++i) {
    any_tensor& slot = leaves[static_cast<std::size_t>(tensor_slot[i])];
    const any_tensor& t = tensors[i];
    if (!t.defined()) throw std::invalid_argument("kiln: an undefined tensor was used in an expression");
    if (!slot.defined()) slot = t;
    else if (!(slot.shares_storage(t) && slot.bytes() == t.bytes() && slot.shape() == t.shape() &&
               slot.strides() == t.strides()))
      throw shared_mismatch("tensors");
  }
  std::vector<char> scalar_set(leaves.size(), 0);
  std::vector<scalar_value> scalar_of(leaves.size());
  for (std::size_t i = 0; i < scalar_slot.size(); ++i) {
    const auto s = static_cast<std::size_t>(scalar_slot[i]);
    const scalar_value v = scalars[i];
    if (scalar_set[s]) {
      if (std::bit_cast<std::uint64_t>(v.f) != std::bit_cast<std::uint64_t>(scalar_of[s].f) || v.i != scalar_of[s].i)
        throw shared_mismatch("C++ scalars");
      continue;
    }
    scalar_set[s] = 1;
    scalar_of[s] = v;
  }
  for (const node& n : nodes) {
    if (n.o != op::scalar) continue;
    any_tensor& slot = leaves[static_cast<std::size_t>(n.slot)];
    const scalar_value v = scalar_of[static_cast<std::size_t>(n.slot)];
    slot = any_tensor(n.dt, dims{});
    visit(n.dt, [&]<dtype D>() {
      *reinterpret_cast<storage_t<D>*>(slot.bytes()) =
          storage_t<D>(is_floating(D) ? static_cast<compute_t<D>>(v.f) : static_cast<compute_t<D>>(v.i));
    });
  }
  return leaves;
}


KILN_LAZY_DEF std::vector<any_tensor> bind_feeds(std::span<const node> nodes, std::vector<any_tensor> leaves,
                                                 std::span<const feed> feeds) {
  for (std::size_t i = 0; i < feeds.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (feeds[i].name == feeds[j].name)
        throw std::invalid_argument("kiln: eval: two tensors are bound to '" + std::string(feeds[i].name) + "'");
  std::vector<char> used(feeds.size(), 0);
  for (const node& n : nodes) {
    if (n.o != op::input && n.o != op::param) continue;
    any_tensor& slot = leaves[static_cast<std::size_t>(n.slot)];
    const auto what = [&] { return placeholder_what(n.o, n.label()); };
    const feed* f = nullptr;
    for (std::size_t i = 0; i < feeds.size(); ++i)
      if (feeds[i].name == n.label()) {
        f = &feeds[i];
        used[i] = 1;
      }
    if (!f) throw std::invalid_argument("kiln: eval: no tensor bound to " + what());
    detail::check_bound(f->value, n.dt, n.shape, what);
    slot = f->value;
  }
  for (std::size_t i = 0; i < feeds.size(); ++i)
    if (!used[i])
      throw std::invalid_argument("kiln: eval: the graph has no input or param named '" +
                                  std::string(feeds[i].name) + "'");
  return leaves;
}

KILN_LAZY_DEF void bind_tensors(std::vector<any_tensor>& leaves, std::span<const slot_info> info,
                                std::span<const any_tensor* const> tensors, std::span<const int> offsets,
                                std::span<const int> slots) {
  for (std::size_t i = 0; i < info.size(); ++i)
    check_bound(*tensors[i], info[i].dt, info[i].shape, [&] { return slot_what(info[i]); });
  for (std::size_t i = 0; i < info.size(); ++i)
    for (auto k = static_cast<std::size_t>(offsets[i]); k < static_cast<std::size_t>(offsets[i + 1]); ++k)
      leaves[static_cast<std::size_t>(slots[k])] = *tensors[i];
}
}  // namespace detail
#endif  // KILN_DEFINE_RUNTIME

}  // namespace kiln
