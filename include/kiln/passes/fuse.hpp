// kiln/passes/fuse.hpp: the scheduling half of kiln's Inductor. Groups the nodes of a
// primitive graph into kernels, as TorchInductor does:
//   - vertical fusion: a pointwise node joins the kernel of an operand when it iterates over
//     the same space;
//   - reductions take their pointwise prologue (the kernel computing their input), and a row
//     kernel (a reduction's space) takes the pointwise epilogue on the full or the reduced
//     space and further reductions over the same axes: softmax and layer_norm over a row are
//     one kernel, and sibling reductions over the same input (mean and variance) share a pass;
//   - a matmul takes its pointwise epilogue (bias, activation, residual add, cast);
//   - views (reshape, permute, slice, broadcast) and element counts are not kernels: they
//     change how a buffer is indexed. Their operand must then be materialised;
//   - gather, scatter_add, unfold, fold and rand each run as a kernel of their own that no
//     other node joins (a routine per op in each backend); an operand that gives only a shape
//     (rand's first, scatter_add's third, iota's) is no dependency and need not be in memory;
//   - a pointwise node computed from leaves alone (an optimizer's `decay * w`) opens no kernel:
//     it is placed in the kernel of its first reader of the same shape (the matmul computing
//     w's gradient), else in one of its own when something must read it from memory.
// A node joins kernel k only if every other kernel it reads was created before k: a kernel then
// only ever reads earlier kernels, which rules out cycles without a search (deferred nodes are
// what lets `decay * w` still reach the gradient's kernel). Each kernel records its iteration
// space, the buffers it reads and writes, and their sizes in bytes.
// A kernel takes at most max_kernel_nodes pointwise nodes by joining or deferral (like
// TorchInductor's max_fusion_size): a backend emits each kernel as one function, and a
// compiler's optimiser is superlinear in a function's size (g++ -O2 on a 2,400-node kernel:
// minutes in its inlining heuristics). A longer chain or a wider tree becomes several kernels.
#pragma once

#include <cstdint>
#include <utility>

#include "../core/cvec.hpp"
#include "../core/shape_rules.hpp"
#include "../graph/graph.hpp"

namespace kiln::passes {

enum class kernel_kind : std::uint8_t { pointwise, reduction, matmul };

constexpr std::string_view name(kernel_kind k) {
  switch (k) {
    case kernel_kind::pointwise: return "pointwise";
    case kernel_kind::reduction: return "reduction";
    case kernel_kind::matmul: return "matmul";
  }
  return "?";
}

/// A size that may depend on the dynamic extent: fixed + per_dyn * N, where N stands for every
/// dyn extent (kiln's graphs usually have one, the batch). A tensor with two dyn extents is
/// counted with one of them as 1 and marks the size as approximate.
struct bytes_t {
  index_t fixed = 0;
  index_t per_dyn = 0;
  bool approximate = false;

