// kiln/backend/cpu/kernels.hpp: one loop nest per kernel of a frozen schedule, instantiated at
// compile time from the schedule constant.
//
// kernel_code<S, K> runs kernel K of schedule S. Its node list, ops, dtypes and operand sources
// are constants (analysis.hpp); one step of a pass evaluates the kernel's nodes, in graph
// order, on one vector of the innermost axis of the iteration space, holding every value in
// registers (`regs`) and storing only the values the plan writes (and something reads). The
// step is a fold over the nodes, each calling node_step<mode, desc, action>, whose template
// arguments are small (op, dtypes, sources), so kernels share instantiations and symbol names
// stay short. Only the innermost loops are compiled per kernel (segment, row_task, epilogue);
// setting up shapes, memory references and threads is shared code, not templates, because
// build time is part of the cost of every expression.
//
// Operands in memory are strided references over the iteration space (`memref`: a base and a
// byte stride per axis): a contiguous innermost axis loads a vector, a broadcast one (stride 0)
// a scalar, anything else gathers lane by lane; the last vector of a row is a partial one, so
// every element goes through the same code whatever the thread split. Where every reference of
// a segment or row is contiguous or broadcast along the innermost axis (checked once), whole
// vectors take a fast step with no lane count or stride arithmetic; only the rest (other
// strides, the partial vector, bf16 and bool) goes through the general loads and stores.
// Kernels of more than 64 nodes have no fast step (see fast_step_nodes: build time). Pointwise
// and row kernels larger than the last-level cache store their full-space results with
// non-temporal stores (stream_threshold, streamed_refs).
//
//   pointwise: the space, axes merged where every reference allows it, split into rows and
//              chunks of rows over threads;
//   reduction: rows (the kept axes) over threads; each row swept once per reduction stage and
//              once to write full-space results, with vector accumulators (float sums add
//              blocks of 8 float steps in double lanes: accs); a value an earlier
//              sweep computed with a transcendental function is kept in a per-row cache for
//              the final sweep (softmax computes each exp once). When the innermost axis is
//              kept, lanes run across it (a column reduction) instead;
//   matmul:    kiln::cpu::gemm with the operands' strides, the kernel's other nodes applied to
//              each finished row segment of the product (the epilogue), the GEMM instantiated
//              once per element type (the epilogue is called through a pointer).
// A kernel whose run-time shapes do not have the structure fusion assumed (dynamic extents
// that turn out different) runs node by node instead, as do kernels with concat or iota, and
// kernels that read one of their own values through a view. gather, scatter_add, unfold, fold
// and rand are kernels of their own, each a routine of movement.hpp.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <string>
#include <mutex>
#include <utility>

#include "../../core/env.hpp"
#include "analysis.hpp"
#include "cache.hpp"
#include "gemm.hpp"
#include "movement.hpp"
#include "parallel.hpp"
#include "runtime.hpp"
#include "simd.hpp"

// GCC 12 reports xsimd's and kiln's AVX-512 intrinsics as "may be used uninitialized" where
// they are inlined into these kernels: its intrinsics pass _mm512_undefined_ps(), a
// self-initialised variable, as the unused merge operand (GCC PR 105593, fixed in GCC 13). A
// user's -Wall build of a softmax got 16 such warnings (36 with the pipelined final sweep of
// row_task). They are silenced for the kernels' code only, and only on GCC before 13; define
// KILN_KEEP_UNINIT_WARNINGS to see them.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13 && !defined(KILN_KEEP_UNINIT_WARNINGS)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define KILN_KERNELS_DIAGNOSTIC_PUSHED
#endif

