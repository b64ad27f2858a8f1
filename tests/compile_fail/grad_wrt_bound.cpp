// grad with respect to a bound tensor: only placeholders have an identity to differentiate by.
// expect-errors: 1
// expect: grad_is_taken_with_respect_to_a_placeholder
// expect: op::bound
// expect: kiln: grad and jvp differentiate with respect to a place
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  tensor<float, 1> t({3});
  auto g = grad(sum(as_expr(t) * 2.0f), as_expr(t));
  (void)g;
}
