// bench/cpu_hand.cpp: the roofline references of the CPU suite. One plain, well-written loop
// per memory-bound workload: a single pass over memory (a softmax or layer_norm row is re-read
// from L1/L2, not from memory), xsimd batches, OpenMP threads over contiguous chunks. Also the
// physical limits: STREAM-style copy and triad, and a register-only FMA loop.
#include <limits>

#include "cpu_simd.hpp"

namespace kb {
namespace {

// out = act(x * a + b), act gelu or gelu_tanh (cpu_simd.hpp): reads 3 floats, writes 1, per
// element. Where the arrays are far larger than the caches (64 MiB of output and more: the
// full-size workload), with non-temporal stores: an ordinary store would first read its line; at
// --quick sizes the output stays in cache.
template <class Act>
void gelu_chain(const float* x, const float* a, const float* b, float* y, i64 n, int threads, Act act) {
  const bool stream = n >= (i64(1) << 24);
  parallel_chunks(n, task_floats, threads, [&](i64 i0, i64 i1) {
    i64 i = i0;  // a multiple of task_floats: aligned like the buffers
    for (; i + lanes <= i1; i += lanes) {
      const batch z = xsimd::fma(batch::load_aligned(x + i), batch::load_aligned(a + i), batch::load_aligned(b + i));
      if (stream) store_stream(y + i, act(z));
      else act(z).store_aligned(y + i);
    }
    for (; i < i1; ++i) y[i] = act(x[i] * a[i] + b[i]);
    stream_fence();
  });
}

float hmax(batch v) {
  alignas(64) float t[lanes];
  v.store_aligned(t);
  return *std::max_element(t, t + lanes);
}

// Each row: its maximum (read from memory), exp(x - max) stored and summed (x re-read from
// L1/L2, the row is 16 KiB at n = 4096), then scaled in place (y from L1/L2).
void softmax(const float* x, float* y, i64 m, i64 n, int threads) {
  parallel_chunks(m, task_rows(n), threads, [&](i64 r0, i64 r1) {
    const i64 nv = n - n % lanes;
    for (i64 r = r0; r < r1; ++r) {
      const float* xr = x + r * n;
      float* yr = y + r * n;
      batch vm(-std::numeric_limits<float>::infinity());
      for (i64 j = 0; j < nv; j += lanes) vm = xsimd::max(vm, batch::load_unaligned(xr + j));
      float mx = nv ? hmax(vm) : -std::numeric_limits<float>::infinity();
      for (i64 j = nv; j < n; ++j) mx = std::max(mx, xr[j]);
      batch vs(0.0f);
      for (i64 j = 0; j < nv; j += lanes) {
        const batch e = xsimd::exp(batch::load_unaligned(xr + j) - batch(mx));
        e.store_unaligned(yr + j);
        vs += e;
      }
      float s = xsimd::hadd(vs);
      for (i64 j = nv; j < n; ++j) s += yr[j] = std::exp(xr[j] - mx);
      const batch inv(1.0f / s);
      for (i64 j = 0; j < nv; j += lanes) (batch::load_unaligned(yr + j) * inv).store_unaligned(yr + j);
      for (i64 j = nv; j < n; ++j) yr[j] *= 1.0f / s;
    }
  });
}

// Each row: mean, then the biased variance about it (two passes over the row in cache; the
// one-pass sum of squares loses digits when |mean| >> spread), then one pass writing y.
void layer_norm(const float* x, const float* g, const float* b, float* y, i64 m, i64 n, int threads) {
  parallel_chunks(m, task_rows(n), threads, [&](i64 r0, i64 r1) {
    const i64 nv = n - n % lanes;
    for (i64 r = r0; r < r1; ++r) {
      const float* xr = x + r * n;
      float* yr = y + r * n;
      batch vs(0.0f);
      for (i64 j = 0; j < nv; j += lanes) vs += batch::load_unaligned(xr + j);
      float s = xsimd::hadd(vs);
      for (i64 j = nv; j < n; ++j) s += xr[j];
      const float mean = s / static_cast<float>(n);
      batch vq(0.0f);
      for (i64 j = 0; j < nv; j += lanes) {
        const batch d = batch::load_unaligned(xr + j) - batch(mean);
        vq = xsimd::fma(d, d, vq);
      }
      float q = xsimd::hadd(vq);
      for (i64 j = nv; j < n; ++j) q += (xr[j] - mean) * (xr[j] - mean);
      const float rstd = 1.0f / std::sqrt(q / static_cast<float>(n) + layer_norm_eps);
      for (i64 j = 0; j < nv; j += lanes) {
        const batch d = (batch::load_unaligned(xr + j) - batch(mean)) * batch(rstd);
        xsimd::fma(d, batch::load_unaligned(g + j), batch::load_unaligned(b + j)).store_unaligned(yr + j);
      }
      for (i64 j = nv; j < n; ++j) yr[j] = (xr[j] - mean) * rstd * g[j] + b[j];
    }
  });
}

struct hand_runner final : runner {
  hand_runner(const workload& w, int threads) : w_(w), t_(threads), y_(w.out_numel) {}
  void run() override {
    switch (w_.what) {
      case kind::gelu_chain:
        gelu_chain(w_.in[0].data(), w_.in[1].data(), w_.in[2].data(), y_.data(), w_.n, t_, [](auto z) { return gelu(z); });
        break;
      case kind::gelu_tanh_chain:
        gelu_chain(w_.in[0].data(), w_.in[1].data(), w_.in[2].data(), y_.data(), w_.n, t_,
                   [](auto z) { return gelu_tanh(z); });
        break;
      case kind::softmax: softmax(w_.in[0].data(), y_.data(), w_.m, w_.n, t_); break;
      case kind::layer_norm:
        layer_norm(w_.in[0].data(), w_.in[1].data(), w_.in[2].data(), y_.data(), w_.m, w_.n, t_);
        break;
      default: break;
    }
  }
  const float* out() const override { return y_.data(); }

