// floor_divide of integers: floats only (integer floor division is not there yet; fmod and
// remainder take integers).
// expect-errors: 1
// expect: floor_divide
// expect: kiln::floor_divide: floats only
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = floor_divide(input<"a", i64, shape<3>>{}, input<"b", i64, shape<3>>{});
  (void)y;
}
