// CPU backend, unary pointwise ops: each op and floating dtype against the eager reference on
// fresh random inputs, at sizes that are not multiples of any vector width (tails), with
// 1 thread against several.
#include "cpu_support.hpp"

using namespace kiln;

namespace {

constexpr index_t sizes[] = {1, 7, 17, 1023, 40000};

/// Tolerance of a pointwise result against the eager reference, by dtype.
template <class T>
constexpr double tol() {
  if constexpr (std::is_same_v<T, double>) return 1e-13;
  else if constexpr (std::is_same_v<T, bfloat16>) return 1e-2;  // one bf16 rounding step apart
  else return 1e-5;
}

/// Runs a unary expression builder on a rank-1 dyn-extent input of every size.
template <class T, class Build>
void unary_sizes(Build build, double lo, double hi) {
  using X = input<"x", dtype_of<T>, shape<dyn>>;
  for (index_t n : sizes) {
    INFO("n = " << n);
    CHECK(kt::cpu_vs_eager(build(X{}), {{"x", kt::rand<T, 1>({n}, lo, hi)}}) <= tol<T>());
  }
}

}  // namespace

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

