// conv2d of a 3-channel input with a weight for 4 input channels.
// expect-errors: 1
// expect: conv2d_shapes_do_not_match
// expect: shape<-1, 3, 28, 28>
// expect: shape<8, 4, 3, 3>
// expect: kiln: conv2d needs x .n, c, h, w., weight .out, c, kh, k
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = relu(conv2d<1, 1>(input<"x", f32, shape<dyn, 3, 28, 28>>{}, param<"w", f32, shape<8, 4, 3, 3>>{},
                             param<"b", f32, shape<8>>{}));
  (void)y;
}
