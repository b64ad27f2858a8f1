// linear with w [out=3, in=5] on x [..., 4].
// expect-errors: 1
// expect: linear_shapes_do_not_match
// expect: shape<-1, 4>
// expect: shape<3, 5>
// expect: kiln: linear needs x ...., in., w .out, in. and b .out.
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = linear(input<"x", f32, shape<dyn, 4>>{}, param<"w", f32, shape<3, 5>>{}, param<"b", f32, shape<3>>{});
  (void)y;
}
