// kiln/passes/builder.hpp: emitting nodes into a graph value, each with the dtype and shape
// that graph.hpp's infer() gives it (the rule check_graph checks against, built on the shape
// rules capture uses, core/shape_rules.hpp). Passes build their result graphs with it.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "../core/shape_rules.hpp"
#include "../graph/graph.hpp"

namespace kiln::passes {

namespace detail {
/// Reached in constant evaluation when a rule emits a node its inputs do not allow: not
/// constexpr, so the compiler stops here, under the rule that emitted it.
inline void rule_emitted_an_invalid_node(const char* why) {
  throw std::logic_error(std::string("kiln: a pass emitted an invalid node: ") + why);
}
/// Whether permute node n swaps its last two axes and keeps the others.
constexpr bool swaps_last_two(const node& n) {
  const int r = n.shape.rank;
  if (r < 2) return false;
  for (int i = 0; i < r - 2; ++i)
    if (n.perm[i] != i) return false;
  return n.perm[r - 2] == r - 1 && n.perm[r - 1] == r - 2;
}
}  // namespace detail

struct builder {
  graph g;

  constexpr const node& at(int i) const { return g.nodes[static_cast<std::size_t>(i)]; }
  constexpr int emit(const node& n) { return g.add(n); }
  /// Emits n with the dtype and shape that infer() gives it from its inputs and attributes
  /// (graph/graph.hpp: the rule check_graph checks against).
  constexpr int emit_inferred(node n) {
    const inferred r = infer(n, [&](int j) -> const node& { return at(n.in[j]); });
    if (r.error) detail::rule_emitted_an_invalid_node(r.error);
    n.dt = r.dt;
    n.shape = r.shape;
    return emit(n);
  }

  static constexpr node make(op o, dtype dt, const dims& shape) {
    node n;
    n.o = o;
    n.dt = dt;
    n.shape = shape;
    return n;
  }
  static constexpr node with_inputs(node n, int a, int b = -1, int c = -1) {
    n.in[0] = a;
    n.in[1] = b;
    n.in[2] = c;
    n.in[3] = -1;
    return n;
  }
  /// A node of op o on inputs a, b, c, its dtype and shape still to be inferred.
  static constexpr node with_inputs(op o, int a, int b = -1, int c = -1) {
    node n;
    n.o = o;
    n.in[0] = a;
    n.in[1] = b;
    n.in[2] = c;
    return n;
  }

