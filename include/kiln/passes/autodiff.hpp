// kiln/passes/autodiff.hpp: kiln's AOTAutograd. Expands the differentiation nodes of a
// primitive graph (grad, jvp, detach) into primitives, so that the forward and the backward
// computation are one graph that the later passes simplify, fuse and plan together.
//
//   grad(loss, w)   reverse mode: one backward sweep from a rank-0 loss, shared by every
//                   grad node of the same loss, seeded with 1; adjoints of broadcast operands
//                   are summed back to the operand's shape.
//   jvp(y, x, u)    forward mode: the tangent of y when x moves along u.
//   detach(x)       x, through which no derivative flows.
//   custom(y, x, r, g)  y, whose reverse-mode derivative with respect to x is the rule r with
//                   the incoming gradient in place of the marker g (forward mode
//                   differentiates y as written).
//
// The rules are one table (below): the elementwise derivative of each unary primitive, the two
// partial derivatives of each binary primitive, and the structural rules of where, reductions,
// matmul and the shape ops, each written in primitives. Reverse and forward mode share the
// elementwise factors. The emitted nodes are ordinary primitives, so they are differentiable in
// turn: gradients of gradients (Hessian-vector products) need nothing more.
//
// Integer and bool values carry no derivative, and neither do comparisons, iota, numel and rand.
// gather, scatter_add, unfold and fold are linear in their data operand: each one's adjoint is
// its partner (gather <-> scatter_add, unfold <-> fold).
// Conventions at kinks: abs'(0) = 0; max/min of two tensors split a tie evenly (torch.maximum);
// max/min against a constant or a C++ scalar (relu's 0, a clamp bound) passes the gradient only
// where strictly greater (smaller): relu'(0) = 0, as in PyTorch; amax/amin share the gradient
// evenly among the tied maxima (torch.amax). None depends on which inputs are differentiated.
#pragma once

#include <numbers>
#include <stdexcept>
#include <string>

#include "../core/cvec.hpp"
#include "../core/shape_rules.hpp"
#include "../graph/graph.hpp"
#include "builder.hpp"
#include "decompose.hpp"

namespace kiln::passes {

/// Whether a graph has nodes the autodiff pass expands (grad, jvp, detach).
template <class G>
constexpr bool has_autodiff(const G& g) {
  for (const node& n : g.nodes)
    if (kind_of(n.o) == op_kind::autodiff) return true;
  return false;
}

namespace detail {

/// A differentiation rule met something it cannot express. In constant evaluation, reaching
/// this call fails the evaluation and the compiler points here, with the reason in the note.
inline void autodiff_unsupported(const char* what) { throw std::logic_error(std::string("kiln: autodiff: ") + what); }

struct differ {
  builder& b;

  // Nodes are copied out of the graph before emitting: emitting may move the node array.
  constexpr node at(int i) const { return b.at(i); }
  constexpr int c(double v, dtype dt) { return b.constant(v, dt); }

  static constexpr bool carries_derivative(const node& n) {
    return is_floating(n.dt) && !is_comparison(n.o) && n.o != op::iota && n.o != op::numel && n.o != op::detach && n.o != op::rand &&
           n.o != op::constant && n.o != op::scalar && n.o != op::bound;
  }

  /// Whether node i is a constant or a C++ scalar (through views and casts): the other side of
  /// relu's max(x, 0) or a clamp.
  constexpr bool is_constant(int i) const {
    const op o = source_of(i).o;
    return o == op::constant || o == op::scalar;
  }

  /// Whether node i is a constant (through views and casts), and its value.
  constexpr bool constant_value(int i, double& v) const {
    const node x = source_of(i);
    v = x.value;
    return x.o == op::constant;
  }
  /// Node i, or what it reshapes, broadcasts or casts (repeatedly).
  constexpr node source_of(int i) const {
    for (;;) {
      const node x = at(i);
      if (x.o != op::reshape && x.o != op::broadcast && x.o != op::cast) return x;
      i = x.in[0];
    }
  }

  static constexpr bool is_static(const dims& s) {
    for (int i = 0; i < s.rank; ++i)
      if (s.e[i] == dyn) return false;
    return true;
  }

  /// Zeros shaped like `like`, except `extent` along `axis` (axis < 0: exactly like's shape).
  constexpr int zeros(int like, int axis = -1, index_t extent = 0) {
    const node x = at(like);
    dims s = x.shape;
    if (axis >= 0) s.e[axis] = extent;
    const int zero = c(0, x.dt);
    if (s.rank == 0) return zero;
    if (is_static(s)) return b.broadcast_to(zero, s);
    // dyn extents exist only at run time: take them from `like` (a one-element slice of the
    // axis, so nothing is read in bulk), then broadcast along the axis
    int src = like;
    if (axis >= 0) src = b.slice(like, axis, 0, 1, 1);
    const int z = b.where(b.binary(op::eq, src, src), zero, zero);  // 0 even where like is NaN
    return b.broadcast_to(z, s);
  }

