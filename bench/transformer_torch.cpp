// bench/transformer_torch.cpp: libtorch's rows of the transformer suite (Debian's libtorch 1.13),
// the layer as a libtorch user writes it by hand (1.13's C++ TransformerEncoderLayer has no
// norm_first): x1 = x + out_proj(attention(norm1(x))), y = x1 + linear2(gelu(linear1(norm2(x1)))),
// attention = softmax(q k^T / sqrt(32) + causal mask) v over 4 heads of 32, q, k and v from one
// in_proj product; torch::mse_loss, torch::optim::AdamW (lr 1e-3, weight decay 0.01) and per
// batch zero_grad(), backward(), step(); the loss read back with item() (kiln's trainer returns
// it too). The weights start from kiln's initial values (copied in, untimed); the batches are
// views (from_blob) of the shared buffers. at::set_num_threads(threads) sets the intra-op
// threads. C++17, apart from kiln's C++20 TUs, and it never includes kiln's headers.
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>

#include "transformer_common.hpp"

namespace kb {
namespace {

struct torch_runner final : layer_runner {
  torch_runner(const layer_data& d, int threads) : d_(d) {
    at::set_num_threads(threads);
    std::vector<torch::Tensor> all;
    for (const auto& [name, values] : d.init) {
      auto t = torch::from_blob(const_cast<float*>(values.data()), {static_cast<std::int64_t>(values.size())},
                                torch::kFloat32)
                   .clone();
      p_[name] = t;
      names_.push_back(name);
    }
    const auto shaped = [&](const char* n, std::vector<std::int64_t> s) {
      auto& t = p_.at(std::string("layer.") + n);
      if (t.numel() != c10::multiply_integers(s)) throw std::logic_error(std::string("libtorch transformer bench: size of ") + n);
      t = t.view(s).detach().requires_grad_(true);
      all.push_back(t);
      return t;
    };
    const std::int64_t w = layer_width, f = layer_ff;
    in_w_ = shaped("self_attn.in_proj_weight", {3 * w, w});
    in_b_ = shaped("self_attn.in_proj_bias", {3 * w});
    out_w_ = shaped("self_attn.out_proj.weight", {w, w});
    out_b_ = shaped("self_attn.out_proj.bias", {w});
    l1_w_ = shaped("linear1.weight", {f, w});
    l1_b_ = shaped("linear1.bias", {f});
    l2_w_ = shaped("linear2.weight", {w, f});
    l2_b_ = shaped("linear2.bias", {w});
    n1_w_ = shaped("norm1.weight", {w});
    n1_b_ = shaped("norm1.bias", {w});
    n2_w_ = shaped("norm2.weight", {w});
    n2_b_ = shaped("norm2.bias", {w});
    if (all.size() != p_.size()) throw std::logic_error("libtorch transformer bench: parameter count mismatch");
    opt_ = std::make_unique<torch::optim::AdamW>(all, torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
    mask_ = torch::full({layer_context, layer_context}, -std::numeric_limits<float>::infinity()).triu(1);
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const std::int64_t b = x.size(0), t = layer_context, w = layer_width, h = layer_heads, dh = w / h;
    const auto heads = [&](const torch::Tensor& y) { return y.reshape({b, t, h, dh}).transpose(1, 2); };
    const auto n1 = torch::layer_norm(x, {w}, n1_w_, n1_b_, 1e-5);
    const auto qkv = torch::linear(n1, in_w_, in_b_).chunk(3, -1);
    const auto s = torch::matmul(heads(qkv[0]), heads(qkv[1]).transpose(-2, -1)) / std::sqrt(static_cast<double>(dh)) + mask_;
    const auto a = torch::matmul(torch::softmax(s, -1), heads(qkv[2])).transpose(1, 2).reshape({b, t, w});
    const auto x1 = x + torch::linear(a, out_w_, out_b_);
    const auto n2 = torch::layer_norm(x1, {w}, n2_w_, n2_b_, 1e-5);
    return x1 + torch::linear(torch::gelu(torch::linear(n2, l1_w_, l1_b_)), l2_w_, l2_b_);
  }
  double step(std::int64_t k) override {
    const std::vector<std::int64_t> shape{d_.batch, layer_context, layer_width};
    const auto x = torch::from_blob(const_cast<float*>(d_.x.data() + k * d_.batch_floats()), shape, torch::kFloat32);
    const auto t = torch::from_blob(const_cast<float*>(d_.t.data() + k * d_.batch_floats()), shape, torch::kFloat32);
    opt_->zero_grad();
    auto loss = torch::mse_loss(forward(x), t);
    loss.backward();
    opt_->step();
    return loss.item<double>();
  }
  layer_params params() override {
    layer_params v;
    for (const std::string& n : names_) {
      const auto t = p_.at(n).detach().contiguous();
      v.emplace_back(n, std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel()));
    }
    return v;
  }

 private:
  const layer_data& d_;
  std::map<std::string, torch::Tensor> p_;
  std::vector<std::string> names_;
  torch::Tensor in_w_, in_b_, out_w_, out_b_, l1_w_, l1_b_, l2_w_, l2_b_, n1_w_, n1_b_, n2_w_, n2_b_, mask_;
  std::unique_ptr<torch::optim::AdamW> opt_;
};

}  // namespace

const layer_impl layer_libtorch_impl{"libtorch", [](const layer_data& d, int threads) -> std::unique_ptr<layer_runner> {
                                       return std::make_unique<torch_runner>(d, threads);
                                     }};

}  // namespace kb
