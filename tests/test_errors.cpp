// Run-time mistakes throw kiln::shape_error (or dtype_error) naming the op and the shapes, and
// nothing is written when they do.
#include "support.hpp"

using namespace kiln;

namespace {
/// Runs f, requires a shape_error, and returns its message.
template <class F>
std::string shape_error_of(F&& f) {
  try {
    f();
  } catch (const shape_error& e) {
    return e.what();
  }
  FAIL("no kiln::shape_error was thrown");
  return {};
}
}  // namespace

TEST_CASE("dynamic shapes that do not broadcast throw with op and both shapes") {
  tensor<float, 2> a({3, 4}), b({3, 5});
  const std::string m = shape_error_of([&] { tensor<float, 2> c = a + b; });
  CHECK(m == "kiln: add: shapes [3, 4] and [3, 5] cannot be broadcast together");
  const std::string w = shape_error_of([&] { tensor<float, 2> c = where(a > 0, a, b); });
  CHECK(w.find("where") != std::string::npos);
  CHECK(w.find("[3, 5]") != std::string::npos);
  try {
    tensor<float, 2> c = a * b;
    FAIL("expected a shape_error");
  } catch (const shape_error& e) {
    CHECK(e.op() == "mul");
    CHECK(e.lhs() == dims{3, 4});
    CHECK(e.rhs() == dims{3, 5});
  }
}

TEST_CASE("matmul, concat, reshape, slice and broadcast_to check run-time extents") {
  tensor<float, 2> a({2, 3}), b({4, 5});
  CHECK(shape_error_of([&] { tensor<float, 2> c = matmul(a, b); }) ==
        "kiln: matmul: shapes [2, 3] and [4, 5] do not match as [..., m, k] x [..., k, n]");
  CHECK(shape_error_of([&] { tensor<float, 2> c = concat<0>(a, b); }).find("concat: shapes [2, 3] and [4, 5]") !=
        std::string::npos);
  CHECK(shape_error_of([&] { tensor<float, 2> c = reshape<4, 2>(a); }).find("reshape: shapes [2, 3] and [4, 2]") !=
        std::string::npos);
  CHECK(shape_error_of([&] { tensor<float, 2> c = slice<1, 0, 4>(a); }).find("slice: shape [2, 3]") !=
        std::string::npos);
  CHECK(shape_error_of([&] { tensor<float, 2> c = broadcast_to<dyn, 6>(a); }).find("broadcast: shapes [2, 3]") !=
        std::string::npos);
}

TEST_CASE("both backends throw the catalogue's message for a run-time mistake, word for word") {
  // one rule (graph.hpp's infer) checks run-time shapes on every backend: the CPU backend's plan
  // and the eager reference give the same error for the same mistake
  tensor<float, 2> a({2, 3}), b({4, 5}), c({3, 2});
  const auto same = [](const std::string& cpu, const std::string& ref, const std::string& want) {
    CHECK(cpu == want);
    CHECK(ref == want);
  };
  same(shape_error_of([&] { (void)eval(matmul(a, b)); }), shape_error_of([&] { (void)eval(matmul(a, b), eager::backend); }),
       "kiln: matmul: shapes [2, 3] and [4, 5] do not match as [..., m, k] x [..., k, n]");
  same(shape_error_of([&] { (void)eval(concat<1>(a, c)); }), shape_error_of([&] { (void)eval(concat<1>(a, c), eager::backend); }),
       "kiln: concat: shapes [2, 3] and [3, 2] differ outside the concatenation axis (or have no such axis)");
  same(shape_error_of([&] { (void)eval(a - c); }), shape_error_of([&] { (void)eval(a - c, eager::backend); }),
       "kiln: sub: shapes [2, 3] and [3, 2] cannot be broadcast together");
  same(shape_error_of([&] { (void)eval(reshape<5, dyn>(a)); }), shape_error_of([&] { (void)eval(reshape<5, dyn>(a), eager::backend); }),
       "kiln: reshape: shapes [2, 3] and [5, dyn] do not have the same number of elements (input, target)");
  same(shape_error_of([&] { (void)eval(slice<1, 1, 5>(a)); }), shape_error_of([&] { (void)eval(slice<1, 1, 5>(a), eager::backend); }),
       "kiln: slice: shape [2, 3] cannot be sliced so (the axis, or the bounds on it, out of range)");
}

