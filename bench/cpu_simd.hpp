// bench/cpu_simd.hpp: the pieces of the hand-written loops (cpu_hand.cpp) and of the OpenBLAS
// epilogues (peers_blas.cpp): xsimd batches of the widest instruction set the compiler targets
// (-march=native), and a split of [0, n) over OpenMP threads. GCC does not vectorise a loop
// that calls std::erf or std::exp without -ffast-math; xsimd's erf and exp are vectorised and
// accurate to a few ulp, so these loops stay within the f32 tolerances of the comparison.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <xsimd/xsimd.hpp>

#include "cpu_common.hpp"

namespace kb {

using batch = xsimd::batch<float>;
inline constexpr i64 lanes = static_cast<i64>(batch::size);

inline batch gelu(batch z) {
  return batch(0.5f) * z * (batch(1.0f) + xsimd::erf(z * batch(0.70710678118654752f)));
}
inline float gelu(float z) { return 0.5f * z * (1.0f + std::erf(z * 0.70710678118654752f)); }
/// gelu_tanh as a careful hand-written loop computes it: 0.5 z (1 + tanh u) = z / (1 + e^(-2u)),
/// u = sqrt(2/pi) (z + 0.044715 z^3): one exp and one division, no cancellation where u << 0.
inline batch gelu_tanh(batch z) {
  const batch m2u = z * xsimd::fma(z * z, batch(-2 * 0.79788456080286536f * 0.044715f), batch(-2 * 0.79788456080286536f));
  return z / (batch(1.0f) + xsimd::exp(m2u));
}
inline float gelu_tanh(float z) {
  return z / (1.0f + std::exp(z * (z * z * (-2 * 0.79788456080286536f * 0.044715f) - 2 * 0.79788456080286536f)));
}

/// Stores v at p (aligned to the batch) with a non-temporal hint (x86 MOVNTPS): the line is
/// written around the cache instead of first being read into it. Written here rather than
/// taken from kiln, so that the reference shares no code with what it measures.
inline void store_stream(float* p, batch v) {
#if defined(__AVX512F__)
  _mm512_stream_ps(p, v);
#elif defined(__AVX__)
  _mm256_stream_ps(p, v);
#elif defined(__SSE2__)
  _mm_stream_ps(p, v);
#else
  v.store_aligned(p);
#endif
}
/// Orders this thread's non-temporal stores before what it does next (x86 SFENCE).
inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

/// Runs f(begin, end) over [0, n) in tasks of `chunk` (a multiple of the batch width, so
/// tasks start on whole batches), handed out to `threads` OpenMP threads as they come free.
/// Tasks rather than one contiguous share per thread: when another process preempts one of
/// the two threads, the other takes the remaining tasks instead of waiting a time slice (4 ms).
template <class F>
void parallel_chunks(i64 n, i64 chunk, int threads, F&& f) {
  const i64 tasks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (i64 t = 0; t < tasks; ++t) f(t * chunk, std::min(n, (t + 1) * chunk));
}

/// About 256 KiB of floats per task: long enough for the prefetchers, short enough to balance.
inline constexpr i64 task_floats = i64(1) << 16;
/// Rows per task for rows of n floats.
inline i64 task_rows(i64 n) { return std::max<i64>(1, task_floats / std::max<i64>(n, 1)); }

/// y[i, j] = act(y[i, j] + bias[j]) over an [m, n] row-major matrix: the separate epilogue
/// pass that a BLAS user writes after sgemm.
template <class Act, class ActScalar>
void bias_act_rows(float* y, const float* bias, i64 m, i64 n, int threads, Act act, ActScalar act1) {
  parallel_chunks(m, task_rows(n), threads, [&](i64 r0, i64 r1) {
    const i64 nv = n - n % lanes;
    for (i64 r = r0; r < r1; ++r) {
      float* row = y + r * n;
      for (i64 j = 0; j < nv; j += lanes)
        act(batch::load_unaligned(row + j) + batch::load_unaligned(bias + j)).store_unaligned(row + j);
      for (i64 j = nv; j < n; ++j) row[j] = act1(row[j] + bias[j]);
    }
  });
}

}  // namespace kb
