// Broadcasting to [2^31, 2^31]: 2^62 elements, more than any byte count of them holds.
// expect-errors: 1
// expect: shape_has_too_many_elements
// expect: op::broadcast
// expect: shape<2147483648, 2147483648>
// expect: at most 2.59 elements
// expect: kiln: a shape may count at most 2.59 elements .kiln::max
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  tensor<float, 2> a({1, 1}, {2.f});
  tensor<float, 2> b = broadcast_to<(index_t{1} << 31), (index_t{1} << 31)>(a) * 2.f;
  (void)b;
}
