// Tensor assignment evaluates with a backend, which the core and graph headers do not include:
// without <kiln/eval.hpp> the program is rejected with a message saying so (it once compiled and
// then failed to link).
#include <kiln/graph/expr.hpp>

int main() {
  kiln::tensor<float, 1> a({4}, {1, 2, 3, 4});
  kiln::tensor<float, 1> c = a + a;
  return c.numel() == 4 ? 0 : 1;
}
// expect-errors: 1
// expect: needs #include <kiln/eval.hpp>
// expect: kiln: evaluating an expression into a tensor needs #incl
