// Random graphs through the CPU backend, shared by the test_cpu_random* translation units (one
// per kind of graph, to keep each one's compile time small): graphs from the shared generator
// (random_graph.hpp), made inside constant evaluation from compile-time seeds, planned and
// compiled into kernels, and run on fresh random inputs against the eager backend on the
// unoptimised graph (decomposed and differentiated only, where it has gradients).
// Build with -DKILN_TEST_GRAPH_SEED=<n> to compile another set of graphs; KILN_TEST_INPUTS=<n> runs
// each on n draws of fresh inputs (1; scripts/fuzz.sh runs more).
#pragma once

#include "cpu_support.hpp"
#include "random_graph.hpp"

#include <sstream>
#include <string>
#include <utility>

#ifndef KILN_TEST_GRAPH_SEED
#define KILN_TEST_GRAPH_SEED 0x6b696c6e
#endif

namespace kt {

inline constexpr std::uint64_t graph_seed_base = KILN_TEST_GRAPH_SEED;

/// A graph of kind O from generator seed Seed, and its plan; each stage is its own constant
/// (its own constant evaluation, within the compilers' step limits).
template <std::uint64_t Seed, graph_options O>
struct random_plan {
  static constexpr auto graph = kiln::freeze([] { return make_random_graph(splitmix{Seed}, O); });
  static constexpr auto prims =
      kiln::freeze([] { return kiln::passes::partition(kiln::passes::to_primitives(graph.thaw())); });
  static constexpr auto schedule =
      kiln::passes::freeze_schedule([] { return kiln::passes::plan(kiln::passes::fuse(prims.thaw())); });
  static_assert(!kiln::check_graph(graph), "the generator made an invalid graph");
  static_assert(!kiln::check_graph(schedule.g), "the pipeline made an invalid graph");
};

/// What the CPU backend ran, over the graphs of one test.
struct random_totals {
  int graphs = 0, bf16_graphs = 0, nodes = 0, outputs = 0;
  kiln::cpu::run_stats ran{};
  double worst = 0;  ///< largest difference from eager, over the graphs
  double most_differing = 0;  ///< bf16: largest share of an output's elements that differ from eager's on the primitive graph
  double worst_prims = 0;     ///< bf16: largest difference from eager on the primitive graph
  int ops[static_cast<int>(kiln::op::share) + 1]{};  ///< nodes of each op in the graphs the CPU backend ran

  int count(kiln::op o) const { return ops[static_cast<int>(o)]; }

