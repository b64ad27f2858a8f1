// kiln/backend/cpu/fma.hpp: a * b + c rounded once, for xsimd batches.
#pragma once

#include <type_traits>

#include <xsimd/xsimd.hpp>

namespace kiln::cpu {

/// a * b + c with one rounding. xsimd 8.1 (Debian bookworm) has no AVX-512 fma: its generic
/// fallback computes a * b + c through two intrinsics, two roundings. g++ -O2 contracts those
/// into an FMA, but not under the sanitizers, and clang never does (half the GEMM speed, and
/// erf_f32 loses an ulp). This calls the intrinsic for AVX-512 batches and xsimd::fma otherwise
/// (FMA3 on AVX2, NEON's vfma; plain SSE2 has no FMA and rounds twice).
template <class V> inline V fmadd(const V& a, const V& b, const V& c) {
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, typename V::arch_type>) {
    if constexpr (std::is_same_v<typename V::value_type, float>) return V(_mm512_fmadd_ps(a, b, c));
    else return V(_mm512_fmadd_pd(a, b, c));
  }
#endif
  return xsimd::fma(a, b, c);
}

}  // namespace kiln::cpu
