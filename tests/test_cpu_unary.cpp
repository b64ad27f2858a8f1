// CPU backend, unary pointwise ops: each op and floating dtype against the eager reference on
// fresh random inputs, at sizes that are not multiples of any vector width (tails), with
// 1 thread against several.
#include "cpu_support.hpp"

using namespace kiln;

using kt::sizes;
using kt::tol;
using kt::unary_sizes;

TEST_CASE_TEMPLATE("unary ops match eager at odd sizes", T, float, double, bfloat16) {
  unary_sizes<T>([](auto x) { return -x; }, -3, 3);
  unary_sizes<T>([](auto x) { return abs(x); }, -3, 3);
  unary_sizes<T>([](auto x) { return exp(x); }, -8, 8);
  unary_sizes<T>([](auto x) { return log(x); }, 0.01, 50);
  unary_sizes<T>([](auto x) { return sqrt(x); }, 0, 50);
  unary_sizes<T>([](auto x) { return rsqrt(x); }, 0.01, 50);
  unary_sizes<T>([](auto x) { return reciprocal(x); }, 0.1, 5);
  unary_sizes<T>([](auto x) { return tanh(x); }, -5, 5);
  unary_sizes<T>([](auto x) { return sigmoid(x); }, -9, 9);
  unary_sizes<T>([](auto x) { return relu(x); }, -3, 3);
  unary_sizes<T>([](auto x) { return gelu(x); }, -5, 5);
  unary_sizes<T>([](auto x) { return gelu_tanh(x); }, -5, 5);
  unary_sizes<T>([](auto x) { return silu(x); }, -6, 6);
  unary_sizes<T>([](auto x) { return sin(x); }, -7, 7);
  unary_sizes<T>([](auto x) { return cos(x); }, -7, 7);
  unary_sizes<T>([](auto x) { return erf(x); }, -3, 3);
}

