// reshape of 12 elements to 25.
// expect-errors: 1
// expect: reshape_element_counts_differ
// expect: shape<3, 4>
// expect: shape<5, 5>
// expect: kiln: reshape must keep the element count .at most one e
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = reshape<5, 5>(input<"x", f32, shape<3, 4>>{});
  (void)y;
}
