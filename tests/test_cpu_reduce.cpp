// CPU backend, row (reduction) kernels: sum, mean, max, min and var over every axis subset,
// rows that are not multiples of the vector width, reductions over non-innermost axes
// (lanes across the kept axis), softmax, log_softmax, layer_norm and cross_entropy as single
// kernels with large-magnitude inputs, empty reductions, and 1 thread against several.
#include "cpu_support.hpp"

using namespace kiln;

TEST_CASE_TEMPLATE("reductions over every axis subset of a rank-3 tensor", T, float, double) {
  constexpr dtype D = dtype_of<T>;
  using X = input<"x", D, shape<dyn, 5, 13>>;
  // The eager reference sums in double; a float sum of up to 195 terms in [-2, 2) differs from
  // it by a few 1e-7 typically, and the worst-case bound is far above 1e-5.
  const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-13;
  for (index_t n : {1, 3}) {
    const std::initializer_list<feed> f = {{"x", kt::rand<T, 3>({n, 5, 13})}};
    CHECK(kt::cpu_vs_eager(outputs(sum<0>(X{}), sum<1>(X{}, keepdim), sum<2>(X{}), sum<0, 1>(X{}), sum<0, 2>(X{}, keepdim),
                                   sum<1, 2>(X{}), sum(X{})),
                           f) <= tol);
    CHECK(kt::cpu_vs_eager(outputs(max<0>(X{}), min<1>(X{}, keepdim), max<2>(X{}), min<0, 2>(X{}), max(X{})), f) == 0);
    CHECK(kt::cpu_vs_eager(outputs(mean<1, 2>(X{}), mean<0>(X{}, keepdim), var<2>(X{}), var<0, 1>(X{}, keepdim)), f) <= tol);
  }
}

TEST_CASE("long rows: float sums add blocks of float steps in double lanes, every length and tail") {
  using X = input<"x", f32, shape<dyn, dyn>>;
  for (index_t len : {1, 7, 17, 1023, 4097, 40001}) {
    INFO("row length " << len);
    auto x = kt::rand<float, 2>({3, len}, -1, 3);
    CHECK(kt::cpu_vs_eager(outputs(sum<1>(X{}), mean<1>(X{}, keepdim), max<1>(X{}), min<1>(X{})), {{"x", x}}) <= 1e-6);
    CHECK(kt::cpu_vs_eager(var<1>(X{}), {{"x", x}}) <= 1e-5);
  }
  // 1e8 and many ones. A float accumulator per lane would lose the ones that share a lane with
  // 1e8 (an eighth of them with 8 lanes, 125 of 1000); blocks lose at most the ones in 1e8's
  // block (cpu::detail::sum_block - 1 of them), and the float result is then within one ulp
  // (8, at 1e8) of the exact sum: 1e8 + 992 for 1e8 + 1000.
  const auto s = sum<1>(X{});
  for (index_t ones : {1000, 100000}) {
    INFO(ones << " ones");
    tensor<float, 2> big({1, ones + 1});
    big(0, 0) = 1e8f;
    for (index_t i = 1; i <= ones; ++i) big(0, i) = 1.0f;
    tensor<float, 1> got(cpu::run_schedule<plan<decltype(s)>::schedule>(kt::leaves_of(s, {{"x", big}}))[0]);
    const double exact = 1e8 + static_cast<double>(ones);
    CHECK(std::abs(static_cast<double>(got(0)) - exact) <= 8.0);
  }
  // 2^20 terms of 1 + 2^-10 between 2^20 of -1 (with an even number of lanes each lane sees
  // one sign): a float lane's sum drops the 2^-10 once past 2^14 (AVX2's 8 lanes gave 32); a
  // block of 8 of them is exact in float, and blocks add exactly in double: exactly 2^10.
  tensor<float, 2> alt({1, index_t{1} << 21});
  for (index_t i = 0; i < alt.numel(); ++i) alt.data()[i] = i % 2 ? -1.0f : 1.0f + 0x1p-10f;
  {
    tensor<float, 1> got(cpu::run_schedule<plan<decltype(s)>::schedule>(kt::leaves_of(s, {{"x", alt}}))[0]);
    CHECK(got(0) == 1024.0f);
  }
}