namespace kiln::cpu {

/// What the CPU backend ran on this thread since the counts were last reset: kernels, and how
/// many of them ran as one fused loop nest or node by node, and how many fused ones wrote a
/// result with non-temporal stores (stream_threshold), and how many row kernels' calls qualified
/// for running each row's final sweep in the next row's sweep (kernel_code::pipelined); and
/// `deferred`: the rows whose final sweep this thread deferred so (counted on the thread that
/// ran the rows, which is the caller's with one thread). Tests use it to check that a plan's
/// kernels run as planned.
struct run_stats {
  long kernels = 0, fused = 0, node_by_node = 0, streamed = 0, pipelined = 0, deferred = 0;
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

// ---- threads --------------------------------------------------------------------------------

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

// ---- node by node ------------------------------------------------------------------------------

/// Kernels whose run-time shapes do not fit one loop nest, and kernels with concat or iota, run
/// their nodes one at a time into temporaries. Each node's code depends only on its op and
/// dtypes, so these instantiations are shared by every kernel and expression.
template <ndesc D>
void single_pointwise(state& st, int x) {
  using M = simd::scalar;
  const node& n = st.at(x);
  const view out = st.dest[static_cast<std::size_t>(x)];
  frame<4, 1> f;
  std::array<std::byte*, 4> base{};
  std::array<dims, 4> strides{};
  for (int j = 0; j < n.nin(); ++j) {
    const int in = n.in[static_cast<std::size_t>(j)];
    const node& y = st.at(in);
    view v;
    if (y.o == op::constant || y.o == op::numel) {  // a value, not memory: one element of it
      v = st.temp(y.dt, dims{});
      fill(v, y.o == op::numel ? static_cast<double>(st.numel_of(in)) : y.value);
    } else {
      v = st.view_of(in);
    }
    base[static_cast<std::size_t>(j)] = v.p;
    strides[static_cast<std::size_t>(j)] = broadcast_strides(v, out.shape);
    for (int a = 0; a < out.shape.rank; ++a) strides[static_cast<std::size_t>(j)].e[a] *= static_cast<index_t>(size_of(v.dt));
  }
  base[3] = out.p;
  strides[3] = out.strides;
  for (int a = 0; a < out.shape.rank; ++a) strides[3].e[a] *= static_cast<index_t>(size_of(out.dt));
  nargs a;
  a.idx = {0, 1, 2};
  a.out = 3;
  regs<M, 1> r;
  accs<M, 1> acc;
  for_each_index(out.shape, [&](const index_t* idx) {
    for (std::size_t j = 0; j < 4; ++j) {
      index_t off = 0;
      for (int d = 0; d < out.shape.rank; ++d) off += idx[d] * strides[j].e[d];
      f.p[j] = base[j] + off;
    }
    node_step<M, D, act::compute_store, false, false>(r, acc, f, 0, 1, 0, a);
  });
}

template <op O, dtype D>
void single_reduce(state& st, int x) {
  using M = simd::scalar;
  const node& n = st.at(x);
  const view in = st.view_of(n.in[0]);
  const view out = st.dest[static_cast<std::size_t>(x)];
  // kept and reduced axes: extents, the input's strides, and the output's strides (kept only)
  dims kept, red, kst, rst, ost;
  for (int a = 0, o = 0; a < in.shape.rank; ++a) {
    if (n.axes & (1u << a)) {
      red.e[red.rank] = in.shape.e[a];
      rst.e[red.rank++] = in.strides.e[a];
      if (n.keepdim) ++o;
    } else {
      kept.e[kept.rank] = in.shape.e[a];
      kst.e[kept.rank] = in.strides.e[a];
      ost.e[kept.rank++] = out.strides.e[o++];
    }
  }
  accs<M, 1> acc;
  const auto es = static_cast<index_t>(size_of(D));
  for_each_index(kept, [&](const index_t* k) {
    index_t base = 0, o = 0;
    for (int a = 0; a < kept.rank; ++a) {
      base += k[a] * kst.e[a];
      o += k[a] * ost.e[a];
    }
    acc_init<M, O, D>(acc, 0);
    for_each_index(red, [&](const index_t* q) {
      index_t off = base;
      for (int a = 0; a < red.rank; ++a) off += q[a] * rst.e[a];
      acc_add<M, O, D, true>(acc, 0, simd::load<M, D>(in.p + off * es, 0, 1), 1);
    });
    simd::store<M, D>(out.p + o * es, 0, 1, acc_result<M, O, D, true>(acc, 0));
  });
}

/// An epilogue behind a function pointer, so that the GEMM is instantiated once per element
/// type, not once per kernel: fn(ctx, outer batch index, b, i, j0, count, c).
template <class T>
struct epilogue_ref {
  void (*fn)(const void*, const index_t*, index_t, index_t, index_t, index_t, T*) = nullptr;
  const void* ctx = nullptr;
  const index_t* outer = nullptr;
  void operator()(index_t b, index_t i, index_t j0, index_t count, T* c) const {
    if (fn) fn(ctx, outer, b, i, j0, count, c);
  }
};

/// C = A B over the output's batch axes (broadcast), the last batch axis batched by the GEMM,
/// the others looped here; c must have contiguous rows.
template <dtype D>
void matmul_views(const view& a, const view& b, const view& c, epilogue_ref<storage_t<D>> ep) {
  using T = storage_t<D>;
  const int r = c.shape.rank, nb = r - 2;
  const index_t m = c.shape.e[r - 2], n = c.shape.e[r - 1], k = a.shape.e[a.shape.rank - 1];
  dims batch = c.shape, ab = a.shape, bb = b.shape;
  batch.rank = nb;
  ab.rank -= 2;
  bb.rank -= 2;
  const dims sa = broadcast_strides({a.p, a.dt, ab, a.strides}, batch);
  const dims sb = broadcast_strides({b.p, b.dt, bb, b.strides}, batch);
  dims outer = batch;
  outer.rank = nb > 0 ? nb - 1 : 0;
  const index_t inner_batch = nb > 0 ? batch.e[nb - 1] : 1;
  const index_t ia = nb > 0 ? sa.e[nb - 1] : 0, ib = nb > 0 ? sb.e[nb - 1] : 0, ic = nb > 0 ? c.strides.e[nb - 1] : 0;
  for_each_index(outer, [&](const index_t* idx) {
    index_t oa = 0, ob = 0, oc = 0;
    for (int d = 0; d < outer.rank; ++d) {
      oa += idx[d] * sa.e[d];
      ob += idx[d] * sb.e[d];
      oc += idx[d] * c.strides.e[d];
    }
    const matrix_ref<const T> ra{reinterpret_cast<const T*>(a.p) + oa, ia, a.strides.e[a.shape.rank - 2],
                                 a.strides.e[a.shape.rank - 1]};
    const matrix_ref<const T> rb{reinterpret_cast<const T*>(b.p) + ob, ib, b.strides.e[b.shape.rank - 2],
                                 b.strides.e[b.shape.rank - 1]};
    const matrix_ref<T> rc{reinterpret_cast<T*>(c.p) + oc, ic, c.strides.e[r - 2], 1};
    epilogue_ref<T> e = ep;
    e.outer = idx;
    gemm<T>(inner_batch, m, n, k, ra, rb, rc, e);
  });
}

/// Rows of v are contiguous (what the GEMM writes).
inline bool contiguous_rows(const view& v) {
  return v.p && (v.shape.e[v.shape.rank - 1] <= 1 || v.strides.e[v.shape.rank - 1] == 1);
}

template <dtype D>
void single_matmul(state& st, int x) {
  const node& n = st.at(x);
  const view c = st.dest[static_cast<std::size_t>(x)];
  view t = contiguous_rows(c) ? c : st.temp(D, c.shape);
  t.strides.e[t.shape.rank - 1] = 1;
  matmul_views<D>(st.view_of(n.in[0]), st.view_of(n.in[1]), t, {});
  if (t.p != c.p) copy_elements(c, t);
}

template <dtype D>
void single_iota(state& st, int x) {
  const view out = st.dest[static_cast<std::size_t>(x)];
  const auto es = static_cast<index_t>(size_of(D));
  for (index_t i = 0; i < out.shape.e[0]; ++i)
    simd::store<simd::scalar, D>(out.p + i * out.strides.e[0] * es, 0, 1, static_cast<compute_t<D>>(i));
}

inline void single_concat(state& st, int x) {
  const node& n = st.at(x);
  const view out = st.dest[static_cast<std::size_t>(x)];
  const view a = st.view_of(n.in[0]), b = st.view_of(n.in[1]);
  view lo = out, hi = out;
  lo.shape = a.shape;
  hi.shape = b.shape;
  hi.p = out.p + a.shape.e[n.axis] * out.strides.e[n.axis] * static_cast<index_t>(size_of(out.dt));
  copy_elements(lo, a);
  copy_elements(hi, b);
}

/// gather, scatter_add, unfold, fold, rand: their routines (movement.hpp), not templates.
inline void single_movement(state& st, int x) {
  const node& n = st.at(x);
  const view out = st.dest[static_cast<std::size_t>(x)];
  switch (n.o) {
    case op::gather: run_gather(st.view_of(n.in[0]), st.view_of(n.in[1]), out); break;
    case op::scatter_add: run_scatter_add(st.view_of(n.in[0]), st.view_of(n.in[1]), out); break;
    case op::unfold: run_unfold(st.view_of(n.in[0]), out, window_of(n), n.value); break;
    case op::fold: run_fold(st.view_of(n.in[0]), out, window_of(n)); break;
    case op::rand: run_rand(st.view_of(n.in[1]), out, n.axes); break;
    default: throw std::logic_error("kiln: cpu: no routine for op " + std::string(name(n.o)));
  }
}

/// The descriptor of node x run alone: every operand from memory (constants and counts as
/// one-element temporaries), so one instantiation serves every node of that op and dtypes.
template <class Sched>
constexpr ndesc single_desc(const Sched& s, int x) {
  const node& n = s.g.nodes[static_cast<std::size_t>(x)];
  ndesc d;
  d.o = n.o;
  d.dt = n.dt;
  for (int j = 0; j < n.nin() && j < 3; ++j) {
    d.idt[static_cast<std::size_t>(j)] = s.g.nodes[static_cast<std::size_t>(n.in[static_cast<std::size_t>(j)])].dt;
    d.kind[static_cast<std::size_t>(j)] = src::mem;
  }
  return d;
}

/// Runs node x alone, into its destination or a new temporary.
template <ndesc D>
void run_single(state& st, int x) {
  view& out = st.dest[static_cast<std::size_t>(x)];
  if (!out.p) out = st.temp(D.dt, st.shape[static_cast<std::size_t>(x)]);
  if constexpr (is_pointwise(D.o)) single_pointwise<D>(st, x);
  else if constexpr (kind_of(D.o) == op_kind::reduce) single_reduce<D.o, D.dt>(st, x);
  else if constexpr (D.o == op::matmul) single_matmul<D.dt>(st, x);
  else if constexpr (D.o == op::iota) single_iota<D.dt>(st, x);
  else if constexpr (D.o == op::concat) single_concat(st, x);
  else if constexpr (is_standalone(D.o)) single_movement(st, x);
  else static_assert(D.o == op::concat, "kiln: cpu: no single-node rule for this op");
}

// ---- the generic part of a kernel run ----------------------------------------------------------

/// A kernel's analysis as run-time values: what the code shared by all kernels needs.
struct kernel_desc {
  passes::kernel_kind kind = passes::kernel_kind::pointwise;
  int rank = 1;
  std::uint32_t axes = 0;
  bool lanes_reduce = false;
  int width = 1;
  int nodes = 0;
  const int* node = nullptr;
  const role* where = nullptr;
  const bool* reduction = nullptr;
  const nargs* args = nullptr;
  int mems = 0;
  const int* mem_node = nullptr;
  const bool* mem_nokeep = nullptr;
  const bool* mem_out = nullptr;
  int c_mem = -1;
  int scalars = 0;
  const int* scalar_node = nullptr;
  bool check = true;  ///< run-time shapes may differ from what fusion assumed
};

/// The run-time iteration space (rank >= 1), or false if the kernel's nodes do not have the
/// shapes fusion assumed (dynamic extents that differ at run time).
inline bool space_of(const state& st, const kernel_desc& k, dims& space) {
  auto shp = [&](int p) -> const dims& { return st.shape[static_cast<std::size_t>(k.node[p])]; };
  bool ok = true;
  if (k.kind == passes::kernel_kind::reduction) {
    int first = 0;
    while (!k.reduction[first]) ++first;
    space = st.shape[static_cast<std::size_t>(st.at(k.node[first]).in[0])];
    if (k.check) {
      const std::uint32_t axes = space.rank > 0 ? k.axes : 0;
      const dims keep = reduce_shape(space, axes, true).shape, nokeep = reduce_shape(space, axes, false).shape;
      for (int p = 0; p < k.nodes && ok; ++p) {
        const node& n = st.at(k.node[p]);
        if (k.reduction[p]) {
          ok = st.shape[static_cast<std::size_t>(n.in[0])] == space;
          continue;
        }
        const dims& target = k.where[p] == role::full ? space : k.where[p] == role::keep ? keep : nokeep;
        const broadcast_result b = broadcast(shp(p), target);
        ok = b.ok && b.shape == target && (k.args[p].out < 0 || shp(p) == target);
      }
    }
  } else if (k.kind == passes::kernel_kind::matmul) {
    space = shp(0);
    if (k.check)
      for (int p = 1; p < k.nodes && ok; ++p) ok = shp(p) == space;
  } else {
    space = shp(0);
    if (k.check) {
      for (int p = 1; p < k.nodes && ok; ++p) {
        const broadcast_result b = broadcast(space, shp(p));
        ok = b.ok && b.shape.rank == space.rank;
        space = b.shape;
      }
      for (int p = 0; p < k.nodes && ok; ++p) ok = k.args[p].out < 0 || shp(p) == space;
    }
  }
  if (space.rank == 0) space = dims{1};
  return ok;
}

/// Byte strides of view v over the iteration space: right-aligned, or through the kept axes
/// for values of a reduction's result space without the reduced axes.
inline memref ref_of(const view& v, bool nokeep, const dims& space, std::uint32_t axes) {
  memref m;
  m.base = v.p;
  const auto es = static_cast<index_t>(size_of(v.dt));
  int kept[max_rank], nk = 0;
  for (int d = 0; d < space.rank; ++d)
    if (!nokeep || !(axes & (1u << d))) kept[nk++] = d;
  for (int c = 0; c < nk; ++c) {
    const int vd = v.shape.rank - nk + c;
    m.stride[static_cast<std::size_t>(kept[c])] = vd < 0 || v.shape.e[vd] == 1 ? 0 : v.strides.e[vd] * es;
  }
  return m;
}

/// The memory references of a kernel (the product of a matmul is set by the matmul driver).
inline void make_refs(state& st, const kernel_desc& k, const dims& space, memref* mr) {
  for (int m = 0; m < k.mems; ++m) {
    if (m == k.c_mem) continue;
    const int x = k.mem_node[m];
    const view v = k.mem_out[m] ? st.dest[static_cast<std::size_t>(x)] : st.view_of(x);
    mr[m] = ref_of(v, k.mem_nokeep[m], space, k.axes);
  }
}

inline void load_scalars(state& st, const kernel_desc& k, sval* sv) {
  for (int q = 0; q < k.scalars; ++q) {
    const int x = k.scalar_node[q];
    if (st.at(x).o == op::numel) {
      const index_t c = st.numel_of(x);
      sv[q] = {static_cast<double>(c), c};
    } else {
      sv[q] = load_sval(st.view_of(x));
    }
  }
}

/// A pointwise kernel's loop over [j0, j1) of the innermost axis, from the addresses p and
/// innermost byte strides is of its references.
using segment_fn = void (*)(const void* ctx, std::byte* const* p, const index_t* is, index_t j0, index_t j1);

/// Pointwise kernels: axes merged where every reference allows it, rows and chunks of rows
/// over threads.
inline void run_pointwise(const dims& space, int nm, const memref* mr, segment_fn seg, const void* ctx) {
  if (space.numel() == 0) return;
  int r = 0;
  index_t ext[max_rank];
  std::vector<std::array<index_t, max_rank>> str(static_cast<std::size_t>(nm));
  for (int d = 0; d < space.rank; ++d) {
    const index_t e = space.e[d];
    if (e == 1) continue;
    bool merge = r > 0;
    for (int m = 0; m < nm && merge; ++m)
      merge = str[static_cast<std::size_t>(m)][static_cast<std::size_t>(r - 1)] == mr[m].stride[static_cast<std::size_t>(d)] * e;
    const int at = merge ? r - 1 : r;
    if (merge) ext[at] *= e;
    else ext[r++] = e;
    for (int m = 0; m < nm; ++m) str[static_cast<std::size_t>(m)][static_cast<std::size_t>(at)] = mr[m].stride[static_cast<std::size_t>(d)];
  }
  if (r == 0) {
    r = 1;
    ext[0] = 1;
    for (auto& s : str) s[0] = 0;
  }
  const index_t inner = ext[r - 1];
  index_t rows = 1;
  for (int d = 0; d < r - 1; ++d) rows *= ext[d];
  const index_t chunk = inner <= pointwise_chunk ? inner : pointwise_chunk;
  const index_t per_row = (inner + chunk - 1) / chunk;
  run_tasks(rows * per_row, std::max<index_t>(1, parallel_grain / chunk), [&](index_t b, index_t e) {
    std::vector<std::byte*> p(static_cast<std::size_t>(nm));
    std::vector<index_t> is(static_cast<std::size_t>(nm)), off(static_cast<std::size_t>(nm), 0);
    index_t idx[max_rank]{};
    index_t row = b / per_row, c = b % per_row;
    for (int d = r - 2; d >= 0; --d) {
      idx[d] = row % ext[d];
      row /= ext[d];
    }
    for (std::size_t m = 0; m < off.size(); ++m) {
      for (int d = 0; d < r - 1; ++d) off[m] += idx[d] * str[m][static_cast<std::size_t>(d)];
      is[m] = str[m][static_cast<std::size_t>(r - 1)];
    }
    for (index_t t = b; t < e; ++t) {
      for (std::size_t m = 0; m < off.size(); ++m) p[m] = mr[m].base + off[m];
      seg(ctx, p.data(), is.data(), c * chunk, std::min(inner, (c + 1) * chunk));
      if (++c == per_row) {
        c = 0;
        for (int d = r - 2; d >= 0; --d) {  // next row
          for (std::size_t m = 0; m < off.size(); ++m) off[m] += str[m][static_cast<std::size_t>(d)];
          if (++idx[d] < ext[d]) break;
          for (std::size_t m = 0; m < off.size(); ++m) off[m] -= ext[d] * str[m][static_cast<std::size_t>(d)];
          idx[d] = 0;
        }
      }
    }
  });
}

/// Sets align[m] (frame::stream_align) for the references a pointwise kernel, or a row kernel
/// with lanes along its rows, stores with non-temporal stores (see stream_threshold),
/// vector_bytes - 1, and all ones for the others;
/// returns whether there are any. None unless its references span at least the threshold
/// (counted as n elements for every reference that is not one scalar for the whole space: an
/// upper bound), and then its results that are written once per element of the space (no zero
/// stride) and are contiguous along the innermost axis. size: bytes per element of each
/// reference.
/// A streamed store writes its line without first reading it, as an ordinary store must, so
/// data that will not stay in cache costs one trip to memory, not two. Row kernels: their
/// final sweep streams instead of prefetching its lines for writing, and the stores are fenced
/// once per thread's run of rows (run_rows).
inline bool streamed_refs(const dims& space, const kernel_desc& k, const memref* mr, const index_t* size,
                          std::uintptr_t vector_bytes, std::uintptr_t* align) {
  std::fill(align, align + k.mems, ~std::uintptr_t{0});
  const bool rows = k.kind == passes::kernel_kind::reduction && k.lanes_reduce;
  if (!simd::has_stream_stores || (k.kind != passes::kernel_kind::pointwise && !rows)) return false;
  const index_t n = space.numel();
  if (n == 0) return false;
  std::int64_t bytes = 0;
  for (int m = 0; m < k.mems; ++m) {
    bool varies = false;
    for (int d = 0; d < space.rank; ++d) varies = varies || mr[m].stride[static_cast<std::size_t>(d)] != 0;
    if (varies) bytes += static_cast<std::int64_t>(n) * size[m];
  }
  if (bytes < stream_threshold()) return false;
  bool any = false;
  for (int m = 0; m < k.mems; ++m) {
    if (!k.mem_out[m] || mr[m].stride[static_cast<std::size_t>(space.rank - 1)] != size[m]) continue;
    bool every = true;
    for (int d = 0; d < space.rank; ++d) every = every && (mr[m].stride[static_cast<std::size_t>(d)] != 0 || space.e[d] == 1);
    if (every) {
      align[m] = vector_bytes - 1;
      any = true;
    }
  }
  return any;
}

/// A row kernel's geometry: extents, reduced axes, byte strides of each reference.
struct rows_geometry {
  int rank = 1, nr = 0, outer_red = 0;
  index_t ext[max_rank]{};
  int red[max_rank]{};
  const memref* mr = nullptr;
  int nm = 0;
};

/// One task of a row kernel: the kept position (byte offsets koff of each reference), and for
/// lanes across the innermost kept axis, its first element j0 and lane count; knext: the kept
/// position of the task this thread runs next (null if none), whose rows it may prefetch;
/// first: whether it is the first task of its chunk (a thread may run several chunks).
using row_task_fn = void (*)(const void* ctx, const rows_geometry& g, const index_t* koff, const index_t* knext,
                             index_t j0, int cnt, bool first);

/// Row kernels: each task is one row (lanes along a reduced innermost axis) or one block of W
/// columns (lanes across a kept innermost axis); tasks go to threads, a reduction never splits.
/// stream: some of the tasks' stores are non-temporal, fenced once per thread's run of tasks
/// (a fence per row waits for each row's stores to reach memory).

inline void run_rows(const dims& space, const kernel_desc& k, const memref* mr, row_task_fn fn, const void* ctx,
                     bool stream) {
  rows_geometry g;
  g.rank = space.rank;
  g.mr = mr;
  g.nm = k.mems;
  int kept[max_rank], nk = 0;
  for (int d = 0; d < space.rank; ++d) {
    g.ext[d] = space.e[d];
    if (k.axes & (1u << d)) g.red[g.nr++] = d;
    else kept[nk++] = d;
  }
  const bool lr = k.lanes_reduce;
  const int W = k.width, inner = space.rank - 1;
  g.outer_red = lr ? g.nr - 1 : g.nr;
  const int task_axes = lr ? nk : nk - 1;
  const index_t blocks = lr ? 1 : (g.ext[inner] + W - 1) / W;
  index_t tasks = blocks, work = 1;
  for (int a = 0; a < task_axes; ++a) tasks *= g.ext[kept[a]];
  for (int a = 0; a < g.nr; ++a) work *= g.ext[g.red[a]];
  run_tasks(tasks, std::max<index_t>(1, parallel_grain / std::max<index_t>(1, work * (lr ? 1 : W))), [&](index_t b, index_t e) {
    std::vector<index_t> koff(static_cast<std::size_t>(k.mems)), knext(koff.size());
    auto offsets = [&](index_t t, std::vector<index_t>& o) {
      index_t rest = t / blocks;
      std::fill(o.begin(), o.end(), 0);
      for (int a = task_axes - 1; a >= 0; --a) {
        const int d = kept[a];
        const index_t i = rest % g.ext[d];
        rest /= g.ext[d];
        for (std::size_t m = 0; m < o.size(); ++m) o[m] += i * mr[m].stride[static_cast<std::size_t>(d)];
      }
    };
    if (b < e) offsets(b, koff);
    for (index_t t = b; t < e; ++t) {
      const index_t j0 = (t % blocks) * W;
      if (t + 1 < e) offsets(t + 1, knext);
      fn(ctx, g, koff.data(), t + 1 < e ? knext.data() : nullptr, j0,
         lr ? W : static_cast<int>(std::min<index_t>(W, g.ext[inner] - j0)), t == b);
      koff.swap(knext);
    }
    if (stream) simd::stream_fence();
  });
}

// ---- fused kernels --------------------------------------------------------------------------

template <const auto& S, int K>
struct kernel_code {
  using KI = kernel_of<S, K>;
  static constexpr const auto& I = KI::value;
  static constexpr kernel_sizes Z = KI::z;
  static constexpr int N = Z.nodes, NM = Z.mems, NS = Z.scalars > 0 ? Z.scalars : 1;
  static constexpr int NR = Z.reductions > 0 ? Z.reductions : 1;
  static constexpr int rank = I.rank;
  using M = mode_t<I.lanes>;
  static constexpr int W = M::width;
  static constexpr bool LR = I.lanes_reduce;
  using R = regs<M, N>;
  using A = accs<M, NR>;
  using F = frame<NM, NS>;

