// Pointwise ops: each against hand-computed values, then against a plain loop on fresh random
// inputs, with broadcasting, scalars and dtype promotion.
#include "support.hpp"

#include <functional>

using namespace kiln;

namespace {
using F = std::function<double(double)>;

/// Checks a unary expression builder against a reference function on random inputs.
template <class Build>
void check_unary(Build build, const F& ref, double lo, double hi, double rtol = 1e-6) {
  auto x = kt::random<float, 2>({7, 17}, lo, hi);
  tensor<float, 2> y = build(x);
  kt::each(y, [&](const index_t* i) {
    const double want = ref(kt::at(x, i));
    REQUIRE(kt::close(kt::at(y, i), want, rtol, 1e-6));
  });
  auto xd = kt::random<double, 1>({33}, lo, hi);
  tensor<double, 1> yd = build(xd);
  for (index_t i = 0; i < 33; ++i) REQUIRE(kt::close(yd(i), ref(xd(i)), 1e-14, 1e-15));
}
}  // namespace

TEST_CASE("unary ops at hand-computed points") {
  tensor<double, 1> x({4}, {-2.0, -0.5, 0.0, 1.0});
  auto v = [&](auto e, int i) { return tensor<double, 1>(e)(i); };
  CHECK(v(-x, 0) == 2.0);
  CHECK(v(abs(x), 1) == 0.5);
  CHECK(v(relu(x), 0) == 0.0);
  CHECK(v(relu(x), 3) == 1.0);
  CHECK(v(exp(x), 2) == 1.0);
  CHECK(v(exp(x), 3) == doctest::Approx(2.718281828459045).epsilon(1e-15));
  CHECK(v(log(abs(x)), 0) == doctest::Approx(0.6931471805599453).epsilon(1e-15));
  CHECK(v(sqrt(abs(x)), 0) == doctest::Approx(1.4142135623730951).epsilon(1e-15));
  CHECK(v(rsqrt(abs(x)), 1) == doctest::Approx(1.4142135623730951).epsilon(1e-15));
  CHECK(v(tanh(x), 3) == doctest::Approx(0.7615941559557649).epsilon(1e-15));
  CHECK(v(sigmoid(x), 2) == 0.5);
  CHECK(v(sigmoid(x), 3) == doctest::Approx(0.7310585786300049).epsilon(1e-15));
  CHECK(v(gelu(x), 3) == doctest::Approx(0.8413447460685429).epsilon(1e-14));  // 1 * Phi(1)
  CHECK(v(gelu(x), 0) == doctest::Approx(-0.04550026389635842).epsilon(1e-13));
  CHECK(v(gelu_tanh(x), 3) == doctest::Approx(0.8411919906082768).epsilon(1e-14));
  CHECK(v(sin(x), 1) == doctest::Approx(-0.479425538604203).epsilon(1e-15));
  CHECK(v(cos(x), 1) == doctest::Approx(0.8775825618903728).epsilon(1e-15));
  CHECK(v(erf(x), 3) == doctest::Approx(0.8427007929497149).epsilon(1e-15));
}

