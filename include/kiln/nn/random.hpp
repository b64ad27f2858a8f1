// kiln/nn/random.hpp: the counter-based generator (core/random.hpp) under its nn:: names.
#pragma once

#include "../core/random.hpp"

namespace kiln::nn {
using kiln::philox;
using kiln::stream_of;
}  // namespace kiln::nn
