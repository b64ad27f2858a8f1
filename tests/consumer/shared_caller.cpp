// Calls the shared library of shared.cpp; fails unless it computes 3.
#include <cstdio>

float consumer_shared_value();

int main() {
  const float v = consumer_shared_value();
  std::printf("consumer_shared: %g\n", v);
  return v == 3 ? 0 : 1;
}
