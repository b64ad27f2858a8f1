// bench/bench_main.hpp: what the mains of the benchmark suites (bench_cpu.cpp, bench_autodiff.cpp)
// share: their options, random inputs, the error measure, the environment the peers run best
// in, the FMA-peak limit and the context every report prints. Header-only (inline), included by
// one TU per binary.
#pragma once

#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu_common.hpp"

namespace kb {

struct options {
  bool quick = false;
  int threads = 2;
  int reps = 5;
  double min_time = 0.3;
  unsigned long long seed = 0;
  i64 stream_mib = 0;  // size of each stream array; 0: 512 MiB (64 MiB with --quick)
};

/// splitmix64: fast, and good enough to fill buffers with uniform floats in [lo, hi).
inline void fill(float* p, i64 n, unsigned long long seed, float lo, float hi) {
  unsigned long long s = seed;
  for (i64 i = 0; i < n; ++i) {
    unsigned long long z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    p[i] = lo + (hi - lo) * static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
  }
}
inline void fill(fbuf& b, unsigned long long seed, float lo, float hi) { fill(b.data(), b.size(), seed, lo, hi); }

/// max_i |y_i - ref_i| / max_i |ref_i|: the error relative to the result's scale (an
/// elementwise relative error is meaningless where ref_i is near zero, as gelu of negatives
/// and entries of a matmul are). Not finite (NaN, inf) is reported as 1e30.
inline double rel_error(const float* y, const float* ref, i64 n) {
  double diff = 0, scale = 0;
  for (i64 i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(y[i]) - static_cast<double>(ref[i]));
    if (!(d <= diff)) diff = std::isnan(d) ? INFINITY : d;
    scale = std::max(scale, std::fabs(static_cast<double>(ref[i])));
  }
  const double e = diff / std::max(scale, 1e-30);
  return std::isfinite(e) ? e : 1e30;
}

/// ||a - b|| / ||b|| (L2), for whole parameter tensors; a size mismatch or not finite: 1e30.
inline double l2_error(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 1e30;
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    diff += d * d;
    norm += static_cast<double>(b[i]) * static_cast<double>(b[i]);
  }
  const double e = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
  return std::isfinite(e) ? e : 1e30;
}

/// Writes bytes to path (the hand-offs to bench/torch_rows.py); throws if it cannot.
inline void write_raw(const std::string& path, const void* p, std::size_t bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  bool ok = f && std::fwrite(p, 1, bytes, f) == bytes;
  if (f && std::fclose(f) != 0) ok = false;
  if (!ok) throw std::runtime_error("cannot write " + path);
}

/// A training suite's row (train, transformer): times step(k), which trains on batch k and
/// returns its loss, cycling `next` through the workload's batches, and sets the counters every
/// such row reports (samples/s: report.py divides `amount` by the seconds when rate_scale is 1).
template <class Step>
void time_training_steps(benchmark::State& st, Step&& step, std::int64_t& next, std::int64_t batches,
                         std::int64_t batch, int threads, double tolerance, double first_loss) {
  double loss = 0;
  for (auto _ : st) {
    loss = step(next);
    next = next + 1 < batches ? next + 1 : 0;
    benchmark::DoNotOptimize(loss);
  }
  st.counters["amount"] = static_cast<double>(batch);  // samples per step
  st.counters["rate_scale"] = 1;
  st.counters["threads"] = threads;
  st.counters["tolerance"] = tolerance;
  st.counters["loss_first_step"] = first_loss;
  st.counters["loss_last"] = loss;
  st.SetLabel("samples/s");
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline std::string cpuinfo_field(const char* key) {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) {
      const auto colon = line.find(':');
      return colon == std::string::npos ? "" : line.substr(colon + 2);
    }
  return "";
}

inline bool has_flag(const std::string& flags, const char* f) {
  std::istringstream in(flags);
  std::string w;
  while (in >> w)
    if (w == f) return true;
  return false;
}

