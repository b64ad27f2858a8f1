// Fusion and memory planning: kernel structure checked with static_assert on explain(), the
// schedule checked by running it kernel by kernel (eager::run_schedule drops every value the
// plan does not keep) against the plain eager run, on fresh random inputs.
#include "support.hpp"

using namespace kiln;

namespace {
using X = input<"x", f32, shape<dyn, 64>>;

/// Runs e's frozen schedule kernel by kernel and the traced graph node by node; returns the
/// largest relative difference.
template <class E>
double schedule_vs_eager(const E& e, std::initializer_list<feed> feeds) {
  constexpr const auto& g = traced<E>::value;
  constexpr const auto& s = plan<E>::schedule;
  static_assert(!check_graph(s.g));
  const auto leaves = bind_leaves(g, e, feeds);
  const any_tensor a = eager::run(g, leaves)[0], b = eager::run_schedule(s, leaves)[0];
  REQUIRE(a.shape() == b.shape());
  any_tensor x(f64, a.shape()), y(f64, b.shape());
  x.copy_from(a);
  y.copy_from(b);
  double worst = 0;
  for (index_t i = 0; i < x.numel(); ++i)
    worst = std::max(worst, std::fabs(x.data<double>()[i] - y.data<double>()[i]) / (1 + std::fabs(x.data<double>()[i])));
  return worst;
}

}  // namespace

TEST_CASE("softmax, log_softmax and layer_norm over a row are one kernel each") {
  constexpr explanation s = explain_type<decltype(softmax(X{}))>();
  static_assert(s.kernels == 1 && s.reduction_kernels == 1);
  static_assert(s.bytes_read.per_dyn == 64 * 4 && s.bytes_written.per_dyn == 64 * 4, "x read once, y written once");
  static_assert(s.scratch.fixed == 0 && s.scratch.per_dyn == 0, "nothing is materialised in between");
  static_assert(explain_type<decltype(log_softmax(X{}))>().kernels == 1);
  using LN = decltype(layer_norm(X{}, param<"g", f32, shape<64>>{}, param<"b", f32, shape<64>>{}));
  constexpr explanation l = explain_type<LN>();
  static_assert(l.kernels == 1 && l.reduction_kernels == 1);
  static_assert(l.bytes_read.fixed == 2 * 64 * 4 + 4, "gamma, beta and eps");
  auto xv = kt::random<float, 2>({9, 64}, -5, 5);
  CHECK(schedule_vs_eager(softmax(X{}), {{"x", xv}}) < 1e-6);
  CHECK(schedule_vs_eager(LN{}, {{"x", xv}, {"g", kt::random<float, 1>({64})}, {"b", kt::random<float, 1>({64})}}) < 1e-5);
}

TEST_CASE("sibling reductions over the same input share one pass") {
  // mean and variance: after CSE the variance reuses the mean, in the same row kernel
  constexpr explanation mv = explain_type<decltype(mean<1>(X{}, keepdim) + var<1>(X{}, keepdim))>();
  static_assert(mv.kernels == 1);
  // independent reductions and a pointwise sibling of the same buffer
  using Sib = decltype(sum<1>(X{}, keepdim) + max<1>(X{}, keepdim) + sum<1>(X{} * X{}, keepdim));
  constexpr explanation sib = explain_type<Sib>();
  static_assert(sib.kernels == 1);
  static_assert(sib.bytes_read.per_dyn == 64 * 4, "x is read once for all three");
  auto xv = kt::random<float, 2>({5, 64});
  CHECK(schedule_vs_eager(Sib{}, {{"x", xv}}) < 1e-5);
}

TEST_CASE("a 3-layer MLP forward is three matmul kernels with their epilogues") {
  auto x = input<"x", f32, shape<dyn, 784>>{};
  auto h1 = relu(linear(x, param<"w1", f32, shape<256, 784>>{}, param<"b1", f32, shape<256>>{}));
  auto h2 = gelu(linear(h1, param<"w2", f32, shape<128, 256>>{}, param<"b2", f32, shape<128>>{}));
  auto y = linear(h2, param<"w3", f32, shape<10, 128>>{}, param<"b3", f32, shape<10>>{});
  constexpr explanation e = explain_type<decltype(y)>();
  static_assert(e.kernels == 3 && e.matmul_kernels == 3);
  static_assert(e.buffers == 2 && e.scratch.per_dyn == (256 + 128) * 4);
  auto xv = kt::random<float, 2>({3, 784});
  const double d = schedule_vs_eager(y, {{"x", xv},
                                         {"w1", kt::random<float, 2>({256, 784}, -0.05, 0.05)},
                                         {"b1", kt::random<float, 1>({256})},
                                         {"w2", kt::random<float, 2>({128, 256}, -0.1, 0.1)},
                                         {"b2", kt::random<float, 1>({128})},
                                         {"w3", kt::random<float, 2>({10, 128})},
                                         {"b3", kt::random<float, 1>({10})}});
  CHECK(d < 1e-5);
}

