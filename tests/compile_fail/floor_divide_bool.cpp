// floor_divide of bools: PyTorch refuses it too (integers and floats are fine).
// expect-errors: 1
// expect: floor_divide
// expect: kiln::floor_divide: not for bools
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = floor_divide(input<"a", boolean, shape<3>>{}, input<"b", boolean, shape<3>>{});
  (void)y;
}