  /// Sums x down to shape `to`, undoing broadcasting (leading axes, then extent-1 axes).
  constexpr int reduce_to(int x, const dims& to) {
    const int lead = at(x).shape.rank - to.rank;
    if (lead > 0) x = b.reduce(op::sum, x, (1u << lead) - 1u, false);
    std::uint32_t mask = 0;
    const dims s = at(x).shape;
    for (int i = 0; i < to.rank; ++i)
      if (to.e[i] == 1 && s.e[i] != 1) mask |= 1u << i;
    if (mask) x = b.reduce(op::sum, x, mask, true);
    // static where `to` is dyn (or the reverse): a broadcast to the same extents relabels it
    if (!(at(x).shape == to)) x = b.broadcast_to(x, to);
    return x;
  }

  /// x broadcast to the shape of node `like` (where an operand was broadcast in the forward op,
  /// or a reduction is undone). A broadcast to a dyn target extent keeps the source's extent at
  /// run time, so where `like` has a dyn extent that x has as 1 (or lacks), the extent comes from
  /// like's value: x plus zeros shaped like `like` cut to one element along its static axes (a
  /// few elements read, whatever their values: eq(NaN, NaN) is false but both branches are 0).
  constexpr int expand_like(int x, int like) {
    const dims to = at(like).shape, s = at(x).shape;
    if (s == to) return x;
    const int lead = to.rank - s.rank;
    bool from_like = false;
    for (int a = 0; a < to.rank; ++a)
      if (to.e[a] == dyn && (a < lead || s.e[a - lead] != dyn)) from_like = true;
    if (!from_like) return b.broadcast_to(x, to);
    int src = like;
    for (int a = 0; a < to.rank; ++a)
      if (to.e[a] != dyn && to.e[a] > 1) src = b.slice(src, a, 0, 1, 1);
    const int zero = c(0, at(x).dt);
    const int same = b.binary(op::eq, src, src);
    const int zeros_of_like = b.where(same, zero, zero);
    const int y = b.add(x, zeros_of_like);
    return at(y).shape == to ? y : b.broadcast_to(y, to);
  }

  /// A reduction's output-shaped value v, reshaped to keep the reduced axes (extent 1).
  constexpr int keep(int v, const node& red) {
    if (red.keepdim) return v;
    const dims k = reduce_shape(at(red.in[0]).shape, red.axes, true).shape;
    int dyns = 0;
    for (int i = 0; i < k.rank; ++i) dyns += k.e[i] == dyn;
    if (dyns > 1) autodiff_unsupported("the derivative of a reduction without keepdim over a shape with two dyn extents");
    return b.reshape(v, k);
  }

  // ---- the table --------------------------------------------------------------------------

  /// Special factors, so that multiplying by them emits nothing.
  static constexpr int one = -2, minus_one = -3;

  /// dy/dx of a unary primitive y = f(x), elementwise, as a node (or one/minus_one).
  constexpr int unary_factor(int i) {
    const node y = at(i);
    const int x = y.in[0];
    const dtype t = y.dt;
    switch (y.o) {
      case op::neg: return minus_one;
      case op::abs: {  // sign(x), 0 at 0 (one emitting call per statement: see decompose.hpp)
        const int pos = b.binary(op::gt, x, c(0, t));
        const int p1 = c(1, t);
        const int neg = b.binary(op::lt, x, c(0, t));
        const int m1 = c(-1, t);
        return b.where(pos, p1, b.where(neg, m1, c(0, t)));
      }
      case op::exp: return i;
      case op::log: return b.unary(op::reciprocal, x);
      case op::sqrt: return b.div(c(0.5, t), i);
      case op::rsqrt: {  // -x^(-3/2) / 2
        const int k = c(-0.5, t);
        return b.mul(k, b.div(i, x));
      }
      case op::reciprocal: return b.unary(op::neg, b.mul(i, i));
      case op::tanh: {
        const int one_ = c(1, t);
        return b.sub(one_, b.mul(i, i));
      }
      case op::sin: return b.unary(op::cos, x);
      case op::cos: return b.unary(op::neg, b.unary(op::sin, x));
      case op::erf: {
        const int k = c(2 * std::numbers::inv_sqrtpi, t);
        return b.mul(k, b.unary(op::exp, b.unary(op::neg, b.mul(x, x))));
      }
      case op::floor:
      case op::ceil:
      case op::round:
      case op::trunc: return c(0, t);  // piecewise constant: zero, as PyTorch's
      case op::atan: {  // 1 / (1 + x^2)
        const int one_ = c(1, t);
        return b.unary(op::reciprocal, b.add(one_, b.mul(x, x)));
      }
      case op::asin:
      case op::acos: {  // +-(1 - x^2)^(-1/2), as PyTorch's (-x x + 1).rsqrt()
        const int one_ = c(1, t);
        const int r = b.unary(op::rsqrt, b.sub(one_, b.mul(x, x)));
        return y.o == op::asin ? r : b.unary(op::neg, r);
      }
      case op::cast: return one;  // handled by its own rule; the factor is 1
      default: autodiff_unsupported("a unary op without a derivative rule"); return one;
    }
  }

