// kiln/passes/decompose.hpp: kiln's PrimTorch. Every composite op (graph/ops.hpp) becomes
// primitives; decomposer::rule_for is the whole table, one rule per composite op. A rule may use other high-level ops
// (silu uses sigmoid, layer_norm uses mean): they are expanded in turn.
#pragma once

#include <limits>
#include <numbers>

#include "../core/cvec.hpp"
#include "../graph/graph.hpp"
#include "builder.hpp"

namespace kiln::passes {

namespace detail {

/// Bit mask of the trailing `k` axes of a rank-`r` shape.
constexpr std::uint32_t trailing_axes(int r, int k) {
  std::uint32_t m = 0;
  for (int i = r - k; i < r; ++i) m |= 1u << i;
  return m;
}

// A node-emitting call is never one of two arguments of a call that both emit nodes: C++ leaves
// the order of argument evaluation unspecified (g++ evaluates right to left at run time, left to
// right in constant evaluation), and the graph's node order must not depend on it.
struct decomposer {
  builder& b;

  constexpr int c(double v, dtype dt) { return b.constant(v, dt); }

  // ---- the table: one rule per high-level op ----------------------------------------------
  constexpr int relu(int x) { return b.binary(op::max, x, c(0, b.at(x).dt)); }
  // 1 / (1 + e^-x) for x >= 0, e^x / (1 + e^x) below, both from e = e^-|x| <= 1: no exp
  // overflows, so the gradient is finite everywhere (1 / (1 + e^-x) alone has 0 * inf = NaN
  // where e^-x overflows, x <= -89 in f32). -|x| is a select, not abs, so that x = 0 gets -1
  // as its derivative (abs's is 0 there).
  constexpr int sigmoid(int x) {
    const dtype t = b.at(x).dt;
    const int nonneg = b.binary(op::ge, x, c(0, t));
    const int neg_x = b.unary(op::neg, x);
    const int e = b.unary(op::exp, b.where(nonneg, neg_x, x));
    const int one = c(1, t);
    const int r = b.unary(op::reciprocal, b.add(one, e));
    const int er = b.mul(e, r);
    return b.where(nonneg, r, er);
  }
  constexpr int silu(int x) { return b.mul(x, sigmoid(x)); }
  constexpr int gelu(int x) {  // x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))
    const dtype t = b.at(x).dt;
    const int e = b.unary(op::erf, b.mul(x, c(std::numbers::sqrt2 / 2, t)));
    const int half_x = b.mul(c(0.5, t), x);
    return b.mul(half_x, b.add(c(1, t), e));
  }
  constexpr int gelu_tanh(int x) {  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    const dtype t = b.at(x).dt;
    const int x3 = b.mul(b.mul(x, x), x);
    const int k = c(0.7978845608028654, t);
    const int inner = b.mul(k, b.add(x, b.mul(c(0.044715, t), x3)));
    const int half_x = b.mul(c(0.5, t), x);
    const int one = c(1, t);
    return b.mul(half_x, b.add(one, b.unary(op::tanh, inner)));
  }
  // log(1 + e^x), as torch.nn.functional.softplus (x itself above the threshold 20). log1p(e)
  // in Goldberg's form log(u) e / (u - 1) with u = 1 + e (e itself where u rounds to 1), so that
  // results far below 1 keep their precision; exp of x clamped to 20 and the guarded denominator
  // keep the branches not taken finite, so the zero gradient they get stays zero (a select, not
  // min, so that x = 20 gets the whole gradient, as in PyTorch).
  constexpr int softplus(int x) {
    const dtype t = b.at(x).dt;
    const int one = c(1, t);
    const int limit = c(20, t);
    const int above = b.binary(op::gt, x, limit);
    const int e = b.unary(op::exp, b.where(above, limit, x));
    const int u = b.add(one, e);
    const int rounds_to_one = b.binary(op::eq, u, one);
    const int u_minus_one = b.sub(u, one);
    const int den = b.where(rounds_to_one, one, u_minus_one);
    const int ratio = b.div(e, den);
    const int goldberg = b.mul(b.unary(op::log, u), ratio);
    const int log1p = b.where(rounds_to_one, e, goldberg);
    return b.where(above, x, log1p);
  }
  constexpr int mean(int x, std::uint32_t axes, bool keep) {
    const int s = b.reduce(op::sum, x, axes, keep);
    return b.div(s, b.numel(x, axes, b.at(x).dt));
  }
  constexpr int var(int x, std::uint32_t axes, bool keep, double correction) {
    const int d = b.sub(x, mean(x, axes, true));
    const int ss = b.reduce(op::sum, b.mul(d, d), axes, keep);
    const dtype t = b.at(x).dt;
    const int n = b.numel(x, axes, t);
    return b.div(ss, b.sub(n, c(correction, t)));
  }
  // exp(x - max) * reciprocal(sum(exp(x - max))): one division per row, not per element (as ATen's
  // CPU softmax does; at most an ulp from the quotient, well inside f32 tolerances)
  constexpr int softmax(int x, int axis) {
    const std::uint32_t a = 1u << axis;
    // over an empty axis the result is empty, as in PyTorch: the maximum may be -inf there
    const int e = b.unary(op::exp, b.sub(x, b.reduce(op::amax, x, a, true, 1)));
    return b.mul(e, b.unary(op::reciprocal, b.reduce(op::sum, e, a, true)));
  }
  constexpr int log_softmax(int x, int axis) {  // (x - max) - log(sum(exp(x - max)))
    const std::uint32_t a = 1u << axis;
    const int z = b.sub(x, b.reduce(op::amax, x, a, true, 1));
    return b.sub(z, b.unary(op::log, b.reduce(op::sum, b.unary(op::exp, z), a, true)));
  }
  constexpr int layer_norm(int x, int gamma, int beta, int eps) {
    const std::uint32_t a = trailing_axes(b.at(x).shape.rank, b.at(gamma).shape.rank);
    const int d = b.sub(x, mean(x, a, true));
    const int v = mean(b.mul(d, d), a, true);
    return b.add(b.mul(b.mul(d, b.unary(op::rsqrt, b.add(v, eps))), gamma), beta);
  }
  constexpr int linear(int x, int w, int bias) {  // x w^T + b
    if (b.at(x).shape.rank == 1) {
      const dims row{1, b.at(x).shape.e[0]};
      const int y = linear(b.reshape(x, row), w, bias);
      return b.reshape(y, dims{b.at(y).shape.e[1]});
    }
    return b.add(b.matmul(x, b.transpose(w)), bias);
  }
  constexpr int mse_loss(int p, int q) {
    const int d = b.sub(p, q);
    const int sq = b.mul(d, d);
    return mean(sq, trailing_axes(b.at(sq).shape.rank, b.at(sq).shape.rank), false);
  }
  constexpr int cross_entropy(int z, int labels) {  // mean(logsumexp(z) - z[label])
    const dtype t = b.at(z).dt;
    const index_t rows = b.at(z).shape.e[0];
    const int m = b.reduce(op::amax, z, 2u, true);  // [n, 1]
    const int log_sum = b.unary(op::log, b.reduce(op::sum, b.unary(op::exp, b.sub(z, m)), 2u, false));
    const int lse = b.add(log_sum, b.reshape(m, dims{rows}));
    const int column = b.iota(z, 1, dtype::i64);
    const int hit = b.binary(op::eq, column, b.reshape(b.cast(labels, dtype::i64), dims{rows, 1}));
    const int picked = b.reduce(op::sum, b.where(hit, z, c(0, t)), 2u, false);
    return mean(b.sub(lse, picked), 1u, false);
  }

