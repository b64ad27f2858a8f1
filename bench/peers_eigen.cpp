// bench/peers_eigen.cpp: Eigen's Tensor module rows of the CPU suite, as a careful Eigen user
// writes them: TensorMaps over the shared input buffers, every assignment on a
// ThreadPoolDevice (EIGEN_USE_THREADS), results written into preallocated tensors, reductions
// kept as small [m, 1] tensors and broadcast back. Eigen evaluates each assignment as one loop,
// so a workload costs one pass per statement; the contraction is Eigen's own threaded GEMM.
#define EIGEN_USE_THREADS
#include <unsupported/Eigen/CXX11/Tensor>

#include "cpu_common.hpp"

namespace kb {
namespace {

using Eigen::Index;
template <int R>
using cmap = Eigen::TensorMap<Eigen::Tensor<const float, R, Eigen::RowMajor, Index>, Eigen::Aligned64>;
template <int R>
using map = Eigen::TensorMap<Eigen::Tensor<float, R, Eigen::RowMajor, Index>, Eigen::Aligned64>;
template <int R>
using tensor = Eigen::Tensor<float, R, Eigen::RowMajor, Index>;
using a1 = Eigen::array<Index, 1>;
using a2 = Eigen::array<Index, 2>;

const Eigen::array<Eigen::IndexPair<Index>, 1> contract_k{Eigen::IndexPair<Index>(1, 0)};

// gelu(z) = 0.5 z (1 + erf(z / sqrt 2)); Eigen vectorises erf for float (EIGEN_FAST_MATH).
template <class Z>
auto gelu(const Z& z) {
  return z * ((z * 0.70710678118654752f).erf() + 1.0f) * 0.5f;
}
// gelu_tanh(z) = 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))), as its formula reads; Eigen's
// float tanh is a rational function (one division), clamped near 8.
template <class Z>
auto gelu_tanh(const Z& z) {
  return 0.5f * z * (1.0f + (0.79788456080286536f * (z + 0.044715f * z * z * z)).tanh());
}

struct eigen_runner final : runner {
  eigen_runner(const workload& w, int threads) : w_(w), pool_(threads), dev_(&pool_, threads), y_(w.out_numel) {
    if (w.what == kind::softmax || w.what == kind::layer_norm) s1_ = tensor<2>(w.m, 1), s2_ = tensor<2>(w.m, 1);
    if (w.what == kind::mlp) h1_ = tensor<2>(w.m, mlp_hidden), h2_ = tensor<2>(w.m, mlp_hidden);
  }
  void run() override {
    const auto& in = w_.in;
    const Index m = w_.m, n = w_.n, k = w_.k;
    switch (w_.what) {
      case kind::gelu_chain: {
        cmap<1> x(in[0].data(), n), a(in[1].data(), n), b(in[2].data(), n);
        map<1> y(y_.data(), n);
        y.device(dev_) = gelu(x * a + b);
        break;
      }
      case kind::gelu_tanh_chain: {
        cmap<1> x(in[0].data(), n), a(in[1].data(), n), b(in[2].data(), n);
        map<1> y(y_.data(), n);
        y.device(dev_) = gelu_tanh(x * a + b);
        break;
      }
      case kind::softmax: {
        cmap<2> x(in[0].data(), m, n);
        map<2> y(y_.data(), m, n);
        const a1 rows{1};
        const a2 col{m, 1}, across{1, n};
        s1_.device(dev_) = x.maximum(rows).reshape(col);
        y.device(dev_) = (x - s1_.broadcast(across)).exp();
        s2_.device(dev_) = y.sum(rows).reshape(col).inverse();
        y.device(dev_) = y * s2_.broadcast(across);
        break;
      }
      case kind::layer_norm: {
        cmap<2> x(in[0].data(), m, n);
        cmap<1> g(in[1].data(), n), b(in[2].data(), n);
        map<2> y(y_.data(), m, n);
        const a1 rows{1};
        const a2 col{m, 1}, across{1, n}, row{1, n}, down{m, 1};
        s1_.device(dev_) = x.mean(rows).reshape(col);
        y.device(dev_) = x - s1_.broadcast(across);
        s2_.device(dev_) = (y.square().mean(rows).reshape(col) + layer_norm_eps).rsqrt();
        y.device(dev_) = y * s2_.broadcast(across) * g.reshape(row).broadcast(down) + b.reshape(row).broadcast(down);
        break;
      }
      case kind::matmul: {
        cmap<2> a(in[0].data(), m, k), b(in[1].data(), k, n);
        map<2> y(y_.data(), m, n);
        y.device(dev_) = a.contract(b, contract_k);
        break;
      }
      case kind::linear_gelu: {
        cmap<2> x(in[0].data(), m, k), wt(in[1].data(), k, n);
        cmap<1> bias(in[2].data(), n);
        map<2> y(y_.data(), m, n);
        y.device(dev_) = x.contract(wt, contract_k);
        y.device(dev_) = gelu(y + bias.reshape(a2{1, n}).broadcast(a2{m, 1}));
        break;
      }
      case kind::mlp: {
        cmap<2> x(in[0].data(), m, mlp_in), w1(in[1].data(), mlp_in, mlp_hidden),
            w2(in[3].data(), mlp_hidden, mlp_hidden), w3(in[5].data(), mlp_hidden, mlp_out);
        cmap<1> b1(in[2].data(), mlp_hidden), b2(in[4].data(), mlp_hidden), b3(in[6].data(), mlp_out);
        map<2> y(y_.data(), m, mlp_out);
        const a2 hrow{1, mlp_hidden}, orow{1, mlp_out}, down{m, 1};
        h1_.device(dev_) = x.contract(w1, contract_k);
        h1_.device(dev_) = (h1_ + b1.reshape(hrow).broadcast(down)).cwiseMax(0.0f);
        h2_.device(dev_) = h1_.contract(w2, contract_k);
        h2_.device(dev_) = (h2_ + b2.reshape(hrow).broadcast(down)).cwiseMax(0.0f);
        y.device(dev_) = h2_.contract(w3, contract_k) + b3.reshape(orow).broadcast(down);
        break;
      }
    }
  }
  const float* out() const override { return y_.data(); }

 private:
  const workload& w_;
  Eigen::ThreadPool pool_;
  Eigen::ThreadPoolDevice dev_;
  fbuf y_;
  tensor<2> s1_, s2_, h1_, h2_;
};

}  // namespace

const impl eigen_impl{
    "eigen", [](int t) { return t; },
    [](const workload& w, int threads) -> std::unique_ptr<runner> {
      return std::make_unique<eigen_runner>(w, threads);
    },
    [](kind) -> const char* { return nullptr; }};

}  // namespace kb
