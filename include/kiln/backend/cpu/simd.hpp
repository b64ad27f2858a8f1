// kiln/backend/cpu/simd.hpp: the CPU backend's one door to xsimd, and the op bodies.
//
// Every primitive's arithmetic is written once, generic over the value type V: the kernels
// instantiate it with xsimd::batch<float> or batch<double> (the default architecture the
// compiler targets: SSE2 without -march, AVX2 or AVX-512 with -march=native), and with plain
// scalars (compute_t of the dtype) for kernels that cannot be vectorised (integers, mixed
// widths). Semantics follow the eager reference (backend/eager.hpp): max/min propagate NaN,
// integer arithmetic wraps, float->int casts saturate, bf16 computes in f32 and every bf16
// result is rounded to bf16 (nearest even) as a store would round it.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>
#include <stdexcept>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "../../core/dtype.hpp"
#include "../../core/tensor.hpp"
#include "../../graph/ops.hpp"
#include "../../ops/bodies.hpp"
#include "fma.hpp"

namespace kiln::cpu::simd {

/// Vector mode: lanes of C (float or double); bool values are masks of the same width.
template <class C>
struct vec {
  using elem = C;
  using real = xsimd::batch<C>;
  using mask = xsimd::batch_bool<C>;
  static constexpr int width = static_cast<int>(real::size);
};
/// Scalar mode: one element at a time, each dtype in its compute type.
struct scalar {
  static constexpr int width = 1;
};

template <class M, dtype D>
struct value_type {
  using type = compute_t<D>;
};
template <class C, dtype D>
struct value_type<vec<C>, D> {
  using type = std::conditional_t<D == dtype::boolean, xsimd::batch_bool<C>, xsimd::batch<C>>;
};
/// What a value of dtype D is held in, in mode M.
template <class M, dtype D>
using value_t = typename value_type<M, D>::type;

template <class V>
inline constexpr bool is_batch_v = false;
template <class T, class A>
inline constexpr bool is_batch_v<xsimd::batch<T, A>> = true;

// ---- math, overloaded for scalars (the C library, as the eager backend) and batches -------

namespace fn {
template <class T> requires std::is_floating_point_v<T> T exp(T x) { return std::exp(x); }
template <class T> requires std::is_floating_point_v<T> T log(T x) { return std::log(x); }
template <class T> requires std::is_floating_point_v<T> T sqrt(T x) { return std::sqrt(x); }
template <class T> requires std::is_floating_point_v<T> T tanh(T x) { return std::tanh(x); }
template <class T> requires std::is_floating_point_v<T> T sin(T x) { return std::sin(x); }
template <class T> requires std::is_floating_point_v<T> T cos(T x) { return std::cos(x); }
template <class T> requires std::is_floating_point_v<T> T abs(T x) { return std::abs(x); }
template <class T> requires std::is_floating_point_v<T> T pow(T a, T b) { return std::pow(a, b); }
template <class T> requires std::is_floating_point_v<T> T fma(T a, T b, T c) { return std::fma(a, b, c); }
template <class T> requires std::is_floating_point_v<T> T floor(T x) { return std::floor(x); }
template <class T> requires std::is_floating_point_v<T> T ceil(T x) { return std::ceil(x); }
template <class T> requires std::is_floating_point_v<T> T rint(T x) { return std::nearbyint(x); }
template <class T> requires std::is_floating_point_v<T> T trunc(T x) { return std::trunc(x); }
template <class T> requires std::is_floating_point_v<T> T atan(T x) { return std::atan(x); }
template <class T> requires std::is_floating_point_v<T> T asin(T x) { return std::asin(x); }
template <class T> requires std::is_floating_point_v<T> T acos(T x) { return std::acos(x); }
template <class T> requires std::is_floating_point_v<T> T atan2(T a, T b) { return std::atan2(a, b); }
template <class T> requires std::is_floating_point_v<T> T fmod(T a, T b) { return std::fmod(a, b); }
template <class T> requires std::is_floating_point_v<T> T copysign(T a, T b) { return std::copysign(a, b); }
template <class T> requires std::is_floating_point_v<T> bool isnan(T x) { return std::isnan(x); }
template <class T> T select(bool c, T a, T b) { return c ? a : b; }

/// x clamped to [lo, hi], NaN kept as NaN, in two instructions on x86: MAXPS/MINPS return their
/// second operand when either is NaN (elsewhere two selects, whose comparisons are false for NaN).
template <class A>
[[gnu::always_inline]] inline xsimd::batch<float, A> clamp_keep_nan(const xsimd::batch<float, A>& x, float lo, float hi) {
  using V = xsimd::batch<float, A>;
#if defined(__AVX512F__)
  // (the zero-masking forms with every lane set are the plain VMINPS and VMAXPS; the plain
  // intrinsics make GCC 12 warn of an uninitialised value inside avx512fintrin.h, PR 105593)
  if constexpr (std::is_base_of_v<xsimd::avx512f, A>)
    return V(_mm512_maskz_min_ps(0xFFFF, _mm512_set1_ps(hi), _mm512_maskz_max_ps(0xFFFF, _mm512_set1_ps(lo), x)));
#endif
#if defined(__AVX__)
  if constexpr (std::is_base_of_v<xsimd::avx, A>) return V(_mm256_min_ps(_mm256_set1_ps(hi), _mm256_max_ps(_mm256_set1_ps(lo), x)));
#endif
#if defined(__SSE2__)
  if constexpr (std::is_base_of_v<xsimd::sse2, A>) return V(_mm_min_ps(_mm_set1_ps(hi), _mm_max_ps(_mm_set1_ps(lo), x)));
#endif
  const V t = xsimd::select(x < V(lo), V(lo), x);
  return xsimd::select(V(hi) < t, V(hi), t);
}
/// hi < x ? hi : x, NaN in x kept: one MINPS on x86 (which returns its second operand when
/// either is NaN); elsewhere a compare and a select (false for NaN). Scalars take the comparison.
template <class T> requires std::is_floating_point_v<T> T min_keep_nan(T hi, T x) { return hi < x ? hi : x; }
template <class A>
[[gnu::always_inline]] inline xsimd::batch<float, A> min_keep_nan(const xsimd::batch<float, A>& hi, const xsimd::batch<float, A>& x) {
  using V = xsimd::batch<float, A>;
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, A>) return V(_mm512_maskz_min_ps(0xFFFF, hi, x));  // (see clamp_keep_nan)
#endif
#if defined(__AVX__)
  if constexpr (std::is_base_of_v<xsimd::avx, A>) return V(_mm256_min_ps(hi, x));
#endif
#if defined(__SSE2__)
  if constexpr (std::is_base_of_v<xsimd::sse2, A>) return V(_mm_min_ps(hi, x));
#endif
  return xsimd::select(hi < x, hi, x);
}
/// r with the sign of a, for r whose sign bit is clear (r >= 0, or a NaN of positive sign): an
/// AND of a's sign bit and an OR, where copysign would also clear r's.
template <class T> requires std::is_floating_point_v<T> T or_sign(T r, T a) { return std::copysign(r, a); }
template <class T, class A>
[[gnu::always_inline]] inline xsimd::batch<T, A> or_sign(const xsimd::batch<T, A>& r, const xsimd::batch<T, A>& a) {
  return r | xsimd::bitofsign(a);
}

/// exp in f32 (and bf16, which computes in f32): e^x = 2^n e^r, n = x log2(e) rounded to
/// nearest, r = x - n ln 2 in two parts (Cody and Waite), e^r by Cephes' expf polynomial (as
/// xsimd's), x first clamped to [-104, 89], past which e^x rounds to 0 or overflows (NaN is
/// kept). 2^n is applied so that the result is rounded once, denormals and overflow included:
/// by VSCALEFPS on AVX-512 (14 vector instructions in all against xsimd::exp's 24), elsewhere
/// as two exact powers of two 2^(n/2) and 2^(n - n/2) built in the exponent bits, the second
/// multiply rounding. xsimd 8's float exp builds one 2^n and so overflows to inf from x = 88.38
/// on, where e^x is still finite. softmax's exp sweep is bound by its arithmetic, so every
/// instruction counts: on x86 the clamp is two instructions (clamp_keep_nan) and with FMA
/// instructions e^r = 1 + r (1 + r P(r)) is two FMAs. Against std::exp in double over every
/// third float: at most 0.89 ulp with FMA instructions (AVX2 and AVX-512; 1.01 on AVX2 with the
/// select clamp and the older e^r), 0.98 on SSE2 (g++ and clang 14). tests/test_cpu_unary.cpp
/// sweeps it. On AVX2 this is the path of the rare vectors that exp_f32_table leaves to it.
template <class A>
[[gnu::always_inline]] inline xsimd::batch<float, A> exp_f32_poly(const xsimd::batch<float, A>& x) {
  using V = xsimd::batch<float, A>;
  using I = xsimd::batch<std::int32_t, A>;
  const V t = clamp_keep_nan(x, -104.0f, 89.0f);
  const V n = xsimd::nearbyint(t * V(1.44269504088896341f));
  V r = fmadd(n, V(-0.693359375f), t);
  r = fmadd(n, V(2.12194440e-4f), r);
  V p(1.9875691500e-4f);
  p = fmadd(p, r, V(1.3981999507e-3f));
  p = fmadd(p, r, V(8.3334519073e-3f));
  p = fmadd(p, r, V(4.1665795894e-2f));
  p = fmadd(p, r, V(1.6666665459e-1f));
  p = fmadd(p, r, V(5.0000001201e-1f));
  // (AVX-512 has FMA instructions of its own: -mavx512f alone does not define __FMA__)
#if defined(__FMA__) || defined(__AVX512F__)
  const V y = fmadd(fmadd(p, r, V(1.0f)), r, V(1.0f));
#else
  const V y = fmadd(p, r * r, r) + V(1.0f);  // without FMA instructions each fmadd rounds twice
#endif
#if defined(__AVX512F__)
  // 14 instructions in all, against 17 with a select clamp and e^r by a multiply, an FMA and an
  // add: float arithmetic issues at about the same rate whichever instructions it uses, so the
  // count is what sets exp's speed.
  if constexpr (std::is_base_of_v<xsimd::avx512f, A>) return V(_mm512_maskz_scalef_ps(0xFFFF, y, n));  // (see clamp_keep_nan)
#endif
  const I k = xsimd::batch_cast<std::int32_t>(n);  // exact: n is integral, |n| <= 150
  const I k1 = k >> 1, k2 = k - k1;                // each within [-75, 75]
  const V s1 = xsimd::bitwise_cast<V>((k1 + I(127)) << 23), s2 = xsimd::bitwise_cast<V>((k2 + I(127)) << 23);
  return y * s1 * s2;
}

#if (defined(__AVX2__) && defined(__FMA__)) || defined(__AVX512F__)
namespace exp_table {
/// 2^(j/8) rounded to float, j = 0 .. 7, as bits less j << 20 (see exp_f32_table), and the
/// rounding's relative error (2^(j/8) - t[j]) / t[j], both from a 40-digit 2^(j/8).
alignas(32) inline constexpr std::uint32_t t[8] = {0x3f800000, 0x3f7b95c2, 0x3f7837f0, 0x3f75fed7,
                                                   0x3f7504f3, 0x3f75672a, 0x3f7744fd, 0x3f7ac0c7};
alignas(32) inline constexpr float d[8] = {0.0f,           -0x1.9c0c22p-27f, 0x1.125002p-25f, -0x1.0a3550p-25f,
                                           0x1.26055cp-26f, 0x1.67a1cap-28f,  -0x1.f9c304p-27f, -0x1.a5217cp-28f};
/// exp_f32_poly, out of line: the vectors with a lane of |x| > 87 (or NaN, inf) that the table path
/// does not cover, rare enough that a call costs nothing measurable.
template <class A>
[[gnu::noinline]] xsimd::batch<float, A> rare(const xsimd::batch<float, A>& x) {
  return exp_f32_poly(x);
}
/// t and d twice over (t2, d2), for AVX-512's VPERMPS, which reads 4 bits of each index.
template <class T>
struct twice {
  alignas(64) T v[16];
};
template <class T, std::size_t N>
constexpr twice<T> repeat(const T (&tab)[N]) {
  static_assert(N == 8);
  twice<T> r{};
  for (int i = 0; i < 16; ++i) r.v[i] = tab[i % 8];
  return r;
}
inline constexpr twice<std::uint32_t> t2 = repeat(t);
inline constexpr twice<float> d2 = repeat(d);
/// In each lane, tab[j] for j the low 3 bits of the lane's bits in z (tab: t or d, with tab2
/// its repeat): VPERMPS. The zero-masking AVX-512 forms with every lane set here and in
/// pow2_8th are the plain instructions (see clamp_keep_nan).
template <class A, class T>
[[gnu::always_inline]] inline xsimd::batch<float, A> lookup(const T (&tab)[8], const twice<T>& tab2,
                                                            const xsimd::batch<float, A>& z) {
  using V = xsimd::batch<float, A>;
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, A>)
    return V(_mm512_maskz_permutexvar_ps(0xFFFF, _mm512_castps_si512(z), _mm512_load_ps(reinterpret_cast<const float*>(tab2.v))));
  else
#endif
  {
    static_assert(std::is_base_of_v<xsimd::avx2, A>, "kiln: exp_table::lookup: AVX2 or AVX-512 batches");
    (void)tab2;
    return V(_mm256_permutevar8x32_ps(_mm256_load_ps(reinterpret_cast<const float*>(tab)), _mm256_castps_si256(z)));
  }
}
/// 2^(n/8) for n in the low bits of z's lanes (see exp_f32_table): t[n & 7]'s bits plus n << 20.
template <class A>
[[gnu::always_inline]] inline xsimd::batch<float, A> pow2_8th(const xsimd::batch<float, A>& z) {
  using V = xsimd::batch<float, A>;
  const V tj = lookup(t, t2, z);
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, A>)
    return V(_mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(tj), _mm512_maskz_slli_epi32(0xFFFF, _mm512_castps_si512(z), 20))));
  else
