// Build cost: three eager expressions, each reading the one before.
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  tensor<float, 2> a({2, 3}, {1, 2, 3, 4, 5, 6});
  tensor<float, 1> b({3}, {10, 20, 30});
  tensor<float, 2> c = a + b * 2;
  tensor<float, 2> d = tanh(c) * a - 1;
  tensor<float, 1> e = sum<1>(exp(d - c));
  return e(0) > 0 ? 0 : 1;
}
