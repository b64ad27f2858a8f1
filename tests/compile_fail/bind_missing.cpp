// A placeholder of the expression with no tensor bound to it: one error naming it.
// expect-errors: 1
// expect: no_tensor_bound_to<kiln::op::param
// expect: named<(kiln::fixed_string<3>{"w2"}|'w', '2')>
// expect: no tensor is bound to this placeholder
// expect: kiln: eval: no tensor is bound to this placeholder of th
#include <kiln/kiln.hpp>
using namespace kiln;
using X = input<"x", f32, shape<dyn, 784>>;
using W1 = param<"w1", f32, shape<784, 256>>;
using W2 = param<"w2", f32, shape<256, 10>>;
int main() {
  tensor<float, 2> x({2, 784}), w1({784, 256});
  auto y = eval(matmul(relu(matmul(X{}, W1{})), W2{}), X{} = x, W1{} = w1);
  (void)y;
}
