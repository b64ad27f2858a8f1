// kiln/backend/cpu/attention.hpp: fused attention (graph/ops.hpp's attention and
// attention_grad), FlashAttention-2's algorithm (Dao, 2023) on the CPU.
//
// Forward, for each block of bq queries of one head (the threads' unit of work): for each block
// of bk keys, the scores S = Q K^T of the block (a tile of the GEMM's micro-kernel), masked;
// the online softmax keeps each row's running max m and sum l, rescaling the output
// accumulator O when m grows; O += P V. At the end O / l and the row's logsumexp m + log l,
// which the backward reads instead of the scores. Only the bq x bk tile of scores exists, in
// L1; causal blocks above the diagonal are skipped, and a block on it reads keys only up to
// its last query (tile_keys).
// Backward, for each k/v head of one batch element (so that dk and dv, summed over the q heads
// of its group, and dq, summed over key blocks, have one writer): for each key block, for each
// query block of each q head of the group, recompute S and P = exp(S - lse), then
// dV += P^T dO, dP = dO V^T, dS = P (dP - D) with D = rowsum(dO o) - g_lse, dK += dS^T Q,
// dQ += dS K.
// K and V are packed once per head (K^T and V in rows padded to whole vectors), so that every
// product reads its B operand by rows, as the micro-kernel does (P^T and dS^T are read by
// columns of P and dS: tile_product with ByRows false); q, k, v and the mask may be any
// strided views (permuted heads, a broadcast mask).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "../../core/shape_rules.hpp"
#include "../../graph/graph.hpp"
#include "gemm.hpp"
#include "parallel.hpp"
#include "runtime.hpp"
#include "simd.hpp"

