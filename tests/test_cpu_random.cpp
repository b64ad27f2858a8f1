// Random graphs through the CPU backend: graphs from the shared generator (random_graph.hpp),
// made inside constant evaluation from compile-time seeds, planned, compiled into kernels, and
// run on fresh random inputs against the eager backend on the unoptimised graph.
// Build with -DKILN_TEST_GRAPH_SEED=<n> to compile another set of graphs.
#include "cpu_support.hpp"
#include "random_graph.hpp"

#include <utility>

#ifndef KILN_TEST_GRAPH_SEED
#define KILN_TEST_GRAPH_SEED 0x6b696c6e
#endif

using namespace kiln;

namespace {

constexpr std::uint64_t seed_base = KILN_TEST_GRAPH_SEED;
constexpr int graphs = 32;

/// Odd seeds make graphs with a dynamic number of rows, which the test sets at run time (and
/// for c, sometimes 1: then kernels that fusion built for equal extents run node by node).
template <std::uint64_t Seed>
struct random_plan {
  static constexpr auto graph = freeze([] { return kt::make_random_graph(kt::splitmix{Seed}, Seed % 2 == 1); });
  static constexpr auto schedule =
      passes::freeze_schedule([] { return passes::plan(passes::fuse(passes::to_primitives(graph.thaw()))); });
};

struct totals {
  int nodes = 0, kernels = 0, fused = 0, failed_shapes = 0;
};

template <std::uint64_t Seed>
void run_one(totals& t) {
  constexpr const auto& g = random_plan<Seed>::graph;
  constexpr const auto& s = random_plan<Seed>::schedule;
  static_assert(!check_graph(s.g));
  INFO("graph seed " << Seed << ", " << g.nodes.size() << " nodes, " << s.kernels.size() << " kernels");
  const index_t cols = g.nodes[0].shape.e[1];
  index_t rows = g.nodes[0].shape.e[0], c_rows = rows;
  if (rows == dyn) {
    rows = 1 + std::uniform_int_distribution<index_t>(0, 6)(kt::rng());
    c_rows = std::uniform_int_distribution<int>(0, 1)(kt::rng()) ? rows : 1;
  }
  const std::vector<any_tensor> leaves = {kt::random<double, 2>({rows, cols}).any(), kt::random<double, 2>({1, cols}).any(),
                                          kt::random<double, 2>({c_rows, 1}).any()};
  any_tensor want;
  try {
    want = eager::run(g, leaves)[0];
  } catch (const shape_error&) {  // e.g. a reshape that these run-time extents do not allow:
    ++t.failed_shapes;            // then the CPU backend must refuse too
    CHECK_THROWS_AS(cpu::run_schedule<s>(leaves), shape_error);
    return;
  }
  cpu::stats() = {};
  const any_tensor got = cpu::run_schedule<s>(leaves)[0];
  t.kernels += static_cast<int>(cpu::stats().kernels);
  t.fused += static_cast<int>(cpu::stats().fused);
  t.nodes += static_cast<int>(g.nodes.size());
  CHECK(cpu::stats().kernels == static_cast<long>(s.kernels.size()));
  CHECK(kt::difference(want, got) < 1e-9);
  const int threads = cpu::set_num_threads(1);
  const any_tensor one = cpu::run_schedule<s>(leaves)[0];
  cpu::set_num_threads(threads);
  CHECK(kt::same_bits(one, got));
}

}  // namespace

TEST_CASE("random graphs: the CPU backend computes what the eager backend computes") {
  totals t;
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (run_one<seed_base + I>(t), ...);
  }(std::make_index_sequence<graphs>{});
  MESSAGE(graphs << " random graphs (seeds from " << seed_base << "): " << t.nodes << " nodes, " << t.kernels
                 << " kernels, " << t.fused << " run fused, " << t.failed_shapes << " with shapes both backends refused");
}
