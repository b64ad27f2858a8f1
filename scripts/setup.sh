#!/usr/bin/env bash
# Installs everything kiln's build, tests, examples and benchmarks need, from Debian packages.
# Safe to run again: it only calls apt-get when something is missing.
set -euo pipefail

packages=(
  g++ clang make cmake git ca-certificates ccache   # compilers and build tools
  pkg-config                                         # the pkg-config consumer test
  python3-numpy                                      # the exported model called from Python (ctypes)
  python3-torch                                      # the conformance suite's reference (tests/conformance)
  libxsimd-dev xtl-dev                               # kiln's own dependencies (xsimd and its xtl)
  doctest-dev libbenchmark-dev                       # tests and benchmarks
  libclang-rt-14-dev libomp-14-dev                   # clang's sanitizer runtimes and OpenMP
  graphviz                                           # renders kiln DOT dumps (scripts/render-dot.sh)
  zlib1g-dev                                         # gzip IDX files (kiln/io/idx_gzip.hpp), tests, fuzzing
  dataset-fashion-mnist                              # the training example's data; test_io checks it
  fortunes                                           # the language-model example's text (train_char_lm)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: run as root or install sudo" >&2; exit 1; }
  SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# wait for another apt-get (a parallel setup) instead of failing on the dpkg lock
$SUDO apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 "${missing[@]}"