namespace kiln::cpu::detail {

namespace attn {

// query and key rows of a tile (bk: whole vectors); 128 keys a tile halve the per-row work of the
// online softmax (max, rescale) against 64, 64 queries keep causal tiles near the diagonal small
inline constexpr index_t bq = 64, bk = 128;

inline index_t round_up(index_t n, index_t m) { return (n + m - 1) / m * m; }

/// R rows times nv < NV vectors of columns (tile_product's last columns).
template <class T, class Arch, int R, bool ByRows = true, int V = 1>
void product_tail(int nv, index_t k, const T* a, index_t lda, const T* b, index_t ldb, T* c, index_t ldc, bool first) {
  if constexpr (V < gemm_config<T, Arch>::nv) {
    if (nv == V) micro_kernel_simd_loop<T, R, V, Arch, ByRows>(k, a, lda, b, ldb, c, ldc, first);
    else product_tail<T, Arch, R, ByRows, V + 1>(nv, k, a, lda, b, ldb, c, ldc, first);
  }
}

/// C[m x n] = (first) or += A[m x k] B[k x n], B by rows (stride ldb), n a multiple of the
/// vector width, A by rows (A(i, p) = a[i lda + p]) or, with ByRows false, by columns
/// (a[p lda + i]: dV += P^T dO and dK += dS^T Q read P and dS without a transposed copy): the
/// GEMM's micro-kernel on A in place, R rows at a time.
template <class T, class Arch, bool ByRows, int R = gemm_config<T, Arch>::mr>
void tile_product(index_t m, index_t n, index_t k, const T* a, index_t lda, const T* b, index_t ldb, T* c, index_t ldc,
                  bool first) {
  using cfg = gemm_config<T, Arch>;
  [[maybe_unused]] const auto row = [&](index_t i) { return ByRows ? a + i * lda : a + i; };  // A's row i
  if constexpr (!cfg::vectorised) {
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) {
        T acc = 0;
        for (index_t p = 0; p < k; ++p) acc += (ByRows ? a[i * lda + p] : a[p * lda + i]) * b[p * ldb + j];
        c[i * ldc + j] = first ? acc : c[i * ldc + j] + acc;
      }
  } else {
    constexpr index_t wide = cfg::nv * cfg::width;
    index_t i = 0;
    for (; i + R <= m; i += R) {
      index_t j = 0;
      for (; j + wide <= n; j += wide)
        micro_kernel_simd_loop<T, R, cfg::nv, Arch, ByRows>(k, row(i), lda, b + j, ldb, c + i * ldc + j, ldc, first);
      // the rest (a head of d = 32 is all rest) as one tile as wide as it is: one broadcast of A
      // per row feeds each of its vectors, where a vector at a time took a broadcast per FMA
      if (j < n)
        product_tail<T, Arch, R, ByRows>(static_cast<int>((n - j) / cfg::width), k, row(i), lda, b + j, ldb,
                                         c + i * ldc + j, ldc, first);
    }
    if constexpr (R > 1)
      if (i < m) tile_product<T, Arch, ByRows, R - 1>(m - i, n, k, row(i), lda, b, ldb, c + i * ldc, ldc, first);
  }
}

/// One operand [..., h, t, c] through its strides: the leading (batch) axes, then h, t, c.
struct operand {
  const std::byte* p = nullptr;
  dims lead{}, lead_stride{};
  index_t sh = 0, st = 0, sc = 0;
  operand(const view& v, int r, const dims& shape) : p(v.p) {
    const int nl = r >= 3 ? r - 3 : 0;
    lead.rank = lead_stride.rank = nl;
    for (int i = 0; i < nl; ++i) {
      lead.e[i] = shape.e[i];
      lead_stride.e[i] = v.strides.e[i];
    }
    sh = r >= 3 ? v.strides.e[r - 3] : 0;
    st = v.strides.e[r - 2];
    sc = v.strides.e[r - 1];
  }
  /// The element offset of [b (row-major over the leading axes), h, 0, 0].
  index_t base(index_t b, index_t h) const {
    index_t off = h * sh;
    for (int i = lead.rank - 1; i >= 0; --i) {
      off += (b % lead.e[i]) * lead_stride.e[i];
      b /= lead.e[i];
    }
    return off;
  }
  template <class T> T at(index_t off) const { return reinterpret_cast<const T*>(p)[off]; }
  /// Writes n elements along the last axis from element offset off (the operand is the output).
  template <class T> void put(index_t off, index_t n, const T* src) const {
    T* d = reinterpret_cast<T*>(const_cast<std::byte*>(p)) + off;
    if (sc == 1) std::memcpy(d, src, static_cast<std::size_t>(n) * sizeof(T));
    else
      for (index_t c = 0; c < n; ++c) d[c * sc] = src[c];
  }
  /// n elements along the last axis from element offset off, into dst.
  template <class T> void row(index_t off, index_t n, T* dst) const {
    if (sc == 1) std::memcpy(dst, reinterpret_cast<const T*>(p) + off, static_cast<std::size_t>(n) * sizeof(T));
    else
      for (index_t c = 0; c < n; ++c) dst[c] = at<T>(off + c * sc);
  }
};

/// The mask broadcast to the scores [..., h, tq, tk]: none (a rank-0 true), bool, or added.
struct mask_ref {
  operand m;
  bool none, is_bool;
  mask_ref(const view& v, int r, const dims& scores)
      : m(broadcast_view(v, scores), r, scores),
        none(v.shape.rank == 0 && v.dt == dtype::boolean && *reinterpret_cast<const bool*>(v.p)),
        is_bool(v.dt == dtype::boolean) {}
  static view broadcast_view(const view& v, const dims& scores) {
    view b = v;
    b.shape = scores;
    b.strides = broadcast_strides(v, scores);
    return b;
  }
};

/// Row r of a score tile for query i, keys j0 .. j0 + n (n <= bk): the scores times `pre`
/// (the scale, where it cannot wait for the exp: score_factors), masked entries (the mask,
/// causal keys after i, padding after tk) set to -inf, an additive mask added.
template <class T>
void mask_row(T* s, const mask_ref& mk, index_t mbase, index_t i, index_t j0, index_t n, index_t tk, bool causal,
              T pre) {
  index_t valid = std::min(n, tk - j0);
  if (causal) valid = std::min(valid, std::max<index_t>(0, i - j0 + 1));
  constexpr T minus_inf = -std::numeric_limits<T>::infinity();
  if (pre != T(1))
    for (index_t j = 0; j < valid; ++j) s[j] *= pre;
  if (!mk.none) {
    const index_t off = mbase + i * mk.m.st;
    for (index_t j = 0; j < valid; ++j) {
      const index_t o = off + (j0 + j) * mk.m.sc;
      if (mk.is_bool) {
        if (!mk.m.at<bool>(o)) s[j] = minus_inf;
      } else {
        s[j] += mk.m.at<T>(o);
      }
    }
  }
  for (index_t j = valid; j < n; ++j) s[j] = minus_inf;
}

/// max of s[0 .. n), n a multiple of the vector width.
template <class T, class Arch>
T row_max(const T* s, index_t n) {
  using cfg = gemm_config<T, Arch>;
  T m = -std::numeric_limits<T>::infinity();
  if constexpr (cfg::vectorised) {
    using V = xsimd::batch<T, Arch>;
    V acc(m);
    for (index_t j = 0; j < n; j += cfg::width) acc = xsimd::max(acc, V::load_unaligned(s + j));
#if defined(__AVX512F__)
    // a shuffle tree: a row's max is taken for every row of every score tile
    if constexpr (std::is_base_of_v<xsimd::avx512f, Arch>) {
      if constexpr (std::is_same_v<T, float>) return _mm512_reduce_max_ps(acc);
      else return _mm512_reduce_max_pd(acc);
    }
#endif
    T lanes[cfg::width];  // (xsimd 8 has no horizontal max)
    acc.store_unaligned(lanes);
    for (T x : lanes) m = std::max(m, x);
  } else {
    for (index_t j = 0; j < n; ++j) m = std::max(m, s[j]);
  }
  return m;
}

/// e^x, or 0 where it is below the smallest normal number (masked keys' -inf among them): a
/// denormal result costs a microcode assist on Intel cores, which a causal mask's -inf lanes
/// met in every diagonal tile (docs/notes.md). A probability that small is below the rounding
/// of its row's sum (at least 1).
template <class T, class Arch>
[[gnu::always_inline]] inline xsimd::batch<T, Arch> exp_or_zero(const xsimd::batch<T, Arch>& x) {
  using V = xsimd::batch<T, Arch>;
  const V lo(std::is_same_v<T, float> ? T(-87.33) : T(-708.39));
  const auto tiny = x < lo;  // false for NaN, which stays NaN
  return xsimd::select(tiny, V(T(0)), simd::fn::exp(xsimd::select(tiny, lo, x)));
}

/// s[j] = exp(f s[j] - shift) for j in [0, n), in place (n a multiple of the vector width);
/// with `sum`, sum = alpha sum + those values, lane by lane (the vector width of lanes, or one):
/// a row's sum is reduced to one number at its end, where a reduction per tile sat on the
/// row's chain of dependent instructions.
template <class T, class Arch>
void exp_row(T* s, T f, T shift, index_t n, T* sum = nullptr, T alpha = T(1)) {
  using cfg = gemm_config<T, Arch>;
#if defined(__AVX512F__)
  // f32 on AVX-512, as 2^t with t = s f log2(e) - shift log2(e) in one FMA (f s <= shift): 2^x
  // for x = t - round(t) in [-1/2, 1/2] by a degree-5 polynomial (2.1e-7 relative at most, against
  // 2^x in double over every f32 of the interval), times 2^round(t) by VSCALEFPS, whose zero mask
  // drops the lanes below 2^-126 (denormals; masked keys' -inf) and keeps NaN. 13 instructions
  // a vector against 17 for exp(s - shift) (simd::fn::exp, reduced by Cody and Waite, and the
  // zeroing of exp_or_zero). The rounding of shift log2(e) scales a whole row alike, which its
  // normalisation undoes.
  if constexpr (std::is_same_v<T, float> && std::is_base_of_v<xsimd::avx512f, Arch>) {
    const __m512 log2e = _mm512_set1_ps(static_cast<float>(static_cast<double>(f) * 1.4426950408889634)),
                 lo = _mm512_set1_ps(-126.0f);
    const __m512 c = _mm512_set1_ps(static_cast<float>(-static_cast<double>(shift) * 1.4426950408889634));
    __m512 total = _mm512_setzero_ps();
    for (index_t j = 0; j < n; j += 16) {
      const __m512 t = _mm512_fmadd_ps(_mm512_loadu_ps(s + j), log2e, c);
      const __m512 k = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m512 x = _mm512_sub_ps(t, k);
      __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.3276419e-3f), x, _mm512_set1_ps(9.67553e-3f));
      p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(5.5507135e-2f));
      p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(2.402212e-1f));
      p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(6.9314694e-1f));
      p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(1.0000001f));
      const __m512 e = _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(t, lo, _CMP_NLT_UQ), p, k);
      _mm512_storeu_ps(s + j, e);
      total = _mm512_add_ps(total, e);
    }
    if (sum) _mm512_storeu_ps(sum, _mm512_fmadd_ps(_mm512_loadu_ps(sum), _mm512_set1_ps(alpha), total));
    return;
  }
