// bench/bench_train.cpp: the train benchmark suite. Training samples per second of the MLP of
// examples/train_fashion_mnist.cpp (784-512-256-10, relu, mean cross-entropy, Adam lr 1e-3;
// train_common.hpp) at batch 64 and 256, kiln (optim::trainer) against libtorch eager
// (torch::nn + torch::optim::Adam), in one process, with the same thread count. One benchmark
// iteration is one training step (forward, backward, update) on one batch; the batches are real
// Fashion-MNIST training images (pixels / 255), shuffled once with the seed and cut into a fixed
// set of batches (16384 images; 2048 with --quick) before anything is timed, which each
// implementation then cycles through, training on. The rate is samples/s (counter `amount` = the
// batch, `rate_scale` = 1: report.py divides by it instead of 1e9).
//
// rel_error: both implementations start from kiln's initial weights (nn::make_params<net>(seed))
// and take their first step on the same batch, untimed, before their timing; then the first
// step's loss and the six updated parameters of one are compared with the other's (each row
// against the other implementation): rel_error is the largest of |loss_a - loss_b| / |loss_b| and,
// per parameter, ||p_a - p_b|| / ||p_b|| (L2; counters rel_error_loss, rel_error_params),
// tolerance 1e-4. Not in rel_error, in the raw JSON: rel_error_params_maxabs, the elementwise
// max|p_a - p_b| / max|p_b| (compare() says why it is not the check), and rel_error_update, the
// L2 difference of the updates p - p0 themselves.
// Fashion-MNIST's training set is read from $KILN_BENCH_FASHION_MNIST, by default Debian's
// /usr/share/datasets/fashion-mnist.
//
//   bench_train [--quick] [--threads=N] [--reps=N] [--min-time=S] [--seed=N] [benchmark flags]
//
// bench/run.sh builds this, runs it and writes bench/results/train.{json,md,png}. The environment
// is the cpu suite's (ensure_env in bench_main.hpp).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_main.hpp"
#include "train_common.hpp"

namespace kb {
namespace {

options opt;
std::vector<std::int64_t> batch_sizes;
std::vector<const train_impl*> impls;
std::vector<float> images;  // the whole training set, [n, 784]
std::vector<std::int64_t> labels;
std::vector<std::int64_t> order;  // its shuffle
std::int64_t set_samples = 0;     // images in each workload's set of batches

std::string workload_name(std::int64_t b) { return "mlp_train_b" + std::to_string(b); }

// Fisher-Yates with splitmix64 from the seed.
std::vector<std::int64_t> shuffled(std::int64_t n, unsigned long long seed) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), std::int64_t{0});
  unsigned long long s = seed ^ 0x5348554646ULL;
  for (std::int64_t i = n - 1; i > 0; --i) {
    unsigned long long z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    std::swap(idx[static_cast<std::size_t>(i)], idx[static_cast<std::size_t>(z % static_cast<unsigned long long>(i + 1))]);
  }
  return idx;
}

// The largest elementwise difference over the largest element, max|a - b| / max|b|
// (bench_main.hpp's rel_error; the L2 one is l2_error there). NaN: 1e30.
double maxabs_error(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 1e30;
  return rel_error(a.data(), b.data(), static_cast<i64>(b.size()));
}

struct check {
  double loss = 0;
  train_param_values params;
};

// Why the updated parameters are compared in L2: Adam's first step moves each weight by
// lr g / (|g| + eps), about lr sign(g), so where a gradient is within a few eps (1e-8) of zero
// (a weight that only a faint activation of one sample reaches) float rounding differences of
// 1e-9 in g, 1e-7 of the gradient's scale, change that weight's update by up to lr; a handful
// of such weights set the elementwise max|a - b| / max|b| (kept as rel_error_params_maxabs) at
// 1e-4 to 1e-3, whatever the implementations' accuracy.
struct errors {
  double loss = 1e30, params = 1e30, params_maxabs = 1e30, update = 1e30;
  double max() const { return std::max(loss, params); }
};

errors compare(const check& a, const check& b, const train_param_values& init) {
  errors e;
  const double l = std::fabs(a.loss - b.loss) / std::max(std::fabs(b.loss), 1e-30);
  e.loss = std::isfinite(l) ? l : 1e30;
  e.params = 0, e.params_maxabs = 0, e.update = 0;
  for (int q = 0; q < train_params; ++q) {
    const auto u = static_cast<std::size_t>(q);
    e.params = std::max(e.params, l2_error(a.params[u], b.params[u]));
    e.params_maxabs = std::max(e.params_maxabs, maxabs_error(a.params[u], b.params[u]));
    std::vector<float> da(a.params[u].size()), db(b.params[u].size());
    for (std::size_t i = 0; i < da.size() && i < init[u].size(); ++i) da[i] = a.params[u][i] - init[u][i];
    for (std::size_t i = 0; i < db.size() && i < init[u].size(); ++i) db[i] = b.params[u][i] - init[u][i];
    e.update = std::max(e.update, l2_error(da, db));
  }
  return e;
}

