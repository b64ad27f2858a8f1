// bench/export_torch.cpp: the export suite's libtorch rows (Debian's libtorch 1.13), inference
// as a libtorch user writes it: a torch::nn::Module of torch::nn::Linear 784->512->256->10 with
// torch::relu between them, called under c10::InferenceMode on a from_blob view of the request;
// the logits are a tensor libtorch allocates (contiguous), read in place. The weights are kiln's
// (copied in, untimed). C++17, and it never includes kiln's headers.
#include <torch/torch.h>

#include <stdexcept>
#include <string>

#include "export_common.hpp"

namespace kb {
namespace {

struct mlp_module : torch::nn::Module {
  mlp_module()
      : fc0(register_module("0", torch::nn::Linear(fwd_in, fwd_h1))),
        fc1(register_module("1", torch::nn::Linear(fwd_h1, fwd_h2))),
        fc2(register_module("2", torch::nn::Linear(fwd_h2, fwd_out))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc0(x));
    x = torch::relu(fc1(x));
    return fc2(x);
  }
  torch::nn::Linear fc0, fc1, fc2;
};

struct torch_runner final : fwd_runner {
  torch_runner(const fwd_data& d, int threads) : d_(d), net_(std::make_shared<mlp_module>()) {
    at::set_num_threads(threads);
    torch::NoGradGuard no_grad;
    const auto named = net_->named_parameters();
    for (int q = 0; q < fwd_params; ++q) {
      torch::Tensor p = named[std::string(fwd_param_names[q]).substr(4)];  // "mlp.0.weight" -> "0.weight"
      const auto& v = d.params[static_cast<std::size_t>(q)];
      if (p.numel() != static_cast<std::int64_t>(v.size())) throw std::logic_error("libtorch export bench: parameter size");
      p.copy_(torch::from_blob(const_cast<float*>(v.data()), p.sizes(), torch::kFloat));
    }
    net_->eval();
  }
  void run(std::int64_t k) override {
    c10::InferenceMode guard;
    y_ = net_->forward(torch::from_blob(const_cast<float*>(d_.x.data() + k * d_.batch * fwd_in), {d_.batch, fwd_in},
                                        torch::kFloat));
  }
  const float* logits() const override { return y_.data_ptr<float>(); }

 private:
  const fwd_data& d_;
  std::shared_ptr<mlp_module> net_;
  torch::Tensor y_;
};

}  // namespace

const fwd_impl fwd_libtorch_impl{"libtorch", [](const fwd_data& d, int threads) -> std::unique_ptr<fwd_runner> {
                                   return std::make_unique<torch_runner>(d, threads);
                                 }};

}  // namespace kb
