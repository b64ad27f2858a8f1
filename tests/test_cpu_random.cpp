// Random f64 graphs through the CPU backend against the eager backend (cpu_random.hpp): every
// op kind of the generator, matmuls and movement included, with static extents and with a
// dynamic number of rows set at run time.
#include "cpu_random.hpp"

using kiln::op;

TEST_CASE("random f64 graphs: the CPU backend computes what the eager backend computes") {
  kt::random_totals t;
  kt::cpu_random_graphs<kt::graph_options{}, 0, 12>(t, kiln::cpu::num_threads());
  kt::cpu_random_graphs<kt::graph_options{.medium = true}, 50, 4>(t, kiln::cpu::num_threads());
  kt::cpu_random_graphs<kt::graph_options{.dynamic_rows = true}, 100, 16>(t, kiln::cpu::num_threads());
  MESSAGE(t.summary());
  CHECK(t.ran.fused > 0);
  CHECK(t.ran.node_by_node > 0);  // (c with one row where a has more)
  for (const op o : {op::matmul, op::permute, op::slice, op::concat, op::gather, op::iota, op::rand, op::pow, op::cast})
    CHECK_MESSAGE(t.count(o) > 0, "no f64 graph ran " << kiln::name(o));
}