#endif
  if constexpr (cfg::vectorised) {
    using V = xsimd::batch<T, Arch>;
    V total(T(0));
    const V sh(-shift), fv(f);
    for (index_t j = 0; j < n; j += cfg::width) {
      const V e = exp_or_zero<T, Arch>(xsimd::fma(V::load_unaligned(s + j), fv, sh));
      e.store_unaligned(s + j);
      total += e;
    }
    if (sum) xsimd::fma(V::load_unaligned(sum), V(alpha), total).store_unaligned(sum);
  } else {
    T total = 0;
    for (index_t j = 0; j < n; ++j) total += (s[j] = std::exp(s[j] * f - shift));
    if (sum) *sum = *sum * alpha + total;
  }
}

/// dst[c * stride] = f src[c] for c < n.
template <class T>
void put_row(T* dst, index_t stride, const T* src, index_t n, T f = T(1)) {
  if (stride == 1 && f == T(1)) std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(T));
  else if (stride == 1)  // (a loop the compiler vectorises)
    for (index_t c = 0; c < n; ++c) dst[c] = f * src[c];
  else
    for (index_t c = 0; c < n; ++c) dst[c * stride] = f * src[c];
}

/// The scores' factor split between the exp and the tile (mask_row's `pre`): the exp takes it
/// (f s - m in one FMA) where the max of f s is f times the max of s, f > 0, and nothing is
/// added to f s; an additive mask (f s + a) or a factor not above 0 scales the tile first.
template <class T>
struct score_factors {
  T exp = 1, pre = 1;
  score_factors(double scale, const mask_ref& mk) {
    const T s = static_cast<T>(scale);
    if ((!mk.none && !mk.is_bool) || !(s > T(0))) pre = s;
    else exp = s;
  }
};

