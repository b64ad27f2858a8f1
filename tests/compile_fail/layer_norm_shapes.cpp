// layer_norm with gamma [5] over x [8, 4].
// expect-errors: 1
// expect: layer_norm_shapes_do_not_match
// expect: shape<8, 4>
// expect: shape<5>
// expect: kiln: layer_norm needs gamma and beta of equal shape cov
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto g = param<"g", f32, shape<5>>{};
  auto y = layer_norm(input<"x", f32, shape<8, 4>>{}, g, g);
  (void)y;
}
