// gather (embedding, and along an axis) and scatter_add against plain loops, bad indices, their derivatives;
// rand: the generator's values on every backend, its statistics; dropout's mask, scaling and
// gradient; the trainer's seed; cumsum, cumprod and argsort against plain loops.
#include "cpu_support.hpp"
#include "gradcheck.hpp"

#include <kiln/nn/modules.hpp>

#include <algorithm>
#include <numeric>
#include <vector>

using namespace kiln;

TEST_CASE("gather: rows of a table, against a plain loop") {
  using T = input<"t", f32, shape<dyn, 3>>;
  using I = input<"i", i64, shape<dyn, 4>>;
  const any_tensor t = kt::random_tensor(f32, dims{7, 3});
  any_tensor idx(i64, dims{2, 4});
  const std::int64_t iv[] = {0, 6, 3, 3, 1, 0, 5, 6};
  for (int k = 0; k < 8; ++k) idx.data<std::int64_t>()[k] = iv[k];
  for (const any_tensor& got : {eval_any(gather(T{}, I{}), {{"t", t}, {"i", idx}}),
                                eval_any(embedding(I{}, T{}), {{"t", t}, {"i", idx}}, eager::backend)}) {
    REQUIRE(got.shape() == dims{2, 4, 3});
    for (int k = 0; k < 8; ++k)
      for (int c = 0; c < 3; ++c) CHECK(got.data<float>()[k * 3 + c] == t.data<float>()[iv[k] * 3 + c]);
  }
  CHECK(kt::cpu_vs_eager(gather(T{}, I{}) * 2.0f, {{"t", t}, {"i", idx}}) == 0);
  // i32 indices, a rank-1 table (scalar rows), a transposed (strided) table
  using I32 = input<"i", i32, shape<5>>;
  using V = input<"v", f64, shape<9>>;
  any_tensor i32s(i32, dims{5});
  for (int k = 0; k < 5; ++k) i32s.data<std::int32_t>()[k] = (7 * k) % 9;
  const any_tensor v = kt::random_tensor(f64, dims{9});
  const any_tensor g1 = eval_any(gather(V{}, I32{}), {{"v", v}, {"i", i32s}});
  for (int k = 0; k < 5; ++k) CHECK(g1.data<double>()[k] == v.data<double>()[(7 * k) % 9]);
  const any_tensor tt = kt::random_tensor(f32, dims{3, 7}).transpose(0, 1);
  CHECK(kt::cpu_vs_eager(gather(T{}, I{}), {{"t", tt}, {"i", idx}}) == 0);
}

TEST_CASE("gather and scatter_add reject indices out of range, on both backends") {
  using T = input<"t", f32, shape<dyn, 3>>;
  using I = input<"i", i64, shape<dyn>>;
  const any_tensor t = kt::random_tensor(f32, dims{4, 3});
  any_tensor bad(i64, dims{3});
  bad.data<std::int64_t>()[0] = 1;
  bad.data<std::int64_t>()[1] = 4;  // one past the end
  bad.data<std::int64_t>()[2] = 0;
  CHECK_THROWS_WITH_AS(eval_any(gather(T{}, I{}), {{"t", t}, {"i", bad}}), "kiln: gather: index 4 at position 1 is outside [0, 4)",
                       std::out_of_range);
  CHECK_THROWS_AS(eval_any(gather(T{}, I{}), {{"t", t}, {"i", bad}}, eager::backend), std::out_of_range);
  bad.data<std::int64_t>()[1] = -1;
  CHECK_THROWS_AS(eval_any(scatter_add(I{}, input<"s", f32, shape<dyn, 3>>{}, T{}), {{"t", t}, {"i", bad}, {"s", kt::random_tensor(f32, dims{3, 3})}}),
                  std::out_of_range);
}

