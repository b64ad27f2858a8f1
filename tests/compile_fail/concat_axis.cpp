// concat along axis 2 of rank-2 tensors: the axis is the mistake.
// expect-errors: 1
// expect: axis_out_of_range
// expect: op::concat
// expect: kiln: axis out of range for this shape
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto a = input<"a", f32, shape<2, 3>>{};
  auto y = concat<2>(a, a);
  (void)y;
}
