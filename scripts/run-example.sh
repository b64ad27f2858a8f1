#!/usr/bin/env bash
# Sets up a machine (Debian packages, Fashion-MNIST from dataset-fashion-mnist), builds the main
# example and runs it: an MLP trained on Fashion-MNIST for 6 epochs, whose last line is
# test_accuracy=<value>. Arguments go to the example (try --help-like mistakes: it prints usage),
# e.g. scripts/run-example.sh --epochs 2 --save /tmp/mlp.safetensors
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >/dev/null
cmake --build build -j "$(nproc)" --target train_fashion_mnist
./build/examples/train_fashion_mnist "$@"
