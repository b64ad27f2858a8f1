// kiln/backend/cpu/loops.hpp: the generic part of a fused kernel's run, the same for every
// kernel: the kernel's analysis as run-time values (kernel_desc), its iteration space
// (space_of), memory references and scalars (ref_of, make_refs, load_scalars), the pointwise
// driver (run_pointwise: axes merged, rows and chunks of rows over threads), the choice of
// non-temporal stores (streamed_refs) and the row driver (run_rows).
//
// Apart from kernel_code (kernels.hpp) because none of it is a template: it is compiled once
// whatever the kernels, and calls a kernel's innermost loops through a pointer (segment_fn,
// row_task_fn), because build time is part of the cost of every expression.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../../core/config.hpp"
#include "analysis.hpp"
#include "runtime.hpp"
#include "settings.hpp"
#include "simd.hpp"
#include "step.hpp"
#include "threads.hpp"

// GCC 12's false -Wmaybe-uninitialized on AVX-512 intrinsics inlined into kernel code (GCC PR
// 105593): silenced here as in kernels.hpp, which says why.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13 && !defined(KILN_KEEP_UNINIT_WARNINGS)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define KILN_LOOPS_DIAGNOSTIC_PUSHED
#endif

namespace kiln::cpu::detail {

/// A kernel's analysis as run-time values: what the code shared by all kernels needs.
struct kernel_desc {
  passes::kernel_kind kind = passes::kernel_kind::pointwise;
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

/// The graph nodes that a kernel's code runs on: kernels of equal code (code_words in
/// analysis.hpp) share one instantiation, each called with its own binding.
struct kernel_binding {
  const int* node = nullptr;
  const int* mem_node = nullptr;
  const int* scalar_node = nullptr;
};

/// The run-time iteration space (rank >= 1), or false if the kernel's nodes do not have the
/// shapes fusion assumed (dynamic extents that differ at run time).
KILN_LAZY bool space_of(const state& st, const kernel_desc& k, dims& space);

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
KILN_LAZY void make_refs(state& st, const kernel_desc& k, const dims& space, memref* mr);

/// The kernel's rank-0 operands, read once per run.
KILN_LAZY void load_scalars(state& st, const kernel_desc& k, sval* sv);

/// A pointwise kernel's loop over [j0, j1) of the innermost axis, from the addresses p and
/// innermost byte strides is of its references.
using segment_fn = void (*)(const void* ctx, std::byte* const* p, const index_t* is, index_t j0, index_t j1);

/// Pointwise kernels: axes merged where every reference allows it, rows and chunks of rows
/// over threads.
KILN_LAZY void run_pointwise(const dims& space, int nm, const memref* mr, segment_fn seg, const void* ctx);

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
/// (Compiled once, in the runtime unit, though it reads simd::has_stream_stores and run_rows
/// calls stream_fence: both follow __SSE2__, which every x86-64 target has whatever -march says.)
KILN_LAZY bool streamed_refs(const dims& space, const kernel_desc& k, const memref* mr, const index_t* size,
                             std::uintptr_t vector_bytes, std::uintptr_t* align);

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
KILN_LAZY void run_rows(const dims& space, const kernel_desc& k, const memref* mr, row_task_fn fn, const void* ctx,
                        bool stream);

#if KILN_DEFINE_RUNTIME
KILN_LAZY_DEF bool space_of(const state& st, const kernel_desc& k, dims& space) {
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

KILN_LAZY_DEF void make_refs(state& st, const kernel_desc& k, const dims& space, memref* mr) {
  for (int m = 0; m < k.mems; ++m) {
    if (m == k.c_mem) continue;
    const int x = k.mem_node[m];
    const view v = k.mem_out[m] ? st.dest[static_cast<std::size_t>(x)] : st.view_of(x);
    mr[m] = ref_of(v, k.mem_nokeep[m], space, k.axes);
  }
}

KILN_LAZY_DEF void run_pointwise(const dims& space, int nm, const memref* mr, segment_fn seg, const void* ctx) {
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

KILN_LAZY_DEF void load_scalars(state& st, const kernel_desc& k, sval* sv) {
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

KILN_LAZY_DEF bool streamed_refs(const dims& space, const kernel_desc& k, const memref* mr, const index_t* size,
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
    for (int d = 0; d < space.rank; ++d)
      every = every && (mr[m].stride[static_cast<std::size_t>(d)] != 0 || space.e[d] == 1);
    if (every) {
      align[m] = vector_bytes - 1;
      any = true;
    }
  }
  return any;
}

KILN_LAZY_DEF void run_rows(const dims& space, const kernel_desc& k, const memref* mr, row_task_fn fn, const void* ctx,
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
  const index_t grain = std::max<index_t>(1, parallel_grain / std::max<index_t>(1, work * (lr ? 1 : W)));
  run_tasks(tasks, grain, [&](index_t b, index_t e) {
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
#endif  // KILN_DEFINE_RUNTIME

}  // namespace kiln::cpu::detail

#ifdef KILN_LOOPS_DIAGNOSTIC_PUSHED
#pragma GCC diagnostic pop
#undef KILN_LOOPS_DIAGNOSTIC_PUSHED
#endif