TEST_CASE("gather and scatter_add along an axis (torch.gather's dim): plain loops, bad indices") {
  // an index narrower than x on the other axes, an index along an axis longer than x's
  using X = input<"x", f32, shape<4, 5>>;
  using I = input<"i", i64, shape<3, 7>>;
  using S = input<"s", f32, shape<3, 9>>;
  const any_tensor x = kt::random_tensor(f32, dims{4, 5}), src = kt::random_tensor(f32, dims{3, 9});
  any_tensor idx(i64, dims{3, 7});
  for (int k = 0; k < 21; ++k) idx.data<std::int64_t>()[k] = (k * 7 + 2) % 5;
  const float* xv = x.data<float>();
  const std::int64_t* iv = idx.data<std::int64_t>();
  std::vector<float> added(xv, xv + 20);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 7; ++c) added[static_cast<std::size_t>(r * 5 + iv[r * 7 + c])] += src.data<float>()[r * 9 + c];
  for (const bool eager : {false, true}) {
    const auto run = [&](const auto& e, std::initializer_list<feed> f) {
      return (eager ? eval_any(e, f, eager::backend) : eval_any(e, f)).contiguous();
    };
    const any_tensor g = run(gather<1>(X{}, I{}), {{"x", x}, {"i", idx}});
    REQUIRE(g.shape() == dims{3, 7});
    for (int r = 0; r < 3; ++r)
      for (int c = 0; c < 7; ++c) CHECK(g.data<float>()[r * 7 + c] == xv[r * 5 + iv[r * 7 + c]]);
    const any_tensor s = run(scatter_add<-1>(X{}, I{}, S{}), {{"x", x}, {"i", idx}, {"s", src}});
    REQUIRE(s.shape() == dims{4, 5});
    for (int k = 0; k < 20; ++k) CHECK(s.data<float>()[k] == doctest::Approx(added[static_cast<std::size_t>(k)]).epsilon(1e-6));
    // 5 is past the end of axis 1 but inside x's 20 elements: rejected all the same
    any_tensor bad = idx.clone();
    bad.data<std::int64_t>()[8] = 5;
    CHECK_THROWS_AS(run(gather<1>(X{}, I{}), {{"x", x}, {"i", bad}}), std::out_of_range);
    CHECK_THROWS_AS(run(scatter_add<1>(X{}, I{}, S{}), {{"x", x}, {"i", bad}, {"s", src}}), std::out_of_range);
    bad.data<std::int64_t>()[8] = -1;
    CHECK_THROWS_AS(run(gather<1>(X{}, I{}), {{"x", x}, {"i", bad}}), std::out_of_range);
  }
}

TEST_CASE("a bad index writes none of a plan's outputs") {
  // the first output is gather's table, so its kernel ran, and wrote its destination, before
  // gather threw
  using T = input<"t", f32, shape<dyn, 3>>;
  using I = input<"i", i64, shape<dyn>>;
  const any_tensor t = kt::random_tensor(f32, dims{4, 3});
  any_tensor idx(i64, dims{3});
  idx.data<std::int64_t>()[0] = 2;
  idx.data<std::int64_t>()[1] = 0;
  idx.data<std::int64_t>()[2] = 5;  // out of range, last
  const auto f = compile(outputs(T{} + T{}, gather(T{} + T{}, I{}) + 1.0f));
  const any_tensor d0 = kt::random_tensor(f32, dims{4, 3}), d1 = kt::random_tensor(f32, dims{3, 3});
  const std::vector<double> before0 = kt::values_of(d0), before1 = kt::values_of(d1);
  std::vector<any_tensor> out{d0, d1};
  CHECK_THROWS_AS(f(T{} = t, I{} = idx, out), std::out_of_range);
  CHECK(kt::values_of(d0) == before0);
  CHECK(kt::values_of(d1) == before1);
  idx.data<std::int64_t>()[2] = 3;
  f(T{} = t, I{} = idx, out);
  CHECK(out[0].bytes() == d0.bytes());  // still written in place
  const float t9 = t.data<float>()[9];
  CHECK(d0.data<float>()[9] == t9 + t9);
  CHECK(d1.data<float>()[6] == (t9 + t9) + 1.0f);
}

