// matmul of [2, 3] by [4, 5]: inner extents 3 and 4 differ.
// expect-errors: 1
// expect: matmul_shapes_do_not_match
// expect: shape<2, 3>
// expect: shape<4, 5>
// expect: kiln: matmul needs ...., m, k. x ...., k, n. with broadc
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = matmul(input<"x", f32, shape<2, 3>>{}, param<"w", f32, shape<4, 5>>{});
  (void)y;
}
