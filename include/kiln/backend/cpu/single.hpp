// kiln/backend/cpu/single.hpp: kernels run node by node (run_single: one loop per node, into
// its destination or a temporary), for kernels whose run-time shapes do not fit one loop nest
// and kernels with concat or iota, gather, scatter_add, unfold, fold or rand; and the matmul
// glue that fused matmul kernels share (epilogue_ref, matmul_views, contiguous_rows).
//
// Apart from the fused kernels because this code depends only on a node's op and dtypes
// (single_desc), never on its kernel: one instantiation per op and dtypes serves every kernel
// and expression.
#pragma once

#include <array>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "analysis.hpp"
#include "attention.hpp"
#include "gemm.hpp"
#include "movement.hpp"
#include "runtime.hpp"
#include "simd.hpp"
#include "step.hpp"

// GCC 12's false -Wmaybe-uninitialized on AVX-512 intrinsics inlined into kernel code (GCC PR
// 105593): silenced here as in kernels.hpp, which says why.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13 && !defined(KILN_KEEP_UNINIT_WARNINGS)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#define KILN_SINGLE_DIAGNOSTIC_PUSHED
#endif

namespace kiln::cpu::detail {

/// Kernels whose run-time shapes do not fit one loop nest, and kernels with concat or iota, run
/// their nodes one at a time into temporaries. Each node's code depends only on its op and
/// dtypes, so these instantiations are shared by every kernel and expression.
///
/// A pointwise node alone: its operands' and result's addresses and strides (run-time code,
/// run_single_pointwise) and, per op and dtypes, only the loop over one row (single_row).
using single_row_fn = void (*)(std::byte* const* p, const index_t* is, index_t n);
KILN_RUNTIME void run_single_pointwise(state& st, int x, single_row_fn row);

/// n elements of node D: operand j at p[j] + i is[j] (j < 3), the result at p[3] + i is[3].
template <ndesc D>
void single_row(std::byte* const* p, const index_t* is, index_t n) {
  using M = simd::scalar;
  frame<4, 1> f;
  nargs a;
  a.idx = {0, 1, 2};
  a.out = 3;
  regs<M, 1> r;
  accs<M, 1> acc;
  for (index_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < 4; ++j) f.p[j] = p[j] + i * is[j];
    node_step<M, D, act::compute_store, false, false>(r, acc, f, 0, 1, 0, a);
  }
}

template <ndesc D>
void single_pointwise(state& st, int x) {
  run_single_pointwise(st, x, &single_row<D>);
}

#if KILN_DEFINE_RUNTIME
KILN_RUNTIME void run_single_pointwise(state& st, int x, single_row_fn row) {
  const node& n = st.at(x);
  const view out = st.dest[static_cast<std::size_t>(x)];
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
  if (out.shape.numel() == 0) return;
  // rows along the innermost axis (a rank-0 result is one row of one element)
  const int inner = out.shape.rank - 1;
  const index_t len = inner >= 0 ? out.shape.e[inner] : 1;
  std::array<index_t, 4> is{};
  for (std::size_t j = 0; j < 4; ++j) is[j] = inner >= 0 ? strides[j].e[inner] : 0;
  dims outer = out.shape;
  if (inner >= 0) outer.rank = inner;
  for_each_index(outer, [&](const index_t* idx) {
    std::array<std::byte*, 4> p{};
    for (std::size_t j = 0; j < 4; ++j) {
      index_t off = 0;
      for (int d = 0; d < outer.rank; ++d) off += idx[d] * strides[j].e[d];
      p[j] = base[j] + off;
    }
    row(p.data(), is.data(), len);
  });
}
#endif  // KILN_DEFINE_RUNTIME

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
/// the others looped here; c must have contiguous rows. Where B is the same matrix for every
/// entry of the last batch axis and A's and C's rows run on from one entry to the next (a linear
/// layer on [batch, t, c]), that axis is folded into the rows: one product of batch * m rows
/// packs B once, where a product per entry packed it again for each (which costs most where k
/// is small). The epilogue then sees row b * m + i of
/// batch entry 0: `epilogue_folds` says its operands' strides allow that (batch stride = m
/// times row stride).
template <dtype D>
void matmul_views(const view& a, const view& b, const view& c, epilogue_ref<storage_t<D>> ep, bool epilogue_folds = true) {
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
  const index_t ars = a.strides.e[a.shape.rank - 2], crs = c.strides.e[r - 2];
  const bool fold = inner_batch > 1 && epilogue_folds && ib == 0 && ia == m * ars && ic == m * crs;
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
    if (fold) gemm<T>(1, inner_batch * m, n, k, ra, rb, rc, e);
    else gemm<T>(inner_batch, m, n, k, ra, rb, rc, e);
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

/// gather, scatter_add, unfold, fold, cumsum, argsort, rand: their routines (movement.hpp), not templates; fused
/// attention's (attention.hpp), one instantiation per dtype. Chosen at compile time, so that a
/// plan compiles the routines of its own ops only (attention's are large).
template <op O>
void single_movement(state& st, int x) {
  const node& n = st.at(x);
  const view out = st.dest[static_cast<std::size_t>(x)];
  if constexpr (O == op::gather) run_gather(st.view_of(n.in[0]), st.view_of(n.in[1]), out);
  else if constexpr (O == op::scatter_add) run_scatter_add(st.view_of(n.in[0]), st.view_of(n.in[1]), out);
  else if constexpr (O == op::unfold) run_unfold(st.view_of(n.in[0]), out, window_of(n), n.value);
  else if constexpr (O == op::fold) run_fold(st.view_of(n.in[0]), out, window_of(n));
  else if constexpr (O == op::cumsum) run_scan(st.view_of(n.in[0]), out, n.axis, n.value != 0, false);
  else if constexpr (O == op::cumprod) run_scan(st.view_of(n.in[0]), out, n.axis, false, true);
  else if constexpr (O == op::argsort) run_argsort(st.view_of(n.in[0]), out, n.axis, n.value != 0);
  else if constexpr (O == op::rand) run_rand(st.view_of(n.in[1]), out, n.axes);
  else if constexpr (O == op::attention)
    run_attention(st.view_of(n.in[0]), st.view_of(n.in[1]), st.view_of(n.in[2]), st.view_of(n.in[3]), out,
                  attention_causal(n), attention_scale(n));
  else if constexpr (O == op::attention_grad)
    run_attention_grad(st.view_of(n.in[0]), st.view_of(n.in[1]), st.view_of(n.in[2]), st.view_of(n.in[3]),
                       st.view_of(n.in[4]), st.view_of(n.in[5]), out, attention_causal(n), attention_scale(n));
  else static_assert(O == op::gather, "kiln: cpu: no routine for this movement op");
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
  else if constexpr (is_standalone(D.o)) single_movement<D.o>(st, x);
  else static_assert(D.o == op::concat, "kiln: cpu: no single-node rule for this op");
}

}  // namespace kiln::cpu::detail

#ifdef KILN_SINGLE_DIAGNOSTIC_PUSHED
#pragma GCC diagnostic pop
#undef KILN_SINGLE_DIAGNOSTIC_PUSHED
#endif
