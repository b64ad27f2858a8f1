// Build cost: one eager expression, b broadcast over a's rows.
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  tensor<float, 2> a({2, 3}, {1, 2, 3, 4, 5, 6});
  tensor<float, 1> b({3}, {10, 20, 30});
  tensor<float, 2> c = a + b * 2;
  return c(1, 2) == 66 ? 0 : 1;
}
