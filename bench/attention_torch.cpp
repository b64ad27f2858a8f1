// bench/attention_torch.cpp: libtorch's rows of the attention suite (Debian's libtorch 1.13), eager,
// as a PyTorch user writes attention: q, k, v wrap the shared buffers (from_blob, like the other
// suites' libtorch rows) and, for the backward, are leaf tensors that require gradients; before
// each step their gradients are set to None (zero_grad(set_to_none=True)); the backward is
// sum(y * r).backward(), the same loss as kiln's rows.
// - libtorch: matmul(q * scale, k^T), masked_fill_ of the causal mask (a [T, T] bool buffer made
//   once, true above the diagonal; in place: matmul's backward does not read its output),
//   softmax, matmul with v, the [B, H, T, T] scores in memory;
// - libtorch-sdpa: libtorch's own attention op, at::scaled_dot_product_attention where the
//   headers have it (2.0 on), else 1.13's at::_scaled_dot_product_attention. In 1.13 the CPU has
//   no fused kernel behind it: it runs the math composite (matmul, softmax, matmul), and its
//   errors against the reference are the libtorch row's.
// at::set_num_threads sets its OpenMP intra-op threads; its GEMMs call OpenBLAS. Only ATen is
// included, C++17, apart from kiln's C++20 translation units.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include "attention_common.hpp"

#if __has_include(<ATen/ops/scaled_dot_product_attention.h>)
#define KILN_BENCH_TORCH_SDPA 2
#elif __has_include(<ATen/ops/_scaled_dot_product_attention.h>)
#define KILN_BENCH_TORCH_SDPA 1
#else
#define KILN_BENCH_TORCH_SDPA 0
#endif

namespace kb {
namespace {

at::Tensor wrap(const fbuf& b, i64 t) {
  return at::from_blob(const_cast<float*>(b.data()), {at_batch, at_heads, t, at_dim},
                       at::TensorOptions().dtype(at::kFloat));
}

template <bool Sdpa>
struct torch_runner final : at_runner {
  torch_runner(const at_workload& w, int threads) : w_(w) {
    at::set_num_threads(threads);
    q_ = wrap(w.q, w.t), k_ = wrap(w.k, w.t), v_ = wrap(w.v, w.t), r_ = wrap(w.r, w.t);
    if (w.backward)
      for (at::Tensor* p : {&q_, &k_, &v_}) p->requires_grad_(true);
    if (!Sdpa && w.causal) mask_ = at::ones({w.t, w.t}, at::TensorOptions().dtype(at::kBool)).triu(1);
  }
  void run() override {
    if (w_.backward)
      for (at::Tensor* p : {&q_, &k_, &v_}) p->mutable_grad().reset();
    y_ = forward();
    if (w_.backward) at::sum(y_ * r_).backward();
  }
  std::array<const float*, at_max_outputs> outputs() override {
    out_[0] = y_.detach().contiguous();
    if (w_.backward) {
      const at::Tensor* in[3] = {&q_, &k_, &v_};
      for (int o = 1; o < 4; ++o) {
        const at::Tensor& g = in[o - 1]->grad();
        if (!g.defined()) throw std::logic_error("libtorch attention bench: an input has no gradient");
        out_[o] = g.contiguous();
      }
    }
    std::array<const float*, at_max_outputs> p{};
    for (int o = 0; o < w_.outputs(); ++o) {
      if (out_[o].scalar_type() != at::kFloat || out_[o].numel() != w_.numel())
        throw std::logic_error("libtorch attention bench: an output has the wrong type or size");
      p[static_cast<std::size_t>(o)] = out_[o].data_ptr<float>();
    }
    return p;
  }

 private:
  at::Tensor forward() {
    if constexpr (Sdpa) {
#if KILN_BENCH_TORCH_SDPA == 2
      return at::scaled_dot_product_attention(q_, k_, v_, {}, 0.0, w_.causal);
#elif KILN_BENCH_TORCH_SDPA == 1
      return std::get<0>(at::_scaled_dot_product_attention(q_, k_, v_, {}, 0.0, false, w_.causal));
#else
      throw std::logic_error("libtorch attention bench: no scaled_dot_product_attention in this libtorch");
#endif
    } else {
      const double scale = 1.0 / std::sqrt(static_cast<double>(at_dim));
      at::Tensor s = at::matmul(q_ * scale, k_.transpose(-2, -1));
      if (w_.causal) s.masked_fill_(mask_, -std::numeric_limits<float>::infinity());
      return at::matmul(at::softmax(s, -1), v_);
    }
  }

  const at_workload& w_;
  at::Tensor q_, k_, v_, r_, mask_, y_;
  at::Tensor out_[at_max_outputs];
};

template <bool Sdpa>
std::unique_ptr<at_runner> make(const at_workload& w, int threads) {
  return std::make_unique<torch_runner<Sdpa>>(w, threads);
}

const char* measured(const at_workload&) { return nullptr; }
double unknown(const at_workload&) { return -1; }

}  // namespace

const at_impl at_libtorch_impl{"libtorch", [](int t) { return t; }, make<false>, measured, unknown};

const at_impl at_libtorch_sdpa_impl{
    "libtorch-sdpa", [](int t) { return t; }, make<true>,
    [](const at_workload&) -> const char* {
      return KILN_BENCH_TORCH_SDPA ? nullptr : "this libtorch has no scaled_dot_product_attention";
    },
    unknown};

}  // namespace kb
