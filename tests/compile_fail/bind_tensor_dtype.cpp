// A typed tensor whose element type is not the placeholder's: rejected where it is bound.
// expect-errors: 1
// expect: tensor_does_not_fit_placeholder<kiln::op::input
// expect: named<(kiln::fixed_string<2>{"x"}|'x')>
// expect: kiln::tensor<double, 2>
// expect: element type or rank is not the placeholder's
// expect: kiln: the bound tensor's element type or rank is not the
#include <kiln/kiln.hpp>
using namespace kiln;
using X = input<"x", f32, shape<dyn, 784>>;
int main() {
  tensor<double, 2> x({2, 784});
  auto y = eval(relu(X{}), X{} = x);
  (void)y;
}