TEST_CASE("a result of more than 2^59 elements is refused before any memory is sized from it") {
  // empty operands (addressable: their non-zero extents count 2^31) whose product counts 2^62
  const index_t big = index_t{1} << 31;
  const tensor<float, 2> a({big, 0}), b({0, big});
  const std::string cpu = shape_error_of([&] { (void)tensor<float, 2>(matmul(a, b)); });
  CHECK(cpu.find("matmul: shape [2147483648, 2147483648] has more than 2^59 elements") != std::string::npos);
  const std::string ref = shape_error_of([&] { (void)eval(matmul(a, b), eager::backend); });
  CHECK(ref.find("[2147483648, 2147483648] has more than 2^59 elements") != std::string::npos);
}

TEST_CASE("binding placeholders: wrong shape, wrong dtype, missing or unknown names") {
  auto x = input<"x", f32, shape<dyn, 4>>{};
  auto w = param<"w", f32, shape<4, 2>>{};
  auto y = matmul(x, w);
  tensor<float, 2> xv({3, 4}), wv({4, 2}), wrong({4, 3});
  tensor<double, 2> wd({4, 2});
  CHECK_NOTHROW(eval(y, {{"x", xv}, {"w", wv}}));
  CHECK(shape_error_of([&] { eval(y, {{"x", xv}, {"w", wrong}}); }) ==
        "kiln: param 'w': shapes [4, 2] and [4, 3] differ (declared, bound)");
  CHECK(shape_error_of([&] { eval(y, {{"x", wrong}, {"w", wv}}); }).find("input 'x'") != std::string::npos);
  CHECK_THROWS_WITH_AS(eval(y, {{"x", xv}, {"w", wd}}), "kiln: param 'w': expected dtype f32, got f64", dtype_error);
  CHECK_THROWS_WITH_AS(eval(y, {{"x", xv}}), "kiln: eval: no tensor bound to param 'w'", std::invalid_argument);
  // a name bound twice is a mistake, not "the last one wins"
  CHECK_THROWS_WITH_AS(eval(y, {{"x", xv}, {"w", wv}, {"x", xv}}), "kiln: eval: two tensors are bound to 'x'",
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(eval(y, {{"x", xv}, {"w", wv}, {"z", wv}}),
                       "kiln: eval: the graph has no input or param named 'z'", std::invalid_argument);
  tensor<float, 2> undefined;
  CHECK_THROWS_AS(eval(y, {{"x", xv}, {"w", undefined}}), std::invalid_argument);
  CHECK_THROWS_AS((tensor<float, 2>(undefined + 1)), std::invalid_argument);
}

TEST_CASE("a failed assignment leaves the destination untouched") {
  tensor<float, 2> a = kt::random<float, 2>({3, 4});
  tensor<float, 2> b({3, 5});
  tensor<float, 2> dest = kt::random<float, 2>({3, 4});
  const tensor<float, 2> before = dest.clone();
  CHECK_THROWS_AS(dest = a + b, shape_error);
  // a result of the wrong shape is rejected before anything is written
  CHECK_THROWS_WITH_AS(dest = transpose(a), doctest::Contains("assign: shapes [3, 4] and [4, 3]"), shape_error);
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 4; ++j) REQUIRE(dest(i, j) == before(i, j));
}

