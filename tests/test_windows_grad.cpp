// Derivatives of the window ops (unfold, fold, conv2d, max_pool2d, avg_pool2d), reverse and
// forward mode, against central finite differences in f64; a small CNN's fused joint plan
// against the eager backend.
#include "gradcheck.hpp"

#include <algorithm>
#include <vector>

using namespace kiln;

namespace {
using X = input<"x", f64, shape<2, 2, 6, 5>>;
using W = input<"w", f64, shape<3, 2, 3, 3>>;
using B = input<"b", f64, shape<3>>;
using C = input<"c", f64, shape<2, 18, 30>>;  // columns of a 3x3, stride 1, padding 1 window

std::vector<feed> feeds() {
  return {{"x", kt::random_f64(dims{2, 2, 6, 5})}, {"w", kt::random_f64(dims{3, 2, 3, 3})},
          {"b", kt::random_f64(dims{3})}, {"c", kt::random_f64(dims{2, 18, 30})}};
}
}  // namespace

TEST_CASE("unfold and fold") {
  const auto f = feeds();
  kt::gradcheck<X>(unfold<3, 1, 1>(X{}), f);
  kt::gradcheck<X>(unfold<2, 2, 1, 1>(X{}) * unfold<2, 2, 1, 1>(X{}), f);  // nonlinear around it
  kt::gradcheck<C>(fold<6, 5, 3, 1, 1>(C{}), f);
}

TEST_CASE("conv2d with respect to input, weight and bias") {
  const auto f = feeds();
  kt::gradcheck<X, W, B>(conv2d<1, 1>(X{}, W{}, B{}), f);
  kt::gradcheck<X, W, B>(conv2d<2, 1>(X{}, W{}, B{}), f);
  kt::gradcheck<X, W>(tanh(conv2d<1, 2, 2>(X{}, W{})), f);
}

TEST_CASE("max_pool2d and avg_pool2d") {
  auto f = feeds();
  // well-separated values (a near-tie within the finite-difference step would move the maximum;
  // exact ties share the gradient, checked below): a random permutation of 0.05 k
  {
    any_tensor x(f64, dims{2, 2, 6, 5});
    std::vector<int> order(static_cast<std::size_t>(x.numel()));
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    std::shuffle(order.begin(), order.end(), kt::rng());
    for (index_t i = 0; i < x.numel(); ++i) x.data<double>()[i] = 0.05 * (order[static_cast<std::size_t>(i)] - 60);
    f[0].value = x;
  }
  kt::gradcheck<X>(max_pool2d<2>(X{}), f);
  kt::gradcheck<X>(max_pool2d<3, 2, 1>(X{}), f);
  kt::gradcheck<X>(avg_pool2d<2>(X{}), f);
  kt::gradcheck<X>(avg_pool2d<3, 2, 1>(X{} * X{}), f);
  // a tie shares the gradient evenly: a constant window gives each element 1/4
  const any_tensor ones = [] {
    any_tensor t(f64, dims{2, 2, 6, 5});
    for (index_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = 1.0;
    return t;
  }();
  const auto g = kt::values(kt::run(grad(sum(max_pool2d<2>(X{})), X{}), {{"x", ones}}));
  for (index_t i = 0; i < 2 * 2; ++i)
    for (index_t y = 0; y < 6; ++y)
      for (index_t x = 0; x < 5; ++x) CHECK(g[static_cast<std::size_t>((i * 6 + y) * 5 + x)] == (x < 4 ? 0.25 : 0.0));
}

namespace {
// a small CNN, f32: conv-relu-pool, conv-relu-pool, linear, cross-entropy; one compiled step
// for the loss and every gradient
using In = input<"in", f32, shape<dyn, 1, 12, 12>>;
using Lab = input<"lab", i64, shape<dyn>>;
using W1 = param<"w1", f32, shape<4, 1, 3, 3>>;
using B1 = param<"b1", f32, shape<4>>;
using W2 = param<"w2", f32, shape<6, 4, 3, 3>>;
using B2 = param<"b2", f32, shape<6>>;
using W3 = param<"w3", f32, shape<10, 54>>;
using B3 = param<"b3", f32, shape<10>>;

constexpr auto cnn_loss() {
  auto h1 = max_pool2d<2>(relu(conv2d<1, 1>(In{}, W1{}, B1{})));  // [n, 4, 6, 6]
  auto h2 = max_pool2d<2>(relu(conv2d<1, 1>(h1, W2{}, B2{})));    // [n, 6, 3, 3]
  return cross_entropy(linear(reshape<dyn, 54>(h2), W3{}, B3{}), Lab{});
}
using Step = decltype(outputs(cnn_loss(), grad(cnn_loss(), wrt(W1{}, B1{}, W2{}, B2{}, W3{}, B3{}))));
}  // namespace

TEST_CASE("CNN: the fused, partitioned joint plan gives the eager backend's gradients") {
  constexpr const auto& s = plan<Step>::schedule;
  static_assert(!check_graph(s.g));
  static_assert(count_op(s.g, op::conv2d) == 0 && count_op(s.g, op::unfold) >= 4 && count_op(s.g, op::fold) >= 3);
  const index_t n = 5;
  any_tensor labels(i64, dims{n});
  for (index_t i = 0; i < n; ++i) labels.data<std::int64_t>()[i] = static_cast<std::int64_t>(kt::rng()() % 10);
  const std::vector<feed> f = {{"in", kt::random_tensor(f32, dims{n, 1, 12, 12})}, {"lab", labels},
                               {"w1", kt::random_tensor(f32, dims{4, 1, 3, 3}, -0.5, 0.5)}, {"b1", kt::random_tensor(f32, dims{4}, -0.5, 0.5)},
                               {"w2", kt::random_tensor(f32, dims{6, 4, 3, 3}, -0.5, 0.5)}, {"b2", kt::random_tensor(f32, dims{6}, -0.5, 0.5)},
                               {"w3", kt::random_tensor(f32, dims{10, 54}, -0.5, 0.5)}, {"b3", kt::random_tensor(f32, dims{10}, -0.5, 0.5)}};
  const Step step = outputs(cnn_loss(), grad(cnn_loss(), wrt(W1{}, B1{}, W2{}, B2{}, W3{}, B3{})));
  const std::vector<any_tensor> leaves = bind_leaves(traced<Step>::value, step, std::span<const feed>(f));
  const std::vector<any_tensor> want = eager::run(eager_graph<Step>(), leaves);  // unfused, composites direct
  const std::vector<any_tensor> fused = eager::run_schedule(s, leaves);        // kernel by kernel, as planned
  const std::vector<any_tensor> got = cpu::run_schedule<s>(leaves);
  REQUIRE(want.size() == 7);
  for (std::size_t q = 0; q < want.size(); ++q) {
    INFO("output " << q);
    const auto a = kt::values(want[q]), b = kt::values(fused[q]), c = kt::values(got[q]);
    for (std::size_t i = 0; i < a.size(); ++i) {
      CHECK(kt::close(b[i], a[i], 1e-4, 1e-5));
      CHECK(kt::close(c[i], a[i], 1e-4, 1e-5));
    }
  }
}
