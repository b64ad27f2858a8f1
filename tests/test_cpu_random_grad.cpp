// Random f64 graphs with gradients through the CPU backend against the eager backend
// (cpu_random.hpp): each graph's outputs are a value, the gradients of a rank-0 loss of it with
// respect to every leaf, and sometimes a jvp; the CPU backend runs the joint forward and backward
// graph simplified, partitioned and fused, the eager one as differentiated, node by node.
#include "cpu_random.hpp"

using kiln::op;

TEST_CASE("random graphs with gradients: the CPU backend computes what the eager backend computes") {
  kt::random_totals t;
  kt::cpu_random_graphs<kt::graph_options{.grad = true, .max_steps = 15}, 400, 8>(t, kiln::cpu::num_threads());
  kt::cpu_random_graphs<kt::graph_options{.grad = true, .medium = true, .max_steps = 15}, 450, 4>(t, kiln::cpu::num_threads());
  MESSAGE(t.summary());
  CHECK(t.outputs >= 4 * t.graphs);
  for (const op o : {op::matmul, op::scatter_add, op::permute, op::concat})
    CHECK_MESSAGE(t.count(o) > 0, "no graph's gradient ran " << kiln::name(o));
}
