// kiln/passes/partition.hpp: what the backward reads from the forward, in the spirit of
// AOTAutograd's min-cut partitioner, by its rules rather than by a flow computation.
//
// In a joint forward+backward graph (passes/autodiff.hpp marks what differentiation emitted),
// a backward node that reads a forward value forces the forward kernel computing it to write
// it to memory ("save" it). That is free when the value is written anyway (a graph output, or
// read by a matmul or a view, which read memory). A cheap pointwise value that would otherwise
// stay in registers is instead recomputed inside the backward: its pointwise chain is cloned,
// back to values that are saved anyway or must be (leaves, matmul and reduction outputs), so the
// fusion pass puts the clone into the backward kernel that uses it. Matmul and reduction
// outputs are never recomputed.
//
// Runs after the last canonicalisation (which would merge the clones back) and before fusion.
#pragma once

#include "../core/cvec.hpp"
#include "../graph/graph.hpp"
#include "fuse.hpp"

namespace kiln::passes {

namespace detail {

struct partitioner {
  const graph& g;
  graph out;
  cvec<int> to;         // original node -> node in `out`
  cvec<int> clone_of;   // original forward node -> its recomputed clone in `out`, or -1
  cvec<char> kept;      // original forward node is written to memory anyway
  int recomputed = 0;

  static constexpr bool recomputable(const node& n) { return is_pointwise(n.o) && n.phase == 0; }

  /// The chain of cheap forward values behind node i, cloned for the backward (depth-limited:
  /// a long chain is saved instead). Returns the node the backward should read.
  constexpr int backward_operand(int i, int depth) {
    const node& n = g.nodes[static_cast<std::size_t>(i)];
    if (!recomputable(n) || kept[static_cast<std::size_t>(i)] || depth > 8) return to[static_cast<std::size_t>(i)];
    if (clone_of[static_cast<std::size_t>(i)] >= 0) return clone_of[static_cast<std::size_t>(i)];
    node c = n;
    for (int j = 0, nj = n.nin(); j < nj; ++j) c.in[j] = backward_operand(n.in[j], depth + 1);
    c.phase = 2;
    ++recomputed;
    return clone_of[static_cast<std::size_t>(i)] = out.add(c);
  }

  constexpr void run() {
    const std::size_t n = g.nodes.size();
    to.assign(n, -1);
    clone_of.assign(n, -1);
    kept.assign(n, 0);
    for (int o : g.outputs) kept[static_cast<std::size_t>(o)] = 1;
    for (const node& x : g.nodes) {
      if (x.phase != 0) continue;
      const bool reads_memory = x.o == op::matmul || kind_of(x.o) == op_kind::shape || kind_of(x.o) == op_kind::movement;
      for (int j = 0; j < x.nin() && reads_memory; ++j)
        if (reads_input_values(x.o, j)) kept[static_cast<std::size_t>(x.in[j])] = 1;
    }
    out.leaves = g.leaves;
    out.nodes.reserve(n + n / 4);
    for (std::size_t i = 0; i < n; ++i) {
      node x = g.nodes[i];
      for (int j = 0, nj = x.nin(); j < nj; ++j)
        x.in[j] = x.phase != 0 ? backward_operand(x.in[j], 0) : to[static_cast<std::size_t>(x.in[j])];
      to[i] = out.add(x);
    }
    for (int o : g.outputs) out.outputs.push_back(to[static_cast<std::size_t>(o)]);
  }
};

}  // namespace detail

/// The partition pass: recomputes cheap forward values inside the backward instead of saving
/// them. A graph without backward nodes comes back unchanged.
constexpr graph partition(const graph& g) {
  bool joint = false;
  for (const node& x : g.nodes) joint = joint || x.phase != 0;
  if (!joint) return g;
  detail::partitioner p{g, {}, {}, {}, {}, 0};
  p.run();
  return p.out;
}

/// What a plan keeps of its forward for its backward.
struct saved_report {
  bytes_t saved{};  ///< values the forward's kernels write that backward-only kernels read
  int saved_values = 0;
  int recomputed = 0;  ///< forward nodes recomputed in the backward
};

/// Follows views back to the value whose buffer they read.
template <class G>
constexpr int through_views(const G& g, int i) {
  while (is_view(g.nodes[static_cast<std::size_t>(i)].o)) i = g.nodes[static_cast<std::size_t>(i)].in[0];
  return i;
}

/// The forward's kernels are those holding a forward node; what they write and a kernel of the
/// backward alone reads is kept from one to the other: forward values, and backward values that
/// fusion computed inside forward kernels (a relu mask next to its activation) alike.
template <class S>
constexpr saved_report saved_for_backward(const S& s) {
  saved_report r;
  const std::size_t n = s.g.nodes.size();
  cvec<char> forward(s.kernels.size(), 0), counted(n, 0);
  for (std::size_t u = 0; u < n; ++u) {
    r.recomputed += s.g.nodes[u].phase == 2;
    if (s.kernel_of[u] != no_kernel && s.g.nodes[u].phase == 0) forward[static_cast<std::size_t>(s.kernel_of[u])] = 1;
  }
  for (std::size_t u = 0; u < n; ++u) {
    const node& x = s.g.nodes[u];
    const int ku = s.kernel_of[u];
    if (ku == no_kernel || forward[static_cast<std::size_t>(ku)]) continue;
    for (int j = 0, nj = x.nin(); j < nj; ++j) {
      const auto si = static_cast<std::size_t>(through_views(s.g, x.in[j]));
      const int ks = s.kernel_of[si];
      if (counted[si] || ks == no_kernel || ks == ku || !forward[static_cast<std::size_t>(ks)]) continue;
      counted[si] = 1;
      ++r.saved_values;
      r.saved += bytes_of(s.g.nodes[si].shape, s.g.nodes[si].dt);
    }
  }
  return r;
}

/// What an autograd tape would save of a joint graph: every distinct forward intermediate (not a
/// leaf or constant) that a backward node reads, each as a tensor of its own.
template <class G>
constexpr bytes_t tape_bytes(const G& g) {
  bytes_t total{};
  const std::size_t n = g.nodes.size();
  cvec<char> counted(n, 0);
  for (const node& x : g.nodes) {
    if (x.phase == 0) continue;
    for (int j = 0, nj = x.nin(); j < nj; ++j) {
      const auto si = static_cast<std::size_t>(through_views(g, x.in[j]));
      const node& f = g.nodes[si];
      if (f.phase != 0 || counted[si] || kind_of(f.o) == op_kind::leaf || kind_of(f.o) == op_kind::constant ||
          f.o == op::numel)
        continue;
      counted[si] = 1;
      total += bytes_of(f.shape, f.dt);
    }
  }
  return total;
}

}  // namespace kiln::passes