#endif
    return V(_mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(tj), _mm256_slli_epi32(_mm256_castps_si256(z), 20))));
}
}  // namespace exp_table
#endif

#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)

/// exp in f32 on AVX2 with FMA: e^x = 2^k 2^(j/8) e^r with n = 8k + j = x 8/ln 2 rounded to
/// nearest (one FMA with 1.5 * 2^23, which leaves n in the low bits), r = x - n ln2/8 in two
/// parts, |r| <= ln2/16, so that e^r - 1 needs a degree-4 polynomial (4 FMAs, against 7 for
/// |r| <= ln2/2). 2^(j/8) comes from an 8-entry table by VPERMPS, which reads the low 3 bits
/// of each lane of the FMA's bits, and 2^k is added to its exponent as an integer (n << 20 adds
/// k << 23 and j << 20, which the table entries subtract). The table entry's rounding error
/// is folded into the polynomial's last FMA, and the result is s + s q, one rounding. Valid
/// while s is a normal float: vectors with a lane of |x| > 87 (or NaN, or inf) go to
/// exp_f32_poly instead, one test and a branch. Over every third float: at most 0.74 ulp for
/// x >= 0 and 0.84 for x < 0 (where the worst is exp_f32_poly's), against 0.89. It puts 8
/// instructions on the FMA and multiply pipes where exp_f32_poly puts 12.
template <class A>
[[gnu::always_inline]] inline xsimd::batch<float, A> exp_f32_table(const xsimd::batch<float, A>& x) {
  using V = xsimd::batch<float, A>;
  const __m256 z = fmadd(x, V(11.541560327111707f), V(0x1.8p23f));  // 8 / ln 2; n in the low bits
  const V n = V(z) - V(0x1.8p23f);
  V r = fmadd(n, V(-0x1.62ep-4f), x);  // ln2/8 in two parts: 13 bits (n times it is exact) ...
  r = fmadd(n, V(-0x1.0bfbe8p-18f), r);  // ... and the rest
  const __m256i zi = _mm256_castps_si256(z);
  const __m256 t = _mm256_permutevar8x32_ps(_mm256_load_ps(reinterpret_cast<const float*>(exp_table::t)), zi);
  const __m256 d = _mm256_permutevar8x32_ps(_mm256_load_ps(exp_table::d), zi);
  V p = fmadd(V(1.0f / 24), r, V(1.0f / 6));
  p = fmadd(p, r, V(0.5f));
  p = fmadd(p, r, V(1.0f));
  const V q = fmadd(p, r, V(d));  // e^r - 1, plus t's rounding error
  const V s(_mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(t), _mm256_slli_epi32(zi, 20))));
  const __m256 sign = _mm256_set1_ps(-0.0f);
  if (!_mm256_testz_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, x), _mm256_set1_ps(87.0f), _CMP_NLE_UQ), sign)) [[unlikely]]
    return exp_table::rare(x);
  return fmadd(s, q, s);
}
#endif

