// One mistake deep inside a larger expression is reported once, at the op that made it.
// expect-errors: 1
// expect: shapes_do_not_broadcast
// expect: op::mul
// expect: shape<8, 16>
// expect: shape<8, 15>
// expect: kiln: operand shapes cannot be broadcast together
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto x = input<"x", f32, shape<8, 16>>{};
  auto b = input<"b", f32, shape<8, 15>>{};
  auto y = sum<1>(exp(relu(x) * b) + 1.0f);
  (void)y;
}
