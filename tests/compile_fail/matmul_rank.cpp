// matmul takes a vector [k] as a row on the left (a column on the right): one of the wrong
// length is reported with both shapes.
// expect-errors: 1
// expect: matmul_shapes_do_not_match
// expect: shape<5>
// expect: shape<3, 4>
// expect: kiln: matmul needs ...., m, k. x ...., k, n. with broadc
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = matmul(input<"v", f32, shape<5>>{}, param<"w", f32, shape<3, 4>>{});
  (void)y;
}
