// kiln/backend/cpu/kernels.hpp: one loop nest per kernel of a frozen schedule, instantiated at
// compile time from the schedule constant.
//
// kernel_code<W> runs every kernel whose code words are W (code_words, analysis.hpp: the layers
// of a model, and a forward plan's kernels in its training step: code_key shares small kernels
// across the program's plans, large ones within their plan), each bound to its own graph nodes
// at run time (kernel_binding). Its ops, dtypes, operand sources and passes are constants
// decoded from W (code_info); one step of a pass evaluates the kernel's nodes, in graph order,
// on one vector of the innermost axis of the iteration space, holding every value in registers
// (`regs`) and storing only the values the plan writes (and something reads). The step is a
// fold over the nodes, each calling node_step<mode, desc, action>, whose template
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
// non-temporal stores (stream_threshold in settings.hpp, streamed_refs in loops.hpp).
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
//
// kernel_code is built from headers of one concern each: settings.hpp (run_stats,
// stream_threshold), step.hpp (the register model, operand loads, reductions, node_step),
// threads.hpp (run_tasks and the constants that size a kernel's work), single.hpp (kernels
// run node by node, the matmul glue) and loops.hpp (the generic, non-template run: the
// pointwise and row drivers, streaming). This header holds the fused kernels alone.
#pragma once

// What the headers of kernel_code's parts use, first and in this order: g++ breaks ties in its
// choice of stack slots and registers by declaration order, so reordering these includes
// changes the code generated even for functions that do not use them.
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

#include "settings.hpp"
#include "step.hpp"
#include "threads.hpp"
#include "single.hpp"
#include "loops.hpp"

// GCC 12 reports xsimd's and kiln's AVX-512 intrinsics as "may be used uninitialized" where
// they are inlined into these kernels: its intrinsics pass _mm512_undefined_ps(), a
// self-initialised variable, as the unused merge operand (GCC PR 105593, fixed in GCC 13). A
// user's -Wall build of a softmax got 16 such warnings (36 with the pipelined final sweep of
// row_task). They are silenced for the kernels' code only, and only on GCC before 13; define
// KILN_KEEP_UNINIT_WARNINGS to see them. step.hpp, threads.hpp, single.hpp and loops.hpp repeat
// this block around their own code.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13 && !defined(KILN_KEEP_UNINIT_WARNINGS)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define KILN_KERNELS_DIAGNOSTIC_PUSHED
#endif

namespace kiln::cpu::detail {

template <const auto& Words>
struct kernel_code {
  using C = code_info<Words>;
  static constexpr const auto& I = C::info;
  static constexpr int N = static_cast<int>(I.node.size()), NM = static_cast<int>(I.mem_node.size());
  static constexpr int NS = static_cast<int>(I.scalar_node.size()), NR = static_cast<int>(I.red_pos.size());
  static constexpr int rank = I.rank;
  using M = mode_t<I.lanes>;
  static constexpr int W = M::width;
  static constexpr bool LR = I.lanes_reduce;
  using R = regs<M, N>;
  using A = accs<M, NR>;
  using F = frame<NM, NS>;

  /// Whether run-time shapes can differ from what fusion assumed (dynamic extents of different
  /// leaves that meet); a kernel of one node always fits its loop nest.
  static constexpr bool may_not_fit = N > 1 && !C::fits;

  /// The kernel's description without its nodes (run_kernel binds it to the kernel it runs).
  static constexpr kernel_desc proto_desc = {
      I.kind, I.axes, I.lanes_reduce, W, N, nullptr, I.where.data(), I.reduction.data(), I.args.data(), NM, nullptr,
      I.mem_nokeep.data(), I.mem_out.data(), I.c_mem, C::scalars, nullptr, may_not_fit};

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
      z[static_cast<std::size_t>(m)] = static_cast<index_t>(size_of(C::mem_dt[static_cast<std::size_t>(m)]));
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

  /// A column reduction's step: the references it reads and writes, column_prefetch positions
  /// ahead along the innermost reduced axis (threads.hpp; formed as integers: the address may
  /// be past the array, and is only prefetched).
  [[gnu::always_inline]] static void prefetch_column(const F& f, const rows_geometry& g, index_t j0) {
    const auto d = static_cast<std::size_t>(g.red[g.outer_red - 1]);
    const auto ahead = [&](std::size_t m) KILN_INLINE {
      return reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(f.p[m]) +
                                           static_cast<std::uintptr_t>(j0 * f.is[m] + column_prefetch * g.mr[m].stride[d]));
    };
    for (int q = 0; q < n_row_ins; ++q)
      __builtin_prefetch(ahead(static_cast<std::size_t>(row_ins[static_cast<std::size_t>(q)])), 0, 3);
    for (int q = 0; q < n_final_outs; ++q)
      __builtin_prefetch(ahead(static_cast<std::size_t>(final_outs[static_cast<std::size_t>(q)])), 1, 3);
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
          if constexpr (n_row_ins > 0 || n_final_outs > 0) prefetch_column(f, g, j0);
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

  static void matmul(state& st, const kernel_binding& kb, const dims& space, memref* mr, const F& proto) {
    const int x = kb.node[0];
    constexpr dtype D = I.desc[0].dt;
    using T = storage_t<D>;
    // where the product goes: its own buffer, else in place in a written epilogue value of
    // its dtype with contiguous rows, else a temporary
    view c;
    if (contiguous_rows(st.dest[static_cast<std::size_t>(x)])) {
      c = st.dest[static_cast<std::size_t>(x)];
    } else {
      for (int p = N - 1; p > 0 && !c.p; --p) {
        const int y = kb.node[p];
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
      // (the epilogue's operands: whether the GEMM may fold the last batch axis into rows)
      bool folds = rank > 2;
      if constexpr (rank > 2) {
        const index_t m = c.shape.e[rank - 2];
        for (int q = 0; q < NM; ++q)
          if (q != I.c_mem) folds = folds && mr[q].stride[rank - 3] == m * mr[q].stride[rank - 2];
      }
      matmul_views<D>(a, b, c, ep, folds);
      err.rethrow();
    }
  }

  template <int... P>
  static void run_nodes(state& st, const kernel_binding& b, std::integer_sequence<int, P...>) {
    (run_single<C::single[P]>(st, b.node[P]), ...);
  }

  static void run(state& st, const kernel_binding& b) {
    ++stats().kernels;
    const long splits = split_loops();
    run_kernel(st, b);
    stats().threaded += split_loops() != splits;
  }

  static void run_kernel(state& st, const kernel_binding& b) {
    if constexpr (I.per_node) {
      ++stats().node_by_node;
      chunked<N>([&](auto seq) { run_nodes(st, b, seq); });
    } else {
      kernel_desc desc = proto_desc;
      desc.node = b.node;
      desc.mem_node = b.mem_node;
      desc.scalar_node = b.scalar_node;
      dims space;
      if (!space_of(st, desc, space)) {
        ++stats().node_by_node;
        if constexpr (may_not_fit) chunked<N>([&](auto seq) { run_nodes(st, b, seq); });
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
        matmul(st, b, space, mr.data(), proto);
      }
    }
  }
};

}  // namespace kiln::cpu::detail

#ifdef KILN_KERNELS_DIAGNOSTIC_PUSHED
#pragma GCC diagnostic pop
#undef KILN_KERNELS_DIAGNOSTIC_PUSHED
#endif
