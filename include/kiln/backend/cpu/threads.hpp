// kiln/backend/cpu/threads.hpp: how kernels use the thread pool (parallel.hpp): run_tasks, a
// parallel_for that carries the first exception out of the workers (first_error), and the
// constants that size their work (parallel_grain, pipeline_min_row and pipeline_max_row,
// pointwise_chunk, stream_prefetch_bytes); and load_sval, a rank-0 operand read once per run.
//
// Apart because these numbers are tuned by measurement (docs/notes.md): one place to find and
// change them, shared by the generic run (loops.hpp) and kernel_code (kernels.hpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>

#include "parallel.hpp"
#include "runtime.hpp"
#include "simd.hpp"
#include "step.hpp"

// GCC 12's false -Wmaybe-uninitialized on AVX-512 intrinsics inlined into kernel code (GCC PR
// 105593): silenced here as in kernels.hpp, which says why.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13 && !defined(KILN_KEEP_UNINIT_WARNINGS)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define KILN_THREADS_DIAGNOSTIC_PUSHED
#endif

namespace kiln::cpu::detail {

/// parallel_for that carries the first exception out of the workers (an integer pow with a
/// negative exponent throws from inside a kernel).
class first_error {
 public:
  template <class Fn>
  void guard(Fn&& fn) noexcept {
    try {
      fn();
    } catch (...) {
      std::lock_guard<std::mutex> l(m_);
      if (!e_) e_ = std::current_exception();
      failed_.store(true, std::memory_order_relaxed);
    }
  }
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  void rethrow() const {
    if (e_) std::rethrow_exception(e_);
  }

 private:
  std::mutex m_;
  std::exception_ptr e_;
  std::atomic<bool> failed_{false};
};

template <class Fn>
void run_tasks(index_t n, index_t grain, Fn&& fn) {
  first_error err;
  parallel_for(n, grain, [&](index_t b, index_t e) { err.guard([&] { fn(b, e); }); });
  err.rethrow();
}

/// Minimum work (elements) that is worth a thread of its own.
inline constexpr index_t parallel_grain = 32768;
/// Row kernels pipeline a row's final sweep into the next row's sweep (kernel_code::pipelined)
/// for rows of at least pipeline_min_row elements, where each row's copies of its registers (a
/// vector per node, copied twice) are repaid many times over, and at most pipeline_max_row:
/// the deferred row's cache is read a row later, so about four rows' worth (two cache sets, the
/// row read and the row written) must stay in a core's L2: four rows of 32768 floats take half
/// of a 1 MiB L2, and longer rows made two threads slower pipelined than not (docs/notes.md).
inline constexpr index_t pipeline_min_row = 256;
inline constexpr index_t pipeline_max_row = 32768;
/// Elements of one pointwise task along the innermost axis.
inline constexpr index_t pointwise_chunk = 16384;
/// How far ahead a streaming pointwise kernel prefetches each input (prefetch_ins), in bytes:
/// far enough that each stream keeps enough lines in flight to cover memory latency at full
/// bandwidth (16 lines were too few for fast memory), near enough that the lines are still
/// cached when loaded (chosen by measurement: docs/notes.md).
inline constexpr index_t stream_prefetch_bytes = 3072;
/// Column reductions (lanes across the kept innermost axis) step through the reduced positions
/// a row's stride apart; each reference is prefetched this many positions ahead along the
/// innermost reduced axis (the hardware prefetchers stop at page boundaries, so without it a
/// bias gradient's sweep waited on memory at each step).
inline constexpr index_t column_prefetch = 8;

/// A rank-0 value from memory, as a double and (for integers) an int64.
inline sval load_sval(const view& v) {
  sval s;
  visit(v.dt, [&]<dtype D>() {
    const auto x = simd::load<simd::scalar, D>(v.p, 0, 1);
    s.f = static_cast<double>(x);
    if constexpr (!is_floating(D)) s.i = static_cast<std::int64_t>(x);
  });
  return s;
}

}  // namespace kiln::cpu::detail

#ifdef KILN_THREADS_DIAGNOSTIC_PUSHED
#pragma GCC diagnostic pop
#undef KILN_THREADS_DIAGNOSTIC_PUSHED
#endif
