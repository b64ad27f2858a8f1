#!/usr/bin/env bash
# Checks kiln's packages outside CMake's own install (which the test suite checks, with the
# pkg-config, add_subdirectory and FetchContent consumers):
#   1. Conan 2: `conan create` of conanfile.py in a scratch Conan home (Conan from PyPI into a
#      virtual environment; no Conan remote is used: xsimd is Debian's, declared a platform
#      requirement in the profile), then test_package/ builds and runs a consumer through
#      CMakeDeps and CMakeToolchain;
#   2. vcpkg: ports/kiln/portfile.cmake run through CMake as vcpkg runs it
#      (cmake/vcpkg-port-check.cmake; ports/README.md), then a consumer built against it.
# Needs Debian's python3-venv (installed here) and PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
dpkg-query -W -f='${Status}' python3-venv 2>/dev/null | grep -q "install ok installed" ||
  { $SUDO apt-get update -q && $SUDO apt-get install -y -q --no-install-recommends python3-venv; }

work=${BUILD_DIR:-build-packages}
mkdir -p "$work"
work=$(cd "$work" && pwd)

echo "== Conan"
[ -x "$work/venv/bin/conan" ] || { python3 -m venv "$work/venv" && "$work/venv/bin/pip" install -q conan; }
export CONAN_HOME="$work/conan-home"
rm -rf "$CONAN_HOME"
"$work/venv/bin/conan" profile detect >/dev/null
xsimd=$(dpkg-query -W -f='${Version}' libxsimd-dev | sed 's/-.*//')
cat > "$CONAN_HOME/profiles/kiln" <<PROFILE
include(default)
[settings]
compiler.cppstd=20
[platform_requires]
xsimd/$xsimd
PROFILE
"$work/venv/bin/conan" --version
"$work/venv/bin/conan" create . --profile=kiln --build=missing --no-remote

echo "== vcpkg port"
cmake -DKILN_SOURCE="$PWD" -DWORK="$work/vcpkg" -P cmake/vcpkg-port-check.cmake

echo "check-packages: Conan and vcpkg packages built and their consumers ran"
