// A shared library that uses kiln with its run-time code from kiln_add_runtime's static library
// (which must then be position-independent): consumer_shared_caller calls it.
#include <kiln/kiln.hpp>

float consumer_shared_value() {
  kiln::tensor<float, 1> a({3}, {1, 2, 3});
  kiln::tensor<float, 1> c = kiln::relu(a * 2 - 3);
  return c(0) + c(2);  // 0 + 3
}
