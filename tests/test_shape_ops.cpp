// Shape ops inside expressions: reshape, permute, transpose, broadcast_to, slice, concat, cast.
#include "support.hpp"

using namespace kiln;

TEST_CASE("reshape, with an inferred extent, of a computed value") {
  tensor<int, 2> a({2, 3}, {0, 1, 2, 3, 4, 5});
  tensor<int, 3> r = reshape<3, 1, 2>(a * 10);
  CHECK(r(2, 0, 1) == 50);
  tensor<int, 1> flat = reshape<dyn>(transpose(a));  // transposed first: [0, 3, 1, 4, 2, 5]
  CHECK(flat(1) == 3);
  CHECK(flat(4) == 2);
  auto x = input<"x", f32, shape<dyn, 6>>{};
  static_assert(decltype(reshape<dyn, 2, 3>(x))::shape == dims{dyn, 2, 3});
  static_assert(decltype(reshape<3, dyn>(input<"y", f32, shape<4, 6>>{}))::shape == dims{3, 8});
}

TEST_CASE("permute and transpose against a plain loop") {
  auto x = kt::random<float, 3>({2, 3, 4});
  tensor<float, 3> p = permute<2, 0, 1>(x + 1);
  tensor<float, 3> t = transpose<0, 2>(x);
  tensor<float, 3> last = transpose(x);
  for (index_t i = 0; i < 2; ++i)
    for (index_t j = 0; j < 3; ++j)
      for (index_t k = 0; k < 4; ++k) {
        REQUIRE(p(k, i, j) == x(i, j, k) + 1);
        REQUIRE(t(k, j, i) == x(i, j, k));
        REQUIRE(last(i, k, j) == x(i, j, k));
      }
}

TEST_CASE("broadcast_to materialises a broadcast") {
  tensor<float, 2> c({2, 1}, {1, 2});
  tensor<float, 3> b = broadcast_to<3, 2, 4>(c);
  CHECK(b.shape() == std::array<index_t, 3>{3, 2, 4});
  CHECK(b(2, 1, 3) == 2);
  CHECK(b(0, 0, 0) == 1);
  tensor<float, 2> keep = broadcast_to<dyn, 5>(c);  // dyn keeps the source extent
  CHECK(keep.shape() == std::array<index_t, 2>{2, 5});
}

TEST_CASE("slice in expressions: ranges, steps, negatives") {
  tensor<int, 2> a({3, 5}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14});
  tensor<int, 2> s = slice<1, 1, 5, 2>(a);  // columns 1, 3
  CHECK(s.shape() == std::array<index_t, 2>{3, 2});
  CHECK(s(2, 1) == 13);
  tensor<int, 2> last_rows = slice<0, -2>(a);
  CHECK(last_rows.shape() == std::array<index_t, 2>{2, 5});
  CHECK(last_rows(0, 0) == 5);
  tensor<int, 2> mix = slice<-1, 0, 2>(a) + slice<-1, 3, 5>(a);
  CHECK(mix(1, 0) == 5 + 8);
  auto x = input<"x", f32, shape<dyn, 10>>{};
  static_assert(decltype(slice<1, 2, 8, 3>(x))::shape == dims{dyn, 2});
  static_assert(decltype(slice<0, 1, 4>(x))::shape == dims{3, 10});
}

TEST_CASE("concat along each axis, several operands, promoting dtypes") {
  tensor<int, 2> a({2, 2}, {1, 2, 3, 4});
  tensor<int, 2> b({1, 2}, {5, 6});
  tensor<int, 2> c0 = concat<0>(a, b, a);
  CHECK(c0.shape() == std::array<index_t, 2>{5, 2});
  CHECK(c0(2, 1) == 6);
  CHECK(c0(4, 0) == 3);
  tensor<float, 2> f({2, 1}, {0.5f, 1.5f});
  tensor<float, 2> c1 = concat<-1>(a, f);
  CHECK(c1.shape() == std::array<index_t, 2>{2, 3});
  CHECK(c1(1, 2) == 1.5f);
  CHECK(c1(1, 0) == 3);
}

TEST_CASE("cast between every pair of dtypes") {
  // 0, 1 and 3 are exact in every dtype; bool maps nonzero to 1
  const double vals[] = {0, 1, 3};
  auto check_pair = [&]<dtype S, dtype D>() {
    tensor<storage_t<S>, 1> src({3});
    for (int i = 0; i < 3; ++i) src(i) = static_cast<storage_t<S>>(vals[i]);
    tensor<storage_t<D>, 1> dst = cast<D>(src);
    for (int i = 0; i < 3; ++i) {
      const double want = D == boolean || S == boolean ? (vals[i] != 0) : vals[i];
      REQUIRE(static_cast<double>(static_cast<compute_t<D>>(dst(i))) == want);
    }
  };
  for (dtype s : {boolean, i32, i64, bf16, f32, f64})
    visit(s, [&]<dtype S>() {
      for (dtype d : {boolean, i32, i64, bf16, f32, f64})
        visit(d, [&]<dtype D>() { check_pair.template operator()<S, D>(); });
    });
}

TEST_CASE("casts of special values: truncation, saturation, NaN") {
  tensor<double, 1> s({5}, {-2.9, 2.9, 1e30, -1e30, std::numeric_limits<double>::quiet_NaN()});
  tensor<int, 1> i = cast<i32>(s);
  CHECK(i(0) == -2);
  CHECK(i(1) == 2);
  CHECK(i(2) == std::numeric_limits<int>::max());
  CHECK(i(3) == std::numeric_limits<int>::min());
  CHECK(i(4) == 0);
}

TEST_CASE("cast at hand-computed values") {
  tensor<double, 1> d({4}, {-1.75, 0.0, 2.5, 300.25});
  tensor<float, 1> f = cast<f32>(d);
  CHECK(f(3) == 300.25f);
  tensor<int, 1> i = cast<i32>(d);  // truncation toward zero, as in C++ and PyTorch
  CHECK(i(0) == -1);
  CHECK(i(2) == 2);
  tensor<bool, 1> b = cast<boolean>(d);
  CHECK(b(0));
  CHECK(!b(1));
  tensor<bfloat16, 1> h = cast<bf16>(d);
  CHECK(float(h(3)) == 300.0f);  // 300.25 rounds to bf16's 8-bit mantissa
  tensor<std::int64_t, 1> l = cast<i64>(cast<boolean>(d));
  CHECK(l(2) == 1);
  static_assert(std::is_same_v<decltype(cast<f64>(d)), ex::bound<double, 1>>);  // no-op cast adds no node
}
