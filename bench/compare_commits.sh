#!/usr/bin/env bash
# Measures kiln's CPU rows at two commits on this machine, in alternating processes, and writes
# the paired time ratios (new / old, per round) to bench/results/compare-<old>-<new>.md: the
# "no performance lost" check of a refactor.
#
#   bench/compare_commits.sh OLD [NEW]     (NEW defaults to HEAD; ROUNDS alternations, 4)
#
# Each commit is checked out in a scratch worktree and its bench_cpu built (Release), then the
# two binaries run in turns (old, new, old, new ...), each run measuring every workload's kiln
# row KILN_BENCH_REPS times (3). Machine speed drifts within minutes, so a workload's ratio is
# taken within each alternation (new's median / old's median in neighbouring processes) and
# the table gives the median and the spread of those ratios. Needs scripts/setup-bench.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
old=$(git rev-parse --short "${1:?usage: bench/compare_commits.sh OLD [NEW]}")
new=$(git rev-parse --short "${2:-HEAD}")
rounds=${ROUNDS:-4}
reps=${KILN_BENCH_REPS:-3}
threads=${KILN_BENCH_THREADS:-2}
work=${WORK:-/tmp/kiln-compare}
bash scripts/setup-bench.sh
mkdir -p "$work"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
for c in "$old" "$new"; do
  if [ ! -d "$work/src-$c" ]; then git worktree add --detach "$work/src-$c" "$c" >/dev/null; fi
  cmake -S "$work/src-$c" -B "$work/build-$c" -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_BENCHMARKS=ON \
    -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_EXAMPLES=OFF "${launcher[@]}" >/dev/null
  cmake --build "$work/build-$c" -j "$(nproc)" --target bench_cpu
done
unset KILN_BENCH_RESTARTED
cpu=$(grep -m1 "model name" /proc/cpuinfo | cut -d: -f2 | xargs)
cpu="$cpu, family $(grep -m1 "cpu family" /proc/cpuinfo | cut -d: -f2 | xargs) model $(grep -m1 -E "^model\s" /proc/cpuinfo | cut -d: -f2 | xargs)"
flags=none
grep -qw avx2 /proc/cpuinfo && flags=avx2
grep -qw avx512f /proc/cpuinfo && flags=avx512f
for r in $(seq 1 "$rounds"); do
  for c in "$old" "$new"; do
    echo "compare: round $r, $c"
    (cd "$work/src-$c" && "$work/build-$c/bench/bench_cpu" --threads="$threads" --reps="$reps" \
      --benchmark_filter='/kiln/' --benchmark_out="$work/$c-$r.json" --benchmark_out_format=json >/dev/null)
  done
done
/usr/bin/python3 - "$work" "$old" "$new" "$rounds" "$cpu ($flags), $(nproc) CPUs, $threads threads" \
  > "bench/results/compare-$old-$new.md" <<'PY'
import json, statistics, sys
work, old, new, rounds, machine = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
def medians(path):
    t = {}
    for b in json.load(open(path))["benchmarks"]:
        if b.get("run_type") != "iteration" or b.get("error_occurred"): continue
        w = b["run_name"].split("/")[0]
        t.setdefault(w, []).append(b["real_time"] * scale[b["time_unit"]])
    return {w: statistics.median(v) for w, v in t.items()}
ratios, olds, news = {}, {}, {}
for r in range(1, rounds + 1):
    a, b = medians(f"{work}/{old}-{r}.json"), medians(f"{work}/{new}-{r}.json")
    for w in a:
        if w in b:
            ratios.setdefault(w, []).append(b[w] / a[w])
            olds.setdefault(w, []).append(a[w]); news.setdefault(w, []).append(b[w])
print(f"## kiln CPU rows: {new} against {old}\n")
print(f"- machine: {machine}; {rounds} alternations of one process per commit, each measuring every")
print("  kiln row several times; ratio = new median / old median within an alternation (below 1: new faster)\n")
print("| workload | old ms (median) | new ms (median) | ratio new/old (median) | spread over alternations |")
print("| --- | ---: | ---: | ---: | ---: |")
for w in ratios:
    rs = ratios[w]
    print(f"| {w} | {statistics.median(olds[w])*1e3:.3g} | {statistics.median(news[w])*1e3:.3g} | "
          f"{statistics.median(rs):.3f} | {min(rs):.3f}-{max(rs):.3f} |")
PY
cat "bench/results/compare-$old-$new.md"
