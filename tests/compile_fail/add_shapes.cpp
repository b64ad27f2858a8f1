// Adding [3, 4] and [5]: the trailing extents 4 and 5 cannot broadcast.
// expect-errors: 1
// expect: shapes_do_not_broadcast
// expect: op::add
// expect: shape<3, 4>
// expect: shape<5>
// expect: kiln: operand shapes cannot be broadcast together
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = input<"a", f32, shape<3, 4>>{} + input<"b", f32, shape<5>>{};
  (void)y;
}