  /// dy/da and dy/db of a binary primitive y = f(a, b); `active` says which operands carry a
  /// derivative (a factor is only built for those).
  constexpr void binary_factors(int i, const bool* active, int* f) {
    const node y = at(i);
    const int a = y.in[0], bb = y.in[1];
    const dtype t = y.dt;
    f[0] = f[1] = -1;
    auto as_float = [&](int mask) { return b.cast(mask, t); };
    switch (y.o) {
      case op::add: f[0] = one; f[1] = one; return;
      case op::sub: f[0] = one; f[1] = minus_one; return;
      case op::mul: f[0] = bb; f[1] = a; return;
      case op::div:
        if (active[0]) f[0] = b.unary(op::reciprocal, bb);
        if (active[1]) f[1] = b.unary(op::neg, b.div(i, bb));  // -a / b^2 = -y / b
        return;
      case op::max:
      case op::min: {
        const op wins = y.o == op::max ? op::gt : op::lt, loses = y.o == op::max ? op::lt : op::gt;
        if (is_constant(bb)) {  // relu, clamp: strictly wins; read from y, which is kept anyway
          f[0] = as_float(b.binary(wins, i, bb));
        } else if (is_constant(a)) {
          f[1] = as_float(b.binary(wins, i, a));
        } else {  // ties split evenly, whichever operands the caller differentiates
          const int tie = as_float(b.binary(op::eq, a, bb));
          const int half_tie = b.mul(tie, c(0.5, t));
          if (active[0]) f[0] = b.add(as_float(b.binary(wins, a, bb)), half_tie);
          if (active[1]) f[1] = b.add(as_float(b.binary(loses, a, bb)), half_tie);
        }
        return;
      }
      case op::pow:  // d/da = b a^(b-1), 0 where b = 0; d/db = y log a, 0 where a = 0 (as PyTorch)
        if (active[0]) {
          double e = 0;
          const int da = b.mul(bb, b.binary(op::pow, a, b.sub(bb, c(1, t))));
          // (0 a^-1 is NaN at a = 0; a constant exponent other than 0 needs no select)
          if (constant_value(bb, e) && e != 0) f[0] = da;
          else {
            const int b_zero = b.binary(op::eq, bb, c(0, t));
            f[0] = b.where(b_zero, c(0, t), da);
          }
        }
        if (active[1]) {
          const int a_zero = b.binary(op::eq, a, c(0, t));
          const int zero = c(0, t);
          f[1] = b.where(a_zero, zero, b.mul(i, b.unary(op::log, a)));
        }
        return;
      case op::fmod:  // d/da = 1; d/db = -trunc(a / b), as PyTorch's
        f[0] = one;
        if (active[1]) f[1] = b.unary(op::neg, b.unary(op::trunc, b.div(a, bb)));
        return;
      case op::atan2: {  // d/da = b / (a^2 + b^2); d/db = -a / (a^2 + b^2)
        const int aa = b.mul(a, a);
        const int r = b.unary(op::reciprocal, b.add(aa, b.mul(bb, bb)));
        if (active[0]) f[0] = b.mul(bb, r);
        if (active[1]) f[1] = b.mul(b.unary(op::neg, a), r);
        return;
      }
      default: autodiff_unsupported("a binary op without a derivative rule"); return;
    }
  }

  /// v * factor, where factor may be one or minus_one.
  constexpr int scale(int v, int factor) {
    if (factor == one) return v;
    if (factor == minus_one) return b.unary(op::neg, v);
    return b.mul(v, factor);
  }

  /// The adjoint of w in y = matmul(a, w): a^T g, summed over the batch axes w was broadcast
  /// over. A matrix w under a batch of a (a linear layer on [batch, t, c]) takes one product over
  /// all the batch's rows, reshape(a, [n, c])^T reshape(g, [n, f]), not a product per batch
  /// entry and a sum of them, which wrote [batch, c, f] to memory and ran each product over t
  /// rows only.
  constexpr int matmul_rhs_vjp(const node& y, int g) {
    const dims as = at(y.in[0]).shape, ws = at(y.in[1]).shape, gs = at(g).shape;
    const index_t c = as.rank > 0 ? as.e[as.rank - 1] : dyn, f = gs.rank > 0 ? gs.e[gs.rank - 1] : dyn;
    if (ws.rank == 2 && as.rank > 2 && gs.rank == as.rank && c != dyn && f != dyn) {
      index_t n = 1;
      for (int a = 0; a + 1 < as.rank; ++a) n = as.e[a] == dyn || n == dyn ? dyn : n * as.e[a];
      const int a2 = b.reshape(y.in[0], dims{n, c}), g2 = b.reshape(g, dims{n, f});
      return reduce_to(b.matmul(b.transpose(a2), g2), ws);
    }
    return reduce_to(b.matmul(b.transpose(y.in[0]), g), ws);
  }

