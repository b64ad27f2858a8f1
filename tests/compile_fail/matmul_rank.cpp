// matmul needs rank >= 2 on both sides.
// expect-errors: 1
// expect: matmul_shapes_do_not_match
// expect: shape<3>
// expect: shape<3, 4>
// expect: kiln: matmul needs ...., m, k. x ...., k, n. with broadc
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = matmul(input<"v", f32, shape<3>>{}, param<"w", f32, shape<3, 4>>{});
  (void)y;
}
