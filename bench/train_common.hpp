// bench/train_common.hpp: what the translation units of the train benchmark suite (bench_train)
// share. One workload per batch size: training the MLP of examples/train_fashion_mnist.cpp
// (784-512-256-10, relu between layers, mean cross-entropy over integer labels, Adam lr 1e-3)
// on real Fashion-MNIST images (pixels / 255), one optimizer step per batch, cycling through a
// fixed set of shuffled batches made before anything is timed.
//
// Each implementation (kiln: train_kiln.cpp, C++20; libtorch: train_torch.cpp, C++17, which never
// includes kiln's headers) exports one `train_impl`. Both start from the same initial weights
// (kiln's nn::make_params<net>(seed), [out, in] like torch.nn.Linear's) and read the same raw
// float / int64 buffers.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kb {

inline constexpr std::int64_t train_in = 784, train_h1 = 512, train_h2 = 256, train_out = 10;

/// The parameters, in the order kiln and torch.nn name them (module "mlp": linears 0, 1, 2).
inline constexpr int train_params = 6;
inline constexpr const char* train_param_names[train_params] = {"mlp.0.weight", "mlp.0.bias", "mlp.1.weight",
                                                                "mlp.1.bias",   "mlp.2.weight", "mlp.2.bias"};
/// Elements of parameter q: weights [out, in], biases [out].
inline std::int64_t train_param_numel(int q) {
  constexpr std::int64_t n[train_params] = {train_h1 * train_in, train_h1,  train_h2 * train_h1,
                                            train_h2,            train_out * train_h2, train_out};
  return n[q];
}
using train_param_values = std::array<std::vector<float>, train_params>;

/// The batches of one workload: batch k is rows [k batch, (k + 1) batch) of x (row-major
/// [batches batch, 784], pixels in [0, 1]) and of y (labels 0..9).
struct train_data {
  std::string name;
  std::int64_t batch = 0, batches = 0;
  std::vector<float> x;
  std::vector<std::int64_t> y;
  train_param_values init;  // the initial parameters of every implementation
};

/// One implementation training one model from data.init: step(k) is what is timed (forward,
/// backward and the Adam update on batch k) and returns the loss before the update; params()
/// copies the current parameters out (untimed).
struct train_runner {
  virtual ~train_runner() = default;
  virtual double step(std::int64_t k) = 0;
  virtual train_param_values params() = 0;
};

struct train_impl {
  const char* name;
  std::unique_ptr<train_runner> (*make)(const train_data&, int threads);
};

extern const train_impl train_kiln_impl;      // train_kiln.cpp
extern const train_impl train_kiln_profiled_impl;  // train_kiln.cpp: the same, the profiler recording
extern const train_impl train_libtorch_impl;  // train_torch.cpp (when libtorch is installed)

/// Fashion-MNIST's training set (train_kiln.cpp, with kiln::io::read_idx and io::gunzip):
/// images [n, 784] scaled by 1/255, labels [n].
void load_fashion_mnist(const std::string& dir, std::vector<float>& images, std::vector<std::int64_t>& labels);
/// kiln's initial parameters of the model for this seed (nn::make_params<net>(seed)).
train_param_values kiln_initial_params(std::uint64_t seed);

}  // namespace kb
