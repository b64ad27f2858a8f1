#!/usr/bin/env bash
# Sets up a machine (Debian packages), builds kiln's tests and runs them with CTest.
#   scripts/test.sh                                  g++, build/
#   CXX=clang++ scripts/test.sh                      clang, build-clang/
#   KILN_SANITIZE=address,undefined scripts/test.sh  sanitizers, build-sanitize/
#   KILN_EXAMPLES=OFF scripts/test.sh                without the examples (and their tests)
#   KILN_OPENMP=OFF KILN_ONLY_TESTS="gemm;threads"    without OpenMP, only those tests (ThreadSanitizer)
#   KILN_CONFORMANCE=OFF scripts/test.sh             without the conformance suite against PyTorch
#   KILN_SYNTAX_CHECK=ON ...                         what the build leaves out compiled -fsyntax-only
#                                                    (CI's clang stage: tests/CMakeLists.txt)
#   KILN_OPT=-O3 scripts/test.sh                     another optimisation level (-O2 unless set;
#                                                    sanitized builds use -O1)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

cxx=${CXX:-g++}
sanitize=${KILN_SANITIZE:-}
dir=build
[ "$cxx" != "g++" ] && dir="build-$(basename "$cxx" | tr -d "+")"
[ -n "$sanitize" ] && dir="$dir-$( [ "$sanitize" = thread ] && echo tsan || echo sanitize )"
dir=${BUILD_DIR:-$dir}

# each compile timed (scripts/time-unit.sh), through ccache where there is one
mkdir -p "$dir"
times="$(cd "$dir" && pwd)/unit-times.txt"
: > "$times"
launcher="$PWD/scripts/time-unit.sh;$times"
command -v ccache >/dev/null && launcher="$launcher;ccache"
# -O2, not Release's -O3: the tests' kernels are xsimd's explicit vectors either way, and -O3's
# extra inlining and unrolling of them cost 40% of the build (docs/build-cost.md)
cmake -S . -B "$dir" -DCMAKE_CXX_COMPILER="$cxx" -DKILN_SANITIZE="$sanitize" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS_RELEASE="${KILN_OPT:--O2} -DNDEBUG" \
  -DKILN_BUILD_TESTS=ON -DKILN_BUILD_EXAMPLES="${KILN_EXAMPLES:-ON}" -DKILN_WITH_OPENMP="${KILN_OPENMP:-ON}" \
  -DKILN_ONLY_TESTS="${KILN_ONLY_TESTS:-}" -DKILN_CONFORMANCE="${KILN_CONFORMANCE:-ON}" \
  -DKILN_SYNTAX_CHECK="${KILN_SYNTAX_CHECK:-OFF}" -DCMAKE_CXX_COMPILER_LAUNCHER="$launcher"
cmake --build "$dir" -j "$(nproc)"
echo "test.sh: the slowest translation units of this build (wall seconds, $(wc -l < "$times") compiled):"
# awk reads all of sort's output: head would exit early, and pipefail would turn sort's SIGPIPE
# into the script's exit status (141)
sort -rn "$times" | awk 'NR <= 12 { printf "  %7.1f  %s\n", $1 / 1000, $2 }'
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
# (libomp's per-thread buffers, which LeakSanitizer would report at exit: tests/lsan.supp)
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/tests/lsan.supp:print_suppressions=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1}
# KILN_CTEST_ARGS: more ctest arguments (CI's sanitizer stage leaves out some tests: .ci/run)
read -r -a ctest_args <<< "${KILN_CTEST_ARGS:-}"
# a test that hangs fails after KILN_CTEST_TIMEOUT seconds (the slowest took 10 s, 31 s under
# the sanitizers, on 2026-11-24) instead of holding the run for ever
ctest --test-dir "$dir" --output-on-failure --timeout "${KILN_CTEST_TIMEOUT:-900}" -j "$(nproc)" "${ctest_args[@]}"
