// Two tensors bound to one placeholder, here in a compiled expression's call.
// expect-errors: 1
// expect: placeholder_bound_twice<kiln::op::input
// expect: named<(kiln::fixed_string<2>{"x"}|'x')>
// expect: two tensors are bound to this placeholder
// expect: kiln: eval: two tensors are bound to this placeholder .t
#include <kiln/kiln.hpp>
using namespace kiln;
using X = input<"x", f32, shape<dyn, 784>>;
using W1 = param<"w1", f32, shape<784, 256>>;
int main() {
  tensor<float, 2> x({2, 784}), w1({784, 256});
  auto f = compile(relu(matmul(X{}, W1{})));
  auto y = f(X{} = x, W1{} = w1, X{} = x);
  (void)y;
}
