// matmul of f32 by i64: PyTorch rejects it ("expected m1 and m2 to have the same dtype"), and so
// does kiln, instead of promoting silently.
// expect-errors: 1
// expect: matmul_dtypes_differ
// expect: cast one with kiln::cast
// expect: kiln: matmul needs operands of one dtype, as PyTorch doe
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  auto y = matmul(input<"x", f32, shape<2, 3>>{}, input<"i", i64, shape<3, 5>>{});
  (void)y;
}
