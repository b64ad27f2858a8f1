// CPU backend, unary pointwise ops: each op and floating dtype against the eager reference on
// fresh random inputs, at sizes that are not multiples of any vector width (tails), with
// 1 thread against several.
#include "cpu_support.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

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
  unary_sizes<T>([](auto x) { return floor(x); }, -50, 50);
  unary_sizes<T>([](auto x) { return ceil(x); }, -50, 50);
  unary_sizes<T>([](auto x) { return round(x); }, -50, 50);
  unary_sizes<T>([](auto x) { return trunc(x); }, -50, 50);
  unary_sizes<T>([](auto x) { return atan(x); }, -9, 9);
  unary_sizes<T>([](auto x) { return asin(x); }, -1, 1);
  unary_sizes<T>([](auto x) { return acos(x); }, -1, 1);
}

TEST_CASE_TEMPLATE("floor, ceil, round, trunc: as the C library's at ties, large values and specials", T, float, double) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  // ties (round: to even), values an ulp off them, the edge of exact integers (2^23, 2^52), huge
  const std::vector<double> v = {0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999997, -0.49999997, 1.0000001,
                                 -0.9999999, 8388607.5, -8388607.5, 8388608.0, 16777215.0, 4503599627370495.5,
                                 -4503599627370495.5, 9007199254740993.0, 1e30, -1e30, 1e-30, -1e-30, inf, -inf, nan,
                                 123.75, -123.25, 7.0, -7.0, 3.4e38, -3.4e38, 2147483648.5, -2147483649.5, 0.25, -0.75};
  const auto n = static_cast<index_t>(v.size());
  tensor<T, 1> x({n});
  for (index_t i = 0; i < n; ++i) x(i) = static_cast<T>(v[static_cast<std::size_t>(i)]);
  using X = input<"x", dtype_of<T>, shape<dyn>>;
  const auto same = [](T got, T want) {
    return std::isnan(want) ? std::isnan(got) : got == want && std::signbit(got) == std::signbit(want);
  };
  const auto check = [&](const auto& e, T (*ref)(T), const std::string& name) {
    int backend = 0;
    for (const tensor<T, 1>& y : {eval(e, X{} = x), eval(e, X{} = x, eager::backend)})
      for (index_t i = 0; i < n; ++i, ++backend) {
        INFO(std::string(backend < n ? "cpu: " : "eager: ") << name << "(" << x(i) << ") = " << y(i));
        CHECK(same(y(i), ref(x(i))));
      }
  };
  check(floor(X{}), [](T a) { return std::floor(a); }, "floor");
  check(ceil(X{}), [](T a) { return std::ceil(a); }, "ceil");
  check(round(X{}), [](T a) { return std::nearbyint(a); }, "round");
  check(trunc(X{}), [](T a) { return std::trunc(a); }, "trunc");
  // fmod is C's (exact), not a - trunc(a / b) b; atan2 the C library's
  tensor<T, 1> y({n});
  for (index_t i = 0; i < n; ++i) y(i) = static_cast<T>(v[static_cast<std::size_t>((i * 7 + 3) % n)]);
  using Y = input<"y", dtype_of<T>, shape<dyn>>;
  for (const tensor<T, 1>& r : {eval(fmod(X{}, Y{}), X{} = x, Y{} = y), eval(fmod(X{}, Y{}), X{} = x, Y{} = y, eager::backend)})
    for (index_t i = 0; i < n; ++i) {
      INFO("fmod(" << x(i) << ", " << y(i) << ") = " << r(i));
      CHECK(same(r(i), std::fmod(x(i), y(i))));
    }
  for (const tensor<T, 1>& r : {eval(atan2(X{}, Y{}), X{} = x, Y{} = y), eval(atan2(X{}, Y{}), X{} = x, Y{} = y, eager::backend)})
    for (index_t i = 0; i < n; ++i) {
      INFO("atan2(" << x(i) << ", " << y(i) << ") = " << r(i));
      CHECK(same(r(i), std::atan2(x(i), y(i))));
    }
}