TEST_CASE("max and min rows take their vectors in pairs: the extreme or a NaN in any vector, any tail") {
  // (kernel_code::steps: a sweep whose reductions are all max or min runs two accumulators,
  // the even and the odd whole vectors, merged after the pairs; the rest one vector at a time)
  using X = input<"x", f32, shape<dyn, dyn>>;
  const index_t w = static_cast<index_t>(xsimd::batch<float>::size);
  for (index_t len : {w, 2 * w - 1, 2 * w, 2 * w + 1, 3 * w, 4 * w + 3, index_t{257}}) {
    INFO("row length " << len);
    const std::vector<index_t> at = {0, w - 1, w, 2 * w - 1, 2 * w, 3 * w + 1, len - 1};
    const auto rows = static_cast<index_t>(at.size());
    auto x = kt::rand<float, 2>({2 * rows, len}, -1, 1);
    for (index_t r = 0; r < rows; ++r) {
      const index_t j = std::min(at[static_cast<std::size_t>(r)], len - 1);
      x(r, j) = r % 2 ? -7.0f : 7.0f;                             // the row's max or min
      x(rows + r, j) = std::numeric_limits<float>::quiet_NaN();  // NaN wherever it is
    }
    CHECK(kt::cpu_vs_eager(outputs(max<1>(X{}), min<1>(X{})), {{"x", x}}) == 0);
    CHECK(kt::cpu_vs_eager(softmax(X{}), {{"x", x}}) <= 1e-5);
    // and against a plain loop
    const auto mx = max<1>(X{});
    tensor<float, 1> got(cpu::run_schedule<plan<decltype(mx)>::schedule>(kt::leaves_of(mx, {{"x", x}}))[0]);
    for (index_t r = 0; r < 2 * rows; ++r) {
      float want = x(r, 0);
      bool nan = false;
      for (index_t j = 0; j < len; ++j) {
        nan = nan || std::isnan(x(r, j));
        want = std::max(want, x(r, j));
      }
      CAPTURE(r);
      if (nan) CHECK(std::isnan(got(r)));
      else CHECK(got(r) == want);
    }
  }
}

TEST_CASE("a max or min of zeros of both signs keeps the same zero whatever the layout and threads") {
  // x86's max returns its second operand on equal zeros, so a row of +0 and -0 gives one or the
  // other by the order of its vectors: the paired accumulators assign each vector by its
  // position alone, on the contiguous (fast) path and the strided one alike
  using X = input<"x", f32, shape<dyn, dyn>>;
  const index_t w = static_cast<index_t>(xsimd::batch<float>::size);
  for (index_t len : {2 * w + 1, 5 * w, index_t{300}}) {
    INFO("row length " << len);
    const index_t rows = 400;
    tensor<float, 2> z({rows, len}), wide({rows, 2 * len});
    for (index_t i = 0; i < rows; ++i)
      for (index_t j = 0; j < 2 * len; ++j) {
        const float v = std::array<float, 3>{0.0f, -0.0f, -1.0f}[kt::rng()() % 3];
        wide(i, j) = v;
        if (j % 2 == 0) z(i, j / 2) = v;
      }
    tensor<float, 2> strided = wide.slice(1, 0, 2 * len, 2);  // z's values, 2 floats apart
    const auto e = outputs(max<1>(X{}), min<1>(X{}, keepdim));
    const auto a = cpu::run_schedule<plan<decltype(e)>::schedule>(kt::leaves_of(e, {{"x", z}}));
    const auto b = cpu::run_schedule<plan<decltype(e)>::schedule>(kt::leaves_of(e, {{"x", strided}}));
    for (std::size_t q = 0; q < a.size(); ++q) CHECK(kt::same_bits(a[q], b[q]));
    CHECK(kt::cpu_vs_eager(e, {{"x", z}}) == 0);  // and 1 against 3 threads, same bits
  }
}

