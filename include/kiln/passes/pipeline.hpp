// kiln/passes/pipeline.hpp: the passes in order, the plan type that holds their frozen result,
// and explain().
//
//   trace -> decompose -> canonicalize -> [differentiate -> canonicalize] -> fuse -> plan
//
// The bracketed stages run when the graph has grad, jvp or detach nodes.
#pragma once

#include "../graph/graph.hpp"
#include "../graph/trace.hpp"
#include "autodiff.hpp"
#include "canonicalize.hpp"
#include "decompose.hpp"
#include "fuse.hpp"
#include "partition.hpp"
#include "plan.hpp"

namespace kiln::passes {

/// decompose -> canonicalize (-> differentiate -> canonicalize): the graph in primitives,
/// simplified, with its derivatives expanded.
constexpr graph to_primitives(const graph& g) {
  graph p = canonicalize(decompose(g));
  if (has_autodiff(p)) p = canonicalize(differentiate(p));
  return p;
}

/// The whole pipeline after trace.
constexpr schedule compile(const graph& g) { return plan(fuse(partition(to_primitives(g)))); }

}  // namespace kiln::passes

namespace kiln {

/// The frozen result of the decomposition pass on expression type E. Each stage of the
/// pipeline is frozen into its own constant, so each runs in its own constant evaluation, with
/// the compilers' step limits applying to one pass at a time.
template <class E>
struct decomposed {
  static constexpr auto graph = freeze([] { return passes::decompose(traced<E>::value.thaw()); });
};

/// One canonicalisation sweep, then dead-node removal, each in its own constant evaluation.
template <class E>
struct swept {
  static constexpr auto graph = freeze([] { return passes::detail::sweep(decomposed<E>::graph.thaw()); });
};
template <class E>
struct pruned {
  static constexpr auto graph = freeze([] { return passes::remove_dead(swept<E>::graph.thaw()); });
};

/// The frozen primitive graph of expression type E (decomposed and canonicalised). One sweep
/// reaches the fixed point unless it removed nodes; then canonicalize iterates to it.
template <class E>
struct prims_plan {
  static constexpr auto graph = freeze([] {
    kiln::graph g = pruned<E>::graph.thaw();
    if (g.nodes.size() == decomposed<E>::graph.nodes.size()) return g;
    return passes::canonicalize(static_cast<kiln::graph&&>(g));
  });
};

/// The graph of E with its grad, jvp and detach nodes expanded (kiln's AOTAutograd), then
/// canonicalised: forward and backward in one graph. Each stage is its own constant.
template <class E>
struct differentiated {
  static constexpr auto graph = freeze([] { return passes::differentiate(prims_plan<E>::graph.thaw()); });
};
template <class E>
struct joint_swept {
  static constexpr auto graph = freeze([] { return passes::detail::sweep(differentiated<E>::graph.thaw()); });
};
template <class E>
struct joint_plan {
  static constexpr auto graph = freeze([] {
    kiln::graph g = passes::remove_dead(joint_swept<E>::graph.thaw());
    return passes::canonicalize(static_cast<kiln::graph&&>(g));
  });
};

/// The final primitive graph of E: prims_plan, or joint_plan when E differentiates.
template <class E>
constexpr const auto& primitive_graph() {
  if constexpr (passes::has_autodiff(prims_plan<E>::graph)) return joint_plan<E>::graph;
  else return prims_plan<E>::graph;
}

/// E's primitive graph after the partition pass (which only changes a graph with derivatives).
template <class E>
struct partitioned {
  static constexpr auto graph = freeze([] { return passes::partition(primitive_graph<E>().thaw()); });
};
template <class E>
constexpr const auto& partitioned_graph() {
  if constexpr (passes::has_autodiff(prims_plan<E>::graph)) return partitioned<E>::graph;
  else return prims_plan<E>::graph;
}

/// E's graph grouped into kernels (the first half of the fusion pass), frozen on its own.
template <class E>
struct fused {
  static constexpr auto value = passes::freeze_fused([] { return passes::group(partitioned_graph<E>().thaw()); });
};

/// The graph the eager backend runs for E: as captured, or, when E differentiates, decomposed
/// and differentiated without further simplification (the unfused reference).
template <class E>
struct eager_graph_of {
  static constexpr auto graph =
      freeze([] { return passes::remove_dead(passes::differentiate(decomposed<E>::graph.thaw())); });
};
template <class E>
constexpr const auto& eager_graph() {
  if constexpr (passes::has_autodiff(traced<E>::value)) return eager_graph_of<E>::graph;
  else return traced<E>::value;
}

/// The frozen plan of expression type E: its primitive graph, kernels and memory plan. The
/// partition pass, the grouping into kernels, and the accounting of the fusion pass with memory
/// planning, each run in their own constant evaluation.
template <class E>
struct plan {
  static constexpr auto schedule =
      passes::freeze_schedule([] { return passes::plan(passes::account(fused<E>::value.thaw())); });
};

/// What the pipeline made of an expression, as torch._dynamo.explain reports it. Usable in
/// static_assert. Byte counts are `fixed + per_dyn * N` for a dynamic extent N.
struct explanation {
  int graph_nodes = 0;  ///< nodes as captured
  int prim_nodes = 0;   ///< nodes after decomposition and canonicalisation
  int kernels = 0, pointwise_kernels = 0, reduction_kernels = 0, matmul_kernels = 0;
  int buffers = 0;      ///< scratch buffers after reuse
  passes::bytes_t bytes_read{}, bytes_written{}, scratch{};
  passes::bytes_t unshared_scratch{};  ///< scratch if no buffer were reused
  // with derivatives (grad, jvp): what the forward keeps for the backward
  passes::bytes_t saved{};       ///< forward values written to memory for the backward
  int saved_values = 0;
  int recomputed_nodes = 0;      ///< forward nodes recomputed in backward kernels instead
  passes::bytes_t tape_bytes{};  ///< what saving every forward value the backward reads would keep
};

template <class E>
constexpr explanation explain_type() {
  constexpr const auto& s = plan<E>::schedule;
  explanation x;
  x.graph_nodes = static_cast<int>(traced<E>::value.nodes.size());
  x.prim_nodes = static_cast<int>(s.g.nodes.size());
  x.kernels = static_cast<int>(s.kernels.size());
  for (const passes::kernel& k : s.kernels) {
    x.pointwise_kernels += k.kind == passes::kernel_kind::pointwise;
    x.reduction_kernels += k.kind == passes::kernel_kind::reduction;
    x.matmul_kernels += k.kind == passes::kernel_kind::matmul;
    x.bytes_read += k.bytes_read;
    x.bytes_written += k.bytes_written;
  }
  x.buffers = static_cast<int>(s.buffers.size());
  x.scratch = passes::scratch_bytes(s);
  for (std::size_t i = 0; i < s.g.nodes.size(); ++i)
    if (s.buffer_of[i] >= 0) x.unshared_scratch += passes::bytes_of(s.g.nodes[i].shape, s.g.nodes[i].dt);
  const passes::saved_report r = passes::saved_for_backward(s);
  x.saved = r.saved;
  x.saved_values = r.saved_values;
  x.recomputed_nodes = r.recomputed;
  x.tape_bytes = passes::tape_bytes(primitive_graph<E>());
  return x;
}

/// explain(expr): node counts, kernels, bytes moved and scratch memory of expr's plan.
template <traceable E>
constexpr explanation explain(const E&) {
  return explain_type<E>();
}

}  // namespace kiln