TEST_CASE("gradients that used to be 0 * inf: sigmoid and silu far below 0, pow at a = b = 0") {
  using X = input<"x", f32, shape<dyn>>;
  const tensor<float, 1> x({6}, {-89.0f, -104.0f, -1e30f, -std::numeric_limits<float>::infinity(), 0.0f, 30.0f});
  for (const tensor<float, 1>& g : {eval(grad(sum(sigmoid(X{})), X{}), X{} = x), eval(grad(sum(sigmoid(X{})), X{}), X{} = x, eager::backend)}) {
    for (index_t i = 0; i < 4; ++i) {
      INFO("sigmoid'(" << x(i) << ") = " << g(i));
      CHECK(std::isfinite(g(i)));
      CHECK(g(i) >= 0.0f);
      CHECK(g(i) <= 2e-38f);  // e^-89 = 2.2e-39 and below
    }
    CHECK(g(4) == 0.25f);  // the derivative at 0 through the select of -|x|
    CHECK(g(5) == doctest::Approx(9.3576e-14).epsilon(1e-3));
  }
  for (const tensor<float, 1>& g : {eval(grad(sum(silu(X{})), X{}), X{} = x), eval(grad(sum(silu(X{})), X{}), X{} = x, eager::backend)}) {
    for (index_t i = 0; i < 3; ++i) {
      INFO("silu'(" << x(i) << ") = " << g(i));
      CHECK(std::isfinite(g(i)));
      CHECK(std::fabs(g(i)) < 1e-30f);
    }
    CHECK(g(4) == 0.5f);
  }
  using A = input<"a", f64, shape<3>>;
  using B = input<"b", f64, shape<3>>;
  const tensor<double, 1> a({3}, {0.0, 0.0, 2.0}), b({3}, {0.0, 2.0, 0.0});
  const auto da = grad(sum(pow(A{}, B{})), A{});
  for (const tensor<double, 1>& d : {eval(da, A{} = a, B{} = b), eval(da, A{} = a, B{} = b, eager::backend)}) {
    CHECK(d(0) == 0.0);  // PyTorch's: 0 where b = 0 (b a^(b-1) would be 0 * inf)
    CHECK(d(1) == 0.0);
    CHECK(d(2) == 0.0);
  }
  const auto squared = grad(sum(pow(A{}, 2.0)), A{});  // a constant exponent: no select
  CHECK(eval(squared, A{} = a)(2) == 4.0);
}


// ---- kiln's f32 erf (simd::fn::erf: erf_f32_table on AVX-512, erf_f32 elsewhere) -----------

namespace {

/// Whether vector and scalar multiply-adds both round once (FMA instructions), so that kiln's
/// vector and scalar erf give the same bits; without them xsimd's round twice, std::fma once.
constexpr bool fma_instructions =
#if defined(__FMA__) || defined(__AVX512F__)
    true;
#else
    false;
#endif

/// One unit in the last place of the float nearest y (y a double).
double ulp_at(double y) {
  const float f = std::fabs(static_cast<float>(y));
  if (f < std::numeric_limits<float>::min()) return std::ldexp(1.0, -149);
  int e;
  std::frexp(f, &e);
  return std::ldexp(1.0, e - 24);
}

/// The largest errors in ulp of kiln's f32 erf over the non-negative floats from bits lo to hi,
/// every `stride`-th one: of the vector and the scalar fn::erf the kernels call (erf_f32_table
/// on AVX-512, erf_f32 elsewhere). Checks on the way that both are odd and within [-1, 1], and,
/// where both round each multiply-add once (FMA instructions), that they agree bit for bit.
struct erf_errors {
  double vec = 0, scalar = 0;
};
erf_errors erf_sweep(std::uint32_t lo, std::uint32_t hi, std::uint32_t stride) {
  using B = xsimd::batch<float>;
  constexpr int W = static_cast<int>(B::size);
  const auto erf = [](const auto& v) { return cpu::simd::fn::erf(v); };
  erf_errors worst;
  alignas(64) float in[W], out[W], neg[W];
  for (std::uint64_t u = lo; u <= hi; u += std::uint64_t{W} * stride) {
    for (int l = 0; l < W; ++l) {
      const auto bits = static_cast<std::uint32_t>(std::min<std::uint64_t>(u + std::uint64_t(l) * stride, hi));
      std::memcpy(&in[l], &bits, sizeof bits);
    }
    erf(B::load_aligned(in)).store_aligned(out);
    erf(-B::load_aligned(in)).store_aligned(neg);
    for (int l = 0; l < W; ++l) {
      const double want = std::erf(static_cast<double>(in[l]));
      const float one = erf(in[l]);
      worst.vec = std::max(worst.vec, std::fabs(out[l] - want) / ulp_at(want));
      worst.scalar = std::max(worst.scalar, std::fabs(one - want) / ulp_at(want));
      const bool same = !fma_instructions || one == out[l];
      if (!(same && neg[l] == -out[l] && std::fabs(out[l]) <= 1.0f && erf(-in[l]) == -one && std::fabs(one) <= 1.0f)) {
        INFO("x = " << in[l] << ", erf(x) = " << out[l] << ", erf(-x) = " << neg[l] << ", scalar " << one);
        CHECK(false);
        return {INFINITY, INFINITY};
      }
    }
  }
  return worst;
}

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

}  // namespace

