// CPU backend, pointwise kernels: every pointwise op and dtype against the eager reference on
// fresh random inputs, at sizes that are not multiples of any vector width, with broadcast and
// strided (transposed, sliced) operands, empty tensors, and 1 thread against several.
#include "cpu_support.hpp"

using namespace kiln;

using kt::sizes;
using kt::tol;
using kt::unary_sizes;

TEST_CASE_TEMPLATE("binary ops and comparisons match eager with every broadcasting pattern", T, float, double, bfloat16,
                   std::int32_t, std::int64_t) {
  constexpr dtype D = dtype_of<T>;
  using A = input<"a", D, shape<dyn, 1, 17>>;
  using B = input<"b", D, shape<7, 17>>;
  using C = input<"c", D, shape<dyn, 7, 1>>;
  const double lo = std::is_integral_v<T> ? -50 : -3, hi = std::is_integral_v<T> ? 50 : 3;
  auto av = kt::rand<T, 3>({4, 1, 17}, lo, hi);
  auto bv = kt::rand<T, 2>({7, 17}, lo, hi);
  auto cv = kt::rand<T, 3>({4, 7, 1}, lo, hi);
  const std::initializer_list<feed> f = {{"a", av}, {"b", bv}, {"c", cv}};
  // several results of one plan: the arithmetic kernels, and the comparisons (bool results)
  CHECK(kt::cpu_vs_eager(outputs(A{} + B{} * C{} - A{}, max(A{}, C{}) + min(B{}, A{}), A{} * 3 - 2 * C{} + B{} * B{},
                                 where(A{} < B{}, C{}, A{}), where(C{} >= 0, C{}, 0)),
                         f) <= tol<T>());
  CHECK(kt::cpu_vs_eager(outputs(eq(A{}, B{}), ne(A{}, C{}), A{} <= C{}, B{} > C{}), f) == 0);
  if constexpr (std::is_integral_v<T>) {
    using Ex = input<"e", D, shape<7, 17>>;
    CHECK(kt::cpu_vs_eager(pow(A{}, Ex{}), {{"a", av}, {"e", kt::rand<T, 2>({7, 17}, 0, 5)}}) == 0);
  } else {
    auto pos = kt::rand<T, 2>({7, 17}, 0.5, 3);
    CHECK(kt::cpu_vs_eager(outputs(A{} / (abs(B{}) + 1), pow(B{}, C{})), {{"a", av}, {"b", pos}, {"c", cv}}) <= tol<T>());
  }
}

TEST_CASE("NaN: max and min propagate it, comparisons are IEEE, in vectors and tails") {
  using X = input<"x", f32, shape<dyn>>;
  using Y = input<"y", f32, shape<dyn>>;
  auto x = kt::rand<float, 1>({37});
  auto y = kt::rand<float, 1>({37});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (index_t i : {0, 5, 16, 33, 36}) x(i) = nan;
  y(7) = nan;
  y(36) = nan;
  x(20) = std::numeric_limits<float>::infinity();
  tensor<float, 1> m(cpu::run_schedule<plan<decltype(max(X{}, Y{}))>::schedule>(kt::leaves_of(max(X{}, Y{}), {{"x", x}, {"y", y}}))[0]);
  for (index_t i = 0; i < 37; ++i) CHECK(std::isnan(m(i)) == (std::isnan(x(i)) || std::isnan(y(i))));
  CHECK(kt::cpu_vs_eager(max(X{}, Y{}) + min(Y{}, X{}), {{"x", x}, {"y", y}}) == 0);
  // comparisons with NaN: only != is true (unordered), and NaN converts to true
  CHECK(kt::cpu_vs_eager(outputs(ne(X{}, Y{}), eq(X{}, X{}), X{} < Y{}, X{} >= Y{}, cast<boolean>(X{})), {{"x", x}, {"y", y}}) == 0);
}

