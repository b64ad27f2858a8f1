// kiln/backend/cpu/gemm.hpp: the CPU backend's matrix product, C[b] = A[b] * B[b], with an
// epilogue applied to each row segment of C while it is still in cache.
//
// The structure is BLIS's (Van Zee and van de Geijn, "BLIS: A Framework for Rapidly
// Instantiating BLAS Functionality"), transposed because kiln's C is row-major and the
// micro-kernel vectorises along C's rows:
//
//   for ic in M by MC          A block (MC x KC), packed, lives in L3
//     for pc in K by KC
//       pack A[ic.., pc..] into micro-panels of MR rows (a row-major float A: only a last,
//       partial micro-panel; the micro-kernel reads the others' rows in place)
//       for jc in N by NC      B block (KC x NC), packed, lives in L2
//         pack B[pc.., jc..] into micro-panels of NR columns
//         for ir in MC by MR   one A micro-panel (MR x KC) stays in L1 ...
//           for jr in NC by NR ... while the B micro-panels stream from L2
//             C[ir.., jr..] (+)= A micro-panel * B micro-panel   (MR x NR in registers)
//           on the last k block: epilogue(each of the MR rows, columns jc .. jc+NC)
//
// The epilogue thus sees each row of C in segments of up to NC (a few hundred floats, from the
// L2's size: gemm_block_cols), MR rows at a time, right after the micro-kernels stored them (in
// L1 or L2). Calling it per micro-tile instead (segments of NR) gained nothing.
// Packing reads A and B through their strides, so a transposed or strided operand costs
// nothing beyond the packing every product pays anyway (a B stored by columns, as in x W^T,
// is packed by 8 x 8 transposes in registers: pack_b_columns). Threads split C into rectangles of
// whole micro-tiles (and the batch); each thread packs into its own buffers, so no thread
// waits for another. Every element's sum runs over k in the same order whatever the thread
// count, so 1 and N threads give bitwise-identical results.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <new>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "../../core/config.hpp"
#include "../../core/dtype.hpp"
#include "../../core/env.hpp"
#include "cache.hpp"
#include "fma.hpp"
#include "parallel.hpp"

// nvcc's front end does not know `#pragma GCC unroll` (warning 1675); it passes it on to the
// host compiler, which does.
#if defined(__NVCC__)
#pragma nv_diagnostic push
#pragma nv_diag_suppress 1675
#endif