  /// Whether run-time shapes can differ from what fusion assumed (dynamic extents of different
  /// leaves that meet); a kernel of one node always fits its loop nest.
  static constexpr bool may_not_fit = N > 1 && !certainly_fits(S, K);

  static constexpr kernel_desc desc = {I.kind, I.rank, I.axes, I.lanes_reduce, W, N, I.node.data(), I.where.data(),
                                       I.reduction.data(), I.args.data(), NM, I.mem_node.data(), I.mem_nokeep.data(),
                                       I.mem_out.data(), I.c_mem, Z.scalars, I.scalar_node.data(), may_not_fit};

  template <int Base, int... J>
  static constexpr auto offset_seq(std::integer_sequence<int, J...>) {
    return std::integer_sequence<int, (Base + J)...>{};
  }
  /// Calls fn(seq) for consecutive chunks of [0, n) of at most 128 (clang folds at most 256).
  template <int Count, class Fn>
  [[gnu::always_inline]] static void chunked(Fn&& fn) {
    [&]<int... C>(std::integer_sequence<int, C...>) KILN_INLINE {
      (fn(offset_seq<C * 128>(std::make_integer_sequence<int, (Count - C * 128 < 128 ? Count - C * 128 : 128)>{})), ...);
    }(std::make_integer_sequence<int, (Count + 127) / 128>{});
  }

