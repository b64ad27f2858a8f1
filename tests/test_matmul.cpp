// Batched matmul with broadcasting and transposed operands, against a plain loop.
#include "support.hpp"

using namespace kiln;

TEST_CASE("matmul at hand-computed values") {
  tensor<float, 2> a({2, 3}, {1, 2, 3, 4, 5, 6});
  tensor<float, 2> b({3, 2}, {7, 8, 9, 10, 11, 12});
  tensor<float, 2> c = matmul(a, b);
  CHECK(c(0, 0) == 58);
  CHECK(c(0, 1) == 64);
  CHECK(c(1, 0) == 139);
  CHECK(c(1, 1) == 154);
}

TEST_CASE("odd sizes and transposed views against a plain loop") {
  for (index_t m : {1, 7, 17})
    for (index_t k : {1, 9, 33})
      for (index_t n : {1, 5, 31}) {
        auto a = kt::random<double, 2>({m, k});
        auto bt = kt::random<double, 2>({n, k});
        auto b = bt.transpose();  // a strided view, no copy
        tensor<double, 2> c = matmul(a, b);
        for (index_t i = 0; i < m; ++i)
          for (index_t j = 0; j < n; ++j) {
            double acc = 0;
            for (index_t p = 0; p < k; ++p) acc += a(i, p) * bt(j, p);
            REQUIRE(kt::close(c(i, j), acc, 1e-12, 1e-12));
          }
      }
}

TEST_CASE("batched matmul broadcasts batch extents") {
  auto a = kt::random<float, 4>({2, 1, 3, 4});
  auto b = kt::random<float, 3>({5, 4, 6});
  tensor<float, 4> c = matmul(a, b);
  REQUIRE(c.shape() == std::array<index_t, 4>{2, 5, 3, 6});
  for (index_t x = 0; x < 2; ++x)
    for (index_t y = 0; y < 5; ++y)
      for (index_t i = 0; i < 3; ++i)
        for (index_t j = 0; j < 6; ++j) {
          double acc = 0;
          for (index_t p = 0; p < 4; ++p) acc += double(a(x, 0, i, p)) * b(y, p, j);
          REQUIRE(kt::close(c(x, y, i, j), acc, 1e-5, 1e-5));
        }
}

TEST_CASE("matmul with an empty inner extent gives zeros; integers multiply exactly") {
  tensor<float, 2> a({2, 0}), b({0, 3});
  tensor<float, 2> c = matmul(a, b);
  CHECK(c.shape() == std::array<index_t, 2>{2, 3});
  CHECK(c(1, 2) == 0);
  tensor<int, 2> p({1, 2}, {3, 4}), q({2, 1}, {5, 6});
  tensor<int, 2> r = matmul(p, q);
  CHECK(r(0, 0) == 39);
}

TEST_CASE("an MLP layer with placeholders, bound by name") {
  auto x = input<"x", f32, shape<dyn, 5>>{};
  auto w = param<"w", f32, shape<5, 3>>{};
  auto b = param<"b", f32, shape<3>>{};
  auto y = relu(matmul(x, w) + b);
  static_assert(decltype(y)::shape == dims{dyn, 3});
  auto xv = kt::random<float, 2>({4, 5});
  auto wv = kt::random<float, 2>({5, 3});
  auto bv = kt::random<float, 1>({3});
  tensor<float, 2> out = eval(y, {{"x", xv}, {"w", wv}, {"b", bv}});
  for (index_t i = 0; i < 4; ++i)
    for (index_t j = 0; j < 3; ++j) {
      double acc = bv(j);
      for (index_t p = 0; p < 5; ++p) acc += double(xv(i, p)) * wv(p, j);
      REQUIRE(kt::close(out(i, j), std::max(acc, 0.0), 1e-5, 1e-6));
    }
}
