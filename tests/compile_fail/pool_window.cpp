// a 5x5 max-pooling window on a 4x4 image (no padding): no window fits.
// expect-errors: 1
// expect: window_does_not_fit
// expect: max_pool2d
// expect: shape<-1, 2, 4, 4>
// expect: kiln: a 2-D window op needs x .n, c, h, w. with static c
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = max_pool2d<5>(input<"x", f32, shape<dyn, 2, 4, 4>>{}) * 2.0f;
  (void)y;
}
