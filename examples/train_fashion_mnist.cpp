// Trains an MLP (or, with --model cnn, a small CNN) on Fashion-MNIST with kiln: the model, its
// loss, its gradients and the Adam update are one expression, compiled into one plan while
// this file compiles; each step runs that plan's fused kernels on the CPU.
//
//   train_fashion_mnist [--model mlp|cnn] [--epochs N] [--batch B] [--lr LR] [--seed S]
//                       [--threads T] [--data DIR] [--save FILE] [--resume FILE]
//                       [--stop-after E] [--limit N] [--quiet]
//
// The data are Debian's dataset-fashion-mnist package (/usr/share/datasets/fashion-mnist).
// --save writes a safetensors checkpoint (parameters, Adam's moments, step and epoch) after
// every epoch; --resume continues from one, to the bit: the shuffle of epoch e depends only on
// (seed, e) and the learning rate only on the step (and on --epochs, the length of the whole
// run: --stop-after E ends a run after epoch E of it). The last line is test_accuracy=<value>.
#include <kiln/data/loader.hpp>
#include <kiln/io/idx.hpp>
#include <kiln/io/idx_gzip.hpp>
#include <kiln/nn/modules.hpp>
#include <kiln/optim.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

using namespace kiln;

namespace {

// ---- the models -----------------------------------------------------------------------------
using Y = input<"y", i64, shape<dyn>>;

struct mlp_model {
  static constexpr const char* name = "MLP 784-512-256-10";
  using net = nn::mlp<"mlp", 784, 512, 256, 10>;  // linear-relu-linear-relu-linear
  using X = input<"x", f32, shape<dyn, 784>>;
  static dims batch(index_t n) { return {n, 784}; }
};

struct cnn_model {
  static constexpr const char* name = "CNN conv3x3(16)-pool-conv3x3(32)-pool-fc128-dropout0.2-fc10";
  using net = nn::sequential<nn::conv2d<"conv1", 1, 16, 3, 1, 1>, nn::relu, nn::max_pool2d<2>,  // [n, 16, 14, 14]
                             nn::conv2d<"conv2", 16, 32, 3, 1, 1>, nn::relu, nn::max_pool2d<2>,  // [n, 32, 7, 7]
                             nn::flatten, nn::linear<"fc1", 32 * 7 * 7, 128>, nn::relu, nn::dropout<"drop", 20>,
                             nn::linear<"fc2", 128, 10>>;
  using X = input<"x", f32, shape<dyn, 1, 28, 28>>;
  static dims batch(index_t n) { return {n, 1, 28, 28}; }
};

/// The training loss (training mode: dropout active) and the logits for evaluation.
template <class M>
constexpr auto loss_of = cross_entropy(typename M::net{}(typename M::X{}, nn::train), Y{});
template <class M>
constexpr auto logits_of = typename M::net{}(typename M::X{});

struct options {
  std::string model = "mlp";
  int epochs = 6;
  index_t batch = 64;
  double lr = 1e-3;
  std::uint64_t seed = 1;
  int threads = 0;  // 0: all cores (or KILN_NUM_THREADS)
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string save, resume;
  int stop_after = 0;  // end after this epoch (0: run all --epochs)
  index_t limit = 0;   // train on the first N images only (0: all)
  bool quiet = false;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "train_fashion_mnist: %s\nusage: train_fashion_mnist [--model mlp|cnn] [--epochs N] [--batch B] [--lr LR] [--seed S] "
               "[--threads T] [--data DIR] [--save FILE] [--resume FILE] [--stop-after E] [--limit N] [--quiet]\n",
               why);
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quiet") {
      o.quiet = true;
      continue;
    }
    if (i + 1 >= argc) usage(("missing value after " + a).c_str());
    const std::string v = argv[++i];
    try {
      if (a == "--model") o.model = v;
      else if (a == "--epochs") o.epochs = std::stoi(v);
      else if (a == "--batch") o.batch = std::stoll(v);
      else if (a == "--lr") o.lr = std::stod(v);
      else if (a == "--seed") o.seed = std::stoull(v);
      else if (a == "--threads") o.threads = std::stoi(v);
      else if (a == "--data") o.data = v;
      else if (a == "--save") o.save = v;
      else if (a == "--resume") o.resume = v;
      else if (a == "--limit") o.limit = std::stoll(v);
      else if (a == "--stop-after") o.stop_after = std::stoi(v);
      else usage(("unknown option " + a).c_str());
    } catch (const std::logic_error&) {
      usage(("bad value '" + v + "' for " + a).c_str());
    }
  }
  if (o.epochs < 1 || o.batch < 1 || o.lr <= 0 || o.limit < 0 || o.stop_after < 0)
    usage("epochs, batch and lr must be positive");
  if (o.model != "mlp" && o.model != "cnn") usage(("unknown model '" + o.model + "' (mlp or cnn)").c_str());
  return o;
}