#if (defined(__AVX2__) && defined(__FMA__)) || defined(__AVX512F__)
/// tanh in f32 on AVX2 with FMA and on AVX-512 (the same bits on both), without a branch: tanh
/// |a| = N / (N + 2), N = e^(2t) - 1, t = |a| clamped to 9.1 (past 9.02 tanh rounds to 1).
/// e^(2t) = s e^(2r) with exp_f32_table's table: s = 2^(n/8), n = 2t 8/ln2 rounded (at most
/// 210: s stays normal, so no lane needs another path), r = t - n ln2/16 (ln2/16 in one part:
/// its rounding, times n, is damped below), q = e^(2r) - 1 by a degree-4 polynomial with the
/// table entry's rounding error folded in, and N = s q + (s - 1) (exact s - 1 for s in [1, 2],
/// where N is small). An error in N shrinks by 2 / (N + 2) <= 1 in the quotient, and small |a|
/// keep their relative accuracy (n = 0: N = q). The sign is restored at the end (odd, NaN
/// kept). Against std::tanh in double over every float: at most 2.70 ulp (the roundings of N,
/// N + 2 and the quotient, near t = 0.03). xsimd::tanh (1.35 ulp, still the path of SSE2 and
/// NEON) takes a polynomial below 0.625 and an exp and a division above, both for a vector
/// that has both, behind two branches that random inputs mispredict: the gelu_tanh chain's
/// kernel spent most of its time there. tests/test_cpu_unary.cpp sweeps it.
template <class A>
[[gnu::always_inline]] inline xsimd::batch<float, A> tanh_f32_table(const xsimd::batch<float, A>& a) {
  using V = xsimd::batch<float, A>;
  const V t = min_keep_nan(V(9.1f), xsimd::abs(a));
  const V z = fmadd(t, V(23.083120654223414f), V(0x1.8p23f));  // 16 / ln 2; n in the low bits
  const V n = z - V(0x1.8p23f);
  const V r = fmadd(n, V(-0.04332169878499658f), t);  // ln2/16
  const V p = fmadd(fmadd(V(2.0f / 3), r, V(4.0f / 3)), r, V(2.0f));
  // e^(2r) - 1 = 2r + r^2 (2 + 4r/3 + 2r^2/3), plus the relative rounding error of s's table entry
  const V q = fmadd(r * r, p, fmadd(r, V(2.0f), exp_table::lookup(exp_table::d, exp_table::d2, z)));
  const V s = exp_table::pow2_8th(z);
  const V N = fmadd(s, q, s - V(1.0f));
  return or_sign(N / (N + V(2.0f)), a);
}
#endif

