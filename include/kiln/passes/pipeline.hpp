// kiln/passes/pipeline.hpp: the passes in order (one list, `pipeline`), the plan type that holds
// their frozen result, and explain().
//
//   trace -> decompose -> canonicalize -> [differentiate -> canonicalize -> partition] -> fuse -> plan
//
// The bracketed stages run when the graph has grad, jvp or detach nodes. passes::compile runs
// the list at run time; plan<E> runs the same list in constant evaluation, one constant per
// stage; KILN_LOGS=stages prints what each stage left. With KILN_CHECK_PASSES defined (and in
// the tests' run-time calls), check_graph runs after every stage.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "../graph/graph.hpp"
#include "../graph/trace.hpp"
#include "autodiff.hpp"
#include "canonicalize.hpp"
#include "decompose.hpp"
#include "fuse.hpp"
#include "partition.hpp"
#include "plan.hpp"

namespace kiln::passes {

enum class pass : std::uint8_t { decompose, canonicalize, differentiate, partition, fuse, plan };

/// One stage of the pipeline.
struct stage {
  std::string_view name;
  pass p;
  bool derivatives_only;  ///< runs only when the graph entering `differentiate` has grad/jvp/detach nodes
};

/// The pipeline after trace, in order. The graph stages come first; fuse (graph -> kernels) and
/// plan (kernels -> memory plan) end it.
inline constexpr stage pipeline[] = {
    {"decompose", pass::decompose, false},        {"canonicalize", pass::canonicalize, false},
    {"differentiate", pass::differentiate, true}, {"canonicalize", pass::canonicalize, true},
    {"partition", pass::partition, true},         {"fuse", pass::fuse, false},
    {"plan", pass::plan, false},
};
inline constexpr int stage_count = static_cast<int>(sizeof(pipeline) / sizeof(pipeline[0]));
/// The first stage that works on kernels rather than on a graph.
inline constexpr int fuse_stage = stage_count - 2;
static_assert(pipeline[fuse_stage].p == pass::fuse && pipeline[fuse_stage + 1].p == pass::plan);

/// The index of the first stage of pass p (stage_count if none).
constexpr int stage_of(pass p) {
  for (int i = 0; i < stage_count; ++i)
    if (pipeline[i].p == p) return i;
  return stage_count;
}

/// Runs graph stage i.
constexpr graph run_stage(int i, graph g) {
  switch (pipeline[i].p) {
    case pass::decompose: return decompose(g);
    case pass::canonicalize: return canonicalize(static_cast<graph&&>(g));
    case pass::differentiate: return differentiate(g);
    case pass::partition: return partition(g);
    default: return g;  // fuse and plan are not graph stages (compile runs them)
  }
}

namespace detail {
/// Reached in constant evaluation when stage I left an invalid graph (KILN_CHECK_PASSES): not
/// constexpr, so the compiler stops here and names the stage's index I in pipeline[].
template <int I>
void stage_left_an_invalid_graph(const char* problem) {
  throw std::logic_error("kiln: pipeline stage '" + std::string(pipeline[I].name) + "' left an invalid graph: " + problem);
}
}  // namespace detail

/// g, checked after stage I when KILN_CHECK_PASSES is defined.
template <int I>
constexpr graph checked_stage(graph g) {
#ifdef KILN_CHECK_PASSES
  if (const char* problem = check_graph(g)) detail::stage_left_an_invalid_graph<I>(problem);
#endif
  return g;
}

/// Whether a graph stage runs on graph g entering it, given whether `differentiate` ran.
constexpr bool stage_runs(int i, bool derivatives) { return !pipeline[i].derivatives_only || derivatives; }

/// The graph stages before stage `end` (fuse_stage for all of them), at run time or in constant
/// evaluation; with check, check_graph runs after each (a failure throws std::logic_error).
constexpr graph run_stages(graph g, int end, bool check = false) {
  bool derivatives = false;
  for (int i = 0; i < end; ++i) {
    if (pipeline[i].p == pass::differentiate) derivatives = has_autodiff(g);
    if (!stage_runs(i, derivatives)) continue;
    g = run_stage(i, static_cast<graph&&>(g));
    if (check)
      if (const char* problem = check_graph(g))
        throw std::logic_error("kiln: pipeline stage '" + std::string(pipeline[i].name) +
                               "' left an invalid graph: " + problem);
  }
  return g;
}

/// decompose -> canonicalize (-> differentiate -> canonicalize): the graph in primitives,
/// simplified, with its derivatives expanded (the stages before partition).
constexpr graph to_primitives(const graph& g, bool check = false) { return run_stages(g, stage_of(pass::partition), check); }

/// The whole pipeline after trace.
constexpr schedule compile(const graph& g, bool check = false) {
  const fused_graph f = fuse(run_stages(g, fuse_stage, check));
  if (check)
    if (const char* problem = check_graph(f.g)) throw std::logic_error(std::string("kiln: fuse left an invalid graph: ") + problem);
  return plan(f);
}

}  // namespace kiln::passes