TEST_CASE("reductions over non-innermost axes run with lanes across the kept axis") {
  using X = input<"x", f32, shape<dyn, dyn, dyn>>;
  for (auto shape : {std::array<index_t, 3>{37, 3, 19}, std::array<index_t, 3>{2, 1, 1}, std::array<index_t, 3>{5, 40, 33}}) {
    auto x = kt::rand<float, 3>(shape);
    // float lanes across the kept axis against the eager reference's double sums: a sum of 37
    // terms in [-2, 2) near 0 was seen 1.6e-6 away (seed 1951547767), within f32 rounding.
    CHECK(kt::cpu_vs_eager(outputs(sum<0>(X{}), max<1>(X{}, keepdim), mean<0, 1>(X{}), min<0>(X{})), {{"x", x}}) <= 1e-5);
    CHECK(kt::cpu_vs_eager(softmax<0>(X{}), {{"x", x}}) <= 1e-5);
    CHECK(kt::cpu_vs_eager(log_softmax<1>(X{}) * 2, {{"x", x}}) <= 1e-5);
  }
  // a strided (transposed) input
  using Y = input<"y", f64, shape<dyn, 9>>;
  auto y = kt::rand<double, 2>({11, 9});
  CHECK(kt::cpu_vs_eager(sum<1>(transpose(Y{})) + max<0>(Y{}), {{"y", y}}) <= 1e-14);
}

TEST_CASE("softmax, log_softmax and layer_norm are one kernel each and stable at 3e4") {
  using X = input<"x", f32, shape<dyn, dyn>>;
  using G = input<"g", f32, shape<dyn>>;
  using B = input<"b", f32, shape<dyn>>;
  static_assert(plan<decltype(softmax(X{}))>::schedule.kernels.size() == 1);
  static_assert(plan<decltype(layer_norm(X{}, G{}, B{}))>::schedule.kernels.size() == 1);
  for (index_t len : {1, 5, 33, 1000, 4099}) {
    INFO("row length " << len);
    for (double scale : {1.0, 3e4}) {
      auto x = kt::rand<float, 2>({6, len}, -scale, scale);
      auto g = kt::rand<float, 1>({len});
      auto b = kt::rand<float, 1>({len});
      cpu::stats() = {};
      CHECK(kt::cpu_vs_eager(softmax(X{}), {{"x", x}}) <= 1e-5);
      CHECK(kt::cpu_vs_eager(log_softmax(X{}), {{"x", x}}) <= 1e-5);
      CHECK(kt::cpu_vs_eager(layer_norm(X{}, G{}, B{}), {{"x", x}, {"g", g}, {"b", b}}) <= 1e-4);
      CHECK(cpu::stats().kernels == 9);
      CHECK(cpu::stats().fused == 9);
    }
  }
  using Z = input<"z", f64, shape<dyn, 3, 8>>;
  auto z = kt::rand<double, 3>({4, 3, 8}, -500, 500);
  CHECK(kt::cpu_vs_eager(layer_norm(Z{}, param<"g", f64, shape<3, 8>>{}, param<"b", f64, shape<3, 8>>{}, 1e-3),
                         {{"z", z}, {"g", kt::rand<double, 2>({3, 8})}, {"b", kt::rand<double, 2>({3, 8})}}) <= 1e-12);
}

TEST_CASE("cross_entropy with large logits, i32 and i64 labels") {
  using Z = input<"z", f32, shape<dyn, dyn>>;
  for (index_t classes : {3, 10, 1001}) {
    auto z = kt::rand<float, 2>({9, classes}, -3e4, 3e4);
    tensor<std::int64_t, 1> y({9});
    tensor<int, 1> y32({9});
    for (index_t i = 0; i < 9; ++i) y32(i) = static_cast<int>(y(i) = (i * 7 + 3) % classes);
    CHECK(kt::cpu_vs_eager(cross_entropy(Z{}, input<"y", i64, shape<dyn>>{}), {{"z", z}, {"y", y}}) <= 1e-4);
    CHECK(kt::cpu_vs_eager(cross_entropy(Z{}, input<"y", i32, shape<dyn>>{}), {{"z", z}, {"y", y32}}) <= 1e-4);
  }
}

