// Reductions over chosen axes, with and without keepdim, against hand values and plain loops.
#include "support.hpp"

using namespace kiln;

TEST_CASE("reductions at hand-computed values") {
  tensor<float, 2> a({2, 3}, {1, -2, 3, 4, 5, -6});
  tensor<float, 1> s0 = sum<0>(a);
  CHECK(s0(0) == 5);
  CHECK(s0(2) == -3);
  tensor<float, 1> s1 = sum<1>(a);
  CHECK(s1(0) == 2);
  CHECK(s1(1) == 3);
  tensor<float, 0> all = sum(a);
  CHECK(all() == 5);
  tensor<float, 2> k = sum<1>(a, keepdim);
  CHECK(k.shape() == std::array<index_t, 2>{2, 1});
  CHECK(k(1, 0) == 3);
  tensor<float, 1> m = mean<-1>(a);  // negative axes count from the end
  CHECK(m(0) == doctest::Approx(2.0 / 3));
  tensor<float, 1> mx = max<1>(a);
  CHECK(mx(0) == 3);
  CHECK(mx(1) == 5);
  tensor<float, 1> mn = min<0>(a);
  CHECK(mn(0) == 1);
  CHECK(mn(1) == -2);
  CHECK(mn(2) == -6);
  tensor<float, 0> gmax = max(a);
  CHECK(gmax() == 5);
  tensor<float, 2> mk = amin<0>(a, keepdim);
  CHECK(mk.shape() == std::array<index_t, 2>{1, 3});
}

TEST_CASE("every axis subset of a rank-3 tensor against a plain loop") {
  auto x = kt::random<double, 3>({3, 5, 7});
  auto check = [&](auto expr, std::uint32_t mask, bool is_mean) {
    tensor<double, 3> got = expr;  // keepdim keeps the rank
    for (index_t i = 0; i < got.size(0); ++i)
      for (index_t j = 0; j < got.size(1); ++j)
        for (index_t k = 0; k < got.size(2); ++k) {
          double acc = 0;
          index_t count = 0;
          for (index_t a = 0; a < 3; ++a)
            for (index_t b = 0; b < 5; ++b)
              for (index_t c = 0; c < 7; ++c) {
                if (!(mask & 1) && a != i) continue;
                if (!(mask & 2) && b != j) continue;
                if (!(mask & 4) && c != k) continue;
                acc += x(a, b, c);
                ++count;
              }
          REQUIRE(kt::close(got(i, j, k), is_mean ? acc / count : acc, 1e-12, 1e-12));
        }
  };
  check(sum<0>(x, keepdim), 1, false);
  check(sum<1>(x, keepdim), 2, false);
  check(sum<2>(x, keepdim), 4, false);
  check(sum<0, 1>(x, keepdim), 3, false);
  check(sum<0, 2>(x, keepdim), 5, false);
  check(sum<1, 2>(x, keepdim), 6, false);
  check(sum<0, 1, 2>(x, keepdim), 7, false);
  check(mean<0, 2>(x, keepdim), 5, true);
  check(mean<1>(x, keepdim), 2, true);
}

TEST_CASE("max and min over an axis against a plain loop; NaN propagates") {
  auto x = kt::random<float, 2>({17, 33});
  tensor<float, 1> mx = max<0>(x);
  tensor<float, 1> mn = min<1>(x);
  for (index_t j = 0; j < 33; ++j) {
    float best = x(0, j);
    for (index_t i = 1; i < 17; ++i) best = std::max(best, x(i, j));
    REQUIRE(mx(j) == best);
  }
  for (index_t i = 0; i < 17; ++i) {
    float best = x(i, 0);
    for (index_t j = 1; j < 33; ++j) best = std::min(best, x(i, j));
    REQUIRE(mn(i) == best);
  }
  x(3, 4) = std::numeric_limits<float>::quiet_NaN();
  tensor<float, 1> mx2 = max<0>(x);
  CHECK(std::isnan(mx2(4)));
  CHECK(!std::isnan(mx2(5)));
}

TEST_CASE("integer sums accumulate in i64; float sums are accurate") {
  tensor<int, 1> n({3}, {std::numeric_limits<int>::max(), std::numeric_limits<int>::max(), 2});
  tensor<std::int64_t, 0> s = sum(n);
  CHECK(s() == 2 * static_cast<std::int64_t>(std::numeric_limits<int>::max()) + 2);
  tensor<bool, 1> b({4}, {true, false, true, true});
  tensor<std::int64_t, 0> count = sum(b);
  CHECK(count() == 3);
  // 1e8 + many small values: one float accumulator would lose them all (1e8 + 1 rounds to
  // 1e8). The CPU backend's blocks of float steps in double lanes lose at most the few in
  // 1e8's block: within one ulp (8) of the exact sum; the eager reference sums in double
  tensor<float, 1> f({1001});
  f(0) = 1e8f;
  for (index_t i = 1; i < 1001; ++i) f(i) = 1.0f;
  tensor<float, 0> fs = sum(f);
  CHECK(std::abs(static_cast<double>(fs()) - (1e8 + 1000.0)) <= 8.0);
  const tensor<float, 0> ref = eval(sum(input<"f", f32, shape<1001>>{}), {{"f", f}}, eager::backend);
  CHECK(ref() == 1e8f + 1000.0f);
}

TEST_CASE("reductions of empty tensors") {
  tensor<float, 2> e({0, 4});
  tensor<float, 1> s = sum<0>(e);
  CHECK(s.size(0) == 4);
  CHECK(s(2) == 0);
  tensor<float, 1> m = mean<0>(e);
  CHECK(std::isnan(m(0)));
  tensor<float, 1> s1 = sum<1>(e);
  CHECK(s1.size(0) == 0);
  CHECK_THROWS_AS((tensor<float, 1>(max<0>(e))), shape_error);
}
