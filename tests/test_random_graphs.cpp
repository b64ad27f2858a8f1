// Many random graphs: the fully optimised graph (decompose + canonicalize, called as run-time
// functions) and its fused, planned schedule must compute what the unoptimised graph computes,
// under the eager backend.
#include "support.hpp"

#include "random_graph.hpp"

using namespace kiln;

namespace {

double compare(const any_tensor& a, const any_tensor& b) {
  REQUIRE(a.shape() == b.shape());
  double worst = 0;
  for (index_t i = 0; i < a.numel(); ++i) {
    const double p = a.data<double>()[i], q = b.data<double>()[i];
    if (std::isnan(p) || std::isnan(q)) {
      REQUIRE(std::isnan(p) == std::isnan(q));
      continue;
    }
    worst = std::max(worst, std::fabs(p - q) / (1 + std::fabs(p)));
  }
  return worst;
}

}  // namespace

TEST_CASE("random graphs: optimised == unoptimised under the eager backend") {
  int total_before = 0, total_after = 0, total_kernels = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const graph g = kt::make_random_graph(kt::splitmix{kt::rng()()});
    const index_t cols = g.nodes[0].shape.e[1], rows = g.nodes[0].shape.e[0];
    INFO("trial " << trial << ", " << g.nodes.size() << " nodes");
    REQUIRE(check_graph(g) == nullptr);
    const graph opt = passes::to_primitives(g);
    REQUIRE(check_graph(opt) == nullptr);
    for (const node& n : opt.nodes) REQUIRE(passes::is_primitive(n.o));
    const std::vector<any_tensor> leaves = {kt::random<double, 2>({rows, cols}).any(),
                                            kt::random<double, 2>({1, cols}).any(),
                                            kt::random<double, 2>({rows, 1}).any()};
    const any_tensor want = eager::run(g, leaves)[0];
    REQUIRE(compare(want, eager::run(opt, leaves)[0]) < 1e-9);
    // the fused, planned schedule, run kernel by kernel with only what the plan keeps
    const passes::schedule sched = passes::plan(passes::fuse(opt));
    REQUIRE(compare(want, eager::run_schedule(sched, leaves)[0]) < 1e-9);
    total_kernels += static_cast<int>(sched.kernels.size());
    total_before += static_cast<int>(g.nodes.size());
    total_after += static_cast<int>(opt.nodes.size());
  }
  MESSAGE("300 random graphs: " << total_before << " nodes before, " << total_after << " after, "
                                 << total_kernels << " kernels");
}
