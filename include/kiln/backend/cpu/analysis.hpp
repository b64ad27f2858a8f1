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
#include <bit>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "../../core/cvec.hpp"
#include "../../core/shape_rules.hpp"
#include "../../graph/graph.hpp"
#include "../../passes/extents.hpp"
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

/// Raw views of a schedule's node and kernel arrays. The analysis runs in constant evaluation,
/// where each call (std::array's operator[] is two) and each statement is a step: indexing
/// these pointers is neither.
struct sched_view {
  const node* nd;
  const int* ko;
};
template <class Sched>
constexpr sched_view view_of(const Sched& s) {
  return {s.g.nodes.data(), s.kernel_of.data()};
}

template <class Sched>
constexpr bool in_kernel(const Sched& s, int node, int k) {
  return s.kernel_of[static_cast<std::size_t>(node)] == k;
}

/// The node of kernel k that operand x reads through views (reshape, permute, slice,
/// broadcast), or -1: a value of this kernel read from memory, as if from another kernel.
constexpr int viewed_in_kernel(sched_view v, int x, int k) {
  if (v.ko[x] == k) return -1;  // a register, not memory
  while (x >= 0) {
    const node& n = v.nd[x];
    if (!passes::is_view(n.o) || n.o == op::numel) break;
    x = n.in[0];
  }
  return x >= 0 && v.ko[x] == k ? x : -1;
}
template <class Sched>
constexpr int viewed_in_kernel(const Sched& s, int x, int k) {
  return viewed_in_kernel(view_of(s), x, k);
}

/// Which nodes must be stored: written by the plan and read by something other than an
/// element count (numel reads only the shape; fusion marks its operand written all the same),
/// or an output.
template <class Sched>
constexpr auto stored_nodes(const Sched& s) {
  std::array<bool, std::tuple_size_v<std::remove_cvref_t<decltype(s.written)>>> st{};
  bool* out = st.data();
  const sched_view v = view_of(s);
  const char* written = s.written.data();
  const std::size_t size = s.g.nodes.size();
  for (int o : s.g.outputs) out[o] = true;
  for (std::size_t u = 0; u < size; ++u) {
    const node& n = v.nd[u];
    if (n.o == op::numel) continue;
    const bool view = passes::is_view(n.o);
    for (int j = 0, nj = n.nin(); j < nj; ++j)
      if (reads_input_values(n.o, j) && v.ko[n.in[j]] >= 0 && (v.ko[u] != v.ko[n.in[j]] || view))
        out[n.in[j]] = true;  // (an operand read for its shape only is not a value read)
  }
  for (std::size_t i = 0; i < size; ++i) out[i] = out[i] && written[i];
  return st;
}
template <const auto& S>
inline constexpr auto stored_of = stored_nodes(S);

/// Each kernel's nodes in index order, found in one pass over the graph: kernel k's are
/// node[start[k]] .. node[start[k + 1] - 1]. The analysis of a kernel walks its own nodes
/// and looks nodes up in these short sorted lists, not in arrays the size of the graph (a
/// plan of hundreds of kernels paid kernels x nodes steps of constant evaluation).
template <std::size_t NK, std::size_t N>
struct members_table {
  std::array<int, NK + 1> start{};
  std::array<int, N> node{};
};
template <class Sched>
constexpr auto kernel_members(const Sched& s) {
  members_table<std::tuple_size_v<std::remove_cvref_t<decltype(s.kernels)>>,
                std::tuple_size_v<std::remove_cvref_t<decltype(s.kernel_of)>>>
      t;
  const int* ko = s.kernel_of.data();
  int* start = t.start.data();
  const std::size_t n = s.kernel_of.size();
  for (std::size_t i = 0; i < n; ++i)
    if (ko[i] >= 0) ++start[ko[i] + 1];
  for (std::size_t k = 1; k < t.start.size(); ++k) start[k] += start[k - 1];
  cvec<int> fill(t.start.begin(), t.start.end());
  int* at = fill.data();
  int* node = t.node.data();
  for (std::size_t i = 0; i < n; ++i)
    if (ko[i] >= 0) node[at[ko[i]]++] = static_cast<int>(i);
  return t;
}
template <const auto& S>
inline constexpr auto members_of = kernel_members(S);

