// bench/bench_cpu.cpp: the CPU benchmark suite. Every implementation of every workload runs in
// one process, on the same input buffers (fresh random values each run, seed printed), with the
// same thread count, between two measurements of the machine's limits (stream bandwidth and
// FMA peak). Each output is compared with kiln's eager backend on the same inputs.
//
//   bench_cpu [--quick] [--threads=N] [--reps=N] [--min-time=S] [--seed=N] [--stream-mib=N]
//             [benchmark flags]
//
// Benchmarks are named "<workload>/<impl>" and carry the counters bench/report.py reads:
// amount (bytes or flops one run must move or do), rel_error, tolerance, threads; the label is
// the rate unit. bench/run.sh builds this, runs it and writes bench/results/cpu.{json,md,png}.
//
// Debian's OpenBLAS 0.3.21 picks SSE3 kernels on these Xeons unless OPENBLAS_CORETYPE is set
// when it loads, which is before main: when it is unset, main sets it from /proc/cpuinfo
// (SkylakeX with AVX-512, Haswell with AVX2), with the other variables of ensure_env, and
// starts the program again, so a bare `bench_cpu` measures the same thing as bench/run.sh.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "cpu_common.hpp"

namespace kb {
namespace {

struct options {
  bool quick = false;
  int threads = 2;
  int reps = 5;
  double min_time = 0.3;
  unsigned long long seed = 0;
  i64 stream_mib = 0;  // size of each stream array; 0: 512 MiB (64 MiB with --quick)
};

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

// The sizes of issue 4; --quick shrinks them to odd sizes that exercise the tails.
std::vector<spec> specs(bool quick) {
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

// splitmix64: fast, and good enough to fill buffers with uniform floats in [lo, hi).
void fill(fbuf& b, unsigned long long seed, float lo, float hi) {
  unsigned long long s = seed;
  for (i64 i = 0; i < b.size(); ++i) {
    unsigned long long z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    b.data()[i] = lo + (hi - lo) * static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
  }
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

/// max_i |y_i - ref_i| / max_i |ref_i|: the error relative to the result's scale (an
/// elementwise relative error is meaningless where ref_i is near zero, as gelu of negatives
/// and entries of a matmul are). Not finite (NaN, inf) is reported as 1e30.
double rel_error(const float* y, const float* ref, i64 n) {
  double diff = 0, scale = 0;
  for (i64 i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(y[i]) - static_cast<double>(ref[i]));
    if (!(d <= diff)) diff = std::isnan(d) ? INFINITY : d;
    scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
  }
  const double e = diff / std::max(scale, 1e-30);
  return std::isfinite(e) ? e : 1e30;
}

// ---- what is set up, one workload and one runner at a time ----------------------------------

options opt;
std::vector<spec> all_specs;
std::vector<const impl*> impls;

struct current {
  int spec = -1;
  std::unique_ptr<workload> w;
  double eager_seconds = 0;   // the reference run of kiln eager, reported as its first sample
  bool eager_sample_used = false;
  const impl* im = nullptr;
  std::unique_ptr<runner> r;
  double err = 0;
  std::unique_ptr<stream_arrays> stream;
} cur;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

workload& use_workload(int s) {
  if (cur.spec == s) return *cur.w;
  cur.r.reset();  // runners point into the previous workload's buffers
  cur.im = nullptr;
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
  cur.r = std::move(eager);
  cur.im = &kiln_eager_impl;
  cur.err = 0;
  return *cur.w;
}

runner& use_runner(int s, const impl& im) {
  workload& w = use_workload(s);
  if (cur.im == &im) return *cur.r;
  cur.r.reset();
  cur.r = im.make(w, opt.threads);
  cur.im = &im;
  cur.r->run();  // warm-up (pages, thread pools, caches); its output is the one checked
  cur.err = rel_error(cur.r->out(), w.ref.data(), w.out_numel);
  return *cur.r;
}

// Issue 4's f32 tolerances against the eager backend: 1e-5 pointwise, 1e-4 reductions and GEMMs.
double tolerance(kind k) { return k == kind::gelu_chain ? 1e-5 : 1e-4; }

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
  cur.r.reset(), cur.im = nullptr, cur.w.reset(), cur.spec = -1;
  std::fprintf(stderr, "bench_cpu: error: %s\n", e.what());
  st.SkipWithError(e.what());
}

void bench_impl(benchmark::State& st, int s, const impl* im) {
  runner* r = nullptr;
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

// kiln eager is slow (seconds a run): one run per repetition, timed by hand, and its first
// sample is the reference run that use_workload made anyway.
void bench_eager(benchmark::State& st, int s) {
  runner* r = nullptr;
  try {
    r = &use_runner(s, kiln_eager_impl);
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

// ---- limits ---------------------------------------------------------------------------------

// Each of the three arrays: 512 MiB, twice the 260 MiB L3 that lscpu reports here.
i64 stream_floats() {
  return opt.stream_mib > 0 ? opt.stream_mib * (i64(1) << 18) : opt.quick ? i64(1) << 24 : i64(1) << 27;
}

void bench_stream(benchmark::State& st, bool triad) {
  if (!cur.stream) cur.stream = std::make_unique<stream_arrays>(stream_floats(), opt.threads);
  for (auto _ : st) {
    if (triad) stream_triad(*cur.stream, opt.threads);
    else stream_copy(*cur.stream, opt.threads);
    benchmark::ClobberMemory();
  }
  st.counters["amount"] = static_cast<double>(stream_floats()) * sizeof(float) * (triad ? 3 : 2);
  st.counters["threads"] = opt.threads;
  st.SetLabel("GB/s");
}

void bench_fma(benchmark::State& st) {
  double flops = 0;
  for (auto _ : st) flops = fma_loop(opt.threads);
  st.counters["amount"] = flops;
  st.counters["threads"] = opt.threads;
  st.SetLabel("GFLOP/s");
}

// The limits are measured at the start, after each workload and at the end, and the report
// takes the best: on a machine shared with other work, one measurement can fall in a busy
// moment and make every fraction of it too high.
void register_limits(const std::string& when) {
  const double min_time = std::min(opt.min_time, 0.1);
  benchmark::RegisterBenchmark(("limit_stream/copy@" + when).c_str(), bench_stream, false)
      ->UseRealTime()->Unit(benchmark::kMillisecond)->Repetitions(opt.reps)->MinTime(min_time);
  benchmark::RegisterBenchmark(("limit_stream/triad@" + when).c_str(), bench_stream, true)
      ->UseRealTime()->Unit(benchmark::kMillisecond)->Repetitions(opt.reps)->MinTime(min_time);
  benchmark::RegisterBenchmark(("limit_flops/fma@" + when).c_str(), bench_fma)
      ->UseRealTime()->Unit(benchmark::kMillisecond)->Repetitions(opt.reps)->MinTime(min_time);
}

// ---- environment ----------------------------------------------------------------------------

std::string cpuinfo_field(const char* key) {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? "" : line.substr(colon + 2);
    }
  return "";
}

bool has_flag(const std::string& flags, const char* f) {
  std::istringstream in(flags);
  std::string w;
  while (in >> w)
    if (w == f) return true;
  return false;
}

// The environment the peers run best in. OpenBLAS and libgomp read it when they are loaded,
// before main, so a missing variable is set and the program started again:
// - OPENBLAS_CORETYPE: Debian's OpenBLAS 0.3.21 falls back to SSE3 kernels on these Xeons;
// - OPENBLAS_NUM_THREADS, KILN_NUM_THREADS: the thread count of the OpenBLAS and kiln rows;
// - OMP_WAIT_POLICY=passive: libgomp's default spins a worker for a while after each parallel
//   region; when a GEMM on OpenBLAS's own threads follows (libtorch's addmm then gelu_, the
//   openblas and xtensor rows' epilogues) the spinning thread takes one of the two cores, and
//   those rows ran 10-15x slower (measured: mlp_b16 openblas 24 ms, 2.4 ms passive);
// - ATEN_CPU_CAPABILITY=avx512: libtorch 1.13 picks its AVX2 kernels on AVX-512 machines.
void ensure_env(char** argv) {
  if (std::getenv("KILN_BENCH_RESTARTED")) return;
  bool restart = false;
  auto set = [&](const char* var, const std::string& value) {
    if (std::getenv(var) || value.empty()) return;
    setenv(var, value.c_str(), 1);
    std::fprintf(stderr, "bench_cpu: %s=%s\n", var, value.c_str());
    restart = true;
  };
  const std::string flags = cpuinfo_field("flags");
  set("OPENBLAS_CORETYPE", has_flag(flags, "avx512f") ? "SkylakeX" : has_flag(flags, "avx2") ? "Haswell" : "");
  set("OPENBLAS_NUM_THREADS", std::to_string(opt.threads));
  set("KILN_NUM_THREADS", std::to_string(opt.threads));
  set("OMP_WAIT_POLICY", "passive");
  const bool avx512 = has_flag(flags, "avx512f") && has_flag(flags, "avx512bw") && has_flag(flags, "avx512vl") &&
                      has_flag(flags, "avx512dq");
  set("ATEN_CPU_CAPABILITY", avx512 ? "avx512" : "");
  if (!restart) return;
  setenv("KILN_BENCH_RESTARTED", "1", 1);
  std::fprintf(stderr, "bench_cpu: starting again with that environment\n");
  execv("/proc/self/exe", argv);
  std::perror("bench_cpu: execv");  // carry on as it is
}

bool parse(int& argc, char** argv) {
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* key) -> const char* {
      const std::size_t n = std::strlen(key);
      return a.compare(0, n, key) == 0 ? argv[i] + n : nullptr;
    };
    if (a == "--quick") opt.quick = true;
    else if (const char* v = value("--threads=")) opt.threads = std::max(1, std::atoi(v));
    else if (const char* v = value("--reps=")) opt.reps = std::max(1, std::atoi(v));
    else if (const char* v = value("--min-time=")) opt.min_time = std::atof(v);
    else if (const char* v = value("--seed=")) opt.seed = std::strtoull(v, nullptr, 10);
    else if (const char* v = value("--stream-mib=")) opt.stream_mib = std::max(1, std::atoi(v));
    else if (a == "--help" || a == "-h") {
      std::printf("bench_cpu [--quick] [--threads=N] [--reps=N] [--min-time=S] [--seed=N] [--stream-mib=N]\n"
                  "          [--benchmark_...]\n");
      return false;
    } else argv[out++] = argv[i];
  }
  argc = out;
  return true;
}

}  // namespace
}  // namespace kb

