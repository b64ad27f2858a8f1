// nvcc reads kiln: a whole CUDA translation unit that includes <kiln/kiln.hpp>, defines a model,
// trains it with a compiled training step (Adam) and compiles its forward pass and its gradient,
// all run on the host by the default (CPU) backend and checked against the eager backend.
// Built by nvcc when the build finds it (tests/CMakeLists.txt); no GPU is used.
#include <kiln/kiln.hpp>
#include <kiln/nn/modules.hpp>
#include <kiln/optim.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <tuple>
#include <vector>

using namespace kiln;

namespace {
using mlp = nn::mlp<"mlp", 6, 16, 3>;
using X = input<"x", f32, shape<dyn, 6>>;
using Y = input<"y", i64, shape<dyn>>;
constexpr auto logits() { return mlp{}(X{}); }
constexpr auto loss() { return cross_entropy(logits(), Y{}); }
// (the parameters from the model's tuple: a type alias naming one of them would be spelled by
// cudafe++ with its name unresolved, docs/notes.md)
constexpr auto loss_and_grads() {
  return std::apply([](auto... p) { return outputs(loss(), grad(loss(), wrt(p...))); }, mlp::params{});
}

int failed = 0, passed = 0;
void check(bool ok, const char* what) {
  (ok ? passed : failed) += 1;
  if (!ok) std::printf("FAILED: %s\n", what);
}

// A batch of a separable 3-class problem: the class is the argmax of a fixed projection.
std::pair<any_tensor, any_tensor> batch(std::mt19937_64& rng, index_t n) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  any_tensor x(dtype::f32, dims{n, 6}), y(dtype::i64, dims{n});
  for (index_t i = 0; i < n; ++i) {
    float s[3] = {0, 0, 0};
    for (index_t k = 0; k < 6; ++k) {
      const float v = u(rng);
      x.data<float>()[i * 6 + k] = v;
      s[k % 3] += (k < 3 ? 1.0f : -0.5f) * v;
    }
    y.data<std::int64_t>()[i] = s[0] > s[1] ? (s[0] > s[2] ? 0 : 2) : (s[1] > s[2] ? 1 : 2);
  }
  return {x, y};
}

// Largest difference between a and b, relative to b's largest magnitude.
double rel_diff(const any_tensor& a, const any_tensor& b) {
  if (a.dt() != dtype::f32 || b.dt() != dtype::f32 || !(a.shape() == b.shape())) return 1e30;
  const any_tensor ca = a.contiguous(), cb = b.contiguous();
  double d = 0, m = 0;
  for (index_t i = 0; i < ca.numel(); ++i) {
    d = std::max(d, std::fabs(double(ca.data<float>()[i]) - double(cb.data<float>()[i])));
    m = std::max(m, std::fabs(double(cb.data<float>()[i])));
  }
  return m > 0 ? d / m : d;
}
}  // namespace

int main() {
  std::mt19937_64 rng(std::random_device{}());
  const std::uint64_t seed = rng();
  std::printf("host_plan: seed %llu\n", static_cast<unsigned long long>(seed));
  rng.seed(seed);

  // train: the training step is one compiled plan
  optim::trainer t(loss(), mlp::params{}, optim::adam{.lr = 0.05}, nn::make_params<mlp>(seed % 1000));
  const auto [hx, hy] = batch(rng, 256);  // held out
  const double before = eval(loss(), X{} = hx, Y{} = hy, t.params())();
  for (int s = 0; s < 60; ++s) {
    const auto [x, y] = batch(rng, 32);
    t.step({{"x", x}, {"y", y}});
  }
  const double after = eval(loss(), X{} = hx, Y{} = hy, t.params())();
  std::printf("host_plan: held-out loss %.4f before training, %.4f after 60 steps\n", before, after);
  check(std::isfinite(after) && after < 0.5 * before, "training lowers the held-out loss by half");

  // the trained model's forward pass, compiled, against the eager backend
  const auto [x, y] = batch(rng, 48);
  const auto forward = compile(logits());
  const tensor<float, 2> got = forward(X{} = x, t.params());
  const tensor<float, 2> want = eval(logits(), X{} = x, t.params(), eager::backend);
  check(rel_diff(got.any(), want.any()) < 1e-5, "compiled forward = eager forward");

  // its loss and gradient, one compiled plan, against the eager backend
  const auto step = compile(loss_and_grads());
  const std::vector<any_tensor> g = step(X{} = x, Y{} = y, t.params());
  const std::vector<any_tensor> ge = eval_all(loss_and_grads(), X{} = x, Y{} = y, t.params(), eager::backend);
  check(g.size() == 5 && ge.size() == 5, "loss and four gradients");
  for (std::size_t i = 0; i < g.size() && i < ge.size(); ++i) check(rel_diff(g[i], ge[i]) < 1e-4, "compiled gradient = eager gradient");
  double norm = 0;
  for (std::size_t i = 1; i < g.size(); ++i)
    for (index_t j = 0; j < g[i].numel(); ++j) norm += std::fabs(g[i].contiguous().data<float>()[j]);
  check(norm > 0, "the gradient is not zero");

  std::printf("host_plan: %d passed, %d failed\n", passed, failed);
  return failed == 0 && passed > 0 ? 0 : 1;
}
