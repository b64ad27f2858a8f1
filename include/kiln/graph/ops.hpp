// kiln/graph/ops.hpp: the op catalogue. Every node kind a graph can hold, with its name, its
// kind and its number of inputs, in one table. High-level ops (sigmoid, gelu, softmax,
// layer_norm, cross_entropy ...) are captured as written; the decomposition pass
// (passes/decompose.hpp) turns them into primitives, and the eager backend runs both forms.
#pragma once

#include <cstdint>
#include <string_view>

namespace kiln {

enum class op : std::uint8_t {
  // leaves: values supplied at run time through the leaf table
  input, param, bound, scalar,
  // a rank-0 constant held in the graph (node.value)
  constant,
  // pointwise unary
  neg, abs, exp, log, sqrt, rsqrt, reciprocal, tanh, sigmoid, relu, gelu, gelu_tanh, silu, sin, cos, erf,
  // pointwise binary
  add, sub, mul, div, max, min, pow, eq, ne, lt, le, gt, ge,
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
  // column (im2col, padding filled with node.value); fold(cols) adds columns back (col2im)
  gather, scatter_add, unfold, fold,
  // rand(like, seed): uniform [0, 1) f32 values shaped like `like` (not read), element i being
  // philox(seed, stream = node.axes).uniform24(i); seed is a rank-0 i64 value
  rand,
  // high-level ops with more than one primitive in their decomposition
  softmax, log_softmax, layer_norm, linear, mse_loss, cross_entropy, conv2d, max_pool2d, avg_pool2d,
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

struct op_info {
  std::string_view name;
  op_kind kind;
  int arity;
};

namespace detail {
using K = op_kind;
inline constexpr op_info op_table[] = {
    {"input", K::leaf, 0},       {"param", K::leaf, 0},     {"bound", K::leaf, 0},
    {"scalar", K::leaf, 0},      {"constant", K::constant, 0},
    {"neg", K::unary, 1},        {"abs", K::unary, 1},       {"exp", K::unary, 1},
    {"log", K::unary, 1},        {"sqrt", K::unary, 1},      {"rsqrt", K::unary, 1},
    {"reciprocal", K::unary, 1}, {"tanh", K::unary, 1},      {"sigmoid", K::unary, 1},
    {"relu", K::unary, 1},       {"gelu", K::unary, 1},      {"gelu_tanh", K::unary, 1},
    {"silu", K::unary, 1},       {"sin", K::unary, 1},       {"cos", K::unary, 1},
    {"erf", K::unary, 1},
    {"add", K::binary, 2},       {"sub", K::binary, 2},      {"mul", K::binary, 2},
    {"div", K::binary, 2},       {"max", K::binary, 2},      {"min", K::binary, 2},
    {"pow", K::binary, 2},       {"eq", K::binary, 2},       {"ne", K::binary, 2},
    {"lt", K::binary, 2},        {"le", K::binary, 2},       {"gt", K::binary, 2},
    {"ge", K::binary, 2},
    {"where", K::ternary, 3},
    {"sum", K::reduce, 1},       {"mean", K::reduce, 1},     {"amax", K::reduce, 1},
    {"amin", K::reduce, 1},      {"var", K::reduce, 1},
    {"matmul", K::matmul, 2},
    {"reshape", K::shape, 1},    {"permute", K::shape, 1},   {"broadcast", K::shape, 1},
    {"slice", K::shape, 1},      {"concat", K::shape, 2},    {"iota", K::shape, 1},
    {"numel", K::shape, 1},      {"cast", K::cast, 1},
    {"gather", K::movement, 2},  {"scatter_add", K::movement, 3}, {"unfold", K::movement, 1},
    {"fold", K::movement, 1},    {"rand", K::random, 2},
    {"softmax", K::composite, 1}, {"log_softmax", K::composite, 1}, {"layer_norm", K::composite, 3},
    {"linear", K::composite, 3},  {"mse_loss", K::composite, 2},    {"cross_entropy", K::composite, 2},
    {"conv2d", K::composite, 3},  {"max_pool2d", K::composite, 1},  {"avg_pool2d", K::composite, 1},
    {"detach", K::autodiff, 1},   {"grad", K::autodiff, 2},         {"jvp", K::autodiff, 3},
    {"custom", K::autodiff, 4},   {"cotangent", K::autodiff, 0},
    {"tuple", K::tuple, 0},       {"share", K::tuple, 1},
};
static_assert(sizeof(op_table) / sizeof(op_table[0]) == static_cast<int>(op::share) + 1,
              "kiln: op_table needs one row per op, in enum order");
}  // namespace detail

constexpr const op_info& info(op o) { return detail::op_table[static_cast<int>(o)]; }
// (direct table reads: each nested call costs steps in constant evaluation, and these run per node)
constexpr op_kind kind_of(op o) { return detail::op_table[static_cast<int>(o)].kind; }
constexpr std::string_view name(op o) { return detail::op_table[static_cast<int>(o)].name; }
/// Number of graph inputs of a node of this op (concat has two; n-ary concat nests).
constexpr int arity(op o) { return detail::op_table[static_cast<int>(o)].arity; }

constexpr bool is_comparison(op o) { return o >= op::eq && o <= op::ge; }
constexpr bool is_commutative(op o) {
  return o == op::add || o == op::mul || o == op::max || o == op::min || o == op::eq || o == op::ne;
}
constexpr bool is_pointwise(op o) {
  const op_kind k = kind_of(o);
  return k == op_kind::unary || k == op_kind::binary || k == op_kind::ternary || k == op_kind::cast;
}
/// Ops that run as a kernel of their own, which no other node joins (data movement by index
/// arithmetic and random numbers): the backends have one routine for each.
constexpr bool is_standalone(op o) { return kind_of(o) == op_kind::movement || kind_of(o) == op_kind::random; }
/// Whether a node of op o reads the values of its input j; false for inputs that give only a
/// shape (iota's, numel's and rand's first, scatter_add's third), which need not be in memory.
constexpr bool reads_input_values(op o, int j) {
  return !(j == 0 && (o == op::iota || o == op::numel || o == op::rand)) && !(j == 2 && o == op::scatter_add);
}
/// Unary ops that compute in floating point (integers are cast to f32 first, as in PyTorch).
constexpr bool is_float_unary(op o) {
  return kind_of(o) == op_kind::unary && o != op::neg && o != op::abs && o != op::relu;
}

}  // namespace kiln