  /// Reverse mode: the contribution of node i's adjoint g to each input's adjoint (-1: none),
  /// already summed to the input's shape.
  constexpr void vjp(int i, int g, const bool* active, int* out) {
    const node y = at(i);
    for (int j = 0; j < max_inputs; ++j) out[j] = -1;
    const auto in_shape = [&](int j) { return at(y.in[j]).shape; };
    switch (kind_of(y.o)) {
      case op_kind::unary: out[0] = scale(g, unary_factor(i)); return;
      case op_kind::cast: out[0] = b.cast(g, at(y.in[0]).dt); return;
      case op_kind::binary: {
        int f[2];
        binary_factors(i, active, f);
        for (int j = 0; j < 2; ++j)
          if (active[j]) out[j] = reduce_to(scale(g, f[j]), in_shape(j));
        return;
      }
      case op_kind::ternary: {
        const int zero = c(0, y.dt);
        if (active[1]) out[1] = reduce_to(b.where(y.in[0], g, zero), in_shape(1));
        if (active[2]) out[2] = reduce_to(b.where(y.in[0], zero, g), in_shape(2));
        return;
      }
      case op_kind::reduce: {
        const int gk = keep(g, y);
        if (y.o == op::sum) {
          out[0] = expand_like(gk, y.in[0]);
        } else {  // amax, amin: shared evenly among the elements equal to the result
          const int mask = b.binary(op::eq, y.in[0], keep(i, y));
          const int count = b.reduce(op::sum, b.cast(mask, y.dt), y.axes, true);
          const int share = b.div(gk, count);
          out[0] = b.where(mask, share, c(0, y.dt));
        }
        return;
      }
      case op_kind::matmul:
        if (active[0]) out[0] = reduce_to(b.matmul(g, b.transpose(y.in[1])), in_shape(0));
        if (active[1]) out[1] = matmul_rhs_vjp(y, g);
        return;
      case op_kind::shape: shape_vjp(y, g, active, out); return;
      case op_kind::movement:  // each linear in its data operand: the adjoint is the other op
        switch (y.o) {
          case op::gather: out[0] = b.scatter_add(y.in[1], g, y.in[0]); return;
          case op::scatter_add: out[1] = b.gather(g, y.in[0]); return;
          case op::unfold: out[0] = b.fold(g, window_of(y), in_shape(0).e[2], in_shape(0).e[3]); return;
          case op::fold: out[0] = b.unfold(g, window_of(y)); return;
          case op::cumsum: out[0] = b.cumsum(g, y.axis, y.value == 0); return;  // sums from the other end
          case op::cumprod: out[0] = cumprod_vjp(i, g); return;
          case op::attention: attention_vjp(i, g, active, out); return;
          case op::attention_grad:
            autodiff_unsupported(
                "second derivatives through fused attention (scaled_dot_product_attention in f32/f64 with static "
                "heads, lengths and head sizes), as with PyTorch's flash kernel");
            return;
          default: return;
        }
      case op_kind::random: return;  // no derivative
      case op_kind::autodiff:
        if (y.o == op::custom && active[1]) out[1] = reduce_to(substitute(y.in[2], y.in[3], g), in_shape(1));
        return;
      default: autodiff_unsupported("an op without a derivative rule"); return;
    }
  }

  // ---- fused attention (graph/ops.hpp): y = attention(q, k, v, mask) is [o | lse] ------------

  /// The probabilities exp(s - lse) [..., h, tq, tk] of attention node i, recomputed from its
  /// inputs and its saved logsumexp (the mask's derivative and forward mode only: these hold
  /// the score matrix, which the fused kernels never write).
  constexpr int attention_probabilities(int i) {
    const node y = at(i);
    const int r = y.shape.rank;
    const index_t dv = y.shape.e[r - 1] - 1;
    decomposer d{b};
    const int s = d.attention_scores(y.in[0], y.in[1], y.in[3], attention_causal(y), attention_scale(y));
    const int lse = b.slice(i, r - 1, dv, dv + 1, 1);
    return b.unary(op::exp, b.sub(s, lse));
  }

