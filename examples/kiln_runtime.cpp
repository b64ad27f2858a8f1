// kiln's run-time code (the CPU driver, thread pool, tensors' storage, file readers, ...),
// compiled once for the examples that build with KILN_SEPARATE_COMPILATION (CMakeLists.txt),
// rather than again in each of their units (docs/build-cost.md).
#include <kiln/src.hpp>