  /// conv2d as im2col and one batched matmul: the weight [o, c, kh, kw] viewed as [o, c kh kw]
  /// times the columns [n, c kh kw, ho wo], plus the bias (rank 0: none) while the result is
  /// still the matmul's [n, o, ho wo] (so it is the matmul's epilogue), viewed as [n, o, ho, wo].
  constexpr int conv2d(int x, int w, int bias, const window2d& win) {
    const dims xs = b.at(x).shape, ws = b.at(w).shape;
    const index_t o = ws.e[0];
    const int cols = b.unfold(x, win);
    int y = b.matmul(b.reshape(w, dims{o, ws.e[1] * ws.e[2] * ws.e[3]}), cols);
    if (b.at(bias).shape.rank == 1) y = b.add(y, b.reshape(bias, dims{o, 1}));
    return b.reshape(y, dims{xs.e[0], o, window_positions(xs.e[2], win.kh, win.sh, win.ph, win.dh),
                             window_positions(xs.e[3], win.kw, win.sw, win.pw, win.dw)});
  }
  /// Pooling as a reduction over the windows: unfold (padding -inf for max, 0 for the average
  /// as count_include_pad), viewed as [n, c, kh kw, ho wo], reduced over the window axis.
  constexpr int pool2d(op o, int x, const window2d& win) {
    const dims xs = b.at(x).shape;
    const dtype t = b.at(x).dt;
    const index_t ho = window_positions(xs.e[2], win.kh, win.sh, win.ph, win.dh);
    const index_t wo = window_positions(xs.e[3], win.kw, win.sw, win.pw, win.dw);
    const bool is_max = o == op::max_pool2d;
    const int cols = b.unfold(x, win, is_max ? -std::numeric_limits<double>::infinity() : 0.0);
    const int windows = b.reshape(cols, dims{xs.e[0], xs.e[1], win.size(), ho * wo});
    int r = b.reduce(is_max ? op::amax : op::sum, windows, 1u << 2, false);
    if (!is_max) r = b.div(r, c(static_cast<double>(win.size()), t));
    return b.reshape(r, dims{xs.e[0], xs.e[1], ho, wo});
  }

