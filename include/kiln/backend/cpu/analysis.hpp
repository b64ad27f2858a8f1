// kiln/backend/cpu/analysis.hpp: what the CPU backend needs to know about one kernel of a
// frozen schedule, computed at compile time from the schedule constant.
//
// For kernel K of schedule S, kernel_info<S, K>::value lists the kernel's nodes in graph order
// (their position in the kernel is their register), where each operand comes from (a
// register, a constant folded into the code, a rank-0 value loaded once per run, or memory
// through a strided reference), which nodes are stored and where, and for a row (reduction)
// kernel the passes over the row: sweep p accumulates the reductions of stage p (those whose
// input needs only reductions of earlier stages), the reduced-space nodes of stage p run after
// it, and a final sweep writes the full-space results. Softmax is sweep 1 (max), sweep 2 (sum of
// exp), final (exp / sum); layer_norm is sweep 1 (sum), sweep 2 (sum of squared deviations),
// final. Each step of a pass is a fold over the kernel's nodes with these tables as constants.
#pragma once

#include <array>
#include <cstdint>
#include <tuple>
#include <type_traits>

#include "../../core/cvec.hpp"
#include "../../core/shape_rules.hpp"
#include "../../graph/graph.hpp"
#include "../../passes/fuse.hpp"

namespace kiln::cpu::detail {

/// Where an operand's value comes from.
enum class src : std::uint8_t { none, reg, constant, scalar, mem };

/// Where a node lives in its kernel's iteration space: the whole space, or a reduction's
/// result space with (keep) or without (nokeep) the reduced axes.
enum class role : std::uint8_t { full, keep, nokeep };

/// What one step of a pass does with a node.
enum class act : std::uint8_t {
  none, compute, compute_store, accumulate, store, load_c,
  compute_cache,    ///< compute, and keep in the row cache for the final sweep
  load_cache,       ///< take from the row cache (computed in an earlier sweep)
  load_cache_store  ///< take from the row cache and store
};

/// The compile-time description of a node that selects its code: op, dtypes, operand sources.
/// Positions and constants are passed as (constant) arguments, so nodes that differ only in
/// them share one instantiation.
struct ndesc {
  op o = op::add;
  dtype dt = dtype::f32;
  std::array<dtype, 3> idt{};
  std::array<src, 3> kind{};
};

/// The (constant) arguments of a node's code.
struct nargs {
  std::array<int, 3> idx{-1, -1, -1};  ///< register, scalar slot or memory reference
  std::array<double, 3> value{};       ///< constants
  int out = -1;                        ///< memory reference it is stored through
  int acc = -1;                        ///< reductions: accumulator slot
  int cache = -1;                      ///< row-cache slot
};

/// Modes a kernel can run in.
enum class lane_type : std::uint8_t { scalar, f32, f64 };

struct kernel_sizes {
  int nodes = 0, mems = 0, scalars = 0, reductions = 0, stages = 0;
};

template <class Sched>
constexpr bool in_kernel(const Sched& s, int node, int k) {
  return s.kernel_of[static_cast<std::size_t>(node)] == k;
}

/// The node of kernel k that operand x reads through views (reshape, permute, slice,
/// broadcast), or -1: a value of this kernel read from memory, as if from another kernel.
template <class Sched>
constexpr int viewed_in_kernel(const Sched& s, int x, int k) {
  if (in_kernel(s, x, k)) return -1;  // a register, not memory
  while (x >= 0) {
    const node& n = s.g.nodes[static_cast<std::size_t>(x)];
    if (!passes::is_view(n.o) || n.o == op::numel) break;
    x = n.in[0];
  }
  return x >= 0 && in_kernel(s, x, k) ? x : -1;
}

/// Which nodes must be stored: written by the plan and read by something other than an
/// element count (numel reads only the shape; fusion marks its operand written all the same),
/// or an output.
template <class Sched>
constexpr auto stored_nodes(const Sched& s) {
  std::array<bool, std::tuple_size_v<std::remove_cvref_t<decltype(s.written)>>> st{};
  for (int o : s.g.outputs) st[static_cast<std::size_t>(o)] = true;
  for (std::size_t u = 0; u < s.g.nodes.size(); ++u) {
    const node& n = s.g.nodes[u];
    if (n.o == op::numel) continue;
    for (int j = 0; j < n.nin(); ++j) {
      if (!reads_input_values(n.o, j)) continue;  // a shape only
      const auto i = static_cast<std::size_t>(n.in[static_cast<std::size_t>(j)]);
      if (s.kernel_of[i] >= 0 && (s.kernel_of[u] != s.kernel_of[i] || passes::is_view(n.o))) st[i] = true;
    }
  }
  for (std::size_t i = 0; i < s.g.nodes.size(); ++i) st[i] = st[i] && s.written[i];
  return st;
}
template <const auto& S>
inline constexpr auto stored_of = stored_nodes(S);

/// The role of a node of shape `shape` in a reduction kernel over `space` and `axes`.
constexpr int role_in(const dims& shape, const dims& space, std::uint32_t axes) {
  if (shape == space) return static_cast<int>(role::full);
  if (shape == reduce_shape(space, axes, true).shape) return static_cast<int>(role::keep);
  if (shape == reduce_shape(space, axes, false).shape) return static_cast<int>(role::nokeep);
  return -1;
}

/// How an operand `x` of a node in kernel k is read: 0 register, 1 constant, 2 scalar, 3 memory.
template <class Sched>
constexpr src source_of(const Sched& s, int x, int k) {
  const node& n = s.g.nodes[static_cast<std::size_t>(x)];
  if (in_kernel(s, x, k)) return src::reg;
  if (n.o == op::constant) return src::constant;
  if (n.shape.rank == 0) return src::scalar;
  return src::mem;
}

template <std::size_t N, std::size_t NM, std::size_t NS, std::size_t NR, std::size_t NP>
struct kernel_info {
  passes::kernel_kind kind = passes::kernel_kind::pointwise;
  int rank = 1;               ///< iteration space rank (a rank-0 space runs as [1])
  std::uint32_t axes = 0;     ///< reduction kernels: reduced axes of the space
  bool lanes_reduce = false;  ///< reduction kernels: the innermost axis is reduced
  lane_type lanes = lane_type::scalar;
  bool per_node = false;      ///< run node by node (concat and iota, or no common space)
  int stages = 0;             ///< reduction kernels: sweeps before the final one
  int cached = 0;             ///< values kept in the row cache between sweeps
  int c_mem = -1;             ///< matmul kernels: the memory reference of the product
  std::array<int, N> node{};  ///< graph node of each position
  std::array<ndesc, N> desc{};
  std::array<nargs, N> args{};
  std::array<role, N> where{};
  std::array<int, N> avail{};  ///< stage after which the node's value can be computed
  std::array<bool, N> reduction{};
  std::array<std::array<int, 3>, N> viewed{};  ///< position of an operand's in-kernel source read through views
  std::array<int, NM> mem_node{};     ///< node read (or written) through each memory reference
  std::array<bool, NM> mem_nokeep{};  ///< indexed through the kept axes only
  std::array<bool, NM> mem_out{};     ///< a destination (a written node, or the product)
  std::array<int, NS> scalar_node{};
  std::array<int, NR> red_pos{};  ///< position of each reduction (accumulator slot order)
  std::array<std::array<act, N>, NP> action{};  ///< per pass, per position
};

/// Counts what kernel k of s needs (sizes of kernel_info).
template <class Sched>
constexpr kernel_sizes count_kernel(const Sched& s, int k, const bool* stored) {
  kernel_sizes z;
  const std::size_t n = s.g.nodes.size();
  cvec<int> mem_mark(n, 0), scalar_mark(n, 0), avail(n, 0);  // mem_mark: bit 1 full, bit 2 nokeep
  const passes::kernel& K = s.kernels[static_cast<std::size_t>(k)];
  const bool row = K.kind == passes::kernel_kind::reduction;
  const dims space = K.space;
  for (std::size_t i = 0; i < n; ++i) {
    if (!in_kernel(s, static_cast<int>(i), k)) continue;
    const node& x = s.g.nodes[i];
    ++z.nodes;
    if (stored[i]) ++z.mems;
    int av = 0;
    for (int j = 0; j < x.nin(); ++j) {
      int in = x.in[static_cast<std::size_t>(j)];
      if (const int v = viewed_in_kernel(s, in, k); v >= 0) in = v;
      if (in_kernel(s, in, k)) av = av > avail[static_cast<std::size_t>(in)] ? av : avail[static_cast<std::size_t>(in)];
    }
    if (kind_of(x.o) == op_kind::reduce) {
      ++z.reductions;
      ++av;
      z.stages = z.stages > av ? z.stages : av;
    }
    avail[i] = av;
    if (x.o == op::matmul) {
      ++z.mems;  // the product
      continue;  // its operands are read by the GEMM, not through memory references
    }
    const bool nokeep = row && kind_of(x.o) != op_kind::reduce && role_in(x.shape, space, K.axes) == static_cast<int>(role::nokeep);
    for (int j = 0; j < x.nin(); ++j) {
      const int in = x.in[static_cast<std::size_t>(j)];
      const src from = source_of(s, in, k);
      if (from == src::scalar && !scalar_mark[static_cast<std::size_t>(in)]) {
        scalar_mark[static_cast<std::size_t>(in)] = 1;
        ++z.scalars;
      }
      if (from == src::mem) {
        const int bit = nokeep ? 2 : 1;
        if (!(mem_mark[static_cast<std::size_t>(in)] & bit)) {
          mem_mark[static_cast<std::size_t>(in)] |= bit;
          ++z.mems;
        }
      }
    }
  }
  return z;
}

/// Fills kernel_info for kernel k of s (Info is kernel_info with the counted sizes).
template <class Info, class Sched>
constexpr Info analyse_kernel(const Sched& s, int k, const bool* stored) {
  Info f;
  const passes::kernel& K = s.kernels[static_cast<std::size_t>(k)];
  const std::size_t n = s.g.nodes.size();
  f.kind = K.kind;
  const bool row = K.kind == passes::kernel_kind::reduction;
  f.rank = K.space.rank > 0 ? K.space.rank : 1;
  f.axes = row ? (K.space.rank > 0 ? K.axes : 1u) : 0u;
  f.lanes_reduce = row && (f.axes & (1u << (f.rank - 1)));
  cvec<int> pos(n, -1), mem_full(n, -1), mem_nokeep(n, -1), scalar(n, -1);
  int np = 0, nm = 0, ns = 0, nr = 0;
  bool has_f32 = false, has_f64 = false, vec_ok = true;
  auto note_dtype = [&](dtype d) {
    if (d == dtype::f32 || d == dtype::bf16) has_f32 = true;
    else if (d == dtype::f64) has_f64 = true;
    else if (d != dtype::boolean) vec_ok = false;
  };
  // the kernel's nodes in index order, except that a matmul kernel's product comes first (its
  // epilogue frame starts with it): nodes of lower index in such a kernel are computed from
  // leaves alone (fusion places them with their first reader), so they may follow it
  cvec<int> members;
  const bool mm = K.kind == passes::kernel_kind::matmul;
  for (std::size_t i = 0; i < n; ++i)
    if (in_kernel(s, static_cast<int>(i), k) && mm && s.g.nodes[i].o == op::matmul) members.push_back(static_cast<int>(i));
  for (std::size_t i = 0; i < n; ++i)
    if (in_kernel(s, static_cast<int>(i), k) && !(mm && s.g.nodes[i].o == op::matmul)) members.push_back(static_cast<int>(i));
  for (const int member : members) {
    const auto i = static_cast<std::size_t>(member);
    const node& x = s.g.nodes[i];
    const int p = np++;
    pos[i] = p;
    f.node[static_cast<std::size_t>(p)] = static_cast<int>(i);
    ndesc& d = f.desc[static_cast<std::size_t>(p)];
    nargs& a = f.args[static_cast<std::size_t>(p)];
    d.o = x.o;
    d.dt = x.dt;
    note_dtype(x.dt);
    if (x.o == op::concat || x.o == op::iota || is_standalone(x.o)) f.per_node = true;
    const bool red = kind_of(x.o) == op_kind::reduce;
    f.reduction[static_cast<std::size_t>(p)] = red;
    if (red) {
      f.red_pos[static_cast<std::size_t>(nr)] = p;
      a.acc = nr++;
    }
    int r = static_cast<int>(role::full);
    if (row) {
      r = red ? static_cast<int>(x.keepdim || K.space.rank == 0 ? role::keep : role::nokeep)
              : role_in(x.shape, K.space, K.axes);
      if (r < 0) {  // no place in the row space (cannot happen with static shapes): run node by node
        f.per_node = true;
        r = 0;
      }
    }
    if (red && (x.axes != K.axes || !(s.g.nodes[static_cast<std::size_t>(x.in[0])].shape == K.space)))
      f.per_node = true;  // a reduction over another space (fusion never makes one): node by node
    f.where[static_cast<std::size_t>(p)] = static_cast<role>(r);
    // vector lanes: bool values only as comparison results, where conditions and casts
    if (x.dt == dtype::boolean && !(is_comparison(x.o) || x.o == op::cast)) vec_ok = false;
    if (x.o == op::matmul) continue;  // its operands are read by the GEMM
    for (int j = 0; j < x.nin(); ++j) {
      const int in = x.in[static_cast<std::size_t>(j)];
      const node& y = s.g.nodes[static_cast<std::size_t>(in)];
      d.idt[static_cast<std::size_t>(j)] = y.dt;
      note_dtype(y.dt);
      if (y.dt == dtype::boolean && !((x.o == op::where && j == 0) || x.o == op::cast)) vec_ok = false;
      const src from = source_of(s, in, k);
      d.kind[static_cast<std::size_t>(j)] = from;
      f.viewed[static_cast<std::size_t>(p)][static_cast<std::size_t>(j)] = -1;
      if (const int v = viewed_in_kernel(s, in, k); v >= 0) {
        // a value of this kernel read through a view: only a row kernel's reduced-space values
        // are in memory before the rest of the kernel reads them; otherwise run node by node
        const int q = pos[static_cast<std::size_t>(v)];
        f.viewed[static_cast<std::size_t>(p)][static_cast<std::size_t>(j)] = q;
        if (!row || (f.where[static_cast<std::size_t>(q)] == role::full && !f.reduction[static_cast<std::size_t>(q)]))
          f.per_node = true;
      }
      if (row && from == src::reg && r != static_cast<int>(role::full) && !red &&
          f.where[static_cast<std::size_t>(pos[static_cast<std::size_t>(in)])] == role::full &&
          !f.reduction[static_cast<std::size_t>(pos[static_cast<std::size_t>(in)])])
        f.per_node = true;  // a reduced-space value computed from a full-space one: node by node
      int idx = -1;
      switch (from) {
        case src::reg: idx = pos[static_cast<std::size_t>(in)]; break;
        case src::constant: a.value[static_cast<std::size_t>(j)] = y.value; break;
        case src::scalar:
          if (scalar[static_cast<std::size_t>(in)] < 0) {
            scalar[static_cast<std::size_t>(in)] = ns;
            f.scalar_node[static_cast<std::size_t>(ns++)] = in;
          }
          idx = scalar[static_cast<std::size_t>(in)];
          break;
        case src::mem: {
          const bool nk = r == static_cast<int>(role::nokeep) && !red;
          cvec<int>& table = nk ? mem_nokeep : mem_full;
          if (table[static_cast<std::size_t>(in)] < 0) {
            table[static_cast<std::size_t>(in)] = nm;
            f.mem_node[static_cast<std::size_t>(nm)] = in;
            f.mem_nokeep[static_cast<std::size_t>(nm)] = nk;
            ++nm;
          }
          idx = table[static_cast<std::size_t>(in)];
          break;
        }
        case src::none: break;
      }
      a.idx[static_cast<std::size_t>(j)] = idx;
    }
  }
  // destinations, after the operands
  for (int p = 0; p < np; ++p) {
    const int i = f.node[static_cast<std::size_t>(p)];
    if (!stored[static_cast<std::size_t>(i)]) continue;
    f.args[static_cast<std::size_t>(p)].out = nm;
    f.mem_node[static_cast<std::size_t>(nm)] = i;
    f.mem_nokeep[static_cast<std::size_t>(nm)] = f.where[static_cast<std::size_t>(p)] == role::nokeep;
    f.mem_out[static_cast<std::size_t>(nm)] = true;
    ++nm;
  }
  if (K.kind == passes::kernel_kind::matmul) {
    f.c_mem = nm;
    f.args[0].idx[0] = nm;  // the product is loaded through this reference
    f.mem_node[static_cast<std::size_t>(nm)] = f.node[0];
    f.mem_out[static_cast<std::size_t>(nm)] = true;
    ++nm;
  }
  if (has_f32 && has_f64) vec_ok = false;
  f.lanes = vec_ok && !f.per_node ? (has_f64 ? lane_type::f64 : has_f32 ? lane_type::f32 : lane_type::scalar)
                                  : lane_type::scalar;

  // stages: a reduction needs the stages its input depends on to be complete
  int stages = 0;
  for (int p = 0; p < np; ++p) {
    const ndesc& d = f.desc[static_cast<std::size_t>(p)];
    int av = 0;
    for (int j = 0; j < 3; ++j) {
      int q = -1;
      if (d.kind[static_cast<std::size_t>(j)] == src::reg) q = f.args[static_cast<std::size_t>(p)].idx[static_cast<std::size_t>(j)];
      else if (d.kind[static_cast<std::size_t>(j)] == src::mem) q = f.viewed[static_cast<std::size_t>(p)][static_cast<std::size_t>(j)];
      if (q >= 0) av = av > f.avail[static_cast<std::size_t>(q)] ? av : f.avail[static_cast<std::size_t>(q)];
    }
    if (f.reduction[static_cast<std::size_t>(p)]) {
      ++av;
      stages = stages > av ? stages : av;
    }
    f.avail[static_cast<std::size_t>(p)] = av;
  }
  f.stages = stages;

  // actions per pass
  if (!row) {
    for (int p = 0; p < np; ++p) {
      const bool w = f.args[static_cast<std::size_t>(p)].out >= 0;
      act a = w ? act::compute_store : act::compute;
      if (f.desc[static_cast<std::size_t>(p)].o == op::matmul) a = act::load_c;
      f.action[0][static_cast<std::size_t>(p)] = a;
    }
    return f;
  }
  // pass 2p: reduced-space nodes of stage p (p = 0 .. stages); pass 2p - 1: sweep p; last: final
  auto mark_cone = [&](auto& acts, int from) {
    // full-space nodes that `from` reads, transitively, are computed in this sweep
    cvec<char> need(static_cast<std::size_t>(np), 0);
    need[static_cast<std::size_t>(from)] = 1;
    for (int p = from; p >= 0; --p) {
      if (!need[static_cast<std::size_t>(p)]) continue;
      const ndesc& d = f.desc[static_cast<std::size_t>(p)];
      for (int j = 0; j < 3; ++j)
        if (d.kind[static_cast<std::size_t>(j)] == src::reg) {
          const int q = f.args[static_cast<std::size_t>(p)].idx[static_cast<std::size_t>(j)];
          if (f.where[static_cast<std::size_t>(q)] == role::full && !f.reduction[static_cast<std::size_t>(q)])
            need[static_cast<std::size_t>(q)] = 1;
        }
      if (p != from && acts[static_cast<std::size_t>(p)] == act::none) acts[static_cast<std::size_t>(p)] = act::compute;
    }
  };
  for (int p = 0; p < np; ++p) {
    const bool red = f.reduction[static_cast<std::size_t>(p)];
    const bool w = f.args[static_cast<std::size_t>(p)].out >= 0;
    const int av = f.avail[static_cast<std::size_t>(p)];
    const bool full = f.where[static_cast<std::size_t>(p)] == role::full && !red;
    if (red) {
      auto& sweep = f.action[static_cast<std::size_t>(2 * av - 1)];
      sweep[static_cast<std::size_t>(p)] = act::accumulate;
      mark_cone(sweep, p);
      if (w) f.action[static_cast<std::size_t>(2 * av)][static_cast<std::size_t>(p)] = act::store;
    } else if (!full) {
      f.action[static_cast<std::size_t>(2 * av)][static_cast<std::size_t>(p)] = w ? act::compute_store : act::compute;
    } else if (w) {
      auto& fin = f.action[static_cast<std::size_t>(2 * stages + 1)];
      fin[static_cast<std::size_t>(p)] = act::compute_store;
      mark_cone(fin, p);
    }
  }
  // The row cache: when lanes run along the row, a full-space value that an earlier sweep
  // computes with a transcendental function (softmax's exp(x - max)) and that the final sweep
  // needs again is kept per row (in L1/L2) instead of computed twice.
  if (!f.lanes_reduce || f.lanes == lane_type::scalar || stages == 0) return f;
  auto full_at = [&](int q) { return f.where[static_cast<std::size_t>(q)] == role::full && !f.reduction[static_cast<std::size_t>(q)]; };
  auto reg_inputs = [&](int p, auto&& fn) {
    const ndesc& d = f.desc[static_cast<std::size_t>(p)];
    for (int j = 0; j < 3; ++j)
      if (d.kind[static_cast<std::size_t>(j)] == src::reg) fn(f.args[static_cast<std::size_t>(p)].idx[static_cast<std::size_t>(j)]);
  };
  const auto fin_pass = static_cast<std::size_t>(2 * stages + 1);
  auto& fin = f.action[fin_pass];
  cvec<char> expensive(static_cast<std::size_t>(np), 0), cache(static_cast<std::size_t>(np), 0);
  cvec<int> first_sweep(static_cast<std::size_t>(np), -1);
  bool any = false;
  for (int p = 0; p < np; ++p) {
    if (!full_at(p)) continue;
    const op o = f.desc[static_cast<std::size_t>(p)].o;
    char e = o == op::exp || o == op::log || o == op::tanh || o == op::erf || o == op::sin || o == op::cos ||
             o == op::pow || o == op::sigmoid || o == op::silu || o == op::gelu || o == op::gelu_tanh;
    reg_inputs(p, [&](int q) { e = e || (full_at(q) && expensive[static_cast<std::size_t>(q)]); });
    expensive[static_cast<std::size_t>(p)] = e;
    for (std::size_t pass = 1; pass < fin_pass && first_sweep[static_cast<std::size_t>(p)] < 0; pass += 2)
      if (f.action[pass][static_cast<std::size_t>(p)] == act::compute) first_sweep[static_cast<std::size_t>(p)] = static_cast<int>(pass);
  }
  // cache the frontier: values of an earlier sweep that the final sweep reads from a node that
  // sweep does not compute (or stores itself)
  for (int p = 0; p < np; ++p) {
    const auto u = static_cast<std::size_t>(p);
    if (fin[u] == act::none) continue;
    auto consider = [&](int q) {
      const auto v = static_cast<std::size_t>(q);
      if (full_at(q) && first_sweep[v] >= 0 && expensive[v] && f.desc[v].dt != dtype::boolean &&
          (first_sweep[u] != first_sweep[v] || fin[u] == act::compute_store)) {
        cache[v] = 1;
        any = true;
      }
    };
    reg_inputs(p, consider);
    if (fin[u] == act::compute_store) consider(p);
  }
  if (!any) return f;
  // the final sweep again, its cones stopping at cached values
  cvec<char> need(static_cast<std::size_t>(np), 0);
  for (int p = 0; p < np; ++p) {
    need[static_cast<std::size_t>(p)] = fin[static_cast<std::size_t>(p)] == act::compute_store;
    fin[static_cast<std::size_t>(p)] = act::none;
  }
  for (int p = np - 1; p >= 0; --p) {
    const auto u = static_cast<std::size_t>(p);
    if (!need[u]) continue;
    const bool w = f.args[u].out >= 0;
    if (cache[u]) {
      fin[u] = w ? act::load_cache_store : act::load_cache;
      f.action[static_cast<std::size_t>(first_sweep[u])][u] = act::compute_cache;
      f.args[u].cache = f.cached++;
      continue;
    }
    fin[u] = w ? act::compute_store : act::compute;
    reg_inputs(p, [&](int q) {
      if (full_at(q)) need[static_cast<std::size_t>(q)] = 1;
    });
  }
  return f;
}

// ---- symbolic extents ------------------------------------------------------------------------

/// Shapes of every node with each dynamic extent of a leaf as a symbol, so that extents known
/// to be equal at run time can be told from extents that merely are both dynamic: e >= 0 a
/// static extent, e == unknown an extent not known to equal anything, e <= -2 the symbol of
/// one leaf axis (-2 - (slot * max_rank + axis)).
inline constexpr index_t unknown = -1;

constexpr index_t sym_broadcast(index_t a, index_t b) {
  if (a == b) return a;
  if (a == 1) return b;
  if (b == 1) return a;
  if (a >= 0) return a;  // a static extent other than 1 wins (the other must be it or 1)
  if (b >= 0) return b;
  return unknown;        // two different symbols (or unknowns): either may be 1
}

template <class Sched>
constexpr cvec<dims> symbolic_shapes(const Sched& s) {
  const std::size_t n = s.g.nodes.size();
  cvec<dims> sym(n, dims{});
  for (std::size_t u = 0; u < n; ++u) {
    const node& x = s.g.nodes[u];
    auto in = [&](int j) -> const dims& { return sym[static_cast<std::size_t>(x.in[static_cast<std::size_t>(j)])]; };
    dims r = x.shape;
    auto bcast = [&](const dims& a, const dims& b) {
      dims o;
      o.rank = a.rank > b.rank ? a.rank : b.rank;
      for (int i = 0; i < o.rank; ++i) {
        const int ia = a.rank - o.rank + i, ib = b.rank - o.rank + i;
        o.e[i] = sym_broadcast(ia >= 0 ? a.e[ia] : 1, ib >= 0 ? b.e[ib] : 1);
      }
      return o;
    };
    switch (kind_of(x.o)) {
      case op_kind::leaf:
        for (int i = 0; i < r.rank; ++i)
          if (r.e[i] == dyn) r.e[i] = -2 - (static_cast<index_t>(x.slot) * max_rank + i);
        break;
      case op_kind::unary:
      case op_kind::cast: r = in(0); break;
      case op_kind::binary: r = bcast(in(0), in(1)); break;
      case op_kind::ternary: r = bcast(bcast(in(0), in(1)), in(2)); break;
      case op_kind::reduce: r = reduce_shape(in(0), x.axes, x.keepdim).shape; break;
      case op_kind::matmul: {
        dims a = in(0), b = in(1);
        const index_t m = a.e[a.rank - 2], k = b.e[b.rank - 1];
        a.rank -= 2;
        b.rank -= 2;
        r = bcast(a, b);
        r.e[r.rank++] = m;
        r.e[r.rank++] = k;
        break;
      }
      case op_kind::shape:
        if (x.o == op::permute) {
          for (int i = 0; i < r.rank; ++i) r.e[i] = in(0).e[x.perm[i]];
        } else if (x.o == op::broadcast) {
          for (int i = 0; i < r.rank; ++i) {
            const int j = in(0).rank - r.rank + i;
            if (r.e[i] == dyn) r.e[i] = j >= 0 ? in(0).e[j] : unknown;
          }
        } else if (x.o == op::reshape) {
          // one inferred extent from one symbolic input extent with the same static rest
          index_t known_in = 1, known_out = 1, symbol = 0;
          int syms = 0, dyns = 0;
          for (int i = 0; i < in(0).rank; ++i) {
            if (in(0).e[i] >= 0) known_in *= in(0).e[i];
            else {
              ++syms;
              symbol = in(0).e[i];
            }
          }
          for (int i = 0; i < r.rank; ++i) {
            if (r.e[i] >= 0) known_out *= r.e[i];
            else ++dyns;
          }
          for (int i = 0; i < r.rank; ++i)
            if (r.e[i] == dyn) r.e[i] = syms == 1 && dyns == 1 && known_in == known_out && symbol <= -2 ? symbol : unknown;
        } else if (x.o == op::iota) {
          r.e[0] = in(0).e[x.axis];
        } else {
          for (int i = 0; i < r.rank; ++i)
            if (r.e[i] == dyn) r.e[i] = unknown;
        }
        break;
      default: break;  // constants: rank 0
    }
    sym[u] = r;
  }
  return sym;
}

/// Whether kernel k's nodes certainly have, at run time, the shapes its loop nest assumes:
/// every node's symbolic shape is the space's (or for a row kernel, the reduced space's), with
/// no unknown extent. Otherwise the kernel checks its shapes at run time and can fall back to
/// running node by node.
template <class Sched>
constexpr bool certainly_fits(const Sched& s, int k) {
  const cvec<dims> sym = symbolic_shapes(s);
  const passes::kernel& K = s.kernels[static_cast<std::size_t>(k)];
  dims space{};
  bool have = false;
  auto certain = [](const dims& d) {
    for (int i = 0; i < d.rank; ++i)
      if (d.e[i] == unknown) return false;
    return true;
  };
  for (std::size_t i = 0; i < s.g.nodes.size(); ++i) {
    if (s.kernel_of[i] != k) continue;
    const node& x = s.g.nodes[i];
    const dims& own = sym[i];
    if (K.kind == passes::kernel_kind::reduction && kind_of(x.o) == op_kind::reduce) {
      const dims& src = sym[static_cast<std::size_t>(x.in[0])];
      if (have && !(src == space)) return false;
      space = src;
      have = true;
    }
    if (!certain(own)) return false;
  }
  if (K.kind != passes::kernel_kind::reduction) {
    for (std::size_t i = 0; i < s.g.nodes.size(); ++i) {
      if (s.kernel_of[i] != k) continue;
      if (!have) {
        space = sym[i];
        have = true;
      }
      if (!(sym[i] == space)) return false;
    }
    return true;
  }
  if (!certain(space)) return false;
  const dims keep = reduce_shape(space, K.axes, true).shape, nokeep = reduce_shape(space, K.axes, false).shape;
  for (std::size_t i = 0; i < s.g.nodes.size(); ++i) {
    if (s.kernel_of[i] != k || kind_of(s.g.nodes[i].o) == op_kind::reduce) continue;
    const int r = role_in(s.g.nodes[i].shape, K.space, K.axes);
    const dims& want = r == static_cast<int>(role::full) ? space : r == static_cast<int>(role::keep) ? keep : nokeep;
    if (!(sym[i] == want)) return false;
  }
  return true;
}

/// The analysis of kernel K of the schedule S, as a constant.
template <const auto& S, int K>
inline constexpr kernel_sizes sizes_of = count_kernel(S, K, stored_of<S>.data());

template <const auto& S, int K>
struct kernel_of {
  static constexpr kernel_sizes z = sizes_of<S, K>;
  static constexpr bool row = S.kernels[static_cast<std::size_t>(K)].kind == passes::kernel_kind::reduction;
  using info_t = kernel_info<static_cast<std::size_t>(z.nodes), static_cast<std::size_t>(z.mems),
                             static_cast<std::size_t>(z.scalars > 0 ? z.scalars : 1),
                             static_cast<std::size_t>(z.reductions > 0 ? z.reductions : 1),
                             static_cast<std::size_t>(row ? 2 * z.stages + 2 : 1)>;
  static constexpr info_t value = analyse_kernel<info_t>(S, K, stored_of<S>.data());
};

}  // namespace kiln::cpu::detail
