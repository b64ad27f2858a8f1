// bench/bench_cpu.cpp: the CPU benchmark suite. Every implementation of every workload runs in
// one process, on the same input buffers (fresh random values each run, seed printed), with the
// same thread count, each measured alongside the machine's limit (stream bandwidth in turns
// with a memory-bound workload's runs, FMA peak in a GEMM's rounds: see bench_round_limit).
// Each output is compared with kiln's eager backend on the same inputs.
//
//   bench_cpu [--quick] [--threads=N] [--reps=N] [--min-time=S] [--seed=N] [--stream-mib=N]
//             [benchmark flags]
//
// Benchmarks are named "<workload>/<impl>/round:<r>" and carry the counters bench/report.py
// reads: amount (bytes or flops one run must move or do), rel_error, tolerance, threads; the
// label is the rate unit. bench/run.sh builds this, runs it and writes
// bench/results/cpu.{json,md,png}.
//
// The implementations of a workload are measured in rounds (--reps of them), one measurement
// of each per round, in an order that rotates from round to round, each after a pause of
// 100 ms: on a machine whose memory bandwidth drifts by tens of percent within seconds (other
// work on it or on its host), every implementation then sees the same mix of good and bad
// moments, and none inherits the spinning threads of the one before (OpenBLAS's spin for tens
// of milliseconds after a call).
//
// Debian's OpenBLAS 0.3.21 picks SSE3 kernels on these Xeons unless OPENBLAS_CORETYPE is set
// when it loads, which is before main: main sets it from /proc/cpuinfo (SkylakeX with AVX-512,
// Haswell with AVX2), with the other variables of ensure_env, and starts the program again, so
// a bare `bench_cpu` measures the same thing as bench/run.sh.
//
// bench_avx2 (bench/run.sh avx2) is this file built again with AVX-512 disabled
// (KILN_BENCH_AVX2, -mno-avx512f), its peers too: the two gelu chains only, kiln against Eigen
// and the hand-fused loop, all in AVX2 vector code, as on a CPU without AVX-512 (issue 27).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <thread>
#include <vector>

#include "bench_main.hpp"
#include "cpu_common.hpp"

#if defined(KILN_BENCH_AVX2) && defined(__AVX512F__)
#error "bench_avx2 must be compiled with AVX-512 disabled (-mno-avx512f): see bench/CMakeLists.txt"
#endif

