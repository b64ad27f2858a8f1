// bench/attention_kiln.cpp: kiln's rows of the attention suite, compiled for the CPU backend
// (kiln::compile: the plan is frozen at compile time) and called with the inputs bound by type
// into the output tensors of the previous call (as the peers write into preallocated results).
// Threads: KILN_NUM_THREADS, which bench_attention and run.sh set to --threads.
// - kiln: kiln::scaled_dot_product_attention<causal>(q, k, v), which the CPU backend runs as one
//   fused primitive (FlashAttention-2's tiling, no score matrix in memory), and its gradient
//   primitive for the backward;
// - kiln-unfused: the same attention written out by hand, softmax(matmul(q * scale, k^T)
//   [where(mask, s, -inf)]) then matmul with v, the math path: two GEMMs and a softmax, the
//   [B, H, T, T] scores in memory. Its causal mask is a bool input [T, T] (j <= i), filled once.
//   kiln's decomposition recognises attention written out like this (match_attention in
//   passes/decompose.hpp) and fuses it where the extents are static, so q's length is dyn here
//   (as the tests select the math path); k, v and the mask keep T static.
// The fused primitive needs static extents, so each length is its own plan: the suite's lengths
// are listed in `lengths` below.
#include <kiln/kiln.hpp>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "attention_common.hpp"

namespace kb {
namespace {

using namespace kiln;

template <index_t T>
using Q = input<"q", f32, shape<at_batch, at_heads, T, at_dim>>;
template <index_t T>
using K = input<"k", f32, shape<at_batch, at_heads, T, at_dim>>;
template <index_t T>
using V = input<"v", f32, shape<at_batch, at_heads, T, at_dim>>;
template <index_t T>
using R = input<"r", f32, shape<at_batch, at_heads, T, at_dim>>;
template <index_t T>
using M = input<"m", boolean, shape<T, T>>;  // kiln-unfused's causal mask: true where j <= i
// kiln-unfused's q and r, the length dyn
using QD = input<"q", f32, shape<at_batch, at_heads, dyn, at_dim>>;
using RD = input<"r", f32, shape<at_batch, at_heads, dyn, at_dim>>;

template <index_t T, bool Causal>
constexpr auto fused() {
  return scaled_dot_product_attention<Causal>(Q<T>{}, K<T>{}, V<T>{});
}

template <index_t T, bool Causal>
auto unfused() {
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(at_dim)));
  auto s = matmul(QD{} * scale, transpose(K<T>{}));
  if constexpr (Causal)
    return matmul(softmax<-1>(where(M<T>{}, s, -std::numeric_limits<float>::infinity())), V<T>{});
  else
    return matmul(softmax<-1>(s), V<T>{});
}

template <index_t T, class QX, class RX, class Y>
auto with_backward(const Y& y) {
  return outputs(y, grad(sum(y * RX{}), wrt(QX{}, K<T>{}, V<T>{})));
}

// What the rows claim: the fused forward runs no GEMM kernel, the unfused one two.
static_assert(explain_type<decltype(fused<256, false>())>().matmul_kernels == 0);
static_assert(explain_type<decltype(fused<256, true>())>().matmul_kernels == 0);
static_assert(explain_type<decltype(unfused<256, false>())>().matmul_kernels == 2);
static_assert(explain_type<decltype(unfused<256, true>())>().matmul_kernels == 2);

template <int R_>
tensor<float, R_> copy_of(const fbuf& b, const std::array<index_t, R_>& shape) {
  tensor<float, R_> t(shape);
  if (t.numel() != b.size()) throw std::logic_error("kiln attention bench: input size mismatch");
  std::memcpy(t.data(), b.data(), static_cast<std::size_t>(b.size()) * sizeof(float));
  return t;
}