namespace kiln {

template <class E, int I>
struct stage_result;

/// E's graph after graph stage I of passes::pipeline (I = -1: as traced). A stage that does not
/// run for E (derivative stages of a graph without derivatives) leaves its input.
template <class E, int I>
constexpr const auto& stage_graph();

/// Whether graph stage I runs for E.
template <class E, int I>
constexpr bool stage_runs_for() {
  if constexpr (!passes::pipeline[I].derivatives_only) return true;
  else return passes::has_autodiff(stage_graph<E, passes::stage_of(passes::pass::differentiate) - 1>());
}

template <class E, int I>
constexpr const auto& stage_graph() {
  if constexpr (I < 0) return traced<E>::value;
  else if constexpr (!stage_runs_for<E, I>()) return stage_graph<E, I - 1>();
  else return stage_result<E, I>::graph;
}

/// Room for the nodes a pass leaves from n: canonicalize, partition and fusion add few (and
/// mostly remove), decompose and differentiate grow a graph (a backward pass about doubles it).
constexpr std::size_t room_for(std::size_t n, bool grows = false) { return grows ? 3 * n + 64 : n + n / 4 + 16; }

template <class E, int I>
constexpr std::size_t stage_capacity() {
  const passes::pass p = passes::pipeline[I].p;
  return room_for(stage_graph<E, I - 1>().nodes.size(), p == passes::pass::decompose || p == passes::pass::differentiate);
}

/// Each stage of E's pipeline is frozen into its own constant, so each runs in its own constant
/// evaluation, with the compilers' step limits applying to one pass at a time.
template <class E, int I>
struct stage_result {
  static constexpr auto graph = freeze_within<stage_capacity<E, I>(), stage_graph<E, I - 1>().outputs.size() + 8>(
      [] { return passes::checked_stage<I>(passes::run_stage(I, stage_graph<E, I - 1>().thaw())); });
};

/// canonicalize, in three constants: one sweep, dead-node removal, and the further rounds that
/// passes::canonicalize would run (none unless the first round removed nodes).
template <class E, int I>
  requires(passes::pipeline[I].p == passes::pass::canonicalize)
struct stage_result<E, I> {
  static constexpr std::size_t in_nodes = stage_graph<E, I - 1>().nodes.size(),
                               in_outputs = stage_graph<E, I - 1>().outputs.size();
  static constexpr auto swept = freeze_within<room_for(in_nodes), in_outputs>(
      [] { return passes::detail::sweep(stage_graph<E, I - 1>().thaw()); });
  static constexpr auto pruned =
      freeze_within<swept.nodes.size(), in_outputs>([] { return passes::remove_dead(swept.thaw()); });
  static constexpr auto graph = freeze_within<pruned.nodes.size(), in_outputs>([] {
    kiln::graph g = pruned.thaw();
    if (g.nodes.size() != stage_graph<E, I - 1>().nodes.size()) g = passes::canonicalize(static_cast<kiln::graph&&>(g));
    return passes::checked_stage<I>(static_cast<kiln::graph&&>(g));
  });
};

/// The frozen primitive graph of expression type E (decomposed and canonicalised).
template <class E>
struct prims_plan {
  static constexpr const auto& graph = stage_graph<E, passes::stage_of(passes::pass::differentiate) - 1>();
};

/// The final primitive graph of E: prims_plan, or with derivatives the joint forward and
/// backward graph (kiln's AOTAutograd), canonicalised.
template <class E>
constexpr const auto& primitive_graph() {
  return stage_graph<E, passes::stage_of(passes::pass::partition) - 1>();
}

/// E's primitive graph after the partition pass (which only changes a graph with derivatives).
template <class E>
constexpr const auto& partitioned_graph() {
  return stage_graph<E, passes::fuse_stage - 1>();
}

/// E's graph grouped into kernels (the first half of the fusion pass), frozen on its own.
template <class E>
struct fused {
  static constexpr std::size_t in_nodes = partitioned_graph<E>().nodes.size(),
                               in_outputs = partitioned_graph<E>().outputs.size();
  // grouping adds few nodes; kernels are fewer than nodes
  static constexpr auto value = passes::freeze_fused_within<room_for(in_nodes), in_outputs + 8, room_for(in_nodes)>([] {
    passes::fused_graph f = passes::group(partitioned_graph<E>().thaw());
#ifdef KILN_CHECK_PASSES
    (void)passes::checked_stage<passes::fuse_stage>(f.g);
#endif
    return f;
  });
};

/// The graph the eager backend runs for E: as captured, or, when E differentiates, decomposed
/// and differentiated without further simplification (the unfused reference).
template <class E>
struct eager_graph_of {
  static constexpr auto graph = freeze([] {
    return passes::remove_dead(passes::differentiate(stage_graph<E, passes::stage_of(passes::pass::decompose)>().thaw()));
  });
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
  // planning keeps the fused graph's nodes and kernels; buffers are fewer than nodes
  static constexpr auto schedule =
      passes::freeze_schedule_within<fused<E>::value.g.nodes.size(), fused<E>::value.g.outputs.size(),
                                     fused<E>::value.kernels.size(), fused<E>::value.g.nodes.size()>(
          [] { return passes::plan(passes::account(fused<E>::value.thaw())); });
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
