// grad of a [3, 4] value: the loss must be rank 0 (as in PyTorch, reduce it first).
// expect-errors: 1
// expect: grad_needs_a_scalar_loss
// expect: shape<3, 4>
// expect: kiln: grad needs a rank-0 loss .reduce it first, e.g. wi
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  using W = param<"w", f32, shape<3, 4>>;
  auto g = grad(exp(W{}), W{});
  (void)g;
}
