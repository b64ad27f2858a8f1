// Reducing the same axis twice is a mistake (PyTorch rejects it too).
// expect-errors: 1
// expect: axis_out_of_range
// expect: axes<0, 0>
// expect: kiln: axis out of range for this shape
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = sum<0, 0>(input<"x", f32, shape<2, 3>>{});
  (void)y;
}
