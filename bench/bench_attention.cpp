// bench/bench_attention.cpp: the attention benchmark suite. Scaled dot-product attention, f32,
// q, k, v [4, 8, T, 64] (attention_common.hpp), causal and not, at T = 1024 and 4096 (--quick:
// 256 and 200, a length no tile divides), the forward alone ("fwd_*") and forward and backward
// ("fwd_bwd_*": y and the gradients of sum(y * r) with respect to q, k and v). Rows: kiln (the
// fused primitive), kiln-unfused (the same math written as matmul, softmax, matmul), libtorch
// (the same, eager, with autograd) and libtorch-sdpa (libtorch's attention op; in 1.13 the
// private at::_scaled_dot_product_attention, the same math composite on the CPU:
// attention_torch.cpp).
// Every implementation runs in one process on the same input buffers (fresh random values each
// run, seed printed), with the same thread count, between measurements of the FMA peak.
//
// Flops ("amount"), FlashAttention's convention: the forward is its two matmuls, 4 B H T^2 D,
// halved when causal (half the scores are needed); the backward 2.5 x the forward (five
// matmuls: the scores again, dv, dp, dq, dk), so forward and backward count 3.5 x the forward.
// The softmax's exponentials and the masking are not counted.
//
// rel_error: every output (y, dq, dk, dv) against a reference in double precision (plain loops
// over each head from the same f32 inputs, accumulating in double), max|y - ref| / max|ref| over
// every element; the largest of the outputs' (each is also in the raw JSON, rel_error_<output>).
// The reference is computed once per length and mask (the forward's workload and the forward
// and backward's share their inputs): about 2 s at T = 1024, and 16 times that at 4096.
//
//   bench_attention [--quick] [--threads=N] [--reps=N] [--min-time=S] [--seed=N] [benchmark flags]
//
// Benchmarks follow bench/report.py's conventions ("<workload>/<impl>", counters amount,
// rel_error, tolerance, threads, the rate unit as label); bench/run.sh builds this, runs it and
// writes bench/results/attention.{json,md,png}. The environment is the cpu suite's (ensure_env
// in bench_main.hpp).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "attention_common.hpp"
#include "bench_main.hpp"

