// kiln/graph/ops.hpp: the op catalogue. Every node kind a graph can hold, with its static facts
// (name, kind, arity, composite or primitive, commutative, float compute, inputs read for their
// shape only) in one table. Composite ops (sigmoid, gelu, softmax, layer_norm, cross_entropy ...)
// are captured as written; the decomposition pass (passes/decompose.hpp) turns them into
// primitives; the eager backend runs both forms (a composite without a direct rule there runs
// its decomposition). docs/adding-an-op.md says what else an op needs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "../core/dtype.hpp"

namespace kiln {

enum class op : std::uint8_t {
  // leaves: values supplied at run time through the leaf table
  input, param, bound, scalar,
  // a rank-0 constant held in the graph (node.value)
  constant,
  // pointwise unary
  neg, abs, exp, log, sqrt, rsqrt, reciprocal, tanh, sigmoid, relu, gelu, gelu_tanh, silu, sin, cos, erf, softplus,
  // rounding (round: half to even, as torch.round) and inverse trigonometry
  floor, ceil, round, trunc, atan, asin, acos,
  // pointwise binary
  add, sub, mul, div, max, min, pow, fmod, atan2, eq, ne, lt, le, gt, ge,
  // pointwise ternary
  where,
  // reductions over node.axes (var: node.value is the correction, 1 = unbiased)
  sum, mean, amax, amin, var,
  // contraction
  matmul,
  // shape and type; iota: 0 .. extent-1 of input axis node.axis (as i64); numel: element count
  // of the input's node.axes (the input's values are not read by either)
  reshape, permute, broadcast, slice, concat, iota, numel, cast,
  // data movement by index arithmetic, each run by a kernel of its own: gather(table, index)
  // takes rows of table (embedding); scatter_add(index, src, like) adds src's rows into zeros
  // shaped like `like` (not read) at those rows; unfold(x) lays each 2-D window of x out as a
  // column (im2col, padding filled with node.value); fold(cols) adds columns back (col2im);
  // cumsum(x): running sums along node.axis, from its end when node.value is 1 (the adjoint);
  // cumprod(x): running products along node.axis;
  // argsort(x): the indices (i64) that sort x along node.axis, stably, descending when
  // node.value is 1, NaN above everything (torch.argsort(stable=True))
  gather, scatter_add, unfold, fold, cumsum, cumprod, argsort,
  // fused attention, also a kernel of its own (kind movement: a routine per backend, no fusion):
  // attention(q, k, v, mask) is sdpa's value with the logsumexp of each score row appended,
  // [..., h, tq, dv + 1]; attention_grad(q, k, v, mask, y, g) takes that value y and its
  // cotangent g (of y, or of its first dv columns: the logsumexp's cotangent zero) and gives dq's
  // rows then dk ++ dv's rows, [..., h tq + hk tk, d + dv] (shape_rules.hpp); node.axis 1 =
  // causal, node.value the scores' factor: s = value q k^T [+ mask] (attention_causal,
  // attention_scale in graph.hpp)
  attention, attention_grad,
  // rand(like, seed): uniform [0, 1) f32 values shaped like `like` (not read), element i being
  // philox(seed, stream = node.axes).uniform24(i); seed is a rank-0 i64 value
  rand,
  // high-level ops with more than one primitive in their decomposition; sdpa(q, k, v, mask) is
  // softmax(q k^T [+ mask]) v (q arrives scaled; its rule folds a constant factor of q into
  // attention's), the mask bool (where) or additive, a rank-0
  // `true` for none; sdpa_causal also masks k positions after q's (PyTorch's is_causal)
  softmax, log_softmax, layer_norm, linear, mse_loss, cross_entropy, conv2d, max_pool2d, avg_pool2d, sdpa,
  sdpa_causal,
  // differentiation, expanded by passes/autodiff.hpp before fusion: detach(x) is x with no
  // gradient; grad(loss, w) is d loss / d w; jvp(y, x, u) is the derivative of y along u at x;
  // custom(y, x, rule, g) is y whose gradient with respect to x is `rule`, an expression of the
  // cotangent marker g (the incoming gradient)
  detach, grad, jvp, custom, cotangent,
  // not nodes, structure for the trace: the root of kiln::outputs(a, b, ...), whose operands
  // become the graph's outputs; share(x), x where every share of the same key (node.value's
  // bits) is one value (the loss under several grad nodes), traced once
  tuple, share,
};

enum class op_kind : std::uint8_t {
  leaf, constant, unary, binary, ternary, reduce, matmul, shape, cast, movement, random, composite, autodiff, tuple
};

/// Every static fact about an op, one row each (the rules that need code live beside the pass
/// or backend that applies them, one list each, checked against this table where they can be). `composite`: decomposed into primitives by
/// passes/decompose.hpp (which must have a rule for it, and for no primitive: checked there);
/// a unary composite stays kind `unary` (it is pointwise to capture and shape inference).
struct op_info {
  std::string_view name;
  op_kind kind;
  int arity;                   ///< graph inputs (concat has two; n-ary concat nests)
  bool composite = false;      ///< decomposed before the backends see it
  bool commutative = false;    ///< f(a, b) == f(b, a): canonicalisation orders the operands
  bool float_compute = false;  ///< computes in floating point: integer inputs are cast to f32 first
  bool costly = false;         ///< a transcendental function: a kernel caches its value rather than recompute it
  std::uint8_t shape_only = 0; ///< bit j: input j gives only its shape (its values are never read)
  bool value_checked = false;  ///< may throw on its input values (index out of range; integer pow, fmod, div: see may_throw)
};

namespace detail {
using K = op_kind;
// a row's flags
inline constexpr int decomposed = 1, commutes = 2, in_float = 4, costly = 8, checks_values = 16;
constexpr op_info row(std::string_view name, op_kind kind, int arity, int flags = 0, std::uint8_t shape_only = 0) {
  return {name,
          kind,
          arity,
          (flags & decomposed) != 0,
          (flags & commutes) != 0,
          (flags & in_float) != 0,
          (flags & costly) != 0,
          shape_only,
          (flags & checks_values) != 0};
}
// name, kind, arity, flags, inputs read for their shape only (a bit mask)
inline constexpr op_info op_table[] = {
    row("input", K::leaf, 0),
    row("param", K::leaf, 0),
    row("bound", K::leaf, 0),
    row("scalar", K::leaf, 0),
    row("constant", K::constant, 0),
    row("neg", K::unary, 1),
    row("abs", K::unary, 1),
    row("exp", K::unary, 1, in_float | costly),
    row("log", K::unary, 1, in_float | costly),
    row("sqrt", K::unary, 1, in_float),
    row("rsqrt", K::unary, 1, in_float),
    row("reciprocal", K::unary, 1, in_float),
    row("tanh", K::unary, 1, in_float | costly),
    row("sigmoid", K::unary, 1, decomposed | in_float | costly),
    row("relu", K::unary, 1, decomposed),
    row("gelu", K::unary, 1, decomposed | in_float | costly),
    row("gelu_tanh", K::unary, 1, decomposed | in_float | costly),
    row("silu", K::unary, 1, decomposed | in_float | costly),
    row("sin", K::unary, 1, in_float | costly),
    row("cos", K::unary, 1, in_float | costly),
    row("erf", K::unary, 1, in_float | costly),
    row("softplus", K::unary, 1, decomposed | in_float | costly),
    row("floor", K::unary, 1),
    row("ceil", K::unary, 1),
    row("round", K::unary, 1),
    row("trunc", K::unary, 1),
    row("atan", K::unary, 1, in_float | costly),
    row("asin", K::unary, 1, in_float | costly),
    row("acos", K::unary, 1, in_float | costly),
    row("add", K::binary, 2, commutes),
    row("sub", K::binary, 2),
    row("mul", K::binary, 2, commutes),
    row("div", K::binary, 2, checks_values),
    row("max", K::binary, 2, commutes),
    row("min", K::binary, 2, commutes),
    row("pow", K::binary, 2, costly | checks_values),
    row("fmod", K::binary, 2, costly | checks_values),
    row("atan2", K::binary, 2, in_float | costly),
    row("eq", K::binary, 2, commutes),
    row("ne", K::binary, 2, commutes),
    row("lt", K::binary, 2),
    row("le", K::binary, 2),
    row("gt", K::binary, 2),
    row("ge", K::binary, 2),
    row("where", K::ternary, 3),
    row("sum", K::reduce, 1),
    row("mean", K::reduce, 1, decomposed),
    row("amax", K::reduce, 1),
    row("amin", K::reduce, 1),
    row("var", K::reduce, 1, decomposed),
    row("matmul", K::matmul, 2),
    row("reshape", K::shape, 1),
    row("permute", K::shape, 1),
    row("broadcast", K::shape, 1),
    row("slice", K::shape, 1),
    row("concat", K::shape, 2),
    row("iota", K::shape, 1, 0, 1),
    row("numel", K::shape, 1, 0, 1),
    row("cast", K::cast, 1),
    row("gather", K::movement, 2, checks_values),
    row("scatter_add", K::movement, 3, checks_values, 4),
    row("unfold", K::movement, 1),
    row("fold", K::movement, 1),
    row("cumsum", K::movement, 1),
    row("cumprod", K::movement, 1),
    row("argsort", K::movement, 1),
    row("attention", K::movement, 4),
    row("attention_grad", K::movement, 6),
    row("rand", K::random, 2, 0, 1),
    row("softmax", K::composite, 1, decomposed),
    row("log_softmax", K::composite, 1, decomposed),
    row("layer_norm", K::composite, 4, decomposed),  // x, gamma, beta and its epsilon (a rank-0 value)
    row("linear", K::composite, 3, decomposed),
    row("mse_loss", K::composite, 2, decomposed),
    row("cross_entropy", K::composite, 2, decomposed),
    row("conv2d", K::composite, 3, decomposed),
    row("max_pool2d", K::composite, 1, decomposed),
    row("avg_pool2d", K::composite, 1, decomposed),
    row("sdpa", K::composite, 4, decomposed),
    row("sdpa_causal", K::composite, 4, decomposed),
    row("detach", K::autodiff, 1),
    row("grad", K::autodiff, 2),
    row("jvp", K::autodiff, 3),
    row("custom", K::autodiff, 4),
    row("cotangent", K::autodiff, 0),
    row("tuple", K::tuple, 0),
    row("share", K::tuple, 1),
};
inline constexpr int op_count = static_cast<int>(sizeof(op_table) / sizeof(op_table[0]));
static_assert(op_count == static_cast<int>(op::share) + 1, "kiln: op_table needs one row per op, in enum order");
}  // namespace detail

constexpr const op_info& info(op o) { return detail::op_table[static_cast<int>(o)]; }
// (direct table reads: each nested call costs steps in constant evaluation, and these run per node)
constexpr op_kind kind_of(op o) { return detail::op_table[static_cast<int>(o)].kind; }
constexpr std::string_view name(op o) { return detail::op_table[static_cast<int>(o)].name; }
/// Number of graph inputs of a node of this op (concat has two; n-ary concat nests).
constexpr int arity(op o) { return detail::op_table[static_cast<int>(o)].arity; }

constexpr bool is_comparison(op o) { return o >= op::eq && o <= op::ge; }
constexpr bool is_commutative(op o) { return detail::op_table[static_cast<int>(o)].commutative; }
constexpr bool is_pointwise(op o) {
  const op_kind k = kind_of(o);
  return k == op_kind::unary || k == op_kind::binary || k == op_kind::ternary || k == op_kind::cast;
}
/// Whether op o is in the primitive set (what decompose leaves): every op not marked composite.
constexpr bool is_primitive(op o) { return !detail::op_table[static_cast<int>(o)].composite; }
/// Ops that run as a kernel of their own, which no other node joins (data movement by index
/// arithmetic and random numbers): the backends have one routine for each.
constexpr bool is_standalone(op o) { return kind_of(o) == op_kind::movement || kind_of(o) == op_kind::random; }
/// Whether a node of op o reads the values of its input j; false for inputs that give only a
/// shape (iota's, numel's and rand's first, scatter_add's third), which need not be in memory.
constexpr bool reads_input_values(op o, int j) { return !((detail::op_table[static_cast<int>(o)].shape_only >> j) & 1); }
/// A placeholder as messages name it: "param 'w1'" (kind and name).
inline std::string placeholder_what(op o, std::string_view label) {
  std::string w(detail::op_table[static_cast<int>(o)].name);
  w += " '";
  w += label;
  return w += '\'';
}
/// Whether a node of op o with dtype dt may throw on the values it reads, partway through its
/// kernel (gather and scatter_add on an index out of range, integer pow on a negative exponent,
/// integer fmod and div on a zero divisor): backends that write into a caller's tensors run such plans
/// into fresh memory first.
constexpr bool may_throw(op o, dtype dt) {
  return detail::op_table[static_cast<int>(o)].value_checked && ((o != op::pow && o != op::fmod && o != op::div) || !is_floating(dt));
}
/// Whether op o is a transcendental function (fusion's cost model: worth caching, not recomputing).
constexpr bool is_costly(op o) { return detail::op_table[static_cast<int>(o)].costly; }
/// Unary ops that compute in floating point (integers are cast to f32 first, as in PyTorch).
constexpr bool is_float_unary(op o) {
  return kind_of(o) == op_kind::unary && detail::op_table[static_cast<int>(o)].float_compute;
}
/// Whether binary op o computes in floating point (atan2): integer operands are cast to f32 first.
constexpr bool is_float_binary(op o) {
  return kind_of(o) == op_kind::binary && detail::op_table[static_cast<int>(o)].float_compute;
}

}  // namespace kiln
