// Many random graphs of every kind the generator makes (random_graph.hpp): the fully optimised
// graph (decompose + canonicalize, called as run-time functions) and its fused, planned schedule
// must compute what the unoptimised graph computes, under the eager backend. KILN_TEST_GRAPHS
// sets the number of graphs of each kind (200; scripts/fuzz.sh runs many more).
#include "random_graph.hpp"

using namespace kiln;

namespace {

struct kind {
  const char* name;
  kt::graph_options opt;
};
const kind kinds[] = {
    {"f64", {}},
    {"f64, dyn rows", {.dynamic_rows = true}},
    {"f32", {.dt = f32}},
    {"f32, 7 to 130 rows and columns", {.dt = f32, .medium = true}},
    {"bf16", {.dt = bf16, .max_steps = 12}},
    {"i32", {.dt = i32}},
    {"i64", {.dt = i64}},
    {"f64 with gradients", {.grad = true, .max_steps = 15}},
};

}  // namespace

TEST_CASE("random graphs: optimised == unoptimised under the eager backend") {
  const long trials = kt::env_count("KILN_TEST_GRAPHS", 200);
  for (const kind& k : kinds) {
    long total_before = 0, total_after = 0, total_kernels = 0;
    double worst = 0;
    for (long trial = 0; trial < trials; ++trial) {
      const std::uint64_t seed = kt::rng()();
      const graph g = kt::make_random_graph(kt::splitmix{seed}, k.opt);
      INFO(std::string(k.name) << " graph, trial " << trial << ", generator seed " << seed << ", " << g.nodes.size() << " nodes");
      REQUIRE(check_graph(g) == nullptr);
      const graph ref = kt::reference_graph(g);
      REQUIRE(check_graph(ref) == nullptr);
      const graph opt = passes::partition(passes::to_primitives(g));
      REQUIRE(check_graph(opt) == nullptr);
      for (const node& n : opt.nodes) REQUIRE(passes::is_primitive(n.o));
      index_t rows = g.nodes[0].shape.e[0], c_rows = rows;
      if (rows == dyn) {
        rows = std::uniform_int_distribution<index_t>(1, 7)(kt::rng());
        c_rows = std::uniform_int_distribution<int>(0, 1)(kt::rng()) ? rows : 1;
      }
      INFO("rows " << rows << ", c's rows " << c_rows);
      const std::vector<any_tensor> leaves = kt::random_leaves(g, rows, c_rows);
      const std::vector<any_tensor> want = eager::run(ref, leaves);
      const std::vector<any_tensor> got = eager::run(opt, leaves);
      // the fused, planned schedule, run kernel by kernel with only what the plan keeps
      const passes::schedule sched = passes::plan(passes::fuse(opt));
      const std::vector<any_tensor> planned = eager::run_schedule(sched, leaves);
      REQUIRE(want.size() == got.size());
      REQUIRE(want.size() == planned.size());
      for (std::size_t q = 0; q < want.size(); ++q) {
        INFO("output " << q);
        const double d = kt::graph_difference(want[q], got[q]);
        CHECK(d <= kt::graph_tolerance(g.nodes[0].dt));
        CHECK(kt::same_bits(got[q], planned[q]));  // the same nodes, computed alike
        worst = std::max(worst, d);
      }
      total_kernels += static_cast<long>(sched.kernels.size());
      total_before += static_cast<long>(g.nodes.size());
      total_after += static_cast<long>(opt.nodes.size());
    }
    MESSAGE(trials << " random " << std::string(k.name) << " graphs: " << total_before << " nodes before, " << total_after << " after, "
                         << total_kernels << " kernels; largest difference " << worst);
  }
}