  constexpr bytes_t& operator+=(const bytes_t& o) {
    fixed += o.fixed;
    per_dyn += o.per_dyn;
    approximate = approximate || o.approximate;
    return *this;
  }
  friend constexpr bytes_t operator+(bytes_t a, const bytes_t& b) { return a += b; }
  friend constexpr bool operator==(const bytes_t& a, const bytes_t& b) {
    return a.fixed == b.fixed && a.per_dyn == b.per_dyn && a.approximate == b.approximate;
  }
  /// Whether this size is at least o for every N >= 1.
  constexpr bool covers(const bytes_t& o) const {
    return per_dyn >= o.per_dyn && fixed + per_dyn >= o.fixed + o.per_dyn;
  }
  constexpr index_t at(index_t n) const { return fixed + per_dyn * n; }
};

/// Bytes of a tensor of this shape and dtype.
constexpr bytes_t bytes_of(const dims& s, dtype dt) {
  index_t fixed = static_cast<index_t>(size_of(dt));
  int dyns = 0;
  for (int i = 0; i < s.rank; ++i) {
    if (s.e[i] == dyn) ++dyns;
    else fixed *= s.e[i];
  }
  if (dyns == 0) return {fixed, 0, false};
  return {0, fixed, dyns > 1};
}

/// The position of a node of shape `shape` in a reduction kernel over `space` and `axes`: 0
/// the whole space, 1 the reduced space with the reduced axes kept, 2 without them, -1 neither.
constexpr int position_in(const dims& shape, const dims& space, std::uint32_t axes) {
  if (shape == space) return 0;
  if (shape == reduce_shape(space, axes, true).shape) return 1;
  if (shape == reduce_shape(space, axes, false).shape) return 2;
  return -1;
}

struct kernel {
  kernel_kind kind = kernel_kind::pointwise;
  dims space{};              ///< iteration space: output shape, or a reduction's input shape
  std::uint32_t axes = 0;    ///< reduction kernels: the reduced axes of `space`
  int root = -1;             ///< the first node of the kernel
  int source = -1;           ///< reduction kernels: the buffer their first reduction reads, or -1
  int nodes = 0;             ///< graph nodes computed in this kernel
  int reads = 0, writes = 0; ///< buffers read (leaves and other kernels' outputs) and written
  bytes_t bytes_read{}, bytes_written{};
};

/// Roles of nodes outside kernels.
inline constexpr int no_kernel = -1;

/// A primitive graph with its nodes grouped into kernels, kernels in execution order.
struct fused_graph {
  graph g;
  cvec<int> kernel_of;  ///< per node: its kernel, or no_kernel (leaves, constants, views)
  cvec<char> written;   ///< per node: materialised (an output, or read by another kernel or a view)
  cvec<kernel> kernels;
};

constexpr bool is_view(op o) {
  return o == op::reshape || o == op::permute || o == op::slice || o == op::broadcast || o == op::numel;
}

/// The most pointwise nodes fusion puts in one kernel (see above).
inline constexpr int max_kernel_nodes = 256;

namespace detail {

/// What fusion needs to know of an op, read from one table (computed from the catalogue): in
/// constant evaluation each call is a step, and these are asked for every node and operand.
struct fuse_flags {
  static constexpr std::uint8_t no_kernel = 1, view = 2, pointwise = 4;
  std::uint8_t f[static_cast<int>(op::tuple) + 1]{};
};
inline constexpr fuse_flags fuse_table = [] {
  fuse_flags t;
  for (int i = 0; i <= static_cast<int>(op::tuple); ++i) {
    const op o = static_cast<op>(i);
    t.f[i] = static_cast<std::uint8_t>(
        (kind_of(o) == op_kind::leaf || o == op::constant || is_view(o) ? fuse_flags::no_kernel : 0) |
        (is_view(o) ? fuse_flags::view : 0) | (is_pointwise(o) ? fuse_flags::pointwise : 0));
  }
  return t;
}();

struct fuser {
  static constexpr int deferred = -2;  ///< kernel_of of a pointwise node waiting for a reader
  const graph& g;
  cvec<int> kernel_of;
  cvec<kernel> kernels;
  cvec<cvec<int>> reads_from;  // per kernel: kernels whose outputs it reads
  cvec<int> row_kernels;        // kernels opened by a reduction over a buffer (sibling candidates)
  cvec<char> backward;          // per kernel: whether it holds a node of a derivative (phase != 0)
  cvec<char> closed;            // per kernel: a standalone op's own kernel, which nothing joins
  cvec<int> seen;               // per node: the walk of deferred_deps that last visited it
  cvec<int> tree;               // per deferred node: nodes in its deferred tree (shared ones counted per use)
  int stamp = 0;
  // raw views of g's nodes and of kernel_of, set by run(): indexing them costs no call in
  // constant evaluation, where each call and statement is a step
  const node* nd = nullptr;
  int* ko = nullptr;

  /// The computed node a view chain looks at, or -1 for a leaf/constant.
  constexpr int source(int i) const {
    while (i >= 0) {
      const node& n = nd[i];
      if (kind_of(n.o) == op_kind::leaf || n.o == op::constant) return -1;
      if (!is_view(n.o)) return i;
      i = n.in[0];
    }
    return -1;
  }
  /// Whether a node reading kernels `deps` may join kernel k: every other kernel it reads must
  /// be older than k (kernels only read older kernels, so no cycle can form).
  static constexpr bool may_join(int k, const int* deps, int count) {
    for (int m = 0; m < count; ++m)
      if (deps[m] > k) return false;
    return true;
  }

  /// The buffer a leaf-or-view operand reads (its leaf node), or -1.
  constexpr int leaf_source(int i) const {
    while (i >= 0) {
      const node& n = nd[i];
      if (kind_of(n.o) == op_kind::leaf) return i;
      if (!is_view(n.o)) return -1;
      i = n.in[0];
    }
    return -1;
  }

