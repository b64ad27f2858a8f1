// kiln/passes/pipeline.hpp: the passes in order, the plan type that holds their frozen result,
// and explain().
//
//   trace -> decompose -> canonicalize -> fuse -> plan
#pragma once

#include "../graph/graph.hpp"
#include "../graph/trace.hpp"
#include "canonicalize.hpp"
#include "decompose.hpp"
#include "fuse.hpp"
#include "plan.hpp"

namespace kiln::passes {

/// decompose -> canonicalize: the graph in primitives, simplified.
constexpr graph to_primitives(const graph& g) { return canonicalize(decompose(g)); }

/// The whole pipeline after trace.
constexpr schedule compile(const graph& g) { return plan(fuse(to_primitives(g))); }

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

/// The frozen plan of expression type E: its primitive graph, kernels and memory plan.
template <class E>
struct plan {
  static constexpr auto schedule =
      passes::freeze_schedule([] { return passes::plan(passes::fuse(prims_plan<E>::graph.thaw())); });
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
  return x;
}

/// explain(expr): node counts, kernels, bytes moved and scratch memory of expr's plan.
template <expression E>
constexpr explanation explain(const E&) {
  return explain_type<E>();
}

}  // namespace kiln
