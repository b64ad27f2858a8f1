#!/usr/bin/env bash
# Builds and runs kiln's benchmark suites, and writes their results.
#
#   bench/run.sh                 every suite (today: cpu, avx2, autodiff, train, attention, transformer, export)
#   bench/run.sh cpu             one suite
#   bench/run.sh --quick [...]   small sizes, few repetitions: checks the plumbing in a minute;
#                                results go to the build directory, not bench/results
#
# For each suite S: installs what the benchmarks need (scripts/setup-bench.sh), builds the
# target bench_S in build-bench/ (Release, -DKILN_BUILD_BENCHMARKS=ON), runs it (it sets the
# environment its peers run best in: ensure_env, bench/bench_main.hpp), and hands its Google Benchmark JSON to bench/report.py, which prints a
# Markdown table and writes bench/results/S.json (one object per workload and implementation),
# S.md and S.png (fraction of the physical limit per workload and implementation).
#
# A new suite (train, ...) is a target bench_<suite> in bench/CMakeLists.txt whose
# benchmarks follow bench/report.py's conventions, plus its name in `all_suites` below.
#
# Environment: BUILD_DIR (build-bench), JOBS (parallel compile jobs; nproc), KILN_BENCH_THREADS
# (threads of every implementation; 2, the cores of the machines the issue's targets are for),
# KILN_BENCH_TORCH=0 (no rows of PyPI's torch; KILN_BENCH_TORCH_VENV: its virtual env, .venv-torch),
# KILN_BENCH_REPS (repetitions; 5), KILN_BENCH_OPENBLAS_CORETYPE (OpenBLAS's kernels; the CPU's:
# SkylakeX with AVX-512, Haswell with AVX2), PYTHON (a python3 with matplotlib; Debian's /usr/bin/python3),
# CXX (compiler), and extra arguments for the binaries in KILN_BENCH_ARGS (e.g.
# --benchmark_filter=softmax).
set -euo pipefail
cd "$(dirname "$0")/.."

all_suites=(cpu avx2 autodiff train attention transformer export)
# avx2: the cpu suite's gelu chains built with AVX-512 disabled, for x86 machines only
[ "$(uname -m)" = x86_64 ] || all_suites=(cpu autodiff train attention transformer export)

quick=0
suites=()
for a in "$@"; do
  case "$a" in
    --quick) quick=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "run.sh: unknown option $a (try --help)" >&2; exit 2 ;;
    *)
      if [[ " ${all_suites[*]} " != *" $a "* ]]; then
        echo "run.sh: unknown suite '$a' (suites: ${all_suites[*]})" >&2
        exit 2
      fi
      suites+=("$a") ;;
  esac
done
[ ${#suites[@]} -eq 0 ] && suites=("${all_suites[@]}")

bash scripts/setup-bench.sh

dir=${BUILD_DIR:-build-bench}
jobs=${JOBS:-$(nproc)}
threads=${KILN_BENCH_THREADS:-2}
reps=${KILN_BENCH_REPS:-5}
python=${PYTHON:-/usr/bin/python3}
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
compiler=()
[ -n "${CXX:-}" ] && compiler=(-DCMAKE_CXX_COMPILER="$CXX")

cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_BENCHMARKS=ON -DKILN_BUILD_TESTS=OFF \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  -DKILN_BUILD_EXAMPLES=OFF "${compiler[@]}" "${launcher[@]}" >/dev/null
targets=()
for s in "${suites[@]}"; do targets+=("bench_$s"); done
cmake --build "$dir" -j "$jobs" --target "${targets[@]}"

# The environment the peers run best in (OpenBLAS's kernels for this CPU, the thread counts,
# OpenMP's wait policy, libtorch's kernels) is set by each binary: ensure_env in
# bench/bench_main.hpp, which says why for each, and prints what it changed.
# KILN_BENCH_OPENBLAS_CORETYPE chooses OpenBLAS's kernels. (KILN_BENCH_RESTARTED, which a
# binary sets when it starts itself again, would make it skip all that.)
unset KILN_BENCH_RESTARTED
echo "run.sh: threads=$threads load average: $(cut -d' ' -f1-3 /proc/loadavg)"

# the suites with rows of the current PyTorch from PyPI (scripts/setup-bench.sh's virtual env)
torch_suites=(train attention transformer cpu avx2 autodiff export)
# the unit holding kiln's rows of such a suite, whose compile time is their one-time cost (and
# the target it is compiled for, where two targets compile it)
declare -A kiln_unit=([train]=bench/train_kiln.cpp [attention]=bench/attention_kiln.cpp [cpu]=bench/kiln_rows.cpp
                      [transformer]=bench/transformer_kiln.cpp
                      [avx2]=bench/kiln_rows.cpp [autodiff]=bench/autodiff_kiln.cpp [export]=bench/export_kiln.cpp)
torch_python=${KILN_BENCH_TORCH_VENV:-.venv-torch}/bin/python
[ "${KILN_BENCH_TORCH:-1}" = 0 ] && torch_suites=()
args=(--threads="$threads" --reps="$reps")
results=bench/results
if [ "$quick" = 1 ]; then
  args+=(--quick)
  results=$dir/bench/results
fi
# shellcheck disable=SC2206  # KILN_BENCH_ARGS is split into words on purpose
extra=(${KILN_BENCH_ARGS:-})
for s in "${suites[@]}"; do
  raw=$dir/bench/$s-raw.json
  echo "run.sh: running bench_$s (raw results in $raw)"
  # the current PyTorch's rows (bench/torch_rows.py) where the suite has them and PyPI's torch is
  # installed: the binary hands over what they need, and they run right after it
  handoff=""
  with_torch=0
  [[ " ${torch_suites[*]} " == *" $s "* ]] && with_torch=1
  if [ "$with_torch" = 1 ] && "$torch_python" -c "import torch" 2>/dev/null; then
    handoff=$dir/bench/$s-handoff
    rm -rf "$handoff" && mkdir -p "$handoff"
  fi
  # every repetition goes to the JSON file (report.py takes medians, minima and maxima from
  # them); the console shows the aggregates only
  KILN_BENCH_HANDOFF=$handoff "$dir/bench/bench_$s" "${args[@]}" "${extra[@]}" \
    --benchmark_display_aggregates_only=true --benchmark_out="$raw" --benchmark_out_format=json
  report_args=()
  if [ "$with_torch" = 1 ] && [ -z "$handoff" ]; then
    report_args+=(--skipped "$s/torch and torch-compile: PyPI's torch is not installed (scripts/setup-bench.sh)")
  fi
  if [ -n "$handoff" ]; then
    echo "run.sh: running bench/torch_rows.py --suite $s with $torch_python"
    torch_args=(--threads="$threads" --reps="$reps")
    [ "$quick" = 1 ] && torch_args=(--threads="$threads" --reps=2 --min-time=0.05 --warmup=2 --quick)
    "$torch_python" bench/torch_rows.py --suite "$s" --handoff "$handoff" "${torch_args[@]}" --out "$dir/bench/$s-torch.json"
    report_args+=(--extra-raw "$dir/bench/$s-torch.json")
    echo "run.sh: timing a fresh compile of ${kiln_unit[$s]}"
    report_args+=(--build-seconds "kiln=$("$python" bench/unit_seconds.py "$dir/compile_commands.json" "${kiln_unit[$s]}" "bench_$s.dir")")
  fi
  "$python" bench/report.py --suite "$s" --raw "$raw" "${report_args[@]}" --out "$results"
done