TEST_CASE("scatter_add: repeated indices add, against a plain loop") {
  using I = input<"i", i64, shape<dyn>>;
  using S = input<"s", f64, shape<dyn, 2>>;
  using L = input<"l", f64, shape<5, 2>>;
  any_tensor idx(i64, dims{6});
  const std::int64_t iv[] = {2, 0, 2, 4, 2, 0};
  for (int k = 0; k < 6; ++k) idx.data<std::int64_t>()[k] = iv[k];
  const any_tensor s = kt::random_tensor(f64, dims{6, 2});
  std::vector<double> want(10, 0.0);
  for (int k = 0; k < 6; ++k)
    for (int c = 0; c < 2; ++c) want[static_cast<std::size_t>(iv[k] * 2 + c)] += s.data<double>()[k * 2 + c];
  const any_tensor like = kt::random_tensor(f64, dims{5, 2});  // its values are not read
  for (const any_tensor& got : {eval_any(scatter_add(I{}, S{}, L{}), {{"i", idx}, {"s", s}, {"l", like}}),
                                eval_any(scatter_add(I{}, S{}, L{}), {{"i", idx}, {"s", s}, {"l", like}}, eager::backend)}) {
    const auto g = kt::values_of(got);
    for (std::size_t k = 0; k < 10; ++k) CHECK(g[k] == doctest::Approx(want[k]).epsilon(1e-15));
  }
}

// Sums into every row of a [rows, ...row shape] result, in index order, in double: what the
// backends compute, rounded to float once.
std::vector<float> scatter_add_loop(const std::vector<double>& idx, const std::vector<double>& src, index_t rows,
                                    index_t width) {
  std::vector<double> sum(static_cast<std::size_t>(rows * width), 0.0);
  for (std::size_t k = 0; k < idx.size(); ++k)
    for (index_t c = 0; c < width; ++c)
      sum[static_cast<std::size_t>(static_cast<index_t>(idx[k]) * width + c)] +=
          src[k * static_cast<std::size_t>(width) + static_cast<std::size_t>(c)];
  return std::vector<float>(sum.begin(), sum.end());
}

TEST_CASE("scatter_add, CPU backend: wide rows, strided sources, 1 vs 3 threads, stale blocks in the storage cache") {
  // 300 x 1000 floats summed in double: a 2.4 MB accumulator, a size the storage cache holds;
  // blocks of that size full of NaNs are waiting there, so an accumulator not zeroed shows.
  using I = input<"i", i64, shape<dyn>>;
  const index_t n = 700, rows = 300;
  const any_tensor idx = kt::random_tensor(i64, dims{n}, 0, rows);  // repeats: they add
  const std::vector<double> iv = kt::values_of(idx);
  kt::storage_cache_scope scope(std::size_t{64} << 20);
  {
    std::vector<tensor<double, 2>> stale;
    for (int i = 0; i < 3; ++i) {
      stale.emplace_back(std::array<index_t, 2>{rows, 1000});
      std::fill(stale.back().data(), stale.back().data() + stale.back().numel(), std::nan(""));
    }
  }
  // e = scatter_add(I, S, L) for a source s and a result of shape out: bitwise the plain loop,
  // the accumulator served by the cache (a NaN block), and the CPU backend against eager with
  // 1 and 3 threads
  auto check = [&](auto e, const any_tensor& s, const dims& out) {
    const std::vector<float> want = scatter_add_loop(iv, kt::values_of(s), rows, out.numel() / rows);
    const std::uint64_t h0 = storage_cache_statistics().hits;
    const any_tensor got = eval_any(e, {{"i", idx}, {"s", s}, {"l", kt::random_tensor(f32, out)}});
    CHECK(storage_cache_statistics().hits > h0);
    const std::vector<double> g = kt::values_of(got);
    std::size_t wrong = 0;
    for (std::size_t q = 0; q < want.size(); ++q) wrong += static_cast<float>(g[q]) != want[q];
    CHECK(wrong == 0);
    CHECK(kt::cpu_vs_eager(e, {{"i", idx}, {"s", s}, {"l", got}}) == 0);
  };
  SUBCASE("rows of one axis, the source transposed") {
    using S = input<"s", f32, shape<dyn, 1000>>;
    using L = input<"l", f32, shape<300, 1000>>;
    check(scatter_add(I{}, S{}, L{}), kt::random_tensor(f32, dims{1000, n}).transpose(0, 1), dims{rows, 1000});
  }
  SUBCASE("rows of two axes") {
    using S = input<"s", f32, shape<dyn, 4, 250>>;
    using L = input<"l", f32, shape<300, 4, 250>>;
    check(scatter_add(I{}, S{}, L{}), kt::random_tensor(f32, dims{n, 4, 250}), dims{rows, 4, 250});
  }
}

