// Eager style: bound tensors in expressions, evaluated on assignment, with aliasing handled.
#include "support.hpp"

using namespace kiln;

TEST_CASE("c = a + b * 2 evaluates on assignment into c's own storage") {
  auto a = kt::random<float, 2>({5, 7});
  auto b = kt::random<float, 2>({5, 7});
  tensor<float, 2> c({5, 7});
  const float* storage = c.data();
  c = a + b * 2;
  CHECK(c.data() == storage);  // the destination was written, not replaced
  for (index_t i = 0; i < 5; ++i)
    for (index_t j = 0; j < 7; ++j) REQUIRE(c(i, j) == a(i, j) + b(i, j) * 2);
  tensor<float, 2> fresh;  // undefined: assignment allocates
  fresh = a - b;
  CHECK(fresh.defined());
  CHECK(fresh(4, 6) == a(4, 6) - b(4, 6));
}

TEST_CASE("aliasing: reading and writing the same storage gives the right answer") {
  auto a = kt::random<float, 2>({6, 6});
  const tensor<float, 2> orig = a.clone();
  a = transpose(a) + a;  // every element reads another one that is being overwritten
  for (index_t i = 0; i < 6; ++i)
    for (index_t j = 0; j < 6; ++j) REQUIRE(a(i, j) == orig(j, i) + orig(i, j));
  // a pure view of the destination: the result must not be read while it is written
  auto sq = kt::random<float, 2>({5, 5});
  const tensor<float, 2> sq0 = sq.clone();
  sq = transpose(sq);
  for (index_t i = 0; i < 5; ++i)
    for (index_t j = 0; j < 5; ++j) REQUIRE(sq(i, j) == sq0(j, i));
  tensor<int, 1> v({5}, {1, 2, 3, 4, 5});
  v.slice(0, 1, 5) = slice<0, 0, 4>(v) * 10;  // overlapping shift through a view
  CHECK(v(0) == 1);
  CHECK(v(1) == 10);
  CHECK(v(4) == 40);
}

TEST_CASE("expressions own their operands: returning one from a function is safe") {
  auto make = [] {
    tensor<float, 1> local({3}, {1, 2, 3});
    return exp(local) * 2.0f + 1.0f;  // local's storage lives on in the expression
  };
  auto e = make();
  tensor<float, 1> r = e;
  CHECK(r(0) == doctest::Approx(2 * std::exp(1.0f) + 1));
  // the result never aliases an input, even for a plain view
  tensor<float, 1> src({3}, {1, 2, 3});
  tensor<float, 1> copy = slice<0, 0, 3>(src);
  copy(0) = 100;
  CHECK(src(0) == 1);
}

TEST_CASE("mixing bound tensors and placeholders") {
  tensor<float, 1> scale({3}, {1, 2, 3});
  auto x = input<"x", f32, shape<dyn, 3>>{};
  auto y = sum<1>(x * scale);
  auto xv = kt::random<float, 2>({4, 3});
  tensor<float, 1> got = eval(y, {{"x", xv}});
  for (index_t i = 0; i < 4; ++i)
    REQUIRE(kt::close(got(i), xv(i, 0) + 2.0 * xv(i, 1) + 3.0 * xv(i, 2), 1e-6, 1e-6));
}
