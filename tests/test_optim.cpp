// Optimizers against plain reference loops (f64, many steps, fresh random gradients), the
// counter-based generator against its published answers, initialisers, modules, and a trainer's
// checkpoint resuming to the bit.
#include <kiln/nn/modules.hpp>
#include <kiln/optim.hpp>

#include <cstring>
#include <filesystem>
#include <vector>

#include "support.hpp"

using namespace kiln;

TEST_CASE("philox4x32-10 gives Random123's known answers") {
  // kat_vectors of Random123 (counter words 0..3, key words 0..1 -> output words)
  const auto b0 = nn::philox(0, 0).block(0);
  CHECK(b0 == std::array<std::uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  const auto b1 = nn::philox(~0ull, ~0ull).block(~0ull);
  CHECK(b1 == std::array<std::uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  const auto b2 = nn::philox(0x299f31d0a4093822ull, 0x0370734413198a2eull).block(0x85a308d3243f6a88ull);
  CHECK(b2 == std::array<std::uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST_CASE("initialisers: reproducible by seed and stream, with the right spread") {
  any_tensor a(dtype::f32, dims{256, 128}), b(dtype::f32, dims{256, 128}), c(dtype::f32, dims{256, 128});
  nn::init::kaiming_uniform(a, 128, 7, nn::stream_of("w"));
  nn::init::kaiming_uniform(b, 128, 7, nn::stream_of("w"));
  nn::init::kaiming_uniform(c, 128, 8, nn::stream_of("w"));
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  const float* pc = c.data<float>();
  int same = 0;
  double sum = 0, sq = 0, lo = 0, hi = 0;
  for (index_t i = 0; i < a.numel(); ++i) {
    CHECK_EQ(pa[i], pb[i]);
    same += pa[i] == pc[i];
    sum += pa[i];
    sq += double(pa[i]) * pa[i];
    lo = std::min<double>(lo, pa[i]);
    hi = std::max<double>(hi, pa[i]);
  }
  CHECK(same < 4);  // another seed, other values
  const double n = static_cast<double>(a.numel()), bound = std::sqrt(6.0 / 128);
  CHECK(std::fabs(sum / n) < 0.01);
  CHECK(sq / n == doctest::Approx(bound * bound / 3).epsilon(0.03));  // variance of U(-b, b)
  CHECK(lo >= -bound);
  CHECK(hi < bound);
  CHECK(hi > 0.99 * bound);
  any_tensor z(dtype::f64, dims{100000});
  nn::init::normal(z, 1.5, 2.0, 3);
  double zs = 0, zq = 0;
  for (index_t i = 0; i < z.numel(); ++i) {
    zs += z.data<double>()[i];
    zq += z.data<double>()[i] * z.data<double>()[i];
  }
  const double mean = zs / 1e5, var = zq / 1e5 - mean * mean;
  CHECK(mean == doctest::Approx(1.5).epsilon(0.01));
  CHECK(var == doctest::Approx(4.0).epsilon(0.02));
  any_tensor ints(dtype::i32, dims{3});
  CHECK_THROWS_WITH_AS(nn::init::zeros(ints), doctest::Contains("floating-point"), std::invalid_argument);
}

TEST_CASE("an MLP module: its parameters by name and its forward pass") {
  using net = nn::mlp_with<"net", nn::relu, dtype::f64, 5, 7, 3>;
  using P = net::params;
  static_assert(std::tuple_size_v<P> == 4);
  static_assert(std::tuple_element_t<0, P>::name.view() == "net.0.weight");
  static_assert(std::tuple_element_t<0, P>::shape == dims{7, 5});
  static_assert(std::tuple_element_t<3, P>::name.view() == "net.1.bias");
  static_assert(nn::parameter_count<P>() == 7 * 5 + 7 + 3 * 7 + 3);
  nn::state_dict sd = nn::make_params<net>(11);
  REQUIRE(sd.size() == 4);
  // PyTorch's default: uniform in +-1/sqrt(fan_in)
  for (index_t i = 0; i < 35; ++i) CHECK(std::fabs(sd.at("net.0.weight").data<double>()[i]) < 1 / std::sqrt(5.0));
  const auto x = kt::random<double, 2>({4, 5});
  auto y = eval(net{}(input<"x", f64, shape<dyn, 5>>{}), nn::feeds(sd, {{"x", x.any()}}));
  const double* w0 = sd.at("net.0.weight").data<double>();
  const double* b0 = sd.at("net.0.bias").data<double>();
  const double* w1 = sd.at("net.1.weight").data<double>();
  const double* b1 = sd.at("net.1.bias").data<double>();
  for (index_t r = 0; r < 4; ++r) {
    double h[7];
    for (int j = 0; j < 7; ++j) {
      h[j] = b0[j];
      for (int k = 0; k < 5; ++k) h[j] += x(r, k) * w0[j * 5 + k];
      h[j] = std::max(h[j], 0.0);
    }
    for (int j = 0; j < 3; ++j) {
      double o = b1[j];
      for (int k = 0; k < 7; ++k) o += h[k] * w1[j * 7 + k];
      CHECK(kt::close(y(r, j), o, 1e-12, 1e-12));
    }
  }
}

namespace {
// loss = sum(p1 q1) + sum(p2 q2): the gradients are the inputs q1 and q2, so each step's
// gradient is a fresh random tensor and the reference loop sees the same one
using P1 = param<"p1", f64, shape<3, 4>>;
using P2 = param<"p2", f64, shape<5>>;
using Q1 = input<"q1", f64, shape<3, 4>>;
using Q2 = input<"q2", f64, shape<5>>;
constexpr auto probe_loss() { return sum(P1{} * Q1{}) + sum(P2{} * Q2{}); }
using probe_params = std::tuple<P1, P2>;

struct reference {
  std::vector<std::vector<double>> p, s1, s2;  // parameters and up to two states each
};

nn::state_dict random_params() {
  nn::state_dict sd;
  sd["p1"] = kt::random<double, 2>({3, 4}).any();
  sd["p2"] = kt::random<double, 1>({5}).any();
  return sd;
}
std::vector<double> values(const any_tensor& t) {
  return std::vector<double>(t.data<double>(), t.data<double>() + t.numel());
}

// Runs `steps` steps of the trainer and of ref_step (p, g, states, t) on the same random
// gradients, with clipping by global norm if max_norm > 0, and compares.
template <class Opt, class Clip, class RefStep>
void check_optimizer(Opt opt, Clip clip, double max_norm, RefStep ref_step, int steps = 25) {
  nn::state_dict init = random_params();
  reference r;
  r.p = {values(init.at("p1")), values(init.at("p2"))};
  r.s1 = {std::vector<double>(12, 0.0), std::vector<double>(5, 0.0)};
  r.s2 = r.s1;
  optim::trainer tr(probe_loss(), probe_params{}, opt, init, clip);
  for (int t = 1; t <= steps; ++t) {
    const auto q1 = kt::random<double, 2>({3, 4});
    const auto q2 = kt::random<double, 1>({5});
    std::vector<std::vector<double>> g = {values(q1.any()), values(q2.any())};
    if (max_norm > 0) {
      double sq = 0;
      for (const auto& gi : g)
        for (double v : gi) sq += v * v;
      const double coef = std::min(max_norm / (std::sqrt(sq) + 1e-6), 1.0);
      for (auto& gi : g)
        for (double& v : gi) v *= coef;
    }
    for (std::size_t i = 0; i < 2; ++i) ref_step(r.p[i], g[i], r.s1[i], r.s2[i], t);
    tr.step({{"q1", q1.any()}, {"q2", q2.any()}});
  }
  CHECK(tr.steps() == steps);
  const std::vector<double> got1 = values(tr.params().at("p1")), got2 = values(tr.params().at("p2"));
  for (std::size_t k = 0; k < got1.size(); ++k) CHECK(kt::close(got1[k], r.p[0][k], 1e-11, 1e-12));
  for (std::size_t k = 0; k < got2.size(); ++k) CHECK(kt::close(got2[k], r.p[1][k], 1e-11, 1e-12));
}

void ref_sgd(std::vector<double>& p, const std::vector<double>& g, double lr, double wd) {
  for (std::size_t k = 0; k < p.size(); ++k) p[k] -= lr * (g[k] + wd * p[k]);
}
}  // namespace

TEST_CASE("SGD, SGD with momentum (and Nesterov, dampening, weight decay) match torch.optim's algorithm") {
  check_optimizer(optim::sgd{.lr = 0.1, .weight_decay = 0.01}, optim::no_clipping{}, 0,
                  [](auto& p, const auto& g, auto&, auto&, int) { ref_sgd(p, g, 0.1, 0.01); });
  for (bool nesterov : {false, true}) {
    const double lr = 0.05, mom = 0.9, damp = nesterov ? 0.0 : 0.1, wd = 1e-3;
    CAPTURE(nesterov);
    check_optimizer(optim::sgd_momentum{.lr = lr, .momentum = mom, .dampening = damp, .weight_decay = wd, .nesterov = nesterov},
                    optim::no_clipping{}, 0, [&](auto& p, const auto& g0, auto& buf, auto&, int t) {
                      for (std::size_t k = 0; k < p.size(); ++k) {
                        double g = g0[k] + wd * p[k];
                        buf[k] = t == 1 ? g : mom * buf[k] + (1 - damp) * g;
                        g = nesterov ? g + mom * buf[k] : buf[k];
                        p[k] -= lr * g;
                      }
                    });
  }
}

TEST_CASE("Adam and AdamW match torch.optim's algorithm") {
  const double lr = 0.01, b1 = 0.8, b2 = 0.95, eps = 1e-6, wd = 0.05;
  auto ref = [&](bool decoupled) {
    return [=](auto& p, const auto& g0, auto& m, auto& v, int t) {
      const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
      for (std::size_t k = 0; k < p.size(); ++k) {
        double g = g0[k];
        if (decoupled) p[k] *= 1 - lr * wd;
        else g += wd * p[k];
        m[k] = b1 * m[k] + (1 - b1) * g;
        v[k] = b2 * v[k] + (1 - b2) * g * g;
        p[k] -= lr / bc1 * m[k] / (std::sqrt(v[k]) / std::sqrt(bc2) + eps);
      }
    };
  };
  check_optimizer(optim::adam{.lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps, .weight_decay = wd}, optim::no_clipping{}, 0,
                  ref(false), 40);
  check_optimizer(optim::adamw{.lr = lr, .beta1 = b1, .beta2 = b2, .eps = eps, .weight_decay = wd}, optim::no_clipping{}, 0,
                  ref(true), 40);
}

TEST_CASE("clipping by the global norm of all gradients") {
  // gradients of norm about sqrt(17 * 4/3) ~ 4.8: clipped to 1.5 at every step
  check_optimizer(optim::sgd{.lr = 0.1}, optim::clip_grad_norm{.max_norm = 1.5}, 1.5,
                  [](auto& p, const auto& g, auto&, auto&, int) { ref_sgd(p, g, 0.1, 0.0); });
  // a norm above every gradient's: no change
  check_optimizer(optim::sgd{.lr = 0.1}, optim::clip_grad_norm{.max_norm = 1e9}, 1e9,
                  [](auto& p, const auto& g, auto&, auto&, int) { ref_sgd(p, g, 0.1, 0.0); });
}

TEST_CASE("learning-rate schedules") {
  const optim::cosine_schedule c{.lr = 1.0, .warmup = 10, .total = 110, .min_lr = 0.1};
  CHECK(c(1) == doctest::Approx(0.1));
  CHECK(c(10) == doctest::Approx(1.0));
  CHECK(c(60) == doctest::Approx(0.55));
  CHECK(c(110) == doctest::Approx(0.1));
  const optim::step_schedule s{.lr = 1.0, .step_size = 30, .gamma = 0.5};
  CHECK(s(30) == 1.0);
  CHECK(s(31) == 0.5);
  CHECK(s(61) == 0.25);
}

namespace {
using tiny = nn::mlp<"tiny", 6, 16, 3>;
using TX = input<"x", f32, shape<dyn, 6>>;
using TY = input<"y", i64, shape<dyn>>;
constexpr auto tiny_loss() { return cross_entropy(tiny{}(TX{}), TY{}); }

// A batch of a separable 3-class problem: the class is the argmax of a fixed projection.
std::pair<any_tensor, any_tensor> tiny_batch(std::uint64_t seed, index_t n) {
  const nn::philox r(seed);
  any_tensor x(dtype::f32, dims{n, 6}), y(dtype::i64, dims{n});
  for (index_t i = 0; i < n; ++i) {
    float s[3] = {0, 0, 0};
    for (index_t k = 0; k < 6; ++k) {
      const float v = static_cast<float>(2 * r.uniform(static_cast<std::uint64_t>(i * 6 + k)) - 1);
      x.data<float>()[i * 6 + k] = v;
      s[k % 3] += (k < 3 ? 1.0f : -0.5f) * v;
    }
    y.data<std::int64_t>()[i] = s[0] > s[1] ? (s[0] > s[2] ? 0 : 2) : (s[1] > s[2] ? 1 : 2);
  }
  return {x, y};
}
template <class Tr>
double train(Tr& tr, int from, int to) {
  double last = 0;
  for (int s = from; s < to; ++s) {
    const auto [x, y] = tiny_batch(static_cast<std::uint64_t>(s), 32);
    tr.options().lr = optim::cosine_schedule{.lr = 0.05, .warmup = 3, .total = 40}(tr.steps() + 1);
    last = tr.step({{"x", x}, {"y", y}});
  }
  return last;
}
}  // namespace

TEST_CASE("a trainer learns, and resuming from its checkpoint continues to the bit") {
  const auto path = std::filesystem::temp_directory_path() / ("kiln_test_optim_" + std::to_string(kt::rng()()) + ".safetensors");
  optim::trainer a(tiny_loss(), tiny::params{}, optim::adamw{.lr = 0.05}, nn::make_params<tiny>(5));
  const double first = train(a, 0, 1);
  const double late = train(a, 1, 40);
  CHECK(late < 0.5 * first);  // ln 3 ~ 1.1 at the start
  optim::trainer b(tiny_loss(), tiny::params{}, optim::adamw{.lr = 0.05}, nn::make_params<tiny>(5));
  train(b, 0, 20);
  b.save(path, {{"note", "half way"}});
  // another trainer, from other initial values, resumes from the file
  optim::trainer c(tiny_loss(), tiny::params{}, optim::adamw{.lr = 0.05}, nn::make_params<tiny>(99));
  const auto md = c.load(path);
  CHECK(md.at("note") == "half way");
  CHECK(c.steps() == 20);
  train(c, 20, 40);
  for (const auto& entry : nn::state_dict(a.params())) {  // not a structured binding: clang 14 cannot capture one
    const std::string& n = entry.first;
    CAPTURE(n);
    CHECK(std::memcmp(entry.second.bytes(), c.params().at(n).bytes(), static_cast<std::size_t>(entry.second.numel()) * 4) == 0);
  }
  for (const auto& entry : nn::state_dict(a.states())) {  // not a structured binding: clang 14 cannot capture one
    const std::string& n = entry.first;
    CAPTURE(n);
    CHECK(std::memcmp(entry.second.bytes(), c.states().at(n).bytes(), static_cast<std::size_t>(entry.second.numel()) * 4) == 0);
  }
  // a file for another model is refused whole, and changes nothing
  optim::trainer d(tiny_loss(), tiny::params{}, optim::sgd{}, nn::make_params<tiny>(1));
  const std::vector<float> before(d.params().at("tiny.0.weight").data<float>(), d.params().at("tiny.0.weight").data<float>() + 96);
  CHECK_THROWS(d.load(path));  // holds Adam's moments, which SGD has no place for
  CHECK(std::memcmp(before.data(), d.params().at("tiny.0.weight").bytes(), 96 * 4) == 0);
  CHECK(d.steps() == 0);
  // the step count is read strictly (it was std::stoll: "12abc" read as 12, "-5" accepted), and
  // a refused file changes nothing
  const io::tensor_map saved = io::load_safetensors(path);
  for (const std::string bad : {"12abc", "-5", "", " 12", "+3", "99999999999999999999"}) {
    CAPTURE(bad);
    io::save_safetensors(path, saved, {{"kiln.step", bad}});
    CHECK_THROWS_WITH_AS(c.load(path), doctest::Contains("not a count of steps"), io::format_error);
    CHECK(c.steps() == 40);
  }
  io::save_safetensors(path, saved, {{"kiln.step", "7"}});
  CHECK(c.load(path).at("kiln.step") == "7");
  CHECK(c.steps() == 7);
  std::filesystem::remove(path);
}

TEST_CASE("the fused training step runs the kernels explain reports") {
  using step_t = decltype(optim::training_step(tiny_loss(), tiny::params{}, optim::adam{}));
  constexpr explanation x = explain_type<step_t>();
  static_assert(x.matmul_kernels >= 5);  // 2 forward, 3 backward (no input gradient)
  MESSAGE("training step kernels: " << x.kernels << " (" << x.matmul_kernels << " matmul, " << x.reduction_kernels
                                    << " reduction, " << x.pointwise_kernels << " pointwise)");
  using grads_t = decltype(outputs(tiny_loss(), grad(tiny_loss(), wrt(std::tuple_element_t<0, tiny::params>{},
                                                                      std::tuple_element_t<1, tiny::params>{},
                                                                      std::tuple_element_t<2, tiny::params>{},
                                                                      std::tuple_element_t<3, tiny::params>{}))));
  constexpr explanation xg = explain_type<grads_t>();
  MESSAGE("loss and gradients alone: " << xg.kernels << " kernels");
  // every update is fused into the kernel computing its gradient: Adam adds no kernel
  static_assert(x.kernels == xg.kernels);
  const long before = cpu::stats().kernels;  // kernels this thread has run
  optim::trainer t(tiny_loss(), tiny::params{}, optim::adam{}, nn::make_params<tiny>(5));
  const auto [bx, by] = tiny_batch(1, 8);
  t.step({{"x", bx}, {"y", by}});
  CHECK(cpu::stats().kernels - before == x.kernels);
}
