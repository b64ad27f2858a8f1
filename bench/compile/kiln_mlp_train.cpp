// Build cost: an MLP's training step (784-256-10, relu, cross-entropy, SGD), run once.
#include <kiln/kiln.hpp>
#include <kiln/optim.hpp>
#include <cmath>
#include <cstdint>
using namespace kiln;
using net = nn::mlp<"mlp", 784, 256, 10>;
int main() {
  using X = input<"x", f32, shape<dyn, 784>>;
  using Y = input<"y", i64, shape<dyn>>;
  auto loss = cross_entropy(net{}(X{}), Y{});
  optim::trainer tr(loss, net::params{}, optim::sgd{.lr = 0.1}, nn::make_params<net>(1));
  any_tensor x(f32, dims{64, 784});
  nn::init::normal(x, 0, 1, 2);
  tensor<std::int64_t, 1> y({64});
  for (index_t i = 0; i < 64; ++i) y(i) = i % 10;
  const double l = tr.step(X{} = x, Y{} = y);
  return std::isfinite(l) ? 0 : 1;
}