TEST_CASE("buffers are reused once their last reader has run") {
  auto x = input<"x", f32, shape<dyn, 32>>{};
  auto w = param<"w", f32, shape<32, 32>>{};
  auto h = matmul(tanh(matmul(tanh(matmul(tanh(matmul(x, w)), w)), w)), w);
  constexpr explanation e = explain_type<decltype(h)>();
  static_assert(e.kernels == 4);
  static_assert(e.unshared_scratch.per_dyn == 3 * 32 * 4, "three intermediates");
  static_assert(e.buffers == 2 && e.scratch.per_dyn == 2 * 32 * 4, "two buffers, used in turn");
  CHECK(schedule_vs_eager(h, {{"x", kt::random<float, 2>({4, 32})}, {"w", kt::random<float, 2>({32, 32}, -0.3, 0.3)}}) < 1e-5);
}

TEST_CASE("softmax of a matmul: the matmul output is materialised, the softmax is one more kernel") {
  auto y = softmax(matmul(X{}, param<"w", f32, shape<64, 16>>{}));
  constexpr explanation e = explain_type<decltype(y)>();
  static_assert(e.kernels == 2 && e.matmul_kernels == 1 && e.reduction_kernels == 1);
  static_assert(e.buffers == 1);
  CHECK(schedule_vs_eager(y, {{"x", kt::random<float, 2>({3, 64})}, {"w", kt::random<float, 2>({64, 16})}}) < 1e-5);
}

TEST_CASE("cross_entropy and the passes called at run time") {
  auto z = input<"z", f32, shape<dyn, 10>>{};
  auto labels = input<"y", i64, shape<dyn>>{};
  auto loss = cross_entropy(z, labels);
  tensor<std::int64_t, 1> yv({6}, {0, 9, 3, 3, 5, 1});
  CHECK(schedule_vs_eager(loss, {{"z", kt::random<float, 2>({6, 10}, -20, 20)}, {"y", yv}}) < 1e-5);
  const passes::schedule s = passes::compile(traced<decltype(loss)>::value.thaw());  // run-time call
  CHECK(s.kernels.size() == plan<decltype(loss)>::schedule.kernels.size());
  CHECK(check_graph(s.g) == nullptr);
}

TEST_CASE("an iota whose kernel comes before the kernel of the value it takes its extent from") {
  // iota reads only its input's shape, so the fusion pass may put it in an earlier kernel than
  // that input's; eager::run_schedule takes the shape of an input not computed yet from a plain run
  passes::builder b;
  node n = passes::builder::make(op::input, f64, dims{dyn, 2});
  n.set_name("a");
  n.slot = 0;
  const int a = b.emit(n);
  n.shape = dims{dyn, 1};
  n.set_name("c");
  n.slot = 1;
  const int c = b.emit(n);
  b.g.leaves = 2;
  const int m = b.mul(a, c);
  const int i = b.cast(b.iota(m, 1, i64), f64);
  b.g.outputs = {b.add(b.binary(op::max, m, i), c)};
  const passes::schedule s = passes::compile(b.g);
  REQUIRE(check_graph(s.g) == nullptr);
  int iota_kernel = -1, mul_kernel = -1;
  for (std::size_t k = 0; k < s.g.nodes.size(); ++k) {
    if (s.g.nodes[k].o == op::iota) iota_kernel = s.kernel_of[k];
    if (s.g.nodes[k].o == op::mul) mul_kernel = s.kernel_of[k];
  }
  CHECK(iota_kernel < mul_kernel);
  const std::vector<any_tensor> leaves = {kt::random<double, 2>({5, 2}).any(), kt::random<double, 2>({5, 1}).any()};
  CHECK(kt::difference(eager::run(b.g, leaves)[0], eager::run_schedule(s, leaves)[0]) == 0);
}

namespace {
// softmax along rows, written by hand: s is used four times
template <class S>
constexpr auto softmax_by_hand(const S& s) {
  return exp(s - amax<1>(s, keepdim)) / sum<1>(exp(s - amax<1>(s, keepdim)), keepdim);
}
template <class G>
constexpr int count(const G& g, op o) {
  int n = 0;
  for (const node& x : g.nodes) n += x.o == o;
  return n;
}
}  // namespace

