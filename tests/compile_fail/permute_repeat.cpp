// permute that names axis 0 twice.
// expect-errors: 1
// expect: not_a_permutation
// expect: shape<3, 4>
// expect: perm<0, 0>
// expect: kiln: permute needs each axis exactly once
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = permute<0, 0>(input<"x", f32, shape<3, 4>>{});
  (void)y;
}