  template <int P, bool Fast, int... J>
  [[gnu::always_inline]] static void step(R& r, A& acc, const F& f, index_t j, int cnt, std::integer_sequence<int, J...>) {
    (node_step<M, I.desc[J], I.action[P][J], LR, Fast>(r, acc, f, j, cnt, J, I.args[J]), ...);
  }
  /// One step of pass P at element j of the innermost axis (cnt lanes).
  template <int P, bool Fast = false>
  [[gnu::always_inline]] static void step(R& r, A& acc, const F& f, index_t j, int cnt) {
    chunked<N>([&](auto seq) KILN_INLINE { step<P, Fast>(r, acc, f, j, cnt, seq); });
  }
  /// Bytes per element of each memory reference.
  static constexpr auto mem_size = [] {
    std::array<index_t, static_cast<std::size_t>(NM)> z{};
    for (int m = 0; m < NM; ++m)
      z[static_cast<std::size_t>(m)] =
          static_cast<index_t>(size_of(S.g.nodes[static_cast<std::size_t>(I.mem_node[static_cast<std::size_t>(m)])].dt));
    return z;
  }();
  /// Kernels of more nodes than this have no fast step: its second copy of the loop body is
  /// worth little where the arithmetic of many nodes outweighs one load and store, and it costs
  /// build time, under the sanitizers above all: g++'s points-to analysis grows faster than the
  /// function it analyses (docs/notes.md).
  static constexpr int fast_step_nodes = 64;
  static constexpr bool has_fast_step = !std::is_same_v<M, simd::scalar> && N <= fast_step_nodes;
  /// Whether every reference is contiguous or broadcast along the innermost axis, so that whole
  /// vectors can take the fast steps (kernels that have one).
  static bool fast_strides(const F& f) {
    if constexpr (!has_fast_step) {
      return false;
    } else {
      for (int m = 0; m < NM; ++m) {
        const auto i = static_cast<std::size_t>(m);
        if (f.is[i] != 0 && f.is[i] != mem_size[i]) return false;
      }
      return true;
    }
  }
  /// Whether sweep P accumulates reductions, all of them max or min (vector lanes only).
  template <int P>
  static constexpr bool minmax_sweep = [] {
    if constexpr (std::is_same_v<M, simd::scalar>) {
      return false;
    } else {
      bool any = false;
      for (int p = 0; p < N; ++p) {
        if (I.action[static_cast<std::size_t>(P)][static_cast<std::size_t>(p)] != act::accumulate) continue;
        const op o = I.desc[static_cast<std::size_t>(p)].o;
        if (o != op::amax && o != op::amin) return false;
        any = true;
      }
      return any;
    }
  }();
  /// Sweep P's max/min accumulators: Merge, acc = the max (min) of acc and other, with the
  /// NaN flags of both; else other = acc (the other members of other are left unset).
  template <int P, bool Merge>
  [[gnu::always_inline]] static void pair_minmax(A& acc, A& other) {
    [&]<int... J>(std::integer_sequence<int, J...>) KILN_INLINE {
      auto one = [&]<int Q>() KILN_INLINE {
        if constexpr (I.action[static_cast<std::size_t>(P)][static_cast<std::size_t>(Q)] == act::accumulate) {
          const int k = I.args[static_cast<std::size_t>(Q)].acc;
          if constexpr (!Merge) {
            other.m[k] = acc.m[k];
            other.nan[k] = acc.nan[k];
          } else {
            if constexpr (I.desc[static_cast<std::size_t>(Q)].o == op::amax) acc.m[k] = xsimd::max(acc.m[k], other.m[k]);
            else acc.m[k] = xsimd::min(acc.m[k], other.m[k]);
            acc.nan[k] = acc.nan[k] | other.nan[k];
          }
        }
      };
      (one.template operator()<J>(), ...);
    }(std::make_integer_sequence<int, N>{});
  }
  /// Steps of pass P over [j0, j1): whole vectors on the fast path where the strides allow it,
  /// then the partial last vector. Before(j) runs before each whole vector's step (prefetches).
  ///
  /// A sweep whose reductions are all max or min (softmax's first) accumulates its vectors
  /// into two sets of accumulators, the even vectors of [j0, j1) into one and the odd into the
  /// other, merged at the end, so that the fast loop takes them in independent pairs: with one
  /// accumulator, each vector waits out the latency of the previous one's max (and NaN flag)
  /// instructions. Which set a vector goes to depends on its position alone, on the fast path
  /// and the strided one alike, so a row's result (down to which of +0 and -0 its max keeps:
  /// x86's max returns its second operand on equal zeros) does not depend on the layout or the
  /// thread count. Not a pipelined kernel's last reduction sweep: its pipelined loop
  /// (pipelined) takes one vector at a time, and a chunk's first row runs this one.
  template <int P, class Before>
  [[gnu::always_inline]] static void steps(R& r, A& acc, const F& f, index_t j0, index_t j1, bool fast, Before&& before) {
    index_t j = j0;
    if constexpr (minmax_sweep<P> && !(pipelines && P == 2 * I.stages - 1)) {
      A other;
      pair_minmax<P, false>(acc, other);
      if constexpr (has_fast_step) {
        if (fast) {
          for (; j + 2 * W <= j1; j += 2 * W) {
            before(j);
            step<P, true>(r, acc, f, j, W);
            before(j + W);
            step<P, true>(r, other, f, j + W, W);
          }
          if (j + W <= j1) {  // an even vector
            before(j);
            step<P, true>(r, acc, f, j, W);
            j += W;
          }
        }
      }
      for (bool odd = (j - j0) / W % 2 != 0; j < j1; j += W, odd = !odd) {
        before(j);
        step<P>(r, odd ? other : acc, f, j, static_cast<int>(std::min<index_t>(W, j1 - j)));
      }
      pair_minmax<P, true>(acc, other);
    } else {
      if constexpr (has_fast_step) {
        if (fast) {
          for (; j + W <= j1; j += W) {
            before(j);
            step<P, true>(r, acc, f, j, W);
          }
        }
      }
      for (; j < j1; j += W) {
        before(j);
        step<P>(r, acc, f, j, static_cast<int>(std::min<index_t>(W, j1 - j)));
      }
    }
  }
  /// Row kernels: the memory references the final sweep stores full-space values through
  /// (-1 past the end). The sweep before it prefetches their lines for writing, so that the
  /// final sweep's stores find them in cache instead of waiting for memory (a store that misses
  /// must first read its line; softmax's final sweep has little else to do meanwhile).
  static constexpr auto final_outs = [] {
    std::array<int, static_cast<std::size_t>(NM)> o{};
    o.fill(-1);
    if constexpr (I.kind == passes::kernel_kind::reduction) {
      int n = 0;
      for (int p = 0; p < N; ++p) {
        const act x = I.action[static_cast<std::size_t>(2 * I.stages + 1)][static_cast<std::size_t>(p)];
        const int m = I.args[static_cast<std::size_t>(p)].out;
        if ((x == act::compute_store || x == act::load_cache_store || x == act::store) && m >= 0 &&
            I.where[static_cast<std::size_t>(p)] == role::full) {
          bool seen = false;
          for (int q = 0; q < n; ++q) seen = seen || o[static_cast<std::size_t>(q)] == m;
          if (!seen) o[static_cast<std::size_t>(n++)] = m;
        }
      }
    }
    return o;
  }();
  static constexpr int n_final_outs = [] {
    int n = 0;
    while (n < NM && final_outs[static_cast<std::size_t>(n)] >= 0) ++n;
    return n;
  }();
  [[gnu::always_inline]] static void prefetch_outs(const F& f, index_t j) {
    for (int q = 0; q < n_final_outs; ++q) {
      const auto m = static_cast<std::size_t>(final_outs[static_cast<std::size_t>(q)]);
      __builtin_prefetch(f.p[m] + j * f.is[m], 1);
    }
  }
  /// The memory references read along the row (not destinations, not indexed through the kept
  /// axes only; in a pointwise kernel, every reference read). A row kernel's sweep may prefetch
  /// them for the thread's next row, so that reading it from memory overlaps this row's
  /// arithmetic; a streaming pointwise kernel prefetches them ahead (prefetch_ins).
  static constexpr auto row_ins = [] {
    std::array<int, static_cast<std::size_t>(NM)> o{};
    o.fill(-1);
    int n = 0;
    for (int m = 0; m < NM; ++m)
      if (!I.mem_out[static_cast<std::size_t>(m)] && !I.mem_nokeep[static_cast<std::size_t>(m)]) o[static_cast<std::size_t>(n++)] = m;
    return o;
  }();
  static constexpr int n_row_ins = [] {
    int n = 0;
    while (n < NM && row_ins[static_cast<std::size_t>(n)] >= 0) ++n;
    return n;
  }();
  [[gnu::always_inline]] static void prefetch_next(const F& f, const index_t* delta, index_t j) {
    for (int q = 0; q < n_row_ins; ++q) {
      const auto m = static_cast<std::size_t>(row_ins[static_cast<std::size_t>(q)]);
      if (delta[m] != 0) __builtin_prefetch(f.p[m] + delta[m] + j * f.is[m], 0);
    }
  }