  /// a [..., h, tq, x] times m [..., hk, tk, y] (transposed: m^T), each k/v head serving h / hk
  /// consecutive q heads (grouped-query attention): a is viewed as [..., hk, h / hk, tq, x] and
  /// m as [..., hk, 1, tk, y], so that the matmul broadcasts each m head over its group.
  constexpr int grouped_matmul(int a, int m, bool transpose_m) {
    const dims as = b.at(a).shape, ms = b.at(m).shape;
    const int r = as.rank;
    const bool grouped = r >= 3 && as.e[r - 3] != ms.e[r - 3];
    const auto grouped_view = [&](const dims& s, index_t groups, index_t per_group) {
      dims g;
      g.rank = r + 1;
      for (int i = 0; i < r - 3; ++i) g.e[i] = s.e[i];
      g.e[r - 3] = groups;
      g.e[r - 2] = per_group;
      g.e[r - 1] = s.e[r - 2];
      g.e[r] = s.e[r - 1];
      return g;
    };
    int aa = a, mm = m;
    if (grouped) {
      const index_t hk = ms.e[r - 3];
      aa = b.reshape(a, grouped_view(as, hk, as.e[r - 3] / hk));
      mm = b.reshape(m, grouped_view(ms, hk, 1));
    }
    if (transpose_m) mm = b.transpose(mm);
    int p = b.matmul(aa, mm);
    if (grouped) {
      dims flat = as;
      flat.e[r - 1] = b.at(p).shape.e[r];
      p = b.reshape(p, flat);
    }
    return p;
  }

  /// The masked scores scale q k^T [..., h, tq, tk] (sdpa's q arrives scaled: scale 1): a bool
  /// mask (and the causal one: key j for query i where j <= i, top-left aligned as PyTorch's
  /// is_causal) selects -inf where it is false; a float mask is added; a rank-0 `true` is no mask.
  constexpr int attention_scores(int q, int k, int mask, bool causal, double scale = 1) {
    const int r = b.at(q).shape.rank;
    const dtype t = b.at(q).dt;
    int s = grouped_matmul(q, k, true);
    if (scale != 1) s = b.mul(s, c(scale, t));
    const node& m = b.at(mask);
    const bool no_mask = m.o == op::constant && m.dt == dtype::boolean && m.value != 0;
    const double inf = std::numeric_limits<double>::infinity();
    if (!no_mask && m.dt == dtype::boolean) {
      const int minus_inf = c(-inf, t);
      s = b.where(mask, s, minus_inf);
    } else if (!no_mask) {
      s = b.add(s, mask);
    }
    if (causal) {
      const index_t tq = b.at(s).shape.e[r - 2];
      const int rows = b.iota(s, r - 2, dtype::i64);
      const int row = b.reshape(rows, dims{tq, 1});
      const int col = b.iota(s, r - 1, dtype::i64);
      const int keep = b.binary(op::ge, row, col);
      const int minus_inf = c(-inf, t);
      s = b.where(keep, s, minus_inf);
    }
    return s;
  }

