// Axis 257 does not exist (it must not wrap around to 1).
// expect-errors: 1
// expect: not_a_permutation
// expect: perm<257, 0>
// expect: kiln: permute needs each axis exactly once
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = permute<257, 0>(input<"x", f32, shape<2, 3>>{});
  (void)y;
}
