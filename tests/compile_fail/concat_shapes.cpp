// concat along axis 0 of [3, 4] and [2, 5]: axis 1 differs.
// expect-errors: 1
// expect: concat_shapes_do_not_match
// expect: shape<3, 4>
// expect: shape<2, 5>
// expect: kiln: concat needs equal extents on every axis but the c
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = concat<0>(input<"a", f32, shape<3, 4>>{}, input<"b", f32, shape<2, 5>>{});
  (void)y;
}
