// kiln/passes/builder.hpp: emitting nodes into a graph value with their shapes and dtypes
// inferred by the same rules capture uses (core/shape_rules.hpp). Passes build their result
// graphs with it.
#pragma once

#include <cstdint>

#include "../core/shape_rules.hpp"
#include "../graph/graph.hpp"

namespace kiln::passes {

struct builder {
  graph g;

  constexpr const node& at(int i) const { return g.nodes[static_cast<std::size_t>(i)]; }
  constexpr int emit(const node& n) { return g.add(n); }

  static constexpr node make(op o, dtype dt, const dims& shape) {
    node n;
    n.o = o;
    n.dt = dt;
    n.shape = shape;
    return n;
  }
  constexpr node with_inputs(node n, int a, int b = -1, int c = -1) const {
    n.in[0] = a;
    n.in[1] = b;
    n.in[2] = c;
    n.in[3] = -1;
    return n;
  }

  constexpr int constant(double v, dtype dt) {
    node n = make(op::constant, dt, dims{});
    n.value = v;
    return emit(n);
  }
  constexpr int unary(op o, int x) { return emit(with_inputs(make(o, at(x).dt, at(x).shape), x)); }
  constexpr int binary(op o, int a, int b) {
    const dtype dt = is_comparison(o) ? dtype::boolean : at(a).dt;
    return emit(with_inputs(make(o, dt, broadcast(at(a).shape, at(b).shape).shape), a, b));
  }
  constexpr int add(int a, int b) { return binary(op::add, a, b); }
  constexpr int sub(int a, int b) { return binary(op::sub, a, b); }
  constexpr int mul(int a, int b) { return binary(op::mul, a, b); }
  constexpr int div(int a, int b) { return binary(op::div, a, b); }
  constexpr int where(int c, int a, int b) {
    const dims s = broadcast(broadcast(at(c).shape, at(a).shape).shape, at(b).shape).shape;
    return emit(with_inputs(make(op::where, at(a).dt, s), c, a, b));
  }
  constexpr int reduce(op o, int x, std::uint32_t axes, bool keepdim) {
    node n = with_inputs(make(o, at(x).dt, reduce_shape(at(x).shape, axes, keepdim).shape), x);
    n.axes = axes;
    n.keepdim = keepdim;
    return emit(n);
  }
  constexpr int matmul(int a, int b) {
    return emit(with_inputs(make(op::matmul, at(a).dt, matmul_shape(at(a).shape, at(b).shape).shape), a, b));
  }
  constexpr int reshape(int x, const dims& to) {
    return emit(with_inputs(make(op::reshape, at(x).dt, reshape_shape(at(x).shape, to).shape), x));
  }
  /// Swaps the last two axes.
  constexpr int transpose(int x) {
    const int r = at(x).shape.rank;
    if (r < 2 || r > max_rank) return x;  // (never asked for; keeps p[] in bounds for the compiler too)
    node n = make(op::permute, at(x).dt, dims{});
    std::int8_t p[max_rank]{};
    for (int i = 0; i < r; ++i) p[i] = static_cast<std::int8_t>(i);
    p[r - 2] = static_cast<std::int8_t>(r - 1);
    p[r - 1] = static_cast<std::int8_t>(r - 2);
    for (int i = 0; i < r; ++i) n.perm.set(i, p[i]);
    n.shape = permute_shape(at(x).shape, p, r).shape;
    return emit(with_inputs(n, x));
  }
  /// Permutes x's axes: result axis i is x's axis p[i].
  constexpr int permute(int x, axis_perm p) {
    const int r = at(x).shape.rank;
    std::int8_t q[max_rank]{};
    for (int i = 0; i < r; ++i) q[i] = static_cast<std::int8_t>(p[i]);
    node n = make(op::permute, at(x).dt, permute_shape(at(x).shape, q, r).shape);
    n.perm = p;
    return emit(with_inputs(n, x));
  }
  /// NumPy broadcast of x to `to` (a dyn extent of `to` keeps x's extent).
  constexpr int broadcast_to(int x, const dims& to) {
    if (at(x).shape == to) return x;
    return emit(with_inputs(make(op::broadcast, at(x).dt, to), x));
  }
  /// [begin, end) by step along axis; begin and end already resolved (no negatives, no to_end).
  constexpr int slice(int x, int axis, index_t begin, index_t end, index_t step) {
    node n = with_inputs(make(op::slice, at(x).dt, slice_shape(at(x).shape, axis, begin, end, step).shape), x);
    n.axis = axis;
    n.begin = begin;
    n.end = end;
    n.step = step;
    return emit(n);
  }
  constexpr int concat(int a, int b, int axis) {
    node n = with_inputs(make(op::concat, at(a).dt, concat_shape(at(a).shape, at(b).shape, axis).shape), a, b);
    n.axis = axis;
    return emit(n);
  }
  constexpr int cast(int x, dtype dt) {
    if (at(x).dt == dt) return x;
    return emit(with_inputs(make(op::cast, dt, at(x).shape), x));
  }
  /// 0, 1, ..., extent - 1 of x's axis (as dtype dt).
  constexpr int iota(int x, int axis, dtype dt) {
    node n = with_inputs(make(op::iota, dt, dims{at(x).shape.e[axis]}), x);
    n.axis = axis;
    return emit(n);
  }
  /// Rows of table named by index (gather), and its adjoint: src's rows added into zeros shaped
  /// like `like` (scatter_add).
  constexpr int gather(int table, int index) {
    return emit(with_inputs(make(op::gather, at(table).dt, gather_shape(at(table).shape, at(index).shape).shape), table, index));
  }
  constexpr int scatter_add(int index, int src, int like) {
    return emit(with_inputs(make(op::scatter_add, at(src).dt, at(like).shape), index, src, like));
  }
  /// im2col of x [n, c, h, w] with window w (padding filled with pad), and its adjoint col2im
  /// back to [n, c, h, wd].
  constexpr int unfold(int x, const window2d& w, double pad = 0) {
    node n = with_inputs(make(op::unfold, at(x).dt, unfold_shape(at(x).shape, w).shape), x);
    set_window(n, w);
    n.value = pad;
    return emit(n);
  }
  constexpr int fold(int cols, const window2d& w, index_t h, index_t wd) {
    node n = with_inputs(make(op::fold, at(cols).dt, fold_shape(at(cols).shape, w, h, wd).shape), cols);
    set_window(n, w);
    set_fold_extents(n, h, wd);
    return emit(n);
  }
  /// The element count of x's axes in `axes`, as a rank-0 value of dtype dt.
  constexpr int numel(int x, std::uint32_t axes, dtype dt) {
    node n = with_inputs(make(op::numel, dt, dims{}), x);
    n.axes = axes;
    return emit(n);
  }
};

}  // namespace kiln::passes