TEST_CASE("casts between every pair of dtypes are exact, with saturation, NaN and bf16 rounding") {
  // values that exercise each rule: halfway bf16 cases, NaN, infinities, out-of-range ints
  std::vector<double> v = {0.0, -0.0, 1.0, -1.5, 2.5, 1.00390625, 1.01171875, 255.5, -3e9, 3e9, 1e20, -1e20,
                           std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity(), 123456.789, -0.3, 16777217.0};
  auto r = kt::rand<double, 1>({40}, -1e6, 1e6);
  for (index_t i = 0; i < 40; ++i) v.push_back(r(i));
  tensor<double, 1> src({static_cast<index_t>(v.size())});
  for (std::size_t i = 0; i < v.size(); ++i) src(static_cast<index_t>(i)) = v[i];
  using X = input<"x", f64, shape<dyn>>;
  auto check_from = [&]<dtype From>() {
    tensor<storage_t<From>, 1> s(any_tensor(From, src.any().shape()));
    s.any().copy_from(src.any());
    using Y = input<"y", From, shape<dyn>>;
    CHECK(kt::cpu_vs_eager(outputs(cast<boolean>(Y{}), cast<i32>(Y{}), cast<i64>(Y{}), cast<bf16>(Y{}), cast<f32>(Y{}),
                                   cast<f64>(Y{})),
                           {{"y", s}}) == 0);
  };
  check_from.operator()<boolean>();
  check_from.operator()<i32>();
  check_from.operator()<i64>();
  check_from.operator()<bf16>();
  check_from.operator()<f32>();
  check_from.operator()<f64>();
  // in a vectorised f32 kernel: f32 -> bf16 -> f32 and comparisons -> bool -> f32
  using F = input<"f", f32, shape<dyn>>;
  tensor<float, 1> fv(any_tensor(f32, src.any().shape()));
  fv.any().copy_from(src.any());
  CHECK(kt::cpu_vs_eager(cast<f32>(cast<bf16>(F{} * 3)) + cast<f32>(F{} > 1), {{"f", fv}}) == 0);
  (void)X{};
}

TEST_CASE("bool values: masks in float kernels, logical max and min") {
  using P = input<"p", boolean, shape<dyn, 5>>;
  using Q = input<"q", boolean, shape<1, 5>>;
  using X = input<"x", f32, shape<dyn, 5>>;
  auto p = kt::rand<bool, 2>({9, 5});
  auto q = kt::rand<bool, 2>({1, 5});
  auto x = kt::rand<float, 2>({9, 5});
  CHECK(kt::cpu_vs_eager(max(P{}, Q{}), {{"p", p}, {"q", q}}) == 0);
  CHECK(kt::cpu_vs_eager(min(P{}, Q{}), {{"p", p}, {"q", q}}) == 0);
  CHECK(kt::cpu_vs_eager(eq(P{}, Q{}), {{"p", p}, {"q", q}}) == 0);
  CHECK(kt::cpu_vs_eager(where(P{}, X{}, -X{}), {{"p", p}, {"x", x}}) == 0);
  CHECK(kt::cpu_vs_eager(P{} + 1, {{"p", p}}) == 0);  // bool + int -> i64
}

TEST_CASE("strided and broadcast operands: transposes, slices, permutes, views of bound tensors") {
  using X = input<"x", f32, shape<dyn, 19>>;
  using Y = input<"y", f32, shape<19, dyn>>;
  auto x = kt::rand<float, 2>({23, 19});
  auto y = kt::rand<float, 2>({19, 23});
  CHECK(kt::cpu_vs_eager(X{} + transpose(Y{}), {{"x", x}, {"y", y}}) <= 1e-6);
  CHECK(kt::cpu_vs_eager(exp(transpose(X{})) * Y{}, {{"x", x}, {"y", y}}) <= 1e-6);
  CHECK(kt::cpu_vs_eager(slice<1, 1, 18, 2>(X{}) * 2 + slice<1, 0, 9>(X{}), {{"x", x}}) <= 1e-6);
  CHECK(kt::cpu_vs_eager(slice<0, 3, 20>(slice<1, 0, 9>(X{})) - slice<0, 0, 17>(slice<1, 10, 19>(X{})), {{"x", x}}) <= 1e-6);
  CHECK(kt::cpu_vs_eager(slice<0, -5>(X{}) - broadcast_to<5, 19>(slice<0, 0, 1>(X{})), {{"x", x}}) <= 1e-6);
  // a reshape of a transposed view cannot be strides: the backend copies, as eager does
  CHECK(kt::cpu_vs_eager(reshape<19, 23>(transpose(X{})) + reshape<19, 23>(X{}), {{"x", x}}) <= 1e-6);
  using Z = input<"z", f64, shape<dyn, 4, 6>>;
  auto z = kt::rand<double, 3>({5, 4, 6});
  CHECK(kt::cpu_vs_eager(permute<2, 0, 1>(Z{}) * 2 + permute<2, 0, 1>(Z{} * Z{}), {{"z", z}}) <= 1e-14);
  // bound tensors that are themselves views
  auto a = kt::rand<float, 2>({31, 33});
  auto b = kt::rand<float, 2>({33, 31});
  auto sl = a.slice(1, 2, 33, 3);
  CHECK(kt::cpu_vs_eager(a * b.transpose() + 1.5f, {}) <= 1e-6);
  CHECK(kt::cpu_vs_eager(tanh(sl) + sl * sl, {}) <= 1e-6);
}