TEST_CASE("unary ops against a plain loop on random inputs") {
  check_unary([](const auto& x) { return -x; }, [](double a) { return -a; }, -3, 3);
  check_unary([](const auto& x) { return abs(x); }, [](double a) { return std::fabs(a); }, -3, 3);
  check_unary([](const auto& x) { return exp(x); }, [](double a) { return std::exp(a); }, -5, 5, 2e-6);
  check_unary([](const auto& x) { return log(x); }, [](double a) { return std::log(a); }, 0.01, 50, 2e-6);
  check_unary([](const auto& x) { return sqrt(x); }, [](double a) { return std::sqrt(a); }, 0, 50);
  check_unary([](const auto& x) { return rsqrt(x); }, [](double a) { return 1 / std::sqrt(a); }, 0.01, 50);
  check_unary([](const auto& x) { return tanh(x); }, [](double a) { return std::tanh(a); }, -4, 4, 2e-6);
  check_unary([](const auto& x) { return sigmoid(x); }, [](double a) { return 1 / (1 + std::exp(-a)); }, -8, 8, 2e-6);
  check_unary([](const auto& x) { return relu(x); }, [](double a) { return a > 0 ? a : 0; }, -3, 3);
  check_unary([](const auto& x) { return gelu(x); }, [](double a) { return 0.5 * a * (1 + std::erf(a / std::sqrt(2.0))); }, -4, 4, 2e-6);
  check_unary([](const auto& x) { return sin(x); }, [](double a) { return std::sin(a); }, -6, 6, 2e-6);
  check_unary([](const auto& x) { return cos(x); }, [](double a) { return std::cos(a); }, -6, 6, 2e-6);
  check_unary([](const auto& x) { return erf(x); }, [](double a) { return std::erf(a); }, -3, 3, 2e-6);
}

TEST_CASE("binary ops: hand values, scalars on either side, broadcasting") {
  tensor<float, 2> a({2, 3}, {1, 2, 3, 4, 5, 6});
  tensor<float, 1> b({3}, {10, 20, 30});
  tensor<float, 2> col({2, 1}, {100, 200});
  tensor<float, 2> s = a + b;  // row broadcast
  CHECK(s(1, 2) == 36);
  tensor<float, 2> d = a - col;  // column broadcast
  CHECK(d(0, 1) == -98);
  CHECK(d(1, 0) == -196);
  tensor<float, 2> m = col * b;  // outer product by broadcasting: [2,1] x [3] -> [2,3]
  CHECK(m(1, 2) == 6000);
  tensor<float, 2> q = 1 / a;  // scalar on the left
  CHECK(q(0, 1) == 0.5f);
  tensor<float, 2> r = a / 4;
  CHECK(r(0, 0) == 0.25f);
  tensor<float, 2> p = pow(a, 2);
  CHECK(p(1, 2) == 36);
  tensor<float, 2> p2 = pow(2, a);
  CHECK(p2(0, 2) == 8);
  tensor<float, 2> mx = max(a, 3.5);
  CHECK(mx(0, 0) == 3.5f);
  CHECK(mx(1, 1) == 5);
  tensor<float, 2> mn = min(a, b - 17);  // b - 17 = -7, 3, 13
  CHECK(mn(0, 0) == -7);
  CHECK(mn(1, 1) == 3);
  CHECK(mn(1, 2) == 6);
}

TEST_CASE("binary ops against a plain loop, with every broadcasting pattern") {
  auto a = kt::random<float, 3>({4, 1, 17});
  auto b = kt::random<float, 2>({7, 17}, 0.5, 3);
  auto c = kt::random<float, 3>({4, 7, 1});
  tensor<float, 3> y = (a + b) * c - a / b;
  tensor<float, 3> z = pow(b, c) + max(a, c) - min(b, a);
  for (index_t i = 0; i < 4; ++i)
    for (index_t j = 0; j < 7; ++j)
      for (index_t k = 0; k < 17; ++k) {
        const float av = a(i, 0, k), bv = b(j, k), cv = c(i, j, 0);
        REQUIRE(kt::close(y(i, j, k), (av + bv) * cv - av / bv, 1e-5, 1e-5));
        REQUIRE(kt::close(z(i, j, k), std::pow(bv, cv) + std::max(av, cv) - std::min(bv, av), 1e-5, 1e-5));
      }
}

TEST_CASE("max and min propagate NaN, as in PyTorch") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  tensor<float, 1> a({3}, {1, nan, 3});
  tensor<float, 1> b({3}, {nan, 2, 1});
  tensor<float, 1> m = max(a, b);
  CHECK(std::isnan(m(0)));
  CHECK(std::isnan(m(1)));
  CHECK(m(2) == 3);
  tensor<float, 1> n = min(a, b);
  CHECK(std::isnan(n(0)));
  CHECK(n(2) == 1);
}

