// kiln/backend/default.hpp: the backends kiln ships, and the one that eval, compile, the
// trainer and tensor assignment use when none is named. The one file to change when a backend
// is added to the defaults (docs/adding-a-backend.md).
#pragma once

#include "cpu.hpp"
#include "eager.hpp"

namespace kiln {

using default_backend = cpu::backend_t;

}  // namespace kiln