TEST_CASE("empty tensors and dynamic extents") {
  using X = input<"x", f32, shape<dyn, 9>>;
  tensor<float, 2> empty({0, 9});
  cpu::stats() = {};
  const std::vector<any_tensor> out =
      cpu::run_schedule<plan<decltype(gelu(X{}) * 2)>::schedule>(kt::leaves_of(gelu(X{}) * 2, {{"x", empty}}));
  CHECK(out[0].shape() == dims{0, 9});
  CHECK(kt::cpu_vs_eager(exp(X{}) + X{}, {{"x", empty}}) == 0);
  for (index_t rows : {1, 2, 3, 64, 257}) CHECK(kt::cpu_vs_eager(sin(X{}) * X{} + 1, {{"x", kt::rand<float, 2>({rows, 9})}}) <= 1e-5);
  tensor<float, 1> e1({0});
  CHECK(kt::cpu_vs_eager(e1 * 2 + 1, {}) == 0);
}

TEST_CASE("a pointwise chain is one kernel, run fused, and errors come from the right op") {
  using X = input<"x", f32, shape<dyn, 64>>;
  using E = decltype(gelu(X{} * 1.5f + 0.25f));
  static_assert(plan<E>::schedule.kernels.size() == 1, "x * a + b and gelu fuse into one kernel");
  cpu::stats() = {};
  CHECK(kt::cpu_vs_eager(E{}, {{"x", kt::rand<float, 2>({100, 64})}}) <= 1e-5);
  CHECK(cpu::stats().kernels == 3);  // the run, then the 1- and 3-thread runs
  CHECK(cpu::stats().fused == 3);
  // integer overflow wraps; a negative integer exponent throws out of the worker threads
  tensor<int, 1> big({40000});
  for (index_t i = 0; i < big.numel(); ++i) big(i) = std::numeric_limits<int>::max() - static_cast<int>(i % 3);
  CHECK(kt::cpu_vs_eager(big + 7, {}) == 0);
  big(39999) = -1;
  using N = input<"n", i32, shape<dyn>>;
  const auto pw = pow(N{} * 0 + 2, N{});
  CHECK_THROWS_AS((cpu::run_schedule<plan<decltype(pw)>::schedule>(kt::leaves_of(pw, {{"n", big}}))), std::invalid_argument);
  // run-time shape errors name the op and both shapes
  using B = input<"b", f32, shape<dyn>>;
  tensor<float, 2> xv({3, 64});
  tensor<float, 1> bv({5});
  CHECK_THROWS_WITH_AS((cpu::run_schedule<plan<decltype(X{} + B{})>::schedule>({xv.any(), bv.any()})),
                       "kiln: add: shapes [3, 64] and [5] cannot be broadcast together", shape_error);
}

TEST_CASE("stats().threaded counts the kernels that split their loop among threads") {
  using X = input<"x", f32, shape<dyn>>;
  using E = decltype(exp(X{}) * 2.0f);
  const auto big = kt::leaves_of(E{}, {{"x", kt::rand<float, 1>({1 << 18})}});
  const auto small = kt::leaves_of(E{}, {{"x", kt::rand<float, 1>({1000})}});
  const int old = cpu::set_num_threads(2);
  cpu::stats() = {};
  cpu::run_schedule<plan<E>::schedule>(big);
  CHECK(cpu::stats().threaded == 1);
  cpu::run_schedule<plan<E>::schedule>(small);  // too little work to split
  CHECK(cpu::stats().threaded == 1);
  cpu::set_num_threads(1);
  cpu::run_schedule<plan<E>::schedule>(big);
  CHECK(cpu::stats().threaded == 1);
  CHECK(cpu::stats().kernels == 3);
  cpu::set_num_threads(old);
}