template <class A>
[[gnu::always_inline]] inline xsimd::batch<float, A> exp_f32(const xsimd::batch<float, A>& x) {
#if defined(__AVX2__) && defined(__FMA__) && !defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx2, A>) return exp_f32_table(x);
#endif
  return exp_f32_poly(x);
}
/// exp in f64 by xsimd's, given only arguments in [-746, 710] and no NaN: it converts x / ln 2 to
/// an integer, undefined behaviour for infinities, NaN and huge values (the sanitizers stop on it;
/// a masked softmax meets exp(-inf)). xsimd's gives 0 where e^x is below the smallest normal
/// double (x < -708.39) and inf from x = 709.44, where e^x is still finite: there e^x is taken
/// as (e^(x/2))^2 (about 2 ulp), with denormal results and overflow at 709.78 as std::exp has them.
template <class A>
[[gnu::always_inline]] inline xsimd::batch<double, A> exp_f64(const xsimd::batch<double, A>& x) {
  using V = xsimd::batch<double, A>;
  const auto nan = xsimd::isnan(x);  // (not x != x: AVX-512 compares NaN ordered, false)
  const V c = xsimd::select(nan, V(0.0), xsimd::select(x < V(-746.0), V(-746.0), xsimd::select(x > V(710.0), V(710.0), x)));
  V y = xsimd::exp(c);
  const auto edge = (c > V(709.0)) | (c < V(-708.0));
  if (xsimd::any(edge)) [[unlikely]] {
    const V h = xsimd::exp(c * V(0.5));
    y = xsimd::select(edge, h * h, y);
  }
  return xsimd::select(nan, x, y);
}
template <class T, class A> [[gnu::always_inline]] inline xsimd::batch<T, A> exp(const xsimd::batch<T, A>& x) {
  if constexpr (std::is_same_v<T, float>) return exp_f32(x);
  else return exp_f64(x);
}
template <class T, class A> [[gnu::always_inline]] inline xsimd::batch<T, A> log(const xsimd::batch<T, A>& x) { return xsimd::log(x); }
template <class T, class A> [[gnu::always_inline]] inline xsimd::batch<T, A> sqrt(const xsimd::batch<T, A>& x) { return xsimd::sqrt(x); }
template <class T, class A> [[gnu::always_inline]] inline xsimd::batch<T, A> tanh(const xsimd::batch<T, A>& x) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float> && std::is_base_of_v<xsimd::avx512f, A>) return tanh_f32_table(x);
#endif
#if defined(__AVX2__) && defined(__FMA__)
  if constexpr (std::is_same_v<T, float> && std::is_base_of_v<xsimd::avx2, A>) return tanh_f32_table(x);
#endif
  return xsimd::tanh(x);
}
template <class T, class A> [[gnu::always_inline]] inline xsimd::batch<T, A> sin(const xsimd::batch<T, A>& x) { return xsimd::sin(x); }
template <class T, class A> [[gnu::always_inline]] inline xsimd::batch<T, A> cos(const xsimd::batch<T, A>& x) { return xsimd::cos(x); }
template <class T, class A> [[gnu::always_inline]] inline xsimd::batch<T, A> abs(const xsimd::batch<T, A>& x) { return xsimd::abs(x); }
// Rounding to integers. With SSE4.1 and later (AVX, AVX-512, and NEON's) xsimd's are one
// instruction each. Without them (plain SSE2) xsimd 8's go through integer conversions, which
// lose the sign of zero and, for doubles, convert lane by lane values outside the integers'
// range (undefined behaviour, reported by -fsanitize=float-cast-overflow): there kiln rounds in
// floating point, |x| + 2^52 - 2^52 (2^23 for floats) rounding to nearest even for |x| below
// it, x itself above (already an integer, or inf or NaN). Every result has x's sign.
template <class A>
inline constexpr bool native_rounding =
#if defined(__SSE2__)
    !std::is_base_of_v<xsimd::sse2, A> || std::is_base_of_v<xsimd::sse4_1, A>;
#else
    true;
