// broadcast_to [4, 3] from [2, 3].
// expect-errors: 1
// expect: cannot_broadcast_to
// expect: shape<2, 3>
// expect: shape<4, 3>
// expect: kiln: shape cannot be broadcast to the target shape
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = broadcast_to<4, 3>(input<"x", f32, shape<2, 3>>{});
  (void)y;
}