TEST_CASE("gradients: embedding to its table, scatter_add to its source") {
  using T = input<"t", f64, shape<6, 3>>;
  using I = input<"i", i64, shape<4, 2>>;
  using S = input<"s", f64, shape<4, 2, 3>>;
  any_tensor idx(i64, dims{4, 2});
  const std::int64_t iv[] = {5, 1, 1, 0, 3, 5, 5, 2};  // repeats: their gradients add up
  for (int k = 0; k < 8; ++k) idx.data<std::int64_t>()[k] = iv[k];
  const std::vector<feed> f = {{"t", kt::random_f64(dims{6, 3})}, {"i", idx}, {"s", kt::random_f64(dims{4, 2, 3})}};
  kt::gradcheck<T>(embedding(I{}, T{}), f);
  kt::gradcheck<T>(tanh(embedding(I{}, T{})) * embedding(I{}, T{}), f);
  kt::gradcheck<S>(scatter_add(I{}, S{}, T{}), f);
}

TEST_CASE("rand_like: the generator's numbers on every backend and thread count") {
  using X = input<"x", f32, shape<dyn, 37>>;
  using Seed = seed_input;
  any_tensor seed(i64, dims{});
  seed.data<std::int64_t>()[0] = 1234567;
  const any_tensor x = kt::random_tensor(f32, dims{53, 37});
  const any_tensor r = eval_any(rand_like<"a">(X{}, Seed{}), {{"x", x}, {"kiln.seed", seed}});
  // (rand_like reads only x's shape) element i is philox(seed, stream("a")).uniform24(i)
  const philox p(1234567, static_cast<std::uint32_t>(stream_of("a")));
  for (index_t i = 0; i < r.numel(); ++i) CHECK(r.data<float>()[i] == p.uniform24(static_cast<std::uint64_t>(i)));
  CHECK(kt::cpu_vs_eager(rand_like<"a">(X{}, Seed{}) + 0.0f, {{"x", x}, {"kiln.seed", seed}}) == 0);
  // statistics of 2M draws: mean 1/2, variance 1/12, within 6 standard errors
  const any_tensor big = eval_any(rand_like<"b">(input<"y", f32, shape<dyn>>{}, Seed{}), {{"y", any_tensor(f32, dims{2000000})}, {"kiln.seed", seed}});
  double m = 0, v = 0, lo = 1, hi = 0;
  for (index_t i = 0; i < big.numel(); ++i) {
    const double u = big.data<float>()[i];
    m += u;
    v += u * u;
    lo = std::min(lo, u);
    hi = std::max(hi, u);
  }
  m /= 2e6;
  v = v / 2e6 - m * m;
  CHECK(std::fabs(m - 0.5) < 6 * std::sqrt(1.0 / 12 / 2e6));
  CHECK(std::fabs(v - 1.0 / 12) < 6 * 0.0745 / std::sqrt(2e6));  // sd of (u - 1/2)^2 is 1/sqrt(180)
  CHECK(lo >= 0);
  CHECK(hi < 1);
  // another stream or seed: other numbers
  const any_tensor r2 = eval_any(rand_like<"c">(X{}, Seed{}), {{"x", x}, {"kiln.seed", seed}});
  seed.data<std::int64_t>()[0] = 1234568;
  const any_tensor r3 = eval_any(rand_like<"a">(X{}, Seed{}), {{"x", x}, {"kiln.seed", seed}});
  int same2 = 0, same3 = 0;
  for (index_t i = 0; i < r.numel(); ++i) {
    same2 += r.data<float>()[i] == r2.data<float>()[i];
    same3 += r.data<float>()[i] == r3.data<float>()[i];
  }
  CHECK(same2 < 5);
  CHECK(same3 < 5);
}

