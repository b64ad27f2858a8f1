// torch.gather along axis 1 with an index wider than x on axis 0.
// expect-errors: 1
// expect: gather_along_shapes_do_not_match
// expect: shape<3, 4>
// expect: shape<5, 2>
// expect: kiln: gather.axis. and scatter_add.axis. need static extents
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = gather<1>(input<"x", f32, shape<3, 4>>{}, input<"i", i64, shape<5, 2>>{}) * 2.0f;
  (void)y;
}