  /// q = x * c or x / c, c a positive rank-0 constant (the default scale 1 / sqrt(d), and what
  /// the rewrite of hand-written attention finds), as x and the scores' factor c (1 / c): the
  /// fused kernels scale the score tiles they hold anyway, where q * c was a pass over q in
  /// memory (and dq's a second one). Anything else stays q, factor 1.
  struct folded_scale {
    int q;
    double scale;
  };
  constexpr folded_scale fold_scale(int q) const {
    const node& n = b.at(q);
    if (n.o != op::mul && n.o != op::div) return {q, 1};
    const auto positive_constant = [&](int i) {
      const node& m = b.at(i);
      return m.o == op::constant && m.shape.rank == 0 && m.dt == n.dt && m.value > 0 &&
             m.value < std::numeric_limits<double>::infinity();
    };
    const auto same = [&](int i) { return b.at(i).shape == n.shape && b.at(i).dt == n.dt; };
    if (positive_constant(n.in[1]) && same(n.in[0]))
      return {n.in[0], n.o == op::mul ? b.at(n.in[1]).value : 1 / b.at(n.in[1]).value};
    if (n.o == op::mul && positive_constant(n.in[0]) && same(n.in[1])) return {n.in[1], b.at(n.in[0]).value};
    return {q, 1};
  }

  /// Attention as PyTorch's math reference computes it: softmax(q k^T [masked]) v, q already
  /// scaled (for bf16, and where the heads, lengths or head sizes are dyn). A row with every
  /// position masked is NaN, as in PyTorch's math reference. Otherwise it is the fused primitive
  /// (FlashAttention's tiling: no score matrix in memory), its value without the logsumexp.
  constexpr int sdpa(int q, int k, int v, int mask, bool causal) {
    const dims qs = b.at(q).shape, ks = b.at(k).shape, vs = b.at(v).shape;
    const int r = qs.rank;
    const dtype t = b.at(q).dt;
    if ((t == dtype::f32 || t == dtype::f64) && attention_extents_static(qs, ks, vs)) {
      const folded_scale f = fold_scale(q);
      const int packed = b.attention(f.q, k, v, mask, causal, f.scale);
      return b.slice(packed, r - 1, 0, vs.e[r - 1], 1);
    }
    const int s = attention_scores(q, k, mask, causal);
    const int p = softmax(s, r - 1);
    return grouped_matmul(p, v, false);
  }

  /// A rule: emits node n (inputs already renumbered) in primitives; returns its new index.
  /// `present` says whether there is one (not a null test of the pointer: g++ cannot compare a
  /// function pointer with null in constant evaluation when built with the sanitizers).
  struct rule {
    int (*apply)(decomposer&, const node& n) = nullptr;
    bool present = false;
  };