namespace kiln::cpu {

/// A batch of matrices in memory. Strides are in elements. C's column stride is 1 (rows
/// contiguous). batch_stride 0 = broadcast.
template <class T> struct matrix_ref {
  T* data;
  index_t batch_stride, row_stride, col_stride;
};

/// Called exactly once for every row segment of C after its final value is stored, while the
/// tile is still in cache: c points at C[b, i, j0 .. j0+count). It may rewrite those values in
/// place or write them elsewhere. Segments are parts of a row (count <= n), each element in
/// exactly one. The default does nothing. Threads call it concurrently on disjoint segments,
/// so it must not write shared state without synchronisation.
struct no_epilogue {
  template <class T> void operator()(index_t, index_t, index_t, index_t, T*) const {}
};

namespace detail {

// ---- element types ---------------------------------------------------------------------------
// The type the kernel computes in: bf16 in float (converted while packing), integers in the
// unsigned type of their width so that overflow wraps (as in the eager backend) without UB.
template <class T> struct gemm_compute { using type = T; };
template <> struct gemm_compute<bfloat16> { using type = float; };
template <> struct gemm_compute<std::int32_t> { using type = std::uint32_t; };
template <> struct gemm_compute<std::int64_t> { using type = std::uint64_t; };
template <class T> using gemm_compute_t = typename gemm_compute<T>::type;

// The instruction set the compiler targets (-march). Every function below takes it as a template
// argument, so that translation units built for different targets do not share (and the linker
// does not pick one of) differently compiled kernels under one name.
using gemm_arch = xsimd::default_arch;

template <class U, class Arch> constexpr bool gemm_vectorised() {
  if constexpr (std::is_same_v<U, float> || std::is_same_v<U, double>) {
    if constexpr (std::is_same_v<Arch, xsimd::unavailable>) return false;
    else return xsimd::types::has_simd_register<U, Arch>::value;
  } else {
    return false;
  }
}

// Vector registers of the target: AVX-512 and AArch64 have 32, SSE/AVX/AVX2 16.
template <class Arch> constexpr int gemm_registers() {
  if constexpr (std::is_base_of_v<xsimd::avx512f, Arch> || std::is_base_of_v<xsimd::neon64, Arch>)
    return 32;
  else
    return 16;
}

// ---- blocking ---------------------------------------------------------------------------------
// The micro-tile is MR rows x NV vectors: MR * NV accumulators, NV vectors of B and one
// broadcast of A in registers. With 32 registers (AVX-512, AArch64) it is 6 x 4 (24 + 5): per
// k step 4 vector loads and 6 broadcasts feed 24 FMAs. 12 x 2 and 8 x 3 (also 24 + 3 or 4)
// were no faster on whole products (docs/notes.md); 6 x 4 also wastes fewer rows than 12 x 2
// on small M (a batch of 16: 18 rows against 24). With 16 registers (SSE, AVX2) it is 6 x 2,
// BLIS's Haswell shape (12 + 3, leaving one for the multiply of the mul + add that replaces an
// FMA on SSE2). Integers use a plain 4 x 8 loop nest.
// KC = 384 floats makes an A micro-panel (6 x 384) 9 KiB of L1; the A block (MC x KC) may
// take 4 MiB of L3. A larger KC was no faster, and a smaller one loads and stores C's tiles
// more often for the same work (docs/notes.md). The B block's width NC is set at run time from
// the L2's size: gemm_block_cols.
template <class U, class Arch = gemm_arch> struct gemm_config {
  static constexpr bool vectorised = gemm_vectorised<U, Arch>();
  static constexpr int width = [] {
    if constexpr (vectorised) return static_cast<int>(xsimd::batch<U, Arch>::size);
    else return 1;
  }();
  static constexpr int nv = vectorised ? (gemm_registers<Arch>() == 32 ? 4 : 2) : 8;
  static constexpr int mr = vectorised ? 6 : 4;
  static constexpr int nr = nv * width;
  static constexpr index_t kc = vectorised ? 1536 / static_cast<index_t>(sizeof(U)) : 256;
  static constexpr index_t mc = std::max<index_t>(mr, (index_t{4} << 20) / (kc * static_cast<index_t>(sizeof(U))) / mr * mr);
};

/// The bytes of a packed B block (KC x NC), which the micro-kernels sweep once for each row
/// tile of A and so should stay in L2: half of the L2 (the other half holds the A rows and C
/// tiles passing through), 1 MiB where the L2's size is unknown, or KILN_GEMM_B_BLOCK_BYTES
/// from the environment. A fixed 1 MiB block (half of a 2 MiB L2) fills a 1 MiB L2, where a
/// block of half its size ran faster.
/// The block's width and the blocking of K do not change the order of any element's sum.
KILN_RUNTIME index_t gemm_b_block_bytes();
/// NC: the columns of a packed B block, a multiple of NR.
template <class U, class Arch> index_t gemm_block_cols() {
  using cfg = gemm_config<U, Arch>;
  return std::max<index_t>(cfg::nr, gemm_b_block_bytes() / (cfg::kc * static_cast<index_t>(sizeof(U))) / cfg::nr * cfg::nr);
}

// ---- thread-local pack buffers ---------------------------------------------------------------
inline constexpr std::size_t gemm_align = 64;  // a cache line; at least every xsimd alignment

template <class U> class gemm_buffer {
 public:
  gemm_buffer() = default;
  gemm_buffer(const gemm_buffer&) = delete;
  gemm_buffer& operator=(const gemm_buffer&) = delete;
  ~gemm_buffer() { release(); }
  U* get(std::size_t n) {
    if (n > size_) {
      release();
      p_ = static_cast<U*>(::operator new(n * sizeof(U), std::align_val_t{gemm_align}));
      size_ = n;
    }
    return p_;
  }

 private:
  void release() {
    if (p_) ::operator delete(p_, std::align_val_t{gemm_align});
    p_ = nullptr;
    size_ = 0;
  }
  U* p_ = nullptr;
  std::size_t size_ = 0;
};

// Per thread, A's and B's packed blocks: they grow to the largest block seen and live as long
// as the thread (for float at most MC x KC + NC x KC, 5 MiB; bf16 keeps all of K in one block).
template <class U> U* gemm_scratch(int which, std::size_t n) {
  thread_local gemm_buffer<U> bufs[2];
  return bufs[which].get(n);
}

// ---- packing -----------------------------------------------------------------------------------
// Each packed micro-panel is written in order, one k step (MR or NR values) after another,
// whatever the operand's layout: reading across rows and writing contiguously was the faster
// order, rather than reading rows contiguously and writing with a stride of MR or NR.

// A block rows [0, mc) x cols [0, kc) of `a` (already offset) into micro-panels of MR rows:
// panel q holds, for each p, the MR values A[q*MR + r, p]; rows past mc are zero, so the
// kernel needs no edge cases.
template <int MR, class Arch, class T, class U>
void pack_a(const T* a, index_t rs, index_t cs, index_t mc, index_t kc, U* out) {
  for (index_t i0 = 0; i0 < mc; i0 += MR, out += MR * kc) {
    const index_t rows = std::min<index_t>(MR, mc - i0);
    const T* src = a + i0 * rs;
    if (rows == MR) {
      for (index_t p = 0; p < kc; ++p)
#pragma GCC unroll 16
        for (index_t r = 0; r < MR; ++r) out[p * MR + r] = static_cast<U>(src[r * rs + p * cs]);
    } else {
      for (index_t p = 0; p < kc; ++p)
        for (index_t r = 0; r < MR; ++r) out[p * MR + r] = r < rows ? static_cast<U>(src[r * rs + p * cs]) : U(0);
    }
  }
}

// B stored by columns (row stride 1: B = W^T for a row-major W, as in the x W^T of a linear
// layer's backward pass) packs by transposing 8 x 8 blocks in AVX registers: 8 columns of B
// (rows of W) by 8 k steps at a time (pack_b_columns). Element by element, each k
// step read NR values a row of W apart: with W's rows 4 KiB apart (1024 floats) they all fall
// in one set of L1, and packing took most of the time of a product of few rows.
template <class Arch, class T, class U, int NR>
inline constexpr bool gemm_pack_transposes =
#if XSIMD_WITH_AVX
    std::is_same_v<T, float> && std::is_same_v<U, float> && NR % 8 == 0 &&
    (std::is_base_of_v<xsimd::avx, Arch> || std::is_base_of_v<xsimd::avx512f, Arch>);
#else
    false;
#endif

#if XSIMD_WITH_AVX
// r[i] = row i of an 8 x 8 block in, column i out.
[[gnu::always_inline]] inline void transpose_8x8(__m256 (&r)[8]) {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h)  // rows 0-3, then 4-7: s[4h + c] holds columns c and c + 4
    for (int u = 0; u < 2; ++u) {
      s[4 * h + 2 * u] = _mm256_shuffle_ps(t[4 * h + u], t[4 * h + u + 2], _MM_SHUFFLE(1, 0, 1, 0));
      s[4 * h + 2 * u + 1] = _mm256_shuffle_ps(t[4 * h + u], t[4 * h + u + 2], _MM_SHUFFLE(3, 2, 3, 2));
    }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(s[c], s[c + 4], 0x20);
    r[c + 4] = _mm256_permute2f128_ps(s[c], s[c + 4], 0x31);
  }
}

