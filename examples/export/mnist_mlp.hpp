// The Fashion-MNIST MLP of examples/train_fashion_mnist.cpp (its forward: the logits), shared by
// the exported library (mnist_mlp.cpp) and the C++ reference (predict.cpp).
#pragma once

#include <kiln/kiln.hpp>
#include <kiln/nn/modules.hpp>

namespace mnist {
using net = kiln::nn::mlp<"mlp", 784, 512, 256, 10>;
using X = kiln::input<"x", kiln::f32, kiln::shape<kiln::dyn, 784>>;
inline auto logits() { return net{}(X{}); }
}  // namespace mnist