TEST_CASE("comparisons give bool tensors; where selects") {
  tensor<float, 1> a({4}, {1, 2, 3, 4});
  tensor<float, 1> b({4}, {4, 2, 2, 1});
  tensor<bool, 1> lt_ = a < b, le_ = a <= b, gt_ = a > b, ge_ = a >= b, eq_ = eq(a, b), ne_ = ne(a, b);
  const bool want_lt[] = {true, false, false, false}, want_le[] = {true, true, false, false};
  for (int i = 0; i < 4; ++i) {
    CHECK(lt_(i) == want_lt[i]);
    CHECK(le_(i) == want_le[i]);
    CHECK(gt_(i) == !want_le[i]);
    CHECK(ge_(i) == !want_lt[i]);
    CHECK(eq_(i) == (i == 1));
    CHECK(ne_(i) == (i != 1));
  }
  tensor<float, 1> w = where(a > 2, a, b * 10);
  CHECK(w(0) == 40);
  CHECK(w(3) == 4);
  tensor<float, 1> relu_like = where(a - 2.5f > 0, a - 2.5f, 0.0f);
  CHECK(relu_like(0) == 0);
  CHECK(relu_like(3) == 1.5f);
  // condition broadcast along rows
  tensor<bool, 2> cond({2, 1}, {true, false});
  tensor<float, 2> wb = where(cond, a, -a);
  CHECK(wb(0, 2) == 3);
  CHECK(wb(1, 2) == -3);
}

TEST_CASE("dtype promotion is explicit in the result type") {
  tensor<int, 1> n({3}, {1, 2, 3});
  tensor<float, 1> f({3}, {0.5f, 0.5f, 0.5f});
  tensor<double, 1> d({3}, {1, 1, 1});
  static_assert(decltype(n + f)::dt == f32);
  static_assert(decltype(n + d)::dt == f64);
  static_assert(decltype(n * 2)::dt == i32);
  static_assert(decltype(n * 2.5)::dt == f32);
  static_assert(decltype(f * 2.5)::dt == f32);  // a double scalar does not widen f32
  static_assert(decltype(n / n)::dt == f32);    // true division
  static_assert(decltype(exp(n))::dt == f32);
  static_assert(decltype(n < f)::dt == boolean);
  static_assert(decltype(sum(n))::dt == i64);
  tensor<float, 1> q = n / 2;
  CHECK(q(0) == 0.5f);
  tensor<int, 1> m = n * 3 - 1;
  CHECK(m(2) == 8);
  tensor<int, 1> pi = pow(n, 3);
  CHECK(pi(2) == 27);
  tensor<std::int64_t, 1> big = cast<i64>(n) * std::int64_t{3000000000};
  CHECK(big(1) == 6000000000);
  tensor<float, 1> e = exp(n);
  CHECK(e(0) == doctest::Approx(2.7182817f));
  tensor<bfloat16, 1> h({2}, {bfloat16(1.5f), bfloat16(-3.0f)});
  tensor<bfloat16, 1> h2 = h * h + 1;  // bf16 arithmetic happens in float, rounded on store
  CHECK(float(h2(0)) == 3.25f);
  CHECK(float(h2(1)) == 10.0f);
  tensor<float, 1> hf = cast<f32>(h) / 3;
  CHECK(hf(0) == 0.5f);
  tensor<bool, 1> flags({3}, {true, false, true});
  tensor<std::int64_t, 1> fl = flags + 1;  // bool + int scalar -> i64
  CHECK(fl(0) == 2);
  CHECK(fl(1) == 1);
}

TEST_CASE("integer overflow wraps instead of being undefined") {
  tensor<int, 1> a({1}, {std::numeric_limits<int>::max()});
  tensor<int, 1> b = a + 1;
  CHECK(b(0) == std::numeric_limits<int>::min());
  CHECK_THROWS_AS((tensor<int, 1>(pow(a, -1))), std::invalid_argument);
}