// erf_f32, measured over every float: 5.95 ulp with FMA instructions, 7.17 without (SSE2 rounds
// the multiply and the add of each step separately); the largest errors are near erf = 1.
// Every multiply-add goes through cpu::fmadd, so the bound does not depend on whether the
// compiler contracts (xsimd 8.1's AVX-512 fma rounds twice: 7.17 with clang and under the
// sanitizers). Scalars use std::fma, one rounding, in every build: 5.95. On AVX-512 both take
// erf_f32_table: 2.04 ulp over every float.
#if defined(__AVX512F__)
constexpr double erf_vec_ulp_limit = 2.1, erf_scalar_ulp_limit = 2.1;
#elif defined(__FMA__)
constexpr double erf_vec_ulp_limit = 6.0, erf_scalar_ulp_limit = 6.0;
#else
constexpr double erf_vec_ulp_limit = 7.5, erf_scalar_ulp_limit = 6.0;
#endif

void check_erf_sweep(std::uint32_t lo, std::uint32_t hi, std::uint32_t stride) {
  const erf_errors worst = erf_sweep(lo, hi, stride);
  MESSAGE("f32 erf, largest error: vector " << worst.vec << " ulp, scalar " << worst.scalar << " ulp (floats "
                                            << lo << " to " << hi << ", every " << stride << ")");
  CHECK(worst.vec <= erf_vec_ulp_limit);
  CHECK(worst.scalar <= erf_scalar_ulp_limit);
}

TEST_CASE("f32 erf: error in ulp against erf in double, dense sweep with tails") {
  check_erf_sweep(0, bits_of(6.0f), 97);
  // denormals and tiny values, and every float of the tail where erf reaches 1
  check_erf_sweep(0, bits_of(1e-30f), 1009);
  check_erf_sweep(bits_of(3.5f), bits_of(4.5f), 1);
}

TEST_CASE("f32 erf: every float (slow; run with --no-skip)" * doctest::skip()) {
  check_erf_sweep(0, bits_of(std::numeric_limits<float>::max()), 1);
}

TEST_CASE("f32 erf and gelu: special values") {
  using B = xsimd::batch<float>;
  using cpu::simd::fn::erf_f32;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float x : {0.0f, -0.0f, inf, -inf, 3.92f, -3.92f, 1e30f, -1e30f, 1e-45f, -1e-45f}) {
    INFO("x = " << x);
    const float want = std::erf(x);
    CHECK(erf_f32(x) == want);
    CHECK(erf_f32(B(x)).get(0) == want);
    CHECK(cpu::simd::fn::erf(B(x)).get(0) == want);
    CHECK(cpu::simd::fn::erf(x) == want);
    CHECK(std::signbit(erf_f32(x)) == std::signbit(want));
    CHECK(std::signbit(cpu::simd::fn::erf(B(x)).get(0)) == std::signbit(want));
    CHECK(std::signbit(cpu::simd::fn::erf(x)) == std::signbit(want));
  }
  CHECK(std::isnan(erf_f32(nan)));
  CHECK(std::isnan(erf_f32(B(nan)).get(0)));
  CHECK(std::isnan(cpu::simd::fn::erf(B(nan)).get(0)));
  CHECK(std::isnan(cpu::simd::fn::erf(B(-nan)).get(0)));
  CHECK(std::isnan(cpu::simd::fn::erf(nan)));
  // gelu at large negative inputs is exactly zero: erf is exactly -1 there, not one ulp above
  using X = input<"x", f32, shape<dyn>>;
  tensor<float, 1> x({6}, {-1e30f, -1e6f, -1e3f, -10.0f, -inf, nan});
  const tensor<float, 1> y = eval(gelu(X{}), {{"x", x}});
  for (int i = 0; i < 4; ++i) CHECK(y.data()[i] == 0.0f);
  CHECK(std::isnan(y.data()[4]));  // -inf * 0, as the eager reference computes it
  CHECK(std::isnan(y.data()[5]));
  CHECK(kt::cpu_vs_eager(gelu(X{}), {{"x", x}}) == 0);
}