  /// Pointwise kernels whose stores stream (data far larger than the last-level cache): the
  /// references read (row_ins), each prefetched (PREFETCHNTA) stream_prefetch_bytes ahead of
  /// the step that loads it. The hardware prefetchers alone left the gelu chain (three inputs,
  /// a division and ten FMAs per vector) short of overlapping its arithmetic with memory; a
  /// kernel of little arithmetic (x * a + b) neither gains nor loses by it.
  /// (A strided reference is prefetched as many strides ahead, a broadcast one at its own
  /// line; addresses past the end of an array are only prefetched, never read, and are formed
  /// as integers.)
  [[gnu::always_inline]] static void prefetch_ins(const F& f, index_t j) {
    for (int q = 0; q < n_row_ins; ++q) {
      const auto m = static_cast<std::size_t>(row_ins[static_cast<std::size_t>(q)]);
      const auto at = reinterpret_cast<std::uintptr_t>(f.p[m]) +
                      static_cast<std::uintptr_t>((j + stream_prefetch_bytes / mem_size[m]) * f.is[m]);
      __builtin_prefetch(reinterpret_cast<const void*>(at), 0, 0);
    }
  }

  template <int P>
  static constexpr bool any_action() {
    for (act x : I.action[P])
      if (x != act::none) return true;
    return false;
  }
  /// Initialises (Init) or finishes the reductions accumulated in sweep P.
  template <int P, bool Init, int... Q>
  [[gnu::always_inline]] static void reductions(R& r, A& acc, std::integer_sequence<int, Q...>) {
    (red_step<M, I.desc[I.red_pos[Q]], I.action[P][I.red_pos[Q]] == act::accumulate, Init, LR>(r, acc, I.red_pos[Q], Q), ...);
  }