  void add(const kiln::cpu::run_stats& s) {
    ran.kernels += s.kernels;
    ran.fused += s.fused;
    ran.node_by_node += s.node_by_node;
    ran.streamed += s.streamed;
    ran.pipelined += s.pipelined;
    ran.deferred += s.deferred;
    ran.threaded += s.threaded;
  }
  std::string summary() const {
    std::ostringstream os;
    os << graphs << " graphs (seeds from " << graph_seed_base << "): " << nodes << " nodes, " << outputs << " outputs, "
       << ran.kernels << " kernels, " << ran.fused << " fused, " << ran.node_by_node << " node by node, " << ran.streamed
       << " streamed, " << ran.pipelined << " pipelined, " << ran.threaded << " threaded; largest difference from eager "
       << worst;
    if (bf16_graphs)
      os << "; bf16: " << worst_prims << " from eager on the primitive graph, in up to " << most_differing * 100
         << "% of an output's elements";
    os << "; ops run:";
    for (int o = 0; o <= static_cast<int>(kiln::op::share); ++o)
      if (ops[o]) os << " " << kiln::name(static_cast<kiln::op>(o)) << " " << ops[o];
    return os.str();
  }
};

/// Runs graph Seed of kind O with the CPU backend (with `threads` threads) and with the eager
/// reference on the same fresh inputs, and compares; then again with one thread, which must give
/// the same bits.
template <std::uint64_t Seed, graph_options O>
void cpu_random_graph(random_totals& t, int threads) {
  using namespace kiln;
  constexpr const auto& g = random_plan<Seed, O>::graph;
  constexpr const auto& s = random_plan<Seed, O>::schedule;
  (void)rng();  // (its seed, printed once, outside the INFO below)
  index_t rows = g.nodes[0].shape.e[0], c_rows = rows;
  if (rows == dyn) {  // and c's rows sometimes 1: then kernels fused for equal extents run node by node
    rows = 1 + std::uniform_int_distribution<index_t>(0, 6)(rng());
    c_rows = std::uniform_int_distribution<int>(0, 1)(rng()) ? rows : 1;
  }
  INFO("graph seed " << Seed << " (" << name(g.nodes[0].dt) << "), " << g.nodes.size() << " nodes, " << s.kernels.size()
                     << " kernels, rows " << rows << ", c's rows " << c_rows);
  const std::vector<any_tensor> leaves = random_leaves(g, rows, c_rows);
  const std::vector<any_tensor> want = eager::run(reference_graph(g.thaw()), leaves);
  // bf16: also eager on the primitive graph the CPU backend runs, which rounds where it rounds
  constexpr bool is_bf16 = g.nodes[0].dt == kiln::bf16;
  std::vector<any_tensor> want_prims;
  if constexpr (is_bf16) want_prims = eager::run(s.g, leaves);
  const int old = cpu::set_num_threads(threads);
  cpu::stats() = {};
  const std::vector<any_tensor> got = cpu::run_schedule<s>(leaves);
  const cpu::run_stats ran = cpu::stats();
  cpu::set_num_threads(1);
  const std::vector<any_tensor> one = cpu::run_schedule<s>(leaves);
  cpu::set_num_threads(old);
  t.add(ran);
  CHECK(ran.kernels == static_cast<long>(s.kernels.size()));
  REQUIRE(got.size() == want.size());
  for (std::size_t q = 0; q < got.size(); ++q) {
    INFO("output " << q);
    const double d = graph_difference(want[q], got[q]);
    CHECK(d <= graph_tolerance(g.nodes[0].dt));
    CHECK(same_bits(one[q], got[q]));
    t.worst = std::max(t.worst, d);
    if constexpr (is_bf16) {
      const double p = difference(want_prims[q], got[q]);
      CHECK(p <= bf16_prims_tolerance);
      t.worst_prims = std::max(t.worst_prims, p);
      // and few elements differ at all: a value left unrounded where eager rounds it would
      // make most of them differ (in outputs large enough for a share to mean something)
      const std::vector<double> w = values_of(want_prims[q]), v = values_of(got[q]);
      std::size_t differing = 0;
      for (std::size_t i = 0; i < w.size(); ++i) differing += !(w[i] == v[i] || (std::isnan(w[i]) && std::isnan(v[i])));
      const double share = w.empty() ? 0.0 : static_cast<double>(differing) / static_cast<double>(w.size());
      if (w.size() >= 4096) CHECK(share <= 0.01);
      t.most_differing = std::max(t.most_differing, share);
    }
  }
  ++t.graphs;
  t.bf16_graphs += is_bf16;
  for (const node& n : s.g.nodes) ++t.ops[static_cast<int>(n.o)];
  t.nodes += static_cast<int>(g.nodes.size());
  t.outputs += static_cast<int>(got.size());
}

/// Graphs graph_seed_base + First ... + First + Count - 1 of kind O.
template <graph_options O, std::uint64_t First, std::size_t Count>
void cpu_random_graphs(random_totals& t, int threads) {
  static const long draws = env_count("KILN_TEST_INPUTS", 1);
  for (long i = 0; i < draws; ++i)
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (cpu_random_graph<graph_seed_base + First + I, O>(t, threads), ...);
    }(std::make_index_sequence<Count>{});
}

}  // namespace kt