TEST_CASE("f64 exp at the edges: infinities, NaN, huge and denormal results (no undefined conversion)") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> edges = {-inf, inf,   nan,    -1e308, 1e308, -1000, -746,  -745.2, -745.1, -744,
                                     -720, -709, -708.5, -708.3, -1.5,  -0.0,  0.0,   1e-300, 1.5,    88.8,
                                     709,  709.4, 709.5, 709.7, 709.78, 709.8, 710,   1000};
  using X = input<"x", f64, shape<dyn>>;
  // a length that fills whole vectors and a tail, with the edges at every lane position
  tensor<double, 1> x({static_cast<index_t>(edges.size() * 3 + 1)});
  for (index_t i = 0; i < x.numel(); ++i) x(i) = edges[static_cast<std::size_t>(i) % edges.size()];
  const tensor<double, 1> y = eval(exp(X{}), X{} = x);
  for (index_t i = 0; i < x.numel(); ++i) {
    INFO("x = " << x(i));
    const double want = std::exp(x(i));
    // within 2 ulp; a denormal result within 2 of its units
    if (std::isnan(want)) CHECK(std::isnan(y(i)));
    else CHECK(kt::close(y(i), want, 4.5e-16, 1e-323));
  }
}

TEST_CASE("pow: C's special cases on both backends, f32 within an ulp, the gradient at a zero base") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> v = {0,    -0.0,  1,   -1,  2,   -2,   0.5,  -0.5, 3,    -3,  2.5,
                                 -2.5, inf,   -inf, nan, 1e30, 1e-30, 10,   -7,   0.75, 4096};
  const auto n = static_cast<index_t>(v.size() * v.size());
  tensor<double, 1> a({n}), b({n});
  for (std::size_t i = 0; i < v.size(); ++i)
    for (std::size_t j = 0; j < v.size(); ++j) {
      a(static_cast<index_t>(i * v.size() + j)) = v[i];
      b(static_cast<index_t>(i * v.size() + j)) = v[j];
    }
  const auto same = [](double got, double want, double rtol) {
    if (std::isnan(want)) return std::isnan(got);
    if (got == want) return std::signbit(got) == std::signbit(want);
    return std::fabs(got - want) <= rtol * std::fabs(want);
  };
  {
    using A = input<"a", f64, shape<dyn>>;
    using B = input<"b", f64, shape<dyn>>;
    for (const tensor<double, 1>& y : {eval(pow(A{}, B{}), A{} = a, B{} = b),
                                       eval(pow(A{}, B{}), A{} = a, B{} = b, eager::backend)})
      for (index_t k = 0; k < n; ++k) {
        INFO("pow(" << a(k) << ", " << b(k) << ") = " << y(k));
        CHECK(same(y(k), std::pow(a(k), b(k)), 0));
      }
  }
  {  // f32: every pair of the edges, and random pairs whose results span float's range
    constexpr index_t r = 4000;
    const auto ra = kt::random<float, 1>({r}, 0, 60);
    const auto rb = kt::random<float, 1>({r}, -21, 21);
    tensor<float, 1> af({n + r}), bf({n + r});
    for (index_t k = 0; k < n; ++k) af(k) = static_cast<float>(a(k)), bf(k) = static_cast<float>(b(k));
    for (index_t k = 0; k < r; ++k) af(n + k) = ra(k), bf(n + k) = rb(k);
    using A = input<"a", f32, shape<dyn>>;
    using B = input<"b", f32, shape<dyn>>;
    const tensor<float, 1> y = eval(pow(A{}, B{}), A{} = af, B{} = bf);
    for (index_t k = 0; k < n + r; ++k) {
      // the exact value (in double) rounded to float is within half an ulp; allow one
      const double exact = std::pow(static_cast<double>(af(k)), static_cast<double>(bf(k)));
      const float want = static_cast<float>(exact);
      INFO("pow(" << af(k) << ", " << bf(k) << ") = " << y(k) << ", want " << want);
      if (std::isnan(want) || std::isinf(want) || want == 0) CHECK(same(y(k), want, 0));
      else CHECK(std::fabs(y(k) - want) <= std::fabs(std::nextafter(want, 2 * want) - want));
    }
  }
  {  // d/da a^b at a = 0: b a^(b - 1), PyTorch's 1 for b = 1 and inf for b = 0.5
    using A = input<"a", f64, shape<2>>;
    using B = input<"b", f64, shape<2>>;
    const tensor<double, 1> a0({2}, {0.0, 0.0}), e({2}, {1.0, 0.5});
    const auto g = grad(sum(pow(A{}, B{})), A{});
    for (const tensor<double, 1>& d : {eval(g, A{} = a0, B{} = e), eval(g, A{} = a0, B{} = e, eager::backend)}) {
      CHECK(d(0) == 1.0);
      CHECK(d(1) == inf);
    }
  }
}

