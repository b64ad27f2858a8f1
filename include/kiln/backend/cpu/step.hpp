// kiln/backend/cpu/step.hpp: one step of a kernel, the vocabulary every kernel's loops are
// written in: the register model (memref, sval, frame, regs, accs, mode_t; KILN_INLINE), the
// operands of a step (constant_of, scalar_of, load_at, fetch, store_at, compute), the
// reduction accumulators (acc_init, acc_add, acc_result) and one node, one step (node_step,
// red_step), which kernel_code (kernels.hpp) folds over its nodes.
//
// Apart from the loops because these templates depend only on a node's op, dtypes and sources
// and on the vector mode, never on the kernel: their instantiations are shared by every fused
// kernel (kernels.hpp) and by the nodes run one at a time (single.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "analysis.hpp"
#include "runtime.hpp"
#include "simd.hpp"

// GCC 12's false -Wmaybe-uninitialized on AVX-512 intrinsics inlined into kernel code (GCC PR
// 105593): silenced here as in kernels.hpp, which says why.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13 && !defined(KILN_KEEP_UNINIT_WARNINGS)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define KILN_STEP_DIAGNOSTIC_PUSHED
#endif

/// Lambdas of a kernel's loops are inlined into it, so that the values of its nodes stay in
/// registers instead of a stack array shared with an out-of-line lambda.
#if defined(__GNUC__)
#define KILN_INLINE __attribute__((always_inline))
#else
#define KILN_INLINE
#endif