// ---- what is set up: one workload (its batches, and every implementation's model) at a time -------

struct current {
  int spec = -1;
  train_data d;
  std::vector<std::unique_ptr<train_runner>> runners;  // by impls' index
  std::vector<check> checks;
  std::vector<errors> errs;
  std::vector<std::int64_t> next;  // the batch each runner takes next
} cur;

void use_workload(int s) {
  if (cur.spec == s) return;
  cur = current{};
  const std::int64_t b = batch_sizes[static_cast<std::size_t>(s)];
  train_data& d = cur.d;
  d.name = workload_name(b);
  d.batch = b;
  d.batches = set_samples / b;
  d.x.resize(static_cast<std::size_t>(d.batches * b * train_in));
  d.y.resize(static_cast<std::size_t>(d.batches * b));
  for (std::int64_t i = 0; i < d.batches * b; ++i) {
    const std::int64_t k = order[static_cast<std::size_t>(i)];
    std::copy_n(images.data() + k * train_in, train_in, d.x.data() + i * train_in);
    d.y[static_cast<std::size_t>(i)] = labels[static_cast<std::size_t>(k)];
  }
  d.init = kiln_initial_params(opt.seed);
  cur.spec = s;
  std::fprintf(stderr, "bench_train: %s: %lld batches of %lld; first step from the same weights:", d.name.c_str(),
               static_cast<long long>(d.batches), static_cast<long long>(b));
  for (const train_impl* im : impls) {
    auto r = im->make(d, opt.threads);
    check c;
    c.loss = r->step(0);  // also the warm-up (pages, thread pools, caches)
    c.params = r->params();
    std::fprintf(stderr, " %s loss %.7f", im->name, c.loss);
    cur.runners.push_back(std::move(r));
    cur.checks.push_back(std::move(c));
    cur.next.push_back(d.batches > 1 ? 1 : 0);
  }
  std::fprintf(stderr, "\n");
  // each row against the other implementation (the first one against the second)
  for (std::size_t i = 0; i < impls.size(); ++i)
    cur.errs.push_back(impls.size() < 2 ? errors{}
                                        : compare(cur.checks[i], cur.checks[i == 0 ? 1 : 0], d.init));
}

// ---- the hand-off to bench/torch_rows.py (the current PyTorch from PyPI, eager and compiled) ----
// $KILN_BENCH_HANDOFF names a directory: for each workload the binary writes there what the
// Python rows need to train the same model on the same batches from the same weights and to
// compare their first step with kiln's: <workload>.json (sizes, kiln's first loss) and raw
// little-endian files: <workload>.x (f32 [batches batch, 784]), .y (i64), .init.<q> and
// .kiln.<q> (f32: parameter q before and after kiln's first step).

void write_handoff(const std::string& dir) {
  const train_data& d = cur.d;
  const std::string base = dir + "/" + d.name;
  write_raw(base + ".x", d.x.data(), d.x.size() * sizeof(float));
  write_raw(base + ".y", d.y.data(), d.y.size() * sizeof(std::int64_t));
  std::string json = "{\"workload\": \"" + d.name + "\", \"batch\": " + std::to_string(d.batch) +
                     ", \"batches\": " + std::to_string(d.batches) + ", \"in\": " + std::to_string(train_in) +
                     ", \"h1\": " + std::to_string(train_h1) + ", \"h2\": " + std::to_string(train_h2) +
                     ", \"out\": " + std::to_string(train_out) + ", \"threads\": " + std::to_string(opt.threads) +
                     ", \"tolerance\": 1e-4";
  char loss[64];
  std::snprintf(loss, sizeof loss, "%.17g", cur.checks[0].loss);
  json += std::string(", \"kiln_loss\": ") + loss + ", \"params\": [";
  for (int q = 0; q < train_params; ++q) {
    const auto u = static_cast<std::size_t>(q);
    write_raw(base + ".init." + std::to_string(q), d.init[u].data(), d.init[u].size() * sizeof(float));
    write_raw(base + ".kiln." + std::to_string(q), cur.checks[0].params[u].data(),
              cur.checks[0].params[u].size() * sizeof(float));
    json += std::string(q ? ", " : "") + "\"" + train_param_names[q] + "\"";
  }
  json += "]}\n";
  write_raw(base + ".json", json.data(), json.size());
}

