// Derivatives of the decomposed ops, gradients of gradients, detach, and one compiled
// forward+backward plan for an MLP (fused and partitioned) against the eager backend.
#include "gradcheck.hpp"

using namespace kiln;

namespace {
using X = input<"x", f64, shape<3, 5>>;
using Y = input<"y", f64, shape<3, 5>>;
using G = input<"gamma", f64, shape<5>>;
using Bt = input<"beta", f64, shape<5>>;
using W = input<"w", f64, shape<4, 5>>;
using Bias = input<"bias", f64, shape<4>>;

std::vector<feed> feeds() {
  return {{"x", kt::random_f64(dims{3, 5})},       {"y", kt::random_f64(dims{3, 5})},
          {"gamma", kt::random_f64(dims{5})},      {"beta", kt::random_f64(dims{5})},
          {"w", kt::random_f64(dims{4, 5})},       {"bias", kt::random_f64(dims{4})}};
}
}  // namespace

TEST_CASE("activations") {
  const auto f = feeds();
  kt::gradcheck<X>(sigmoid(X{}), f);
  kt::gradcheck<X>(relu(X{}), f);  // random inputs are never exactly 0
  kt::gradcheck<X>(gelu(X{}), f);
  kt::gradcheck<X>(gelu_tanh(X{}), f);
  kt::gradcheck<X>(silu(X{}), f);
}

TEST_CASE("softmax, log_softmax and layer_norm along each axis") {
  const auto f = feeds();
  kt::gradcheck<X>(softmax<1>(X{}), f);
  kt::gradcheck<X>(softmax<0>(X{}), f);
  kt::gradcheck<X>(log_softmax<1>(X{}), f);
  kt::gradcheck<X>(log_softmax<0>(X{} * 3.0), f);
  kt::gradcheck<X, G, Bt>(layer_norm(X{}, G{}, Bt{}, 1e-5), f);
}

TEST_CASE("losses and linear") {
  const auto f = feeds();
  kt::gradcheck<X, Y>(mse_loss(X{}, Y{}), f);
  kt::gradcheck<X, W, Bias>(linear(X{}, W{}, Bias{}), f);
  using Labels = input<"labels", i64, shape<3>>;
  tensor<std::int64_t, 1> labels({3});
  for (int i = 0; i < 3; ++i) labels.data()[i] = static_cast<std::int64_t>(kt::rng()() % 5);
  auto with_labels = f;
  with_labels.push_back({"labels", labels.any()});
  kt::gradcheck<X>(cross_entropy(X{}, Labels{}), with_labels);
  kt::gradcheck<X>(cross_entropy(X{} * 40.0, Labels{}), with_labels);  // large logits stay finite
}

TEST_CASE("gradients of gradients: Hessian-vector products") {
  const auto f = feeds();
  // the gradient is an expression like any other: check its own derivatives (reverse over
  // reverse, forward over reverse) against finite differences of the gradient
  kt::gradcheck<X>(grad(sum(X{} * X{} * X{} * Y{}), X{}), f);
  kt::gradcheck<X>(grad(sum(softmax<1>(X{}) * Y{}), X{}), f);
  kt::gradcheck<X, G>(grad(sum(layer_norm(X{}, G{}, Bt{}, 1e-5) * Y{}), X{}), f);
  // H v for f = sum(x^3 y) is 6 x y v, by hand
  using V = input<"v", f64, shape<3, 5>>;
  const any_tensor v = kt::random_f64(dims{3, 5});
  auto hv = grad(sum(grad(sum(X{} * X{} * X{} * Y{}), X{}) * V{}), X{});
  const auto got = kt::values(kt::run(hv, kt::with(f, "v", v)));
  const auto xs = kt::values(f[0].value), ys = kt::values(f[1].value), vs = kt::values(v);
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(kt::close(got[i], 6 * xs[i] * ys[i] * vs[i], 1e-12, 1e-12));
}

