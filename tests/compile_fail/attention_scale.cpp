// Attention's default scale 1 / sqrt(d) with a dyn head size: one error saying to pass a scale.
// expect-errors: 1
// expect: attention_default_scale_needs_a_static_head_size
// expect: shape<-1, 4, -1>
// expect: kiln: scaled_dot_product_attention's default scale 1 / s
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  using X = input<"x", f32, shape<dyn, 4, dyn>>;
  auto y = scaled_dot_product_attention(X{}, X{}, X{});
  (void)y;
}