TEST_CASE("dropout: mask, scaling, gradient") {
  using X = input<"x", f64, shape<dyn, 64>>;
  any_tensor seed(i64, dims{});
  seed.data<std::int64_t>()[0] = 42;
  const any_tensor x = kt::random_tensor(f64, dims{200, 64}, 0.5, 2);  // never 0
  const double p = 0.3;
  const auto y = dropout<"d", 30>(X{}, seed_input{});
  const auto yv = kt::values_of(eval_any(y, {{"x", x}, {"kiln.seed", seed}}));
  const auto xv = kt::values_of(x);
  const philox gen(42, static_cast<std::uint32_t>(stream_of("d")));
  index_t dropped = 0;
  for (std::size_t i = 0; i < yv.size(); ++i) {
    const bool keep = gen.uniform24(i) >= static_cast<float>(p);
    CHECK(yv[i] == (keep ? xv[i] * (1 / (1 - p)) : 0.0));
    dropped += !keep;
  }
  const double frac = static_cast<double>(dropped) / static_cast<double>(yv.size());
  CHECK(std::fabs(frac - p) < 6 * std::sqrt(p * (1 - p) / static_cast<double>(yv.size())));
  // the gradient is the same mask and scale; the backend and thread count do not matter
  const auto g = kt::values_of(eval_any(grad(sum(y * y), X{}), {{"x", x}, {"kiln.seed", seed}}));
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(2 * yv[i] * (yv[i] != 0 ? 1 / (1 - p) : 0)).epsilon(1e-14));
  CHECK(kt::cpu_vs_eager(grad(sum(y * y), X{}), {{"x", x}, {"kiln.seed", seed}}) <= 1e-14);
  // finite differences hold with the mask fixed by the seed
  using XS = input<"x", f64, shape<3, 64>>;
  kt::gradcheck<XS>(dropout<"d", 1, 2>(XS{} * XS{}, seed_input{}), {{"x", kt::random_tensor(f64, dims{3, 64})}, {"kiln.seed", seed}});
  // p and 1 / (1 - p) are graph constants: the expression stays pure (shared by tracing)
  static_assert(record_ref<decltype(y)>().pure && record_ref<decltype(y)>().tree_nodes == 10);
}

TEST_CASE("nn modules: conv2d, pooling (and with options), flatten, dropout in training mode only, embedding") {
  using net = nn::sequential<nn::conv2d<"c1", 1, 4, 3, 1, 1>, nn::relu, nn::max_pool2d<2>, nn::flatten,
                             nn::dropout<"drop", 50>, nn::linear<"fc", 64, 10>>;
  using In = input<"x", f32, shape<dyn, 1, 8, 8>>;
  static_assert(std::tuple_size_v<net::params> == 4);
  static_assert(nn::parameter_count<net::params>() == 4 * 9 + 4 + 640 + 10);
  const nn::state_dict p = nn::make_params<net>(3);
  CHECK(p.at("c1.weight").shape() == dims{4, 1, 3, 3});
  for (double w : kt::values_of(p.at("c1.weight"))) CHECK(std::fabs(w) <= 1.0 / 3.0);  // 1/sqrt(1*3*3)
  const any_tensor x = kt::random_tensor(f32, dims{3, 1, 8, 8});
  any_tensor seed(i64, dims{});
  // inference: no random op, no seed needed
  constexpr auto infer = net{}(In{});
  static_assert(count_op(traced<decltype(infer)>::value, op::rand) == 0);
  const auto fi = nn::feeds(p, {{"x", x}}), ft = nn::feeds(p, {{"x", x}, {"kiln.seed", seed}});
  const any_tensor yi = eval_all(infer, std::span<const feed>(fi))[0];
  CHECK(yi.shape() == dims{3, 10});
  // training: the dropout draws from the seed
  constexpr auto trained = net{}(In{}, nn::train);
  static_assert(count_op(traced<decltype(trained)>::value, op::rand) == 1);
  const any_tensor yt = eval_all(trained, std::span<const feed>(ft))[0];
  CHECK(kt::values_of(yt) != kt::values_of(yi));
  // pooling modules with PyTorch's options: the functions' values (checked against PyTorch in
  // the conformance suite)
  constexpr pool2d_options o{.kernel = {3, 2}, .stride = 2, .padding = 1, .ceil_mode = true, .count_include_pad = false};
  using P = input<"x", f32, shape<dyn, 1, 7, 8>>;
  const any_tensor xp = kt::random_tensor(f32, dims{2, 1, 7, 8});
  CHECK(kt::values_of(eval_any(nn::avg_pool2d_with<o>{}(P{}), {{"x", xp}})) ==
        kt::values_of(eval_any(avg_pool2d<o>(P{}), {{"x", xp}})));
  CHECK(kt::values_of(eval_any(nn::max_pool2d_with<pool2d_options{.kernel = 2, .dilation = 2}>{}(P{}), {{"x", xp}})) ==
        kt::values_of(eval_any(max_pool2d<pool2d_options{.kernel = 2, .dilation = 2}>(P{}), {{"x", xp}})));
  // embedding: normal(0, 1) rows
  using E = nn::embedding<"emb", 50, 8>;
  const nn::state_dict pe = nn::make_params<E>(1);
  double s = 0, s2 = 0;
  for (double w : kt::values_of(pe.at("emb.weight"))) {
    s += w;
    s2 += w * w;
  }
  CHECK(std::fabs(s / 400) < 0.3);
  CHECK(std::fabs(s2 / 400 - 1) < 0.3);
}

