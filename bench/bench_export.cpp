// bench/bench_export.cpp: the export benchmark suite. What one call of an exported model costs:
// the forward (logits) of examples/export/mnist_mlp.hpp's Fashion-MNIST MLP (784-512-256-10,
// relu) at batch 1 and 64, called
//   kiln      from C++, kiln::compiled's f(feeds, out) (export_kiln.cpp),
//   kiln-abi  through the C ABI of the library kiln_add_model built from the same expression,
//             kiln_model_run (export_abi.cpp),
//   libtorch  eager, torch::nn::Linear modules under InferenceMode (export_torch.cpp),
// and read-weights, one pass over the weights (the floor of a call that reads them),
// in one process, with the same thread count and weights (kiln's nn::make_params(seed)). One
// benchmark iteration is one call on one request; the requests are a fixed set of random inputs
// in [0, 1) (256 requests; 32 with --quick) that each implementation cycles through. The rate is
// samples/s (counter `amount` = the batch, `rate_scale` = 1), so "vs" (seconds over kiln's) is
// the cost of a call relative to the C++ call: the ABI's overhead for kiln-abi.
//
// rel_error: the logits of the first request, each row against kiln's (kiln against libtorch's),
// max|a - b| / max|b|; tolerance 0 for kiln-abi (the same plan: bit-exact), 1e-4 for the others.
//
//   bench_export [--quick] [--threads=N] [--reps=N] [--min-time=S] [--seed=N] [benchmark flags]
//
// bench/run.sh builds this, runs it and writes bench/results/export.{json,md,png}. The
// environment is the cpu suite's (ensure_env in bench_main.hpp).
#include <benchmark/benchmark.h>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "bench_main.hpp"
#include "export_common.hpp"

namespace kb {
namespace {

options opt;
std::vector<std::int64_t> batch_sizes;
std::vector<const fwd_impl*> impls;

std::string workload_name(std::int64_t b) { return "mlp_forward_b" + std::to_string(b); }

bool computes_logits(const fwd_impl* im) { return im != &fwd_read_weights_impl; }

struct current {
  int spec = -1;
  fwd_data d;
  std::vector<std::unique_ptr<fwd_runner>> runners;  // by impls' index
  std::vector<double> errs;
  std::vector<std::int64_t> next;
} cur;

void use_workload(int s) {
  if (cur.spec == s) return;
  cur = current{};
  fwd_data& d = cur.d;
  d.batch = batch_sizes[static_cast<std::size_t>(s)];
  d.name = workload_name(d.batch);
  d.requests = opt.quick ? 32 : 256;
  d.x.resize(static_cast<std::size_t>(d.requests * d.batch * fwd_in));
  fill(d.x.data(), static_cast<i64>(d.x.size()), opt.seed + static_cast<unsigned long long>(s), 0.0f, 1.0f);
  d.params = fwd_initial_params(opt.seed);
  cur.spec = s;
  std::vector<std::vector<float>> first;
  for (const fwd_impl* im : impls) {
    auto r = im->make(d, opt.threads);
    r->run(0);  // also the warm-up (pages, thread pools, caches)
    if (computes_logits(im)) first.emplace_back(r->logits(), r->logits() + d.batch * fwd_out);
    cur.runners.push_back(std::move(r));
    cur.next.push_back(d.requests > 1 ? 1 : 0);
  }
  const i64 n = d.batch * fwd_out;
  for (std::size_t i = 0; i < first.size(); ++i) {
    const std::size_t ref = i == 0 ? first.size() - 1 : 0;  // kiln; kiln: the last
    cur.errs.push_back(rel_error(first[i].data(), first[ref].data(), n));
  }
}

void bench_impl(benchmark::State& st, int s, int i) {
  try {
    use_workload(s);
  } catch (const std::exception& e) {
    cur = current{};
    std::fprintf(stderr, "bench_export: error: %s\n", e.what());
    st.SkipWithError(e.what());
    return;
  }
  const auto u = static_cast<std::size_t>(i);
  fwd_runner& r = *cur.runners[u];
  std::int64_t& next = cur.next[u];
  try {
    for (auto _ : st) {
      r.run(next);
      next = next + 1 < cur.d.requests ? next + 1 : 0;
      benchmark::DoNotOptimize(r.logits());
    }
  } catch (const std::exception& e) {
    st.SkipWithError(e.what());
    return;
  }
  st.counters["amount"] = static_cast<double>(cur.d.batch);  // samples per call
  st.counters["rate_scale"] = 1;                              // report.py: rate = amount / seconds
  st.counters["threads"] = opt.threads;
  if (computes_logits(impls[u])) {
    st.counters["tolerance"] = std::string(impls[u]->name) == "kiln-abi" ? 0.0 : 1e-4;
    st.counters["rel_error"] = cur.errs[u];
  } else {
    st.counters["no_output"] = 1;  // report.py: rel_error n/a
  }
  st.SetLabel("samples/s");
}

}  // namespace
}  // namespace kb

int main(int argc, char** argv) {
  using namespace kb;
  std::vector<char*> original(argv, argv + argc + 1);  // for the restart, before parse() edits argv
  if (!parse(argc, argv, opt, "bench_export")) return 0;
  ensure_env(original.data(), opt.threads, "bench_export");
  settle(opt);

  impls = {&fwd_kiln_impl, &fwd_abi_impl};
#ifdef KILN_BENCH_HAVE_TORCH
  impls.push_back(&fwd_libtorch_impl);
#endif
  impls.push_back(&fwd_read_weights_impl);  // last: rel_error's reference is the last impl with logits
  batch_sizes = {1, 64};
  for (int s = 0; s < static_cast<int>(batch_sizes.size()); ++s)
    for (int i = 0; i < static_cast<int>(impls.size()); ++i) {
      const std::string name = workload_name(batch_sizes[static_cast<std::size_t>(s)]) + "/" + impls[static_cast<std::size_t>(i)]->name;
      benchmark::RegisterBenchmark(name.c_str(), bench_impl, s, i)
          ->UseRealTime()->Unit(benchmark::kMicrosecond)->Repetitions(opt.reps)->MinTime(opt.min_time);
    }

  add_common_context("export", opt);
  benchmark::AddCustomContext(
      "rel_error_note",
      "samples/s = batch / median seconds of one forward call; no physical limit applies (of limit: n/a); vs = seconds "
      "/ kiln's seconds (kiln: the C++ call; kiln-abi: the same model through the exported library's C ABI); "
      "rel_error: the first request's logits against kiln's (kiln's against libtorch's, or kiln-abi's), max|a - b| / "
      "max|b|; read-weights: one pass summing the 2.1 MB of weights with the same threads, the floor of a forward "
      "that reads them at each call (no logits)");
#ifndef KILN_BENCH_HAVE_TORCH
  benchmark::AddCustomContext("skipped", "mlp_forward/libtorch: libtorch is not installed (scripts/setup-bench.sh)\n");
#endif
  std::fprintf(stderr, "bench_export: %d threads, seed %llu%s\n", opt.threads, opt.seed, opt.quick ? ", quick" : "");

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
