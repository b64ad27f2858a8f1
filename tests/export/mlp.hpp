// The model the export tests compile twice: into a library with its C ABI (mlp_model.cpp) and
// into the C++ test that checks the library against it (test_export.cpp).
#pragma once

#include <kiln/kiln.hpp>

namespace kt_export {

using X = kiln::input<"x", kiln::f32, kiln::shape<kiln::dyn, 20>>;
using W1 = kiln::param<"fc1.weight", kiln::f32, kiln::shape<20, 16>>;
using B1 = kiln::param<"fc1.bias", kiln::f32, kiln::shape<16>>;
using W2 = kiln::param<"fc2.weight", kiln::f32, kiln::shape<16, 5>>;
using B2 = kiln::param<"fc2.bias", kiln::f32, kiln::shape<5>>;

/// Logits and log-probabilities of a two-layer MLP.
inline auto mlp() {
  const auto logits = kiln::matmul(kiln::gelu(kiln::matmul(X{}, W1{}) + B1{}), W2{}) + B2{};
  return kiln::outputs(logits, kiln::log_softmax<1>(logits));
}

}  // namespace kt_export