/// Holds the compiled graph, copies of the inputs (kiln tensors own their storage) and the
/// outputs of the last call.
template <index_t T, bool Unfused, bool Causal, bool Backward>
struct kiln_runner final : at_runner {
  using QX = std::conditional_t<Unfused, QD, Q<T>>;
  using RX = std::conditional_t<Unfused, RD, R<T>>;
  static constexpr index_t mask_t = Unfused && Causal ? T : 1;  // (only kiln-unfused reads a mask)
  explicit kiln_runner(const at_workload& w)
      : q_(copy_of<4>(w.q, {at_batch, at_heads, T, at_dim})),
        k_(copy_of<4>(w.k, {at_batch, at_heads, T, at_dim})),
        v_(copy_of<4>(w.v, {at_batch, at_heads, T, at_dim})),
        r_(copy_of<4>(w.r, {at_batch, at_heads, T, at_dim})),
        m_({mask_t, mask_t}),
        n_(w.outputs()) {
    for (index_t i = 0; i < mask_t; ++i)
      for (index_t j = 0; j < mask_t; ++j) m_(i, j) = j <= i;
  }
  void run() override {
    if constexpr (Unfused && Causal && Backward)
      fn_(QX{} = q_, K<T>{} = k_, V<T>{} = v_, RX{} = r_, M<T>{} = m_, out_);
    else if constexpr (Unfused && Causal)
      fn_(QX{} = q_, K<T>{} = k_, V<T>{} = v_, M<T>{} = m_, out_);
    else if constexpr (Backward)
      fn_(QX{} = q_, K<T>{} = k_, V<T>{} = v_, RX{} = r_, out_);
    else
      fn_(QX{} = q_, K<T>{} = k_, V<T>{} = v_, out_);
  }
  std::array<const float*, at_max_outputs> outputs() override {
    if (static_cast<int>(out_.size()) != n_) throw std::logic_error("kiln attention bench: wrong number of outputs");
    std::array<const float*, at_max_outputs> p{};
    for (int o = 0; o < n_; ++o) {
      any_tensor& t = out_[static_cast<std::size_t>(o)];
      if (t.dt() != dtype::f32 || t.numel() != at_batch * at_heads * T * at_dim)
        throw std::logic_error(std::string("kiln attention bench: output ") + at_output_names[o] +
                               " has the wrong type or size");
      t = t.contiguous();
      p[static_cast<std::size_t>(o)] = reinterpret_cast<const float*>(t.bytes());
    }
    return p;
  }

  static auto graph() {
    auto y = [] {
      if constexpr (Unfused)
        return unfused<T, Causal>();
      else
        return fused<T, Causal>();
    }();
    if constexpr (Backward)
      return with_backward<T, QX, RX>(y);
    else
      return y;
  }
  static double scratch_bytes() { return static_cast<double>(explain_type<decltype(graph())>().scratch.at(T)); }

 private:
  decltype(kiln::compile(graph())) fn_ = kiln::compile(graph());
  tensor<float, 4> q_, k_, v_, r_;
  tensor<bool, 2> m_;
  int n_;
  std::vector<any_tensor> out_;
};

// The lengths the suite runs (bench_attention.cpp's specs): --quick's, then the full ones.
using lengths = std::integer_sequence<index_t, 200, 256, 1024, 4096>;

/// f(std::type_identity<runner>) for the workload's length, causality and pass.
template <bool Unfused, class F, index_t... Ts>
auto dispatch(const at_workload& w, F f, std::integer_sequence<index_t, Ts...>) {
  decltype(f(std::type_identity<kiln_runner<200, Unfused, false, false>>{})) r{};
  bool found = false;
  auto one = [&]<index_t T>(std::integral_constant<index_t, T>) {
    if (found || w.t != T) return;
    found = true;
    if (w.causal && w.backward)
      r = f(std::type_identity<kiln_runner<T, Unfused, true, true>>{});
    else if (w.causal)
      r = f(std::type_identity<kiln_runner<T, Unfused, true, false>>{});
    else if (w.backward)
      r = f(std::type_identity<kiln_runner<T, Unfused, false, true>>{});
    else
      r = f(std::type_identity<kiln_runner<T, Unfused, false, false>>{});
  };
  (one(std::integral_constant<index_t, Ts>{}), ...);
  if (!found)
    throw std::invalid_argument("kiln attention bench: length " + std::to_string(w.t) + " is not compiled in");
  return r;
}

template <bool Unfused>
std::unique_ptr<at_runner> make(const at_workload& w, int) {
  return dispatch<Unfused>(
      w, [&w]<class Rn>(std::type_identity<Rn>) -> std::unique_ptr<at_runner> { return std::make_unique<Rn>(w); },
      lengths{});
}

template <bool Unfused>
double planned_bytes(const at_workload& w) {
  return dispatch<Unfused>(
      w, []<class Rn>(std::type_identity<Rn>) { return Rn::scratch_bytes(); }, lengths{});
}

}  // namespace

const at_impl at_kiln_impl{"kiln", [](int t) { return t; }, make<false>,
                           [](const at_workload&) -> const char* { return nullptr; }, planned_bytes<false>};

// At T = 4096 the scores are 2 GiB ([4, 8, 4096, 4096] f32) and forward and backward keep several;
// bench_attention leaves out a row whose plan would not fit in the memory available.
const at_impl at_kiln_unfused_impl{"kiln-unfused", [](int t) { return t; }, make<true>,
                                   [](const at_workload&) -> const char* { return nullptr; }, planned_bytes<true>};

}  // namespace kb