namespace kb {
namespace {

// ---- the workloads --------------------------------------------------------------------------

struct spec {
  std::string name;
  kind what;
  i64 m, k, n;
  double amount;  // bytes one run must move (memory-bound) or flops it must do
  bool flops;
};

std::string count(i64 n) {
  return n % (1 << 20) == 0 ? std::to_string(n >> 20) + "M" : std::to_string(n);
}

spec make_spec(kind what, i64 m, i64 k, i64 n) {
  const double f = sizeof(float);
  switch (what) {
    case kind::gelu_chain: return {"gelu_chain_" + count(n), what, 1, 0, n, 4 * f * double(n), false};
    case kind::gelu_tanh_chain: return {"gelu_tanh_chain_" + count(n), what, 1, 0, n, 4 * f * double(n), false};
    case kind::softmax:
      return {"softmax_" + std::to_string(m) + "x" + std::to_string(n), what, m, 0, n, 2 * f * double(m * n), false};
    case kind::layer_norm:
      return {"layer_norm_" + std::to_string(m) + "x" + std::to_string(n), what, m, 0, n,
              f * (2.0 * double(m * n) + 2.0 * double(n)), false};
    case kind::matmul: {
      const std::string dims = m == k && k == n ? std::to_string(m)
                                                : std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
      return {"matmul_" + dims, what, m, k, n, 2.0 * double(m) * double(k) * double(n), true};
    }
    case kind::linear_gelu:
      return {"linear_gelu_" + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n), what, m, k, n,
              2.0 * double(m) * double(k) * double(n), true};
    case kind::mlp:
      return {"mlp_b" + std::to_string(m), what, m, 0, 0,
              2.0 * double(m) * double(mlp_in * mlp_hidden + mlp_hidden * mlp_hidden + mlp_hidden * mlp_out), true};
  }
  return {};
}

// The sizes of issue 4; --quick shrinks them to odd sizes that exercise the tails. The avx2
// suite (bench_avx2: this file built with AVX-512 disabled, KILN_BENCH_AVX2) has the two gelu
// chains of issue 27 only.
std::vector<spec> specs(bool quick) {
#ifdef KILN_BENCH_AVX2
  const i64 n = quick ? (i64(1) << 20) + 3 : i64(1) << 24;
  return {make_spec(kind::gelu_tanh_chain, 1, 0, n), make_spec(kind::gelu_chain, 1, 0, n)};
#endif
  if (quick)
    return {make_spec(kind::gelu_chain, 1, 0, (1 << 20) + 3), make_spec(kind::softmax, 509, 0, 1001),
            make_spec(kind::layer_norm, 1003, 0, 1021),      make_spec(kind::matmul, 97, 97, 97),
            make_spec(kind::matmul, 128, 128, 128),          make_spec(kind::matmul, 203, 203, 203),
            make_spec(kind::linear_gelu, 127, 255, 513),     make_spec(kind::mlp, 16, 0, 0),
            make_spec(kind::mlp, 63, 0, 0)};
  return {make_spec(kind::gelu_chain, 1, 0, 1 << 24),    make_spec(kind::softmax, 4096, 0, 4096),
          make_spec(kind::layer_norm, 8192, 0, 1024),    make_spec(kind::matmul, 512, 512, 512),
          make_spec(kind::matmul, 1024, 1024, 1024),     make_spec(kind::matmul, 2048, 2048, 2048),
          make_spec(kind::linear_gelu, 1024, 1024, 4096), make_spec(kind::mlp, 16, 0, 0),
          make_spec(kind::mlp, 256, 0, 0)};
}

std::unique_ptr<workload> make_workload(const spec& s, unsigned long long seed) {
  auto w = std::make_unique<workload>();
  w->name = s.name;
  w->what = s.what;
  w->m = s.m, w->k = s.k, w->n = s.n;
  int next = 0;
  auto add = [&](i64 numel, float lo, float hi) {
    w->in[next] = fbuf(numel);
    fill(w->in[next], seed * 1000003ULL + static_cast<unsigned long long>(next), lo, hi);
    ++next;
  };
  switch (s.what) {
    case kind::gelu_chain:  // z = x*a + b spans [-5, 5]: both branches of erf's approximation
    case kind::gelu_tanh_chain:
      add(s.n, -3, 3), add(s.n, 0.5f, 1.5f), add(s.n, -0.5f, 0.5f);
      w->out_numel = s.n;
      break;
    case kind::softmax:
      add(s.m * s.n, -8, 8);
      w->out_numel = s.m * s.n;
      break;
    case kind::layer_norm:  // rows off-centre, so the mean matters
      add(s.m * s.n, -1.5f, 2.5f), add(s.n, 0.5f, 1.5f), add(s.n, -0.5f, 0.5f);
      w->out_numel = s.m * s.n;
      break;
    case kind::matmul:
      add(s.m * s.k, -1, 1), add(s.k * s.n, -1, 1);
      w->out_numel = s.m * s.n;
      break;
    case kind::linear_gelu: {
      const float r = 1.0f / std::sqrt(static_cast<float>(s.k)) * 1.7f;  // pre-activations of order 1
      add(s.m * s.k, -1, 1), add(s.k * s.n, -r, r), add(s.n, -0.5f, 0.5f);
      w->out_numel = s.m * s.n;
      break;
    }
    case kind::mlp: {  // Glorot-uniform weights, inputs like pixels in [0, 1)
      auto glorot = [](i64 in, i64 out) { return std::sqrt(6.0f / static_cast<float>(in + out)); };
      add(s.m * mlp_in, 0, 1);
      add(mlp_in * mlp_hidden, -glorot(mlp_in, mlp_hidden), glorot(mlp_in, mlp_hidden)), add(mlp_hidden, -0.1f, 0.1f);
      add(mlp_hidden * mlp_hidden, -glorot(mlp_hidden, mlp_hidden), glorot(mlp_hidden, mlp_hidden));
      add(mlp_hidden, -0.1f, 0.1f);
      add(mlp_hidden * mlp_out, -glorot(mlp_hidden, mlp_out), glorot(mlp_hidden, mlp_out)), add(mlp_out, -0.1f, 0.1f);
      w->out_numel = s.m * mlp_out;
      break;
    }
  }
  return w;
}

// ---- what is set up: one workload at a time, and its runners ---------------------------------

options opt;
std::vector<spec> all_specs;
std::vector<const impl*> impls;

struct held {
  const impl* im = nullptr;
  std::unique_ptr<runner> r;
  double err = 0;  // of its warm-up run against the eager reference
};

struct current {
  int spec = -1;
  std::unique_ptr<workload> w;
  double eager_seconds = 0;   // the reference run of kiln eager, reported as its first sample
  bool eager_sample_used = false;
  std::vector<held> runners;  // the workload's runners, kept from round to round
  std::unique_ptr<stream_arrays> stream;
} cur;

workload& use_workload(int s) {
  if (cur.spec == s) return *cur.w;
  cur.runners.clear();  // runners point into the previous workload's buffers
  cur.w.reset();
  std::fprintf(stderr, "bench_cpu: %s: inputs, then the kiln eager reference ...", all_specs[s].name.c_str());
  cur.w = make_workload(all_specs[s], opt.seed + static_cast<unsigned long long>(s));
  cur.spec = s;
  auto eager = kiln_eager_impl.make(*cur.w, 1);
  const auto t0 = std::chrono::steady_clock::now();
  eager->run();
  cur.eager_seconds = seconds_since(t0);
  cur.eager_sample_used = false;
  std::fprintf(stderr, " %.3f s\n", cur.eager_seconds);
  cur.w->ref = fbuf(cur.w->out_numel);
  std::memcpy(cur.w->ref.data(), eager->out(), static_cast<std::size_t>(cur.w->out_numel) * sizeof(float));
  cur.runners.push_back({&kiln_eager_impl, std::move(eager), 0.0});
  return *cur.w;
}

held& use_runner(int s, const impl& im) {
  workload& w = use_workload(s);
  for (held& h : cur.runners)
    if (h.im == &im) return h;
  held h{&im, im.make(w, opt.threads), 0.0};
  h.r->run();  // warm-up (pages, thread pools, caches); its output is the one checked
  h.err = rel_error(h.r->out(), w.ref.data(), w.out_numel);
  cur.runners.push_back(std::move(h));
  return cur.runners.back();
}

// Issue 4's f32 tolerances against the eager backend: 1e-5 pointwise, 1e-4 reductions and GEMMs.
double tolerance(kind k) { return k == kind::gelu_chain || k == kind::gelu_tanh_chain ? 1e-5 : 1e-4; }

void set_counters(benchmark::State& st, const spec& s, const impl& im, double err) {
  st.counters["amount"] = s.amount;
  st.counters["rel_error"] = err;
  st.counters["tolerance"] = tolerance(s.what);
  st.counters["threads"] = im.threads(opt.threads);
  st.SetLabel(s.flops ? "GFLOP/s" : "GB/s");
}

// An implementation that throws is reported as an error of its row (report.py lists it) and
// the suite goes on; runner and workload are rebuilt for the next row.
void failed(benchmark::State& st, const std::exception& e) {
  cur.runners.clear(), cur.w.reset(), cur.spec = -1;
  std::fprintf(stderr, "bench_cpu: error: %s\n", e.what());
  st.SkipWithError(e.what());
}

stream_arrays& use_stream();
double stream_triad_nt_bytes();

void bench_impl(benchmark::State& st, int s, const impl* im) {
  held* h = nullptr;
  try {
    h = &use_runner(s, *im);
  } catch (const std::exception& e) {
    failed(st, e);
    return;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the machine settles (see the top)
  if (all_specs[s].flops) {
    for (auto _ : st) {
      h->r->run();
      benchmark::ClobberMemory();
    }
  } else {
    // memory-bound: runs of the workload (timed: the result) alternate with runs of stream
    // triad with non-temporal stores, about as much time each, so that the bandwidth the
    // workload had is measured alongside it (limit_rate; see register_round_limit)
    stream_arrays& sa = use_stream();
    double owed = 0, limit_seconds = 0;
    long limit_runs = 0;
    for (auto _ : st) {
      auto t0 = std::chrono::steady_clock::now();
      h->r->run();
      benchmark::ClobberMemory();
      const double t = seconds_since(t0);
      st.SetIterationTime(t);
      owed += t;
      while (owed > 0) {
        t0 = std::chrono::steady_clock::now();
        stream_triad_nt(sa, opt.threads);
        benchmark::ClobberMemory();
        const double l = seconds_since(t0);
        limit_seconds += l, owed -= l, ++limit_runs;
      }
    }
    st.counters["limit_rate"] = stream_triad_nt_bytes() * static_cast<double>(limit_runs) / limit_seconds / 1e9;
  }
  set_counters(st, all_specs[s], *im, h->err);
}

// kiln eager is slow (seconds a run): one run per repetition, timed by hand, and its first
// sample is the reference run that use_workload made anyway.
void bench_eager(benchmark::State& st, int s) {
  runner* r = nullptr;
  try {
    r = use_runner(s, kiln_eager_impl).r.get();
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
  set_counters(st, all_specs[s], kiln_eager_impl, 0.0);
}

void bench_round_limit(benchmark::State& st, int s);  // below, with the other limits

// ---- limits ---------------------------------------------------------------------------------

// Each of the three arrays: 512 MiB, well beyond the last-level caches of the machines here
// (lscpu: 32 MiB on the AMD EPYC VM, 260 MiB on the Xeon one).
i64 stream_floats() {
  return opt.stream_mib > 0 ? opt.stream_mib * (i64(1) << 18) : opt.quick ? i64(1) << 24 : i64(1) << 27;
}

stream_arrays& use_stream() {
  if (!cur.stream) cur.stream = std::make_unique<stream_arrays>(stream_floats(), opt.threads);
  return *cur.stream;
}
double stream_triad_nt_bytes() { return static_cast<double>(stream_floats()) * sizeof(float) * 3; }

enum class stream_kind { copy, triad, triad_nt };
void bench_stream(benchmark::State& st, stream_kind k) {
  stream_arrays& sa = use_stream();
  for (auto _ : st) {
    if (k == stream_kind::triad) stream_triad(sa, opt.threads);
    else if (k == stream_kind::triad_nt) stream_triad_nt(sa, opt.threads);
    else stream_copy(sa, opt.threads);
    benchmark::ClobberMemory();
  }
  st.counters["amount"] = static_cast<double>(stream_floats()) * sizeof(float) * (k == stream_kind::copy ? 2 : 3);
  st.counters["threads"] = opt.threads;
  st.SetLabel("GB/s");
}

// The limit each row's fraction divides by, measured alongside the row:
// - memory-bound workloads: stream triad with non-temporal stores (the fastest stream kind
//   here), run in turns with the workload inside each of its measurements (bench_impl); a
//   row's fraction is the median over its rounds of its rate over that measurement's stream
//   rate. The bandwidth of this VM drifts by a third within seconds: limits measured before
//   and after a workload's rounds put the same code anywhere from 54% to 98% of stream, and
//   even a limit measured in the rounds, 63% to 89% from one run to the next.
// - GEMMs: the FMA loop, measured in the workload's rounds like one more implementation
//   ("<workload>/limit:fma/round:<r>"); the report divides a row's median rate by its median.
//   FMA peak drifts little, and a stream run between GEMM calls would leave the peers'
//   spinning threads (OpenBLAS) to slow it.
void bench_round_limit(benchmark::State& st, int) {
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // as bench_impl
  double flops = 0;
  for (auto _ : st) flops = fma_loop(opt.threads);
  st.counters["amount"] = flops;
  st.counters["threads"] = opt.threads;
  st.SetLabel("GFLOP/s");
}

// The limits of every kind are also measured at the start and at the end, for the report's
// context (the machine's best and its spread).
void register_limits(const std::string& when) {
  const double min_time = std::min(opt.min_time, 0.1);
  for (const auto& [name, k] : {std::pair{"copy", stream_kind::copy}, std::pair{"triad", stream_kind::triad},
                                std::pair{"triad-nt", stream_kind::triad_nt}})
    benchmark::RegisterBenchmark(("limit_stream/" + std::string(name) + "@" + when).c_str(), bench_stream, k)
        ->UseRealTime()->Unit(benchmark::kMillisecond)->Repetitions(opt.reps)->MinTime(min_time);
  register_fma_limit(when, opt);
}

}  // namespace
}  // namespace kb

int main(int argc, char** argv) {
  using namespace kb;
  std::vector<char*> original(argv, argv + argc + 1);  // for the restart, before parse() edits argv
  if (!parse(argc, argv, opt, "bench_cpu")) return 0;
  ensure_env(original.data(), opt.threads, "bench_cpu");
  settle(opt);

  impls = {&kiln_eager_impl, &hand_fused_impl};
#ifdef KILN_BENCH_HAVE_EIGEN
  impls.push_back(&eigen_impl);
#endif
#ifdef KILN_BENCH_HAVE_XTENSOR
  impls.push_back(&xtensor_impl);
#endif
#ifdef KILN_BENCH_HAVE_TORCH
  impls.push_back(&libtorch_impl);
#endif
#ifndef KILN_BENCH_AVX2  // (the avx2 suite has no GEMM)
  impls.push_back(&openblas_impl);
#endif
  impls.push_back(&kiln_cpu_impl);

  all_specs = specs(opt.quick);
  std::string skipped;  // "workload/impl: why" lines, for the report
  register_limits("start");
  for (int s = 0; s < static_cast<int>(all_specs.size()); ++s) {
    const spec& sp = all_specs[s];
    std::vector<const impl*> measured;
    for (const impl* im : impls) {
      const std::string name = sp.name + "/" + im->name;
      if (const char* why = im->why_not(sp.what)) {
        skipped += name + ": " + why + "\n";
        continue;
      }
      if (im == &kiln_eager_impl) {
        // one run per repetition; a single one where a run takes many seconds (large GEMMs)
        const int reps = sp.flops && sp.amount > 2e9 ? 1 : std::min(opt.reps, 3);
        benchmark::RegisterBenchmark(name.c_str(), bench_eager, s)
            ->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(1)->Repetitions(reps);
      } else {
        measured.push_back(im);
      }
    }
    // rounds: one measurement of each implementation, and for a GEMM of the FMA limit
    // (nullptr), per round, the order rotated
    if (sp.flops) measured.push_back(nullptr);
    const auto count = static_cast<int>(measured.size());
    for (int round = 0; round < opt.reps; ++round)
      for (int q = 0; q < count; ++q) {
        const impl* im = measured[static_cast<std::size_t>((q + round) % count)];
        const std::string name = sp.name + "/" + (im ? im->name : "limit:fma") + "/round:" + std::to_string(round);
        auto* b = im ? benchmark::RegisterBenchmark(name.c_str(), bench_impl, s, im)
                     : benchmark::RegisterBenchmark(name.c_str(), bench_round_limit, s);
        if (sp.flops) b->UseRealTime();
        else b->UseManualTime();
        b->Unit(benchmark::kMillisecond)->Repetitions(1)->MinTime(opt.min_time);
      }
  }
  register_limits("end");

#ifdef KILN_BENCH_AVX2
  add_common_context("avx2", opt);
  benchmark::AddCustomContext("build", "AVX-512 disabled at compile time (-march=native -mno-avx512f): every row's "
                                       "vector code is AVX2 with FMA; the CPU (family " + cpuinfo_field("cpu family") +
                                       ", model " + cpuinfo_field("model\t") + ") " +
                                       (has_flag(cpuinfo_field("flags"), "avx512f") ? "has" : "has no") + " AVX-512");
#else
  add_common_context("cpu", opt);
#endif
  benchmark::AddCustomContext("stream_array_bytes", std::to_string(stream_floats() * 4));
  benchmark::AddCustomContext("skipped", skipped);
  std::fprintf(stderr, "bench_cpu: %d threads, OpenBLAS core %s, xsimd %s, seed %llu%s\n", opt.threads,
               openblas_corename(), simd_arch(), opt.seed, opt.quick ? ", quick" : "");
  std::fprintf(stderr, "bench_cpu: %d workload/impl pairs not measured (listed in the report)\n",
               static_cast<int>(std::count(skipped.begin(), skipped.end(), '\n')));

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
