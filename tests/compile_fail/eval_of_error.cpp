// Evaluating an expression with a static mistake reports the mistake, and nothing else.
// expect-errors: 1
// expect: shapes_do_not_broadcast
// expect: shape<3, 4>
// expect: kiln: operand shapes cannot be broadcast together
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto r = eval(input<"a", f32, shape<3, 4>>{} + input<"b", f32, shape<5>>{}, {});
  (void)r;
}
