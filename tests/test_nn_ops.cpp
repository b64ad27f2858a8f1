// High-level ops (as the eager backend runs them before decomposition) against plain loops.
#include "support.hpp"

using namespace kiln;

TEST_CASE("softmax and log_softmax along each axis, stable for large inputs") {
  auto x = kt::random<double, 2>({5, 7}, -3, 3);
  for (double scale : {1.0, 1000.0}) {
    auto xs = tensor<double, 2>(x * scale);
    tensor<double, 2> s1 = softmax(xs), l1 = log_softmax(xs);
    tensor<double, 2> s0 = softmax<0>(xs);
    for (index_t i = 0; i < 5; ++i) {
      double mx = -1e300, total = 0;
      for (index_t j = 0; j < 7; ++j) mx = std::max(mx, xs(i, j));
      for (index_t j = 0; j < 7; ++j) total += std::exp(xs(i, j) - mx);
      for (index_t j = 0; j < 7; ++j) {
        REQUIRE(kt::close(s1(i, j), std::exp(xs(i, j) - mx) / total, 1e-12, 1e-300));
        REQUIRE(kt::close(l1(i, j), xs(i, j) - mx - std::log(total), 1e-12, 1e-12));
        REQUIRE(std::isfinite(l1(i, j)));
      }
    }
    for (index_t j = 0; j < 7; ++j) {
      double col = 0;
      for (index_t i = 0; i < 5; ++i) col += s0(i, j);
      REQUIRE(col == doctest::Approx(1.0).epsilon(1e-12));
    }
  }
}

TEST_CASE("layer_norm over the trailing axes that gamma covers") {
  auto x = kt::random<double, 3>({2, 3, 4});
  auto g = kt::random<double, 1>({4});
  auto b = kt::random<double, 1>({4});
  tensor<double, 3> y = layer_norm(x, g, b, 1e-5);
  for (index_t i = 0; i < 2; ++i)
    for (index_t j = 0; j < 3; ++j) {
      double mu = 0, var = 0;
      for (index_t k = 0; k < 4; ++k) mu += x(i, j, k) / 4;
      for (index_t k = 0; k < 4; ++k) var += (x(i, j, k) - mu) * (x(i, j, k) - mu) / 4;
      for (index_t k = 0; k < 4; ++k)
        REQUIRE(kt::close(y(i, j, k), (x(i, j, k) - mu) / std::sqrt(var + 1e-5) * g(k) + b(k), 1e-12, 1e-12));
    }
  auto g2 = kt::random<double, 2>({3, 4});
  tensor<double, 3> y2 = layer_norm(x, g2, g2 * 0.5, 1e-3);  // over the last two axes
  for (index_t i = 0; i < 2; ++i) {
    double mu = 0, var = 0;
    for (index_t j = 0; j < 3; ++j)
      for (index_t k = 0; k < 4; ++k) mu += x(i, j, k) / 12;
    for (index_t j = 0; j < 3; ++j)
      for (index_t k = 0; k < 4; ++k) var += (x(i, j, k) - mu) * (x(i, j, k) - mu) / 12;
    for (index_t j = 0; j < 3; ++j)
      for (index_t k = 0; k < 4; ++k)
        REQUIRE(kt::close(y2(i, j, k), (x(i, j, k) - mu) / std::sqrt(var + 1e-3) * g2(j, k) + 0.5 * g2(j, k), 1e-12, 1e-12));
  }
}

TEST_CASE("linear, mse_loss, var, silu, reciprocal at hand-computed values") {
  tensor<float, 2> x({2, 3}, {1, 2, 3, 4, 5, 6});
  tensor<float, 2> w({2, 3}, {1, 0, -1, 0.5f, 0.5f, 0.5f});  // [out, in]
  tensor<float, 1> b({2}, {10, 20});
  tensor<float, 2> y = linear(x, w, b);
  CHECK(y(0, 0) == 8);     // 1 - 3 + 10
  CHECK(y(0, 1) == 23);    // 3 + 20
  CHECK(y(1, 1) == 27.5f); // 7.5 + 20
  tensor<float, 1> v({3}, {1, 2, 3});
  tensor<float, 1> yv = linear(v, w, b);
  CHECK(yv(0) == 8);
  tensor<float, 0> m = mse_loss(x, x + 2);
  CHECK(m() == 4);
  tensor<float, 1> var1 = var<1>(x);
  CHECK(var1(0) == doctest::Approx(1.0));  // unbiased: ((1-2)^2 + 0 + (3-2)^2) / 2
  tensor<float, 0> var_all = var(x);
  CHECK(var_all() == doctest::Approx(3.5));
  tensor<double, 1> s = silu(tensor<double, 1>({2}, {0.0, 1.0}));
  CHECK(s(0) == 0);
  CHECK(s(1) == doctest::Approx(0.7310585786300049).epsilon(1e-15));
  tensor<float, 1> r = reciprocal(v);
  CHECK(r(1) == 0.5f);
}

TEST_CASE("cross_entropy against a plain loop, for i32 and i64 labels and large logits") {
  auto z = kt::random<double, 2>({6, 5}, -4, 4);
  tensor<std::int64_t, 1> y({6}, {0, 4, 2, 2, 1, 3});
  tensor<int, 1> y32({6}, {0, 4, 2, 2, 1, 3});
  for (double scale : {1.0, 500.0}) {
    auto zs = tensor<double, 2>(z * scale);
    double want = 0;
    for (index_t i = 0; i < 6; ++i) {
      double mx = -1e300, total = 0;
      for (index_t j = 0; j < 5; ++j) mx = std::max(mx, zs(i, j));
      for (index_t j = 0; j < 5; ++j) total += std::exp(zs(i, j) - mx);
      want += (mx + std::log(total) - zs(i, y(i))) / 6;
    }
    tensor<double, 0> got = cross_entropy(zs, y);
    tensor<double, 0> got32 = cross_entropy(zs, y32);
    CHECK(kt::close(got(), want, 1e-12, 1e-12));
    CHECK(kt::close(got32(), want, 1e-12, 1e-12));
  }
  tensor<int, 1> bad({6}, {0, 5, 0, 0, 0, 0});
  // the eager backend checks labels; the decomposed graph the CPU backend runs has no such check
  CHECK_THROWS_WITH_AS(eval(cross_entropy(z, bad), {}, eager::backend),
                       "kiln: cross_entropy: label 5 of row 1 is outside [0, 5)", std::invalid_argument);
}
