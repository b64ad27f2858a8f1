// bench/peers_xtensor.cpp: xtensor rows of the CPU suite, with xsimd (XTENSOR_USE_XSIMD) and
// OpenMP (XTENSOR_USE_OPENMP: xtensor splits a contiguous same-shape assignment over OpenMP
// threads; broadcasting assignments and reducers run on one thread, and broadcasting ones are
// scalar). Adaptors over the shared input buffers, `noalias` assignments into preallocated
// results, reducers evaluated at once; row-wise work as an OpenMP loop over rows.
// xtensor has no GEMM of its own (xtensor-blas, not packaged in Debian, calls BLAS): plain
// matmul is not an xtensor row; linear_gelu and mlp call OpenBLAS sgemm, as xtensor-blas
// would, and do bias and activation with xtensor expressions.
#include <cblas.h>
#include <omp.h>

#include <xtensor/xadapt.hpp>
#include <xtensor/xmath.hpp>
#include <xtensor/xnoalias.hpp>
#include <xtensor/xreducer.hpp>
#include <xtensor/xtensor.hpp>

#include "cpu_common.hpp"

namespace kb {
namespace {

using sz = std::size_t;

template <std::size_t R>
auto view(const fbuf& b, const std::array<sz, R>& shape) {
  sz n = 1;
  for (sz e : shape) n *= e;
  return xt::adapt(const_cast<float*>(b.data()), n, xt::no_ownership(), shape);
}

template <class Z>
auto gelu(const Z& z) {
  return 0.5f * z * (1.0f + xt::erf(z * 0.70710678118654752f));
}
template <class Z>
auto gelu_tanh(const Z& z) {
  return 0.5f * z * (1.0f + xt::tanh(0.79788456080286536f * (z + 0.044715f * z * z * z)));
}

void sgemm(const float* a, const float* b, float* c, i64 m, i64 k, i64 n) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, a, static_cast<int>(k), b, static_cast<int>(n), 0.0f, c,
              static_cast<int>(n));
}

// A contiguous row of a row-major [*, n] buffer as a 1-D xtensor adaptor.
auto row(float* p, sz n) { return xt::adapt(p, n, xt::no_ownership(), std::array{n}); }

struct xtensor_runner final : runner {
  xtensor_runner(const workload& w, int threads) : w_(w), t_(threads), y_(w.out_numel) {
    omp_set_num_threads(threads);
    if (w.what == kind::mlp) h1_ = fbuf(w.m * mlp_hidden), h2_ = fbuf(w.m * mlp_hidden);
  }

  // Row-wise workloads: an OpenMP loop over rows, xtensor expressions on each row (contiguous
  // and of one shape, so they take xtensor's SIMD path). The whole-matrix form, with [m, 1]
  // reductions broadcast back, goes through xtensor's scalar single-threaded broadcasting
  // assignment: 4-15x slower here (softmax 509x1001: 8-32 ms against 2 ms, loaded machine).
  template <class F>
  void rows(sz m, F&& f) {
#pragma omp parallel for schedule(dynamic, 16) num_threads(t_)
    for (i64 r = 0; r < i64(m); ++r) f(sz(r));
  }

  void run() override {
    const auto& in = w_.in;
    const sz m = sz(w_.m), n = sz(w_.n);
    switch (w_.what) {
      case kind::gelu_chain: {
        auto x = view(in[0], std::array{n}), a = view(in[1], std::array{n}), b = view(in[2], std::array{n});
        auto y = view(y_, std::array{n});
        xt::noalias(y) = gelu(x * a + b);
        break;
      }
      case kind::gelu_tanh_chain: {
        auto x = view(in[0], std::array{n}), a = view(in[1], std::array{n}), b = view(in[2], std::array{n});
        auto y = view(y_, std::array{n});
        xt::noalias(y) = gelu_tanh(x * a + b);
        break;
      }
      case kind::softmax:
        rows(m, [&](sz r) {
          auto x = row(const_cast<float*>(in[0].data()) + r * n, n);
          auto y = row(y_.data() + r * n, n);
          const float mx = xt::amax(x, xt::evaluation_strategy::immediate)();
          xt::noalias(y) = xt::exp(x - mx);
          const float inv = 1.0f / xt::sum(y, xt::evaluation_strategy::immediate)();
          y *= inv;
        });
        break;
      case kind::layer_norm: {
        auto g = view(in[1], std::array{n}), b = view(in[2], std::array{n});
        rows(m, [&](sz r) {
          auto x = row(const_cast<float*>(in[0].data()) + r * n, n);
          auto y = row(y_.data() + r * n, n);
          const float mean = xt::mean(x, xt::evaluation_strategy::immediate)();
          xt::noalias(y) = x - mean;
          const float var = xt::mean(xt::square(y), xt::evaluation_strategy::immediate)();
          const float rstd = 1.0f / std::sqrt(var + layer_norm_eps);
          xt::noalias(y) = y * rstd * g + b;
        });
        break;
      }
      case kind::linear_gelu: {
        sgemm(in[0].data(), in[1].data(), y_.data(), w_.m, w_.k, w_.n);
        auto bias = view(in[2], std::array{n});
        rows(m, [&](sz r) {
          auto y = row(y_.data() + r * n, n);
          xt::noalias(y) = gelu(y + bias);
        });
        break;
      }
      case kind::mlp: {
        const sz h = sz(mlp_hidden), o = sz(mlp_out);
        auto b1 = view(in[2], std::array{h}), b2 = view(in[4], std::array{h}), b3 = view(in[6], std::array{o});
        sgemm(in[0].data(), in[1].data(), h1_.data(), w_.m, mlp_in, mlp_hidden);
        rows(m, [&](sz r) {
          auto v = row(h1_.data() + r * h, h);
          xt::noalias(v) = xt::maximum(v + b1, 0.0f);
        });
        sgemm(h1_.data(), in[3].data(), h2_.data(), w_.m, mlp_hidden, mlp_hidden);
        rows(m, [&](sz r) {
          auto v = row(h2_.data() + r * h, h);
          xt::noalias(v) = xt::maximum(v + b2, 0.0f);
        });
        sgemm(h2_.data(), in[5].data(), y_.data(), w_.m, mlp_hidden, mlp_out);
        rows(m, [&](sz r) { row(y_.data() + r * o, o) += b3; });
        break;
      }
      default: break;
    }
  }
  const float* out() const override { return y_.data(); }

 private:
  const workload& w_;
  int t_;
  fbuf y_, h1_, h2_;
};

const char* xtensor_why_not(kind k) {
  return k == kind::matmul ? "xtensor has no GEMM (xtensor-blas is not in Debian and would call the same OpenBLAS)"
                           : nullptr;
}

}  // namespace

const impl xtensor_impl{
    "xtensor", [](int t) { return t; },
    [](const workload& w, int threads) -> std::unique_ptr<runner> {
      if (xtensor_why_not(w.what)) return nullptr;
      return std::make_unique<xtensor_runner>(w, threads);
    },
    xtensor_why_not};

}  // namespace kb
