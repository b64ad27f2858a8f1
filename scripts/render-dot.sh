#!/usr/bin/env bash
# Builds examples/fusion_dot, writes the DOT files of its plans to docs/img/ and renders them
# to PNG with Graphviz's dot (installed by scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target fusion_dot
mkdir -p docs/img
./build/examples/fusion_dot docs/img
for f in docs/img/*.dot; do dot -Tpng "$f" -o "${f%.dot}.png"; done
ls docs/img