// One panel of NR columns of B by columns (row stride 1, column stride cs): out[p*NR + j] =
// b[p + j*cs], 8 columns at a time over all of kc (8 k steps, half of each column's cache line,
// per block: the next block reads the other half while the 8 lines are still in L1), the last
// kc % 8 steps element by element.
template <int NR>
void pack_b_columns(const float* b, index_t cs, index_t kc, float* out) {
  for (int j8 = 0; j8 < NR; j8 += 8) {
    const float* src = b + j8 * cs;
    float* dst = out + j8;
    index_t p = 0;
    for (; p + 8 <= kc; p += 8) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * cs + p);
      transpose_8x8(r);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + (p + i) * NR, r[i]);
    }
    for (; p < kc; ++p)
      for (int i = 0; i < 8; ++i) dst[p * NR + i] = src[i * cs + p];
  }
}
#endif

// B block rows [0, kc) x cols [0, nc) into micro-panels of NR columns: panel q holds, for each
// p, the NR values B[p, q*NR + j]; columns past nc are zero.
template <int NR, class Arch, class T, class U>
void pack_b(const T* b, index_t rs, index_t cs, index_t kc, index_t nc, U* out) {
  for (index_t j0 = 0; j0 < nc; j0 += NR, out += NR * kc) {
    const index_t cols = std::min<index_t>(NR, nc - j0);
    const T* src = b + j0 * cs;
    if (cols == NR && cs == 1) {  // a vectorised copy
      for (index_t p = 0; p < kc; ++p)
#pragma GCC unroll 64
        for (index_t j = 0; j < NR; ++j) out[p * NR + j] = static_cast<U>(src[p * rs + j]);
    } else if (cols == NR && rs == 1 && gemm_pack_transposes<Arch, T, U, NR>) {
#if XSIMD_WITH_AVX
      if constexpr (gemm_pack_transposes<Arch, T, U, NR>) pack_b_columns<NR>(src, cs, kc, out);
#endif
    } else if (cols == NR) {
      for (index_t p = 0; p < kc; ++p)
#pragma GCC unroll 64
        for (index_t j = 0; j < NR; ++j) out[p * NR + j] = static_cast<U>(src[p * rs + j * cs]);
    } else {
      for (index_t p = 0; p < kc; ++p)
        for (index_t j = 0; j < NR; ++j) out[p * NR + j] = j < cols ? static_cast<U>(src[p * rs + j * cs]) : U(0);
    }
  }
}

// The last, partial panel of B (cols < width columns) into one micro-panel of `width` columns
// (a multiple of the vector width), zero past cols.
template <class Arch, class T, class U>
void pack_b_edge(const T* b, index_t rs, index_t cs, index_t kc, index_t cols, index_t width, U* out) {
  for (index_t p = 0; p < kc; ++p, out += width)
    for (index_t j = 0; j < width; ++j) out[j] = j < cols ? static_cast<U>(b[p * rs + j * cs]) : U(0);
}

// ---- micro-kernels -------------------------------------------------------------------------------
// Both compute the MR x NR tile  acc = sum_p A(r, p) * b[p*ldb + j]  (p ascending, one
// multiply-add per p, so the result does not depend on where the tile lies) and then store it
// to c (row stride ldc): c = acc on the first k block, c += acc on the others. b is a packed
// micro-panel (ldb = NR) or, for products of few rows, B itself (ldb its row stride). A(r, p)
// is a[p*MR + r], a packed micro-panel, when lda is 0, else a[r*lda + p]: A's rows read in place
// (see gemm_block). micro_kernel_simd_loop also reads A by columns, a[p*lda + r], with DirectA
// false and lda not 0 (fused attention's P^T, a tile of rows of P).