/// Kernel k's nodes (sorted), as a pointer range.
struct node_range {
  const int* b = nullptr;
  const int* e = nullptr;
  constexpr const int* begin() const { return b; }
  constexpr const int* end() const { return e; }
  constexpr int size() const { return static_cast<int>(e - b); }
  /// x's index in the range, or -1.
  constexpr int find(int x) const {
    const int* lo = b;
    const int* hi = e;
    while (lo < hi) {
      const int* mid = lo + (hi - lo) / 2;
      if (*mid < x) lo = mid + 1;
      else hi = mid;
    }
    return lo < e && *lo == x ? static_cast<int>(lo - b) : -1;
  }
};
template <const auto& S>
constexpr node_range members_in(int k) {
  const auto& t = members_of<S>;
  return {t.node.data() + t.start[static_cast<std::size_t>(k)], t.node.data() + t.start[static_cast<std::size_t>(k) + 1]};
}

/// The role of a node of shape `shape` in a reduction kernel over `space` and `axes`
/// (passes::position_in, whose 0, 1, 2 are role's full, keep, nokeep), or -1.
constexpr int role_in(const dims& shape, const dims& space, std::uint32_t axes) {
  static_assert(static_cast<int>(role::full) == 0 && static_cast<int>(role::keep) == 1 && static_cast<int>(role::nokeep) == 2);
  return passes::position_in(shape, space, axes);
}