TEST_CASE("f32 erf and gelu: a kernel in scalar mode gives the bits of one in vectors") {
  // cast<f64>(...) mixes widths, so its kernel computes in scalars; erf and gelu alone in
  // vectors. Fresh random inputs over [-6, 6], and the tail [3.7, 3.92] where erf nears 1.
  using X = input<"x", f32, shape<dyn>>;
  tensor<float, 1> x = kt::rand<float, 1>({4099}, -6, 6);
  const tensor<float, 1> tail = kt::rand<float, 1>({1000}, 3.7, 3.92);
  for (index_t i = 0; i < tail.numel(); ++i) x.data()[i] = (i % 2 ? -1.0f : 1.0f) * tail.data()[i];
  const tensor<float, 1> e = eval(erf(X{}), {{"x", x}}), g = eval(gelu(X{}), {{"x", x}});
  const tensor<double, 1> e64 = eval(cast<f64>(erf(X{})), {{"x", x}}), g64 = eval(cast<f64>(gelu(X{})), {{"x", x}});
  int differ = 0;
  for (index_t i = 0; i < x.numel(); ++i) {
    CHECK(std::fabs(e.data()[i] - std::erf(static_cast<double>(x.data()[i]))) <= 1e-6);
    differ += e.data()[i] != static_cast<float>(e64.data()[i]) || g.data()[i] != static_cast<float>(g64.data()[i]);
  }
  if (fma_instructions) CHECK(differ == 0);
  else MESSAGE("scalar and vector erf differ in " << differ << " of " << x.numel() << " values (no FMA instructions)");
}

// ---- kiln's f32 exp (simd::fn::exp; VSCALEFPS on AVX-512, two powers of two elsewhere) ------

namespace {

/// The largest error in ulp of the vector f32 exp over the floats of one sign from bits lo to
/// hi, every `stride`-th one, against std::exp in double; results that overflow f32 must be
/// inf (or within an ulp of the largest float).
double exp_sweep(std::uint32_t lo, std::uint32_t hi, std::uint32_t stride, bool negative) {
  using B = xsimd::batch<float>;
  constexpr int W = static_cast<int>(B::size);
  double worst = 0;
  alignas(64) float in[W], out[W];
  for (std::uint64_t u = lo; u <= hi; u += std::uint64_t{W} * stride) {
    for (int l = 0; l < W; ++l) {
      const auto bits = static_cast<std::uint32_t>(std::min<std::uint64_t>(u + std::uint64_t(l) * stride, hi)) |
                        (negative ? 0x80000000u : 0u);
      std::memcpy(&in[l], &bits, sizeof bits);
    }
    cpu::simd::fn::exp(B::load_aligned(in)).store_aligned(out);
    for (int l = 0; l < W; ++l) {
      const double want = std::exp(static_cast<double>(in[l]));
      if (want > static_cast<double>(std::numeric_limits<float>::max())) {
        if (!std::isinf(out[l]) && std::fabs(out[l] - want) > ulp_at(want)) {
          INFO("x = " << in[l] << ", exp(x) = " << out[l]);
          CHECK(false);
        }
        continue;
      }
      worst = std::max(worst, std::fabs(out[l] - want) / ulp_at(want));
    }
  }
  return worst;
}

}  // namespace