  /// cumprod's derivatives with zeros in x (PyTorch's rule): where no zero comes before or at
  /// position i, dy_j/dx_i = y_j / x_i; at the first zero k, it is the product of the other
  /// factors, a cumprod of x with x_k taken as 1; after it, 0 (x_k is a factor).
  struct scan_zeros {
    int before, first, after, y_skip;
  };
  constexpr scan_zeros cumprod_zeros(int i) {
    const node y = at(i);
    const int x = y.in[0];
    const int zeros = b.cumsum(b.cast(b.binary(op::eq, x, c(0, y.dt)), dtype::i64), y.axis, false);
    const int before = b.binary(op::eq, zeros, c(0, dtype::i64));
    const int first = b.binary(op::min, b.binary(op::eq, x, c(0, y.dt)), b.binary(op::eq, zeros, c(1, dtype::i64)));
    const int after = b.binary(op::gt, zeros, c(0, dtype::i64));
    return {before, first, after, b.cumprod(b.where(first, c(1, y.dt), x), y.axis)};
  }
  /// Reverse mode: sum_{j >= i} g_j y_j / x_i before the first zero, sum_{j >= k} g_j y_skip_j at it.
  constexpr int cumprod_vjp(int i, int g) {
    const node y = at(i);
    const scan_zeros z = cumprod_zeros(i);
    const int zero = c(0, y.dt);
    const int safe_x = b.where(z.before, y.in[0], c(1, y.dt));
    const int early = b.where(z.before, b.div(b.cumsum(b.mul(g, i), y.axis, true), safe_x), zero);
    return b.add(early, b.where(z.first, b.cumsum(b.mul(g, z.y_skip), y.axis, true), zero));
  }
  /// Forward mode: y_j sum_{i <= j} t_i / x_i before the first zero, t_k y_skip_j from it on.
  constexpr int cumprod_jvp(int i, int t) {
    const node y = at(i);
    const scan_zeros z = cumprod_zeros(i);
    const int zero = c(0, y.dt);
    const int safe_x = b.where(z.before, y.in[0], c(1, y.dt));
    const int early = b.mul(i, b.cumsum(b.where(z.before, b.div(t, safe_x), zero), y.axis, false));
    const int t_first = b.reduce(op::sum, b.where(z.first, t, zero), std::uint32_t{1} << y.axis, true);
    return b.add(early, b.where(z.after, b.mul(t_first, z.y_skip), zero));
  }

  /// Reverse mode: q, k and v's adjoints from the fused backward kernel (FlashAttention-2's: it
  /// recomputes the scores tile by tile), which reads q, k, v, the mask, y and g in place; a
  /// float mask's adjoint is dS = P (dP - D), dP = g_o v^T, D = rowsum(g_o o) - g_lse, built
  /// from primitives.
  constexpr void attention_vjp(int i, int g, const bool* active, int* out) {
    const node y = at(i);
    const dims qs = at(y.in[0]).shape, ks = at(y.in[1]).shape, vs = at(y.in[2]).shape;
    const int r = qs.rank;
    const attention_geometry a(qs, ks, vs);
    const index_t d = a.d, dv = a.dv, q_rows = a.h * a.tq;
    if (active[0] || active[1] || active[2]) {
      // the usual cotangent is the value's alone, padded with the logsumexp's zero (slice_vjp):
      // the kernel takes it unpadded
      int go = g;
      if (const node gn = at(g); gn.o == op::concat && gn.axis == r - 1 && at(gn.in[0]).shape.e[r - 1] == dv) {
        const int z = constant_under_shapes(b.g.nodes, gn.in[1]);
        if (z >= 0 && at(z).value == 0) go = gn.in[0];
      }
      const int gr = b.attention_grad(y.in[0], y.in[1], y.in[2], y.in[3], i, go, attention_causal(y), attention_scale(y));
      const int rows = at(gr).shape.rank - 2, cols = rows + 1;
      if (active[0]) {
        const int dq_rows = b.slice(gr, rows, 0, q_rows, 1);
        out[0] = b.reshape(b.slice(dq_rows, cols, 0, d, 1), qs);
      }
      if (active[1] || active[2]) {
        const int kv_rows = b.slice(gr, rows, q_rows, q_rows + a.hk * a.tk, 1);
        if (active[1]) out[1] = b.reshape(b.slice(kv_rows, cols, 0, d, 1), ks);
        if (active[2]) out[2] = b.reshape(b.slice(kv_rows, cols, d, d + dv, 1), vs);
      }
    }
    if (active[3]) {
      const int p = attention_probabilities(i);
      const int go = b.slice(g, r - 1, 0, dv, 1);
      const int glse = b.slice(g, r - 1, dv, dv + 1, 1);
      const int o = b.slice(i, r - 1, 0, dv, 1);
      decomposer dec{b};
      const int dp = dec.grouped_matmul(go, y.in[2], true);
      const int rowsum = b.reduce(op::sum, b.mul(go, o), 1u << (r - 1), true);
      const int big_d = b.sub(rowsum, glse);  // FlashAttention's D
      const int ds = b.mul(p, b.sub(dp, big_d));
      out[3] = reduce_to(ds, at(y.in[3]).shape);
    }
  }