TEST_CASE("integer, bool and bf16 reductions") {
  using N = input<"n", i64, shape<dyn, 7>>;
  tensor<std::int64_t, 2> n({5, 7});
  for (index_t i = 0; i < n.numel(); ++i) n.data()[i] = (i % 2 ? 1 : -1) * (std::numeric_limits<std::int64_t>::max() / 3 + i);
  CHECK(kt::cpu_vs_eager(outputs(sum<1>(N{}), sum<0>(N{}), max<1>(N{}), min<0>(N{})), {{"n", n}}) == 0);  // wraps
  using P = input<"p", boolean, shape<dyn, 7>>;
  auto p = kt::rand<bool, 2>({5, 7});
  CHECK(kt::cpu_vs_eager(outputs(sum<1>(P{}), max<0>(P{}), min<1>(P{})), {{"p", p}}) == 0);
  using H = input<"h", bf16, shape<dyn, 33>>;
  CHECK(kt::cpu_vs_eager(outputs(sum<1>(H{}), max<1>(H{}), softmax(H{})), {{"h", kt::rand<bfloat16, 2>({4, 33})}}) <= 1e-2);
}

TEST_CASE("empty reductions: sums of nothing are 0, max of nothing is an error") {
  using X = input<"x", f32, shape<dyn, 4>>;
  tensor<float, 2> e({0, 4});
  CHECK(kt::cpu_vs_eager(outputs(sum<0>(X{}), mean<0>(X{}), sum<1>(X{})), {{"x", e}}) == 0);
  const auto m = max<0>(X{});
  CHECK_THROWS_WITH_AS(cpu::run_schedule<plan<decltype(m)>::schedule>(kt::leaves_of(m, {{"x", e}})),
                       "kiln: amax: shape [0, 4] cannot be reduced over an axis of extent 0", shape_error);
  tensor<float, 2> wide({3, 0});
  CHECK(kt::cpu_vs_eager(outputs(sum<1>(X{} * 2), softmax(X{})), {{"x", tensor<float, 2>({0, 4})}}) == 0);
  using Y = input<"y", f32, shape<dyn, dyn>>;
  CHECK(kt::cpu_vs_eager(outputs(sum<1>(Y{}), mean<1>(Y{})), {{"y", wide}}) == 0);
  // softmax along an empty axis is empty, as in PyTorch (its maximum used to fail, naming amax)
  for (const auto& [empty, axis0] : {std::pair{tensor<float, 2>({0, 4}), true}, std::pair{wide, false}}) {
    const any_tensor t = empty;  // (clang 14 cannot capture a structured binding)
    INFO("shape " << to_string(t.shape()));
    const auto check = [&](const auto& e) {
      for (const any_tensor& got : {eval_any(e, {{"y", t}}), eval_any(e, {{"y", t}}, eager::backend)}) {
        CHECK(got.shape() == t.shape());
        CHECK(got.numel() == 0);
      }
    };
    if (axis0) {
      check(softmax<0>(Y{}));
      check(log_softmax<0>(Y{}));
    } else {
      check(softmax<1>(Y{}));
      check(log_softmax<1>(Y{}));
    }
  }
  const auto m1 = max<1>(Y{});  // still an error where its result is not empty
  CHECK_THROWS_WITH_AS(eval_any(m1, {{"y", wide}}), "kiln: amax: shape [3, 0] cannot be reduced over an axis of extent 0",
                       shape_error);
  CHECK_THROWS_AS(eval_any(m1, {{"y", wide}}, eager::backend), shape_error);
}

