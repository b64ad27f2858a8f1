// A training step whose batch leaves an input of the loss unbound: the trainer binds the
// parameters, states and hyperparameters by type, and the one error names what is left.
// expect-errors: 1
// expect: no_tensor_bound_to<kiln::op::input
// expect: named<(kiln::fixed_string<2>{"y"}|'y')>
// expect: kiln: eval: no tensor is bound to this placeholder of th
#include <kiln/kiln.hpp>
#include <kiln/optim.hpp>
using namespace kiln;
using W = param<"w", f32, shape<3, 4>>;
using X = input<"x", f32, shape<dyn, 3>>;
using Y = input<"y", f32, shape<dyn, 4>>;
int main() {
  optim::trainer tr(mse_loss(matmul(X{}, W{}), Y{}), std::tuple<W>{}, optim::sgd{}, nn::param_set<std::tuple<W>>{});
  tensor<float, 2> x({2, 3});
  (void)tr.step(X{} = x);
}
