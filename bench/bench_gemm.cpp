// kiln's CPU GEMM (include/kiln/backend/cpu/gemm.hpp) against OpenBLAS's sgemm on the same
// inputs and thread count: square products 512^3, 1024^3, 2048^3, and linear + bias + gelu
// [1024 x 1024] x [1024 x 4096], fused into the GEMM's epilogue against sgemm followed by a
// separate bias + gelu pass (what a BLAS user writes). Both sides use the same xsimd gelu.
//
// Run: build/bench/bench_gemm --benchmark_repetitions=9 --benchmark_enable_random_interleaving=true
//        --benchmark_report_aggregates_only=true
// (--threads=N picks the thread count of both libraries, default 2; interleaving spreads the
// disturbance of a shared machine over all rows). OpenBLAS's kernels and thread count are the
// suites' (kb::ensure_env, bench_main.hpp: the CPU's core type, set before OpenBLAS loads by
// starting the program again; also OMP_WAIT_POLICY=passive unless set, which kiln's OpenMP
// regions then run under). The `openblas_kernels` and `kiln_threads` context lines say which.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <unistd.h>

#include <kiln/backend/cpu/gemm.hpp>

#include "bench_main.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include <xsimd/xsimd.hpp>

extern "C" {
void openblas_set_num_threads(int);
char* openblas_get_corename(void);
}

namespace {
using kiln::index_t;
using batch = xsimd::batch<float>;

int threads = 2;

std::vector<float> random_matrix(index_t n, unsigned seed) {
  std::vector<float> v(static_cast<std::size_t>(n));
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& x : v) x = u(g);
  return v;
}

batch gelu(batch z) { return batch(0.5f) * z * (batch(1.0f) + xsimd::erf(z * batch(0.70710678118654752f))); }
float gelu(float z) { return 0.5f * z * (1.0f + std::erf(z * 0.70710678118654752f)); }

/// row[j] = gelu(row[j] + bias[j]) for j < count: the epilogue, fused or as a separate pass.
void bias_gelu(float* row, const float* bias, index_t count) {
  constexpr index_t w = static_cast<index_t>(batch::size);
  const index_t full = count / w * w;
  for (index_t j = 0; j < full; j += w)
    gelu(batch::load_unaligned(row + j) + batch::load_unaligned(bias + j)).store_unaligned(row + j);
  for (index_t j = full; j < count; ++j) row[j] = gelu(row[j] + bias[j]);
}

void sgemm(const float* a, const float* b, float* c, index_t m, index_t n, index_t k) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, a, static_cast<int>(k), b, static_cast<int>(n), 0.0f, c, static_cast<int>(n));
}

void kiln_gemm(const float* a, const float* b, float* c, index_t m, index_t n, index_t k) {
  kiln::cpu::gemm<float>(1, m, n, k, {a, 0, k, 1}, {b, 0, n, 1}, {c, 0, n, 1});
}

double max_rel_diff(const std::vector<float>& x, const std::vector<float>& y) {
  double scale = 0, worst = 0;
  for (float v : y) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(x[i]) - y[i]));
  return worst / scale;
}

void set_counters(benchmark::State& st, double flops, double rel_diff) {
  st.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["rel_diff"] = rel_diff;  // max |kiln - openblas| / max |openblas|, checked once
}

// ---- square products ------------------------------------------------------------------------
struct square {
  index_t n;
  std::vector<float> a, b, c, ref;
  explicit square(index_t n_) : n(n_), a(random_matrix(n * n, 1)), b(random_matrix(n * n, 2)), c(n * n), ref(n * n) {
    sgemm(a.data(), b.data(), ref.data(), n, n, n);
    kiln_gemm(a.data(), b.data(), c.data(), n, n, n);
  }
};

void matmul_kiln(benchmark::State& st) {
  square s(st.range(0));
  const double diff = max_rel_diff(s.c, s.ref);
  for (auto _ : st) {
    kiln_gemm(s.a.data(), s.b.data(), s.c.data(), s.n, s.n, s.n);
    benchmark::DoNotOptimize(s.c.data());
  }
  set_counters(st, 2.0 * s.n * s.n * s.n, diff);
}

void matmul_openblas(benchmark::State& st) {
  square s(st.range(0));
  for (auto _ : st) {
    sgemm(s.a.data(), s.b.data(), s.c.data(), s.n, s.n, s.n);
    benchmark::DoNotOptimize(s.c.data());
  }
  set_counters(st, 2.0 * s.n * s.n * s.n, 0);
}

