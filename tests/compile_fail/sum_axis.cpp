// sum over axis 2 of a rank-2 tensor.
// expect-errors: 1
// expect: axis_out_of_range
// expect: op::sum
// expect: shape<3, 4>
// expect: axes<2>
// expect: kiln: axis out of range for this shape
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = sum<2>(input<"x", f32, shape<3, 4>>{});
  (void)y;
}
