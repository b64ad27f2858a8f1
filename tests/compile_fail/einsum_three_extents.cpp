// einsum "ij,jk,kl->il" of [3, 4], [4, 5] and [6, 2]: the letter k has extents 5 and 6 (found
// where the second pair is contracted).
// expect-errors: 1
// expect: einsum_ok
// expect: shape<6, 2>
// expect: kiln::einsum: a letter with two different extents
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = einsum<"ij,jk,kl->il">(input<"a", f32, shape<3, 4>>{}, input<"b", f32, shape<4, 5>>{},
                                  input<"c", f32, shape<6, 2>>{});
  (void)y;
}