template <class U, int MR, int NV, class Arch, bool DirectA>
void micro_kernel_simd_loop(index_t kc, const U* __restrict a, index_t lda, const U* __restrict b, index_t ldb,
                            U* __restrict c, index_t ldc, bool first) {
  using V = xsimd::batch<U, Arch>;
  constexpr int W = static_cast<int>(V::size);
  // C's tile is needed only after the k loop: start fetching it now so that its (cold) lines
  // arrive while the FMAs run instead of stalling the stores.
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV * W * static_cast<int>(sizeof(U)); v += 64) __builtin_prefetch(c + r * ldc + v / static_cast<int>(sizeof(U)), 1);
  V acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = V(U(0));
  const U* rows[MR];  // in place: row r's next element
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) rows[r] = a + (DirectA ? r * lda : r);
  const index_t astep = lda ? lda : MR;  // (packed or by columns)
  for (index_t p = 0; p < kc; ++p) {
    V bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = V::load_unaligned(b + v * W);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const V ar(DirectA ? rows[r][p] : a[r]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = fmadd(ar, bv[v], acc[r][v]);
    }
    if constexpr (!DirectA) a += astep;
    b += ldb;
  }
  if (first) {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v].store_unaligned(c + r * ldc + v * W);
  } else {
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) (V::load_unaligned(c + r * ldc + v * W) + acc[r][v]).store_unaligned(c + r * ldc + v * W);
  }
}

template <class U, int MR, int NV, class Arch>
void micro_kernel_simd(index_t kc, const U* a, index_t lda, const U* b, index_t ldb, U* c, index_t ldc, bool first) {
  if (lda) micro_kernel_simd_loop<U, MR, NV, Arch, true>(kc, a, lda, b, ldb, c, ldc, first);
  else micro_kernel_simd_loop<U, MR, NV, Arch, false>(kc, a, 0, b, ldb, c, ldc, first);
}

// Integers (and floating types without SIMD registers): plain loops the compiler may vectorise.
// A is always packed for them (lda 0).
template <class U, int MR, int NR, class Arch>
void micro_kernel_plain(index_t kc, const U* __restrict a, const U* __restrict b, index_t ldb, U* __restrict c,
                        index_t ldc, bool first) {
  U acc[MR][NR] = {};
  for (index_t p = 0; p < kc; ++p) {
    for (int r = 0; r < MR; ++r)
      for (int j = 0; j < NR; ++j) acc[r][j] += a[r] * b[j];
    a += MR;
    b += ldb;
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NR; ++j) c[r * ldc + j] = first ? acc[r][j] : c[r * ldc + j] + acc[r][j];
}

template <class U, class Arch>
void micro_kernel(index_t kc, const U* a, index_t lda, const U* b, index_t ldb, U* c, index_t ldc, bool first) {
  using cfg = gemm_config<U, Arch>;
  if constexpr (cfg::vectorised) micro_kernel_simd<U, cfg::mr, cfg::nv, Arch>(kc, a, lda, b, ldb, c, ldc, first);
  else micro_kernel_plain<U, cfg::mr, cfg::nr, Arch>(kc, a, b, ldb, c, ldc, first);
}

// The last, partial column panel of a vectorised product: nv < NV vectors wide, so that
// n = 10 (a classifier's output) costs one vector per k step instead of NV.
template <class U, class Arch, int V = 1>
void micro_kernel_narrow(int nv, index_t kc, const U* a, index_t lda, const U* b, index_t ldb, U* c, index_t ldc) {
  using cfg = gemm_config<U, Arch>;
  if constexpr (V < cfg::nv) {
    if (nv == V) micro_kernel_simd<U, cfg::mr, V, Arch>(kc, a, lda, b, ldb, c, ldc, true);
    else micro_kernel_narrow<U, Arch, V + 1>(nv, kc, a, lda, b, ldb, c, ldc);
  } else {
    micro_kernel_simd<U, cfg::mr, cfg::nv, Arch>(kc, a, lda, b, ldb, c, ldc, true);
  }
}

// ---- one rectangle of one product ---------------------------------------------------------------
// Whether gemm_block reads A's rows in place rather than pack them (A by rows, column stride 1,
// of the compute type, vectorised kernels). Not a broadcast A (row stride 0: every row the
// same), which the micro-kernel would take for a packed one; it is packed.
template <class T, class Arch> constexpr bool gemm_reads_a_in_place(index_t a_row_stride, index_t a_col_stride) {
  return std::is_same_v<T, gemm_compute_t<T>> && gemm_config<T, Arch>::vectorised && a_col_stride == 1 &&
         a_row_stride != 0;
}