  // ---- the kernel-specific loops ----

  /// Pointwise: [j0, j1) of one row.
  static void segment(const void* ctx, std::byte* const* p, const index_t* is, index_t j0, index_t j1) {
    F f = *static_cast<const F*>(ctx);
    for (int m = 0; m < NM; ++m) {
      f.p[static_cast<std::size_t>(m)] = p[m];
      f.is[static_cast<std::size_t>(m)] = is[m];
    }
    R r;
    A acc;
    // (a branch at the top of each step, not a second loop written for streaming kernels. If
    // the compiler unswitches the loop on it, both copies hold the same arithmetic in the same
    // basic blocks, so FMA contraction cannot differ between them, unlike a branch between
    // nodes (frame::stream_align). test_cpu_pointwise checks streamed and not for equal bits.)
    steps<0>(r, acc, f, j0, j1, fast_strides(f), [&](index_t j) KILN_INLINE {
      if (f.stream) prefetch_ins(f, j);
    });
    if (f.stream) simd::stream_fence();
  }

  /// Row kernels with a row cache (a transcendental function's values, as softmax's exp) and
  /// lanes along one reduced axis: each row's final sweep runs inside the next row's last
  /// reduction sweep, one step of each per vector, so that the final sweep's stores (streamed
  /// to memory, for large data) drain while the next row's arithmetic runs instead of after it
  /// (a final sweep on its own leaves the arithmetic idle while its stores drain). pending_row
  /// holds the deferred row (its frame and values) for the thread; run_rows ends every thread's
  /// run of rows with a row that has no next (knext null), whose final sweep runs at once, so
  /// nothing is left pending between calls (and a run's first row drops whatever a run that
  /// threw left).
  ///
  /// A row's results are the bits of separate sweeps (each row's steps are the same, in the
  /// same order) for kernels whose two sweeps cannot contract a multiply and an add into an FMA,
  /// and only those pipeline: g++
  /// (-ffp-contract=fast, its default) contracts a node's multiply into a later node's add in
  /// one loop and not in another, so the same row's bits would depend on whether its final
  /// sweep ran on its own (a thread's last row) or beside the next row's: softmax(x) * g + b
  /// differed by an ulp in a few elements of most rows, 1 thread against 2 (none with
  /// -ffp-contract=off). The sweep before may add, subtract, exp and compare, but not
  /// multiply; the final sweep may multiply and divide, but not add. softmax is such a kernel.
  /// (kiln's max and min add their operands on the NaN path, but a product fed to them has
  /// other uses, so it cannot be contracted.) f32 lanes only: f64's exp is xsimd's, whose FMAs
  /// are separate multiplies and adds on AVX-512 with xsimd 8 (fma.hpp), so its own arithmetic
  /// could contract differently from loop to loop.
  template <int P, class Allowed>
  static constexpr bool computes_only(Allowed allowed) {
    for (int p = 0; p < N; ++p) {
      const act x = I.action[static_cast<std::size_t>(P)][static_cast<std::size_t>(p)];
      const bool computes = x == act::compute || x == act::compute_store || x == act::compute_cache || x == act::accumulate;
      if (computes && !allowed(I.desc[static_cast<std::size_t>(p)].o)) return false;
    }
    return true;
  }
  static constexpr bool compares_or_moves(op o) {
    return o == op::max || o == op::min || o == op::neg || o == op::abs || o == op::relu || o == op::cast ||
           o == op::where || o == op::eq || o == op::ne || o == op::lt || o == op::le || o == op::gt || o == op::ge;
  }
  static constexpr bool pipelines = [] {
    if constexpr (!(LR && I.cached > 0 && I.stages >= 1 && I.lanes == lane_type::f32)) {
      return false;
    } else {
      constexpr int P = 2 * I.stages - 1, PF = 2 * I.stages + 1;
      return any_action<PF>() && any_action<P>() && (n_final_outs > 0 || n_row_ins > 0) &&
             computes_only<P>([](op o) {
               return o == op::add || o == op::sub || o == op::exp || o == op::sum || o == op::amax || o == op::amin ||
                      compares_or_moves(o);
             }) &&
             computes_only<PF>([](op o) { return o == op::mul || o == op::div || compares_or_moves(o); });
    }
  }();
  /// Whether a call over `space` pipelines its rows: one reduced axis (the innermost), rows of
  /// pipeline_min_row to pipeline_max_row elements (row_task's `pipe`).
  static bool pipelines_rows(index_t reduced_axes, index_t row) {
    return reduced_axes == 1 && row >= pipeline_min_row && row <= pipeline_max_row;
  }
  struct pending {
    F f;
    R r;
    bool active = false;
    bool second = false;  ///< its row cache is the second set
  };
  static inline thread_local pending pending_row;
  /// Sweep 2 * stages - 1 of the current row (Cur) and the final sweep of the pending row, one
  /// vector of each per step; without Cur, the current row's final sweep alone.
  template <bool Cur, class Before>
  [[gnu::always_inline]] static void pipelined(R& r, A& acc, const F& f, index_t j0, index_t j1, bool fast,
                                                Before&& before) {
    constexpr int P = 2 * I.stages - 1, PF = 2 * I.stages + 1;
    // (copies: locals stay in registers, a thread_local's members would be reloaded each step)
    R rp = Cur ? pending_row.r : r;
    const F fp = Cur ? pending_row.f : f;
    A accp{};  // (the final sweep accumulates nothing)
    index_t j = j0;
    if constexpr (has_fast_step) {
      if (fast) {
        for (; j + W <= j1; j += W) {
          before(j);
          if constexpr (Cur) step<P, true>(r, acc, f, j, W);
          step<PF, true>(rp, accp, fp, j, W);
        }
      }
    }
    for (; j < j1; j += W) {
      before(j);
      const int cnt = static_cast<int>(std::min<index_t>(W, j1 - j));
      if constexpr (Cur) step<P>(r, acc, f, j, cnt);
      step<PF>(rp, accp, fp, j, cnt);
    }
    if constexpr (Cur) pending_row.active = false;
  }