// ---- data -----------------------------------------------------------------------------------
struct dataset {
  any_tensor images;  // [n, 784] f32, normalised
  any_tensor labels;  // [n] i64
  index_t size() const { return labels.numel(); }
};

dataset load(const std::string& dir, const std::string& part, index_t limit) {
  io::idx_options img{.to = dtype::f32, .scale = 1.0 / 255, .inflate = io::gunzip};
  io::idx_options lab{.to = dtype::i64, .inflate = io::gunzip};
  const auto path = [&](const char* what) { return std::filesystem::path(dir) / (part + what); };
  dataset d{io::read_idx(path("-images-idx3-ubyte.gz"), img), io::read_idx(path("-labels-idx1-ubyte.gz"), lab)};
  const index_t n = d.labels.numel();
  if (d.images.rank() != 3 || d.images.shape().e[0] != n || d.images.shape().e[1] * d.images.shape().e[2] != 784)
    throw std::runtime_error(dir + ": " + part + " images and labels do not match (expected n x 28 x 28 and n)");
  d.images = d.images.reshape(dims{n, 784});
  if (limit > 0 && limit < n) {
    d.images = d.images.slice(0, 0, limit).clone();
    d.labels = d.labels.slice(0, 0, limit).clone();
  }
  // Fashion-MNIST's mean and standard deviation over the training pixels
  float* p = d.images.data<float>();
  for (index_t i = 0; i < d.images.numel(); ++i) p[i] = (p[i] - 0.2860f) / 0.3530f;
  return d;
}

// Fraction of the images whose largest logit is their label.
template <class M>
double accuracy(const dataset& d, const nn::param_set<typename M::net::params>& params) {
  static const auto forward = compile(logits_of<M>);
  constexpr index_t chunk = 2000;
  index_t right = 0;
  for (index_t at = 0; at < d.size(); at += chunk) {
    const index_t n = std::min(chunk, d.size() - at);
    const tensor<float, 2> z = forward(typename M::X{} = d.images.slice(0, at, at + n).reshape(M::batch(n)), params);
    const std::int64_t* y = d.labels.data<std::int64_t>() + at;
    for (index_t i = 0; i < n; ++i) {
      index_t best = 0;
      for (index_t j = 1; j < 10; ++j)
        if (z(i, j) > z(i, best)) best = j;
      right += best == y[i];
    }
  }
  return static_cast<double>(right) / static_cast<double>(d.size());
}

