// bench/bench_autodiff.cpp: the autodiff benchmark suite. One training step (forward and
// backward: the loss and the gradients of all weights and biases) of the MLP 784-1024-1024-10
// with relu and mean cross-entropy over integer labels (autodiff_common.hpp), at batch 16 and
// 256. Every implementation runs in one process on the same input buffers (fresh random values
// each run, seed printed), with the same thread count, between measurements of the FMA peak.
// The seven outputs of each implementation are compared with kiln's eager backend on the same
// inputs; its rel_error is the largest of the seven (each relative to its own output's scale),
// and the seven are also reported one by one (counters rel_error_<output>, in the raw JSON).
//
//   bench_autodiff [--quick] [--threads=N] [--reps=N] [--min-time=S] [--seed=N] [benchmark flags]
//
// Benchmarks follow bench/report.py's conventions ("<workload>/<impl>", counters amount,
// rel_error, tolerance, threads, the rate unit as label); bench/run.sh builds this, runs it and
// writes bench/results/autodiff.{json,md,png}. The environment is the cpu suite's (ensure_env in
// bench_main.hpp: OpenBLAS's core type and threads, OMP_WAIT_POLICY, ATEN_CPU_CAPABILITY).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "autodiff_common.hpp"
#include "bench_main.hpp"