#endif
template <class T, class A> [[gnu::always_inline]] inline xsimd::batch<T, A> rint(const xsimd::batch<T, A>& x) {
  using V = xsimd::batch<T, A>;
  if constexpr (native_rounding<A>) {
    return or_sign(xsimd::nearbyint(x), x);
  } else {
    const V big(std::is_same_v<T, float> ? T(8388608.0f) : T(4503599627370496.0));
    const V ax = xsimd::abs(x);
    return xsimd::select(ax < big, or_sign((ax + big) - big, x), x);
  }
}
template <class T, class A> [[gnu::always_inline]] inline xsimd::batch<T, A> floor(const xsimd::batch<T, A>& x) {
  using V = xsimd::batch<T, A>;
  if constexpr (native_rounding<A>) {
    return or_sign(xsimd::floor(x), x);
  } else {
    const V r = fn::rint(x);
    return xsimd::select(x < r, r - V(1), r);  // (-0.5 -> -0 -> -1; -0 stays -0)
  }
}
template <class T, class A> [[gnu::always_inline]] inline xsimd::batch<T, A> ceil(const xsimd::batch<T, A>& x) {
  using V = xsimd::batch<T, A>;
  if constexpr (native_rounding<A>) {
    return or_sign(xsimd::ceil(x), x);
  } else {
    const V r = fn::rint(x);
    return or_sign(xsimd::select(r < x, r + V(1), r), x);  // (-0.7 -> -1 -> +0, signed back to -0)
  }
}
template <class T, class A> [[gnu::always_inline]] inline xsimd::batch<T, A> trunc(const xsimd::batch<T, A>& x) {
  if constexpr (native_rounding<A>) return or_sign(xsimd::trunc(x), x);
  else return xsimd::select(x < xsimd::batch<T, A>(T(0)), fn::ceil(x), fn::floor(x));
}
/// The C library's function lane by lane, for functions rare in models where an exact result
/// (fmod; xsimd's is a - trunc(a / b) b) or the C library's accuracy (the inverse trigonometry,
/// as the eager backend's) is worth more than vector speed.
template <class F, class T, class A>
[[gnu::always_inline]] inline xsimd::batch<T, A> lanewise(F f, const xsimd::batch<T, A>& x) {
  alignas(64) T t[xsimd::batch<T, A>::size];
  x.store_aligned(t);
  for (T& v : t) v = f(v);
  return xsimd::batch<T, A>::load_aligned(t);
}
template <class F, class T, class A>
[[gnu::always_inline]] inline xsimd::batch<T, A> lanewise(F f, const xsimd::batch<T, A>& a, const xsimd::batch<T, A>& b) {
  alignas(64) T t[xsimd::batch<T, A>::size], u[xsimd::batch<T, A>::size];
  a.store_aligned(t);
  b.store_aligned(u);
  for (std::size_t i = 0; i < xsimd::batch<T, A>::size; ++i) t[i] = f(t[i], u[i]);
  return xsimd::batch<T, A>::load_aligned(t);
}
template <class T, class A> inline xsimd::batch<T, A> atan(const xsimd::batch<T, A>& x) {
  return lanewise([](T v) { return std::atan(v); }, x);
}
template <class T, class A> inline xsimd::batch<T, A> asin(const xsimd::batch<T, A>& x) {
  return lanewise([](T v) { return std::asin(v); }, x);
}
template <class T, class A> inline xsimd::batch<T, A> acos(const xsimd::batch<T, A>& x) {
  return lanewise([](T v) { return std::acos(v); }, x);
}
template <class T, class A> inline xsimd::batch<T, A> atan2(const xsimd::batch<T, A>& a, const xsimd::batch<T, A>& b) {
  return lanewise([](T y, T x) { return std::atan2(y, x); }, a, b);
}
template <class T, class A> inline xsimd::batch<T, A> fmod(const xsimd::batch<T, A>& a, const xsimd::batch<T, A>& b) {
  return lanewise([](T y, T x) { return std::fmod(y, x); }, a, b);
}
/// a^b in f64 with C's special cases (x^0 = 1 for every x, NaN included; 1^y = 1; (-1)^(+-inf) =
/// 1; the sign of a negative base (-0 and -inf included) to an odd integer power; NaN for a
/// finite negative base to a finite non-integer power; 0 and inf from the limits of e^(b log|a|)).
/// The value itself is e^(b log|a|), whose error grows with |b log|a||: the f32 pow computes it
/// in f64 (within an ulp after rounding to float); the f64 pow takes std::pow lane by lane.
template <class A>
[[gnu::always_inline]] inline xsimd::batch<double, A> pow_f64_by_log(const xsimd::batch<double, A>& a,
                                                                      const xsimd::batch<double, A>& b) {
  using V = xsimd::batch<double, A>;
  const V inf(std::numeric_limits<double>::infinity());
  const V r = exp_f64(b * xsimd::log(xsimd::abs(a)));
  // whether |b| and |b| / 2 are integers, by rounding through 2^52 (xsimd's f64 floor converts to
  // an integer on SSE2, undefined for infinities)
  const V big(4503599627370496.0);  // 2^52: every double from here on is an integer
  const auto whole = [&](const V& x) { return (x >= big) | (((x + big) - big) == x); };
  const V mb = xsimd::abs(b);
  const auto finite_b = mb < inf;
  const auto integer = finite_b & whole(mb);
  const auto odd = integer & !whole(mb * V(0.5));
  const auto negative_base = xsimd::copysign(V(1.0), a) < V(0.0);
  const V signed_r = xsimd::select(odd & negative_base, xsimd::copysign(r, V(-1.0)), r);  // (-x is 0 - x on some targets)
  const auto no_real_value = (a < V(0.0)) & (xsimd::abs(a) < inf) & finite_b & !integer;
  const auto one = (b == V(0.0)) | (a == V(1.0)) | ((a == V(-1.0)) & !finite_b & (b == b));
  return xsimd::select(one, V(1.0), xsimd::select(no_real_value, V(std::numeric_limits<double>::quiet_NaN()), signed_r));
}
template <class T, class A>
[[gnu::always_inline]] inline xsimd::batch<T, A> pow(const xsimd::batch<T, A>& a, const xsimd::batch<T, A>& b) {
  using V = xsimd::batch<T, A>;
  constexpr std::size_t n = V::size;
  alignas(V::arch_type::alignment()) T pa[n], pb[n], out[n];
  a.store_aligned(pa);
  b.store_aligned(pb);
  if constexpr (std::is_same_v<T, float>) {
    using D = xsimd::batch<double, A>;
    for (std::size_t h = 0; h < n; h += D::size)
      pow_f64_by_log(D::load_unaligned(pa + h), D::load_unaligned(pb + h)).store_unaligned(out + h);
  } else {
    for (std::size_t i = 0; i < n; ++i) out[i] = std::pow(pa[i], pb[i]);
  }
  return V::load_aligned(out);
}
template <class T, class A>
[[gnu::always_inline]] inline xsimd::batch<T, A> fma(const xsimd::batch<T, A>& a, const xsimd::batch<T, A>& b, const xsimd::batch<T, A>& c) {
  return fmadd(a, b, c);
}
template <class T, class A>
[[gnu::always_inline]] inline xsimd::batch<T, A> copysign(const xsimd::batch<T, A>& a, const xsimd::batch<T, A>& b) { return xsimd::copysign(a, b); }
template <class T, class A> [[gnu::always_inline]] inline xsimd::batch_bool<T, A> isnan(const xsimd::batch<T, A>& x) { return xsimd::isnan(x); }
template <class T, class A>
[[gnu::always_inline]] inline xsimd::batch<T, A> select(const xsimd::batch_bool<T, A>& c, const xsimd::batch<T, A>& a, const xsimd::batch<T, A>& b) {
  return xsimd::select(c, a, b);
}

/// erf in f32, one body for batches and scalars (on AVX-512 fn::erf takes erf_f32_table instead,
/// below, for both): erf(|a|) = t P(t^2) / Q(t^2), P and Q of degree
/// 5, fitted for kiln (minimax relative error 1.9e-8 over [0, 3.92]; iteratively reweighted
/// least squares). |a| is clamped to 3.92, beyond which erf rounds to 1 in f32, and the result
/// to 1, which rounding could pass; the sign is restored at the end, so erf is exactly odd.
/// Measured over every float against std::erf in double: at most 5.95 ulp with FMA instructions,
/// 7.17 without (the rounding of P and Q, near erf = 1; xsimd::erf: 2.4, Eigen's: 7.4), and
/// cheaper than xsimd::erf (10 FMAs and a division, no exp). NaN stays NaN, erf(+-inf) =
/// +-1. tests/test_cpu_unary.cpp sweeps it (every float with --no-skip). Both clamps are one
/// MINPS on x86 and the sign an AND and an OR: fewer instructions than compare-and-blend pairs
/// and a full copysign, with bit for bit the same results over every float.
template <class V>
[[gnu::always_inline]] inline V erf_f32(const V& a) {
  const V lim(3.92f), one(1.0f);
  const V t = fn::min_keep_nan(lim, fn::abs(a));
  const V s = t * t;
  V p(2.049933825e-06f), q(3.808893927e-05f);
  p = fn::fma(p, s, V(2.848601757e-04f)), q = fn::fma(q, s, V(1.162426987e-03f));
  p = fn::fma(p, s, V(3.765284629e-03f)), q = fn::fma(q, s, V(1.496855776e-02f));
  p = fn::fma(p, s, V(5.274763304e-02f)), q = fn::fma(q, s, V(1.141064761e-01f));
  p = fn::fma(p, s, V(1.904008465e-01f)), q = fn::fma(q, s, V(5.020711002e-01f));
  p = fn::fma(p, s, V(1.128379146e+00f)), q = fn::fma(q, s, one);
  const V r = fn::min_keep_nan(one, t * p / q);  // sign bit clear, NaN included: t = |a|
  return fn::or_sign(r, a);
}

