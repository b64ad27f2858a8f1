// bench/export_common.hpp: what the translation units of the export benchmark suite
// (bench_export) share. One workload per batch size: the forward (logits) of the Fashion-MNIST
// MLP of examples/export/mnist_mlp.hpp (784-512-256-10, relu between layers) on a fixed set of
// random inputs, as a deployed model runs it: weights loaded once, then one call per request.
//
// Each implementation exports one `fwd_impl`: kiln's plan called from C++ (export_kiln.cpp),
// the same model exported by kiln_add_model and called through its C ABI (export_abi.cpp, which
// includes only <kiln/export/kiln_model.h>), and libtorch eager (export_torch.cpp, C++17, no
// kiln header). All start from the same weights and read the same input buffers.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kb {

inline constexpr std::int64_t fwd_in = 784, fwd_h1 = 512, fwd_h2 = 256, fwd_out = 10;

/// The parameters as kiln and torch.nn name them: weights [out, in], biases [out].
inline constexpr int fwd_params = 6;
inline constexpr const char* fwd_param_names[fwd_params] = {"mlp.0.weight", "mlp.0.bias", "mlp.1.weight",
                                                            "mlp.1.bias",   "mlp.2.weight", "mlp.2.bias"};
inline constexpr std::array<std::array<std::int64_t, 2>, fwd_params> fwd_param_shapes = {
    {{fwd_h1, fwd_in}, {fwd_h1, 0}, {fwd_h2, fwd_h1}, {fwd_h2, 0}, {fwd_out, fwd_h2}, {fwd_out, 0}}};
using fwd_param_values = std::array<std::vector<float>, fwd_params>;

/// The requests of one workload: request k is rows [k batch, (k + 1) batch) of x.
struct fwd_data {
  std::string name;
  std::int64_t batch = 0, requests = 0;
  std::vector<float> x;
  fwd_param_values params;
};

/// One implementation's loaded model: run(k) is what is timed (the logits of request k, into
/// memory the runner owns, set up once); logits() is the last result, [batch, 10] row-major.
struct fwd_runner {
  virtual ~fwd_runner() = default;
  virtual void run(std::int64_t k) = 0;
  virtual const float* logits() const = 0;
};

struct fwd_impl {
  const char* name;
  std::unique_ptr<fwd_runner> (*make)(const fwd_data&, int threads);
};

extern const fwd_impl fwd_kiln_impl;      // export_kiln.cpp
extern const fwd_impl fwd_abi_impl;       // export_abi.cpp
extern const fwd_impl fwd_libtorch_impl;  // export_torch.cpp (when libtorch is installed)
/// Not a forward: one pass over the weights (export_kiln.cpp), the floor of any call that reads
/// them from memory, as the three do. It computes no logits.
extern const fwd_impl fwd_read_weights_impl;

/// kiln's initial parameters of the model for this seed (nn::make_params, export_kiln.cpp).
fwd_param_values fwd_initial_params(std::uint64_t seed);

}  // namespace kb
