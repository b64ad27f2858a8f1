// where with an f32 condition.
// expect-errors: 1
// expect: where_condition_not_bool
// expect: dtype::f32
// expect: kiln: where needs a bool condition
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto x = input<"x", f32, shape<2, 3>>{};
  auto y = where(x, x, x);
  (void)y;
}