// ---- linear + bias + gelu -------------------------------------------------------------------
constexpr index_t lm = 1024, lk = 1024, ln = 4096;

struct linear {
  std::vector<float> x = random_matrix(lm * lk, 3), w = random_matrix(lk * ln, 4), bias = random_matrix(ln, 5);
  std::vector<float> y = std::vector<float>(lm * ln), ref = std::vector<float>(lm * ln);
  void separate_pass(float* out) const {
    kiln::cpu::parallel_for(lm, 1, [&](index_t i0, index_t i1) {
      for (index_t i = i0; i < i1; ++i) bias_gelu(out + i * ln, bias.data(), ln);
    });
  }
  void fused() {
    const float* b = bias.data();
    kiln::cpu::gemm<float>(1, lm, ln, lk, {x.data(), 0, lk, 1}, {w.data(), 0, ln, 1}, {y.data(), 0, ln, 1},
                           [b](index_t, index_t, index_t j0, index_t count, float* row) { bias_gelu(row, b + j0, count); });
  }
  void openblas_then_pass(float* out) const {
    sgemm(x.data(), w.data(), out, lm, ln, lk);
    separate_pass(out);
  }
  void kiln_then_pass() {
    kiln_gemm(x.data(), w.data(), y.data(), lm, ln, lk);
    separate_pass(y.data());
  }
  linear() { openblas_then_pass(ref.data()); }
};
constexpr double linear_flops = 2.0 * lm * ln * lk;

void linear_gelu_kiln_fused(benchmark::State& st) {
  linear l;
  l.fused();
  const double diff = max_rel_diff(l.y, l.ref);
  for (auto _ : st) {
    l.fused();
    benchmark::DoNotOptimize(l.y.data());
  }
  set_counters(st, linear_flops, diff);
}

void linear_gelu_kiln_then_pass(benchmark::State& st) {
  linear l;
  l.kiln_then_pass();
  const double diff = max_rel_diff(l.y, l.ref);
  for (auto _ : st) {
    l.kiln_then_pass();
    benchmark::DoNotOptimize(l.y.data());
  }
  set_counters(st, linear_flops, diff);
}

void linear_gelu_openblas_then_pass(benchmark::State& st) {
  linear l;
  for (auto _ : st) {
    l.openblas_then_pass(l.y.data());
    benchmark::DoNotOptimize(l.y.data());
  }
  set_counters(st, linear_flops, 0);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--threads=", 10) == 0) threads = std::max(1, std::atoi(argv[i] + 10));
  kb::ensure_env(argv, threads, "bench_gemm");  // may start the program again with the same arguments
  int out = 1;                // Google Benchmark must not see --threads
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--threads=", 10) != 0) argv[out++] = argv[i];
  argv[out] = nullptr;
  argc = out;

  kiln::cpu::set_num_threads(threads);
  openblas_set_num_threads(threads);
  benchmark::AddCustomContext("threads", std::to_string(threads));
  benchmark::AddCustomContext("openblas_kernels", openblas_get_corename());
#if defined(KILN_USE_OPENMP)
  // GOMP's default wait policy spins (SPR's pause is slow): on a machine with fewer free cores
  // than threads a parallel region can then stall for a scheduler time slice.
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  benchmark::AddCustomContext("kiln_threads", std::string("OpenMP, OMP_WAIT_POLICY=") + (policy ? policy : "(unset)"));
#else
  benchmark::AddCustomContext("kiln_threads", "kiln's std::thread pool");
#endif
  benchmark::AddCustomContext("kiln_tile", std::to_string(kiln::cpu::detail::gemm_config<float>::mr) + " x " +
                                               std::to_string(kiln::cpu::detail::gemm_config<float>::nr));

  for (index_t n : {512, 1024, 2048}) {
    benchmark::RegisterBenchmark("matmul_kiln", matmul_kiln)->Arg(n)->UseRealTime()->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("matmul_openblas", matmul_openblas)->Arg(n)->UseRealTime()->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("linear_gelu_kiln_fused", linear_gelu_kiln_fused)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("linear_gelu_kiln_then_pass", linear_gelu_kiln_then_pass)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("linear_gelu_openblas_then_pass", linear_gelu_openblas_then_pass)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);

  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}
