// A tangent of shape [4] for an input of shape [3].
// expect-errors: 1
// expect: tangent_shape_does_not_match
// expect: shape<3>
// expect: shape<4>
// expect: kiln: a tangent needs its input's shape
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  using X = input<"x", f32, shape<3>>;
  using U = input<"u", f32, shape<4>>;
  auto d = jvp(exp(X{}), tangent(X{}, U{}));
  (void)d;
}