#if defined(__AVX512F__)
/// The table of erf_f32_table: erf on 16 intervals of [0, 3.92] centred on i / scale, a degree-5
/// polynomial in v = z scale - i on each (c[j][i] the coefficient of v^j; interval 0 odd).
/// Printed by tools/fit_erf_table.cpp, which says how it is fitted.
namespace erf_table {
  inline constexpr float scale = 3.95408154f, clamp = 3.91999984f;
  alignas(64) inline constexpr float c[6][16] = {
      {0.0f, 0.2794016f, 0.525587618f, 0.716718793f, 0.847465634f, 0.926271737f, 0.968123436f, 0.98770678f, 0.995780587f, 0.998713315f, 0.999651909f, 0.999916553f, 0.999982297f, 0.999996662f, 0.999999464f, 0.99999994f},
      {0.285370737f, 0.267689854f, 0.220952779f, 0.160476699f, 0.102558002f, 0.0576729402f, 0.0285377465f, 0.0124254534f, 0.00476047024f, 0.00160484272f, 0.000476058281f, 0.000124260419f, 2.85397782e-05f, 5.76784305e-06f, 1.02570255e-06f, 1.60499837e-07f},
      {0.0f, -0.0171210822f, -0.0282638408f, -0.0307920538f, -0.0262385085f, -0.0184440166f, -0.0109518245f, -0.00556320278f, -0.0024358388f, -0.000923784799f, -0.000304462446f, -8.74107427e-05f, -2.18988735e-05f, -4.79379014e-06f, -9.17871432e-07f, -1.53844624e-07f},
      {-0.00608408311f, -0.00497705536f, -0.00230034883f, 0.000517543696f, 0.0022886619f, 0.00270262989f, 0.00219345908f, 0.00139558641f, 0.000729427848f, 0.000320308289f, 0.000119682431f, 3.83550359e-05f, 1.0598992e-05f, 2.53512189e-06f, 5.26300653e-07f, 9.50358725e-08f},
      {0.0f, 0.0005202053f, 0.000744854624f, 0.000604312285f, 0.000267196971f, -3.68162982e-05f, -0.000185555662f, -0.000193009808f, -0.000134686692f, -7.27887527e-05f, -3.20461004e-05f, -1.17780555e-05f, -3.66451945e-06f, -9.73735041e-07f, -2.22306539e-07f, -4.37943122e-08f},
      {0.000116243369f, 8.16950487e-05f, 5.92156357e-06f, -5.60478511e-05f, -7.08377556e-05f, -4.68042017e-05f, -1.34474813e-05f, 7.7835648e-06f, 1.34931288e-05f, 1.05345589e-05f, 5.84961208e-06f, 2.55212376e-06f, 9.10863434e-07f, 2.71576624e-07f, 6.84979469e-08f, 1.47363481e-08f}};
}  // namespace erf_table

/// erf in f32 on AVX-512, without a division: |a| clamped to just below 3.92 (where erf rounds
/// to 1), scaled to n + v with n = round(|a| scale) (an FMA with 1.5 * 2^23, which leaves n in
/// the low bits) and |v| <= 1/2, then the polynomial of interval n, its coefficients picked
/// from erf_table by VPERMPS (which reads the low 4 bits of each lane): an FMA, a subtract, an
/// FMA, six permutes and five FMAs, against erf_f32's ten FMAs, two multiplies and a
/// division. The two FMAs that find n and v round to nearest whatever the rounding mode (an
/// upward mode would otherwise make n 16 near the clamp, which the permute reads as 0). The
/// sign is restored at the end (odd, as erf_f32), NaN stays NaN, erf(+-inf) = +-1. Against
/// std::erf in double over every float: at most 2.04 ulp (erf_f32: 5.95). On AVX2 the same
/// table needs two permutes and a blend a coefficient, which makes it slower than erf_f32, so
/// AVX2 and the rest keep erf_f32. Scalars take this body too on AVX-512 (a one-value batch),
/// so that a kernel's vector and scalar modes agree bit for bit.
template <class A>
[[gnu::always_inline]] inline xsimd::batch<float, A> erf_f32_table(const xsimd::batch<float, A>& a) {
  using V = xsimd::batch<float, A>;
  static_assert(static_cast<double>(erf_table::clamp) * static_cast<double>(erf_table::scale) < 15.5,
                "kiln: erf_table: the clamp must round to an interval below 16 (exact in double)");
  constexpr int nearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const V magic(0x1.8p23f), scale(erf_table::scale);
  const V t = min_keep_nan(V(erf_table::clamp), fn::abs(a));
  const V k(_mm512_fmadd_round_ps(t, scale, magic, nearest));  // n = round(t scale) in its low bits
  const V v(_mm512_fmadd_round_ps(t, scale, magic - k, nearest));  // t scale - n (magic - k = -n exactly)
  const __m512i n = _mm512_castps_si512(k);
  // (the zero-masking form with every lane set is the plain VPERMPS: see clamp_keep_nan)
  const auto c = [&](int j) { return V(_mm512_maskz_permutexvar_ps(0xFFFF, n, _mm512_load_ps(erf_table::c[j]))); };
  V r = fmadd(c(5), v, c(4));
  r = fmadd(r, v, c(3));
  r = fmadd(r, v, c(2));
  r = fmadd(r, v, c(1));
  r = fmadd(r, v, c(0));
  return or_sign(min_keep_nan(V(1.0f), r), a);  // r >= 0 (or NaN of positive sign)
}
#endif

template <class T> requires std::is_floating_point_v<T> T erf(T x) {
  if constexpr (std::is_same_v<T, float>) {
#if defined(__AVX512F__)
    return erf_f32_table(xsimd::batch<float, xsimd::avx512f>(x)).get(0);
#else
    return erf_f32(x);
#endif
  } else {
    return std::erf(x);
  }
}
template <class T, class A>
[[gnu::always_inline]] inline xsimd::batch<T, A> erf(const xsimd::batch<T, A>& x) {
  if constexpr (std::is_same_v<T, double>) {
    // xsimd's double erf is off by up to 7e-15 relative (near 2.2), which gelu's 1 + erf
    // magnifies past 1e-13 for x < -3; the C library's is within an ulp
    alignas(64) double t[xsimd::batch<T, A>::size];
    x.store_aligned(t);
    for (double& v : t) v = std::erf(v);
    return xsimd::batch<T, A>::load_aligned(t);
  } else {
#if defined(__AVX512F__)
    if constexpr (std::is_base_of_v<xsimd::avx512f, A>) return erf_f32_table(x);
#endif
    return erf_f32(x);
  }
}
}  // namespace fn