TEST_CASE("non-temporal stores (stream_threshold) change no result: aligned, unaligned, several outputs") {
  CHECK(cpu::stream_threshold() > 0);  // the last-level cache by default
  using X = input<"x", f32, shape<dyn, dyn>>;
  using Y = input<"y", f64, shape<dyn>>;
  auto x = kt::rand<float, 2>({37, 1031});
  auto y = kt::rand<double, 1>({40003});
  const auto ex = gelu(X{} * 1.5f + 0.25f);
  const auto two = outputs(exp(X{}) - X{}, X{} * X{});
  // stored values that later nodes of the same kernel add to (candidates for FMA contraction)
  const auto chain = outputs(X{} * 1.5f, X{} * 1.5f + X{} * X{}, (X{} * X{}) * 0.5f + 0.25f);
  // a threshold of 0 streams every kernel with a contiguous result (1 and 3 threads too)
  const std::int64_t old = cpu::set_stream_threshold(0);
  cpu::stats() = {};
  CHECK(kt::cpu_vs_eager(ex, {{"x", x}}) <= 1e-5);
  CHECK(kt::cpu_vs_eager(two, {{"x", x}}) <= 1e-6);
  CHECK(kt::cpu_vs_eager(chain, {{"x", x}}) <= 1e-6);
  CHECK(kt::cpu_vs_eager(tanh(Y{}) * 3.0 + Y{}, {{"y", y}}) <= 1e-14);
  // every kernel (all pointwise, with contiguous results), each run with 2, 1 and 3 threads
  constexpr std::size_t kernels = plan<decltype(ex)>::schedule.kernels.size() +
                                  plan<decltype(two)>::schedule.kernels.size() +
                                  plan<decltype(chain)>::schedule.kernels.size() +
                                  plan<decltype(tanh(Y{}) * 3.0 + Y{})>::schedule.kernels.size();
  static_assert(kernels >= 4);
  CHECK(cpu::stats().streamed == static_cast<long>(3 * kernels));
  const auto s_ex = cpu::run_schedule<plan<decltype(ex)>::schedule>(kt::leaves_of(ex, {{"x", x}}));
  const auto s_two = cpu::run_schedule<plan<decltype(two)>::schedule>(kt::leaves_of(two, {{"x", x}}));
  const auto s_chain = cpu::run_schedule<plan<decltype(chain)>::schedule>(kt::leaves_of(chain, {{"x", x}}));
  // into a destination whose rows start at every alignment (1031 floats apart, one in): the
  // vectors that are not aligned for a streaming store take ordinary stores
  tensor<float, 2> dst({37, 1033});
  for (index_t i = 0; i < dst.numel(); ++i) dst.data()[i] = -7;
  dst.slice(1, 1, 1032) = gelu(x * 1.5f + 0.25f);
  const std::int64_t huge = std::int64_t{1} << 62;
  cpu::set_stream_threshold(huge);  // none
  cpu::stats() = {};
  const auto n_ex = cpu::run_schedule<plan<decltype(ex)>::schedule>(kt::leaves_of(ex, {{"x", x}}));
  const auto n_two = cpu::run_schedule<plan<decltype(two)>::schedule>(kt::leaves_of(two, {{"x", x}}));
  const auto n_chain = cpu::run_schedule<plan<decltype(chain)>::schedule>(kt::leaves_of(chain, {{"x", x}}));
  CHECK(cpu::stats().streamed == 0);
  CHECK(cpu::set_stream_threshold(old) == huge);
  CHECK(kt::same_bits(s_ex[0], n_ex[0]));
  CHECK(kt::same_bits(s_two[0], n_two[0]));
  CHECK(kt::same_bits(s_two[1], n_two[1]));
  for (std::size_t q = 0; q < 3; ++q) CHECK(kt::same_bits(s_chain[q], n_chain[q]));
  CHECK(kt::same_bits(dst.slice(1, 1, 1032).any(), n_ex[0]));
  int outside = 0;
  for (index_t i = 0; i < 37; ++i) outside += (dst(i, 0) != -7) + (dst(i, 1032) != -7);
  CHECK(outside == 0);
}

