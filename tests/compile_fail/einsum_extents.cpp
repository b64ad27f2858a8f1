// einsum "ij,jk->ik" of [3, 4] and [5, 6]: the letter j has extents 4 and 5.
// expect-errors: 1
// expect: einsum_ok
// expect: shape<3, 4>
// expect: shape<5, 6>
// expect: kiln::einsum: a letter with two different extents
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = einsum<"ij,jk->ik">(input<"a", f32, shape<3, 4>>{}, input<"b", f32, shape<5, 6>>{});
  (void)y;
}
