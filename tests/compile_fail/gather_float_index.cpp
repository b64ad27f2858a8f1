// embedding with floating-point indices.
// expect-errors: 1
// expect: indices_must_be_integers
// expect: gather
// expect: f32
// expect: kiln: indices must be an integer tensor
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = embedding(input<"i", f32, shape<dyn>>{}, param<"t", f32, shape<10, 4>>{});
  (void)y;
}
