// A bad reduction axis is reported once; the ops built on its result add no errors.
// expect-errors: 1
// expect: axis_out_of_range
// expect: op::sum
// expect: axes<5>
// expect: kiln: axis out of range for this shape
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = sum<5>(input<"x", f32, shape<2, 3>>{}) + input<"b", f32, shape<2>>{};
  (void)y;
}