/// x[j] *= f for j < n (whole vectors).
template <class T, class Arch>
void scale_row(T* x, T f, index_t n) {
  using cfg = gemm_config<T, Arch>;
  if constexpr (cfg::vectorised) {
    using V = xsimd::batch<T, Arch>;
    for (index_t j = 0; j < n; j += cfg::width) (V::load_unaligned(x + j) * V(f)).store_unaligned(x + j);
  } else {
    for (index_t j = 0; j < n; ++j) x[j] *= f;
  }
}

/// dS = P (dP - D) for one row, in place of dP: ds[j] = p[j] (ds[j] - dval), j < n (whole vectors).
template <class T, class Arch>
void ds_row(const T* p, T* ds, T dval, index_t n) {
  using cfg = gemm_config<T, Arch>;
  if constexpr (cfg::vectorised) {
    using V = xsimd::batch<T, Arch>;
    const V dv(dval);
    for (index_t j = 0; j < n; j += cfg::width)
      (V::load_unaligned(p + j) * (V::load_unaligned(ds + j) - dv)).store_unaligned(ds + j);
  } else {
    for (index_t j = 0; j < n; ++j) ds[j] = p[j] * (ds[j] - dval);
  }
}

#if defined(__AVX512F__)
/// r[c] = column c of the 16 x 16 block whose rows are r[0 .. 16).
[[gnu::always_inline]] inline void transpose16(__m512* r) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  const auto pd = [](__m512 x) { return _mm512_castps_pd(x); };
  for (int i = 0; i < 4; ++i) {
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(t[4 * i]), pd(t[4 * i + 2])));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(t[4 * i]), pd(t[4 * i + 2])));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(pd(t[4 * i + 1]), pd(t[4 * i + 3])));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(pd(t[4 * i + 1]), pd(t[4 * i + 3])));
  }
  for (int k = 0; k < 4; ++k) {
    t[k] = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x88);
    t[4 + k] = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xdd);
    t[8 + k] = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x88);
    t[12 + k] = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xdd);
  }
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0x88);
    r[8 + k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0xdd);
    r[4 + k] = _mm512_shuffle_f32x4(t[4 + k], t[12 + k], 0x88);
    r[12 + k] = _mm512_shuffle_f32x4(t[4 + k], t[12 + k], 0xdd);
  }
}
#endif

/// dst[c ld + j] = src[j st + c sc] for j < rows, c < cols: a transposed copy (K^T, V^T). f32
/// with contiguous columns on AVX-512 moves 16 x 16 blocks through registers (64 shuffles a
/// block), where an element at a time cost a strided store and its index arithmetic each.
template <class T>
void transpose_into(T* dst, index_t ld, const T* src, index_t st, index_t sc, index_t rows, index_t cols) {
  index_t j = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    if (sc == 1)
      for (; j + 16 <= rows; j += 16) {
        index_t c = 0;
        for (; c + 16 <= cols; c += 16) {
          __m512 r[16];
          for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + (j + i) * st + c);
          transpose16(r);
          for (int i = 0; i < 16; ++i) _mm512_storeu_ps(dst + (c + i) * ld + j, r[i]);
        }
        for (; c < cols; ++c)
          for (index_t i = j; i < j + 16; ++i) dst[c * ld + i] = src[i * st + c];
      }
  }
