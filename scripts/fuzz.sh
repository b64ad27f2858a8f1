#!/usr/bin/env bash
# Runs kiln's fuzzers at length, built with clang, ASan and UBSan (CI runs short smoke runs):
#   fuzz_safetensors  the file readers (safetensors, IDX, gzip), inputs up to 1 MB
#   fuzz_views        tensor shapes and views
#   fuzz_export       an exported model's C ABI loading weights from memory
#   test_random_graphs         random graphs: optimised and planned == unoptimised (eager)
#   test_cpu_random(_dtypes)   compiled random graphs on fresh inputs: CPU backend == eager
# Defaults are the figures CONTRIBUTING.md records: 10^7 runs of each libFuzzer target, 10^6
# random graphs (125,000 of each of 8 kinds), 1,000 input draws of each compiled graph.
#   KILN_FUZZ_RUNS=n KILN_FUZZ_GRAPHS=n KILN_FUZZ_INPUTS=n scripts/fuzz.sh
# Two jobs run at a time. Logs and findings (crash-*, leak-*, timeout-*, oom-*): build-fuzz/fuzz/.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
dir=${BUILD_DIR:-build-fuzz}
runs=${KILN_FUZZ_RUNS:-10000000}
graphs=${KILN_FUZZ_GRAPHS:-125000}
inputs=${KILN_FUZZ_INPUTS:-1000}

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B "$dir" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Release -DKILN_SANITIZE=address,undefined \
  -DKILN_ALL_TESTS=ON -DKILN_BUILD_TESTS=ON -DKILN_BUILD_EXAMPLES=OFF "${launcher[@]}" >/dev/null
cmake --build "$dir" -j "$(nproc)" --target fuzz_safetensors fuzz_views fuzz_export test_random_graphs test_cpu_random \
  test_cpu_random_dtypes

out="$dir/fuzz"
mkdir -p "$out"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
fuzz="$dir/tests/fuzz"
reader() {
  rm -rf "$out/corpus-readers" && mkdir -p "$out/corpus-readers"
  "$fuzz/fuzz_safetensors" -runs="$runs" -max_len=1048576 -timeout=30 -print_final_stats=1 \
    -dict=tests/fuzz/safetensors.dict -artifact_prefix="$out/" "$out/corpus-readers" tests/fuzz/seeds
}
views() {
  rm -rf "$out/corpus-views" && mkdir -p "$out/corpus-views"
  "$fuzz/fuzz_views" -runs="$runs" -max_len=1024 -timeout=30 -print_final_stats=1 -artifact_prefix="$out/" "$out/corpus-views"
}
export_abi() {
  rm -rf "$out/corpus-export" && mkdir -p "$out/corpus-export"
  "$fuzz/fuzz_export" -runs="$runs" -max_len=65536 -timeout=30 -print_final_stats=1 \
    -dict=tests/fuzz/safetensors.dict -artifact_prefix="$out/" "$out/corpus-export" tests/fuzz/seeds
}
graphs() {
  KILN_TEST_GRAPHS=$graphs "$dir/tests/test_random_graphs"
  KILN_TEST_INPUTS=$inputs "$dir/tests/test_cpu_random"
  KILN_TEST_INPUTS=$inputs "$dir/tests/test_cpu_random_dtypes"
}
run() {  # name: runs it, timed, into its log; prints one line
  local start=$SECONDS rc=0
  "$1" >"$out/$1.log" 2>&1 || rc=$?
  echo "$1: exit $rc after $((SECONDS - start)) s ($out/$1.log)"
  return $rc
}
fail=0
run reader & a=$!
run graphs & b=$!
wait $a || fail=1
wait $b || fail=1
run views & a=$!
run export_abi & b=$!
wait $a || fail=1
wait $b || fail=1
grep -h "stat::number_of_executed_units\|stat::peak_rss_mb\|Done " "$out"/reader.log "$out"/views.log "$out"/export_abi.log || true
grep -h " random .* graphs:\|graphs (seeds" "$out"/graphs.log | cut -c1-200 || true
exit $fail