// Rectangles of at most this many rows read B's rows in place (see gemm_block): up to here each
// element of B serves too few rows to repay packing it; from 128 rows on packing is as fast or
// faster (docs/notes.md).
inline constexpr index_t gemm_direct_b_rows = 64;
template <class T, class Arch, class Epilogue>
void gemm_block(index_t bi, index_t m0, index_t m1, index_t n0, index_t n1, index_t k, const T* a,
                index_t ars, index_t acs, const T* b, index_t brs, index_t bcs, T* c, index_t ldc,
                const Epilogue& ep) {
  using U = gemm_compute_t<T>;
  using cfg = gemm_config<U, Arch>;
  constexpr int MR = cfg::mr, NR = cfg::nr;
  // Storage and compute types differ for bf16: the sum must not be rounded to bf16 between k
  // blocks, so K is one block (and NC shrinks so that the B block still fits in L2). Integers
  // are stored through the tile buffer too, but their k blocks can be summed in T.
  constexpr bool one_k_block = std::is_same_v<T, bfloat16>;
  // Blocks of equal size: a short last block would cost a full pass over C (for KC) or over
  // the other operand's packed block (for MC, NC) for little work. KC depends on k alone, so
  // every element's sum is split the same way whatever the rectangle or the thread count.
  auto balanced = [](index_t extent, index_t most, index_t multiple) {
    const index_t blocks = (extent + most - 1) / most;
    return ((extent + blocks - 1) / blocks + multiple - 1) / multiple * multiple;
  };
  const index_t KC = one_k_block ? k : balanced(k, cfg::kc, 1);
  const index_t nc_most = gemm_block_cols<U, Arch>();
  const index_t NC = balanced(n1 - n0, one_k_block ? std::max<index_t>(NR, nc_most * cfg::kc / KC / NR * NR) : nc_most, NR);
  const index_t MC = balanced(m1 - m0, one_k_block ? std::max<index_t>(MR, cfg::mc * cfg::kc / KC / MR * MR) : cfg::mc, MR);

  U* ap = gemm_scratch<U>(0, static_cast<std::size_t>(MC * KC));
  U* bp = gemm_scratch<U>(1, static_cast<std::size_t>(NC * KC));
  alignas(gemm_align) U tile[MR * NR];
  // Few rows: each element of B serves few rows, too few to repay packing it (about 30
  // multiply-adds' worth); the micro-kernel then reads B's rows where they are (contiguous
  // rows of the compute type), and only a last, partial panel is packed.
  const bool direct_b = std::is_same_v<T, U> && cfg::vectorised && bcs == 1 && m1 - m0 <= gemm_direct_b_rows;
  // A by rows (column stride 1): the micro-kernel reads the MR rows of a tile where they are,
  // each row a contiguous run of kc values that stays in L1 while the tile's row sweeps B's
  // block, as a packed micro-panel would; only a last, partial row tile is packed (zero rows
  // past mc), which saves the time packing A would take.
  const bool direct_a = gemm_reads_a_in_place<T, Arch>(ars, acs);

  for (index_t ic = m0; ic < m1; ic += MC) {
    const index_t mc = std::min(MC, m1 - ic);
    for (index_t pc = 0; pc < k; pc += KC) {
      const index_t kc = std::min(KC, k - pc);
      const bool first = pc == 0, last = pc + kc == k;
      const index_t direct_rows = direct_a ? mc / MR * MR : 0;  // rows read from A itself
      if (direct_rows < mc)
        pack_a<MR, Arch>(a + (ic + direct_rows) * ars + pc * acs, ars, acs, mc - direct_rows, kc, ap);
      for (index_t jc = n0; jc < n1; jc += NC) {
        const index_t nc = std::min(NC, n1 - jc);
        const index_t direct = direct_b ? nc / NR * NR : 0;  // columns read from B itself
        // a partial last panel of a vectorised product is packed (and computed) only as wide
        // as the vectors it needs
        const index_t full = cfg::vectorised ? nc / NR * NR : nc;
        const int edge_nv = static_cast<int>((nc - full + cfg::width - 1) / cfg::width);
        if (direct < full) pack_b<NR, Arch>(b + pc * brs + (jc + direct) * bcs, brs, bcs, kc, full - direct, bp);
        if (edge_nv > 0)
          pack_b_edge<Arch>(b + pc * brs + (jc + full) * bcs, brs, bcs, kc, nc - full, edge_nv * cfg::width,
                            bp + (full - direct) * kc);
        // One MR x NR tile of C (rows ir, columns jr of this block).
        auto tile_at = [&](index_t ir, index_t jr) {
          const index_t mr = std::min<index_t>(MR, mc - ir);
          const U* apanel = nullptr;
          index_t lda = 0;  // packed
          if constexpr (std::is_same_v<T, U>) {
            if (ir < direct_rows) apanel = a + (ic + ir) * ars + pc, lda = ars;
          }
          if (!apanel) apanel = ap + (ir - direct_rows) * kc;
          const index_t nr = std::min<index_t>(NR, nc - jr);
          const index_t i0 = ic + ir, j0 = jc + jr;
          T* ct = c + i0 * ldc + j0;
          const U* bpanel = jr < direct ? nullptr : bp + (jr - direct) * kc;
          index_t ldb = NR;
          if constexpr (std::is_same_v<T, U>) {
            if (jr < direct) bpanel = b + pc * brs + j0, ldb = brs;
            if (mr == MR && nr == NR) {
              micro_kernel<U, Arch>(kc, apanel, lda, bpanel, ldb, ct, ldc, first);
              return;
            }
          }
          // edge tiles and converted types go through the tile buffer
          if constexpr (cfg::vectorised) {
            if (jr >= full) micro_kernel_narrow<U, Arch>(edge_nv, kc, apanel, lda, bpanel, edge_nv * cfg::width, tile, NR);
            else micro_kernel<U, Arch>(kc, apanel, lda, bpanel, ldb, tile, NR, true);
          } else {
            micro_kernel<U, Arch>(kc, apanel, lda, bpanel, ldb, tile, NR, true);
          }
          for (index_t r = 0; r < mr; ++r) {
            T* cr = ct + r * ldc;
            const U* tr = tile + r * NR;
            if (first)
              for (index_t j = 0; j < nr; ++j) cr[j] = static_cast<T>(tr[j]);
            else
              for (index_t j = 0; j < nr; ++j) cr[j] = static_cast<T>(static_cast<U>(cr[j]) + tr[j]);
          }
        };
        // Few rows (B read in place): all row tiles of a column panel in turn, so that the
        // panel (kc x NR, 24 KiB for floats) is fetched from L3 once and the next tiles find it
        // in L1/L2; row tile by row tile, each one would stream the whole B block again (from L2
        // at best, from L3 where it does not fit). With B packed, the order made no difference.
        if (direct_b) {
          for (index_t jr = 0; jr < nc; jr += NR)
            for (index_t ir = 0; ir < mc; ir += MR) tile_at(ir, jr);
          if (last)
            for (index_t r = 0; r < mc; ++r) ep(bi, ic + r, jc, nc, c + (ic + r) * ldc + jc);
        } else {
          for (index_t ir = 0; ir < mc; ir += MR) {
            for (index_t jr = 0; jr < nc; jr += NR) tile_at(ir, jr);
            if (last) {
              const index_t mr = std::min<index_t>(MR, mc - ir);
              for (index_t r = 0; r < mr; ++r) ep(bi, ic + ir + r, jc, nc, c + (ic + ir + r) * ldc + jc);
            }
          }
        }
      }
    }
  }
}

