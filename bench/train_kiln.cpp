// bench/train_kiln.cpp: kiln's rows of the train suite (and kiln-profiled: the same with the
// profiler recording every step, for its overhead), written as examples/train_fashion_mnist.cpp
// writes them: the model nn::mlp<"mlp", 784, 512, 256, 10>, the loss cross_entropy(net{}(x), y)
// and optim::trainer with optim::adam{.lr = 1e-3}, whose step() runs the one compiled plan of
// forward, backward and update on the CPU backend (kiln::cpu::set_num_threads(threads)). Also the
// suite's data loader (kiln::io::read_idx with io::gunzip) and kiln's initial parameters.
#include <kiln/io/idx.hpp>
#include <kiln/io/idx_gzip.hpp>
#include <kiln/nn/modules.hpp>
#include <kiln/optim.hpp>

#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "train_common.hpp"

namespace kb {
namespace {

using namespace kiln;

using net = nn::mlp<"mlp", 784, 512, 256, 10>;
using X = input<"x", f32, shape<dyn, 784>>;
using Y = input<"y", kiln::i64, shape<dyn>>;
constexpr auto loss = cross_entropy(net{}(X{}), Y{});
using trainer_t = decltype(optim::trainer(loss, net::params{}, optim::adam{.lr = 1e-3}, nn::state_dict{}));

nn::state_dict to_state_dict(const train_param_values& v) {
  nn::state_dict sd = nn::zeros_for<net::params>();
  for (int q = 0; q < train_params; ++q) {
    any_tensor& t = sd.at(train_param_names[q]);
    if (t.numel() != train_param_numel(q) || static_cast<std::int64_t>(v[static_cast<std::size_t>(q)].size()) != t.numel())
      throw std::logic_error("kiln train bench: parameter size mismatch");
    std::memcpy(t.data<float>(), v[static_cast<std::size_t>(q)].data(), static_cast<std::size_t>(t.numel()) * sizeof(float));
  }
  return sd;
}

train_param_values from_state_dict(const nn::state_dict& sd) {
  train_param_values v;
  for (int q = 0; q < train_params; ++q) {
    const any_tensor& t = sd.at(train_param_names[q]);
    if (t.numel() != train_param_numel(q) || !t.is_contiguous()) throw std::logic_error("kiln train bench: parameter layout");
    v[static_cast<std::size_t>(q)].assign(t.data<float>(), t.data<float>() + t.numel());
  }
  return v;
}

struct kiln_runner final : train_runner {
  kiln_runner(const train_data& d, int threads, bool profiled)
      : tr_(loss, net::params{}, optim::adam{.lr = 1e-3}, to_state_dict(d.init)), profiled_(profiled) {
    cpu::set_num_threads(threads);
    // kiln tensors own their storage: a copy of every batch, made here, untimed
    for (std::int64_t k = 0; k < d.batches; ++k) {
      any_tensor x(dtype::f32, dims{d.batch, train_in});
      any_tensor y(dtype::i64, dims{d.batch});
      std::memcpy(x.data<float>(), d.x.data() + k * d.batch * train_in,
                  static_cast<std::size_t>(d.batch * train_in) * sizeof(float));
      std::memcpy(y.data<std::int64_t>(), d.y.data() + k * d.batch, static_cast<std::size_t>(d.batch) * sizeof(std::int64_t));
      xs_.push_back(std::move(x));
      ys_.push_back(std::move(y));
    }
  }
  double step(std::int64_t k) override {
    const auto i = static_cast<std::size_t>(k);
    // the kiln-profiled rows: the profiler records this step (debug/profiler.hpp), and only it
    // (the suite's other rows run while this runner exists)
    if (profiled_) profiling::current().store(&recorded_, std::memory_order_release);
    const double l = tr_.step({{"x", xs_[i]}, {"y", ys_[i]}});
    if (profiled_) profiling::current().store(nullptr, std::memory_order_release);
    return l;
  }
  train_param_values params() override { return from_state_dict(tr_.params()); }

 private:
  trainer_t tr_;
  bool profiled_;
  profiling::recorder recorded_;
  std::vector<any_tensor> xs_, ys_;
};

}  // namespace

void load_fashion_mnist(const std::string& dir, std::vector<float>& images, std::vector<std::int64_t>& labels) {
  const io::idx_options img{.to = dtype::f32, .scale = 1.0 / 255, .inflate = io::gunzip};
  const io::idx_options lab{.to = dtype::i64, .inflate = io::gunzip};
  const std::filesystem::path p(dir);
  const any_tensor x = io::read_idx(p / "train-images-idx3-ubyte.gz", img);
  const any_tensor y = io::read_idx(p / "train-labels-idx1-ubyte.gz", lab);
  const index_t n = y.numel();
  if (x.rank() != 3 || x.shape().e[0] != n || x.shape().e[1] * x.shape().e[2] != train_in || !x.is_contiguous())
    throw std::runtime_error(dir + ": training images and labels do not match (expected n x 28 x 28 and n)");
  images.assign(x.data<float>(), x.data<float>() + x.numel());
  labels.assign(y.data<std::int64_t>(), y.data<std::int64_t>() + n);
}

train_param_values kiln_initial_params(std::uint64_t seed) { return from_state_dict(nn::make_params<net>(seed)); }

const train_impl train_kiln_impl{"kiln", [](const train_data& d, int threads) -> std::unique_ptr<train_runner> {
                                   return std::make_unique<kiln_runner>(d, threads, false);
                                 }};
const train_impl train_kiln_profiled_impl{"kiln-profiled",
                                          [](const train_data& d, int threads) -> std::unique_ptr<train_runner> {
                                            return std::make_unique<kiln_runner>(d, threads, true);
                                          }};

}  // namespace kb