TEST_CASE("share: a subexpression holding a C++ scalar is one value at every use") {
  using Q = input<"q", f32, shape<32, 16>>;
  using K = input<"k", f32, shape<48, 16>>;
  const float scale = 0.25f + static_cast<float>(kt::random<double, 1>({1})(0)) / 8;
  const auto plain = softmax_by_hand(matmul(Q{}, transpose(K{})) * scale);
  const auto shared = softmax_by_hand(share(matmul(Q{}, transpose(K{})) * scale));
  using P = decltype(plain);
  using S = decltype(shared);
  // tracing cannot merge the plain spelling's four score subtrees (their scalars are run-time
  // values): CSE merges the matmuls, but four scalings of the scores remain, in more kernels
  // that write more; shared, the scores are traced and scaled once
  static_assert(count(traced<P>::value, op::matmul) == 4 && count(traced<S>::value, op::matmul) == 1);
  static_assert(count(plan<P>::schedule.g, op::mul) == 4 && count(plan<S>::schedule.g, op::mul) == 1);
  static_assert(plan<S>::schedule.kernels.size() < plan<P>::schedule.kernels.size());
  const auto q = kt::random<float, 2>({32, 16});
  const auto k = kt::random<float, 2>({48, 16});
  const any_tensor want = eval(plain, Q{} = q, K{} = k, eager::backend).any();
  CHECK(kt::difference(want, eval(shared, Q{} = q, K{} = k).any()) < 1e-6);
  CHECK(kt::difference(want, eval(shared, Q{} = q, K{} = k, eager::backend).any()) == 0);
  // the same value as binding the scalar through an input, which merges the uses too
  using Scale = input<"scale", f32, shape<>>;
  tensor<float, 0> sv({});
  sv() = scale;
  const auto by_input = softmax_by_hand(matmul(Q{}, transpose(K{})) * Scale{});
  static_assert(count(plan<decltype(by_input)>::schedule.g, op::mul) == 1);
  CHECK(kt::difference(want, eval(by_input, Q{} = q, K{} = k, Scale{} = sv).any()) < 1e-6);
}

TEST_CASE("share: structurally equal shares holding different scalars are an error when bound") {
  const auto e = share(X{} * 2.0f) + share(X{} * 3.0f);
  const auto x = kt::random<float, 2>({3, 64});
  CHECK_THROWS_WITH_AS(eval(e, X{} = x), doctest::Contains("different C++ scalars"), std::logic_error);
  // equal scalars: one value (the type is e's: the check is at binding)
  const auto same = share(X{} * 2.0f) + share(X{} * 2.0f);
  static_assert([] {
    int muls = 0;
    for (const node& n : traced<decltype(same)>::value.nodes) muls += n.o == op::mul;
    return muls;
  }() == 1);
  const tensor<float, 2> y = eval(same, X{} = x);
  for (index_t i = 0; i < 3; ++i)
    for (index_t j = 0; j < 64; ++j) CHECK(y(i, j) == 4 * x(i, j));
}

TEST_CASE("a concat is a kernel of its own, and what reads it is fused elsewhere") {
  // a kernel holding a concat runs node by node in scalar code: nothing else joins it, so the
  // product and the column sum below are one vectorised reduction kernel reading both concats
  using Y = input<"y", f32, shape<dyn, 32>>;
  using E = decltype(sum<0>(concat<1>(X{}, Y{}) * concat<1>(Y{}, X{}) + 1.0f));
  constexpr auto& s = plan<E>::schedule;
  static_assert(s.kernels.size() == 3);
  static_assert([] {
    for (std::size_t k = 0; k < s.g.nodes.size(); ++k)
      if (s.g.nodes[k].o == op::concat) {
        int in_kernel = 0;
        for (std::size_t j = 0; j < s.g.nodes.size(); ++j) in_kernel += s.kernel_of[j] == s.kernel_of[k];
        if (in_kernel != 1) return false;
      }
    return true;
  }());
  const auto xv = kt::random<float, 2>({37, 64});
  const auto yv = kt::random<float, 2>({37, 32});
  const any_tensor want = eval(E{}, X{} = xv, Y{} = yv, eager::backend).any();
  CHECK(kt::difference(want, eval(E{}, X{} = xv, Y{} = yv).any()) < 1e-5);
}
