// bench/autodiff_torch.cpp: libtorch's rows of the autodiff suite (Debian's libtorch 1.13), eager
// autograd as a PyTorch user writes a training step: the parameters are leaf tensors that
// require gradients (from_blob over the shared buffers, like the cpu suite's peers_torch.cpp),
// the forward is addmm (x w + b) and in-place relu (nn.ReLU(inplace=True)), cross_entropy_loss
// (mean over the batch), then loss.backward(); before each step the gradients are set to None,
// as optimizer.zero_grad() does by default since PyTorch 2.0 (backward then hands its gradient
// tensors over instead of accumulating into old ones). at::set_num_threads sets its OpenMP
// intra-op threads; its GEMMs call the same OpenBLAS as the cpu suite's openblas rows, and it
// runs its AVX-512 kernels where bench_autodiff set ATEN_CPU_CAPABILITY (bench_main.hpp).
// Only ATen is included (autograd's entry points are methods of at::Tensor), C++17, apart from
// kiln's C++20 translation units.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <stdexcept>

#include "autodiff_common.hpp"

namespace kb {
namespace {

at::Tensor wrap(const fbuf& b, at::IntArrayRef sizes) {
  return at::from_blob(const_cast<float*>(b.data()), sizes, at::TensorOptions().dtype(at::kFloat));
}

struct torch_runner final : ad_runner {
  torch_runner(const ad_workload& w, int threads) {
    at::set_num_threads(threads);
    const i64 b = w.batch;
    x_ = wrap(w.x, {b, mlp_in});
    labels_ = at::from_blob(const_cast<std::int64_t*>(w.labels.data()), {b}, at::TensorOptions().dtype(at::kLong));
    params_ = {wrap(w.w1, {mlp_in, mlp_hidden}), wrap(w.b1, {mlp_hidden}), wrap(w.w2, {mlp_hidden, mlp_hidden}),
               wrap(w.b2, {mlp_hidden}),         wrap(w.w3, {mlp_hidden, mlp_out}), wrap(w.b3, {mlp_out})};
    for (at::Tensor& p : params_) p.requires_grad_(true);
  }
  void run() override {
    for (at::Tensor& p : params_) p.mutable_grad().reset();  // zero_grad(set_to_none=True)
    at::Tensor h1 = at::addmm(params_[1], x_, params_[0]);
    h1.relu_();
    at::Tensor h2 = at::addmm(params_[3], h1, params_[2]);
    h2.relu_();
    const at::Tensor logits = at::addmm(params_[5], h2, params_[4]);
    loss_ = at::cross_entropy_loss(logits, labels_);
    loss_.backward();
  }
  std::array<const float*, ad_outputs> outputs() override {
    out_[0] = loss_.detach().contiguous();
    for (int q = 1; q < ad_outputs; ++q) {
      const at::Tensor& g = params_[static_cast<std::size_t>(q - 1)].grad();
      if (!g.defined()) throw std::logic_error("libtorch autodiff bench: a parameter has no gradient");
      out_[static_cast<std::size_t>(q)] = g.contiguous();
    }
    std::array<const float*, ad_outputs> p{};
    for (int q = 0; q < ad_outputs; ++q) {
      const at::Tensor& t = out_[static_cast<std::size_t>(q)];
      if (t.scalar_type() != at::kFloat || t.numel() != ad_output_numel(q))
        throw std::logic_error("libtorch autodiff bench: an output has the wrong type or size");
      p[static_cast<std::size_t>(q)] = t.data_ptr<float>();
    }
    return p;
  }

 private:
  at::Tensor x_, labels_, loss_;
  std::vector<at::Tensor> params_;
  std::array<at::Tensor, ad_outputs> out_;
};

}  // namespace

const ad_impl ad_libtorch_impl{
    "libtorch", [](int t) { return t; },
    [](const ad_workload& w, int threads) -> std::unique_ptr<ad_runner> {
      return std::make_unique<torch_runner>(w, threads);
    }};

}  // namespace kb