/// How an operand `x` of a node in kernel k is read: 0 register, 1 constant, 2 scalar, 3 memory.
constexpr src source_of(sched_view v, int x, int k) {
  return v.ko[x] == k                 ? src::reg
         : v.nd[x].o == op::constant  ? src::constant
         : v.nd[x].shape.rank == 0    ? src::scalar
                                      : src::mem;
}
template <class Sched>
constexpr src source_of(const Sched& s, int x, int k) {
  return source_of(view_of(s), x, k);
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

/// Counts what kernel k of s, of nodes m, needs (sizes of kernel_info).
template <class Sched>
constexpr kernel_sizes count_kernel(const Sched& s, int k, const bool* stored, node_range m) {
  kernel_sizes z;
  const int nm = m.size();
  cvec<int> avail(static_cast<std::size_t>(nm), 0);  // by index in m
  cvec<int> seen;  // operands read through memory (2 x + 1 if through the kept axes) or as scalars (-1 - x)
  seen.reserve(static_cast<std::size_t>(3 * nm));
  const passes::kernel& K = s.kernels[static_cast<std::size_t>(k)];
  const bool row = K.kind == passes::kernel_kind::reduction;
  const dims space = K.space;
  const sched_view sv = view_of(s);
  int* av_of = avail.data();
  const auto first_time = [&](int key) {
    for (const int y : seen)
      if (y == key) return false;
    seen.push_back(key);
    return true;
  };
  for (int q = 0; q < nm; ++q) {
    const int i = m.b[q];
    const node& x = sv.nd[i];
    ++z.nodes;
    if (stored[i]) ++z.mems;
    int av = 0;
    for (int j = 0, nj = x.nin(); j < nj; ++j) {
      int in = x.in[j];
      if (sv.ko[in] != k && passes::is_view(sv.nd[in].o))
        if (const int v = viewed_in_kernel(sv, in, k); v >= 0) in = v;
      if (sv.ko[in] == k) {
        const int r = m.find(in);
        if (av < av_of[r]) av = av_of[r];
      }
    }
    if (kind_of(x.o) == op_kind::reduce) {
      ++z.reductions;
      ++av;
      z.stages = z.stages > av ? z.stages : av;
    }
    av_of[q] = av;
    if (x.o == op::matmul) {
      ++z.mems;  // the product
      continue;  // its operands are read by the GEMM, not through memory references
    }
    const bool nokeep = row && kind_of(x.o) != op_kind::reduce && role_in(x.shape, space, K.axes) == static_cast<int>(role::nokeep);
    for (int j = 0, nj = x.nin(); j < nj; ++j) {
      const int in = x.in[j];
      const src from = source_of(sv, in, k);
      if (from == src::scalar && first_time(-1 - in)) ++z.scalars;
      else if (from == src::mem && first_time(2 * in + (nokeep ? 1 : 0))) ++z.mems;
    }
  }
  return z;
}

/// Fills kernel_info for kernel k of s, of nodes m (Info is kernel_info with the counted sizes).
template <class Info, class Sched>
constexpr Info analyse_kernel(const Sched& s, int k, const bool* stored, node_range m) {
  Info f;
  const passes::kernel& K = s.kernels[static_cast<std::size_t>(k)];
  f.kind = K.kind;
  const bool row = K.kind == passes::kernel_kind::reduction;
  f.rank = K.space.rank > 0 ? K.space.rank : 1;
  f.axes = row ? (K.space.rank > 0 ? K.axes : 1u) : 0u;
  f.lanes_reduce = row && (f.axes & (1u << (f.rank - 1)));
  cvec<int> pos(static_cast<std::size_t>(m.size()), -1);  // by index in m
  int* const pos_at = pos.data();
  const auto pos_of = [&](int x) { return pos_at[m.find(x)]; };
  int np = 0, nm = 0, ns = 0, nr = 0, stages = 0;
  bool vec_ok = true;
  std::uint32_t dtypes = 0;  // bit d: a value of dtype d is computed or read
  // raw pointers into s and f (see sched_view)
  const sched_view sv = view_of(s);
  int* f_node = f.node.data();
  ndesc* f_desc = f.desc.data();
  nargs* f_args = f.args.data();
  role* f_where = f.where.data();
  bool* f_reduction = f.reduction.data();
  std::array<int, 3>* f_viewed = f.viewed.data();
  int* f_mem_node = f.mem_node.data();
  bool* f_mem_nokeep = f.mem_nokeep.data();
  bool* f_mem_out = f.mem_out.data();
  int* f_avail = f.avail.data();
  // the kernel's nodes in index order, except that a matmul kernel's product comes first (its
  // epilogue frame starts with it): nodes of lower index in such a kernel are computed from
  // leaves alone (fusion places them with their first reader), so they may follow it
  cvec<int> members;
  members.reserve(static_cast<std::size_t>(m.size()));
  const bool mm = K.kind == passes::kernel_kind::matmul;
  if (mm)
    for (const int i : m)
      if (sv.nd[i].o == op::matmul) members.push_back(i);
  for (const int i : m)
    if (!(mm && sv.nd[i].o == op::matmul)) members.push_back(i);
  for (const int member : members) {
    const auto i = static_cast<std::size_t>(member);
    const node& x = sv.nd[i];
    const int p = np++;
    pos_at[m.find(member)] = p;
    f_node[p] = static_cast<int>(i);
    ndesc& d = f_desc[p];
    nargs& a = f_args[p];
    d.o = x.o;
    d.dt = x.dt;
    dtypes |= 1u << static_cast<int>(x.dt);
    if (x.o == op::concat || x.o == op::iota || is_standalone(x.o)) f.per_node = true;
    const bool red = kind_of(x.o) == op_kind::reduce;
    f_reduction[p] = red;
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
    if (red && (x.axes != K.axes || !(sv.nd[x.in[0]].shape == K.space)))
      f.per_node = true;  // a reduction over another space (fusion never makes one): node by node
    f_where[p] = static_cast<role>(r);
    // vector lanes: bool values only as comparison results, where conditions and casts
    if (x.dt == dtype::boolean && !(is_comparison(x.o) || x.o == op::cast)) vec_ok = false;
    if (x.o == op::matmul) continue;  // its operands are read by the GEMM
    // the operands' fields are gathered in C arrays and stored once (std::array's operator[]
    // costs two calls in constant evaluation)
    // (starting from the fields' defaults: d, a and f_viewed[p] are as f was initialised)
    dtype idt[3]{};
    src kind[3]{};
    int idx[3]{-1, -1, -1};
    double value[3]{};
    int viewed[3]{};
    // (fused attention's fourth operand is read by its own routine, through view_of, as the
    // other operands of a kernel of its own: not recorded here)
    for (int j = 0, nj = x.nin() < 3 ? x.nin() : 3; j < nj; ++j) {
      const int in = x.in[j];
      const node& y = sv.nd[in];
      idt[j] = y.dt;
      dtypes |= 1u << static_cast<int>(y.dt);
      if (y.dt == dtype::boolean && !((x.o == op::where && j == 0) || x.o == op::cast)) vec_ok = false;
      const src from = source_of(sv, in, k);
      kind[j] = from;
      viewed[j] = -1;
      if (from != src::reg && passes::is_view(y.o)) {
        if (const int v = viewed_in_kernel(sv, in, k); v >= 0) {
          // a value of this kernel read through a view: only a row kernel's reduced-space values
          // are in memory before the rest of the kernel reads them; otherwise run node by node
          const int q = pos_of(v);
          viewed[j] = q;
          if (!row || (f_where[q] == role::full && !f_reduction[q])) f.per_node = true;
        }
      }
      if (row && from == src::reg && r != static_cast<int>(role::full) && !red && f_where[pos_of(in)] == role::full &&
          !f_reduction[pos_of(in)])
        f.per_node = true;  // a reduced-space value computed from a full-space one: node by node
      int at = -1;
      switch (from) {
        case src::reg: at = pos_of(in); break;
        case src::constant: value[j] = y.value; break;
        case src::scalar:
          for (int q = 0; q < ns && at < 0; ++q)
            if (f.scalar_node[static_cast<std::size_t>(q)] == in) at = q;
          if (at < 0) {
            at = ns;
            f.scalar_node[static_cast<std::size_t>(ns++)] = in;
          }
          break;
        case src::mem: {
          const bool nk = r == static_cast<int>(role::nokeep) && !red;
          for (int q = 0; q < nm && at < 0; ++q)
            if (f_mem_node[q] == in && f_mem_nokeep[q] == nk) at = q;
          if (at < 0) {
            at = nm;
            f_mem_node[nm] = in;
            f_mem_nokeep[nm] = nk;
            ++nm;
          }
          break;
        }
        case src::none: break;
      }
      idx[j] = at;
    }
    // A commutative op's operands in an order of the kernel's own (source, then slot), not the
    // graph's (canonicalisation orders them by node index, which differs between layers), so
    // that the kernels of equal layers have equal code words and share code. Not max and min:
    // on a tie of zeros they return the first operand, so their order shows in the sign.
    if (is_commutative(x.o) && x.o != op::max && x.o != op::min && x.nin() == 2 && idt[0] == idt[1]) {
      const bool swap = kind[1] != kind[0]       ? kind[1] < kind[0]
                        : idx[1] != idx[0]       ? idx[1] < idx[0]
                        : viewed[1] != viewed[0] ? viewed[1] < viewed[0]
                                                 : value[1] < value[0];
      if (swap) {
        std::swap(kind[0], kind[1]);
        std::swap(idx[0], idx[1]);
        std::swap(viewed[0], viewed[1]);
        std::swap(value[0], value[1]);
      }
    }
    d.idt = {idt[0], idt[1], idt[2]};
    d.kind = {kind[0], kind[1], kind[2]};
    a.idx = {idx[0], idx[1], idx[2]};
    a.value = {value[0], value[1], value[2]};
    f_viewed[p] = {viewed[0], viewed[1], viewed[2]};
    // stages: a reduction needs the stages its input depends on to be complete (operands in
    // this kernel have earlier positions; a matmul's product, read by no operand here, is 0)
    int av = 0;
    for (int j = 0; j < 3; ++j) {
      const int q = kind[j] == src::reg ? idx[j] : kind[j] == src::mem ? viewed[j] : -1;
      if (q >= 0 && av < f_avail[q]) av = f_avail[q];
    }
    if (red) {
      ++av;
      stages = stages > av ? stages : av;
    }
    f_avail[p] = av;
  }
  f.stages = stages;
  // destinations, after the operands
  for (int p = 0; p < np; ++p) {
    const int i = f_node[p];
    if (!stored[i]) continue;
    f_args[p].out = nm;
    f_mem_node[nm] = i;
    f_mem_nokeep[nm] = f_where[p] == role::nokeep;
    f_mem_out[nm] = true;
    ++nm;
  }
  if (K.kind == passes::kernel_kind::matmul) {
    f.c_mem = nm;
    f.args[0].idx[0] = nm;  // the product is loaded through this reference
    f_mem_node[nm] = f_node[0];
    f_mem_out[nm] = true;
    ++nm;
  }
  // vector lanes: f32 (and bf16, computed in f32) or f64 values, besides bools; not both
  const bool has_f32 = dtypes & (1u << static_cast<int>(dtype::f32) | 1u << static_cast<int>(dtype::bf16));
  const bool has_f64 = dtypes & (1u << static_cast<int>(dtype::f64));
  if (dtypes & ~(1u << static_cast<int>(dtype::f32) | 1u << static_cast<int>(dtype::bf16) |
                 1u << static_cast<int>(dtype::f64) | 1u << static_cast<int>(dtype::boolean)))
    vec_ok = false;
  if (has_f32 && has_f64) vec_ok = false;
  f.lanes = vec_ok && !f.per_node ? (has_f64 ? lane_type::f64 : has_f32 ? lane_type::f32 : lane_type::scalar)
                                  : lane_type::scalar;

  // actions per pass
  if (!row) {
    act* first = f.action[0].data();
    for (int p = 0; p < np; ++p)
      first[p] = f_desc[p].o == op::matmul ? act::load_c : f_args[p].out >= 0 ? act::compute_store : act::compute;
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
    char e = is_costly(o);
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

/// Which kernels of S surely fit their loop nest (passes/extents.hpp): those that do not check
/// their shapes at run time.
template <const auto& S>
inline constexpr auto fits_of = passes::kernels_fit(S);

/// The analysis of kernel K of the schedule S, as a constant.
template <const auto& S, int K>
inline constexpr kernel_sizes sizes_of = count_kernel(S, K, stored_of<S>.data(), members_in<S>(K));

template <const auto& S, int K>
struct kernel_of {
  static constexpr kernel_sizes z = sizes_of<S, K>;
  static constexpr bool row = S.kernels[static_cast<std::size_t>(K)].kind == passes::kernel_kind::reduction;
  using info_t = kernel_info<static_cast<std::size_t>(z.nodes), static_cast<std::size_t>(z.mems),
                             static_cast<std::size_t>(z.scalars > 0 ? z.scalars : 1),
                             static_cast<std::size_t>(z.reductions > 0 ? z.reductions : 1),
                             static_cast<std::size_t>(row ? 2 * z.stages + 2 : 1)>;
  static constexpr info_t value = analyse_kernel<info_t>(S, K, stored_of<S>.data(), members_in<S>(K));
};

// ---- kernels of equal code -------------------------------------------------------------------

/// Writes, as words, everything that selects the code of kernel k of s (what kernel_code reads
/// at compile time): its analysis f without the graph nodes it is bound to, its number of
/// scalars, the dtypes of its memory references, the single-node code of each node, and whether
/// it surely fits its loop nest; returns how many (code_word_count(f)). kernel_code reads nothing
/// else (code_info decodes the words), so kernels with the same words share one instantiation,
/// bound to their own nodes at run time (code_key): the layers of a model and their gradients,
/// and, for kernels of up to max_shared_words words, the kernels that one program's plans have
/// in common (a model's forward plan and its training step, two models' optimizer updates).
/// Each field has a fixed place and width, checked here, so that equal words mean equal code.
template <class Sched, class Info>
constexpr std::size_t code_words(const Sched& s, const Info& f, int scalars, bool fits, std::uint64_t* w) {
  const node* nd = s.g.nodes.data();
  // (a field out of its width: not a constant, so a compile error)
  const auto u = [](auto x, int bits = 64) {
    const auto v = static_cast<std::uint64_t>(x);
    if (bits < 64 && v >> bits != 0) throw "kiln: cpu: a kernel's code word field out of range";
    return v;
  };
  const auto u1 = [&](int x, int bits) { return u(x + 1, bits); };  // -1 (none) and up
  std::size_t n = 0;
  // (a pointwise kernel's code does not read its rank: its loops run over the run-time space)
  const bool ranked = f.kind != passes::kernel_kind::pointwise;
  for (const std::uint64_t x : {u(f.node.size()), u(f.mem_node.size()), u(scalars), u(f.red_pos.size()),
                                u(f.action.size()), u(f.kind), ranked ? u(f.rank) : 0, u(f.axes), u(f.lanes_reduce), u(f.lanes),
                                u(f.per_node), u(f.stages), u(f.cached), u1(f.c_mem, 32), u(fits)})
    w[n++] = x;
  for (std::size_t p = 0; p < f.node.size(); ++p) {
    const ndesc& d = f.desc[p];
    const nargs& a = f.args[p];
    const node& x = nd[f.node[p]];
    w[n++] = u(d.o) | u(d.dt) << 8 | u(f.where[p]) << 16 | u(f.reduction[p]) << 24 | u(x.nin(), 8) << 32;
    for (std::size_t j = 0; j < 3; ++j) {
      // the single-node code's operand dtypes (single_desc) besides the fused step's
      const dtype in_dt = static_cast<int>(j) < x.nin() ? nd[x.in[j]].dt : dtype{};
      w[n++] = u(d.idt[j]) | u(d.kind[j]) << 8 | u(in_dt) << 16 | u1(a.idx[j], 16) << 24 | u1(f.viewed[p][j], 24) << 40;
      w[n++] = std::bit_cast<std::uint64_t>(a.value[j]);
    }
    w[n++] = u1(a.out, 16) | u1(a.acc, 16) << 16 | u1(a.cache, 16) << 32 | u(f.avail[p], 16) << 48;
  }
  for (std::size_t m = 0; m < f.mem_node.size(); ++m)
    w[n++] = u(f.mem_nokeep[m]) | u(f.mem_out[m]) << 8 | u(nd[f.mem_node[m]].dt) << 16;
  for (const int r : f.red_pos) w[n++] = u(r);
  for (const auto& pass : f.action)
    for (const act x : pass) w[n++] = u(x);
  return n;
}
template <class Info>
constexpr std::size_t code_word_count(const Info& f) {
  std::size_t n = 15 + 8 * f.node.size() + f.mem_node.size() + f.red_pos.size();
  for (const auto& pass : f.action) n += pass.size();
  return n;
}

/// Kernel K's code words, once per kernel, as an array: what code_key, the digest and the
/// comparison below read.
template <const auto& S, int K>
inline constexpr auto code_words_of = [] {
  using KI = kernel_of<S, K>;
  constexpr const auto& f = KI::value;
  std::array<std::uint64_t, code_word_count(f)> w{};
  if (code_words(S, f, KI::z.scalars, fits_of<S>[static_cast<std::size_t>(K)], w.data()) != w.size())
    throw "kiln: cpu: code_word_count disagrees with code_words";  // not a constant: a compile error
  return w;
}();

/// What kernel_code reads, decoded from code words W (code_words' inverse): the kernel's
/// analysis without its graph nodes (node, mem_node and scalar_node are left empty), its number
/// of scalars, whether it surely fits its loop nest, its memory references' dtypes, and the
/// single-node descriptor of each node (single_desc). Each is a constant of its own: g++ took
/// more memory where kernel_code read them as parts of one constant (docs/notes.md).
template <const auto& W>
struct code_info {
  static constexpr int scalars = static_cast<int>(W[2]);
  static constexpr bool fits = W[14] != 0;
  using info_t = kernel_info<W[0], W[1], (W[2] > 0 ? W[2] : 1), W[3], W[4]>;
  struct decoded {
    info_t f;
    std::array<dtype, W[1]> mem_dt{};
    std::array<ndesc, W[0]> single{};
  };
  static constexpr decoded decode() {
    const std::uint64_t* w = W.data();  // (a pointer: std::array's operator[] is a call per word)
    decoded v;
    info_t& f = v.f;
    f.kind = static_cast<passes::kernel_kind>(w[5]);
    f.rank = w[6] > 0 ? static_cast<int>(w[6]) : 1;
    f.axes = static_cast<std::uint32_t>(w[7]);
    f.lanes_reduce = w[8] != 0;
    f.lanes = static_cast<lane_type>(w[9]);
    f.per_node = w[10] != 0;
    f.stages = static_cast<int>(w[11]);
    f.cached = static_cast<int>(w[12]);
    f.c_mem = static_cast<int>(w[13]) - 1;
    std::size_t n = 15;
    for (std::size_t p = 0; p < f.node.size(); ++p) {
      ndesc& d = f.desc[p];
      nargs& a = f.args[p];
      std::uint64_t x = w[n++];
      d.o = static_cast<op>(x & 0xff);
      d.dt = static_cast<dtype>(x >> 8 & 0xff);
      f.where[p] = static_cast<role>(x >> 16 & 0xff);
      f.reduction[p] = (x >> 24 & 0xff) != 0;
      const auto nin = x >> 32 & 0xff;
      v.single[p].o = d.o;
      v.single[p].dt = d.dt;
      for (std::size_t j = 0; j < 3; ++j) {
        x = w[n++];
        d.idt[j] = static_cast<dtype>(x & 0xff);
        d.kind[j] = static_cast<src>(x >> 8 & 0xff);
        if (j < nin) {
          v.single[p].idt[j] = static_cast<dtype>(x >> 16 & 0xff);
          v.single[p].kind[j] = src::mem;
        }
        a.idx[j] = static_cast<int>(x >> 24 & 0xffff) - 1;
        f.viewed[p][j] = static_cast<int>(x >> 40 & 0xffffff) - 1;
        a.value[j] = std::bit_cast<double>(w[n++]);
      }
      x = w[n++];
      a.out = static_cast<int>(x & 0xffff) - 1;
      a.acc = static_cast<int>(x >> 16 & 0xffff) - 1;
      a.cache = static_cast<int>(x >> 32 & 0xffff) - 1;
      f.avail[p] = static_cast<int>(x >> 48 & 0xffff);
    }
    for (std::size_t m = 0; m < f.mem_node.size(); ++m) {
      const std::uint64_t x = w[n++];
      f.mem_nokeep[m] = (x & 0xff) != 0;
      f.mem_out[m] = (x >> 8 & 0xff) != 0;
      v.mem_dt[m] = static_cast<dtype>(x >> 16 & 0xff);
    }
    for (int& r : f.red_pos) r = static_cast<int>(w[n++]);
    for (auto& pass : f.action)
      for (act& x : pass) x = static_cast<act>(w[n++]);
    return v;
  }
  static constexpr decoded value = decode();
  static constexpr info_t info = value.f;
  static constexpr std::array<dtype, W[1]> mem_dt = value.mem_dt;
  static constexpr std::array<ndesc, W[0]> single = value.single;
};

/// An FNV-1a digest of kernel K's code words.
template <const auto& S, int K>
constexpr std::uint64_t code_digest() {
  std::uint64_t h = 14695981039346656037ull;
  for (const std::uint64_t x : code_words_of<S, K>) h = (h ^ x) * 1099511628211ull;
  return h;
}
template <const auto& S, int... K>
constexpr std::array<std::uint64_t, sizeof...(K)> code_digests(std::integer_sequence<int, K...>) {
  return {code_digest<S, K>()...};
}
template <const auto& S>
inline constexpr auto digests_of = code_digests<S>(std::make_integer_sequence<int, static_cast<int>(S.kernels.size())>{});

/// The first kernel of S with kernel K's code (K itself when none before it has).
template <const auto& S, int K>
constexpr int code_owner() {
  constexpr int first = [] {
    const auto& h = digests_of<S>;
    int j = 0;
    while (h[static_cast<std::size_t>(j)] != h[static_cast<std::size_t>(K)]) ++j;
    return j;
  }();
  if constexpr (first == K) {
    return K;
  } else {
    // equal digests: compared word for word (a collision keeps code of its own)
    constexpr const auto& a = code_words_of<S, first>;
    constexpr const auto& b = code_words_of<S, K>;
    if (a.size() != b.size()) return K;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (a[i] != b[i]) return K;
    return first;
  }
}

template <const auto& S, int... K>
constexpr int count_owners(std::integer_sequence<int, K...>) {
  return ((code_owner<S, K>() == K ? 1 : 0) + ... + 0);
}

/// One object per distinct value of code words: a reference to it is the same template
/// argument whichever plan names it.
template <auto W>
inline constexpr auto shared_words = W;

/// Kernels of at most this many code words take their code from the words' shared object, so
/// that every plan of the program shares it; larger ones from their plan's first kernel of the
/// same code. Symbol names of kernel_code's functions spell the shared object's words, about 8
/// characters each: a bound keeps them under 4 KB, past which g++ 12 allocates each name by
/// walking its list of free pages (build-cost.md, deep models), a cost that grows with the heap.
inline constexpr std::size_t max_shared_words = 256;

/// The code words kernel K of S takes its code from (kernel_code's argument).
template <const auto& S, int K>
constexpr const auto& code_key() {
  if constexpr (code_words_of<S, K>.size() <= max_shared_words) return shared_words<code_words_of<S, K>>;
  else return code_words_of<S, code_owner<S, K>()>;
}

}  // namespace kiln::cpu::detail