/// bf16 rounding of an f32 value (nearest even, NaN kept quiet): what storing it as bf16 and
/// loading it back gives. Bit for bit the rule of kiln::bfloat16.
inline float round_bf16(float x) { return static_cast<float>(bfloat16(x)); }
template <class A>
xsimd::batch<float, A> round_bf16(const xsimd::batch<float, A>& x) {
  using U = xsimd::batch<std::uint32_t, A>;
  using F = xsimd::batch<float, A>;
  const U u = xsimd::bitwise_cast<U>(x);
  const U hi(0xffff0000u);
  const U rounded = (u + U(0x7fffu) + ((u >> 16) & U(1u))) & hi;
  const U quiet = (u | U(0x00400000u)) & hi;
  return xsimd::select(xsimd::isnan(x), xsimd::bitwise_cast<F>(quiet), xsimd::bitwise_cast<F>(rounded));
}

// ---- op bodies ------------------------------------------------------------------------------

/// The vector math library as ops/bodies.hpp asks for it: the bodies of the ops are shared with
/// every backend; this backend supplies fn:: (xsimd and kiln's own functions, scalars and batches).
struct vmath {
  template <class V> [[gnu::always_inline]] static V exp(const V& x) { return fn::exp(x); }
  template <class V> [[gnu::always_inline]] static V log(const V& x) { return fn::log(x); }
  template <class V> [[gnu::always_inline]] static V sqrt(const V& x) { return fn::sqrt(x); }
  template <class V> [[gnu::always_inline]] static V tanh(const V& x) { return fn::tanh(x); }
  template <class V> [[gnu::always_inline]] static V sin(const V& x) { return fn::sin(x); }
  template <class V> [[gnu::always_inline]] static V cos(const V& x) { return fn::cos(x); }
  template <class V> [[gnu::always_inline]] static V erf(const V& x) { return fn::erf(x); }
  template <class V> [[gnu::always_inline]] static V abs(const V& x) { return fn::abs(x); }
  template <class V> [[gnu::always_inline]] static V pow(const V& a, const V& b) { return fn::pow(a, b); }
  template <class V> [[gnu::always_inline]] static V floor(const V& x) { return fn::floor(x); }
  template <class V> [[gnu::always_inline]] static V ceil(const V& x) { return fn::ceil(x); }
  template <class V> [[gnu::always_inline]] static V rint(const V& x) { return fn::rint(x); }
  template <class V> [[gnu::always_inline]] static V trunc(const V& x) { return fn::trunc(x); }
  template <class V> [[gnu::always_inline]] static V atan(const V& x) { return fn::atan(x); }
  template <class V> [[gnu::always_inline]] static V asin(const V& x) { return fn::asin(x); }
  template <class V> [[gnu::always_inline]] static V acos(const V& x) { return fn::acos(x); }
  template <class V> [[gnu::always_inline]] static V atan2(const V& a, const V& b) { return fn::atan2(a, b); }
  template <class V> [[gnu::always_inline]] static V fmod(const V& a, const V& b) { return fn::fmod(a, b); }
  template <class V> [[gnu::always_inline]] static auto isnan(const V& x) { return fn::isnan(x); }
  template <class C, class V> [[gnu::always_inline]] static V select(const C& c, const V& a, const V& b) {
    return fn::select(c, a, b);
  }
};

using ops::integer_pow;
using ops::wrapping;

/// A unary op's body (ops/bodies.hpp) on a float batch or a scalar of the node's compute type.
template <op O, class V>
[[gnu::always_inline]] inline V unary(const V& x) {
  return ops::unary<O, vmath>(x);
}

/// A binary arithmetic op's body (not a comparison).
template <op O, class V>
[[gnu::always_inline]] inline V binary(const V& a, const V& b) {
  return ops::binary<O, vmath>(a, b);
}

template <op O, class V>
[[gnu::always_inline]] inline auto compare(const V& a, const V& b) {
  return ops::compare<O>(a, b);
}

/// Converts a value of dtype From to dtype To in mode M, as any_tensor::convert does for a
/// store: floats to integers saturate (NaN to 0), anything to bool is `!= 0`, to bf16 rounds.
template <class M, dtype From, dtype To>
value_t<M, To> cast(const value_t<M, From>& x) {
  if constexpr (From == To) {
    return x;
  } else if constexpr (std::is_same_v<M, scalar>) {
    return static_cast<compute_t<To>>(any_tensor::convert<To>(x));
  } else {
    using real = typename M::real;
    if constexpr (To == dtype::boolean) return ~(x == real(0));  // NaN is true (see compare)
    else if constexpr (From == dtype::boolean) return xsimd::select(x, real(1), real(0));
    else if constexpr (To == dtype::bf16) return round_bf16(x);
    else return x;  // bf16 -> f32: a bf16 value is exactly a float
  }
}

/// Rounds a computed value to its dtype's precision where it is held in a wider type (bf16).
template <dtype D, class V>
V rounded(const V& v) {
  if constexpr (D == dtype::bf16) return round_bf16(v);
  else return v;
}

// ---- memory ---------------------------------------------------------------------------------

/// load's general case, out of line: lanes one by one (strided, partial or converted).
template <class M, dtype D>
[[gnu::noinline]] value_t<M, D> load_lanes(const std::byte* p, index_t stride, int count) {
  using S = storage_t<D>;
  constexpr int W = M::width;
  using C = typename M::elem;
  if constexpr (D == dtype::boolean) {
    bool b[W]{};
    for (int l = 0; l < count; ++l) b[l] = *reinterpret_cast<const bool*>(p + l * stride);
    return xsimd::batch_bool<C>::load_unaligned(b);
  } else {
    alignas(64) C t[W]{};
    for (int l = 0; l < count; ++l) t[l] = static_cast<C>(*reinterpret_cast<const S*>(p + l * stride));
    return M::real::load_aligned(t);
  }
}