 private:
  const workload& w_;
  int t_;
  fbuf y_;
};

const char* hand_why_not(kind k) {
  switch (k) {
    case kind::gelu_chain:
    case kind::gelu_tanh_chain:
    case kind::softmax:
    case kind::layer_norm: return nullptr;
    default: return "a GEMM is not a hand-written loop: the openblas row is the reference, sgemm peak the limit";
  }
}

}  // namespace

const impl hand_fused_impl{
    "hand-fused", [](int t) { return t; },
    [](const workload& w, int threads) -> std::unique_ptr<runner> {
      if (hand_why_not(w.what)) return nullptr;
      return std::make_unique<hand_runner>(w, threads);
    },
    hand_why_not};

// ---- physical limits ------------------------------------------------------------------------

stream_arrays::stream_arrays(i64 n, int threads) : a(n), b(n), c(n) {
  // touch every page before timing (one NUMA node here, so which thread does it does not matter)
  parallel_chunks(n, task_floats, threads, [&](i64 i0, i64 i1) {
    for (i64 i = i0; i < i1; ++i) a.data()[i] = 1.0f, b.data()[i] = 2.0f, c.data()[i] = 0.5f;
  });
}

// Plain loops with ordinary stores, as compilers write them (each store that misses first reads
// its line: 4 bytes moved per 3 counted in triad), and triad with non-temporal stores (what
// kiln's large pointwise kernels and the hand-fused gelu do), so that the limit is the faster.
void stream_copy(stream_arrays& s, int threads) {
  const float* __restrict a = s.a.data();
  float* __restrict c = s.c.data();
  parallel_chunks(s.a.size(), task_floats, threads, [&](i64 i0, i64 i1) {
#pragma omp simd
    for (i64 i = i0; i < i1; ++i) c[i] = a[i];
  });
}

void stream_triad(stream_arrays& s, int threads) {
  float* __restrict a = s.a.data();
  const float* __restrict b = s.b.data();
  const float* __restrict c = s.c.data();
  parallel_chunks(s.a.size(), task_floats, threads, [&](i64 i0, i64 i1) {
#pragma omp simd
    for (i64 i = i0; i < i1; ++i) a[i] = b[i] + 3.0f * c[i];
  });
}

void stream_triad_nt(stream_arrays& s, int threads) {
  float* a = s.a.data();
  const float* b = s.b.data();
  const float* c = s.c.data();
  parallel_chunks(s.a.size(), task_floats, threads, [&](i64 i0, i64 i1) {
    i64 i = i0;  // a multiple of task_floats: aligned like the arrays
    for (; i + lanes <= i1; i += lanes)
      store_stream(a + i, xsimd::fma(batch(3.0f), batch::load_aligned(c + i), batch::load_aligned(b + i)));
    for (; i < i1; ++i) a[i] = b[i] + 3.0f * c[i];
    stream_fence();
  });
}

// Independent accumulators hide the FMA latency (4 cycles) on two FMA ports (8 needed); acc * m
// + c converges to 1 (no overflow, no denormals), and the sum is stored so nothing is dropped.
// 16 with 32 vector registers; 12 with 16 (AVX2, SSE): 16 accumulators and the two constants
// do not fit there, and the spills halved the "peak" (Zen 3, 2 threads: 8 accumulators 165,
// 10-14 190-197, 16 77-112 GFLOP/s), which put GEMMs at 127% of it.
double fma_loop(int threads) {
#if defined(__AVX512F__) || defined(__aarch64__)
  constexpr int acc_count = 16;
#else
  constexpr int acc_count = 12;
#endif
  constexpr i64 iters = 1 << 22;
  volatile float sink = 0;
#pragma omp parallel num_threads(threads)
  {
    batch acc[acc_count];
    for (int j = 0; j < acc_count; ++j) acc[j] = batch(1.0f + 0.01f * static_cast<float>(j + omp_get_thread_num()));
    const batch mul(0.999f), add(0.001f);
    for (i64 i = 0; i < iters; ++i) {
#pragma GCC unroll 16
      for (int j = 0; j < acc_count; ++j) acc[j] = xsimd::fma(acc[j], mul, add);
    }
    batch total(0.0f);
    for (int j = 0; j < acc_count; ++j) total += acc[j];
    const float t = xsimd::hadd(total);
#pragma omp critical
    sink = sink + t;
  }
  (void)sink;
  return 2.0 * static_cast<double>(lanes) * acc_count * static_cast<double>(iters) * threads;
}

const char* simd_arch() { return xsimd::default_arch::name(); }

}  // namespace kb