TEST_CASE("detach stops the gradient; integer paths carry none") {
  const auto f = feeds();
  const auto xs = kt::values(f[0].value);
  // d/dx sum(x * detach(x)) = detach(x) = x, not 2x
  const auto g = kt::values(kt::run(grad(sum(X{} * detach(X{})), X{}), f));
  for (std::size_t i = 0; i < g.size(); ++i) CHECK(g[i] == doctest::Approx(xs[i]).epsilon(1e-14));
  // through an integer cast: no gradient (zeros), as in PyTorch
  const auto gi = kt::values(kt::run(grad(sum(cast<f64>(cast<i64>(X{} * 10.0))), X{}), f));
  for (double d : gi) CHECK(d == 0.0);
  // a placeholder the loss does not use has a zero gradient
  const auto gy = kt::values(kt::run(grad(sum(X{} * 2.0), Y{}), f));
  for (double d : gy) CHECK(d == 0.0);
}

namespace {
// A 3-layer MLP with cross-entropy, f32, batch 16: one compiled step for the loss and the
// gradients of all six parameters.
using In = input<"in", f32, shape<16, 20>>;
using Lab = input<"lab", i64, shape<16>>;
using W1 = param<"w1", f32, shape<32, 20>>;
using B1 = param<"b1", f32, shape<32>>;
using W2 = param<"w2", f32, shape<32, 32>>;
using B2 = param<"b2", f32, shape<32>>;
using W3 = param<"w3", f32, shape<10, 32>>;
using B3 = param<"b3", f32, shape<10>>;

constexpr auto mlp_loss() {
  auto h1 = relu(linear(In{}, W1{}, B1{}));
  auto h2 = gelu(linear(h1, W2{}, B2{}));
  return cross_entropy(linear(h2, W3{}, B3{}), Lab{});
}
using Step = decltype(outputs(mlp_loss(), grad(mlp_loss(), wrt(W1{}, B1{}, W2{}, B2{}, W3{}, B3{}))));

any_tensor random_f32(const dims& s) {
  any_tensor t(dtype::f32, s);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  for (index_t i = 0; i < t.numel(); ++i) reinterpret_cast<float*>(t.bytes())[i] = u(kt::rng());
  return t;
}
}  // namespace

TEST_CASE("MLP: the fused, partitioned joint plan gives the eager backend's gradients") {
  tensor<std::int64_t, 1> lab({16});
  for (int i = 0; i < 16; ++i) lab.data()[i] = static_cast<std::int64_t>(kt::rng()() % 10);
  const std::vector<feed> f{{"in", random_f32(dims{16, 20})}, {"lab", lab.any()},
                            {"w1", random_f32(dims{32, 20})}, {"b1", random_f32(dims{32})},
                            {"w2", random_f32(dims{32, 32})}, {"b2", random_f32(dims{32})},
                            {"w3", random_f32(dims{10, 32})}, {"b3", random_f32(dims{10})}};
  const Step step = outputs(mlp_loss(), grad(mlp_loss(), wrt(W1{}, B1{}, W2{}, B2{}, W3{}, B3{})));
  // reference: the eager backend on the decomposed, differentiated graph, before any pass
  const std::vector<any_tensor> want = eval_all(step, std::span<const feed>(f));
  // the plan: canonicalised, partitioned, fused, memory-planned, run kernel by kernel with only
  // what the plan keeps
  const std::vector<any_tensor> leaves = bind_leaves(traced<Step>::value, step, std::span<const feed>(f));
  const std::vector<any_tensor> got = eager::run_schedule(plan<Step>::schedule, leaves);
  REQUIRE(got.size() == 7);
  REQUIRE(want.size() == 7);
  for (std::size_t o = 0; o < 7; ++o) {
    const auto a = kt::values(got[o]), b = kt::values(want[o]);
    REQUIRE(a.size() == b.size());
    double scale = 0;
    for (double v : b) scale = std::max(scale, std::fabs(v));
    for (std::size_t i = 0; i < a.size(); ++i) {
      INFO("output " << o << " element " << i);
      CHECK(std::fabs(a[i] - b[i]) <= 1e-5 * scale + 1e-7);
    }
  }
  // the gradient of w3 is not all zeros, and the loss is near log(10) at initialisation
  CHECK(std::fabs(kt::values(want[0])[0] - std::log(10.0)) < 1.0);
}