TEST_CASE("dynamic extents that differ at run time: the kernel runs node by node") {
  // all extents of bound tensors are dynamic: exp(b) and b + a share a kernel by their static
  // shapes, though b broadcasts at run time
  auto a = kt::rand<float, 2>({6, 5});
  auto b = kt::rand<float, 2>({1, 5});
  auto c = kt::rand<float, 2>({6, 1});
  CHECK(kt::cpu_vs_eager(exp(b) + a, {}) <= 1e-6);
  CHECK(kt::cpu_vs_eager(exp(b) * c + b, {}) <= 1e-6);
  using P = input<"p", f32, shape<dyn, dyn>>;
  using Q = input<"q", f32, shape<dyn, dyn>>;
  cpu::stats() = {};
  CHECK(kt::cpu_vs_eager(outputs(exp(P{}), exp(P{}) + Q{}), {{"p", b}, {"q", a}}) <= 1e-6);
  CHECK(cpu::stats().node_by_node > 0);
}

TEST_CASE("node by node, rank 3: a permuted operand, a broadcast middle axis, a scalar result, no rows") {
  // the operands' strides and the loop over rows are run-time code (run_single_pointwise), the
  // per-op loop over one row a template (single_row)
  using P = input<"p", f32, shape<dyn, dyn, dyn>>;
  using Q = input<"q", f32, shape<dyn, dyn, dyn>>;
  const auto e = outputs(exp(P{}), exp(P{}) * Q{} - P{}, sum(exp(P{}) * Q{}) * 0.5f);
  // p [4, 1, 7] broadcasts along axis 1 against q [4, 5, 7], a permuted view of a [7, 4, 5]
  const auto p = kt::rand<float, 3>({4, 1, 7});
  const any_tensor q = kt::rand<float, 3>({7, 4, 5}).any().permute({1, 2, 0});
  REQUIRE_FALSE(q.is_contiguous());
  cpu::stats() = {};
  CHECK(kt::cpu_vs_eager(e, {{"p", p}, {"q", q}}) <= 1e-5);
  CHECK(cpu::stats().node_by_node > 0);
  // no rows: nothing computed, the shapes still the reference's
  CHECK(kt::cpu_vs_eager(e, {{"p", kt::rand<float, 3>({0, 1, 7})}, {"q", kt::rand<float, 3>({0, 5, 7})}}) == 0);
}

TEST_CASE("kiln::compile, eval with either backend, assignment straight into a destination") {
  auto x = input<"x", f32, shape<dyn, 8>>{};
  auto w = param<"w", f32, shape<8, 5>>{};
  auto y = gelu(matmul(x, w) + 1.0f);
  auto xv = kt::rand<float, 2>({6, 8});
  auto wv = kt::rand<float, 2>({8, 5});
  auto f = compile(y);  // kiln::cpu::backend
  tensor<float, 2> got = f({{"x", xv}, {"w", wv}});
  const tensor<float, 2> ref = eval(y, {{"x", xv}, {"w", wv}}, eager::backend);
  CHECK(kt::difference(ref, got) <= 1e-5);
  CHECK(kt::difference(ref, compile(y, eager::backend)({{"x", xv}, {"w", wv}})) == 0);
  // the kernels write a strided destination in place; the columns in between stay as they were
  tensor<float, 2> big({6, 10});
  for (index_t i = 0; i < big.numel(); ++i) big.data()[i] = -7;
  const float* storage = big.data();
  big.slice(1, 0, 10, 2) = gelu(matmul(xv, wv) + 1.0f);
  CHECK(big.data() == storage);
  for (index_t i = 0; i < 6; ++i)
    for (index_t j = 0; j < 5; ++j) {
      CHECK(kt::close(big(i, 2 * j), ref(i, j), 1e-5, 1e-5));
      CHECK(big(i, 2 * j + 1) == -7);
    }
  // a destination that an operand views is computed aside first
  auto a = kt::rand<float, 2>({33, 33});
  const tensor<float, 2> a0 = a.clone();
  a = exp(transpose(a)) + a;
  for (index_t i = 0; i < 33; ++i)
    for (index_t j = 0; j < 33; ++j) REQUIRE(kt::close(a(i, j), std::exp(a0(j, i)) + a0(i, j), 1e-6, 1e-6));
  tensor<float, 2> wrong({5, 5});
  CHECK_THROWS_WITH_AS(wrong = a * 2, doctest::Contains("assign: shapes [5, 5] and [33, 33]"), shape_error);
}