TEST_CASE("cumsum and argsort: threaded CPU routines against plain loops, strided inputs, both directions") {
  constexpr index_t rows = 37, cols = 1531;  // enough lines and length to split across threads
  using X = input<"x", f32, shape<rows, cols>>;
  any_tensor x = kt::random_tensor(f32, dims{rows, cols});
  float* xp = x.data<float>();
  for (index_t k = 0; k < rows * cols; k += 97) xp[k] = xp[k + 1];  // ties for the stable order
  const auto at = [&](index_t r, index_t c) { return xp[r * cols + c]; };
  // along the rows (contiguous) and along the columns of the transpose (strided lines)
  const any_tensor along_rows = eval_any(cumsum<1>(X{}), {{"x", x}});
  const any_tensor along_cols = eval_any(cumsum<0>(transpose(X{})), {{"x", x}});
  for (index_t r = 0; r < rows; ++r) {
    double s = 0;
    for (index_t c = 0; c < cols; ++c) {
      s += at(r, c);  // in double, as the routine (and PyTorch's CPU cumsum)
      INFO("row " << r << " column " << c);
      REQUIRE(along_rows.data<float>()[r * cols + c] == static_cast<float>(s));
      REQUIRE(along_cols.data<float>()[c * rows + r] == static_cast<float>(s));
    }
  }
  // the gradient of sum(cumsum(x) * w) is w's running sums from the end
  using W = input<"w", f32, shape<rows, cols>>;
  const any_tensor w = kt::random_tensor(f32, dims{rows, cols});
  const any_tensor g = eval_any(grad(sum(cumsum<1>(X{}) * W{}), X{}), {{"x", x}, {"w", w}});
  for (index_t r = 0; r < rows; ++r) {
    double s = 0;
    for (index_t c = cols - 1; c >= 0; --c) {
      s += w.data<float>()[r * cols + c];
      REQUIRE(g.data<float>()[r * cols + c] == static_cast<float>(s));
    }
  }
  // argsort: std::stable_sort's order, ascending and descending, along both axes
  const any_tensor up = eval_any(argsort<1>(X{}), {{"x", x}});
  const any_tensor down = eval_any(argsort<0, true>(X{}), {{"x", x}});
  for (index_t r = 0; r < rows; ++r) {
    std::vector<std::int64_t> want(static_cast<std::size_t>(cols));
    std::iota(want.begin(), want.end(), 0);
    std::stable_sort(want.begin(), want.end(), [&](std::int64_t i, std::int64_t j) { return at(r, i) < at(r, j); });
    for (index_t c = 0; c < cols; ++c) REQUIRE(up.data<std::int64_t>()[r * cols + c] == want[static_cast<std::size_t>(c)]);
  }
  for (index_t c = 0; c < cols; c += 101) {
    std::vector<std::int64_t> want(static_cast<std::size_t>(rows));
    std::iota(want.begin(), want.end(), 0);
    std::stable_sort(want.begin(), want.end(), [&](std::int64_t i, std::int64_t j) { return at(j, c) < at(i, c); });
    for (index_t r = 0; r < rows; ++r) REQUIRE(down.data<std::int64_t>()[r * cols + c] == want[static_cast<std::size_t>(r)]);
  }
  // integers and bools sum as i64 (wrapping), as PyTorch's
  using B = input<"b", boolean, shape<5>>;
  any_tensor b(boolean, dims{5});
  for (int k = 0; k < 5; ++k) b.data<bool>()[k] = k != 2;
  for (const any_tensor& c : {eval_any(cumsum<0>(B{}), {{"b", b}}), eval_any(cumsum<0>(B{}), {{"b", b}}, eager::backend)}) {
    REQUIRE(c.dt() == i64);
    CHECK(c.data<std::int64_t>()[4] == 4);
  }
}