// Over every third float of both signs (a one-off run): at most 0.89 ulp with FMA instructions
// (AVX2, AVX-512), 0.98 on SSE2. xsimd 8's float exp overflows to inf from x = 88.38 on, where
// e^x is still finite (up to 88.72): these tests fail with it.
TEST_CASE("f32 exp: error in ulp against exp in double, dense sweep") {
  const double up = exp_sweep(0, bits_of(89.0f), 997, false), down = exp_sweep(0, bits_of(104.0f), 997, true);
  MESSAGE("exp: largest error " << std::max(up, down) << " ulp (every 997th float in [-104, 89])");
  CHECK(up <= 2.0);
  CHECK(down <= 2.0);
  // every float near overflow, and where the result is denormal
  CHECK(exp_sweep(bits_of(88.0f), bits_of(89.0f), 1, false) <= 2.0);
  CHECK(exp_sweep(bits_of(87.0f), bits_of(104.0f), 7, true) <= 2.0);
}

// On AVX2 a vector with one lane outside |x| <= 87 (or NaN) takes the other path as a whole
// (simd::fn::exp_f32_table): every lane must still come out right, whichever lane it is.
TEST_CASE("f32 exp: vectors that mix ordinary lanes with one far out, NaN or inf") {
  using B = xsimd::batch<float>;
  constexpr int W = static_cast<int>(B::size);
  const float inf = std::numeric_limits<float>::infinity();
  std::mt19937 gen(20261123);
  std::uniform_real_distribution<float> ordinary(-80.0f, 80.0f);
  for (float odd : {88.5f, -87.5f, -100.0f, 87.01f, -87.01f, inf, -inf, std::numeric_limits<float>::quiet_NaN()}) {
    for (int at = 0; at < W; ++at) {
      alignas(64) float in[W], out[W];
      for (int l = 0; l < W; ++l) in[l] = l == at ? odd : ordinary(gen);
      cpu::simd::fn::exp(B::load_aligned(in)).store_aligned(out);
      for (int l = 0; l < W; ++l) {
        INFO("x = " << in[l] << " in lane " << l << ", exp(x) = " << out[l]);
        const double want = std::exp(static_cast<double>(in[l]));
        if (std::isnan(in[l])) CHECK(std::isnan(out[l]));
        else if (std::isinf(in[l])) CHECK(out[l] == std::exp(in[l]));
        else CHECK(std::fabs(out[l] - want) <= ulp_at(want));
      }
    }
  }
}

TEST_CASE("f32 exp: special values and the edge of overflow, through the CPU backend") {
  using B = xsimd::batch<float>;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // exactly what std::exp gives where it is 1, inf or 0; within an ulp at the last finite
  // values and in the denormals
  for (float x : {0.0f, -0.0f, -1e-45f, 1e-30f, inf, 88.72284f, 89.0f, 1e30f, -inf, -104.0f, -1e30f}) {
    INFO("x = " << x);
    CHECK(cpu::simd::fn::exp(B(x)).get(0) == std::exp(x));
  }
  for (float x : {88.72283f, 88.5f, -87.3f, -100.0f, -103.2f}) {
    INFO("x = " << x);
    const double want = std::exp(static_cast<double>(x));
    CHECK(std::fabs(cpu::simd::fn::exp(B(x)).get(0) - want) <= ulp_at(want));
  }
  CHECK(std::isnan(cpu::simd::fn::exp(B(nan)).get(0)));
  using X = input<"x", f32, shape<dyn>>;
  CHECK(kt::cpu_vs_eager(exp(X{}), {{"x", kt::rand<float, 1>({1001}, 88.3, 88.72)}}) <= 1e-6);
  CHECK(kt::cpu_vs_eager(exp(X{}), {{"x", kt::rand<float, 1>({1001}, -103, -87)}}) <= 1e-6);
}