TEST_CASE("MLP: the partition saves less than an autograd tape") {
  constexpr explanation e = explain_type<Step>();
  // the backward reads the forward's matmul outputs and activations, not every intermediate
  static_assert(e.saved.fixed > 0 && e.saved.per_dyn == 0);
  static_assert(e.saved.fixed < e.tape_bytes.fixed);
  static_assert(e.recomputed_nodes > 0);
  // the figures, as planned today (a change to fusion or partition that moves them should be
  // looked at): 5 values, 5456 bytes, kept from the forward's kernels for the backward-only
  // kernels (pre-activations, activations, and the loss kernel's dlogits), against 9760 bytes
  // on a tape
  static_assert(e.saved.fixed == 5456 && e.saved_values == 5 && e.tape_bytes.fixed == 9760);
  MESSAGE("saved " << e.saved.fixed << " bytes in " << e.saved_values << " values (tape: " << e.tape_bytes.fixed
                   << " bytes), recomputed " << e.recomputed_nodes << " nodes, " << e.kernels << " kernels ("
                   << e.matmul_kernels << " matmul), peak scratch " << e.scratch.fixed << " bytes");
}

TEST_CASE("custom gradient rules") {
  using V = input<"v", f64, shape<6>>;
  tensor<double, 1> v({6});
  const double vals[] = {-3.0, -0.4, 0.0, 0.25, 1.7, 4.0};
  for (int i = 0; i < 6; ++i) v.data()[i] = vals[i];
  // a rule replacing the true derivative (2v) by 3v: the value is untouched
  auto y = custom_vjp(V{} * V{}, V{}, [](auto g) { return g * V{} * 3.0; });
  auto yv = eval(y, {{"v", v.any()}});
  auto g = eval(grad(sum(y * 2.0), V{}), {{"v", v.any()}});
  for (int i = 0; i < 6; ++i) {
    CHECK(yv(i) == vals[i] * vals[i]);
    CHECK(g(i) == doctest::Approx(6 * vals[i]));
  }
  // straight-through: rounding (through an integer cast) passes the gradient unchanged
  auto st = custom_vjp(cast<f64>(cast<i64>(V{} * 2.0)), V{}, [](auto gr) { return gr * 2.0; });
  auto gst = eval(grad(sum(st * V{}), V{}), {{"v", v.any()}});
  for (int i = 0; i < 6; ++i) {
    const double rounded = static_cast<double>(static_cast<std::int64_t>(vals[i] * 2));
    CHECK(gst(i) == doctest::Approx(2 * vals[i] + rounded));  // d/dv [st(v) * v] = st' v + st
  }
  // clipping the gradient that flows back through a value (used once: a rule with C++ scalars
  // in it is applied at each use of the expression, to that use's gradient)
  auto clipped = custom_vjp(V{}, V{}, [](auto gr) { return min(max(gr, -1.0), 1.0); });
  auto gc = eval(grad(sum(exp(clipped) * V{}), V{}), {{"v", v.any()}});
  for (int i = 0; i < 6; ++i) {
    // loss = exp(c) v with c = v: d/dc = exp(c) v, clipped to [-1, 1]; plus the direct exp(c)
    const double through_c = std::clamp(std::exp(vals[i]) * vals[i], -1.0, 1.0);
    CHECK(gc(i) == doctest::Approx(through_c + std::exp(vals[i])));
  }
  // the fused plan runs the rule too
  using Gt = decltype(grad(sum(y * 2.0), V{}));
  const Gt ge = grad(sum(y * 2.0), V{});
  const auto planned = eager::run_schedule(plan<Gt>::schedule, bind_leaves(traced<Gt>::value, ge, {{"v", v.any()}}));
  const auto pv = kt::values(planned[0]);
  for (int i = 0; i < 6; ++i) CHECK(pv[static_cast<std::size_t>(i)] == doctest::Approx(6 * vals[i]));
}

