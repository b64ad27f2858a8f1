#!/usr/bin/env bash
# Sets up a machine (Debian packages), builds the main example and runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >/dev/null
cmake --build build -j "$(nproc)" --target quickstart
./build/examples/quickstart