namespace kiln::cpu::detail {

/// A kernel's view of one operand or destination: byte strides over the iteration space.
struct memref {
  std::byte* base = nullptr;
  std::array<index_t, max_rank> stride{};
};

/// A rank-0 value read once per run (a scalar leaf, an element count, a rank-0 result).
struct sval {
  double f = 0;
  std::int64_t i = 0;
};

/// Where one step reads and writes: per reference, the address of the step's first element
/// and the byte stride along the innermost axis.
template <int NM, int NS>
struct frame {
  std::array<std::byte*, NM> p{};
  std::array<index_t, NM> is{};
  std::array<sval, NS> sv{};
  bool stream = false;           ///< some reference takes non-temporal stores (streamed_refs)
  /// Per reference: the address bits that must be clear for a vector to take a non-temporal
  /// store (the vector's size less 1), all ones where it never does. The store tests this
  /// rather than a loop-invariant flag so that the compiler cannot version the loop on it: two
  /// copies of a loop may contract multiplies and adds into FMAs differently (g++'s default
  /// -ffp-contract=fast), and a result must not depend on where it is cached. run() sets it
  /// for kernels with a fast step, the only ones whose stores test it.
  std::array<std::uintptr_t, NM> stream_align{};
  std::byte* cache = nullptr;    ///< the row cache (row kernels): one slot of values per cached node
  index_t cache_stride = 0;      ///< elements per slot
  index_t cache_off = 0;         ///< element of the current row part within a slot
};

/// Registers: one value per node of the kernel.
template <class M, int N>
struct regs;
template <class C, int N>
struct regs<simd::vec<C>, N> {
  xsimd::batch<C> v[N];
  xsimd::batch_bool<C> m[N];
  template <dtype D>
  auto& at(int i) {
    if constexpr (D == dtype::boolean) return m[i];
    else return v[i];
  }
};
template <int N>
struct regs<simd::scalar, N> {
  bool b[N];
  std::int32_t i32[N];
  std::int64_t i64[N];
  float f32[N];
  double f64[N];
  template <dtype D>
  auto& at(int i) {
    if constexpr (D == dtype::boolean) return b[i];
    else if constexpr (D == dtype::i32) return i32[i];
    else if constexpr (D == dtype::i64) return i64[i];
    else if constexpr (D == dtype::f64) return f64[i];
    else return f32[i];
  }
};

/// Reduction accumulators. Vector sums of floats accumulate in double lanes (two vectors of
/// half width) a block at a time: each lane adds sum_block steps in float, then the block's
/// sum in double. The error is at most sum_block - 1 roundings of the block's magnitudes,
/// whatever the row's length: a float lane's grows with it (1e8 and then 1000 ones: 125 of
/// them lost in 1e8's lane, against at most 7 in blocks; 2^20 ones and 1 + 2^-10 alternating:
/// float lanes gave 32 with AVX2, the blocks 1024 exactly; tests/test_cpu_reduce.cpp). A
/// double add per step would keep every one, but its conversions slow the sweeps where they
/// are the bottleneck (softmax's exp sweep); a block pays for them once per sum_block steps.
inline constexpr int sum_block = 8;
template <class M, int NR>
struct accs;
template <class C, int NR>
struct accs<simd::vec<C>, NR> {
  xsimd::batch<double> s0[NR], s1[NR];
  xsimd::batch<C> m[NR];         ///< max/min; float sums: the block's partial sum
  xsimd::batch_bool<C> nan[NR];  ///< max/min: lanes that saw a NaN (the max itself ignores them)
  int n[NR];                     ///< float sums: steps in the block so far
};
template <int NR>
struct accs<simd::scalar, NR> {
  double f[NR];
  std::int64_t i[NR];
};

template <lane_type L>
using mode_t = std::conditional_t<L == lane_type::f32, simd::vec<float>,
                                  std::conditional_t<L == lane_type::f64, simd::vec<double>, simd::scalar>>;

// ---- operands -------------------------------------------------------------------------------

/// A constant of dtype D, as the eager backend holds it (stored in D, so bf16 is rounded).
template <class M, dtype D>
simd::value_t<M, D> constant_of(double v) {
  const auto c = static_cast<compute_t<D>>(storage_t<D>(static_cast<compute_t<D>>(v)));
  if constexpr (std::is_same_v<M, simd::scalar>) return c;
  else return simd::value_t<M, D>(static_cast<std::conditional_t<D == dtype::boolean, bool, typename M::elem>>(c));
}

template <class M, dtype D>
simd::value_t<M, D> scalar_of(const sval& s) {
  compute_t<D> c;
  if constexpr (D == dtype::boolean) c = s.i != 0;
  else if constexpr (is_floating(D)) c = simd::rounded<D>(static_cast<compute_t<D>>(s.f));
  else c = static_cast<compute_t<D>>(s.i);
  if constexpr (std::is_same_v<M, simd::scalar>) return c;
  else return simd::value_t<M, D>(static_cast<std::conditional_t<D == dtype::boolean, bool, typename M::elem>>(c));
}

/// Whether values of dtype D are vectors of M's lanes stored as they are (not bool, not bf16).
template <class M, dtype D>
inline constexpr bool direct_lanes = false;
template <class C, dtype D>
inline constexpr bool direct_lanes<simd::vec<C>, D> = D != dtype::boolean && std::is_same_v<storage_t<D>, C>;

/// Loads of a step. Fast: a whole vector (cnt is the width) and every reference of the kernel
/// either contiguous or broadcast (stride 0) along the innermost axis, which the loops check
/// once per segment or row: no lane count or stride arithmetic left in the loop.
template <class M, dtype D, bool Fast, class F>
[[gnu::always_inline]] inline simd::value_t<M, D> load_at(const F& f, std::size_t m, index_t j, int cnt) {
  using S = storage_t<D>;
  if constexpr (Fast && direct_lanes<M, D>) {
    if (f.is[m] == 0) return typename M::real(*reinterpret_cast<const S*>(f.p[m]));
    return M::real::load_unaligned(reinterpret_cast<const S*>(f.p[m]) + j);
  } else {
    return simd::load<M, D>(f.p[m] + j * f.is[m], f.is[m], cnt);
  }
}

template <class M, dtype D, src K, bool Fast = false, class R, class F>
[[gnu::always_inline]] inline simd::value_t<M, D> fetch(R& r, const F& f, index_t j, int cnt, int idx, double v) {
  if constexpr (K == src::reg) return r.template at<D>(idx);
  else if constexpr (K == src::constant) return constant_of<M, D>(v);
  else if constexpr (K == src::scalar) return scalar_of<M, D>(f.sv[static_cast<std::size_t>(idx)]);
  else return load_at<M, D, Fast>(f, static_cast<std::size_t>(idx), j, cnt);
}

template <class M, dtype D, bool Fast = false, class F, class V>
[[gnu::always_inline]] inline void store_at(const F& f, int idx, index_t j, int cnt, const V& v) {
  const auto m = static_cast<std::size_t>(idx);
  using S = storage_t<D>;
  if constexpr (Fast && direct_lanes<M, D>) {
    if (f.is[m] != 0) {
      S* q = reinterpret_cast<S*>(f.p[m]) + j;
      if constexpr (simd::has_stream_stores) {
        if ((reinterpret_cast<std::uintptr_t>(q) & f.stream_align[m]) == 0) {
          simd::store_stream(q, v);
          return;
        }
      }
      v.store_unaligned(q);
      return;
    }
  }
  simd::store<M, D>(f.p[m] + j * f.is[m], f.is[m], cnt, v);
}

/// The value of a pointwise node.
template <class M, ndesc D, bool Fast = false, class R, class F>
[[gnu::always_inline]] inline simd::value_t<M, D.dt> compute(R& r, const F& f, index_t j, int cnt, const nargs& a) {
  constexpr op_kind k = kind_of(D.o);
  if constexpr (k == op_kind::unary) {
    return simd::rounded<D.dt>(simd::unary<D.o>(fetch<M, D.idt[0], D.kind[0], Fast>(r, f, j, cnt, a.idx[0], a.value[0])));
  } else if constexpr (k == op_kind::binary) {
    const auto x = fetch<M, D.idt[0], D.kind[0], Fast>(r, f, j, cnt, a.idx[0], a.value[0]);
    const auto y = fetch<M, D.idt[1], D.kind[1], Fast>(r, f, j, cnt, a.idx[1], a.value[1]);
    if constexpr (is_comparison(D.o)) return simd::compare<D.o>(x, y);
    else return simd::rounded<D.dt>(simd::binary<D.o>(x, y));
  } else if constexpr (k == op_kind::ternary) {
    const auto c = fetch<M, D.idt[0], D.kind[0], Fast>(r, f, j, cnt, a.idx[0], a.value[0]);
    const auto x = fetch<M, D.idt[1], D.kind[1], Fast>(r, f, j, cnt, a.idx[1], a.value[1]);
    const auto y = fetch<M, D.idt[2], D.kind[2], Fast>(r, f, j, cnt, a.idx[2], a.value[2]);
    if constexpr (std::is_same_v<M, simd::scalar>) return c ? x : y;
    else return xsimd::select(c, x, y);
  } else if constexpr (k == op_kind::cast) {
    return simd::cast<M, D.idt[0], D.dt>(fetch<M, D.idt[0], D.kind[0], Fast>(r, f, j, cnt, a.idx[0], a.value[0]));
  } else {
    static_assert(k == op_kind::unary, "kiln: cpu: this op cannot be computed inside a fused kernel");
  }
}

// ---- reductions -----------------------------------------------------------------------------

template <class M, op O, dtype D, class A>
[[gnu::always_inline]] inline void acc_init(A& acc, int k) {
  if constexpr (std::is_same_v<M, simd::scalar>) {
    if constexpr (is_floating(D)) {
      acc.f[k] = O == op::sum ? 0.0 : O == op::amax ? -std::numeric_limits<double>::infinity()
                                                    : std::numeric_limits<double>::infinity();
    } else {
      acc.i[k] = O == op::sum ? 0 : O == op::amax ? std::numeric_limits<std::int64_t>::lowest()
                                                  : std::numeric_limits<std::int64_t>::max();
    }
  } else {
    using C = typename M::elem;
    if constexpr (O == op::sum) {
      acc.s0[k] = xsimd::batch<double>(0.0);
      acc.s1[k] = xsimd::batch<double>(0.0);
      acc.m[k] = xsimd::batch<C>(C(0));
      acc.n[k] = 0;
    } else {
      acc.m[k] = xsimd::batch<C>(O == op::amax ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity());
      acc.nan[k] = xsimd::batch_bool<C>(false);
    }
  }
}

/// A float sum's block into its double lanes.
template <class A>
[[gnu::always_inline]] inline void flush_block(A& acc, int k) {
  xsimd::batch<double> lo, hi;
  simd::widen(acc.m[k], lo, hi);
  acc.s0[k] += lo;
  acc.s1[k] += hi;
  acc.m[k] = 0.0f;
  acc.n[k] = 0;
}

template <class M, op O, dtype D, bool LanesReduce, class A, class V>
[[gnu::always_inline]] inline void acc_add(A& acc, int k, V v, int cnt) {
  if constexpr (std::is_same_v<M, simd::scalar>) {
    (void)cnt;
    if constexpr (is_floating(D)) {
      if constexpr (O == op::sum) acc.f[k] += static_cast<double>(v);
      else acc.f[k] = simd::binary<O == op::amax ? op::max : op::min>(acc.f[k], static_cast<double>(v));
    } else {
      const auto x = static_cast<std::int64_t>(v);
      if constexpr (O == op::sum) acc.i[k] = simd::binary<op::add>(acc.i[k], x);
      else acc.i[k] = simd::binary<O == op::amax ? op::max : op::min>(acc.i[k], x);
    }
  } else {
    using C = typename M::elem;
    constexpr int W = M::width;
    if constexpr (LanesReduce) {  // lanes past the row's end must not count
      if (cnt < W) {
        const C id = O == op::sum ? C(0) : O == op::amax ? -std::numeric_limits<C>::infinity()
                                                         : std::numeric_limits<C>::infinity();
        v = xsimd::select(simd::first_lanes<M>(cnt), v, xsimd::batch<C>(id));
      }
    }
    if constexpr (O == op::sum) {
      if constexpr (std::is_same_v<C, double>) {
        acc.s0[k] += v;
      } else {
        acc.m[k] += v;
        if (++acc.n[k] == sum_block) flush_block(acc, k);
      }
    } else {
      acc.m[k] = O == op::amax ? xsimd::max(acc.m[k], v) : xsimd::min(acc.m[k], v);
      acc.nan[k] = acc.nan[k] | xsimd::isnan(v);
    }
  }
}

/// The reduction's result: one value per row broadcast over the lanes (LanesReduce), or one
/// per lane.
template <class M, op O, dtype D, bool LanesReduce, class A>
[[gnu::always_inline]] inline simd::value_t<M, D> acc_result(A& acc, int k) {
  if constexpr (std::is_same_v<M, simd::scalar>) {
    if constexpr (D == dtype::boolean) return acc.i[k] != 0;
    else if constexpr (is_floating(D)) return simd::rounded<D>(static_cast<compute_t<D>>(acc.f[k]));
    else return static_cast<compute_t<D>>(acc.i[k]);
  } else {
    using C = typename M::elem;
    constexpr int W = M::width;
    constexpr int H = static_cast<int>(xsimd::batch<double>::size);
    if constexpr (O == op::sum) {
      if constexpr (!std::is_same_v<C, double>) flush_block(acc, k);
      alignas(64) double lo[H], hi[H];
      acc.s0[k].store_aligned(lo);
      acc.s1[k].store_aligned(hi);
      if constexpr (LanesReduce) {
        double total = 0;
        for (int l = 0; l < H; ++l) total += lo[l];
        if constexpr (!std::is_same_v<C, double>)
          for (int l = 0; l < H; ++l) total += hi[l];
        return simd::rounded<D>(xsimd::batch<C>(static_cast<C>(total)));
      } else if constexpr (std::is_same_v<C, double>) {
        return acc.s0[k];
      } else {
        alignas(64) float t[W];
        for (int l = 0; l < H; ++l) {
          t[l] = static_cast<float>(lo[l]);
          t[H + l] = static_cast<float>(hi[l]);
        }
        return simd::rounded<D>(xsimd::batch<float>::load_aligned(t));
      }
    } else {
      const xsimd::batch<C> m = xsimd::select(acc.nan[k], xsimd::batch<C>(std::numeric_limits<C>::quiet_NaN()), acc.m[k]);
      if constexpr (LanesReduce) {
        alignas(64) C t[W];
        m.store_aligned(t);
        C best = t[0];
        for (int l = 1; l < W; ++l) best = simd::binary<O == op::amax ? op::max : op::min>(best, t[l]);
        return xsimd::batch<C>(best);
      } else {
        return m;
      }
    }
  }
}

// ---- one node, one step ----------------------------------------------------------------------

template <class M, ndesc D, act X, bool LanesReduce, bool Fast, class R, class A, class F>
[[gnu::always_inline]] inline void node_step(R& r, A& acc, const F& f, index_t j, int cnt, int self, const nargs a) {
  if constexpr (X == act::none) {
    (void)r, (void)acc, (void)f, (void)j, (void)cnt, (void)self, (void)a;
  } else if constexpr (X == act::load_c) {
    r.template at<D.dt>(self) = load_at<M, D.dt, Fast>(f, static_cast<std::size_t>(a.idx[0]), j, cnt);
  } else if constexpr (X == act::store) {
    store_at<M, D.dt, Fast>(f, a.out, j, cnt, r.template at<D.dt>(self));
  } else if constexpr (X == act::compute_cache || X == act::load_cache || X == act::load_cache_store) {
    using C = typename M::elem;
    C* at = reinterpret_cast<C*>(f.cache) + a.cache * f.cache_stride + f.cache_off + j;
    auto& v = r.template at<D.dt>(self);
    if constexpr (X == act::compute_cache) {
      v = compute<M, D, Fast>(r, f, j, cnt, a);
      v.store_unaligned(at);  // a partial vector spills into the next part, written after this
    } else {
      v = M::real::load_unaligned(at);
      if constexpr (X == act::load_cache_store) store_at<M, D.dt, Fast>(f, a.out, j, cnt, v);
    }
  } else if constexpr (X == act::accumulate) {
    acc_add<M, D.o, D.dt, LanesReduce>(acc, a.acc, fetch<M, D.idt[0], D.kind[0], Fast>(r, f, j, cnt, a.idx[0], a.value[0]), cnt);
  } else {
    r.template at<D.dt>(self) = compute<M, D, Fast>(r, f, j, cnt, a);
    if constexpr (X == act::compute_store) store_at<M, D.dt, Fast>(f, a.out, j, cnt, r.template at<D.dt>(self));
  }
}

template <class M, ndesc D, bool Active, bool Init, bool LanesReduce, class R, class A>
[[gnu::always_inline]] inline void red_step(R& r, A& acc, int self, int slot) {
  if constexpr (Active) {
    if constexpr (Init) acc_init<M, D.o, D.dt>(acc, slot);
    else r.template at<D.dt>(self) = acc_result<M, D.o, D.dt, LanesReduce>(acc, slot);
  } else {
    (void)r, (void)acc, (void)self, (void)slot;
  }
}

}  // namespace kiln::cpu::detail

#ifdef KILN_STEP_DIAGNOSTIC_PUSHED
#pragma GCC diagnostic pop
#undef KILN_STEP_DIAGNOSTIC_PUSHED
#endif
