// A tensor bound to a placeholder the expression does not have (a misspelt name): one error
// naming it, not one for it and another for the placeholder left unbound.
// expect-errors: 1
// expect: not_a_placeholder_of_this_expression<kiln::op::param
// expect: named<(kiln::fixed_string<3>{"W1"}|'W', '1')>
// expect: a misspelt name
// expect: kiln: eval: a tensor is bound to a placeholder that the
#include <kiln/kiln.hpp>
using namespace kiln;
using X = input<"x", f32, shape<dyn, 784>>;
using W1 = param<"w1", f32, shape<784, 256>>;
int main() {
  tensor<float, 2> x({2, 784}), w1({784, 256});
  auto y = eval(relu(matmul(X{}, W1{})), X{} = x, param<"W1", f32, shape<784, 256>>{} = w1);
  (void)y;
}
