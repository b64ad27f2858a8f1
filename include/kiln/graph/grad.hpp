// kiln/graph/grad.hpp: differentiation and several outputs, at capture.
//
//   auto [gw, gb] = grad(loss, wrt(w, b));       // d loss / d w and d loss / d b
//   auto g = grad(loss, w);                       // one placeholder
//   auto d = jvp(y, tangent(x, u));               // forward mode: the derivative of y along u
//   auto z = detach(y);                           // y, with no gradient through it
//   auto c = custom_vjp(y, x, [](auto g) { return g * 2; });  // your own rule for d y / d x
//   auto step = outputs(loss, gw, gb);            // one graph, one plan, three results
//   auto s = share(matmul(q, transpose(k)) * scale);  // one value at every use of s
//
// These capture nodes (grad, jvp, detach) that the autodiff pass (passes/autodiff.hpp) expands
// into primitives after decomposition; gradients are expressions like any other, so they can
// be differentiated again (Hessian-vector products) or used in an update (w - lr * gw).
// Gradients are taken with respect to placeholders (input, param): a bound tensor is a fresh
// leaf at each use, so it has no identity to differentiate by.
#pragma once

#include <bit>
#include <cstdint>
#include <tuple>

#include "expr.hpp"

namespace kiln {

namespace ex {

// (dtype and shape by the catalogue's rule, as expr.hpp's node types)
template <class L, class W>
struct grad : node_base<L, W> {
  static constexpr node proto() { return detail::make_node(op::grad, dtype::f32, dims{}); }
  static constexpr detail::typed t = detail::by_rule<L, W>(proto(), W::dt);
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
};

template <class Y, class X, class U>
struct jvp : node_base<Y, X, U> {
  static constexpr node proto() { return detail::make_node(op::jvp, dtype::f32, dims{}); }
  static constexpr detail::typed t = detail::by_rule<Y, X, U>(proto(), Y::dt);
  static constexpr dtype dt = t.dt;
  static constexpr dims shape = t.shape;
  static constexpr node make() { return detail::with_type(proto(), t); }
};

/// The incoming gradient inside a custom rule (a marker the autodiff pass replaces).
template <dtype D, class S>
struct cotangent : leaf_base<0, 0> {
  static constexpr dtype dt = D;
  static constexpr dims shape = S::value;
  static constexpr node make() { return detail::make_node(op::cotangent, dt, shape); }
};

template <class Y, class X, class R, class G>
struct custom : node_base<Y, X, R, G> {
  static constexpr dtype dt = Y::dt;
  static constexpr dims shape = Y::shape;
  static constexpr node make() { return detail::make_node(op::custom, dt, shape); }
};

/// E under a sharing key: every use of a share with the same key is traced once (op::share is
/// not a node). grad() shares a loss that holds bound tensors or C++ scalars, which tracing
/// would otherwise emit again at every use (it can merge only pure subtrees by structure).
template <std::uint64_t Key, class E>
struct shared : node_base<E> {
  static constexpr dtype dt = E::dt;
  static constexpr dims shape = E::shape;
  static constexpr node make() {
    node n = detail::make_node(op::share, dt, shape);
    n.value = std::bit_cast<double>(Key);
    return n;
  }
};

/// The root of kiln::outputs(...) as it is registered (build_root makes it an ex::root): not an
/// expression.
template <class... K>
struct tuple : outputs_base {
  using kids = std::tuple<K...>;
  static constexpr std::size_t tensor_leaves = (K::tensor_leaves + ... + 0);
  static constexpr std::size_t scalar_leaves = (K::scalar_leaves + ... + 0);
  static constexpr std::size_t size = sizeof...(K);
  static constexpr node make() { return detail::make_node(op::tuple, dtype::f32, dims{}); }
};

}  // namespace ex

namespace detail {
template <class E>
constexpr bool is_placeholder_expr() {
  if constexpr (requires { E::make(); }) return E::make().o == op::input || E::make().o == op::param;
  else return false;
}
template <class E>
constexpr op op_of() {
  if constexpr (requires { E::make(); }) return E::make().o;
  else return op::constant;
}
/// Whether W can be differentiated against (a floating-point placeholder).
template <class W>
constexpr bool wrt_ok() {
  return is_placeholder_expr<W>() && is_floating(W::dt);
}
/// Reports why W cannot be differentiated against (one error for each mistake); returns
/// wrt_ok<W>(). Callers take the verdict from wrt_ok, a constant even where this fails.
template <class W>
constexpr void check_wrt() {
  constexpr bool placeholder = is_placeholder_expr<W>();
  (void)error::grad_is_taken_with_respect_to_a_placeholder<op_of<W>(), placeholder>::value;
  (void)error::integer_inputs_are_not_differentiable<W::dt, !placeholder || is_floating(W::dt)>::value;
}
}  // namespace detail

namespace detail {
/// The sharing key of expression type E: its structure (the record's hash; bit 62 cleared, so
/// that the key's bits are a finite double in the node).
constexpr std::uint64_t share_key(const record& r) {
  return mix(r.hash, 0x5348415245ull) & ~(std::uint64_t{1} << 62);
}
template <class E>
constexpr std::uint64_t share_key_of() {
  return share_key(record_ref<E>());
}
/// e, shared by its structure when it holds bound tensors or C++ scalars (and is not a share).
template <class E>
constexpr auto shared_if_impure(const E& e) {
  constexpr const record& r = record_ref<E>();
  if constexpr (r.pure || r.n.o == op::share) return e;
  else return ex::build<ex::shared<share_key_of<E>(), E>>(e);
}
/// Whether the records under `top` hold a share of this key, whose subtree has `size` tree
/// nodes (impure records only: a share wraps an impure subtree; each record visited once, by
/// hash; subtrees too small to hold it are skipped, or the outputs of a training step, each
/// holding the whole loss, would be walked once for every other output).
constexpr bool holds_share(const record& top, std::uint64_t key, index_t size) {
  cvec<const record*> stack{&top};
  cvec<std::uint64_t> seen;
  while (!stack.empty()) {
    const record* r = stack.back();
    stack.pop_back();
    if (r->pure || r->tree_nodes <= size) continue;
    if (r->n.o == op::share && std::bit_cast<std::uint64_t>(r->n.value) == key) return true;
    bool again = false;
    for (std::uint64_t h : seen) again = again || h == r->hash;
    if (again) continue;
    seen.push_back(r->hash);
    for (int k = 0; k < r->kids; ++k) stack.push_back(r->kid[k]);
  }
  return false;
}

/// Whether output I of the outputs registered under hash H (their ex::tuple, unshared) is to be
/// shared: an impure output (one holding bound tensors or C++ scalars) that some output's
/// gradient holds a share of, so it is computed once (the loss of outputs(loss, grad(loss,
/// ...))). Keyed by the hash, not the outputs' types, so that the decision for each output
/// is one short-named constant (and one constant evaluation each, within its step limit).
template <std::uint64_t H, std::size_t I>
inline constexpr bool shared_output = [] {
  const record& all = rec(reg::key<H>{});
  const record& r = *all.kid[I];
  if (r.pure || r.n.o == op::share) return false;
  const std::uint64_t key = share_key(r);
  for (int j = 0; j < all.kids; ++j)
    if (holds_share(*all.kid[j], key, r.tree_nodes)) return true;
  return false;
}();
template <bool Shared, class X>
constexpr auto output_as(const X& x) {
  if constexpr (Shared) return shared_if_impure(x);
  else return x;
}
}  // namespace detail

/// The placeholders to differentiate against: grad(loss, wrt(w1, b1, w2)).
template <class... W>
struct wrt_list {};
template <expression... W>
constexpr wrt_list<W...> wrt(const W&...) {
  return {};
}

/// d loss / d w for a rank-0 loss and a floating-point placeholder w.
template <tensor_operand L, expression W>
constexpr auto grad(const L& loss, const W& w) {
  using E = decltype(as_expr(loss));
  constexpr bool scalar = E::shape.poisoned() || E::shape.rank == 0;
  (void)error::grad_needs_a_scalar_loss<as_shape<E::shape>, scalar>::value;
  detail::check_wrt<W>();
  constexpr bool ok = detail::wrt_ok<W>();
  if constexpr (!(scalar && ok)) {
    return ex::invalid<W::dt>{};
  } else {
    // a loss with bound tensors or C++ scalars is shared: grad nodes of the same loss are then
    // one loss and one backward sweep
    const auto l = detail::shared_if_impure(as_expr(loss));
    return ex::build<ex::grad<decltype(l), W>>(l, w);
  }
}

/// The gradients of a rank-0 loss with respect to each placeholder, as a std::tuple (in the
/// order given): `auto [gw, gb] = grad(loss, wrt(w, b));`.
template <tensor_operand L, class... W>
constexpr auto grad(const L& loss, wrt_list<W...>) {
  return std::tuple{grad(loss, W{})...};
}

/// A direction for forward mode: input x moves along u (u has x's shape; it is cast to x's
/// dtype).
template <class X, class U>
struct tangent_t {
  U u;
};
template <expression X, tensor_operand U>
constexpr auto tangent(const X&, const U& u) {
  using EU = decltype(as_expr(u));
  constexpr bool ok = X::shape.poisoned() || EU::shape.poisoned() || X::shape == EU::shape;
  (void)error::tangent_shape_does_not_match<as_shape<X::shape>, as_shape<EU::shape>, ok>::value;
  auto c = to_dtype<X::dt>(as_expr(u));
  return tangent_t<X, decltype(c)>{c};
}

/// Forward mode: the directional derivative of y (any shape) when each tangent's input moves
/// along its direction, summed over the tangents (a Jacobian-vector product).
template <tensor_operand Y, class X, class U, class... More>
constexpr auto jvp(const Y& y, const tangent_t<X, U>& t, const More&... more) {
  using E = decltype(as_expr(y));
  detail::check_wrt<X>();
  constexpr bool ok = detail::wrt_ok<X>();
  if constexpr (!ok) {
    return ex::invalid<E::dt>{};
  } else {
    auto d = ex::build<ex::jvp<E, X, U>>(as_expr(y), X{}, t.u);
    if constexpr (sizeof...(More) == 0) return d;
    else return d + jvp(y, more...);
  }
}

/// x, through which no derivative flows (torch.Tensor.detach, jax.lax.stop_gradient).
template <tensor_operand X>
constexpr auto detach(const X& x) {
  using E = decltype(as_expr(x));
  return ex::build<ex::unary<op::detach, E>>(as_expr(x));
}

/// y, with a gradient rule of your own with respect to x: the gradient that reaches x is
/// rule(g), where g is the gradient arriving at y (shaped like y; the result is summed back to
/// x's shape where it broadcasts). Nothing is differentiated through y itself. Forward mode
/// (jvp) differentiates y as written. Like every kiln expression, the result is a tree: used
/// twice, it is two nodes when it holds a bound tensor or a C++ scalar, and a rule that is not
/// linear in g (clipping) then sees each use's gradient separately. Examples:
///   custom_vjp(round_like(x), x, [](auto g) { return g; })                 // straight-through
///   custom_vjp(x, x, [](auto g) { return min(max(g, -1.0f), 1.0f); })      // clip the gradient
template <tensor_operand Y, expression X, class Rule>
constexpr auto custom_vjp(const Y& y, const X& x, Rule rule) {
  using EY = decltype(as_expr(y));
  detail::check_wrt<X>();
  constexpr bool ok = detail::wrt_ok<X>();
  using G = ex::cotangent<EY::dt, as_shape<EY::shape>>;
  (void)record_of<G>::value;
  auto r = as_expr(rule(G{}));
  using R = decltype(r);
  constexpr bool shape_ok = R::shape.poisoned() || X::shape.poisoned() || broadcastable_to(X::shape, R::shape);
  (void)error::custom_gradient_shape_does_not_match<as_shape<X::shape>, as_shape<R::shape>, shape_ok>::value;
  if constexpr (!(ok && shape_ok)) {
    return ex::invalid<EY::dt>{};
  } else {
    auto rc = to_dtype<X::dt>(r);
    return ex::build<ex::custom<EY, X, decltype(rc), G>>(as_expr(y), x, rc, G{});
  }
}

/// e as one value at every use: a subexpression holding C++ scalars or bound tensors is
/// otherwise traced, computed and stored again where it is used (tracing merges only pure
/// subtrees, since it cannot know that two scalars will be equal), e.g. the scores of a
/// hand-written softmax, `auto s = share(matmul(q, transpose(k)) * scale);`. Uses are merged by
/// structure: binding checks that they hold the same scalars and tensors and throws otherwise
/// (two structurally equal shares with different scalars: bind the scalar as a kiln::input).
template <tensor_operand E>
constexpr auto share(const E& e) {
  return detail::shared_if_impure(as_expr(e));
}

/// Several expressions traced into one graph and compiled into one plan, with one output each
/// (in order): outputs(loss, grads...) is one training step's value and gradients.
template <tensor_operand... E>
constexpr auto outputs(const E&... e) {
  using S = std::index_sequence_for<E...>;
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    constexpr std::uint64_t h = definer_of<ex::tuple<decltype(as_expr(e))...>>::hash;
    using T = ex::tuple<decltype(detail::output_as<detail::shared_output<h, I>>(as_expr(e)))...>;
    return ex::build_root<T>(detail::output_as<detail::shared_output<h, I>>(as_expr(e))...);
  }(S{});
}
/// outputs(loss, std::tuple{grads...}): the tuple's members become outputs after loss.
template <tensor_operand L, class... G>
constexpr auto outputs(const L& loss, const std::tuple<G...>& grads) {
  return std::apply([&](const auto&... g) { return outputs(loss, g...); }, grads);
}

}  // namespace kiln
