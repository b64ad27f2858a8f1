// where with a [2, 3] condition and a [3, 2] branch.
// expect-errors: 1
// expect: shapes_do_not_broadcast
// expect: op::where
// expect: shape<2, 3>
// expect: shape<3, 2>
// expect: kiln: operand shapes cannot be broadcast together
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto c = input<"c", boolean, shape<2, 3>>{};
  auto y = where(c, input<"a", f32, shape<3, 2>>{}, 0.0f);
  (void)y;
}