namespace kb {
namespace {

struct spec {
  std::string name;
  i64 t;
  bool causal, backward;
  double amount;
};

spec make_spec(i64 t, bool causal, bool backward) {
  const double forward = 4.0 * double(at_batch * at_heads * at_dim) * double(t) * double(t) / (causal ? 2 : 1);
  const std::string name =
      std::string(backward ? "fwd_bwd" : "fwd") + (causal ? "_causal" : "") + "_t" + std::to_string(t);
  return {name, t, causal, backward, backward ? 3.5 * forward : forward};
}

// Each length and mask: the forward, then forward and backward on the same inputs (one reference).
std::vector<spec> specs(bool quick) {
  std::vector<spec> s;
  for (const i64 t : quick ? std::vector<i64>{256, 200} : std::vector<i64>{1024, 4096})
    for (const bool causal : {false, true})
      for (const bool backward : {false, true}) s.push_back(make_spec(t, causal, backward));
  return s;
}

// ---- the reference ----------------------------------------------------------------------------

/// One head in double: q, k, v, r [T, D] (f32, row-major); y = softmax(q k^T scale [causal]) v,
/// and the gradients of sum(y * r): with P the softmax, dP = r v^T, dS = P (dP - rowsum(r * y)),
/// dv = P^T r, dq = scale dS k, dk = scale dS^T q. The loops run along contiguous rows (no
/// reductions in the innermost loop) so that they vectorise without reassociating.
void reference_head(const float* q, const float* k, const float* v, const float* r, i64 t, bool causal, double* y,
                    double* dq, double* dk, double* dv) {
  constexpr i64 d = at_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> kt(static_cast<std::size_t>(d * t)), vt(static_cast<std::size_t>(d * t));  // [D, T]
  std::vector<double> kd(static_cast<std::size_t>(t * d));
  for (i64 j = 0; j < t; ++j)
    for (i64 c = 0; c < d; ++c) {
      kt[static_cast<std::size_t>(c * t + j)] = k[j * d + c];
      vt[static_cast<std::size_t>(c * t + j)] = v[j * d + c];
      kd[static_cast<std::size_t>(j * d + c)] = k[j * d + c];
    }
  std::fill(dk, dk + t * d, 0.0);
  std::fill(dv, dv + t * d, 0.0);
  std::vector<double> p(static_cast<std::size_t>(t)), dp(static_cast<std::size_t>(t));
  for (i64 i = 0; i < t; ++i) {
    const i64 n = causal ? i + 1 : t;  // keys this query sees
    const float* qi = q + i * d;
    const float* ri = r + i * d;
    std::fill(p.begin(), p.begin() + n, 0.0);
    std::fill(dp.begin(), dp.begin() + n, 0.0);
    for (i64 c = 0; c < d; ++c) {
      const double qc = qi[c], rc = ri[c];
      const double* kc = kt.data() + c * t;
      const double* vc = vt.data() + c * t;
      for (i64 j = 0; j < n; ++j) p[j] += qc * kc[j], dp[j] += rc * vc[j];
    }
    double m = -INFINITY, l = 0;
    for (i64 j = 0; j < n; ++j) m = std::max(m, p[j] *= scale);
    for (i64 j = 0; j < n; ++j) l += (p[j] = std::exp(p[j] - m));
    for (i64 j = 0; j < n; ++j) p[j] /= l;
    double* yi = y + i * d;
    std::fill(yi, yi + d, 0.0);
    for (i64 j = 0; j < n; ++j)
      for (i64 c = 0; c < d; ++c) yi[c] += p[j] * v[j * d + c];
    double di = 0;
    for (i64 c = 0; c < d; ++c) di += ri[c] * yi[c];
    double* dqi = dq + i * d;
    std::fill(dqi, dqi + d, 0.0);
    for (i64 j = 0; j < n; ++j) {
      const double ds = p[j] * (dp[j] - di) * scale;
      const double* kj = kd.data() + j * d;
      double* dkj = dk + j * d;
      double* dvj = dv + j * d;
      for (i64 c = 0; c < d; ++c) dqi[c] += ds * kj[c], dkj[c] += ds * qi[c], dvj[c] += p[j] * ri[c];
    }
  }
}

/// max_i |y_i - ref_i| / max_i |ref_i|: rel_error (bench_main.hpp) against a double reference.
double rel_error(const float* y, const std::vector<double>& ref) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = std::fabs(static_cast<double>(y[i]) - ref[i]);
    if (!(d <= diff)) diff = std::isnan(d) ? INFINITY : d;
    scale = std::max(scale, std::fabs(ref[i]));
  }
  const double e = diff / std::max(scale, 1e-30);
  return std::isfinite(e) ? e : 1e30;
}

// ---- what is set up, one workload and one runner at a time -----------------------------------

options opt;
std::vector<spec> all_specs;
std::vector<const at_impl*> impls;

struct current {
  int spec = -1;
  std::unique_ptr<at_workload> w;
  // the reference of the inputs' length and mask (shared by fwd and fwd_bwd): all four outputs
  i64 ref_t = -1;
  bool ref_causal = false;
  std::array<std::vector<double>, at_max_outputs> ref;
  const at_impl* im = nullptr;
  std::unique_ptr<at_runner> r;
  std::array<double, at_max_outputs> err{};
} cur;