/// Loads `count` (<= width) elements of dtype D from p with a stride of `stride` bytes; lanes
/// past count are zero. A contiguous full load is one vector load; stride 0 broadcasts. The
/// common cases are inlined into the kernel's loop, the rest is a call.
template <class M, dtype D>
[[gnu::always_inline]] inline value_t<M, D> load(const std::byte* p, index_t stride, int count) {
  using S = storage_t<D>;
  if constexpr (std::is_same_v<M, scalar>) {
    (void)stride;
    (void)count;
    S s;
    std::memcpy(&s, p, sizeof(S));
    return static_cast<compute_t<D>>(s);
  } else {
    using C = typename M::elem;
    if constexpr (D != dtype::boolean) {
      if (stride == 0) return typename M::real(static_cast<C>(*reinterpret_cast<const S*>(p)));
      if constexpr (std::is_same_v<S, C>)
        if (count == M::width && stride == static_cast<index_t>(sizeof(S)))
          return M::real::load_unaligned(reinterpret_cast<const C*>(p));
    }
    return load_lanes<M, D>(p, stride, count);
  }
}

/// store's general case, out of line: lanes one by one.
template <class M, dtype D>
[[gnu::noinline]] void store_lanes(std::byte* p, index_t stride, int count, const value_t<M, D>& v) {
  using S = storage_t<D>;
  constexpr int W = M::width;
  using C = typename M::elem;
  if (stride == 0) count = 1;
  if constexpr (D == dtype::boolean) {
    bool b[W];
    v.store_unaligned(b);
    for (int l = 0; l < count; ++l) *reinterpret_cast<bool*>(p + l * stride) = b[l];
  } else {
    alignas(64) C t[W];
    v.store_aligned(t);
    for (int l = 0; l < count; ++l) *reinterpret_cast<S*>(p + l * stride) = S(t[l]);
  }
}

/// Stores the first `count` lanes of v (dtype D) at p with a stride of `stride` bytes; a stride
/// of 0 stores lane 0 once (a value that is the same for every lane). A contiguous full store
/// is one vector store, inlined; the rest is a call.
template <class M, dtype D>
[[gnu::always_inline]] inline void store(std::byte* p, index_t stride, int count, const value_t<M, D>& v) {
  using S = storage_t<D>;
  if constexpr (std::is_same_v<M, scalar>) {
    (void)stride;
    (void)count;
    const S s = S(v);
    std::memcpy(p, &s, sizeof(S));
  } else {
    using C = typename M::elem;
    if constexpr (D != dtype::boolean && std::is_same_v<S, C>) {
      if (count == M::width && stride == static_cast<index_t>(sizeof(S))) {
        v.store_unaligned(reinterpret_cast<C*>(p));
        return;
      }
    }
    // a copy, so that the call takes the address of a temporary: the kernels' register
    // arrays, which v is an element of, do not escape and stay in registers
    const value_t<M, D> copy = v;
    store_lanes<M, D>(p, stride, count, copy);
  }
}

/// A mask of the first `count` lanes.
template <class M>
auto first_lanes(int count) {
  using C = typename M::elem;
  alignas(64) C idx[M::width];
  for (int l = 0; l < M::width; ++l) idx[l] = static_cast<C>(l);
  using real = typename M::real;
  return real::load_aligned(idx) < real(static_cast<C>(count));
}

/// The lanes of a float vector as two double vectors, the low half and the high half: one
/// conversion instruction each where the instruction set has one (a float sum accumulates in
/// double lanes; through memory, lane by lane, this cost softmax a third of its time).
template <class A>
void widen(const xsimd::batch<float, A>& v, xsimd::batch<double, A>& lo, xsimd::batch<double, A>& hi) {
  static_assert(2 * xsimd::batch<double, A>::size == xsimd::batch<float, A>::size);
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, A>) {
    const __m512 x = v;
    lo = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
    hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
    return;
  }
#endif
#if defined(__AVX__)
  if constexpr (std::is_base_of_v<xsimd::avx, A>) {
    const __m256 x = v;
    lo = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
    hi = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
    return;
  }
#endif
#if defined(__SSE2__)
  if constexpr (std::is_base_of_v<xsimd::sse2, A>) {
    const __m128 x = v;
    lo = _mm_cvtps_pd(x);
    hi = _mm_cvtps_pd(_mm_movehl_ps(x, x));
    return;
  }
#endif
#if defined(__aarch64__)
  if constexpr (std::is_base_of_v<xsimd::neon64, A>) {
    const float32x4_t x = v;
    lo = vcvt_f64_f32(vget_low_f32(x));
    hi = vcvt_high_f64_f32(x);
    return;
  }
#endif
  constexpr int H = static_cast<int>(xsimd::batch<double, A>::size);
  alignas(64) float t[2 * H];
  v.store_aligned(t);
  alignas(64) double l[H], h[H];
  for (int i = 0; i < H; ++i) {
    l[i] = t[i];
    h[i] = t[H + i];
  }
  lo = xsimd::batch<double, A>::load_aligned(l);
  hi = xsimd::batch<double, A>::load_aligned(h);
}

/// Whether store_stream writes around the caches on this instruction set (x86: the MOVNT
/// instructions), rather than being an ordinary store.
inline constexpr bool has_stream_stores =
#if defined(__SSE2__)
    true;
#else
    false;
#endif

/// Stores v at p, which must be aligned to the vector's size, with a non-temporal hint where
/// the instruction set has one: the line goes to memory through the write-combining buffers
/// without first being read into the cache (a store that misses reads its line: a third of a
/// pointwise kernel's memory traffic when it reads two operands). Such stores are weakly
/// ordered: a thread that used them calls stream_fence() before others read what it wrote.
template <class C, class A>
[[gnu::always_inline]] inline void store_stream(C* p, const xsimd::batch<C, A>& v) {
  static_assert(std::is_same_v<C, float> || std::is_same_v<C, double>);
  constexpr bool f = std::is_same_v<C, float>;
#if defined(__AVX512F__)
  if constexpr (std::is_base_of_v<xsimd::avx512f, A>) {
    if constexpr (f) _mm512_stream_ps(p, v);
    else _mm512_stream_pd(p, v);
    return;
  }
#endif
#if defined(__AVX__)
  if constexpr (std::is_base_of_v<xsimd::avx, A>) {
    if constexpr (f) _mm256_stream_ps(p, v);
    else _mm256_stream_pd(p, v);
    return;
  }
#endif
#if defined(__SSE2__)
  if constexpr (std::is_base_of_v<xsimd::sse2, A>) {
    if constexpr (f) _mm_stream_ps(p, v);
    else _mm_stream_pd(p, v);
    return;
  }
#endif
  (void)f;
  v.store_aligned(p);
}

/// Orders this thread's non-temporal stores before its later stores (x86 SFENCE; nothing
/// elsewhere, where store_stream is an ordinary store).
inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

}  // namespace kiln::cpu::simd