/// The environment the peers run best in, for every suite's binary (bench/run.sh leaves it to
/// them). OpenBLAS and libgomp read it when they are loaded, before main, so when a variable
/// must change it is set and the program (`prog`, for messages) started again:
/// - OPENBLAS_CORETYPE: the CPU's kernels, SkylakeX with AVX-512, Haswell with AVX2, whatever
///   the environment says (KILN_BENCH_OPENBLAS_CORETYPE chooses another). Debian's OpenBLAS
///   0.3.21 falls back to SSE3 kernels on these Xeons, and some machines here export
///   OPENBLAS_CORETYPE=Haswell on AVX-512 CPUs, which halves its sgemm (AMD Zen 5: matmul
///   1024^3 8.5 ms against 4.3 with SkylakeX);
/// - OPENBLAS_NUM_THREADS, KILN_NUM_THREADS: `threads`, the thread count of every row;
/// - OMP_WAIT_POLICY=passive unless set: libgomp's default spins a worker for a while after
///   each parallel region; when a GEMM on OpenBLAS's own threads follows (libtorch's addmm then
///   gelu_, the openblas and xtensor rows' epilogues) the spinning thread takes one of the two
///   cores, and those rows ran 10-15x slower (measured: mlp_b16 openblas 24 ms, 2.4 passive);
/// - ATEN_CPU_CAPABILITY=avx512 unless set: libtorch 1.13 picks its AVX2 kernels on AVX-512
///   machines.
inline void ensure_env(char** argv, int threads, const char* prog) {
  if (std::getenv("KILN_BENCH_RESTARTED")) return;
  bool restart = false;
  auto set = [&](const char* var, const std::string& value, bool replace) {
    const char* now = std::getenv(var);
    if (value.empty() || (now && (!replace || value == now))) return;
    if (now) std::fprintf(stderr, "%s: %s=%s from the environment replaced by %s\n", prog, var, now, value.c_str());
    else std::fprintf(stderr, "%s: %s=%s\n", prog, var, value.c_str());
    setenv(var, value.c_str(), 1);
    restart = true;
  };
  const std::string flags = cpuinfo_field("flags");
  const char* chosen = std::getenv("KILN_BENCH_OPENBLAS_CORETYPE");
  set("OPENBLAS_CORETYPE", chosen ? chosen : has_flag(flags, "avx512f") ? "SkylakeX" : has_flag(flags, "avx2") ? "Haswell" : "",
      true);
  set("OPENBLAS_NUM_THREADS", std::to_string(threads), true);
  set("KILN_NUM_THREADS", std::to_string(threads), true);
  set("OMP_WAIT_POLICY", "passive", false);
  const bool avx512 = has_flag(flags, "avx512f") && has_flag(flags, "avx512bw") && has_flag(flags, "avx512vl") &&
                      has_flag(flags, "avx512dq");
  set("ATEN_CPU_CAPABILITY", avx512 ? "avx512" : "", false);
  if (!restart) return;
  setenv("KILN_BENCH_RESTARTED", "1", 1);
  std::fprintf(stderr, "%s: starting again with that environment\n", prog);
  execv("/proc/self/exe", argv);
  std::perror("execv");  // carry on as it is
}

/// Takes the suite's own flags out of argv (the rest is Google Benchmark's); false: --help.
inline bool parse(int& argc, char** argv, options& opt, const char* prog) {
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
      std::printf("%s [--quick] [--threads=N] [--reps=N] [--min-time=S] [--seed=N] [--stream-mib=N]\n"
                  "          [--benchmark_...]\n", prog);
      return false;
    } else argv[out++] = argv[i];
  }
  argc = out;
  return true;
}

/// After parse and ensure_env: --quick's repetitions and times, and a seed from the clock
/// when none was given.
inline void settle(options& opt) {
  if (opt.quick) opt.reps = std::min(opt.reps, 2), opt.min_time = std::min(opt.min_time, 0.05);
  if (opt.seed == 0)
    opt.seed = static_cast<unsigned long long>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
               static_cast<unsigned long long>(getpid());
}

/// The register-only FMA loop (cpu_hand.cpp): "limit_flops/fma@<when>", the peak that
/// GFLOP/s rows are divided by.
inline void register_fma_limit(const std::string& when, const options& opt) {
  const int threads = opt.threads;
  benchmark::RegisterBenchmark(("limit_flops/fma@" + when).c_str(),
                               [threads](benchmark::State& st) {
                                 double flops = 0;
                                 for (auto _ : st) flops = fma_loop(threads);
                                 st.counters["amount"] = flops;
                                 st.counters["threads"] = threads;
                                 st.SetLabel("GFLOP/s");
                               })
      ->UseRealTime()->Unit(benchmark::kMillisecond)->Repetitions(opt.reps)->MinTime(std::min(opt.min_time, 0.1));
}

/// The context every suite's report prints (report.py reads these keys); the suite adds its own.
inline void add_common_context(const char* suite, const options& opt) {
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  benchmark::AddCustomContext("suite", suite);
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
  std::ifstream f("/proc/loadavg");
  std::string load;
  std::getline(f, load);
  benchmark::AddCustomContext("loadavg_at_start", load);
}

}  // namespace kb
