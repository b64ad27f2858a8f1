// kiln/core/config.hpp: build-wide constants and the one host/device macro.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define KILN_HD __host__ __device__
#else
#define KILN_HD
#endif

// Put before a KILN_HD template that host code instantiates with host-only arguments (the
// eager and CPU backends' math): nvcc would check such an instantiation's calls as if it ran on
// the device. thrust's __thrust_exec_check_disable__.
#if defined(__CUDACC__)
#define KILN_HD_TEMPLATE _Pragma("nv_exec_check_disable")
#else
#define KILN_HD_TEMPLATE
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

// Separate compilation (docs/build-cost.md). By default kiln is header-only: its run-time code
// that no plan depends on (the CPU backend's driver, KILN_LOGS, ...) is inline, compiled again
// in every translation unit that runs a plan. Defined in every translation unit of a program,
// KILN_SEPARATE_COMPILATION declares those functions only; the one unit that includes
// <kiln/src.hpp> (first) defines them. KILN_RUNTIME marks them; KILN_DEFINE_RUNTIME says
// whether this unit has their bodies.
#define KILN_CONFIG_HPP_INCLUDED 1
#if defined(KILN_SEPARATE_COMPILATION)
#define KILN_RUNTIME
#if defined(KILN_IMPLEMENTATION)
#define KILN_DEFINE_RUNTIME 1
#else
#define KILN_DEFINE_RUNTIME 0
#endif
#else
#define KILN_RUNTIME inline
#define KILN_DEFINE_RUNTIME 1
#endif
// KILN_LAZY marks run-time code that only templates call (the eager interpreter, the CPU
// driver, leaf binding, KILN_LOGS), which many units never reach. Header-only, such a function
// is a template (`template <int = 0>`, called as before): a unit that does not call it does not
// instantiate the templates its body uses, which an inline function's body would (g++ and clang
// instantiate them for every inline function they parse). KILN_LAZY_DEF begins the definition
// of one declared KILN_LAZY before.
// With separate compilation both are KILN_RUNTIME.
// Under nvcc they are plain inline functions too: cudafe++ writes the default template
// argument into the definition again, which the host compiler rejects as a redefinition.
#if defined(KILN_SEPARATE_COMPILATION) || defined(__CUDACC__)
#define KILN_LAZY KILN_RUNTIME
#define KILN_LAZY_DEF KILN_RUNTIME
#else
#define KILN_LAZY template <int = 0>
#define KILN_LAZY_DEF template <int>
#endif

namespace kiln {

/// Index and extent type used everywhere (signed, as in PyTorch and Eigen).
using index_t = std::int64_t;

/// Largest tensor rank kiln supports. Shapes are fixed-capacity values so that they can live
/// inside constant evaluation and inside frozen plans.
inline constexpr int max_rank = 8;

}  // namespace kiln