// Inputs: q and k uniform in [-2, 2) (scores with a standard deviation of about 1.3, a softmax
// far from uniform), v and r in [-1, 1). The same for the forward and for forward and backward.
std::unique_ptr<at_workload> make_workload(const spec& s) {
  auto w = std::make_unique<at_workload>();
  w->name = s.name, w->t = s.t, w->causal = s.causal, w->backward = s.backward, w->amount = s.amount;
  const unsigned long long seed = opt.seed * 1000003ULL + static_cast<unsigned long long>(s.t * 2 + s.causal) * 16;
  int next = 0;
  auto add = [&](fbuf& b, float lo, float hi) {
    b = fbuf(w->numel());
    fill(b, seed + static_cast<unsigned long long>(next++), lo, hi);
  };
  add(w->q, -2, 2), add(w->k, -2, 2), add(w->v, -1, 1), add(w->r, -1, 1);
  return w;
}

void compute_reference(const at_workload& w) {
  for (auto& v : cur.ref) v.assign(static_cast<std::size_t>(w.numel()), 0.0);
  const i64 per_head = w.t * at_dim;
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(dynamic) num_threads(opt.threads)
  for (i64 h = 0; h < at_batch * at_heads; ++h) {
    const i64 o = h * per_head;
    reference_head(w.q.data() + o, w.k.data() + o, w.v.data() + o, w.r.data() + o, w.t, w.causal, cur.ref[0].data() + o,
                   cur.ref[1].data() + o, cur.ref[2].data() + o, cur.ref[3].data() + o);
  }
  cur.ref_t = w.t, cur.ref_causal = w.causal;
  std::fprintf(stderr, "bench_attention: reference for T=%lld%s: %.1f s\n", static_cast<long long>(w.t),
               w.causal ? " causal" : "", seconds_since(t0));
}

at_workload& use_workload(int s) {
  if (cur.spec == s) return *cur.w;
  cur.r.reset();  // runners point into the previous workload's buffers
  cur.im = nullptr;
  cur.w = make_workload(all_specs[static_cast<std::size_t>(s)]);
  cur.spec = s;
  if (cur.ref_t != cur.w->t || cur.ref_causal != cur.w->causal) compute_reference(*cur.w);
  return *cur.w;
}

at_runner& use_runner(int s, const at_impl& im) {
  at_workload& w = use_workload(s);
  if (cur.im == &im) return *cur.r;
  cur.r.reset();
  cur.r = im.make(w, opt.threads);
  cur.im = &im;
  cur.r->run();  // warm-up (pages, thread pools, caches); its outputs are the ones checked
  const auto out = cur.r->outputs();
  cur.err = {};
  for (int o = 0; o < w.outputs(); ++o) {
    const std::size_t u = static_cast<std::size_t>(o);
    cur.err[u] = rel_error(out[u], cur.ref[u]);
  }
  return *cur.r;
}

// Issue 4's f32 tolerance for reductions and GEMMs (the autodiff suite's), against the reference.
constexpr double tolerance = 1e-4;

void set_counters(benchmark::State& st, const spec& s, const at_impl& im) {
  st.counters["amount"] = s.amount;
  st.counters["rel_error"] = *std::max_element(cur.err.begin(), cur.err.end());
  for (int o = 0; o < (s.backward ? 4 : 1); ++o)
    st.counters[std::string("rel_error_") + at_output_names[o]] = cur.err[static_cast<std::size_t>(o)];
  st.counters["tolerance"] = tolerance;
  st.counters["threads"] = im.threads(opt.threads);
  const double planned = im.planned_bytes(*cur.w);
  if (planned >= 0) st.counters["planned_scratch_bytes"] = planned;
  st.SetLabel("GFLOP/s");
}

void bench_impl(benchmark::State& st, int s, const at_impl* im) {
  at_runner* r = nullptr;
  try {
    r = &use_runner(s, *im);
  } catch (const std::exception& e) {
    cur.r.reset(), cur.im = nullptr, cur.w.reset(), cur.spec = -1;
    std::fprintf(stderr, "bench_attention: error: %s\n", e.what());
    st.SkipWithError(e.what());
    return;
  }
  for (auto _ : st) {
    r->run();
    benchmark::ClobberMemory();
  }
  set_counters(st, all_specs[static_cast<std::size_t>(s)], *im);
}