TEST_CASE("epilogue on the reduced space and scalar leaves inside row kernels") {
  using X = input<"x", f32, shape<dyn, 65>>;
  auto x = kt::rand<float, 2>({17, 65});
  // sum / count * scalar, stored per row; and a full-space epilogue reading two reductions
  CHECK(kt::cpu_vs_eager(outputs(sum<1>(X{}) / 65.0f * 3.0f, X{} * max<1>(X{}, keepdim) - mean<1>(X{}, keepdim)),
                         {{"x", x}}) <= 1e-5);
  constexpr explanation e = explain_type<decltype(X{} * max<1>(X{}, keepdim) - mean<1>(X{}, keepdim))>();
  static_assert(e.kernels == 1, "two reductions of x and their epilogue: one row kernel");
}

TEST_CASE("row kernels over many rows per thread: strided rows, several reduced axes, -inf and NaN rows") {
  // the sweeps prefetch the final sweep's destination and (softmax) the thread's next row:
  // rows of odd lengths, rows that are not adjacent in memory, rows spanning two axes
  using X = input<"x", f32, shape<dyn, dyn>>;
  for (index_t len : {1, 15, 17, 1000, 4097}) {
    INFO("row length " << len);
    auto x = kt::rand<float, 2>({97, len}, -30, 30);
    CHECK(kt::cpu_vs_eager(softmax(X{}), {{"x", x}}) <= 1e-5);
    CHECK(kt::cpu_vs_eager(log_softmax(X{}), {{"x", x}}) <= 1e-5);
    // every other row, and the transpose (rows are columns of x)
    tensor<float, 2> strided = x.slice(0, 0, 97, 2);
    CHECK(kt::cpu_vs_eager(softmax(X{}), {{"x", strided}}) <= 1e-5);
    CHECK(kt::cpu_vs_eager(softmax<0>(X{}), {{"x", x}}) <= 1e-5);
  }
  using Y = input<"y", f32, shape<dyn, dyn, dyn>>;
  auto y = kt::rand<float, 3>({33, 7, 131}, -5, 5);
  CHECK(kt::cpu_vs_eager(exp(Y{}) / sum<1, 2>(exp(Y{}), keepdim), {{"y", y}}) <= 1e-5);
  CHECK(kt::cpu_vs_eager(layer_norm(Y{}, param<"g", f32, shape<dyn, dyn>>{}, param<"b", f32, shape<dyn, dyn>>{}),
                         {{"y", y}, {"g", kt::rand<float, 2>({7, 131})}, {"b", kt::rand<float, 2>({7, 131})}}) <= 1e-4);
  // rows of -inf, rows with a NaN or +inf: the same as the eager reference (NaN rows)
  auto z = kt::rand<float, 2>({40, 1001}, -3e4, 3e4);
  const float inf = std::numeric_limits<float>::infinity();
  for (index_t j = 0; j < 1001; ++j) z(3, j) = -inf;
  z(7, 500) = std::numeric_limits<float>::quiet_NaN();
  z(11, 0) = inf;
  z(12, 1000) = -inf;
  CHECK(kt::cpu_vs_eager(softmax(X{}), {{"x", z}}) <= 1e-5);
  CHECK(kt::cpu_vs_eager(log_softmax(X{}), {{"x", z}}) <= 1e-5);
}

