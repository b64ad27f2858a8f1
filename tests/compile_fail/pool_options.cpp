// avg_pool2d with a dilation, which PyTorch's avg_pool2d does not have.
// expect-errors: 1
// expect: pool_options_do_not_fit
// expect: avg_pool2d
// expect: shape<-1, 2, 8, 8>
// expect: kiln: pooling needs x .n, c, h, w. with static c, h, w
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = avg_pool2d<pool2d_options{.kernel = 2, .dilation = 2}>(input<"x", f32, shape<dyn, 2, 8, 8>>{}) * 2.0f;
  (void)y;
}
