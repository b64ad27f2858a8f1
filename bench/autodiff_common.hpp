// bench/autodiff_common.hpp: what the translation units of the autodiff benchmark suite
// (bench_autodiff) share. One workload: a training step of the MLP 784-1024-1024-10 (the cpu
// suite's mlp_b*, cpu_common.hpp): forward, mean cross-entropy of the logits against integer
// labels, and the gradients of the loss with respect to all six weights and biases.
//
//   logits = relu(relu(x w1 + b1) w2 + b2) w3 + b3      x [B, 784], w1 [784, 1024], b1 [1024],
//   loss   = mean_i (logsumexp(logits_i) - logits_i[label_i])     w2 [1024, 1024], b2 [1024],
//   outputs: loss, d loss / d (w1, b1, w2, b2, w3, b3)            w3 [1024, 10], b3 [10]
//
// Each implementation (kiln, kiln-eager: autodiff_kiln.cpp; libtorch: autodiff_torch.cpp, C++17,
// apart from kiln's C++20 headers) exports one `ad_impl`. bench_autodiff.cpp makes the inputs,
// times every implementation on the same buffers and compares its seven outputs with kiln's
// eager backend.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpu_common.hpp"

namespace kb {

/// The step's outputs, in order: the loss (a scalar), then the gradients of the parameters.
inline constexpr int ad_outputs = 7;
inline constexpr const char* ad_output_names[ad_outputs] = {"loss", "w1", "b1", "w2", "b2", "w3", "b3"};

/// Elements of output q (the gradients have their parameters' shapes, whatever the batch).
inline i64 ad_output_numel(int q) {
  constexpr i64 n[ad_outputs] = {1,          mlp_in * mlp_hidden,      mlp_hidden, mlp_hidden * mlp_hidden,
                                 mlp_hidden, mlp_hidden * mlp_out, mlp_out};
  return n[q];
}

/// One batch of the step, row-major: x [batch, 784] in [0, 1) (like pixels), labels in [0, 10),
/// weights Glorot-uniform [in, out], biases uniform in [-0.1, 0.1).
struct ad_workload {
  std::string name;
  i64 batch = 0;
  fbuf x, w1, b1, w2, b2, w3, b3;
  std::vector<std::int64_t> labels;
  std::array<fbuf, ad_outputs> ref;  // kiln eager's outputs on these inputs
};

/// One implementation set up for one workload: run() is what is timed (one whole step);
/// outputs() the step's seven results after a run, contiguous row-major (it may copy: it is
/// called once, untimed, after the warm-up run).
struct ad_runner {
  virtual ~ad_runner() = default;
  virtual void run() = 0;
  virtual std::array<const float*, ad_outputs> outputs() = 0;
};

struct ad_impl {
  const char* name;
  int (*threads)(int requested);  // threads it actually uses when asked for `requested`
  std::unique_ptr<ad_runner> (*make)(const ad_workload&, int threads);
};

extern const ad_impl ad_kiln_eager_impl;  // autodiff_kiln.cpp
extern const ad_impl ad_kiln_cpu_impl;    // autodiff_kiln.cpp
extern const ad_impl ad_libtorch_impl;    // autodiff_torch.cpp (when libtorch is installed)

}  // namespace kb
