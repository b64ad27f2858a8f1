// bench/peers_blas.cpp: OpenBLAS rows of the CPU suite (matmul-type workloads only). sgemm does
// the contraction; bias and activation are a separate pass over the result with xsimd
// (cpu_simd.hpp), which is what a BLAS user writes and what kiln's fused epilogue must beat.
// Debian's OpenBLAS 0.3.21 misdetects these Xeons and falls back to SSE3 kernels unless
// OPENBLAS_CORETYPE is set before the process starts: bench_cpu.cpp sees to that.
#include <cblas.h>

#include "cpu_simd.hpp"

namespace kb {
namespace {

void sgemm(const float* a, const float* b, float* c, i64 m, i64 k, i64 n) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, a, static_cast<int>(k), b, static_cast<int>(n), 0.0f, c,
              static_cast<int>(n));
}

batch relu(batch v) { return xsimd::max(v, batch(0.0f)); }
float relu(float v) { return v > 0.0f ? v : 0.0f; }
batch identity(batch v) { return v; }
float identity(float v) { return v; }

struct blas_runner final : runner {
  blas_runner(const workload& w, int threads) : w_(w), t_(threads), y_(w.out_numel) {
    if (w.what == kind::mlp) h1_ = fbuf(w.m * mlp_hidden), h2_ = fbuf(w.m * mlp_hidden);
  }
  void run() override {
    const auto& in = w_.in;
    switch (w_.what) {
      case kind::matmul: sgemm(in[0].data(), in[1].data(), y_.data(), w_.m, w_.k, w_.n); break;
      case kind::linear_gelu:
        sgemm(in[0].data(), in[1].data(), y_.data(), w_.m, w_.k, w_.n);
        bias_act_rows(y_.data(), in[2].data(), w_.m, w_.n, t_, [](batch v) { return gelu(v); },
                      [](float v) { return gelu(v); });
        break;
      case kind::mlp: {
        const auto rb = [](batch v) { return relu(v); };
        const auto r1 = [](float v) { return relu(v); };
        sgemm(in[0].data(), in[1].data(), h1_.data(), w_.m, mlp_in, mlp_hidden);
        bias_act_rows(h1_.data(), in[2].data(), w_.m, mlp_hidden, t_, rb, r1);
        sgemm(h1_.data(), in[3].data(), h2_.data(), w_.m, mlp_hidden, mlp_hidden);
        bias_act_rows(h2_.data(), in[4].data(), w_.m, mlp_hidden, t_, rb, r1);
        sgemm(h2_.data(), in[5].data(), y_.data(), w_.m, mlp_hidden, mlp_out);
        bias_act_rows(y_.data(), in[6].data(), w_.m, mlp_out, t_, [](batch v) { return identity(v); },
                      [](float v) { return identity(v); });
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

const char* blas_why_not(kind k) {
  switch (k) {
    case kind::matmul:
    case kind::linear_gelu:
    case kind::mlp: return nullptr;
    default: return "BLAS has no such routine";
  }
}

}  // namespace

const impl openblas_impl{
    "openblas", [](int) { return openblas_get_num_threads(); },
    [](const workload& w, int threads) -> std::unique_ptr<runner> {
      if (blas_why_not(w.what)) return nullptr;
      openblas_set_num_threads(threads);
      return std::make_unique<blas_runner>(w, threads);
    },
    blas_why_not};

const char* openblas_corename() { return openblas_get_corename(); }
const char* openblas_config() { return openblas_get_config(); }

}  // namespace kb