int main(int argc, char** argv) {
  using namespace kb;
  std::vector<char*> original(argv, argv + argc + 1);  // for the restart, before parse() edits argv
  if (!parse(argc, argv)) return 0;
  ensure_env(original.data());
  if (opt.quick) opt.reps = std::min(opt.reps, 2), opt.min_time = std::min(opt.min_time, 0.05);
  if (opt.seed == 0)
    opt.seed = static_cast<unsigned long long>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
               static_cast<unsigned long long>(getpid());

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
  impls.push_back(&openblas_impl);
  impls.push_back(&kiln_cpu_impl);

  all_specs = specs(opt.quick);
  std::string skipped;  // "workload/impl: why" lines, for the report
  register_limits("start");
  for (int s = 0; s < static_cast<int>(all_specs.size()); ++s) {
    const spec& sp = all_specs[s];
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
        benchmark::RegisterBenchmark(name.c_str(), bench_impl, s, im)
            ->UseRealTime()->Unit(benchmark::kMillisecond)->Repetitions(opt.reps)->MinTime(opt.min_time);
      }
    }
    register_limits(s + 1 < static_cast<int>(all_specs.size()) ? "after_" + sp.name : "end");
  }

  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  benchmark::AddCustomContext("suite", "cpu");
  benchmark::AddCustomContext("quick", opt.quick ? "true" : "false");
  benchmark::AddCustomContext("threads", std::to_string(opt.threads));
  benchmark::AddCustomContext("seed", std::to_string(opt.seed));
  benchmark::AddCustomContext("cpu_model", cpuinfo_field("model name"));
  benchmark::AddCustomContext("simd", simd_arch());
  benchmark::AddCustomContext("openblas_coretype", openblas_corename());
  benchmark::AddCustomContext("openblas_coretype_env", coretype ? coretype : "(unset)");
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  benchmark::AddCustomContext("omp_wait_policy", wait ? wait : "(unset)");
#ifdef KILN_BENCH_HAVE_TORCH
  benchmark::AddCustomContext("libtorch_cpu_capability", torch_cpu_capability());
#endif
  benchmark::AddCustomContext("openblas_config", openblas_config());
  benchmark::AddCustomContext("stream_array_bytes", std::to_string(stream_floats() * 4));
  benchmark::AddCustomContext("skipped", skipped);
  {
    std::ifstream f("/proc/loadavg");
    std::string load;
    std::getline(f, load);
    benchmark::AddCustomContext("loadavg_at_start", load);
  }
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