// ---- few rows times B by columns: dot products ---------------------------------------------------
// x W^T with x of a few rows (a linear layer at batch 1, a decoding step): B's columns are W's
// rows, contiguous, and each serves only those few rows, so packing B (transposing it, about 12
// multiply-adds' worth per element) cost several times the product itself. Instead each
// element of C is a dot product of a row of A with a column of B, both read in place; B is read
// once (for up to gemm_dot_rows rows), as a matrix-vector product must. Each element's sum runs
// over k in one order (vector lanes, then the lanes' sum, then the tail) whatever the split into
// threads, row tiles or column groups. Each dot product ends in a sum across the vector's lanes,
// about a dozen multiply-adds' worth, against packing's 12 per element of B shared by m rows: the
// dot products won from k of about m * (lanes) on and clearly from twice that, the rule here
// (measured for m up to 8; from 9 rows packing won).
inline constexpr index_t gemm_dot_rows = 8;
template <class T, class Arch> constexpr bool gemm_dot_applies(index_t m, index_t k, const matrix_ref<const T>& a,
                                                               const matrix_ref<const T>& b) {
  return std::is_same_v<T, gemm_compute_t<T>> && gemm_config<T, Arch>::vectorised && m <= gemm_dot_rows &&
         k >= 2 * m * gemm_config<T, Arch>::width && a.col_stride == 1 && b.row_stride == 1 && b.col_stride != 1;
}