// Issue 4's f32 tolerance for reductions and GEMMs.
constexpr double tolerance = 1e-4;

void bench_impl(benchmark::State& st, int s, int i) {
  try {
    use_workload(s);
  } catch (const std::exception& e) {
    cur = current{};
    std::fprintf(stderr, "bench_train: error: %s\n", e.what());
    st.SkipWithError(e.what());
    return;
  }
  const auto u = static_cast<std::size_t>(i);
  train_runner& r = *cur.runners[u];
  time_training_steps(st, [&](std::int64_t k) { return r.step(k); }, cur.next[u], cur.d.batches, cur.d.batch,
                      opt.threads, tolerance, cur.checks[u].loss);
  if (impls.size() >= 2) {
    const errors& e = cur.errs[u];
    st.counters["rel_error"] = e.max();
    st.counters["rel_error_loss"] = e.loss;
    st.counters["rel_error_params"] = e.params;
    st.counters["rel_error_params_maxabs"] = e.params_maxabs;
    st.counters["rel_error_update"] = e.update;
  }
}

}  // namespace
}  // namespace kb

int main(int argc, char** argv) {
  using namespace kb;
  std::vector<char*> original(argv, argv + argc + 1);  // for the restart, before parse() edits argv
  if (!parse(argc, argv, opt, "bench_train")) return 0;
  ensure_env(original.data(), opt.threads, "bench_train");
  settle(opt);

  impls = {&train_kiln_impl};
#ifdef KILN_BENCH_HAVE_TORCH
  impls.push_back(&train_libtorch_impl);
#endif
  impls.push_back(&train_kiln_profiled_impl);  // after libtorch: its rel_error is against kiln (bit for bit)
  batch_sizes = opt.quick ? std::vector<std::int64_t>{37, 64} : std::vector<std::int64_t>{64, 256};

  const char* dir = std::getenv("KILN_BENCH_FASHION_MNIST");
  const std::string data_dir = dir ? dir : "/usr/share/datasets/fashion-mnist";
  try {
    load_fashion_mnist(data_dir, images, labels);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train: cannot read Fashion-MNIST (dataset-fashion-mnist): %s\n", e.what());
    return 1;
  }
  const auto n = static_cast<std::int64_t>(labels.size());
  set_samples = std::min<std::int64_t>(n, opt.quick ? 2048 : 16384);
  order = shuffled(n, opt.seed);

  if (const char* handoff = std::getenv("KILN_BENCH_HANDOFF"); handoff && *handoff) {
    try {
      for (int s = 0; s < static_cast<int>(batch_sizes.size()); ++s) {
        use_workload(s);
        write_handoff(handoff);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_train: error: %s\n", e.what());
      return 1;
    }
    cur = current{};
  }

  for (int s = 0; s < static_cast<int>(batch_sizes.size()); ++s)
    for (int i = 0; i < static_cast<int>(impls.size()); ++i) {
      const std::string name = workload_name(batch_sizes[static_cast<std::size_t>(s)]) + "/" + impls[static_cast<std::size_t>(i)]->name;
      benchmark::RegisterBenchmark(name.c_str(), bench_impl, s, i)
          ->UseRealTime()->Unit(benchmark::kMillisecond)->Repetitions(opt.reps)->MinTime(opt.min_time);
    }

  add_common_context("train", opt);
  benchmark::AddCustomContext("data", data_dir + ": " + std::to_string(n) + " training images, " +
                                          std::to_string(set_samples) + " of them (shuffled with the seed) in each "
                                          "workload's fixed set of batches");
  benchmark::AddCustomContext(
      "rel_error_note",
      "samples/s = batch / median seconds of one training step (forward, backward, Adam update); no physical limit "
      "applies (of limit: n/a); vs = seconds / seconds of the reference impl named; rel_error: both start from kiln's "
      "initial weights and take one step on the same batch, then max(|loss_a - loss_b| / |loss_b|, ||p_a - p_b|| / "
      "||p_b|| (L2) over the six updated parameters), b the other impl (kiln-profiled: kiln) (the elementwise "
      "max|p_a - p_b| / max|p_b| is in the raw JSON as rel_error_params_maxabs); kiln-profiled: kiln with the "
      "profiler (KILN_PROFILE, kiln::profiler) recording every step, its overhead");
#ifndef KILN_BENCH_HAVE_TORCH
  benchmark::AddCustomContext("skipped", "mlp_train/libtorch: libtorch is not installed (scripts/setup-bench.sh)\n");
#endif
  std::fprintf(stderr, "bench_train: %d threads, %lld images from %s, seed %llu%s\n", opt.threads,
               static_cast<long long>(n), data_dir.c_str(), opt.seed, opt.quick ? ", quick" : "");

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
