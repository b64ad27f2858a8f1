// Build cost: an MLP's forward pass (784-256-10, relu), evaluated once.
#include <kiln/kiln.hpp>
#include <kiln/nn/modules.hpp>
using namespace kiln;
using net = nn::mlp<"mlp", 784, 256, 10>;
int main() {
  using X = input<"x", f32, shape<dyn, 784>>;
  auto params = nn::make_params<net>(1);
  any_tensor x(f32, dims{64, 784});
  nn::init::normal(x, 0, 1, 2);
  auto out = eval(net{}(X{}), X{} = x, params);
  return out.shape()[1] == 10 ? 0 : 1;
}