  /// A reduction kernel over `space` (and `axes`, unless ~0u) that reads the same buffer as
  /// operand `in`, which a node with dependencies `deps` can join without a cycle; else -1.
  constexpr int sibling(const dims& space, std::uint32_t axes, int in, const int* deps, int count) const {
    if (row_kernels.empty()) return -1;
    int src = source(in);
    if (src < 0) src = leaf_source(in);
    if (src < 0) return -1;
    for (std::size_t r = row_kernels.size(); r-- > 0;) {
      const int k = row_kernels[r];
      const kernel& K = kernels[static_cast<std::size_t>(k)];
      if (K.kind != kernel_kind::reduction || K.source != src || !(K.space == space) || closed[static_cast<std::size_t>(k)]) continue;
      if (axes != ~0u && K.axes != axes) continue;
      if (may_join(k, deps, count)) return k;
    }
    return -1;
  }

  constexpr bool fits(int kernel_index, const node& n) const {
    if (closed[static_cast<std::size_t>(kernel_index)]) return false;
    const kernel& k = kernels[static_cast<std::size_t>(kernel_index)];
    if (k.nodes >= max_kernel_nodes) return false;
    switch (k.kind) {
      case kernel_kind::pointwise:
      case kernel_kind::matmul: return n.shape == k.space;
      case kernel_kind::reduction: return position_in(n.shape, k.space, k.axes) >= 0;
    }
    return false;
  }

  constexpr int open(kernel_kind kind, const dims& space, std::uint32_t axes, int root) {
    kernel k;
    k.kind = kind;
    k.space = space;
    k.axes = axes;
    k.root = root;
    kernels.push_back(k);
    reads_from.emplace_back();
    backward.push_back(0);
    closed.push_back(0);
    return static_cast<int>(kernels.size()) - 1;
  }

  constexpr void place(int i, int k, const int* operand_kernels, int count) {
    ko[i] = k;
    ++kernels[static_cast<std::size_t>(k)].nodes;
    if (nd[i].phase != 0) backward[static_cast<std::size_t>(k)] = 1;
    for (int j = 0; j < count; ++j) {
      const int o = operand_kernels[j];
      if (o == no_kernel || o == k) continue;
      auto& r = reads_from[static_cast<std::size_t>(k)];
      bool have = false;
      for (int x : r) have = have || x == o;
      if (!have) r.push_back(o);
    }
  }

  /// The kernel whose buffer operand `in` reads (through views), or no_kernel / deferred.
  constexpr int operand_kernel(int in) const {
    if (!(fuse_table.f[static_cast<int>(nd[in].o)] & fuse_flags::view)) return ko[in];
    const int src = source(in);
    return src >= 0 ? ko[src] : no_kernel;
  }
  /// Adds the kernels deferred node x reads, with those of its deferred operands, to `out`
  /// (a walk with an explicit stack: deferred chains can be thousands of nodes long, deeper
  /// than constant evaluation's recursion limit; `seen` stamps make it linear in the cone).
  constexpr void deferred_deps(int x, cvec<int>& out) {
    ++stamp;
    cvec<int> stack{x};
    while (!stack.empty()) {
      const int y = stack.back();
      stack.pop_back();
      if (seen[static_cast<std::size_t>(y)] == stamp) continue;
      seen[static_cast<std::size_t>(y)] = stamp;
      const node& n = nd[y];
      for (int j = 0, nj = n.nin(); j < nj; ++j) {
        const int k = operand_kernel(n.in[j]);
        if (k >= 0) out.push_back(k);
        else if (k == deferred) stack.push_back(n.in[j]);
      }
    }
  }
  /// Places deferred node x (and the deferred operands it computes from) into kernel k (order
  /// within a kernel is node order, so placing a node before its operands is fine).
  constexpr void place_deferred(int x, int k) {
    cvec<int> stack{x};
    while (!stack.empty()) {
      const int y = stack.back();
      stack.pop_back();
      if (ko[y] != deferred) continue;
      const node& n = nd[y];
      int reads[max_inputs]{no_kernel, no_kernel, no_kernel, no_kernel, no_kernel, no_kernel};
      for (int j = 0, nj = n.nin(); j < nj; ++j) {
        const int r = operand_kernel(n.in[j]);
        if (r == deferred) stack.push_back(n.in[j]);
        else reads[j] = r;
      }
      place(y, k, reads, n.nin());
    }
  }
  /// Gives deferred node x a kernel of its own (a reader needs it in memory).
  constexpr void materialize(int x) {
    if (ko[x] != deferred) return;
    place_deferred(x, open(kernel_kind::pointwise, nd[x].shape, 0, x));
  }

