// Assigning a rank-2 expression to a rank-1 tensor.
// expect-errors: 1
// expect: rank is not R
// expect: kiln: tensor<T, R> = expression: the expression's rank i
#include <kiln/kiln.hpp>
using namespace kiln;
int main() {
  tensor<float, 2> a({2, 3});
  tensor<float, 1> c = a + a;
  (void)c;
}