// R rows of A (row stride ars) times NJ columns of B (column stride bcs) into C (row stride ldc).
template <int R, int NJ, class T, class Arch>
void gemm_dot_tile(index_t k, const T* a, index_t ars, const T* b, index_t bcs, T* c, index_t ldc) {
  using V = xsimd::batch<T, Arch>;
  constexpr index_t w = static_cast<index_t>(V::size);
  V acc[R][NJ];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NJ; ++j) acc[r][j] = V(T(0));
  index_t p = 0;
  for (; p + w <= k; p += w) {
    V bv[NJ];
    for (int j = 0; j < NJ; ++j) bv[j] = V::load_unaligned(b + j * bcs + p);
    for (int r = 0; r < R; ++r) {
      const V av = V::load_unaligned(a + r * ars + p);
      for (int j = 0; j < NJ; ++j) acc[r][j] = fmadd(av, bv[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < NJ; ++j) {
      T s = xsimd::hadd(acc[r][j]);
      for (index_t q = p; q < k; ++q) s += a[r * ars + q] * b[j * bcs + q];
      c[r * ldc + j] = s;
    }
}

// Columns [n0, n1) of C for all m rows, in segments whose rows then go to the epilogue.
template <int R, class T, class Arch>
void gemm_dot_rows_of(index_t n0, index_t n1, index_t k, const T* a, index_t ars, const T* b, index_t bcs, T* c,
                      index_t ldc) {
  // NJ columns at a time: R * NJ accumulators, NJ vectors of B and one of A in registers
  constexpr int NJ = std::min(8, (gemm_registers<Arch>() - 2) / (R + 1));
  index_t j = n0;
  for (; j + NJ <= n1; j += NJ) gemm_dot_tile<R, NJ, T, Arch>(k, a, ars, b + j * bcs, bcs, c + j, ldc);
  for (; j < n1; ++j) gemm_dot_tile<R, 1, T, Arch>(k, a, ars, b + j * bcs, bcs, c + j, ldc);
}

template <class T, class Arch, class Epilogue>
void gemm_dot(index_t bi, index_t m, index_t n0, index_t n1, index_t k, const T* a, index_t ars, const T* b,
              index_t bcs, T* c, index_t ldc, const Epilogue& ep) {
  constexpr index_t segment = 128;  // columns per epilogue call: C's rows still in L1
  for (index_t j0 = n0; j0 < n1; j0 += segment) {
    const index_t j1 = std::min(n1, j0 + segment);
    index_t i = 0;
    for (; i + 4 <= m; i += 4) gemm_dot_rows_of<4, T, Arch>(j0, j1, k, a + i * ars, ars, b, bcs, c + i * ldc, ldc);
    switch (m - i) {
      case 3: gemm_dot_rows_of<3, T, Arch>(j0, j1, k, a + i * ars, ars, b, bcs, c + i * ldc, ldc); break;
      case 2: gemm_dot_rows_of<2, T, Arch>(j0, j1, k, a + i * ars, ars, b, bcs, c + i * ldc, ldc); break;
      case 1: gemm_dot_rows_of<1, T, Arch>(j0, j1, k, a + i * ars, ars, b, bcs, c + i * ldc, ldc); break;
      default: break;
    }
    for (index_t r = 0; r < m; ++r) ep(bi, r, j0, j1 - j0, c + r * ldc + j0);
  }
}

// How to split one product among `parts` threads: tm x tn rectangles of whole micro-tiles.
// A thread packs the rows of A and the columns of B that its rectangle needs, so splitting N
// makes every thread pack all of A, splitting M all of B (once per MC block of its rows): the
// split chosen minimises the slowest thread's multiply-adds plus packed elements, an element of
// A costing about as much time as 24 multiply-adds and one of B 12 (A's element is gathered
// from MR rows, B's copied by vectors; see docs/notes.md). With one weight for both, a
// square product was a tie that split N, so that each thread packed all of A, and ran slower
// than with M split. A read in place (gemm_reads_a_in_place) costs about nothing beyond its
// multiply-adds, so a_weight is 0 for it and the split is the one that packs least of B.
inline constexpr double gemm_packed_a_cost = 24, gemm_packed_b_cost = 12;  // in multiply-adds
struct gemm_split {
  index_t tm = 1, tn = 1;
};
KILN_RUNTIME gemm_split choose_split(index_t parts, index_t m, index_t n, index_t k, index_t mr, index_t nr, index_t mc,
                                     double a_weight);

/// Throws std::invalid_argument for arguments gemm cannot take.
KILN_RUNTIME void check_gemm_args(index_t batch, index_t m, index_t n, index_t k, index_t c_batch_stride,
                                  index_t c_col_stride);

#if KILN_DEFINE_RUNTIME
KILN_RUNTIME index_t gemm_b_block_bytes() {
  static const index_t bytes = [] {
    if (const auto v = kiln::detail::env_integer("KILN_GEMM_B_BLOCK_BYTES", 1)) return static_cast<index_t>(*v);
    const std::int64_t l2 = cache_bytes(2);
    return l2 > 0 ? static_cast<index_t>(l2 / 2) : index_t{1} << 20;
  }();
  return bytes;
}

KILN_RUNTIME gemm_split choose_split(index_t parts, index_t m, index_t n, index_t k, index_t mr, index_t nr, index_t mc,
                                     double a_weight) {
  const index_t tiles_m = (m + mr - 1) / mr, tiles_n = (n + nr - 1) / nr;
  gemm_split best;
  double best_cost = 0;
  for (index_t tm = 1; tm <= parts; ++tm) {
    if (parts % tm) continue;
    const index_t tn = parts / tm;
    const double rows = static_cast<double>(std::min(m, (tiles_m + tm - 1) / tm * mr));
    const double cols = static_cast<double>(std::min(n, (tiles_n + tn - 1) / tn * nr));
    const double kk = static_cast<double>(k), a_packs = std::ceil(rows / static_cast<double>(mc));
    const double cost = rows * cols * kk + a_weight * rows * kk + gemm_packed_b_cost * kk * cols * a_packs;
    if (tm == 1 || cost < best_cost) {
      best_cost = cost;
      best = {tm, tn};
    }
  }
  return best;
}

KILN_RUNTIME void check_gemm_args(index_t batch, index_t m, index_t n, index_t k, index_t c_batch_stride,
                                  index_t c_col_stride) {
  if (batch < 0 || m < 0 || n < 0 || k < 0)
    throw std::invalid_argument("kiln::cpu::gemm: negative extent (batch " + std::to_string(batch) + ", m " +
                                std::to_string(m) + ", n " + std::to_string(n) + ", k " + std::to_string(k) + ")");
  if (c_col_stride != 1 && m > 0 && n > 1)
    throw std::invalid_argument("kiln::cpu::gemm: C's column stride must be 1, got " + std::to_string(c_col_stride));
  if (c_batch_stride == 0 && batch > 1 && m > 0 && n > 0)
    throw std::invalid_argument("kiln::cpu::gemm: C cannot be broadcast (batch stride 0) over a batch of " +
                                std::to_string(batch));
}
#endif  // KILN_DEFINE_RUNTIME

}  // namespace detail

/// C[b] = A[b] (m x k) * B[b] (k x n), for b in [0, batch). Uses cpu::parallel_for threads.
/// Accumulates in T (float for bf16; integers wrap). C must not overlap A or B. Arch is the
/// instruction set of the kernels; leave it to its default, the compiler's target.
template <class T, class Epilogue = no_epilogue, class Arch = detail::gemm_arch>
void gemm(index_t batch, index_t m, index_t n, index_t k, matrix_ref<const T> a, matrix_ref<const T> b,
          matrix_ref<T> c, const Epilogue& ep = {}) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bfloat16> ||
                    std::is_same_v<T, std::int32_t> || std::is_same_v<T, std::int64_t>,
                "kiln::cpu::gemm: element type must be float, double, bfloat16, int32 or int64");
  detail::check_gemm_args(batch, m, n, k, c.batch_stride, c.col_stride);
  if (batch == 0 || m == 0 || n == 0) return;
  const index_t ldc = c.row_stride;
  if (k == 0) {
    for (index_t bi = 0; bi < batch; ++bi)
      for (index_t i = 0; i < m; ++i) {
        T* row = c.data + bi * c.batch_stride + i * ldc;
        std::fill(row, row + n, T(0));
        ep(bi, i, index_t{0}, n, row);
      }
    return;
  }
  if constexpr (std::is_same_v<T, detail::gemm_compute_t<T>> && detail::gemm_config<T, Arch>::vectorised) {
    if (detail::gemm_dot_applies<T, Arch>(m, k, a, b)) {
      // threads split the columns; worth a wake-up from some hundred KiB of B on
      const double bytes = static_cast<double>(batch) * static_cast<double>(n) * static_cast<double>(k) * sizeof(T);
      const index_t threads = bytes < 256e3 ? 1 : std::max(1, num_threads());
      const index_t parts = std::min(threads / std::gcd(batch, threads), (n + 15) / 16);
      auto run = [&](index_t begin, index_t end) {
        for (index_t item = begin; item < end; ++item) {
          const index_t bi = item / parts, part = item % parts;
          const index_t n0 = n * part / parts / 16 * 16, n1 = part + 1 == parts ? n : n * (part + 1) / parts / 16 * 16;
          detail::gemm_dot<T, Arch>(bi, m, n0, n1, k, a.data + bi * a.batch_stride, a.row_stride,
                                    b.data + bi * b.batch_stride, b.col_stride, c.data + bi * c.batch_stride, ldc, ep);
        }
      };
      const index_t items = batch * parts;
      if (threads == 1 || items == 1) run(0, items);
      else parallel_for(items, 1, run, 1);
      return;
    }
  }
  using cfg = detail::gemm_config<detail::gemm_compute_t<T>, Arch>;
  const index_t tiles_m = (m + cfg::mr - 1) / cfg::mr, tiles_n = (n + cfg::nr - 1) / cfg::nr;
  // Threads only pay off beyond a few MFLOP (a wake-up costs some microseconds).
  const double flops = 2.0 * static_cast<double>(batch) * static_cast<double>(m) * static_cast<double>(n) *
                       static_cast<double>(k);
  const index_t threads = flops < 4e6 ? 1 : std::max(1, num_threads());
  // Split each product into `parts` rectangles so that batch * parts divides evenly by threads.
  const index_t parts = std::min(threads / std::gcd(batch, threads), tiles_m * tiles_n);
  const double a_weight = detail::gemm_reads_a_in_place<T, Arch>(a.row_stride, a.col_stride) ? 0 : detail::gemm_packed_a_cost;
  const detail::gemm_split sp = detail::choose_split(parts, m, n, k, cfg::mr, cfg::nr, cfg::mc, a_weight);
  auto run = [&](index_t begin, index_t end) {
    for (index_t item = begin; item < end; ++item) {
      const index_t bi = item / (sp.tm * sp.tn), rect = item % (sp.tm * sp.tn);
      const index_t pm = rect / sp.tn, pn = rect % sp.tn;
      const index_t m0 = std::min(m, tiles_m * pm / sp.tm * cfg::mr), m1 = std::min(m, tiles_m * (pm + 1) / sp.tm * cfg::mr);
      const index_t n0 = std::min(n, tiles_n * pn / sp.tn * cfg::nr), n1 = std::min(n, tiles_n * (pn + 1) / sp.tn * cfg::nr);
      if (m0 >= m1 || n0 >= n1) continue;
      detail::gemm_block<T, Arch>(bi, m0, m1, n0, n1, k, a.data + bi * a.batch_stride, a.row_stride, a.col_stride,
                            b.data + bi * b.batch_stride, b.row_stride, b.col_stride,
                            c.data + bi * c.batch_stride, ldc, ep);
    }
  };
  const index_t items = batch * sp.tm * sp.tn;
  if (threads == 1) run(0, items);
  else parallel_for(items, 1, run, 1);  // one share of the items per thread, as split above
}

}  // namespace kiln::cpu

#if defined(__NVCC__)
#pragma nv_diagnostic pop
#endif