  constexpr int constant(double v, dtype dt) {
    node n = make(op::constant, dt, dims{});
    n.value = v;
    return emit(n);
  }
  constexpr int unary(op o, int x) { return emit_inferred(with_inputs(o, x)); }
  constexpr int binary(op o, int a, int b) { return emit_inferred(with_inputs(o, a, b)); }
  constexpr int add(int a, int b) { return binary(op::add, a, b); }
  constexpr int sub(int a, int b) { return binary(op::sub, a, b); }
  constexpr int mul(int a, int b) { return binary(op::mul, a, b); }
  constexpr int div(int a, int b) { return binary(op::div, a, b); }
  constexpr int where(int c, int a, int b) { return emit_inferred(with_inputs(op::where, c, a, b)); }
  /// `value` for amax and amin: 1 lets an axis of extent 0 give the identity (+-inf) instead of
  /// an error, where the result is read only over that same empty axis (softmax's maximum).
  constexpr int reduce(op o, int x, std::uint32_t axes, bool keepdim, double value = 0) {
    node n = with_inputs(o, x);
    n.axes = axes;
    n.keepdim = keepdim;
    n.value = value;
    return emit_inferred(n);
  }
  constexpr int matmul(int a, int b) { return emit_inferred(with_inputs(op::matmul, a, b)); }
  constexpr int reshape(int x, const dims& to) {
    node n = with_inputs(op::reshape, x);
    n.shape = to;  // the target (one dyn extent is resolved from the element count)
    return emit_inferred(n);
  }
  /// Swaps the last two axes.
  constexpr int transpose(int x) {
    const int r = at(x).shape.rank;
    if (r < 2 || r > max_rank) return x;  // (never asked for; keeps the permutation in bounds)
    axis_perm p;
    for (int i = 0; i < r; ++i) p.set(i, i);
    p.set(r - 2, r - 1);
    p.set(r - 1, r - 2);
    return permute(x, p);
  }
  /// Permutes x's axes: result axis i is x's axis p[i].
  constexpr int permute(int x, axis_perm p) {
    node n = with_inputs(op::permute, x);
    n.perm = p;
    return emit_inferred(n);
  }
  /// NumPy broadcast of x to `to` (a dyn extent of `to` keeps x's extent).
  constexpr int broadcast_to(int x, const dims& to) {
    if (at(x).shape == to) return x;
    node n = with_inputs(op::broadcast, x);
    n.shape = to;  // the target
    return emit_inferred(n);
  }
  /// [begin, end) by step along axis; begin and end already resolved (no negatives, no to_end).
  constexpr int slice(int x, int axis, index_t begin, index_t end, index_t step) {
    node n = with_inputs(op::slice, x);
    n.axis = axis;
    n.begin = begin;
    n.end = end;
    n.step = step;
    return emit_inferred(n);
  }
  constexpr int concat(int a, int b, int axis) {
    node n = with_inputs(op::concat, a, b);
    n.axis = axis;
    return emit_inferred(n);
  }
  constexpr int cast(int x, dtype dt) {
    if (at(x).dt == dt) return x;
    node n = with_inputs(op::cast, x);
    n.dt = dt;
    return emit_inferred(n);
  }
  /// 0, 1, ..., extent - 1 of x's axis (as dtype dt).
  constexpr int iota(int x, int axis, dtype dt) {
    node n = with_inputs(op::iota, x);
    n.axis = axis;
    n.dt = dt;
    return emit_inferred(n);
  }
  /// Rows of table named by index (gather), and its adjoint: src's rows added into zeros shaped
  /// like `like` (scatter_add).
  constexpr int gather(int table, int index) { return emit_inferred(with_inputs(op::gather, table, index)); }
  constexpr int scatter_add(int index, int src, int like) {
    return emit_inferred(with_inputs(op::scatter_add, index, src, like));
  }
  /// im2col of x [n, c, h, w] with window w (padding filled with pad), and its adjoint col2im
  /// back to [n, c, h, wd].
  constexpr int unfold(int x, const window2d& w, double pad = 0) {
    node n = with_inputs(op::unfold, x);
    set_window(n, w);
    n.value = pad;
    return emit_inferred(n);
  }
  constexpr int fold(int cols, const window2d& w, index_t h, index_t wd) {
    node n = with_inputs(op::fold, cols);
    set_window(n, w);
    set_fold_extents(n, h, wd);
    return emit_inferred(n);
  }
  /// Running sums of x along axis, from its end if reverse.
  constexpr int cumsum(int x, int axis, bool reverse) {
    node n = with_inputs(op::cumsum, x);
    n.axis = axis;
    n.value = reverse ? 1 : 0;
    return emit_inferred(n);
  }
  /// Running products of x along axis.
  constexpr int cumprod(int x, int axis) {
    node n = with_inputs(op::cumprod, x);
    n.axis = axis;
    return emit_inferred(n);
  }
  /// The indices that sort x along axis (descending if descending).
  constexpr int argsort(int x, int axis, bool descending) {
    node n = with_inputs(op::argsort, x);
    n.axis = axis;
    n.value = descending ? 1 : 0;
    return emit_inferred(n);
  }
  /// Fused attention (graph/ops.hpp): the value with each row's logsumexp appended, and the
  /// gradients of q, k and v from it and its cotangent g.
  constexpr int attention(int q, int k, int v, int mask, bool causal, double scale = 1) {
    node n = with_inputs(op::attention, q, k, v);
    n.in[3] = mask;
    n.axis = causal ? 1 : 0;
    n.value = scale;
    return emit_inferred(n);
  }
  constexpr int attention_grad(int q, int k, int v, int mask, int y, int g, bool causal, double scale = 1) {
    node n = with_inputs(op::attention_grad, q, k, v);
    n.in[3] = mask;
    n.in[4] = y;
    n.in[5] = g;
    n.axis = causal ? 1 : 0;
    n.value = scale;
    return emit_inferred(n);
  }
  /// The element count of x's axes in `axes`, as a rank-0 value of dtype dt.
  constexpr int numel(int x, std::uint32_t axes, dtype dt) {
    node n = with_inputs(op::numel, x);
    n.axes = axes;
    n.dt = dt;
    return emit_inferred(n);
  }
};

}  // namespace kiln::passes