  /// The rule of op o, or nullptr for a primitive. The one list of rules: every op that
  /// graph/ops.hpp marks composite has one here, and no other (checked below).
  static constexpr rule rule_for(op o) {
    using d = decomposer;
    switch (o) {
      case op::relu: return rule{+[](d& r, const node& n) { return r.relu(n.in[0]); }, true};
      case op::sigmoid: return rule{+[](d& r, const node& n) { return r.sigmoid(n.in[0]); }, true};
      case op::silu: return rule{+[](d& r, const node& n) { return r.silu(n.in[0]); }, true};
      case op::gelu: return rule{+[](d& r, const node& n) { return r.gelu(n.in[0]); }, true};
      case op::gelu_tanh: return rule{+[](d& r, const node& n) { return r.gelu_tanh(n.in[0]); }, true};
      case op::softplus: return rule{+[](d& r, const node& n) { return r.softplus(n.in[0]); }, true};
      case op::mean: return rule{+[](d& r, const node& n) { return r.mean(n.in[0], n.axes, n.keepdim); }, true};
      case op::var: return rule{+[](d& r, const node& n) { return r.var(n.in[0], n.axes, n.keepdim, n.value); }, true};
      case op::softmax: return rule{+[](d& r, const node& n) { return r.softmax(n.in[0], n.axis); }, true};
      case op::log_softmax: return rule{+[](d& r, const node& n) { return r.log_softmax(n.in[0], n.axis); }, true};
      case op::layer_norm: return rule{+[](d& r, const node& n) { return r.layer_norm(n.in[0], n.in[1], n.in[2], n.in[3]); }, true};
      case op::linear: return rule{+[](d& r, const node& n) { return r.linear(n.in[0], n.in[1], n.in[2]); }, true};
      case op::mse_loss: return rule{+[](d& r, const node& n) { return r.mse_loss(n.in[0], n.in[1]); }, true};
      case op::cross_entropy: return rule{+[](d& r, const node& n) { return r.cross_entropy(n.in[0], n.in[1]); }, true};
      case op::conv2d: return rule{+[](d& r, const node& n) { return r.conv2d(n.in[0], n.in[1], n.in[2], window_of(n)); }, true};
      case op::max_pool2d:
      case op::avg_pool2d: return rule{+[](d& r, const node& n) { return r.pool2d(n.o, n.in[0], window_of(n)); }, true};
      case op::sdpa:
      case op::sdpa_causal:
        return rule{+[](d& r, const node& n) { return r.sdpa(n.in[0], n.in[1], n.in[2], n.in[3], n.o == op::sdpa_causal); }, true};
      default: return {};  // a primitive
    }
  }