  /// Row kernels: every pass over one row (or one block of columns).
  static void row_task(const void* ctx, const rows_geometry& g, const index_t* koff, const index_t* knext, index_t j0,
                       int cnt, [[maybe_unused]] bool first) {
    F f = *static_cast<const F*>(ctx);
    R r;
    A acc;
    constexpr int inner = rank - 1;
    index_t delta[NM]{};  // from this row to the next, per reference
    if (knext)
      for (int m = 0; m < NM; ++m) delta[m] = knext[m] - koff[m];
    auto at = [&](const index_t* off) KILN_INLINE {
      for (int m = 0; m < NM; ++m) {
        f.p[static_cast<std::size_t>(m)] = g.mr[m].base + koff[m] + (off ? off[m] : 0);
        f.is[static_cast<std::size_t>(m)] = g.mr[m].stride[inner];
      }
    };
    // Whether this row's final sweep is deferred to the next row's last reduction sweep (see
    // pipelined): the same for every row of a call (one reduced axis, the same length).
    bool pipe = false;
    bool second = false;  // this row's cache is the second set
    if constexpr (pipelines) {
      pipe = pipelines_rows(g.nr, g.ext[inner]);
      if (first) pending_row.active = false;  // (a run that threw may have left one)
      second = pipe && pending_row.active && !pending_row.second;
    }
    if constexpr (I.cached > 0) {
      // the row cache: per thread, grown to the largest row seen; a slot per cached value, and
      // two sets of slots when pipelining (this row's, and the previous row's, which its final
      // sweep still reads)
      static thread_local std::vector<typename M::elem> cache;
      index_t work = 1;
      for (int a = 0; a < g.nr; ++a) work *= g.ext[g.red[a]] > 0 ? g.ext[g.red[a]] : 1;
      const index_t stride = work + W, set = stride * I.cached;
      const auto size = static_cast<std::size_t>((pipe ? 2 : 1) * set);
      if (cache.size() < size) {
        // (a deferred row reads the cache: it cannot grow under one, as every row of a call has
        // the same length and a chunk's first row drops what is pending)
        if constexpr (pipelines) {
          if (pending_row.active) std::abort();
        }
        cache.resize(size);
      }
      f.cache = reinterpret_cast<std::byte*>(cache.data() + (second ? set : 0));
      f.cache_stride = stride;
    }
    at(nullptr);
    const bool fast = fast_strides(f);  // the innermost strides are the same for every row part
    // a sweep: every position of the reduced axes (but the innermost when lanes run along it)
    auto sweep = [&]<int P>() KILN_INLINE {
      index_t off[NM]{}, idx[max_rank]{};
      for (int a = 0; a < g.outer_red; ++a)
        if (g.ext[g.red[a]] == 0) return;
      f.cache_off = 0;
      for (;;) {
        at(off);
        if constexpr (LR) {
          const index_t len = g.ext[inner];
          // the last sweep before the final one: prefetch what the final sweep stores, and the
          // next row's inputs, so that reading them overlaps this row's arithmetic (otherwise a
          // row's first sweep waits on memory while its later sweeps compute from cache). Only
          // kernels with a final sweep: a plain row sum's one sweep reads its row from memory
          // itself, and would fetch the next a whole row ahead.
          constexpr bool pf = P == 2 * I.stages - 1 && n_final_outs > 0;
          constexpr bool pn = P == 2 * I.stages - 1 && n_row_ins > 0 && any_action<2 * I.stages + 1>();
          static_assert(!pipelines || P != 2 * I.stages - 1 || pf || pn,
                        "kiln: a pipelined kernel's last reduction sweep must take the branch below");
          if constexpr (pf || pn) {
            // (a stream store needs no line in cache: its prefetch would only fetch it)
            const bool outs = pf && !f.stream, next = pn && knext;
            if constexpr (pipelines && P == 2 * I.stages - 1) {
              if (pipe && pending_row.active) {
                // (the test for the next row's prefetch outside the loop: the loop holds two
                // rows' steps, and a test in it costs registers that exp's constants need)
                if (next)
                  pipelined<true>(r, acc, f, 0, len, fast, [&](index_t j) KILN_INLINE {
                    if (outs) prefetch_outs(f, j);
                    prefetch_next(f, delta, j);
                  });
                else
                  pipelined<true>(r, acc, f, 0, len, fast, [&](index_t j) KILN_INLINE {
                    if (outs) prefetch_outs(f, j);
                  });
                return;  // (one reduced axis: no other position)
              }
            }
            steps<P>(r, acc, f, 0, len, fast, [&](index_t j) KILN_INLINE {
              if (outs) prefetch_outs(f, j);
              if (next) prefetch_next(f, delta, j);
            });
          } else {
            steps<P>(r, acc, f, 0, len, fast, [](index_t) KILN_INLINE {});
          }
          f.cache_off += len;
        } else {
          step<P>(r, acc, f, j0, cnt);
        }
        int a = g.outer_red - 1;
        for (; a >= 0; --a) {
          const auto d = static_cast<std::size_t>(g.red[a]);
          for (int m = 0; m < NM; ++m) off[m] += g.mr[m].stride[d];
          if (++idx[a] < g.ext[d]) break;
          for (int m = 0; m < NM; ++m) off[m] -= g.ext[d] * g.mr[m].stride[d];
          idx[a] = 0;
        }
        if (a < 0) return;
      }
    };
    [&]<int... Q>(std::integer_sequence<int, Q...>) KILN_INLINE {
      auto stage = [&]<int Stage>() KILN_INLINE {
        if constexpr (Stage > 0) {
          constexpr int P = 2 * Stage - 1;
          chunked<NR>([&](auto seq) KILN_INLINE { reductions<P, true>(r, acc, seq); });
          sweep.template operator()<P>();
          chunked<NR>([&](auto seq) KILN_INLINE { reductions<P, false>(r, acc, seq); });
        }
        if constexpr (any_action<2 * Stage>()) {
          at(nullptr);
          step<2 * Stage>(r, acc, f, LR ? 0 : j0, cnt);
        }
      };
      (stage.template operator()<Q>(), ...);
    }(std::make_integer_sequence<int, I.stages + 1>{});
    if constexpr (pipelines) {
      if (pipe) {
        // this row's final sweep: in the next row's last reduction sweep, or now if this is the
        // thread's last row of the run (run_rows passes no next row)
        at(nullptr);
        f.cache_off = 0;
        pending_row.f = f;
        pending_row.r = r;
        pending_row.active = knext != nullptr;
        pending_row.second = second;
        stats().deferred += knext != nullptr;
        if (!knext) pipelined<false>(r, acc, f, 0, g.ext[inner], fast, [](index_t) KILN_INLINE {});
        return;
      }
    }
    if constexpr (any_action<2 * I.stages + 1>()) sweep.template operator()<2 * I.stages + 1>();
  }