TEST_CASE("cumprod and prod: the threaded CPU routine against a plain loop; gradients with zeros against finite differences") {
  constexpr index_t rows = 37, cols = 301;
  using X = input<"x", f32, shape<rows, cols>>;
  any_tensor x = kt::random_tensor(f32, dims{rows, cols});
  float* xp = x.data<float>();
  for (index_t k = 0; k < rows * cols; ++k) xp[k] = 1.0f + xp[k] / 64;  // near 1: 301 factors stay in range
  xp[5 * cols + 17] = 0.0f;                                           // a zero: the products after it are 0
  // along the rows (contiguous lines) and the columns of the transpose (strided), on both backends
  const any_tensor along_rows = eval_any(cumprod<1>(X{}), {{"x", x}});
  const any_tensor along_cols = eval_any(cumprod<0>(transpose(X{})), {{"x", x}});
  const any_tensor eager_rows = eval_any(cumprod<1>(X{}), {{"x", x}}, eager::backend);
  const any_tensor products = eval_any(prod<1>(X{}), {{"x", x}});
  for (index_t r = 0; r < rows; ++r) {
    double p = 1;
    for (index_t c = 0; c < cols; ++c) {
      p *= xp[r * cols + c];  // in double, as the routine (and PyTorch's CPU cumprod)
      INFO("row " << r << " column " << c);
      REQUIRE(along_rows.data<float>()[r * cols + c] == static_cast<float>(p));
      REQUIRE(along_cols.data<float>()[c * rows + r] == static_cast<float>(p));
      REQUIRE(eager_rows.data<float>()[r * cols + c] == doctest::Approx(p).epsilon(1e-6));  // (long double)
    }
    REQUIRE(products.data<float>()[r] == static_cast<float>(p));
  }
  // f64 gradients of sum(cumprod(x) * w) and of sum(prod(x) * v) against central differences,
  // on rows with no zero, one zero (first, inside, last) and two
  using Y = input<"y", f64, shape<5, 6>>;
  using Wy = input<"w", f64, shape<5, 6>>;
  using V = input<"v", f64, shape<5>>;
  any_tensor y = kt::random_tensor(f64, dims{5, 6}), w = kt::random_tensor(f64, dims{5, 6}), v = kt::random_tensor(f64, dims{5});
  double* yp = y.data<double>();
  for (index_t k = 0; k < 30; ++k) yp[k] = 0.5 + std::abs(yp[k]);
  yp[6] = 0;                  // row 1: first
  yp[12 + 3] = 0;             // row 2: inside
  yp[18 + 5] = 0;             // row 3: last
  yp[24 + 1] = yp[24 + 4] = 0;  // row 4: two
  const auto loss_c = sum(cumprod<1>(Y{}) * Wy{});
  const auto loss_p = sum(prod<1>(Y{}) * V{});
  const any_tensor gc = eval_any(grad(loss_c, Y{}), {{"y", y}, {"w", w}});
  const any_tensor gp = eval_any(grad(loss_p, Y{}), {{"y", y}, {"v", v}});
  const any_tensor gc_eager = eval_any(grad(loss_c, Y{}), {{"y", y}, {"w", w}}, eager::backend);
  for (index_t k = 0; k < 30; ++k) {
    const double h = 1e-6, keep = yp[k];
    yp[k] = keep + h;
    const double cp = eval_any(loss_c, {{"y", y}, {"w", w}}).data<double>()[0], pp = eval_any(loss_p, {{"y", y}, {"v", v}}).data<double>()[0];
    yp[k] = keep - h;
    const double cm = eval_any(loss_c, {{"y", y}, {"w", w}}).data<double>()[0], pm = eval_any(loss_p, {{"y", y}, {"v", v}}).data<double>()[0];
    yp[k] = keep;
    INFO("element " << k);
    CHECK(gc.data<double>()[k] == doctest::Approx((cp - cm) / (2 * h)).epsilon(1e-6));
    CHECK(gp.data<double>()[k] == doctest::Approx((pp - pm) / (2 * h)).epsilon(1e-6));
    CHECK(gc_eager.data<double>()[k] == doctest::Approx(gc.data<double>()[k]).epsilon(1e-12));
  }
}
