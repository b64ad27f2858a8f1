// Random graphs on large inputs through the CPU backend against the eager backend
// (cpu_random.hpp): a [1024, 1024] and [256, 4096] (2^20 elements), each graph with an
// output softmax(a - c) along rows of 1024 or more, on two threads, so that pointwise kernels
// write with non-temporal stores, softmax's rows pipeline, and kernels split among threads. The
// stats show that each path ran.
#include "cpu_random.hpp"

TEST_CASE("random graphs on large inputs: streamed, pipelined and threaded kernels compute what eager computes") {
  using kiln::index_t;
  constexpr kt::graph_options f32{.dt = kiln::f32, .matmul = false, .rows = 1024, .cols = 1024, .max_steps = 6, .row_softmax = true};
  constexpr kt::graph_options wide{.dt = kiln::f32, .matmul = false, .rows = 256, .cols = 4096, .max_steps = 6, .row_softmax = true};
  constexpr kt::graph_options bf16{.dt = kiln::bf16, .matmul = false, .rows = 1024, .cols = 1024, .max_steps = 4, .row_softmax = true};
  constexpr kt::graph_options i32{.dt = kiln::i32, .matmul = false, .rows = 1024, .cols = 1024, .max_steps = 6};
  // results larger than 1 MiB stream, whatever the last-level cache's size (the default threshold)
  const std::int64_t threshold = kiln::cpu::set_stream_threshold(std::int64_t{1} << 20);
  kt::random_totals t;
  kt::cpu_random_graphs<f32, 700, 2>(t, 2);
  kt::cpu_random_graphs<wide, 710, 1>(t, 2);
  kt::cpu_random_graphs<bf16, 720, 1>(t, 2);
  kt::cpu_random_graphs<i32, 730, 1>(t, 2);
  kiln::cpu::set_stream_threshold(threshold);
  MESSAGE(t.summary());
  CHECK(t.ran.streamed > 0);
  CHECK(t.ran.pipelined > 0);
  CHECK(t.ran.threaded > 0);
}
