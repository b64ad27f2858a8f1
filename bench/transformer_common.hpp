// bench/transformer_common.hpp: what the translation units of the transformer benchmark suite
// (bench_transformer) share. One workload per batch size: the training step of one layer of
// examples/train_char_lm.cpp's model, a pre-norm causal transformer encoder layer (width 128,
// 4 heads, a GELU feed-forward of 512, context 128; PyTorch's TransformerEncoderLayer with
// norm_first, its parameter names and layouts), on inputs x [batch, 128, 128] with the loss
// mse_loss(layer(x), target), AdamW (lr 1e-3, weight decay 0.01), one step per batch, cycling
// through a fixed set of random batches made before anything is timed.
//
// Each implementation (kiln: transformer_kiln.cpp, C++20; libtorch: transformer_torch.cpp,
// C++17, which never includes kiln's headers) exports one `layer_impl`. Both start from the
// same initial weights (kiln's nn::make_params(seed)), by name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kb {

inline constexpr std::int64_t layer_width = 128, layer_heads = 4, layer_ff = 512, layer_context = 128;

/// Parameters by name ("layer.self_attn.in_proj_weight", ...), in kiln's (sorted) order, each
/// row-major as PyTorch lays it out.
using layer_params = std::vector<std::pair<std::string, std::vector<float>>>;

/// The batches of one workload: batch k is x[k], the target t[k], each [batch, context, width].
struct layer_data {
  std::string name;
  std::int64_t batch = 0, batches = 0;
  std::vector<float> x, t;  // [batches, batch, context, width]
  layer_params init;        // every implementation's initial parameters
  std::int64_t batch_floats() const { return batch * layer_context * layer_width; }
};

/// One implementation training the layer from data.init: step(k) is what is timed (forward,
/// backward, AdamW update on batch k) and returns the loss before the update; params() copies
/// the current parameters out (untimed).
struct layer_runner {
  virtual ~layer_runner() = default;
  virtual double step(std::int64_t k) = 0;
  virtual layer_params params() = 0;
};

struct layer_impl {
  const char* name;
  std::unique_ptr<layer_runner> (*make)(const layer_data&, int threads);
};

extern const layer_impl layer_kiln_impl;      // transformer_kiln.cpp
extern const layer_impl layer_libtorch_impl;  // transformer_torch.cpp, where libtorch is installed
layer_params kiln_layer_init(std::uint64_t seed);  // transformer_kiln.cpp

}  // namespace kb