TEST_CASE("integer fmod, remainder and floor_divide: a zero divisor throws and writes nothing, on both backends") {
  const tensor<std::int64_t, 1> p({4}, {7, -7, 9, 4}), q({4}, {3, -3, 2, 0});
  tensor<std::int64_t, 1> d({4}, {-9, -9, -9, -9});
  CHECK_THROWS_WITH_AS(d = fmod(p, q), doctest::Contains("fmod: integer division by zero"), std::domain_error);
  CHECK(kt::values_of(d) == std::vector<double>(4, -9.0));
  using P = input<"p", i64, shape<dyn>>;
  using Q = input<"q", i64, shape<dyn>>;
  CHECK_THROWS_AS(eval_any(remainder(P{}, Q{}), {{"p", p.any()}, {"q", q.any()}}, eager::backend), std::domain_error);
  const auto f = compile(remainder(P{}, Q{}) + 1);
  std::vector<any_tensor> out{d.any()};
  CHECK_THROWS_AS(f(P{} = p, Q{} = q, out), std::domain_error);
  CHECK(kt::values_of(d) == std::vector<double>(4, -9.0));
  const tensor<std::int64_t, 1> ok({4}, {3, -3, 2, -5});
  f(P{} = p, Q{} = ok, out);
  // Python's % (the sign of the divisor): 7 % 3 = 1, -7 % -3 = -1, 9 % 2 = 1, 4 % -5 = -1; each + 1
  CHECK(kt::values_of(d) == std::vector<double>{2, 0, 2, 0});
  // floor_divide: the same on both backends, and what it writes (Python's //)
  CHECK_THROWS_WITH_AS(eval_any(floor_divide(P{}, Q{}), {{"p", p.any()}, {"q", q.any()}}, eager::backend),
                       doctest::Contains("floor_divide: integer division by zero"), std::domain_error);
  const auto g = compile(floor_divide(P{}, Q{}));
  CHECK_THROWS_WITH_AS(g(P{} = p, Q{} = q, out), doctest::Contains("floor_divide: integer division by zero"),
                       std::domain_error);
  CHECK(kt::values_of(d) == std::vector<double>{2, 0, 2, 0});
  g(P{} = p, Q{} = ok, out);
  CHECK(kt::values_of(d) == std::vector<double>{2, 2, 4, -1});  // 7 // 3, -7 // -3, 9 // 2, 4 // -5
  // the lowest value over -1 wraps (as PyTorch's on the CPU); signs and zero dividends
  const tensor<std::int64_t, 1> lo({4}, {std::numeric_limits<std::int64_t>::min(), 0, -1, 6}),
      m1({4}, {-1, -3, 4, -4});
  g(P{} = lo, Q{} = m1, out);
  CHECK(kt::values_of(d) == std::vector<double>{-9223372036854775808.0, 0, -1, -2});
}

TEST_CASE("an error raised inside a kernel writes nothing: integer pow with a negative exponent last") {
  // the elements before the bad one used to be written before the throw
  const tensor<std::int32_t, 1> p({5}, {2, 3, 4, 5, 6}), q({5}, {1, 2, 1, 2, -1});
  tensor<std::int32_t, 1> d({5}, {-7, -7, -7, -7, -7});
  CHECK_THROWS_WITH_AS(d = pow(p, q), doctest::Contains("negative integer powers"), std::invalid_argument);
  CHECK(kt::values_of(d) == std::vector<double>(5, -7.0));
  using P = input<"p", i32, shape<dyn>>;
  using Q = input<"q", i32, shape<dyn>>;
  const auto f = compile(pow(P{}, Q{}) * 2);
  std::vector<any_tensor> out{d.any()};
  CHECK_THROWS_AS(f(P{} = p, Q{} = q, out), std::invalid_argument);
  CHECK(kt::values_of(d) == std::vector<double>(5, -7.0));
  // and with valid exponents the out= form still writes the caller's tensor
  const tensor<std::int32_t, 1> ok({5}, {1, 2, 1, 2, 0});
  f(P{} = p, Q{} = ok, out);
  CHECK(out[0].bytes() == d.any().bytes());
  CHECK(kt::values_of(d) == std::vector<double>{4, 18, 8, 50, 2});
}