#endif
  for (; j < rows; ++j)
    for (index_t c = 0; c < cols; ++c) dst[c * ld + j] = src[j * st + c * sc];
}

/// The keys a tile of queries [i0, i0 + rows) reads from key j0 on: up to bk, the causal
/// diagonal and tk, rounded up to whole vectors (the columns past tk are packed as zeros and
/// masked).
inline index_t tile_keys(index_t i0, index_t rows, index_t j0, index_t tk, bool causal, index_t width) {
  const index_t end = causal ? std::min(tk, i0 + rows) : tk;
  return std::min(bk, round_up(end - j0, width));
}

/// K^T and V [tkp x dvp] (or V^T) of k/v head (b, kh), zero beyond tk and dv, and K by rows
/// [tkp x dp] when `k_rows` (the backward's dQ += dS K), in memory the caller gives (`floats`
/// elements: pooled blocks, so that a call's buffers are not faulted in anew). K^T and V^T are
/// stored a key tile at a time, [d x bk] each (kt_tile, vt_tile): rows of the whole length
/// lie tkp floats apart, 4 KiB at T = 1024, and a tile's rows then all fall in the same few L1
/// sets, which sent the products' B operand to L2.
template <class T>
struct packed_kv {
  index_t d = 0, dv = 0, tkp = 0, dp = 0, dvp = 0, width = 1;
  T *kt = nullptr, *v = nullptr, *k = nullptr;
  const T* vrows = nullptr;  // V by rows [.. x dvp], row stride vld: v, or v's own rows
  index_t vld = 0;
  packed_kv(const attention_geometry& g, index_t w)
      : d(g.d), dv(g.dv), tkp(round_up(g.tk, bk)), dp(round_up(g.d, w)), dvp(round_up(g.dv, w)), width(w) {}
  /// The elements it takes (V^T fits in V's [tkp x dvp]).
  index_t floats(bool k_rows) const { return d * tkp + tkp * dvp + (k_rows ? tkp * dp : 0); }
  /// K^T [d x bk] (row stride bk) of the key tile from j0 (a multiple of bk).
  const T* kt_tile(index_t j0) const { return kt + j0 * d; }
  /// V^T [dv x bk] (row stride bk) of the key tile from j0, when packed transposed.
  const T* vt_tile(index_t j0) const { return v + j0 * dv; }
  void pack(T* mem, const operand& ko, const operand& vo, index_t b, index_t kh, const attention_geometry& g,
            bool k_rows, bool v_transposed) {
    kt = mem;
    v = kt + g.d * tkp;
    k = k_rows ? v + tkp * dvp : nullptr;
    // V's own rows serve the product P V where they hold whole vectors and the product's keys,
    // rounded up to whole vectors, stay within tk
    const bool v_in_place = !v_transposed && vo.sc == 1 && g.dv == dvp && g.tk % width == 0;
    // only padding needs zeros: keys past tk, V's columns past dv, K's past d
    if (g.tk != tkp || (g.dv != dvp && !v_in_place) || (k_rows && g.d != dp)) std::fill(mem, mem + floats(k_rows), T(0));
    const index_t kb = ko.base(b, kh), vb = vo.base(b, kh);
    const auto transposed = [&](T* dst, const operand& src, index_t base, index_t cols) {
      for (index_t j0 = 0; j0 < g.tk; j0 += bk)
        transpose_into(dst + j0 * cols, bk, reinterpret_cast<const T*>(src.p) + base + j0 * src.st, src.st, src.sc,
                       std::min(bk, g.tk - j0), cols);
    };
    transposed(kt, ko, kb, g.d);
    vrows = v;
    vld = dvp;
    if (v_transposed) {
      transposed(v, vo, vb, g.dv);  // the backward's dP = dO V^T
    } else if (v_in_place) {
      vrows = reinterpret_cast<const T*>(vo.p) + vb;
      vld = vo.st;
    } else {
      for (index_t j = 0; j < g.tk; ++j) vo.row(vb + j * vo.st, g.dv, v + j * dvp);
    }
    if (k_rows)
      for (index_t j = 0; j < g.tk; ++j) ko.row(kb + j * ko.st, g.d, k + j * dp);
  }
};

