// bench/cpu_common.hpp: what the translation units of the CPU benchmark suite (bench_cpu) share.
//
// A workload is one computation on fixed inputs (gelu(x*a+b), row softmax, ...). Each
// implementation ("impl": hand-fused, eigen, xtensor, libtorch, openblas, kiln-eager, kiln)
// lives in its own translation unit, so that the heavy headers of one peer (libtorch, Eigen's
// Tensor module, kiln's eager backend) are compiled once, apart from the others, and exports one
// `impl` value. bench_cpu.cpp makes the inputs, times every impl on the same buffers and compares
// each output with kiln's eager backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>

namespace kb {

using i64 = std::int64_t;

/// Float storage aligned to 64 bytes (a cache line and an AVX-512 register), uninitialised.
class fbuf {
 public:
  fbuf() = default;
  explicit fbuf(i64 n)
      : p_(static_cast<float*>(::operator new(static_cast<std::size_t>(n > 0 ? n : 1) * sizeof(float),
                                              std::align_val_t{64}))),
        n_(n) {}
  float* data() { return p_.get(); }
  const float* data() const { return p_.get(); }
  i64 size() const { return n_; }

 private:
  struct release {
    void operator()(float* p) const { ::operator delete(p, std::align_val_t{64}); }
  };
  std::unique_ptr<float, release> p_;
  i64 n_ = 0;
};

enum class kind { gelu_chain, gelu_tanh_chain, softmax, layer_norm, matmul, linear_gelu, mlp };

// MLP forward 784-1024-1024-10: relu after both hidden layers, plain logits out.
inline constexpr i64 mlp_in = 784, mlp_hidden = 1024, mlp_out = 10;
inline constexpr float layer_norm_eps = 1e-5f;

/// One workload with its inputs. Extents and inputs, row-major, by kind:
///   gelu_chain   n            in: x[n], a[n], b[n]                 out: gelu(x*a+b) [n]
///   gelu_tanh_chain  n        in: x[n], a[n], b[n]                 out: gelu_tanh(x*a+b) [n]
///   softmax      m, n         in: x[m,n]                           out: softmax over rows [m,n]
///   layer_norm   m, n         in: x[m,n], gamma[n], beta[n]        out: [m,n]  (eps 1e-5)
///   matmul       m, k, n      in: a[m,k], b[k,n]                   out: a b [m,n]
///   linear_gelu  m, k, n      in: x[m,k], w[k,n], bias[n]          out: gelu(x w + bias) [m,n]
///   mlp          m (batch)    in: x[m,784], w1[784,1024], b1, w2[1024,1024], b2, w3[1024,10], b3
///                             out: logits [m,10]
/// gelu is the exact form 0.5 z (1 + erf(z / sqrt 2)) everywhere (kiln's and PyTorch's default);
/// gelu_tanh its tanh approximation 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))).
struct workload {
  std::string name;
  kind what{};
  i64 m = 0, k = 0, n = 0;
  fbuf in[7];
  i64 out_numel = 0;
  fbuf ref;  // kiln eager's output on these inputs: what every other impl is compared with
};

/// One implementation set up for one workload: run() is what is timed, out() its result
/// (row-major, out_numel floats) after a run.
struct runner {
  virtual ~runner() = default;
  virtual void run() = 0;
  virtual const float* out() const = 0;
};

/// An implementation: `make` returns nullptr for a workload it does not implement.
struct impl {
  const char* name;
  int (*threads)(int requested);  // threads it actually uses when asked for `requested`
  std::unique_ptr<runner> (*make)(const workload&, int threads);
  const char* (*why_not)(kind);   // why a workload is not implemented (nullptr: it is)
};

// Defined in their own translation units (bench/CMakeLists.txt leaves out peers that are not
// installed, and KILN_BENCH_HAVE_<PEER> tells bench_cpu.cpp which ones are there).
extern const impl hand_fused_impl;  // cpu_hand.cpp
extern const impl openblas_impl;    // peers_blas.cpp
extern const impl eigen_impl;       // peers_eigen.cpp
extern const impl xtensor_impl;     // peers_xtensor.cpp
extern const impl libtorch_impl;    // peers_torch.cpp
extern const impl kiln_eager_impl;  // kiln_rows.cpp
extern const impl kiln_cpu_impl;    // kiln_rows.cpp (the CPU backend, kiln::compile)

// Physical limits (cpu_hand.cpp), timed by bench_cpu.cpp.
struct stream_arrays {
  stream_arrays(i64 n, int threads);  // three arrays of n floats, pages touched by `threads`
  fbuf a, b, c;
};
void stream_copy(stream_arrays& s, int threads);   // c = a: reads n floats, writes n
void stream_triad(stream_arrays& s, int threads);  // a = b + 3 c: reads 2n, writes n
void stream_triad_nt(stream_arrays& s, int threads);  // the same with non-temporal stores
/// A register-only loop of FMAs on full-width xsimd batches, independent accumulators, each
/// thread the same count; returns the flops it did.
double fma_loop(int threads);
/// The SIMD instruction set xsimd compiled for (xsimd::default_arch::name()).
const char* simd_arch();
/// What OpenBLAS runs (peers_blas.cpp): the core type its kernels were chosen for, its build.
const char* openblas_corename();
const char* openblas_config();
/// The kernels libtorch dispatches to ("AVX2", "AVX512"), from at::show_config (peers_torch.cpp).
const char* torch_cpu_capability();

}  // namespace kb
