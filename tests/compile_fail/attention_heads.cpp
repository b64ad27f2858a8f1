// Attention with 3 k/v heads for 4 q heads (3 does not divide 4): one error naming the shapes.
// expect-errors: 1
// expect: attention_shapes_do_not_match
// expect: shape<2, 4, 7, 8>
// expect: shape<2, 3, 9, 8>
// expect: kiln: scaled_dot_product_attention needs q ...., h, tq,
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = scaled_dot_product_attention(input<"q", f32, shape<2, 4, 7, 8>>{}, input<"k", f32, shape<2, 3, 9, 8>>{},
                                        input<"v", f32, shape<2, 3, 9, 8>>{});
  auto z = y * 2.0f;  // a later op on the failed one adds no error
  (void)z;
}