TEST_CASE("row kernels' non-temporal stores (stream_threshold) change no result") {
  // above the threshold, a row kernel's full-space results take non-temporal stores (rows along
  // the innermost axis only); reduced results, and column reductions, ordinary ones
  using X = input<"x", f32, shape<dyn, dyn>>;
  using G = param<"g", f32, shape<dyn>>;
  using B = param<"b", f32, shape<dyn>>;
  const auto sm = softmax(X{});
  const auto ln = layer_norm(X{}, G{}, B{});
  const auto both = outputs(sum<1>(X{}), X{} - mean<1>(X{}, keepdim));  // one result per row, one full
  const auto cols = softmax<0>(X{});
  for (index_t len : {1, 17, 1000, 4097}) {
    INFO("row length " << len);
    auto x = kt::rand<float, 2>({41, len}, -20, 20);
    auto g = kt::rand<float, 1>({len}), b = kt::rand<float, 1>({len});
    const std::initializer_list<feed> xs{{"x", x}}, xgb{{"x", x}, {"g", g}, {"b", b}};
    const std::int64_t old = cpu::set_stream_threshold(0);  // every eligible store
    cpu::stats() = {};
    CHECK(kt::cpu_vs_eager(sm, xs) <= 1e-5);  // with 2, 1 and 3 threads
    CHECK(kt::cpu_vs_eager(ln, xgb) <= 1e-4);
    // (a row sum of values in [-20, 20] cancels: blocks of float steps err by up to 7
    // roundings of a block's magnitudes, about 1.6e-5 of the largest sum here with 8 lanes;
    // the reductions' tolerance, 1e-4, as the bench's)
    CHECK(kt::cpu_vs_eager(both, xs) <= 1e-4);
    // each one kernel, run 3 times; rows of one element have no contiguous innermost axis
    const long streamed = len > 1 ? 9 : 0;
    CHECK(cpu::stats().streamed == streamed);
    CHECK(kt::cpu_vs_eager(cols, xs) <= 1e-5);
    CHECK(cpu::stats().streamed == streamed);  // lanes across rows: none
    const auto s_sm = cpu::run_schedule<plan<decltype(sm)>::schedule>(kt::leaves_of(sm, xs));
    const auto s_ln = cpu::run_schedule<plan<decltype(ln)>::schedule>(kt::leaves_of(ln, xgb));
    const auto s_both = cpu::run_schedule<plan<decltype(both)>::schedule>(kt::leaves_of(both, xs));
    cpu::set_stream_threshold(std::int64_t{1} << 62);  // none
    cpu::stats() = {};
    const auto n_sm = cpu::run_schedule<plan<decltype(sm)>::schedule>(kt::leaves_of(sm, xs));
    const auto n_ln = cpu::run_schedule<plan<decltype(ln)>::schedule>(kt::leaves_of(ln, xgb));
    const auto n_both = cpu::run_schedule<plan<decltype(both)>::schedule>(kt::leaves_of(both, xs));
    CHECK(cpu::stats().streamed == 0);
    cpu::set_stream_threshold(old);
    CHECK(kt::same_bits(s_sm[0], n_sm[0]));
    CHECK(kt::same_bits(s_ln[0], n_ln[0]));
    CHECK(kt::same_bits(s_both[0], n_both[0]));
    CHECK(kt::same_bits(s_both[1], n_both[1]));
  }
}

namespace {
struct stream_threshold_guard {  // restores the threshold however the test case ends
  std::int64_t old;
  explicit stream_threshold_guard(std::int64_t t) : old(cpu::set_stream_threshold(t)) {}
  ~stream_threshold_guard() { cpu::set_stream_threshold(old); }
};
struct threads_guard {
  int old;
  explicit threads_guard(int n) : old(cpu::set_num_threads(n)) {}
  ~threads_guard() { cpu::set_num_threads(old); }
};
}  // namespace