// ---- kiln's f32 tanh (simd::fn::tanh: tanh_f32_table on AVX2 with FMA and on AVX-512) ----------

namespace {

/// The largest error in ulp of the vector f32 tanh over the non-negative floats from bits lo
/// to hi, every `stride`-th one, against std::tanh in double. Checks on the way that it is odd
/// and within [-1, 1].
double tanh_sweep(std::uint32_t lo, std::uint32_t hi, std::uint32_t stride) {
  using B = xsimd::batch<float>;
  constexpr int W = static_cast<int>(B::size);
  double worst = 0;
  alignas(64) float in[W], out[W], neg[W];
  for (std::uint64_t u = lo; u <= hi; u += std::uint64_t{W} * stride) {
    for (int l = 0; l < W; ++l) {
      const auto bits = static_cast<std::uint32_t>(std::min<std::uint64_t>(u + std::uint64_t(l) * stride, hi));
      std::memcpy(&in[l], &bits, sizeof bits);
    }
    cpu::simd::fn::tanh(B::load_aligned(in)).store_aligned(out);
    cpu::simd::fn::tanh(-B::load_aligned(in)).store_aligned(neg);
    for (int l = 0; l < W; ++l) {
      if (!(neg[l] == -out[l] && std::fabs(out[l]) <= 1.0f)) {
        INFO("x = " << in[l] << ", tanh(x) = " << out[l] << ", tanh(-x) = " << neg[l]);
        CHECK(false);
        return INFINITY;
      }
      const double want = std::tanh(static_cast<double>(in[l]));
      worst = std::max(worst, std::fabs(out[l] - want) / ulp_at(want));
    }
  }
  return worst;
}

}  // namespace

// tanh_f32_table, over every float: 2.70 ulp (near 0.03, where N, N + 2 and the quotient each
// round), the same bits on AVX2 and AVX-512. xsimd::tanh, which the other instruction sets
// take: 1.35 (SSE2).
#if (defined(__AVX2__) && defined(__FMA__)) || defined(__AVX512F__)
constexpr double tanh_ulp_limit = 2.75;
#else
constexpr double tanh_ulp_limit = 2.0;
#endif

TEST_CASE("f32 tanh: error in ulp against tanh in double, dense sweep") {
  // [0, 10] every 97th float (beyond 9.02 tanh is 1), every float near 0.03 (the largest
  // errors) and near 9 (where it reaches 1), and the denormals and tiny values
  const double main = tanh_sweep(0, bits_of(10.0f), 97);
  MESSAGE("f32 tanh: largest error " << main << " ulp (every 97th float in [0, 10])");
  CHECK(main <= tanh_ulp_limit);
  CHECK(tanh_sweep(bits_of(0.025f), bits_of(0.035f), 1) <= tanh_ulp_limit);
  CHECK(tanh_sweep(bits_of(8.5f), bits_of(9.5f), 1) <= tanh_ulp_limit);
  CHECK(tanh_sweep(0, bits_of(1e-30f), 1009) <= tanh_ulp_limit);
}

TEST_CASE("f32 tanh: special values, and gelu_tanh through the CPU backend") {
  using B = xsimd::batch<float>;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // exactly what std::tanh gives at 0, +-1 and past them, and for tiny values (tanh x = x)
  for (float x : {0.0f, -0.0f, 1e-45f, -1e-40f, 1e-20f, 9.02f, -9.02f, 9.1f, 10.0f, -1e30f, inf, -inf}) {
    INFO("x = " << x);
    const float y = cpu::simd::fn::tanh(B(x)).get(0);
    CHECK(y == std::tanh(x));
    CHECK(std::signbit(y) == std::signbit(x));
  }
  CHECK(std::isnan(cpu::simd::fn::tanh(B(nan)).get(0)));
  CHECK(std::isnan(cpu::simd::fn::tanh(B(-nan)).get(0)));
  using X = input<"x", f32, shape<dyn>>;
  CHECK(kt::cpu_vs_eager(tanh(X{}), {{"x", kt::rand<float, 1>({1001}, -12, 12)}}) <= 1e-6);
  CHECK(kt::cpu_vs_eager(gelu_tanh(X{}), {{"x", kt::rand<float, 1>({1001}, -6, 6)}}) <= 1e-6);
}
