// bench/transformer_kiln.cpp: kiln's rows of the transformer suite, written as
// examples/train_char_lm.cpp writes its layers: nn::transformer_encoder_layer with the example's
// options (causal, pre-norm, GELU), in training mode, the loss mse_loss(layer(x, nn::train), t)
// and optim::trainer with optim::adamw{.lr = 1e-3, .weight_decay = 0.01}, whose step() runs the
// one compiled plan of forward, backward and update (fused attention and its gradient included)
// on the CPU backend. The batch is dyn: one plan serves every workload.
#include <kiln/kiln.hpp>
#include <kiln/nn/transformer.hpp>
#include <kiln/optim.hpp>

#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "transformer_common.hpp"

namespace kb {
namespace {

using namespace kiln;

constexpr nn::attention_options layer_opts{.causal = true, .norm_first = true, .gelu = true};
using layer = nn::transformer_encoder_layer<"layer", layer_width, layer_heads, layer_ff, layer_opts>;
using X = input<"x", f32, shape<dyn, layer_context, layer_width>>;
using Target = input<"t", f32, shape<dyn, layer_context, layer_width>>;
constexpr auto loss = mse_loss(layer{}(X{}, nn::train), Target{});
constexpr optim::adamw adamw{.lr = 1e-3, .weight_decay = 0.01};
using trainer_t = decltype(optim::trainer(loss, layer::params{}, adamw, nn::state_dict{}));

nn::state_dict to_state_dict(const layer_params& v) {
  nn::state_dict sd = nn::zeros_for<layer::params>();
  if (v.size() != sd.size()) throw std::logic_error("kiln transformer bench: parameter count mismatch");
  for (const auto& [name, values] : v) {
    any_tensor& t = sd.at(name);
    if (static_cast<index_t>(values.size()) != t.numel())
      throw std::logic_error("kiln transformer bench: size mismatch of " + name);
    std::memcpy(t.data<float>(), values.data(), values.size() * sizeof(float));
  }
  return sd;
}

layer_params from_state_dict(const nn::state_dict& sd) {
  layer_params v;
  for (const auto& [name, t] : sd) {
    if (!t.is_contiguous()) throw std::logic_error("kiln transformer bench: layout of " + name);
    v.emplace_back(name, std::vector<float>(t.data<float>(), t.data<float>() + t.numel()));
  }
  return v;
}

struct kiln_runner final : layer_runner {
  kiln_runner(const layer_data& d, int threads) : tr_(loss, layer::params{}, adamw, to_state_dict(d.init)) {
    cpu::set_num_threads(threads);
    // kiln tensors own their storage: a copy of every batch, made here, untimed
    const dims shape{d.batch, layer_context, layer_width};
    for (std::int64_t k = 0; k < d.batches; ++k) {
      any_tensor x(dtype::f32, shape), t(dtype::f32, shape);
      const auto n = static_cast<std::size_t>(d.batch_floats());
      std::memcpy(x.data<float>(), d.x.data() + k * d.batch_floats(), n * sizeof(float));
      std::memcpy(t.data<float>(), d.t.data() + k * d.batch_floats(), n * sizeof(float));
      xs_.push_back(std::move(x));
      ts_.push_back(std::move(t));
    }
  }
  double step(std::int64_t k) override {
    const auto i = static_cast<std::size_t>(k);
    return tr_.step({{"x", xs_[i]}, {"t", ts_[i]}});
  }
  layer_params params() override { return from_state_dict(tr_.params()); }

 private:
  trainer_t tr_;
  std::vector<any_tensor> xs_, ts_;
};

}  // namespace

layer_params kiln_layer_init(std::uint64_t seed) { return from_state_dict(nn::make_params<layer>(seed)); }

const layer_impl layer_kiln_impl{"kiln", [](const layer_data& d, int threads) -> std::unique_ptr<layer_runner> {
                                   return std::make_unique<kiln_runner>(d, threads);
                                 }};

}  // namespace kb
