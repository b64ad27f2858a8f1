// kiln/core/config.hpp: build-wide constants and the one host/device macro.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define KILN_HD __host__ __device__
#else
#define KILN_HD
#endif

// Op bodies (ops/bodies.hpp) are inlined into every kernel's loop, whatever the compiler's
// size heuristics make of a kernel of many nodes: a call per element would cost more than the op.
#if defined(__CUDACC__)
#define KILN_ALWAYS_INLINE __forceinline__
#elif defined(__GNUC__)
#define KILN_ALWAYS_INLINE [[gnu::always_inline]] inline
#else
#define KILN_ALWAYS_INLINE inline
#endif

namespace kiln {

/// Index and extent type used everywhere (signed, as in PyTorch and Eigen).
using index_t = std::int64_t;

/// Largest tensor rank kiln supports. Shapes are fixed-capacity values so that they can live
/// inside constant evaluation and inside frozen plans.
inline constexpr int max_rank = 8;

}  // namespace kiln