  /// Emits node n (inputs already renumbered) in primitive form; returns its new index.
  constexpr int run(const node& n) {
    const rule r = rule_for(n.o);
    if (r.present) return r.apply(*this, n);
    // a node kept as it is takes its shape from the rule again: its inputs' decompositions may
    // know more than the composite did (sdpa's mask, broadcast over a dyn length, fixes it)
    const op_kind k = kind_of(n.o);
    return k == op_kind::leaf || k == op_kind::constant ? b.emit(n) : b.emit_inferred(n);
  }
};

/// The first op whose catalogue row and rule disagree (composite without a rule, or a rule for a
/// primitive), or -1.
constexpr int first_rule_mismatch() {
  for (int i = 0; i < kiln::detail::op_count; ++i)
    if (decomposer::rule_for(static_cast<op>(i)).present != !is_primitive(static_cast<op>(i))) return i;
  return -1;
}
static_assert(first_rule_mismatch() < 0,
              "kiln: decompose: an op marked composite in graph/ops.hpp has no rule in decomposer::rule_for, or a "
              "primitive has one (the value compared is the op's position in enum kiln::op)");

/// Attention written by hand, which decompose emits as sdpa (TorchInductor's fuse_attention
/// patterns): node i = matmul(softmax(S, last axis), v), the softmax read by nothing else, with
/// S = q k^T, then optionally times or divided by a rank-0 value s, then optionally plus an
/// additive mask m or where(m, S, -inf) for a bool mask m (masked_fill's spelling; the -inf a
/// constant, kiln::inf: a C++ number is a run-time leaf, whose value no pass knows), where k^T is
/// a permute of k swapping its last two axes, and q, k, v, m fit sdpa's shapes with the same
/// result. It becomes sdpa(q * s (or q / s), k, v, m): the scale moves onto q (T d operations
/// instead of T^2, one rounding moved), and from there into the fused kernels where s is a
/// positive constant (fold_scale).
struct attention_pattern {
  int q = -1, k = -1, v = -1, mask = -1, scale = -1;
  op scale_op = op::mul;
};

constexpr attention_pattern match_attention(const graph& g, const cvec<int>& uses, int i) {
  const auto at = [&](int x) -> const node& { return g.nodes[static_cast<std::size_t>(x)]; };
  const attention_pattern none{};
  attention_pattern m;
  const node& out = at(i);
  if (out.o != op::matmul || at(out.in[0]).o != op::softmax || uses[static_cast<std::size_t>(out.in[0])] != 1) return none;
  const node& sm = at(out.in[0]);
  const int r = sm.shape.rank;
  const dtype t = sm.dt;
  if (r < 2 || sm.axis != r - 1 || (t != dtype::f32 && t != dtype::f64 && t != dtype::bf16)) return none;
  int x = sm.in[0];
  const auto minus_inf = [&](int c) {
    const int k = constant_under_shapes(g.nodes, c);
    return k >= 0 && at(k).value == -std::numeric_limits<double>::infinity();
  };
  if (at(x).o == op::where) {  // where(m, scores, -inf)
    const node& w = at(x);
    if (at(w.in[0]).dt != dtype::boolean || !minus_inf(w.in[2])) return none;
    m.mask = w.in[0];
    x = w.in[1];
  } else if (at(x).o == op::add) {  // scores + mask, either way round
    const node& a = at(x);
    const op l = at(a.in[0]).o;
    const bool left = l == op::matmul || l == op::mul || l == op::div;
    m.mask = left ? a.in[1] : a.in[0];
    x = left ? a.in[0] : a.in[1];
    if (at(m.mask).dt != t) return none;
  }
  if (at(x).o == op::mul || at(x).o == op::div) {  // scaled by a rank-0 value
    const node& a = at(x);
    const bool first = at(a.in[1]).shape.rank == 0;
    if (!first && (a.o == op::div || at(a.in[0]).shape.rank != 0)) return none;
    m.scale = first ? a.in[1] : a.in[0];
    m.scale_op = a.o;
    x = first ? a.in[0] : a.in[1];
    if (at(m.scale).dt != t) return none;
  }
  const node& qk = at(x);
  if (qk.o != op::matmul || at(qk.in[1]).o != op::permute || !swaps_last_two(at(qk.in[1]))) return none;
  m.q = qk.in[0];
  m.k = at(qk.in[1]).in[0];
  m.v = out.in[1];
  if (at(m.q).dt != t || at(m.k).dt != t || at(m.v).dt != t) return none;
  const dims mask_shape = m.mask >= 0 ? at(m.mask).shape : dims{};
  const shape_result sr = sdpa_shape(at(m.q).shape, at(m.k).shape, at(m.v).shape, mask_shape);
  if (!sr.ok || !(sr.shape == out.shape) || !(at(x).shape == sm.shape)) return none;
  return m;
}

}  // namespace detail

/// (the catalogue's fact, reachable from the passes as before)
using kiln::is_primitive;

/// The decomposition pass: the same computation with primitives only.
constexpr graph decompose(const graph& g) {
  builder b;
  b.g.leaves = g.leaves;
  detail::decomposer d{b};
  cvec<int> to(g.nodes.size(), -1);
  // readers of each node, counted only where hand-written attention may be (a softmax)
  cvec<int> uses;
  for (const node& n : g.nodes)
    if (n.o == op::softmax) {
      uses.assign(g.nodes.size(), 0);
      for (const node& x : g.nodes)
        for (int j = 0, nj = x.nin(); j < nj; ++j) ++uses[static_cast<std::size_t>(x.in[j])];
      for (int o : g.outputs) ++uses[static_cast<std::size_t>(o)];
      break;
    }
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    node n = g.nodes[i];
    if (!uses.empty() && n.o == op::matmul) {
      if (const detail::attention_pattern m = detail::match_attention(g, uses, static_cast<int>(i)); m.q >= 0) {
        const auto to_ = [&](int x) { return to[static_cast<std::size_t>(x)]; };
        int q = to_(m.q);
        if (m.scale >= 0) q = b.binary(m.scale_op, q, to_(m.scale));
        const int mask = m.mask >= 0 ? to_(m.mask) : b.constant(1, dtype::boolean);
        to[i] = d.sdpa(q, to_(m.k), to_(m.v), mask, false);  // (the softmax and q k^T left are dead)
        continue;
      }
    }
    for (int j = 0, nj = n.nin(); j < nj; ++j) n.in[j] = to[static_cast<std::size_t>(n.in[j])];
    int out = d.run(n);
    // a rule may know an extent that capture left dyn (a static mask fixes the scores' length):
    // relabelled as captured, so that the readers' shapes still follow from it
    if (!is_primitive(n.o) && !(b.at(out).shape == n.shape)) out = b.broadcast_to(out, n.shape);
    to[i] = out;
  }
  for (int o : g.outputs) b.g.outputs.push_back(to[static_cast<std::size_t>(o)]);
  return b.g;
}

}  // namespace kiln::passes
