// Random integer, bf16 and f32 graphs through the CPU backend against the eager backend
// (cpu_random.hpp).
//
// Integers (i32, i64) must agree exactly: wrapping sums and products (the leaf a spans most of
// its dtype's range), comparisons, where, casts through the other width, bool and f64, integer
// matmuls, movement. bf16 values are rounded to bf16 after every op by both backends, which
// compute in f32; their exp, tanh, erf ... and the order of their sums differ within f32
// rounding, which now and then moves a bf16 rounding by a step: kt::graph_tolerance allows for
// a few.
#include "cpu_random.hpp"

using kiln::op;

TEST_CASE("random integer graphs: the CPU backend computes what the eager backend computes") {
  kt::random_totals t;
  kt::cpu_random_graphs<kt::graph_options{.dt = kiln::i32}, 200, 8>(t, kiln::cpu::num_threads());
  kt::cpu_random_graphs<kt::graph_options{.dt = kiln::i64, .medium = true}, 300, 8>(t, kiln::cpu::num_threads());
  MESSAGE(t.summary());
  CHECK(t.worst == 0);
  for (const op o : {op::mul, op::matmul, op::where, op::cast, op::permute, op::concat, op::gather})
    CHECK_MESSAGE(t.count(o) > 0, "no integer graph ran " << kiln::name(o));
}

TEST_CASE("random bf16 and f32 graphs: the CPU backend computes what the eager backend computes") {
  kt::random_totals t;
  kt::cpu_random_graphs<kt::graph_options{.dt = kiln::bf16, .max_steps = 12}, 500, 10>(t, kiln::cpu::num_threads());
  kt::cpu_random_graphs<kt::graph_options{.dt = kiln::f32, .medium = true}, 600, 6>(t, kiln::cpu::num_threads());
  MESSAGE(t.summary());
  for (const op o : {op::exp, op::matmul, op::cast, op::permute})
    CHECK_MESSAGE(t.count(o) > 0, "no bf16 or f32 graph ran " << kiln::name(o));
}
