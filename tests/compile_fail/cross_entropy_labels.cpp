// cross_entropy with float labels.
// expect-errors: 1
// expect: labels_must_be_integers
// expect: dtype::f32
// expect: kiln: cross_entropy needs integer labels
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = cross_entropy(input<"z", f32, shape<dyn, 10>>{}, input<"y", f32, shape<dyn>>{});
  (void)y;
}
