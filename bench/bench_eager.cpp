// What the eager reference backend costs: `c = a + b * 2` through eager (one node at a time,
// every intermediate materialised) against a hand-written fused loop on the same inputs.
// The eager backend is the correctness reference, not a fast path: the CPU backend replaces
// it. Run: build/bench/bench_eager --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>
#include <kiln/kiln.hpp>

#include <random>

namespace {
using namespace kiln;

tensor<float, 1> random_tensor(index_t n, unsigned seed) {
  tensor<float, 1> t({n});
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (index_t i = 0; i < n; ++i) t(i) = u(g);
  return t;
}

void eager_add_mul(benchmark::State& st) {
  const index_t n = st.range(0);
  auto a = random_tensor(n, 1), b = random_tensor(n, 2);
  tensor<float, 1> c({n});
  for (auto _ : st) {
    c = a + b * 2;
    benchmark::DoNotOptimize(c.data());
  }
  st.SetBytesProcessed(st.iterations() * n * 3 * static_cast<index_t>(sizeof(float)));
}

void hand_fused_add_mul(benchmark::State& st) {
  const index_t n = st.range(0);
  auto a = random_tensor(n, 1), b = random_tensor(n, 2);
  tensor<float, 1> c({n});
  for (auto _ : st) {
    float* __restrict out = c.data();
    const float* x = a.data();
    const float* y = b.data();
    for (index_t i = 0; i < n; ++i) out[i] = x[i] + y[i] * 2;
    benchmark::DoNotOptimize(c.data());
  }
  st.SetBytesProcessed(st.iterations() * n * 3 * static_cast<index_t>(sizeof(float)));
}
}  // namespace

BENCHMARK(eager_add_mul)->Arg(1 << 12)->Arg(1 << 20);
BENCHMARK(hand_fused_add_mul)->Arg(1 << 12)->Arg(1 << 20);
BENCHMARK_MAIN();