  /// Matmul: the epilogue on one finished row segment of the product.
  struct mm_ctx {
    const F* proto;
    const memref* mr;
  };
  template <class T>
  static void epilogue(const void* ctx, const index_t* outer, index_t bi, index_t i, index_t j0, index_t count, T* cp) {
    const mm_ctx& c = *static_cast<const mm_ctx*>(ctx);
    F f = *c.proto;
    constexpr int nb = rank - 2;
    for (int m = 0; m < NM; ++m) {
      const auto& s = c.mr[m].stride;
      index_t off = i * s[rank - 2] + j0 * s[rank - 1];
      for (int d = 0; d + 1 < nb; ++d) off += outer[d] * s[static_cast<std::size_t>(d)];
      if constexpr (nb > 0) off += bi * s[nb - 1];
      f.p[static_cast<std::size_t>(m)] = c.mr[m].base + off;
      f.is[static_cast<std::size_t>(m)] = s[rank - 1];
    }
    f.p[static_cast<std::size_t>(I.c_mem)] = reinterpret_cast<std::byte*>(cp);
    f.is[static_cast<std::size_t>(I.c_mem)] = static_cast<index_t>(sizeof(T));
    R r;
    A acc;
    steps<0>(r, acc, f, 0, count, fast_strides(f), [](index_t) KILN_INLINE {});
  }

  static void matmul(state& st, const dims& space, memref* mr, const F& proto) {
    constexpr int x = I.node[0];
    constexpr dtype D = S.g.nodes[static_cast<std::size_t>(x)].dt;
    using T = storage_t<D>;
    // where the product goes: its own buffer, else in place in a written epilogue value of
    // its dtype with contiguous rows, else a temporary
    view c;
    if (contiguous_rows(st.dest[static_cast<std::size_t>(x)])) {
      c = st.dest[static_cast<std::size_t>(x)];
    } else {
      for (int p = N - 1; p > 0 && !c.p; --p) {
        const int y = I.node[static_cast<std::size_t>(p)];
        if (I.args[static_cast<std::size_t>(p)].out >= 0 && st.at(y).dt == D && contiguous_rows(st.dest[static_cast<std::size_t>(y)]))
          c = st.dest[static_cast<std::size_t>(y)];
      }
      if (!c.p) c = st.temp(D, st.shape[static_cast<std::size_t>(x)]);
    }
    c.shape = st.shape[static_cast<std::size_t>(x)];
    c.strides.e[c.shape.rank - 1] = 1;
    const view a = st.view_of(st.at(x).in[0]), b = st.view_of(st.at(x).in[1]);
    if constexpr (N == 1) {
      matmul_views<D>(a, b, c, {});
      if (st.dest[static_cast<std::size_t>(x)].p != c.p) copy_elements(st.dest[static_cast<std::size_t>(x)], c);
    } else {
      mr[I.c_mem] = ref_of(c, false, space, 0);
      const mm_ctx ctx{&proto, mr};
      first_error err;
      struct guarded {
        const mm_ctx* c;
        first_error* e;
      } gctx{&ctx, &err};
      epilogue_ref<T> ep;
      ep.ctx = &gctx;
      ep.fn = [](const void* g, const index_t* outer, index_t bi, index_t i, index_t j0, index_t count, T* cp) {
        const guarded& gd = *static_cast<const guarded*>(g);
        if (gd.e->failed()) return;
        gd.e->guard([&] { epilogue<T>(gd.c, outer, bi, i, j0, count, cp); });
      };
      matmul_views<D>(a, b, c, ep);
      err.rethrow();
    }
  }

  template <int... P>
  static void run_nodes(state& st, std::integer_sequence<int, P...>) {
    (run_single<single_desc(S, I.node[P])>(st, I.node[P]), ...);
  }

  static void run(state& st) {
    ++stats().kernels;
    if constexpr (I.per_node) {
      ++stats().node_by_node;
      chunked<N>([&](auto seq) { run_nodes(st, seq); });
    } else {
      dims space;
      if (!space_of(st, desc, space)) {
        ++stats().node_by_node;
        if constexpr (may_not_fit) chunked<N>([&](auto seq) { run_nodes(st, seq); });
        return;
      }
      ++stats().fused;
      std::array<memref, static_cast<std::size_t>(NM)> mr{};
      make_refs(st, desc, space, mr.data());
      F proto;
      load_scalars(st, desc, proto.sv.data());
      if constexpr (has_fast_step) {
        proto.stream = streamed_refs(space, desc, mr.data(), mem_size.data(), sizeof(typename M::real),
                                     proto.stream_align.data());
        stats().streamed += proto.stream;
      }
      if constexpr (I.kind == passes::kernel_kind::pointwise) {
        run_pointwise(space, NM, mr.data(), &segment, &proto);
      } else if constexpr (I.kind == passes::kernel_kind::reduction) {
        if constexpr (pipelines) stats().pipelined += pipelines_rows(std::popcount(I.axes), space.e[rank - 1]);
        run_rows(space, desc, mr.data(), &row_task, &proto, proto.stream);
      } else {
        matmul(st, space, mr.data(), proto);
      }
    }
  }
};

}  // namespace kiln::cpu::detail

#ifdef KILN_KERNELS_DIAGNOSTIC_PUSHED
#pragma GCC diagnostic pop
#undef KILN_KERNELS_DIAGNOSTIC_PUSHED
#endif