  /// Forward mode, from primitives: dS = scale (dq k^T + q dk^T) + dmask, dlse = rowsum(P dS),
  /// do = (P (dS - dlse)) v + P dv; the tangent is do ++ dlse.
  constexpr int attention_jvp(int i, const int* t) {
    const node y = at(i);
    const int r = y.shape.rank;
    decomposer d{b};
    int ds = -1;
    if (t[0] >= 0) ds = d.grouped_matmul(t[0], y.in[1], true);
    if (t[1] >= 0) {
      const int term = d.grouped_matmul(y.in[0], t[1], true);
      ds = ds < 0 ? term : b.add(ds, term);
    }
    if (ds >= 0 && attention_scale(y) != 1) ds = b.mul(ds, c(attention_scale(y), y.dt));
    if (t[3] >= 0) ds = ds < 0 ? t[3] : b.add(ds, t[3]);  // (broadcast by the products with P below)
    int dout = -1, dlse = -1;
    const int p = attention_probabilities(i);
    if (ds >= 0) {
      dlse = b.reduce(op::sum, b.mul(p, ds), 1u << (r - 1), true);
      const int dp = b.mul(p, b.sub(ds, dlse));
      dout = d.grouped_matmul(dp, y.in[2], false);
    }
    if (t[2] >= 0) {
      const int term = d.grouped_matmul(p, t[2], false);
      dout = dout < 0 ? term : b.add(dout, term);
    }
    if (dout < 0) return -1;
    if (dlse < 0) dlse = zeros(b.slice(i, r - 1, 0, 1, 1));
    return expand_like(b.concat(dout, dlse, r - 1), i);
  }

  constexpr void shape_vjp(const node& y, int g, const bool* active, int* out) {
    const dims in0 = at(y.in[0]).shape;
    switch (y.o) {
      case op::reshape: {
        int dyns = 0;
        for (int i = 0; i < in0.rank; ++i) dyns += in0.e[i] == dyn;
        if (dyns > 1) autodiff_unsupported("the derivative of a reshape from a shape with two dyn extents");
        out[0] = b.reshape(g, in0);
        return;
      }
      case op::permute: {
        axis_perm inv{};
        for (int k = 0; k < y.shape.rank; ++k) inv.set(y.perm[k], k);
        out[0] = b.permute(g, inv);
        return;
      }
      case op::broadcast: out[0] = reduce_to(g, in0); return;
      case op::slice: out[0] = slice_vjp(y, g); return;
      case op::concat: {
        const index_t na = in0.e[y.axis];
        if (na == dyn) autodiff_unsupported("the derivative of a concat whose first operand has a dyn extent on its axis");
        if (active[0]) out[0] = b.slice(g, y.axis, 0, na, 1);
        if (active[1]) out[1] = b.slice(g, y.axis, na, to_end, 1);
        return;
      }
      default: return;  // iota, numel: no derivative
    }
  }

  /// The adjoint of a slice's input: g scattered back into zeros.
  constexpr int slice_vjp(const node& y, int g) {
    const int axis = y.axis;
    const index_t n = at(y.in[0]).shape.e[axis];
    if (n == dyn) autodiff_unsupported("the derivative of a slice along a dyn axis");
    const slice_bounds r = resolve_slice(n, y.begin, y.end, y.step);
    const index_t count = at(g).shape.e[axis];
    if (count == 0) return zeros(y.in[0]);
    int body = g;
    index_t span = count;
    if (y.step > 1) {  // interleave step-1 zeros after each element: [.., count, 1, ..] ++ zeros
      const dims gs = at(g).shape;
      dims split{};
      split.rank = gs.rank + 1;
      for (int i = 0, k = 0; i < gs.rank; ++i) {
        split.e[k++] = gs.e[i];
        if (i == axis) split.e[k++] = 1;
      }
      int dyns = 0;
      for (int i = 0; i < gs.rank; ++i) dyns += gs.e[i] == dyn;
      if (dyns > 1) autodiff_unsupported("the derivative of a strided slice of a shape with two dyn extents");
      const int g1 = b.reshape(g, split);
      body = b.concat(g1, zeros(g1, axis + 1, y.step - 1), axis + 1);
      dims joined = gs;
      joined.e[axis] = count * y.step;
      body = b.reshape(body, joined);
      span = count * y.step;
      if (r.begin + span > n) {
        span = n - r.begin;
        body = b.slice(body, axis, 0, span, 1);
      }
    }
    if (r.begin > 0) body = b.concat(zeros(body, axis, r.begin), body, axis);
    if (n - r.begin - span > 0) body = b.concat(body, zeros(body, axis, n - r.begin - span), axis);
    return body;
  }

