// mean of an integer tensor (as in PyTorch, cast to a float dtype first).
// expect-errors: 1
// expect: dtype_not_supported
// expect: op::mean
// expect: dtype::i32
// expect: kiln: this op does not accept this dtype
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = mean<0>(input<"n", i32, shape<2, 3>>{});
  (void)y;
}
