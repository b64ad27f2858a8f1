// slice [0, 9) of an axis of extent 4.
// expect-errors: 1
// expect: slice_out_of_range
// expect: shape<3, 4>
// expect: slice_args<1, 0, 9, 1>
// expect: kiln: slice needs 0 <= begin <= end <= extent .negatives
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = slice<1, 0, 9>(input<"x", f32, shape<3, 4>>{});
  (void)y;
}
