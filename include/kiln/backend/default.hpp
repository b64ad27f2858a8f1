// kiln/backend/default.hpp: the backends kiln ships, and the one that eval, compile, the
// trainer and tensor assignment use when none is named. The one file to change when a backend
// is added to the defaults (docs/adding-a-backend.md).
#pragma once

#include "cpu.hpp"
#include "eager.hpp"

namespace kiln {

using default_backend = cpu::backend_t;

/// Threads the default backend runs a plan's kernels on (1 for a backend without threads).
inline int num_threads() {
  if constexpr (requires { default_backend::num_threads(); }) return default_backend::num_threads();
  else return 1;
}
/// Sets them (at least 1); returns the previous count. KILN_NUM_THREADS sets the initial count.
inline int set_num_threads(int n) {
  if constexpr (requires { default_backend::set_num_threads(n); }) return default_backend::set_num_threads(n);
  else return 1;
}

}  // namespace kiln