template <class T, class Arch>
void forward(const view& qv, const view& kv, const view& vv, const view& maskv, const view& out, bool causal,
             double scale) {
  using cfg = gemm_config<T, Arch>;
  const int r = qv.shape.rank;
  const attention_geometry g(qv.shape, kv.shape, vv.shape);
  const operand q(qv, r, qv.shape), k(kv, r, kv.shape), v(vv, r, vv.shape), o(out, r, out.shape);
  const mask_ref mk(maskv, r, attention_geometry::scores(qv.shape, kv.shape));
  const score_factors<T> sf(scale, mk);
  const index_t group = g.h / g.hk, width = cfg::width;
  // K^T and V of every k/v head, packed once (each is read by every query block of its group)
  const packed_kv<T> layout(g, width);
  const index_t per_head = layout.floats(false);
  const block mem(static_cast<std::size_t>(g.lead * g.hk * per_head) * sizeof(T));
  std::vector<packed_kv<T>> kvs(static_cast<std::size_t>(g.lead * g.hk), layout);
  parallel_for(g.lead * g.hk, 1, [&](index_t b0, index_t b1) {
    for (index_t x = b0; x < b1; ++x)
      kvs[static_cast<std::size_t>(x)].pack(reinterpret_cast<T*>(mem.data()) + x * per_head, k, v, x / g.hk, x % g.hk, g,
                                            false, false);
  });
  const index_t nqb = (g.tq + bq - 1) / bq;
  const index_t dvp = round_up(g.dv, width), dp = round_up(g.d, width);
  parallel_for(g.lead * g.h * nqb, 1, [&](index_t w0, index_t w1) {
    // l: each row's running sum, `width` lanes a row (exp_row)
    std::vector<T> qb(static_cast<std::size_t>(bq * dp)), s(static_cast<std::size_t>(bq * bk)),
        acc(static_cast<std::size_t>(bq * dvp)), m(bq), l(static_cast<std::size_t>(bq * width));
    for (index_t w = w0; w < w1; ++w) {
      const index_t b = w / (g.h * nqb), h = w / nqb % g.h, i0 = w % nqb * bq;
      const index_t rows = std::min(bq, g.tq - i0);
      const packed_kv<T>& pk = kvs[static_cast<std::size_t>(b * g.hk + h / group)];
      const index_t qbase = q.base(b, h) + i0 * q.st, mbase = mk.none ? 0 : mk.m.base(b, h);
      // the products read A's rows up to d only: q's own rows serve where they are contiguous
      const T* qrows = reinterpret_cast<const T*>(q.p) + qbase;
      index_t qld = q.st;
      if (q.sc != 1) {
        for (index_t rr = 0; rr < rows; ++rr) q.row(qbase + rr * q.st, g.d, qb.data() + rr * dp);
        qrows = qb.data();
        qld = dp;
      }
      std::fill(m.begin(), m.end(), -std::numeric_limits<T>::infinity());
      std::fill(l.begin(), l.end(), T(0));
      std::fill(acc.begin(), acc.end(), T(0));
      const index_t kend = causal ? std::min(g.tk, i0 + rows) : g.tk;
      for (index_t j0 = 0; j0 < kend; j0 += bk) {
        const index_t n = tile_keys(i0, rows, j0, g.tk, causal, width);
        tile_product<T, Arch, true>(rows, n, g.d, qrows, qld, pk.kt_tile(j0), bk, s.data(), bk, true);
        for (index_t rr = 0; rr < rows; ++rr) {
          T* sr = s.data() + rr * bk;
          if (!mk.none || causal || j0 + n > g.tk || sf.pre != T(1))
            mask_row(sr, mk, mbase, i0 + rr, j0, n, g.tk, causal, sf.pre);
          // (m is of the scaled scores: the logsumexp's, and the exp's shift)
          const T mnew = std::max(m[static_cast<std::size_t>(rr)], sf.exp * row_max<T, Arch>(sr, n));
          if (mnew == -std::numeric_limits<T>::infinity()) {  // every key so far masked: weights 0
            std::fill(sr, sr + n, T(0));
            continue;
          }
          const T mold = m[static_cast<std::size_t>(rr)];
          const T alpha = mnew == mold ? T(1) : std::exp(mold - mnew);  // the max settles early
          exp_row<T, Arch>(sr, sf.exp, mnew, n, l.data() + rr * width, alpha);
          m[static_cast<std::size_t>(rr)] = mnew;
          if (alpha != T(1)) scale_row<T, Arch>(acc.data() + rr * dvp, alpha, dvp);
        }
        tile_product<T, Arch, true>(rows, dvp, n, s.data(), bk, pk.vrows + j0 * pk.vld, pk.vld, acc.data(), dvp, false);
      }
      const index_t obase = o.base(b, h) + i0 * o.st;
      auto* op = reinterpret_cast<T*>(const_cast<std::byte*>(o.p));
      for (index_t rr = 0; rr < rows; ++rr) {
        const T lr = std::accumulate(l.data() + rr * width, l.data() + (rr + 1) * width, T(0));
        const bool empty = lr == T(0);  // every key masked: NaN, as the math reference's softmax
        const T inv = empty ? std::numeric_limits<T>::quiet_NaN() : T(1) / lr;
        T* ar = acc.data() + rr * dvp;
        scale_row<T, Arch>(ar, inv, dvp);
        o.put(obase + rr * o.st, g.dv, ar);
        op[obase + rr * o.st + g.dv * o.sc] =
            empty ? -std::numeric_limits<T>::infinity() : m[static_cast<std::size_t>(rr)] + std::log(lr);
      }
    }
  });
}

