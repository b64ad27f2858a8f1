// bench/train_torch.cpp: libtorch's rows of the train suite (Debian's libtorch 1.13), the training
// loop as a libtorch user writes it: a torch::nn::Module with torch::nn::Linear 784->512->256->10
// and torch::relu between them, torch::nn::functional::cross_entropy (mean over the batch),
// torch::optim::Adam with lr 1e-3, and per batch zero_grad(), backward(), step(); the loss is
// read back with item() (kiln's trainer returns it too). The weights start from kiln's initial
// values (copied in, untimed); the batches are views (from_blob) of the shared buffers.
// at::set_num_threads(threads) sets the intra-op threads. C++17, apart from kiln's C++20 TUs,
// and it never includes kiln's headers.
#include <torch/torch.h>

#include <stdexcept>
#include <string>

#include "train_common.hpp"

namespace kb {
namespace {

struct mlp_module : torch::nn::Module {
  mlp_module()
      : fc0(register_module("0", torch::nn::Linear(train_in, train_h1))),
        fc1(register_module("1", torch::nn::Linear(train_h1, train_h2))),
        fc2(register_module("2", torch::nn::Linear(train_h2, train_out))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(fc0(x));
    x = torch::relu(fc1(x));
    return fc2(x);
  }
  torch::nn::Linear fc0, fc1, fc2;
};

// "mlp.0.weight" -> "0.weight", the name within the module
std::string local_name(int q) { return std::string(train_param_names[q]).substr(4); }

struct torch_runner final : train_runner {
  torch_runner(const train_data& d, int threads) : net_(std::make_shared<mlp_module>()) {
    at::set_num_threads(threads);
    {
      torch::NoGradGuard no_grad;
      const auto named = net_->named_parameters();
      for (int q = 0; q < train_params; ++q) {
        torch::Tensor p = named[local_name(q)];
        if (p.numel() != train_param_numel(q)) throw std::logic_error("libtorch train bench: parameter size mismatch");
        const auto& v = d.init[static_cast<std::size_t>(q)];
        p.copy_(torch::from_blob(const_cast<float*>(v.data()), p.sizes(), torch::kFloat));
      }
    }
    for (std::int64_t k = 0; k < d.batches; ++k) {
      xs_.push_back(torch::from_blob(const_cast<float*>(d.x.data() + k * d.batch * train_in), {d.batch, train_in},
                                     torch::kFloat));
      ys_.push_back(torch::from_blob(const_cast<std::int64_t*>(d.y.data() + k * d.batch), {d.batch}, torch::kLong));
    }
    opt_ = std::make_unique<torch::optim::Adam>(net_->parameters(), torch::optim::AdamOptions(1e-3));
  }
  double step(std::int64_t k) override {
    const auto i = static_cast<std::size_t>(k);
    opt_->zero_grad();
    const torch::Tensor loss = torch::nn::functional::cross_entropy(net_->forward(xs_[i]), ys_[i]);
    loss.backward();
    opt_->step();
    return loss.item<double>();
  }
  train_param_values params() override {
    train_param_values v;
    const auto named = net_->named_parameters();
    for (int q = 0; q < train_params; ++q) {
      const torch::Tensor p = named[local_name(q)].detach().contiguous();
      v[static_cast<std::size_t>(q)].assign(p.data_ptr<float>(), p.data_ptr<float>() + p.numel());
    }
    return v;
  }

 private:
  std::shared_ptr<mlp_module> net_;
  std::unique_ptr<torch::optim::Adam> opt_;
  std::vector<torch::Tensor> xs_, ys_;
};

}  // namespace

const train_impl train_libtorch_impl{"libtorch", [](const train_data& d, int threads) -> std::unique_ptr<train_runner> {
                                       return std::make_unique<torch_runner>(d, threads);
                                     }};

}  // namespace kb
