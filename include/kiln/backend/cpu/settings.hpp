// kiln/backend/cpu/settings.hpp: what the CPU backend counts and what a user may set: run_stats
// (kernels run, fused or node by node, streamed, pipelined; stats()) and stream_threshold
// (KILN_STREAM_BYTES, set_stream_threshold).
//
// Apart from the kernels because it is the backend's public face, not kernel code: the shared
// run code (loops.hpp) and kernel_code (kernels.hpp) read the threshold and add to the counts;
// tests and users read the counts and set the threshold.
#pragma once

#include <cstdint>

#include "../../core/env.hpp"
#include "cache.hpp"

namespace kiln::cpu {

/// What the CPU backend ran on this thread since the counts were last reset: kernels, and how
/// many of them ran as one fused loop nest or node by node, and how many fused ones wrote a
/// result with non-temporal stores (stream_threshold), and how many row kernels' calls qualified
/// for running each row's final sweep in the next row's sweep (kernel_code::pipelined); and
/// `deferred`: the rows whose final sweep this thread deferred so (counted on the thread that
/// ran the rows, which is the caller's with one thread); `threaded`: the kernels that split a
/// loop among more than one thread. Tests use it to check that a plan's kernels run as planned.
struct run_stats {
  long kernels = 0, fused = 0, node_by_node = 0, streamed = 0, pipelined = 0, deferred = 0, threaded = 0;
};
inline run_stats& stats() {
  static thread_local run_stats s;
  return s;
}

namespace detail {
/// The size in bytes of the last-level cache that CPU 0 sees (cache_bytes), else 16 MiB.
inline std::int64_t last_level_cache_bytes() {
  const std::int64_t b = cache_bytes(0);
  return b > 0 ? b : std::int64_t{16} << 20;
}
inline std::int64_t& stream_setting() {
  static std::int64_t b = [] {
    if (const auto v = kiln::detail::env_integer("KILN_STREAM_BYTES", 0)) return static_cast<std::int64_t>(*v);
    return last_level_cache_bytes();
  }();
  return b;
}
}  // namespace detail

/// Pointwise kernels, and row kernels with lanes along their rows (softmax, layer_norm), whose
/// operands and results span at least this many bytes write their full-space results with
/// non-temporal stores (x86), around the caches: such a result would not be in
/// cache for its reader anyway, and a store that misses first reads its line from memory. The
/// default is the last-level cache's size, or KILN_STREAM_BYTES from the environment; 0
/// streams every eligible store, a huge value none. It never changes a result, only where it
/// is cached.
inline std::int64_t stream_threshold() { return detail::stream_setting(); }
/// Sets stream_threshold (negative: 0); returns the previous one.
inline std::int64_t set_stream_threshold(std::int64_t bytes) {
  const std::int64_t old = detail::stream_setting();
  detail::stream_setting() = bytes > 0 ? bytes : 0;
  return old;
}

}  // namespace kiln::cpu