TEST_CASE("row kernels with a row cache pipeline each row's final sweep into the next row's sweep") {
  // softmax, softmax times g (a final sweep that multiplies only), exp(x) / sum(exp(x)) (one
  // reduction stage), every other row, and bf16 softmax, over rows of pipeline_min_row to
  // pipeline_max_row elements: a row's final sweep runs in the loop of the next row's exp
  // sweep, the last row of each chunk of rows on its own. Enough rows that 2 and 3 threads
  // split them into chunks, which end on other rows than with 1 thread: equal bits for all
  // (cpu_vs_eager) mean a row's result does not depend on where its final sweep ran; with one
  // thread, every row but the last is deferred. Not pipelined: softmax times g plus b (its
  // final sweep adds, and g++ contracts the multiply and the add into an FMA in one loop and not
  // in the other), f64 softmax (xsimd's f64 exp may contract too), two reduced axes, and rows
  // outside the range.
  using X = input<"x", f32, shape<dyn, dyn>>;
  using G = param<"g", f32, shape<dyn>>;
  using B = param<"b", f32, shape<dyn>>;
  using D = input<"d", f64, shape<dyn, dyn>>;
  using H = input<"h", bf16, shape<dyn, dyn>>;
  const auto sm = softmax(X{});
  const auto scaled = softmax(X{}) * G{};
  const auto one_stage = exp(X{}) / sum<1>(exp(X{}), keepdim);
  const auto affine = softmax(X{}) * G{} + B{};
  const auto sm64 = softmax(D{});
  const auto sm16 = softmax(H{});
  static_assert(plan<decltype(sm)>::schedule.kernels.size() == 1);
  static_assert(plan<decltype(scaled)>::schedule.kernels.size() == 1);
  static_assert(plan<decltype(one_stage)>::schedule.kernels.size() == 1);
  static_assert(plan<decltype(affine)>::schedule.kernels.size() == 1);
  constexpr index_t lo = cpu::detail::pipeline_min_row, hi = cpu::detail::pipeline_max_row;
  for (index_t len : {lo - 1, lo, lo + 1, index_t{1000}, index_t{4097}, hi, hi + 1}) {
    const bool piped = len >= lo && len <= hi;
    // rows: one, two, and enough for about four chunks of parallel_grain elements
    for (index_t rows : {index_t{1}, index_t{2}, 4 * cpu::detail::parallel_grain / len + 3}) {
      INFO("rows " << rows << " of " << len);
      for (std::int64_t threshold : {std::int64_t{1} << 62, std::int64_t{0}}) {  // stores streamed or not
        INFO("stream threshold " << threshold);
        const stream_threshold_guard guard(threshold);
        // fresh inputs each time, so that a result left in a recycled buffer cannot pass
        auto x = kt::rand<float, 2>({rows, len}, -20, 20);
        if (rows > 1) x(1, len / 2) = -std::numeric_limits<float>::infinity();
        auto d = kt::rand<double, 2>({rows, len}, -20, 20);
        auto h = kt::rand<bfloat16, 2>({rows, len}, -20, 20);
        tensor<float, 2> every_other = kt::rand<float, 2>({2 * rows, len}, -20, 20).slice(0, 0, 2 * rows, 2);
        const std::initializer_list<feed> in{{"x", x}, {"g", kt::rand<float, 1>({len})}, {"b", kt::rand<float, 1>({len})}};
        const long runs = piped ? 3 : 0;  // cpu_vs_eager runs each 3 times
        cpu::stats() = {};
        CHECK(kt::cpu_vs_eager(sm, in) <= 1e-5);
        CHECK(kt::cpu_vs_eager(scaled, in) <= 1e-5);
        CHECK(kt::cpu_vs_eager(one_stage, in) <= 1e-5);
        CHECK(kt::cpu_vs_eager(sm, {{"x", every_other}}) <= 1e-5);
        CHECK(kt::cpu_vs_eager(sm16, {{"h", h}}) <= 1e-2);
        CHECK(cpu::stats().pipelined == 5 * runs);
        CHECK(kt::cpu_vs_eager(affine, in) <= 1e-5);
        CHECK(kt::cpu_vs_eager(sm64, {{"d", d}}) <= 1e-12);
        CHECK(cpu::stats().pipelined == 5 * runs);
        // one thread runs the rows on this one: all but the last deferred
        const threads_guard one(1);
        cpu::stats() = {};
        const auto y = cpu::run_schedule<plan<decltype(sm)>::schedule>(kt::leaves_of(sm, in));
        CHECK(cpu::stats().deferred == (piped ? rows - 1 : 0));
      }
    }
  }
  // two reduced axes: not pipelined
  using Y = input<"y", f32, shape<dyn, dyn, dyn>>;
  cpu::stats() = {};
  CHECK(kt::cpu_vs_eager(exp(Y{}) / sum<1, 2>(exp(Y{}), keepdim), {{"y", kt::rand<float, 3>({9, 3, 700})}}) <= 1e-5);
  CHECK(cpu::stats().pipelined == 0);
}
