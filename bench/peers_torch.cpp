// bench/peers_torch.cpp: libtorch eager rows of the CPU suite (Debian's libtorch 1.13), written
// as a performance-minded PyTorch user would: from_blob over the shared input buffers, the
// out= and in-place variants into preallocated results where they are real kernels (a fresh
// 64 MiB result per call adds page faults), addcmul for x*a+b (one kernel instead of two), the
// fused softmax and layer_norm kernels, addmm for matmul + bias. at::set_num_threads
// sets its OpenMP intra-op threads; its GEMMs call the same OpenBLAS as the openblas rows.
// libtorch 1.13 runs its AVX2 kernels on AVX-512 machines unless ATEN_CPU_CAPABILITY=avx512 is
// set (bench_cpu sets it where the CPU has AVX-512; the report prints which ran).
// Only ATen is included: torch/torch.h would double the compile time of this file.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "cpu_common.hpp"

namespace kb {
namespace {

at::Tensor wrap(const fbuf& b, at::IntArrayRef sizes) {
  return at::from_blob(const_cast<float*>(b.data()), sizes, at::TensorOptions().dtype(at::kFloat));
}

struct torch_runner final : runner {
  torch_runner(const workload& w, int threads) : w_(w) {
    at::set_num_threads(threads);
    const auto& in = w.in;
    const i64 m = w.m, n = w.n, k = w.k;
    switch (w.what) {
      case kind::gelu_chain:
      case kind::gelu_tanh_chain:
        x_ = {wrap(in[0], {n}), wrap(in[1], {n}), wrap(in[2], {n})};
        y_ = at::empty({n});
        break;
      case kind::softmax:
        x_ = {wrap(in[0], {m, n})};
        y_ = at::empty({m, n});
        break;
      case kind::layer_norm:
        x_ = {wrap(in[0], {m, n}), wrap(in[1], {n}), wrap(in[2], {n})};
        break;
      case kind::matmul:
        x_ = {wrap(in[0], {m, k}), wrap(in[1], {k, n})};
        y_ = at::empty({m, n});
        break;
      case kind::linear_gelu:
        x_ = {wrap(in[0], {m, k}), wrap(in[1], {k, n}), wrap(in[2], {n})};
        y_ = at::empty({m, n});
        break;
      case kind::mlp:
        x_ = {wrap(in[0], {m, mlp_in}),          wrap(in[1], {mlp_in, mlp_hidden}),
              wrap(in[2], {mlp_hidden}),         wrap(in[3], {mlp_hidden, mlp_hidden}),
              wrap(in[4], {mlp_hidden}),         wrap(in[5], {mlp_hidden, mlp_out}),
              wrap(in[6], {mlp_out})};
        h1_ = at::empty({m, mlp_hidden});
        h2_ = at::empty({m, mlp_hidden});
        y_ = at::empty({m, mlp_out});
        break;
    }
  }
  void run() override {
    const i64 n = w_.n;
    switch (w_.what) {
      case kind::gelu_chain:
        at::addcmul_out(y_, x_[2], x_[0], x_[1]);  // b + x * a
        at::gelu_(y_);
        break;
      case kind::gelu_tanh_chain:
        at::addcmul_out(y_, x_[2], x_[0], x_[1]);
        at::gelu_(y_, "tanh");
        break;
      case kind::softmax: at::softmax_out(y_, x_[0], 1); break;
      case kind::layer_norm:
        // native_layer_norm.out is a generated wrapper (CompositeExplicitAutograd) that computes
        // into fresh tensors and copies: slower than the functional form it wraps
        y_ = std::get<0>(at::native_layer_norm(x_[0], {n}, x_[1], x_[2], static_cast<double>(layer_norm_eps)));
        break;
      case kind::matmul: at::mm_out(y_, x_[0], x_[1]); break;
      case kind::linear_gelu:
        at::addmm_out(y_, x_[2], x_[0], x_[1]);
        at::gelu_(y_);
        break;
      case kind::mlp:
        at::addmm_out(h1_, x_[2], x_[0], x_[1]);
        at::relu_(h1_);
        at::addmm_out(h2_, x_[4], h1_, x_[3]);
        at::relu_(h2_);
        at::addmm_out(y_, x_[6], h2_, x_[5]);
        break;
    }
  }
  const float* out() const override { return y_.data_ptr<float>(); }

 private:
  const workload& w_;
  std::vector<at::Tensor> x_;
  at::Tensor y_, h1_, h2_;
};

}  // namespace

const impl libtorch_impl{
    "libtorch", [](int t) { return t; },
    [](const workload& w, int threads) -> std::unique_ptr<runner> {
      return std::make_unique<torch_runner>(w, threads);
    },
    [](kind) -> const char* { return nullptr; }};

const char* torch_cpu_capability() {
  static const std::string cap = [] {
    const std::string cfg = at::show_config();
    const std::string key = "CPU capability usage: ";
    const auto at = cfg.find(key);
    if (at == std::string::npos) return std::string("?");
    const auto from = at + key.size();
    return cfg.substr(from, cfg.find('\n', from) - from);
  }();
  return cap.c_str();
}

}  // namespace kb