  /// Forward mode: the tangent of node i from its inputs' tangents t (-1: zero tangent).
  constexpr int jvp(int i, const int* t) {
    const node y = at(i);
    bool active[max_inputs]{};
    for (int j = 0, nj = y.nin(); j < nj; ++j) active[j] = t[j] >= 0;
    switch (kind_of(y.o)) {
      case op_kind::unary: return scale(t[0], unary_factor(i));
      case op_kind::cast: return b.cast(t[0], y.dt);
      case op_kind::binary: {
        int f[2];
        binary_factors(i, active, f);
        int sum = -1;
        for (int j = 0; j < 2; ++j) {
          if (!active[j]) continue;
          const int term = expand_like(scale(t[j], f[j]), i);
          sum = sum < 0 ? term : b.add(sum, term);
        }
        return sum;
      }
      case op_kind::ternary: {
        const int zero = c(0, y.dt);
        return expand_like(b.where(y.in[0], active[1] ? t[1] : zero, active[2] ? t[2] : zero), i);
      }
      case op_kind::reduce: {
        if (y.o == op::sum) return b.reduce(op::sum, t[0], y.axes, y.keepdim);
        const int mask = b.binary(op::eq, y.in[0], keep(i, y));
        const int picked = b.reduce(op::sum, b.where(mask, t[0], c(0, y.dt)), y.axes, y.keepdim);
        return b.div(picked, b.reduce(op::sum, b.cast(mask, y.dt), y.axes, y.keepdim));
      }
      case op_kind::matmul: {
        int sum = -1;
        if (active[0]) sum = b.matmul(t[0], y.in[1]);
        if (active[1]) {
          const int term = b.matmul(y.in[0], t[1]);
          sum = sum < 0 ? term : b.add(sum, term);
        }
        return expand_like(sum, i);
      }
      case op_kind::movement:  // linear in the data operand: the same op on its tangent
        switch (y.o) {
          case op::gather: return b.gather(t[0], y.in[1]);
          case op::scatter_add: return b.scatter_add(y.in[0], t[1], y.in[2]);
          case op::unfold: return b.unfold(t[0], window_of(y));  // padding is constant: tangent 0
          case op::fold: return b.fold(t[0], window_of(y), fold_height(y), fold_width(y));
          case op::cumsum: return b.cumsum(t[0], y.axis, y.value != 0);
          case op::cumprod: return cumprod_jvp(i, t[0]);
          case op::attention: return attention_jvp(i, t);
          case op::attention_grad:
            autodiff_unsupported("forward-mode derivatives of fused attention's backward (attention_grad)");
            return -1;
          default: return -1;
        }
      case op_kind::random: return -1;
      case op_kind::shape: {
        if (y.o == op::iota || y.o == op::numel) return -1;
        node n = y;  // the same view of the tangent
        for (int j = 0, nj = y.nin(); j < nj; ++j) n.in[j] = active[j] ? t[j] : zeros(y.in[j]);
        return b.emit(n);
      }
      case op_kind::autodiff:  // custom: forward mode differentiates its value as written
        if (y.o == op::custom) return t[0];
        return -1;
      default: autodiff_unsupported("an op without a derivative rule"); return -1;
    }
  }

  /// A copy of the part of value r that depends on `marker`, with `marker` replaced by v (a
  /// custom rule applied to an incoming gradient).
  constexpr int substitute(int r, int marker, int v) {
    if (r < marker) return r;
    cvec<int> m(static_cast<std::size_t>(r - marker) + 1, -1);
    m[0] = v;
    for (int k = marker + 1; k <= r; ++k) {
      node n = at(k);
      bool dep = false;
      for (int j = 0, nj = n.nin(); j < nj; ++j)
        if (n.in[j] >= marker && m[static_cast<std::size_t>(n.in[j] - marker)] >= 0) {
          n.in[j] = m[static_cast<std::size_t>(n.in[j] - marker)];
          dep = true;
        }
      if (dep) m[static_cast<std::size_t>(k - marker)] = b.emit(n);
    }
    const int out = m[static_cast<std::size_t>(r - marker)];
    return out >= 0 ? out : r;
  }

  // ---- the sweeps ---------------------------------------------------------------------------

  /// Which nodes up to `last` depend on one of `seeds` through ops that carry a derivative.
  constexpr cvec<char> depends(int last, const int* seeds, int count) {
    cvec<char> active(static_cast<std::size_t>(last) + 1, 0);
    for (int s = 0; s < count; ++s)
      if (seeds[s] <= last && is_floating(at(seeds[s]).dt)) active[static_cast<std::size_t>(seeds[s])] = 1;
    for (int i = 0; i <= last; ++i) {
      if (active[static_cast<std::size_t>(i)]) continue;
      const node x = at(i);
      if (!carries_derivative(x)) continue;
      if (x.o == op::custom) {  // its rule gives the derivative with respect to x only
        active[static_cast<std::size_t>(i)] = active[static_cast<std::size_t>(x.in[1])];
        continue;
      }
      for (int j = 0, nj = x.nin(); j < nj; ++j)  // inputs that give only a shape carry no derivative
        if (reads_input_values(x.o, j)) active[static_cast<std::size_t>(i)] |= active[static_cast<std::size_t>(x.in[j])];
    }
    return active;
  }