template <class T, class Arch>
void backward(const view& qv, const view& kv, const view& vv, const view& maskv, const view& yv, const view& gv,
              const view& out, bool causal, double scale) {
  using cfg = gemm_config<T, Arch>;
  const int r = qv.shape.rank;
  const attention_geometry g(qv.shape, kv.shape, vv.shape);
  const operand q(qv, r, qv.shape), k(kv, r, kv.shape), v(vv, r, vv.shape), y(yv, r, yv.shape), go(gv, r, gv.shape);
  const bool glse = gv.shape.e[r - 1] > g.dv;  // the logsumexp's cotangent given (else zero)
  const mask_ref mk(maskv, r, attention_geometry::scores(qv.shape, kv.shape));
  const score_factors<T> sf(scale, mk);
  const T sc = static_cast<T>(scale);  // dq = sc dS k, dk = sc dS^T q: applied as they are written
  const index_t group = g.h / g.hk, width = cfg::width;
  const index_t dp = round_up(g.d, width), dvp = round_up(g.dv, width);
  const int orank = out.shape.rank;
  auto* res = reinterpret_cast<T*>(out.p);
  const index_t ors = out.strides.e[orank - 2], ocs = out.strides.e[orank - 1];
  const auto out_base = [&](index_t b) {  // [b, 0, 0] of the result [..., rows, d + dv]
    index_t off = 0;
    for (int i = orank - 3; i >= 0; --i) {
      off += (b % out.shape.e[i]) * out.strides.e[i];
      b /= out.shape.e[i];
    }
    return off;
  };
  parallel_for(g.lead * g.hk, 1, [&](index_t w0, index_t w1) {
    packed_kv<T> pk(g, width);
    const block pk_mem(static_cast<std::size_t>(pk.floats(true)) * sizeof(T));
    const index_t nq = group * g.tq;
    std::vector<T> qp, dop, dq, dd, lse, s(static_cast<std::size_t>(bq * bk)), dpt(static_cast<std::size_t>(bq * bk)),
        dk(static_cast<std::size_t>(bk * dp)), dvv(static_cast<std::size_t>(bk * dvp));
    for (index_t w = w0; w < w1; ++w) {
      const index_t b = w / g.hk, kh = w % g.hk;
      pk.pack(reinterpret_cast<T*>(pk_mem.data()), k, v, b, kh, g, true, true);
      // the group's query rows, their output gradients, D and the logsumexp
      qp.assign(static_cast<std::size_t>(nq * dp), T(0));
      dop.assign(static_cast<std::size_t>(nq * dvp), T(0));
      dq.assign(static_cast<std::size_t>(nq * dp), T(0));
      dd.assign(static_cast<std::size_t>(nq), T(0));
      lse.assign(static_cast<std::size_t>(nq), T(0));
      for (index_t gh = 0; gh < group; ++gh) {
        const index_t h = kh * group + gh, qb = q.base(b, h), yb = y.base(b, h), gb = go.base(b, h);
        for (index_t i = 0; i < g.tq; ++i) {
          const index_t row = gh * g.tq + i, yi = yb + i * y.st, gi = gb + i * go.st;
          q.row(qb + i * q.st, g.d, qp.data() + row * dp);
          T* dor = dop.data() + row * dvp;
          go.row(gi, g.dv, dor);
          T sum = glse ? -go.at<T>(gi + g.dv * go.sc) : T(0);
          if (y.sc == 1) {
            const T* yr = reinterpret_cast<const T*>(y.p) + yi;
            for (index_t c = 0; c < g.dv; ++c) sum += dor[c] * yr[c];
          } else {
            for (index_t c = 0; c < g.dv; ++c) sum += dor[c] * y.at<T>(yi + c * y.sc);
          }
          dd[static_cast<std::size_t>(row)] = sum;
          lse[static_cast<std::size_t>(row)] = y.at<T>(yi + g.dv * y.sc);
        }
      }
      const index_t obase = out_base(b);
      for (index_t j0 = 0; j0 < g.tk; j0 += bk) {
        std::fill(dk.begin(), dk.end(), T(0));
        std::fill(dvv.begin(), dvv.end(), T(0));
        for (index_t gh = 0; gh < group; ++gh) {
          const index_t h = kh * group + gh, mbase = mk.none ? 0 : mk.m.base(b, h);
          for (index_t i0 = causal ? j0 / bq * bq : 0; i0 < g.tq; i0 += bq) {  // causal: queries from j0 on
            const index_t rows = std::min(bq, g.tq - i0), row0 = gh * g.tq + i0;
            if (causal && i0 + rows - 1 < j0) continue;
            const T* qrows = qp.data() + row0 * dp;
            const T* dorows = dop.data() + row0 * dvp;
            const index_t n = tile_keys(i0, rows, j0, g.tk, causal, width);
            tile_product<T, Arch, true>(rows, n, g.d, qrows, dp, pk.kt_tile(j0), bk, s.data(), bk, true);
            tile_product<T, Arch, true>(rows, n, g.dv, dorows, dvp, pk.vt_tile(j0), bk, dpt.data(), bk, true);
            for (index_t rr = 0; rr < rows; ++rr) {
              T* sr = s.data() + rr * bk;
              mask_row(sr, mk, mbase, i0 + rr, j0, n, g.tk, causal, sf.pre);
              exp_row<T, Arch>(sr, sf.exp, lse[static_cast<std::size_t>(row0 + rr)], n);  // P
              ds_row<T, Arch>(sr, dpt.data() + rr * bk, dd[static_cast<std::size_t>(row0 + rr)], n);
            }
            tile_product<T, Arch, false>(n, dvp, rows, s.data(), bk, dorows, dvp, dvv.data(), dvp, false);  // dV += P^T dO
            tile_product<T, Arch, false>(n, dp, rows, dpt.data(), bk, qrows, dp, dk.data(), dp, false);     // dK += dS^T Q
            tile_product<T, Arch, true>(rows, dp, n, dpt.data(), bk, pk.k + j0 * dp, dp, dq.data() + row0 * dp, dp, false);
          }
        }
        for (index_t j = j0; j < std::min(g.tk, j0 + bk); ++j) {
          T* dst = res + obase + (g.h * g.tq + kh * g.tk + j) * ors;
          put_row(dst, ocs, dk.data() + (j - j0) * dp, g.d, sc);
          put_row(dst + g.d * ocs, ocs, dvv.data() + (j - j0) * dvp, g.dv);
        }
      }
      for (index_t row = 0; row < nq; ++row) {  // the group's q heads are consecutive
        T* dst = res + obase + (kh * group * g.tq + row) * ors;
        put_row(dst, ocs, dq.data() + row * dp, g.d, sc);
        if (ocs == 1) std::fill(dst + g.d, dst + g.d + g.dv, T(0));
        else
          for (index_t c = 0; c < g.dv; ++c) dst[(g.d + c) * ocs] = T(0);
      }
    }
  });
}

}  // namespace attn

/// attention(q, k, v, mask) into out [..., h, tq, dv + 1] (value, then each row's logsumexp), the
/// scores scale q k^T [+ mask].
template <class Arch = gemm_arch>
void run_attention(const view& q, const view& k, const view& v, const view& mask, const view& out, bool causal,
                   double scale) {
  if (q.dt == dtype::f64) attn::forward<double, Arch>(q, k, v, mask, out, causal, scale);
  else attn::forward<float, Arch>(q, k, v, mask, out, causal, scale);
}

/// attention_grad(q, k, v, mask, y, g) into out [..., h tq + hk tk, d + dv].
template <class Arch = gemm_arch>
void run_attention_grad(const view& q, const view& k, const view& v, const view& mask, const view& y, const view& g,
                        const view& out, bool causal, double scale) {
  if (q.dt == dtype::f64) attn::backward<double, Arch>(q, k, v, mask, y, g, out, causal, scale);
  else attn::backward<float, Arch>(q, k, v, mask, y, g, out, causal, scale);
}

}  // namespace kiln::cpu::detail
