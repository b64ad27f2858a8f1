// The Fashion-MNIST MLP as a shared library with kiln's C ABI (kiln_add_model: libmnist_mlp.so).
// Its weights come from a checkpoint that train_fashion_mnist --save wrote.
#include <kiln/export.hpp>

#include "mnist_mlp.hpp"

KILN_EXPORT_MODEL(mnist::logits())
