// kiln/graph/ops.hpp: the op catalogue: every node kind a graph can hold, with its name and
// category. High-level ops (sigmoid, relu, gelu, mean) are captured as they are written; the
// decomposition pass turns them into primitives.
#pragma once

#include <cstdint>
#include <string_view>

namespace kiln {

enum class op : std::uint8_t {
  // leaves
  input, param, bound, scalar,
  // pointwise unary
  neg, abs, exp, log, sqrt, rsqrt, tanh, sigmoid, relu, gelu, gelu_tanh, sin, cos, erf,
  // pointwise binary
  add, sub, mul, div, max, min, pow, eq, ne, lt, le, gt, ge,
  // pointwise ternary
  where,
  // reductions over a set of axes
  sum, mean, amax, amin,
  // contraction
  matmul,
  // shape and type
  reshape, permute, broadcast, slice, concat, cast,
};

enum class op_kind : std::uint8_t { leaf, unary, binary, ternary, reduce, matmul, shape, cast };

constexpr op_kind kind_of(op o) {
  if (o <= op::scalar) return op_kind::leaf;
  if (o <= op::erf) return op_kind::unary;
  if (o <= op::ge) return op_kind::binary;
  if (o == op::where) return op_kind::ternary;
  if (o <= op::amin) return op_kind::reduce;
  if (o == op::matmul) return op_kind::matmul;
  if (o == op::cast) return op_kind::cast;
  return op_kind::shape;
}

constexpr bool is_comparison(op o) { return o >= op::eq && o <= op::ge; }
constexpr bool is_pointwise(op o) {
  const op_kind k = kind_of(o);
  return k == op_kind::unary || k == op_kind::binary || k == op_kind::ternary || k == op_kind::cast;
}
/// Unary ops that compute in floating point (integers are cast to f32 first, as in PyTorch).
constexpr bool is_float_unary(op o) { return kind_of(o) == op_kind::unary && o != op::neg && o != op::abs && o != op::relu; }

/// Number of graph inputs of a node of this op (concat has two; n-ary concat nests).
constexpr int arity(op o) {
  switch (kind_of(o)) {
    case op_kind::leaf: return 0;
    case op_kind::binary: case op_kind::matmul: return 2;
    case op_kind::ternary: return 3;
    default: return o == op::concat ? 2 : 1;
  }
}

constexpr std::string_view name(op o) {
  constexpr std::string_view names[] = {
      "input", "param", "bound", "scalar",
      "neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu", "gelu_tanh", "sin", "cos", "erf",
      "add", "sub", "mul", "div", "max", "min", "pow", "eq", "ne", "lt", "le", "gt", "ge",
      "where",
      "sum", "mean", "amax", "amin",
      "matmul",
      "reshape", "permute", "broadcast", "slice", "concat", "cast"};
  return names[static_cast<int>(o)];
}

}  // namespace kiln
