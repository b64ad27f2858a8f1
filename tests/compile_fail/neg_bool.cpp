// negating a bool tensor.
// expect-errors: 1
// expect: dtype_not_supported
// expect: op::neg
// expect: dtype::boolean
// expect: kiln: this op does not accept this dtype
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = -input<"m", boolean, shape<2, 3>>{};
  (void)y;
}