namespace {
// a loss holding C++ scalars (a layer_norm's epsilon, a weight-decay factor): not pure, so
// tracing cannot merge its copies by structure; grad shares it instead
using LX = input<"x", f64, shape<4, 6>>;
using LW = param<"w", f64, shape<5, 6>>;
using LB = param<"b", f64, shape<5>>;
using LG = param<"g", f64, shape<5>>;
using LT = param<"t", f64, shape<5>>;
constexpr auto ln_loss() { return sum(tanh(layer_norm(linear(LX{}, LW{}, LB{}), LG{}, LT{}, 1e-3))) + 0.01 * sum(LW{} * LW{}); }
}  // namespace

TEST_CASE("a loss with C++ scalars is traced once under all its grad nodes, and bound consistently") {
  using Step = decltype(outputs(ln_loss(), grad(ln_loss(), wrt(LW{}, LB{}, LG{}, LT{}))));
  using One = decltype(ln_loss());
  // the step's graph holds one copy of the loss (plus a grad node per parameter), not five
  constexpr std::size_t loss_nodes = traced<One>::value.nodes.size();
  static_assert(traced<Step>::value.nodes.size() < loss_nodes + 10);
  static_assert(count_op(traced<Step>::value, op::layer_norm) == 1);
  static_assert(count_op(traced<Step>::value, op::scalar) == count_op(traced<One>::value, op::scalar));
  // the values: each gradient against finite differences of the loss alone
  const std::vector<feed> f = {{"x", kt::random_f64(dims{4, 6})}, {"w", kt::random_f64(dims{5, 6})},
                               {"b", kt::random_f64(dims{5})},    {"g", kt::random_f64(dims{5})},
                               {"t", kt::random_f64(dims{5})}};
  kt::gradcheck<LW, LB, LG>(ln_loss(), f, {1e-6, 1e-6});
  const std::vector<any_tensor> all = eval_all(outputs(ln_loss(), grad(ln_loss(), wrt(LW{}, LB{}, LG{}, LT{}))), std::span<const feed>(f));
  const std::vector<any_tensor> ref = eval_all(outputs(ln_loss(), grad(ln_loss(), wrt(LW{}, LB{}, LG{}, LT{}))), std::span<const feed>(f), eager::backend);
  CHECK(kt::values(all[0])[0] == doctest::Approx(kt::values(eval_any(ln_loss(), {f[0], f[1], f[2], f[3], f[4]}))[0]).epsilon(1e-12));
  for (std::size_t q = 0; q < all.size(); ++q) {
    const auto a = kt::values(all[q]), b = kt::values(ref[q]);
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(kt::close(a[i], b[i], 1e-10, 1e-12));
  }
}

TEST_CASE("shared subexpressions: equal structure with different values is refused, never merged silently") {
  using X1 = input<"x", f64, shape<3>>;
  const any_tensor x = kt::random_f64(dims{3});
  // two outputs of one structure and different scalars, with no grad: independent values
  const auto two = eval_all(outputs(sum(X1{} * 2.0), sum(X1{} * 3.0)), {{"x", x}});
  CHECK(kt::values(two[1])[0] == doctest::Approx(1.5 * kt::values(two[0])[0]).epsilon(1e-14));
  // grads of two losses of one structure but different scalars would be traced as one: the
  // binding sees the two values differ and throws instead of computing with either
  auto l2 = sum(tanh(X1{} * 2.0));
  auto l3 = sum(tanh(X1{} * 3.0));
  CHECK_THROWS_AS(eval_all(outputs(grad(l2, X1{}), grad(l3, X1{})), {{"x", x}}), std::logic_error);
  // the same loss object (its copies) is fine
  const auto g = eval_all(outputs(l2, grad(l2, X1{}), grad(l2 * 1.0, X1{})), {{"x", x}});
  const auto xs = kt::values(x);
  for (std::size_t i = 0; i < 3; ++i)
    CHECK(kt::values(g[1])[i] == doctest::Approx(2.0 * (1 - std::tanh(2 * xs[i]) * std::tanh(2 * xs[i]))).epsilon(1e-12));
}
