#!/usr/bin/env bash
# Installs what kiln's benchmark suite (bench/run.sh) needs on top of scripts/setup.sh: the peer
# libraries it compares against and the plotting used for bench/results/*.png, from Debian packages.
# Safe to run again: it only calls apt-get when something is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

packages=(
  libeigen3-dev                            # Eigen's Tensor module (unsupported/Eigen/CXX11/Tensor)
  xtensor-dev                              # xtensor (uses libxsimd-dev and xtl-dev from setup.sh)
  libopenblas-dev libopenblas-pthread-dev  # OpenBLAS sgemm, pthread variant (CMake config, cblas.h)
  libtorch-dev                             # libtorch 1.13 eager (C++ API, CMake config); calls OpenBLAS
  libbenchmark-dev                         # Google Benchmark (also in setup.sh)
  python3 python3-matplotlib               # bench/report.py, run with /usr/bin/python3: JSON, table, chart
  python3-venv                             # the virtual environment of PyPI's torch (below)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-bench: installing ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup-bench: run as root or install sudo" >&2; exit 1; }
    SUDO=sudo
  fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  # Wait for another apt-get (a parallel setup) instead of failing on the dpkg lock.
  $SUDO apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 "${missing[@]}"
fi

# The PyTorch people use today (PyPI), in a virtual environment, for the suites' "torch" and
# "torch-compile" rows (bench/torch_rows.py); Debian's libtorch 1.13 is years behind it.
# KILN_BENCH_TORCH=0 leaves it out; without PyPI the suites run without those rows.
venv=${KILN_BENCH_TORCH_VENV:-.venv-torch}
if [ "${KILN_BENCH_TORCH:-1}" != 0 ] && ! "$venv/bin/python" -c "import torch, numpy" 2>/dev/null; then
  echo "setup-bench: installing torch and numpy from PyPI into $venv"
  { /usr/bin/python3 -m venv "$venv" && "$venv/bin/pip" install -q torch numpy; } ||
    echo "setup-bench: could not install torch from PyPI: the suites run without its rows" >&2
fi
