// bench/attention_common.hpp: what the translation units of the attention benchmark suite
// (bench_attention) share. One problem: scaled dot-product attention, f32, q, k, v [B, H, T, D]
// (B = 4, H = 8, D = 64), scale 1 / sqrt(D), causal or not,
//
//   y = softmax(q k^T / sqrt(D) [causal: -inf where key j > query i]) v       [B, H, T, D]
//
// timed either as the forward alone (output y) or as forward and backward (outputs y and the
// gradients of sum(y * r) with respect to q, k and v, r a fixed random [B, H, T, D]).
//
// Each implementation (kiln, kiln-unfused: attention_kiln.cpp; libtorch, libtorch-sdpa:
// attention_torch.cpp, C++17, apart from kiln's C++20 headers) exports one `at_impl`.
// bench_attention.cpp makes the inputs, times every implementation on the same buffers and
// compares its outputs with a double-precision reference.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "cpu_common.hpp"

namespace kb {

inline constexpr i64 at_batch = 4, at_heads = 8, at_dim = 64;

/// The outputs, in order: y, then (forward and backward) d/dq, d/dk, d/dv of sum(y * r).
inline constexpr int at_max_outputs = 4;
inline constexpr const char* at_output_names[at_max_outputs] = {"y", "dq", "dk", "dv"};

/// One workload: its inputs, row-major [B, H, T, D] each.
struct at_workload {
  std::string name;
  i64 t = 0;
  bool causal = false;
  bool backward = false;  // forward and backward (4 outputs) or the forward alone (1)
  double amount = 0;      // flops of one run
  fbuf q, k, v, r;
  i64 numel() const { return at_batch * at_heads * t * at_dim; }
  int outputs() const { return backward ? 4 : 1; }
};

/// One implementation set up for one workload: run() is what is timed (one forward, or one
/// forward and backward); outputs() its results after a run, contiguous row-major [B, H, T, D]
/// each (it may copy: it is called untimed, after the warm-up run).
struct at_runner {
  virtual ~at_runner() = default;
  virtual void run() = 0;
  virtual std::array<const float*, at_max_outputs> outputs() = 0;
};

struct at_impl {
  const char* name;
  int (*threads)(int requested);  // threads it actually uses when asked for `requested`
  std::unique_ptr<at_runner> (*make)(const at_workload&, int threads);
  /// Why this workload is not measured (nullptr: it is); the suite lists it under "Not measured".
  const char* (*why_not)(const at_workload&);
  /// Bytes of the implementation's own plan (scratch buffers), where it knows them before it
  /// runs (kiln's plan, computed at compile time); -1 otherwise.
  double (*planned_bytes)(const at_workload&);
};

extern const at_impl at_kiln_impl;           // attention_kiln.cpp
extern const at_impl at_kiln_unfused_impl;   // attention_kiln.cpp
extern const at_impl at_libtorch_impl;       // attention_torch.cpp (when libtorch is installed)
extern const at_impl at_libtorch_sdpa_impl;  // attention_torch.cpp

}  // namespace kb