  constexpr void run() {
    kernel_of.assign(g.nodes.size(), no_kernel);
    nd = g.nodes.data();
    ko = kernel_of.data();
    seen.assign(g.nodes.size(), 0);
    tree.assign(g.nodes.size(), 0);
    const std::size_t size = g.nodes.size();
    for (std::size_t idx = 0; idx < size; ++idx) {
      const int i = static_cast<int>(idx);
      const node& n = nd[idx];
      if (fuse_table.f[static_cast<int>(n.o)] & fuse_flags::no_kernel) continue;  // leaf, constant, view
      // join[j]: the kernel computing operand j, which this node may join; dep[j]: the kernel
      // whose buffer operand j reads (through views too); inline_[j]: operand j is a deferred
      // pointwise value of this node's shape, computed inside whichever kernel this node joins
      int join[max_inputs]{no_kernel, no_kernel, no_kernel, no_kernel, no_kernel, no_kernel};
      int deps[max_inputs]{no_kernel, no_kernel, no_kernel, no_kernel, no_kernel, no_kernel};
      bool inline_[max_inputs]{};
      const bool pointwise = fuse_table.f[static_cast<int>(n.o)] & fuse_flags::pointwise;
      for (int j = 0, nj = n.nin(); j < nj; ++j) {
        const int in = n.in[j];
        if (!reads_input_values(n.o, j)) continue;  // only its shape: no dependency on its kernel
        if (fuse_table.f[static_cast<int>(nd[in].o)] & fuse_flags::view) {
          const int src = source(in);
          if (src >= 0 && ko[src] == deferred) materialize(src);
          deps[j] = src >= 0 ? ko[src] : no_kernel;
        } else if (ko[in] == deferred && pointwise && nd[in].shape == n.shape) {
          inline_[j] = true;
        } else {
          if (ko[in] == deferred) materialize(in);
          join[j] = deps[j] = ko[in];
        }
      }
      const int count = n.nin();
      // a pointwise node computed from leaves alone (w * decay) waits for a reader to join:
      // opened now, its kernel would be older than the kernel computing the value it is
      // combined with (the gradient), and the two could not fuse. So does a node of a
      // derivative computed from leaves and the forward's pointwise or matmul values alone
      // (relu's mask, gelu's derivative): placed in the forward's kernel it would be one more
      // value kept from the forward for the backward; with its reader, it is computed where it
      // is used. (A row kernel keeps them: softmax's backward belongs in the loss's one pass.)
      if (pointwise) {
        const bool deriv = n.phase != 0;
        bool free = true;
        for (int j = 0; j < count; ++j)
          free = free && (inline_[j] || deps[j] == no_kernel ||
                          (deriv && deps[j] >= 0 && !backward[static_cast<std::size_t>(deps[j])] &&
                           kernels[static_cast<std::size_t>(deps[j])].kind != kernel_kind::reduction));
        if (free) {  // a deferred tree grows to max_kernel_nodes: then its operands get kernels
          int nodes = 1;
          for (int j = 0; j < count; ++j)
            if (inline_[j]) nodes += tree[static_cast<std::size_t>(n.in[j])];
          if (nodes > max_kernel_nodes) {
            for (int j = 0; j < count; ++j)
              if (inline_[j]) {
                materialize(n.in[j]);
                inline_[j] = false;
                join[j] = deps[j] = ko[n.in[j]];
              }
            free = false;
          } else {
            tree[idx] = nodes;
          }
        }
        if (free && deriv) {
          bool reads_forward = false;  // else it is leaves alone, handled as any other
          for (int j = 0; j < count; ++j) reads_forward = reads_forward || deps[j] >= 0;
          if (reads_forward) {
            ko[idx] = deferred;
            continue;
          }
        }
        if (free) {
          // unless a row kernel of its space reads the same buffer (horizontal fusion)
          int sib = no_kernel;
          for (int j = 0; j < count && sib == no_kernel; ++j)
            if (!inline_[j]) sib = sibling(n.shape, ~0u, n.in[j], deps, count);
          if (sib != no_kernel) {  // the deferred operands come along: their reads count too
            cvec<int> all(deps, deps + count);
            for (int j = 0; j < count; ++j)
              if (inline_[j]) deferred_deps(n.in[j], all);
            if (!may_join(sib, all.data(), static_cast<int>(all.size()))) sib = no_kernel;
          }
          if (sib == no_kernel) {
            ko[idx] = deferred;
            continue;
          }
          for (int j = 0; j < count; ++j)
            if (inline_[j]) place_deferred(n.in[j], sib);
          place(i, sib, deps, count);
          continue;
        }
      }

      if (n.o == op::matmul) {
        place(i, open(kernel_kind::matmul, n.shape, 0, i), deps, count);
        continue;
      }
      if (kind_of(n.o) == op_kind::reduce) {
        const int k = join[0];
        if (k >= 0 && !closed[static_cast<std::size_t>(k)]) {
          kernel& p = kernels[static_cast<std::size_t>(k)];
          const dims& in = g.nodes[static_cast<std::size_t>(n.in[0])].shape;
          if (p.kind == kernel_kind::pointwise && p.space == in) {
            p.kind = kernel_kind::reduction;  // the kernel becomes this reduction's prologue
            p.axes = n.axes;
            p.source = -1;
            place(i, k, deps, count);
            continue;
          }
          if (p.kind == kernel_kind::reduction && p.space == in && p.axes == n.axes) {
            place(i, k, deps, count);
            continue;
          }
        }
        // horizontal fusion: a sibling reduction of the same buffer over the same axes
        const int src = source(n.in[0]);
        const dims& in = g.nodes[static_cast<std::size_t>(n.in[0])].shape;
        if (const int sib = sibling(in, n.axes, n.in[0], deps, count); sib >= 0) {
          place(i, sib, deps, count);
          continue;
        }
        const int k2 = open(kernel_kind::reduction, in, n.axes, i);
        row_kernels.push_back(k2);
        kernels[static_cast<std::size_t>(k2)].source = src >= 0 && ko[src] != no_kernel
                                                           ? src
                                                           : leaf_source(n.in[0]);
        place(i, k2, deps, count);
        continue;
      }
      // pointwise (and concat, iota): join the latest operand kernel it fits, without a cycle
      // (counting the kernels its deferred operands read)
      cvec<int> all(deps, deps + count);
      for (int j = 0; j < count; ++j)
        if (inline_[j]) deferred_deps(n.in[j], all);
      if (is_standalone(n.o)) {  // gather, scatter_add, unfold, fold, rand: a kernel of their own
        const int k = open(kernel_kind::pointwise, n.shape, 0, i);
        closed[static_cast<std::size_t>(k)] = 1;
        place(i, k, deps, count);
        continue;
      }
      int best = no_kernel;
      if (n.o != op::concat && n.o != op::iota) {
        for (int j = 0; j < count; ++j) {
          const int k = join[j];
          if (k < 0 || k <= best || !fits(k, n)) continue;
          if (may_join(k, all.data(), static_cast<int>(all.size()))) best = k;
        }
      }
      if (best == no_kernel && n.o != op::concat && n.o != op::iota) {
        // horizontal fusion: a pointwise node reading the same buffer as a row kernel of its space
        for (int j = 0; j < count && best == no_kernel; ++j)
          best = sibling(n.shape, ~0u, n.in[j], all.data(), static_cast<int>(all.size()));
      }
      if (best == no_kernel) {
        best = open(kernel_kind::pointwise, n.shape, 0, i);
        // a kernel with a concat or an iota runs node by node, in scalar code (cpu/single.hpp):
        // what joined it would run so too. Alone it is a copy (a fill), and its readers are
        // vectorised kernels of their own.
        if (n.o == op::concat || n.o == op::iota) closed[static_cast<std::size_t>(best)] = 1;
      }
      for (int j = 0; j < count; ++j)
        if (inline_[j]) place_deferred(n.in[j], best);
      place(i, best, deps, count);
    }
    // what is still deferred is read by no kernel (outputs): from the last node back, so that
    // each kernel takes the whole deferred chain it ends
    for (std::size_t idx = size; idx-- > 0;)
      if (ko[idx] == deferred) materialize(static_cast<int>(idx));
  }