namespace kb {
namespace {

struct spec {
  std::string name;
  i64 batch;
  double amount;  // flops of one step
};

// Flops of one step, counted as 3 x the forward's GEMM flops (2 B in out per layer): the
// backward does two GEMMs per layer (the gradient of the weight and of the layer's input), as
// the usual "training = 3 x forward" convention counts. Exactly, the first layer needs no input
// gradient, so the GEMMs of a step do 2 B (3 (784*1024 + 1024*1024 + 1024*10) - 784*1024), about
// 14% less; the elementwise work (bias, relu, softmax) is not counted either.
spec make_spec(i64 batch) {
  const double forward = 2.0 * double(batch) * double(mlp_in * mlp_hidden + mlp_hidden * mlp_hidden + mlp_hidden * mlp_out);
  return {"mlp_step_b" + std::to_string(batch), batch, 3.0 * forward};
}

// Batches 16 and 256; --quick: 16 and an odd batch, for the tails.
std::vector<spec> specs(bool quick) {
  if (quick) return {make_spec(16), make_spec(37)};
  return {make_spec(16), make_spec(256)};
}

std::unique_ptr<ad_workload> make_workload(const spec& s, unsigned long long seed) {
  auto w = std::make_unique<ad_workload>();
  w->name = s.name;
  w->batch = s.batch;
  int next = 0;
  auto add = [&](fbuf& b, i64 numel, float lo, float hi) {
    b = fbuf(numel);
    fill(b, seed * 1000003ULL + static_cast<unsigned long long>(next++), lo, hi);
  };
  auto glorot = [](i64 in, i64 out) { return std::sqrt(6.0f / static_cast<float>(in + out)); };
  const float g1 = glorot(mlp_in, mlp_hidden), g2 = glorot(mlp_hidden, mlp_hidden), g3 = glorot(mlp_hidden, mlp_out);
  add(w->x, s.batch * mlp_in, 0, 1);
  add(w->w1, mlp_in * mlp_hidden, -g1, g1), add(w->b1, mlp_hidden, -0.1f, 0.1f);
  add(w->w2, mlp_hidden * mlp_hidden, -g2, g2), add(w->b2, mlp_hidden, -0.1f, 0.1f);
  add(w->w3, mlp_hidden * mlp_out, -g3, g3), add(w->b3, mlp_out, -0.1f, 0.1f);
  fbuf u;
  add(u, s.batch, 0, 10);  // labels: uniform in [0, 10), truncated
  w->labels.resize(static_cast<std::size_t>(s.batch));
  for (i64 i = 0; i < s.batch; ++i)
    w->labels[static_cast<std::size_t>(i)] = std::min<std::int64_t>(9, static_cast<std::int64_t>(u.data()[i]));
  return w;
}

// ---- what is set up, one workload and one runner at a time ----------------------------------

options opt;
std::vector<spec> all_specs;
std::vector<const ad_impl*> impls;

struct current {
  int spec = -1;
  std::unique_ptr<ad_workload> w;
  double eager_seconds = 0;  // the reference run of kiln eager, reported as its first sample
  bool eager_sample_used = false;
  const ad_impl* im = nullptr;
  std::unique_ptr<ad_runner> r;
  std::array<double, ad_outputs> err{};
} cur;

ad_workload& use_workload(int s) {
  if (cur.spec == s) return *cur.w;
  cur.r.reset();  // runners point into the previous workload's buffers
  cur.im = nullptr;
  cur.w.reset();
  std::fprintf(stderr, "bench_autodiff: %s: inputs, then the kiln eager reference ...", all_specs[s].name.c_str());
  cur.w = make_workload(all_specs[s], opt.seed + static_cast<unsigned long long>(s));
  cur.spec = s;
  auto eager = ad_kiln_eager_impl.make(*cur.w, 1);
  const auto t0 = std::chrono::steady_clock::now();
  eager->run();
  cur.eager_seconds = seconds_since(t0);
  cur.eager_sample_used = false;
  const auto out = eager->outputs();
  std::fprintf(stderr, " %.3f s, loss %.4f\n", cur.eager_seconds, static_cast<double>(out[0][0]));
  for (int q = 0; q < ad_outputs; ++q) {
    const auto n = static_cast<std::size_t>(ad_output_numel(q));
    cur.w->ref[static_cast<std::size_t>(q)] = fbuf(ad_output_numel(q));
    std::copy(out[static_cast<std::size_t>(q)], out[static_cast<std::size_t>(q)] + n,
              cur.w->ref[static_cast<std::size_t>(q)].data());
  }
  cur.r = std::move(eager);
  cur.im = &ad_kiln_eager_impl;
  cur.err = {};
  return *cur.w;
}

ad_runner& use_runner(int s, const ad_impl& im) {
  ad_workload& w = use_workload(s);
  if (cur.im == &im) return *cur.r;
  cur.r.reset();
  cur.r = im.make(w, opt.threads);
  cur.im = &im;
  cur.r->run();  // warm-up (pages, thread pools, caches); its outputs are the ones checked
  const auto out = cur.r->outputs();
  for (int q = 0; q < ad_outputs; ++q)
    cur.err[static_cast<std::size_t>(q)] =
        rel_error(out[static_cast<std::size_t>(q)], w.ref[static_cast<std::size_t>(q)].data(), ad_output_numel(q));
  return *cur.r;
}

// Issue 4's f32 tolerance for reductions and GEMMs, against the eager backend.
constexpr double tolerance = 1e-4;

void set_counters(benchmark::State& st, const spec& s, const ad_impl& im, const std::array<double, ad_outputs>& err) {
  st.counters["amount"] = s.amount;
  st.counters["rel_error"] = *std::max_element(err.begin(), err.end());
  for (int q = 0; q < ad_outputs; ++q)
    st.counters[std::string("rel_error_") + ad_output_names[q]] = err[static_cast<std::size_t>(q)];
  st.counters["tolerance"] = tolerance;
  st.counters["threads"] = im.threads(opt.threads);
  st.SetLabel("GFLOP/s");
}

void failed(benchmark::State& st, const std::exception& e) {
  cur.r.reset(), cur.im = nullptr, cur.w.reset(), cur.spec = -1;
  std::fprintf(stderr, "bench_autodiff: error: %s\n", e.what());
  st.SkipWithError(e.what());
}

void bench_impl(benchmark::State& st, int s, const ad_impl* im) {
  ad_runner* r = nullptr;
  try {
    r = &use_runner(s, *im);
  } catch (const std::exception& e) {
    failed(st, e);
    return;
  }
  for (auto _ : st) {
    r->run();
    benchmark::ClobberMemory();
  }
  set_counters(st, all_specs[s], *im, cur.err);
}

// kiln eager is slow (seconds a step): one run per repetition, timed by hand, and its first
// sample is the reference run that use_workload made anyway.
void bench_eager(benchmark::State& st, int s) {
  ad_runner* r = nullptr;
  try {
    r = &use_runner(s, ad_kiln_eager_impl);
  } catch (const std::exception& e) {
    failed(st, e);
    return;
  }
  for (auto _ : st) {
    if (!cur.eager_sample_used) {
      cur.eager_sample_used = true;
      st.SetIterationTime(cur.eager_seconds);
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    r->run();
    st.SetIterationTime(seconds_since(t0));
  }
  set_counters(st, all_specs[s], ad_kiln_eager_impl, {});
}

}  // namespace
}  // namespace kb

int main(int argc, char** argv) {
  using namespace kb;
  std::vector<char*> original(argv, argv + argc + 1);  // for the restart, before parse() edits argv
  if (!parse(argc, argv, opt, "bench_autodiff")) return 0;
  ensure_env(original.data(), opt.threads, "bench_autodiff");
  settle(opt);

  impls = {&ad_kiln_eager_impl};
#ifdef KILN_BENCH_HAVE_TORCH
  impls.push_back(&ad_libtorch_impl);
#endif
  impls.push_back(&ad_kiln_cpu_impl);

  all_specs = specs(opt.quick);
  register_fma_limit("start", opt);
  for (int s = 0; s < static_cast<int>(all_specs.size()); ++s) {
    const spec& sp = all_specs[s];
    for (const ad_impl* im : impls) {
      const std::string name = sp.name + "/" + im->name;
      if (im == &ad_kiln_eager_impl) {
        // one run per repetition; a single one where a step takes many seconds
        const int reps = sp.amount > 2e9 ? 1 : std::min(opt.reps, 3);
        benchmark::RegisterBenchmark(name.c_str(), bench_eager, s)
            ->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1)->Repetitions(reps);
      } else {
        benchmark::RegisterBenchmark(name.c_str(), bench_impl, s, im)
            ->UseRealTime()->Unit(benchmark::kMillisecond)->Repetitions(opt.reps)->MinTime(opt.min_time);
      }
    }
    register_fma_limit(s + 1 < static_cast<int>(all_specs.size()) ? "after_" + sp.name : "end", opt);
  }

  add_common_context("autodiff", opt);
#ifndef KILN_BENCH_HAVE_TORCH
  benchmark::AddCustomContext("skipped", "mlp_step/libtorch: libtorch is not installed (scripts/setup-bench.sh)\n");
#endif
  std::fprintf(stderr, "bench_autodiff: %d threads, OpenBLAS core %s, xsimd %s, seed %llu%s\n", opt.threads,
               openblas_corename(), simd_arch(), opt.seed, opt.quick ? ", quick" : "");

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