template <class M>
int train(const options& o) {
  using net = typename M::net;
  if (o.threads > 0) kiln::set_num_threads(o.threads);
  const dataset train = load(o.data, "train", o.limit);
  const dataset test = load(o.data, "t10k", 0);
  const index_t steps_per_epoch = (train.size() + o.batch - 1) / o.batch;
  const optim::cosine_schedule schedule{.lr = o.lr, .warmup = steps_per_epoch / 4, .total = steps_per_epoch * o.epochs,
                                        .min_lr = o.lr / 20};

  optim::trainer tr(loss_of<M>, typename net::params{}, optim::adam{.lr = o.lr}, nn::make_params<net>(o.seed));
  tr.seed(o.seed);  // dropout masks: a function of (seed, step), so resuming draws the same ones
  int first_epoch = 0;
  if (!o.resume.empty()) {
    const io::metadata_map md = tr.load(o.resume);
    first_epoch = md.count("epoch") ? std::stoi(md.at("epoch")) : 0;
    std::printf("resumed from %s at epoch %d (step %lld)\n", o.resume.c_str(), first_epoch,
                static_cast<long long>(tr.steps()));
  }
  constexpr explanation plan_info =
      explain_type<decltype(optim::training_step(loss_of<M>, typename net::params{}, optim::adam{}))>();
  // the scratch memory of the plan is a + b * batch bytes (the batch extent is dyn)
  const double scratch = static_cast<double>(plan_info.scratch.fixed + plan_info.scratch.per_dyn * o.batch);
  std::printf("model: %s, %lld parameters; training step: %d kernels (%d matmul), %.2f MB scratch\n", M::name,
              static_cast<long long>(nn::parameter_count<typename net::params>()), plan_info.kernels,
              plan_info.matmul_kernels, scratch / 1e6);
  std::printf("data: %lld training and %lld test images; batch %lld, Adam lr %g (cosine), %d threads\n",
              static_cast<long long>(train.size()), static_cast<long long>(test.size()), static_cast<long long>(o.batch), o.lr,
              kiln::num_threads());

  // batches shuffled by (seed, epoch), the next one gathered on the loader's thread while this
  // one trains (data/loader.hpp)
  data::loader batches(data::tensor_dataset({train.images, train.labels}),
                       {.batch = o.batch, .shuffle = true, .seed = o.seed});
  double acc = 0;
  const int last_epoch = o.stop_after > 0 ? std::min(o.stop_after, o.epochs) : o.epochs;
  for (int epoch = first_epoch; epoch < last_epoch; ++epoch) {
    batches.begin_epoch(static_cast<std::uint64_t>(epoch));
    const double waited_before = batches.waited();
    const auto t0 = std::chrono::steady_clock::now();
    double loss_sum = 0;
    index_t s = 0, seen = 0;
    while (const auto b = batches.next()) {
      const any_tensor& x = (*b)[0];
      const any_tensor& y = (*b)[1];
      const index_t n = y.numel();
      tr.options().lr = schedule(tr.steps() + 1);
      loss_sum += tr.step(typename M::X{} = x.reshape(M::batch(n)), Y{} = y);
      ++s, seen += n;
      if (!o.quiet && (s % 50 == 0 || s == steps_per_epoch)) {
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const int width = 30, done = static_cast<int>(width * s / steps_per_epoch);
        std::fprintf(stderr, "\repoch %d/%d [%.*s%*s] loss %.4f  %.0f samples/s ", epoch + 1, o.epochs, done,
                     "==============================", width - done, "", loss_sum / static_cast<double>(s),
                     static_cast<double>(seen) / secs);
      }
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double waited = batches.waited() - waited_before;
    acc = accuracy<M>(test, tr.params());
    if (!o.quiet) std::fprintf(stderr, "\n");
    std::printf("epoch %d: loss %.4f, test accuracy %.4f, %.1f s (%.0f samples/s; %.2f%% of it waiting for data)\n",
                epoch + 1, loss_sum / static_cast<double>(steps_per_epoch), acc, secs,
                static_cast<double>(train.size()) / secs, 100 * waited / secs);
    if (!o.save.empty()) tr.save(o.save, {{"epoch", std::to_string(epoch + 1)}, {"seed", std::to_string(o.seed)}});
  }
  if (first_epoch >= last_epoch) acc = accuracy<M>(test, tr.params());
  std::printf("test_accuracy=%.4f\n", acc);
  return 0;
}

}  // namespace

int main(int argc, char** argv) try {
  const options o = parse(argc, argv);
  return o.model == "cnn" ? train<cnn_model>(o) : train<mlp_model>(o);
} catch (const std::exception& e) {
  std::fprintf(stderr, "train_fashion_mnist: %s\n", e.what());
  return 1;
}