double mem_available_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (f >> key >> kib)
    if (key == "MemAvailable:")
      return kib * 1024;
    else
      f.ignore(256, '\n');
  return 0;
}

std::string mib(double bytes) { return std::to_string(static_cast<long long>(bytes / (1 << 20))) + " MiB"; }

}  // namespace
}  // namespace kb

int main(int argc, char** argv) {
  using namespace kb;
  std::vector<char*> original(argv, argv + argc + 1);  // for the restart, before parse() edits argv
  if (!parse(argc, argv, opt, "bench_attention")) return 0;
  ensure_env(original.data(), opt.threads, "bench_attention");
  settle(opt);

  impls = {&at_kiln_impl, &at_kiln_unfused_impl};
#ifdef KILN_BENCH_HAVE_TORCH
  impls.push_back(&at_libtorch_impl);
  impls.push_back(&at_libtorch_sdpa_impl);
#endif

  // A row whose plan alone would take most of the memory available now is left out, not killed
  // halfway (there is no swap): kiln-unfused's forward and backward at T = 4096 plans 10.6 GiB
  // of scratch when causal, 8.6 when not (four or five [4, 8, T, T] f32 score matrices, 2 GiB each).
  const double available = mem_available_bytes();
  std::string skipped, planned;
  all_specs = specs(opt.quick);
  register_fma_limit("start", opt);
  for (int s = 0; s < static_cast<int>(all_specs.size()); ++s) {
    const spec& sp = all_specs[static_cast<std::size_t>(s)];
    at_workload w;  // the shape of the workload only, for the impls' questions
    w.name = sp.name, w.t = sp.t, w.causal = sp.causal, w.backward = sp.backward, w.amount = sp.amount;
    for (const at_impl* im : impls) {
      const std::string name = sp.name + "/" + im->name;
      const double bytes = im->planned_bytes(w);
      if (bytes >= 0) planned += name + " " + mib(bytes) + "; ";
      if (const char* why = im->why_not(w)) {
        skipped += name + ": " + why + "\n";
        continue;
      }
      if (available > 0 && bytes > 0.8 * available) {
        skipped += name + ": its plan's scratch (" + mib(bytes) + ") is more than 80% of the memory available (" +
                   mib(available) + ")\n";
        continue;
      }
      benchmark::RegisterBenchmark(name.c_str(), bench_impl, s, im)
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond)
          ->Repetitions(opt.reps)
          ->MinTime(opt.min_time);
    }
    register_fma_limit(s + 1 < static_cast<int>(all_specs.size()) ? "after_" + sp.name : "end", opt);
  }

  add_common_context("attention", opt);
#ifndef KILN_BENCH_HAVE_TORCH
  for (const spec& sp : all_specs)
    skipped += sp.name + "/libtorch: libtorch is not installed (scripts/setup-bench.sh)\n";
#endif
  benchmark::AddCustomContext("skipped", skipped);
  benchmark::AddCustomContext("kiln_planned_scratch", planned);
  benchmark::AddCustomContext(
      "workloads",
      "scaled dot-product attention, f32, q, k, v [4, 8, T, 64], scale 1/8; fwd_*: the forward; "
      "fwd_bwd_*: forward and the gradients of sum(y * r) w.r.t. q, k, v; _causal: causal mask; _t<T>: "
      "the length. GFLOP/s counts FlashAttention's flops: forward 4 B H T^2 D (halved when causal), "
      "forward and backward 3.5 x that");
  benchmark::AddCustomContext(
      "rel_error_def",
      "rel_error = max|y - ref| / max|ref| per output (y, dq, dk, dv; the largest), ref the attention and its "
      "gradients computed in double from the same inputs");
  std::fprintf(stderr, "bench_attention: %d threads, OpenBLAS core %s, xsimd %s, seed %llu%s\n", opt.threads,
               openblas_corename(), simd_arch(), opt.seed, opt.quick ? ", quick" : "");
  std::fprintf(stderr, "bench_attention: kiln plans' scratch: %s\n", planned.c_str());

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