  /// Reverse mode: d loss / d target for each target, in one backward sweep.
  constexpr cvec<int> backward(int loss, const cvec<int>& targets) {
    const cvec<char> active = depends(loss, targets.data(), static_cast<int>(targets.size()));
    cvec<int> adj(static_cast<std::size_t>(loss) + 1, -1);
    if (active[static_cast<std::size_t>(loss)]) adj[static_cast<std::size_t>(loss)] = c(1, at(loss).dt);
    for (int i = loss; i >= 0; --i) {
      const int g = adj[static_cast<std::size_t>(i)];
      const node x = at(i);
      if (g < 0 || x.nin() == 0) continue;
      bool in_active[max_inputs]{};
      for (int j = 0, nj = x.nin(); j < nj; ++j) in_active[j] = active[static_cast<std::size_t>(x.in[j])] != 0;
      int contrib[max_inputs];
      vjp(i, g, in_active, contrib);
      for (int j = 0, nj = x.nin(); j < nj; ++j) {
        if (contrib[j] < 0 || !in_active[j]) continue;
        int& a = adj[static_cast<std::size_t>(x.in[j])];
        a = a < 0 ? contrib[j] : b.add(a, contrib[j]);
      }
    }
    cvec<int> out;
    for (int t : targets) out.push_back(t <= loss && adj[static_cast<std::size_t>(t)] >= 0 ? adj[static_cast<std::size_t>(t)] : zeros(t));
    return out;
  }

  /// Forward mode: the tangent of y when x moves along u.
  constexpr int forward(int y, int x, int u) {
    if (x > y || !is_floating(at(x).dt)) return zeros(y);
    const cvec<char> active = depends(y, &x, 1);
    cvec<int> tan(static_cast<std::size_t>(y) + 1, -1);
    tan[static_cast<std::size_t>(x)] = u;
    for (int i = x + 1; i <= y; ++i) {
      if (!active[static_cast<std::size_t>(i)]) continue;
      const node n = at(i);
      int t[max_inputs]{-1, -1, -1, -1, -1, -1};
      for (int j = 0, nj = n.nin(); j < nj; ++j) t[j] = tan[static_cast<std::size_t>(n.in[j])];
      tan[static_cast<std::size_t>(i)] = jvp(i, t);
    }
    const int r = tan[static_cast<std::size_t>(y)];
    return r >= 0 ? r : zeros(y);
  }
};

}  // namespace detail

/// The autodiff pass: the same graph with grad, jvp and detach nodes replaced by primitives.
/// Runs on a primitive graph (after decompose), before canonicalisation, fusion and planning.
constexpr graph differentiate(const graph& g) {
  builder b;
  b.g.leaves = g.leaves;
  b.g.nodes.reserve(g.nodes.size() * 3);
  detail::differ d{b};
  const std::size_t n = g.nodes.size();
  cvec<int> to(n, -1);
  for (std::size_t i = 0; i < n; ++i) {
    if (to[i] >= 0) continue;  // a grad node already expanded with its group
    node x = g.nodes[i];
    for (int j = 0, nj = x.nin(); j < nj; ++j) x.in[j] = to[static_cast<std::size_t>(x.in[j])];
    const std::size_t first = b.g.nodes.size();
    switch (x.o) {
      case op::detach:
      case op::custom: to[i] = b.emit(x); break;  // kept until every sweep has seen them
      case op::jvp: to[i] = d.forward(x.in[0], x.in[1], x.in[2]); break;
      case op::grad: {
        // every grad node of the same loss whose target exists by now: one backward sweep
        cvec<std::size_t> group;
        cvec<int> targets;
        for (std::size_t k = i; k < n; ++k) {
          const node& y = g.nodes[k];
          if (y.o != op::grad || y.in[0] != g.nodes[i].in[0] || to[k] >= 0) continue;
          const int t = to[static_cast<std::size_t>(y.in[1])];
          if (t < 0) continue;
          group.push_back(k);
          targets.push_back(t);
        }
        const cvec<int> grads = d.backward(x.in[0], targets);
        for (std::size_t k = 0; k < group.size(); ++k) to[group[k]] = grads[k];
        break;
      }
      default: to[i] = b.emit(x); break;
    }
    if (kind_of(x.o) == op_kind::autodiff)  // what a sweep emitted is the derivative's side
      for (std::size_t k = first; k < b.g.nodes.size(); ++k) b.g.nodes[k].phase = 1;
  }
  for (int o : g.outputs) b.g.outputs.push_back(to[static_cast<std::size_t>(o)]);
  // detach(x) and custom(y, ...) are x and y once no sweep is left to stop at them (a custom
  // rule's own nodes are then dead, and later passes drop them)
  graph r;
  r.leaves = b.g.leaves;
  r.nodes.reserve(b.g.nodes.size());
  cvec<int> keep(b.g.nodes.size(), -1);
  for (std::size_t i = 0, count = b.g.nodes.size(); i < count; ++i) {
    const node& y = b.g.nodes.data()[i];
    if (y.o == op::detach || y.o == op::custom) {
      keep[i] = keep[static_cast<std::size_t>(y.in[0])];
      continue;
    }
    // appended, then renumbered in place (a node copy allocates in constant evaluation)
    keep[i] = static_cast<int>(r.nodes.size());
    r.nodes.push_back(y);
    node& x = r.nodes.back();
    for (int j = 0, nj = x.nin(); j < nj; ++j) x.in[j] = keep[static_cast<std::size_t>(x.in[j])];
  }
  for (int o : b.g.outputs) r.outputs.push_back(keep[static_cast<std::size_t>(o)]);
  return r;
}

}  // namespace kiln::passes
