// fmod of integers: floats only (C's % semantics and division by zero are not there yet).
// expect-errors: 1
// expect: dtype_not_supported
// expect: op::fmod
// expect: kiln: this op does not accept this dtype
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = fmod(input<"a", i64, shape<3>>{}, input<"b", i64, shape<3>>{});
  (void)y;
}
