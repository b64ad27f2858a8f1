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

namespace detail {

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
  int stamp = 0;

  /// The computed node a view chain looks at, or -1 for a leaf/constant.
  constexpr int source(int i) const {
    while (i >= 0) {
      const node& n = g.nodes[static_cast<std::size_t>(i)];
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
      const node& n = g.nodes[static_cast<std::size_t>(i)];
      if (kind_of(n.o) == op_kind::leaf) return i;
      if (!is_view(n.o)) return -1;
      i = n.in[0];
    }
    return -1;
  }

  /// A reduction kernel over `space` (and `axes`, unless ~0u) that reads the same buffer as
  /// operand `in`, which a node with dependencies `deps` can join without a cycle; else -1.
  constexpr int sibling(const dims& space, std::uint32_t axes, int in, const int* deps, int count) const {
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
    switch (k.kind) {
      case kernel_kind::pointwise:
      case kernel_kind::matmul: return n.shape == k.space;
      case kernel_kind::reduction:
        return n.shape == k.space || n.shape == reduce_shape(k.space, k.axes, true).shape ||
               n.shape == reduce_shape(k.space, k.axes, false).shape;
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
    kernel_of[static_cast<std::size_t>(i)] = k;
    ++kernels[static_cast<std::size_t>(k)].nodes;
    if (g.nodes[static_cast<std::size_t>(i)].phase != 0) backward[static_cast<std::size_t>(k)] = 1;
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
    const int src = is_view(g.nodes[static_cast<std::size_t>(in)].o) ? source(in) : in;
    return src >= 0 ? kernel_of[static_cast<std::size_t>(src)] : no_kernel;
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
      const node& n = g.nodes[static_cast<std::size_t>(y)];
      for (int j = 0; j < n.nin(); ++j) {
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
      if (kernel_of[static_cast<std::size_t>(y)] != deferred) continue;
      const node& n = g.nodes[static_cast<std::size_t>(y)];
      int reads[4]{no_kernel, no_kernel, no_kernel, no_kernel};
      for (int j = 0; j < n.nin(); ++j) {
        const int r = operand_kernel(n.in[j]);
        if (r == deferred) stack.push_back(n.in[j]);
        else reads[j] = r;
      }
      place(y, k, reads, n.nin());
    }
  }
  /// Gives deferred node x a kernel of its own (a reader needs it in memory).
  constexpr void materialize(int x) {
    if (kernel_of[static_cast<std::size_t>(x)] != deferred) return;
    place_deferred(x, open(kernel_kind::pointwise, g.nodes[static_cast<std::size_t>(x)].shape, 0, x));
  }

  constexpr void run() {
    kernel_of.assign(g.nodes.size(), no_kernel);
    seen.assign(g.nodes.size(), 0);
    for (std::size_t idx = 0; idx < g.nodes.size(); ++idx) {
      const int i = static_cast<int>(idx);
      const node& n = g.nodes[idx];
      if (kind_of(n.o) == op_kind::leaf || n.o == op::constant || is_view(n.o)) continue;
      // join[j]: the kernel computing operand j, which this node may join; dep[j]: the kernel
      // whose buffer operand j reads (through views too); inline_[j]: operand j is a deferred
      // pointwise value of this node's shape, computed inside whichever kernel this node joins
      int join[4]{no_kernel, no_kernel, no_kernel, no_kernel}, deps[4]{no_kernel, no_kernel, no_kernel, no_kernel};
      bool inline_[4]{false, false, false, false};
      const bool pointwise = is_pointwise(n.o);
      for (int j = 0; j < n.nin(); ++j) {
        const int in = n.in[j];
        if (!reads_input_values(n.o, j)) continue;  // only its shape: no dependency on its kernel
        if (is_view(g.nodes[static_cast<std::size_t>(in)].o)) {
          const int src = source(in);
          if (src >= 0) materialize(src);
          deps[j] = src >= 0 ? kernel_of[static_cast<std::size_t>(src)] : no_kernel;
        } else if (kernel_of[static_cast<std::size_t>(in)] == deferred && pointwise &&
                   g.nodes[static_cast<std::size_t>(in)].shape == n.shape) {
          inline_[j] = true;
        } else {
          materialize(in);
          join[j] = deps[j] = kernel_of[static_cast<std::size_t>(in)];
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
        if (free && deriv) {
          bool reads_forward = false;  // else it is leaves alone, handled as any other
          for (int j = 0; j < count; ++j) reads_forward = reads_forward || deps[j] >= 0;
          if (reads_forward) {
            kernel_of[idx] = deferred;
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
            kernel_of[idx] = deferred;
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
        kernels[static_cast<std::size_t>(k2)].source = src >= 0 && kernel_of[static_cast<std::size_t>(src)] != no_kernel
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
      if (best == no_kernel) best = open(kernel_kind::pointwise, n.shape, 0, i);
      for (int j = 0; j < count; ++j)
        if (inline_[j]) place_deferred(n.in[j], best);
      place(i, best, deps, count);
    }
    // what is still deferred is read by no kernel (outputs): from the last node back, so that
    // each kernel takes the whole deferred chain it ends
    for (std::size_t idx = g.nodes.size(); idx-- > 0;) materialize(static_cast<int>(idx));
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

/// The fusion pass.
constexpr fused_graph fuse(const graph& g) {
  detail::fuser f{g, {}, {}, {}, {}, {}, {}, {}, 0};
  f.run();
  // renumber kernels in execution order
  const cvec<int> order = f.order();
  cvec<int> rank(order.size(), 0);
  for (std::size_t r = 0; r < order.size(); ++r) rank[static_cast<std::size_t>(order[r])] = static_cast<int>(r);
  fused_graph out{g, f.kernel_of, cvec<char>(g.nodes.size(), 0), {}};
  for (int& k : out.kernel_of)
    if (k != no_kernel) k = rank[static_cast<std::size_t>(k)];
  for (int k : order) out.kernels.push_back(f.kernels[static_cast<std::size_t>(k)]);
  // which values are written: outputs, and values read by another kernel or through a view
  for (int o : g.outputs) out.written[static_cast<std::size_t>(o)] = 1;
  for (std::size_t u = 0; u < g.nodes.size(); ++u)
    for (int j = 0; j < g.nodes[u].nin(); ++j) {
      const auto i = static_cast<std::size_t>(g.nodes[u].in[j]);
      if (!reads_input_values(g.nodes[u].o, j)) continue;  // a shape, not values
      if (out.kernel_of[i] != no_kernel && (out.kernel_of[u] != out.kernel_of[i] || is_view(g.nodes[u].o)))
        out.written[i] = 1;
    }
  // nodes bucketed by kernel (a counting sort), so each kernel's reads are deduplicated with
  // one mark per buffer
  const std::size_t nk = out.kernels.size();
  cvec<int> start(nk + 1, 0), by_kernel(g.nodes.size(), 0);
  for (int k : out.kernel_of)
    if (k != no_kernel) ++start[static_cast<std::size_t>(k) + 1];
  for (std::size_t k = 0; k < nk; ++k) start[k + 1] += start[k];
  {
    cvec<int> fill(start.begin(), start.end() - 1);
    for (std::size_t i = 0; i < g.nodes.size(); ++i)
      if (out.kernel_of[i] != no_kernel) by_kernel[static_cast<std::size_t>(fill[static_cast<std::size_t>(out.kernel_of[i])]++)] = static_cast<int>(i);
  }
  cvec<int> mark(g.nodes.size(), -1);
  for (std::size_t k = 0; k < nk; ++k) {
    kernel& K = out.kernels[k];
    for (int p = start[k]; p < start[k + 1]; ++p) {
      const auto i = static_cast<std::size_t>(by_kernel[static_cast<std::size_t>(p)]);
      const node& n = g.nodes[i];
      if (out.written[i]) {
        ++K.writes;
        K.bytes_written += bytes_of(n.shape, n.dt);
      }
      for (int j = 0; j < n.nin(); ++j) {
        if (!reads_input_values(n.o, j)) continue;
        int src = n.in[j];
        while (is_view(g.nodes[static_cast<std::size_t>(src)].o) && g.nodes[static_cast<std::size_t>(src)].o != op::numel)
          src = g.nodes[static_cast<std::size_t>(src)].in[0];
        const auto si = static_cast<std::size_t>(src);
        const node& s = g.nodes[si];
        if (s.o == op::numel || s.o == op::constant) continue;           // values, not buffers
        if (out.kernel_of[si] == static_cast<int>(k)) continue;           // computed in this kernel
        if (mark[si] == static_cast<int>(k)) continue;                    // read once per kernel
        mark[si] = static_cast<int>(k);
        ++K.reads;
        K.bytes_read += bytes_of(s.shape, s.dt);
      }
    }
  }
  return out;
}

}  // namespace kiln::passes
