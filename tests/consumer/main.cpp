// A program built against the installed kiln package; prints a value computed by kiln and the
// same value computed by hand, and fails if they differ.
#include <kiln/kiln.hpp>

// consumer_separate links a library of kiln_add_runtime, which must pass the macro on
#if defined(KILN_CONSUMER_SEPARATE) && !defined(KILN_SEPARATE_COMPILATION)
#error "kiln_add_runtime's library did not give its user KILN_SEPARATE_COMPILATION"
#endif

#include <cmath>
#include <cstdio>

int main() {
  using namespace kiln;
  tensor<float, 2> a({2, 2}, {1, 2, 3, 4});
  tensor<float, 1> b({2}, {0.5f, -1});
  tensor<float, 2> c = relu(a * 2 + b);
  const float want[4] = {2.5f, 3, 6.5f, 7};
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      if (std::fabs(c(i, j) - want[i * 2 + j]) > 1e-6f) {
        std::printf("consumer: c(%d,%d) = %g, want %g\n", i, j, c(i, j), want[i * 2 + j]);
        return 1;
      }
  std::printf("consumer: ok\n");
  return 0;
}