  /// Kernels in an order where every kernel comes after the kernels it reads.
  constexpr cvec<int> order() const {
    const std::size_t k = kernels.size();
    cvec<int> out;
    cvec<char> state(k, 0);  // 0 new, 1 on stack, 2 done
    for (std::size_t s = 0; s < k; ++s) {
      if (state[s]) continue;
      cvec<std::pair<int, std::size_t>> stack{{static_cast<int>(s), 0}};
      state[s] = 1;
      while (!stack.empty()) {
        auto& [v, next] = stack.back();
        const auto& r = reads_from[static_cast<std::size_t>(v)];
        if (next < r.size()) {
          const int w = r[next++];
          if (!state[static_cast<std::size_t>(w)]) {
            state[static_cast<std::size_t>(w)] = 1;
            stack.push_back({w, 0});
          }
        } else {
          state[static_cast<std::size_t>(v)] = 2;
          out.push_back(v);
          stack.pop_back();
        }
      }
    }
    return out;
  }
};

}  // namespace detail

/// The fusion pass, first half: kernels in execution order and each node's kernel (`written`
/// all 0, kernels' reads and writes not counted yet: see account()).
constexpr fused_graph group(const graph& g) {
  detail::fuser f{g, {}, {}, {}, {}, {}, {}, {}, {}, 0};
  f.run();
  // renumber kernels in execution order
  const cvec<int> order = f.order();
  cvec<int> rank(order.size(), 0);
  for (std::size_t r = 0; r < order.size(); ++r) rank[static_cast<std::size_t>(order[r])] = static_cast<int>(r);
  fused_graph out{g, f.kernel_of, cvec<char>(g.nodes.size(), 0), {}};
  const int* rk = rank.data();
  for (int& k : out.kernel_of)
    if (k != no_kernel) k = rk[k];
  for (int k : order) out.kernels.push_back(f.kernels[static_cast<std::size_t>(k)]);
  return out;
}

/// The fusion pass, second half: which values are written to memory (outputs, and values read
/// by another kernel or through a view) and the buffers and bytes each kernel reads and writes.
/// (Raw pointers and few statements per operand: this runs in constant evaluation.)
constexpr fused_graph account(fused_graph out) {
  const graph& g = out.g;
  const std::size_t n = g.nodes.size();
  const node* nd = g.nodes.data();
  const int* ko = out.kernel_of.data();
  char* written = out.written.data();
  for (int o : g.outputs) written[o] = 1;
  for (std::size_t u = 0; u < n; ++u) {
    const node& x = nd[u];
    const int ku = ko[u];
    const bool view = detail::fuse_table.f[static_cast<int>(x.o)] & detail::fuse_flags::view;
    for (int j = 0, nj = x.nin(); j < nj; ++j)
      if (reads_input_values(x.o, j) && ko[x.in[j]] != no_kernel && (ko[x.in[j]] != ku || view))
        written[x.in[j]] = 1;  // (an operand read for its shape only is not a value read)
  }
  // nodes bucketed by kernel (a counting sort), so each kernel's reads are deduplicated with
  // one mark per buffer
  const std::size_t nk = out.kernels.size();
  cvec<int> start(nk + 1, 0), by_kernel(n, 0), mark(n, -1);
  int* st = start.data();
  int* bk = by_kernel.data();
  int* mk = mark.data();
  for (std::size_t i = 0; i < n; ++i)
    if (ko[i] != no_kernel) ++st[ko[i] + 1];
  for (std::size_t k = 0; k < nk; ++k) st[k + 1] += st[k];
  {
    cvec<int> fill(start.begin(), start.end() - 1);
    int* fl = fill.data();
    for (std::size_t i = 0; i < n; ++i)
      if (ko[i] != no_kernel) bk[fl[ko[i]]++] = static_cast<int>(i);
  }
  kernel* ks = out.kernels.data();
  for (int k = 0; k < static_cast<int>(nk); ++k) {
    kernel& K = ks[k];
    for (int p = st[k]; p < st[k + 1]; ++p) {
      const node& x = nd[bk[p]];
      if (written[bk[p]]) {
        ++K.writes;
        K.bytes_written += bytes_of(x.shape, x.dt);
      }
      for (int j = 0, nj = x.nin(); j < nj; ++j) {
        if (!reads_input_values(x.o, j)) continue;
        int src = x.in[j];
        while ((detail::fuse_table.f[static_cast<int>(nd[src].o)] & detail::fuse_flags::view) && nd[src].o != op::numel)
          src = nd[src].in[0];
        // values (element counts, constants) are not buffers; a buffer computed in this kernel
        // is not read; each buffer is read once per kernel
        const node& s = nd[src];
        if (s.o == op::numel || s.o == op::constant || ko[src] == k || mk[src] == k) continue;
        mk[src] = k;
        ++K.reads;
        K.bytes_read += bytes_of(s.shape, s.dt);
      }
    }
  }
  return out;
}

/// The fusion pass.
constexpr fused_graph fuse(const graph& g) { return account(group(g)); }

}  // namespace kiln::passes
