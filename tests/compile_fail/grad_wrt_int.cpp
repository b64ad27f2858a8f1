// grad with respect to an integer placeholder: integers carry no derivative.
// expect-errors: 1
// expect: integer_inputs_are_not_differentiable
// expect: dtype::i32
// expect: kiln: grad and jvp need a floating-point placeholder
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  using N = input<"n", i32, shape<3>>;
  auto g = grad(sum(cast<f32>(N{})), N{});
  (void)g;
}
