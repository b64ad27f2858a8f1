#!/usr/bin/env python3
"""Turns a benchmark suite's Google Benchmark JSON into kiln's result files.

    bench/report.py --suite cpu --raw build-bench/bench/cpu-raw.json --out bench/results

Writes <out>/<suite>.json (a JSON array, one object per workload and implementation),
<out>/<suite>.md (the Markdown table with the run's context) and <out>/<suite>.png (bar chart of
each row's fraction of the physical limit), and prints the Markdown.

What a suite's binary must emit (bench_cpu does; later suites such as autodiff and train reuse
this script unchanged): benchmarks named "<workload>/<impl>[/...]", run with repetitions (not
aggregates only), with the counters `amount` (bytes one run must move, or flops it must do),
`threads` and, for implementations, `rel_error` (against kiln's eager backend) and `tolerance`
(the largest rel_error that passes; rows above it are marked and listed), and the rate unit
("GB/s" or "GFLOP/s") as the label.

Limits come two ways. A workload's own limit is measured in its rounds like an implementation,
"<workload>/limit:<kind>/round:<r>" (bench_cpu): a row's fraction of the limit is its median
rate over the median rate of these, measurements that saw the same mix of the machine's good
and bad moments. Otherwise (bench_autodiff) limits are benchmarks whose workload starts with
"limit_", measured several times in a run ("limit_flops/fma@start", "limit_flops/fma@after_
<workload>" ...), and a row's limit is the best median among those of its kind (stream kinds for
GB/s, the FMA loop for GFLOP/s) measured right before and right after its workload. On a machine
shared with other work the memory bandwidth drifts by a third within a run: dividing by the best
single repetition of the whole run made every fraction too low, one neighbouring measurement
alone was sometimes disturbed (a fraction above 100%), and even two put the same code anywhere
from 54% to 98% of stream, which is why bench_cpu measures its limits in the rounds.
"""
import argparse
import json
import os
import statistics
import sys

IMPL_ORDER = ["kiln", "kiln-abi", "kiln-profiled", "kiln-unfused", "kiln-eager", "hand-fused", "eigen", "xtensor", "libtorch", "libtorch-sdpa", "torch", "torch-compile",
              "openblas"]
# The reference of the "vs" column: kiln when it was measured, else the roofline loop, else BLAS.
REF_ORDER = ["kiln", "hand-fused", "openblas"]
UNIT_SCALE = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
NOT_FINITE = 1e30  # what the binaries report for a NaN or infinite error


def load_runs(path):
    with open(path) as f:
        data = json.load(f)
    groups, errors = {}, {}
    for b in data["benchmarks"]:
        if b.get("error_occurred"):
            errors["/".join(b["run_name"].split("/")[:2])] = b.get("error_message", "")
            continue
        if b.get("run_type") != "iteration":
            continue
        parts = b["run_name"].split("/")
        key = (parts[0], parts[1])
        g = groups.setdefault(key, {"seconds": [], "limit_rates": [], "rounds": [], "bench": b})
        g["seconds"].append(b["real_time"] * UNIT_SCALE[b["time_unit"]])
        g["limit_rates"].append(b.get("limit_rate"))
        rnd = next((p[len("round:"):] for p in parts[2:] if p.startswith("round:")), None)
        g["rounds"].append(int(rnd) if rnd is not None and rnd.isdigit() else None)
    return data.get("context", {}), groups, errors


def summarise(ctx, groups):
    limits, rows, round_limits = {}, [], {}
    for (workload, impl), g in groups.items():
        b, secs, paired = g["bench"], g["seconds"], g["limit_rates"]
        # each measurement by round (bench_cpu's rounds), for the ratios paired round by round
        by_round = {rnd: (s, l) for rnd, s, l in zip(g["rounds"], secs, paired) if rnd is not None}
        med = statistics.median(secs)
        # rate_scale: 1e9 (GB/s, GFLOP/s) unless the benchmark says otherwise (train: 1, samples/s)
        rate = b["amount"] / med / b.get("rate_scale", 1e9)
        entry = {
            "workload": workload,
            "impl": impl,
            "seconds": med,
            "min_seconds": min(secs),
            "max_seconds": max(secs),
            "repetitions": len(secs),
            "rate": rate,
            "rate_unit": b.get("label", ""),
            "threads": int(b.get("threads", 0)),
            "_by_round": by_round,
        }
        if workload.startswith("limit_"):
            entry["best_rate"] = b["amount"] / min(secs) / 1e9  # shown in the table's context
            limits[f"{workload}/{impl}"] = entry
            continue
        if impl.startswith("limit:"):  # a workload's limit, measured in its rounds
            entry["best_rate"] = b["amount"] / min(secs) / 1e9
            entry["worst_rate"] = b["amount"] / max(secs) / 1e9
            round_limits[workload] = entry
            continue
        if all(paired):  # each measurement with its limit measured alongside (limit_rate)
            fractions = [b["amount"] / s / b.get("rate_scale", 1e9) / l for s, l in zip(secs, paired)]
            entry["paired_limit"] = {"rate": statistics.median(paired), "min_rate": min(paired),
                                     "max_rate": max(paired), "fraction": statistics.median(fractions)}
        entry["no_output"] = bool(b.get("no_output"))  # a limit row of a suite (export's read-weights)
        err = b.get("rel_error")
        entry["rel_error"] = None if err is None or err >= NOT_FINITE else err
        if "first_call_seconds" in b:  # the first call's time, compiling included (bench/torch_rows.py)
            entry["first_call_seconds"] = b["first_call_seconds"]
        tol = b.get("tolerance")
        if tol is not None:
            entry["tolerance"] = tol
            entry["within_tolerance"] = entry["rel_error"] is not None and entry["rel_error"] <= tol
        rows.append(entry)

    # limits are measured several times ("<kind>@<when>"); a row's limit is the best median of
    # its kind from the measurements that ran right before and right after the row's workload
    # (the last one where none ran after): two, so that one disturbed measurement (another
    # process on the machine: an FMA peak measured at 145 instead of 230 GFLOP/s once) does not
    # put a row above 100%
    prefix = {"GB/s": "limit_stream/", "GFLOP/s": "limit_flops/"}
    order = list(groups)  # run order
    first_of, last_of = {}, {}
    for i, (workload, impl) in enumerate(order):
        if groups[(workload, impl)].get("extra"):  # another process's rows: they ran after the binary
            continue
        first_of.setdefault(workload, i)
        last_of[workload] = i
    when_at = [(i, k[1].split("@", 1)[1]) for i, k in enumerate(order) if k[0].startswith("limit_") and "@" in k[1]]

    def limit_for(workload, unit):
        if workload in round_limits:
            v = round_limits[workload]
            return v["rate"], f"{v['impl'].split(':', 1)[1]} in its rounds"
        if unit not in prefix or not when_at or workload not in last_of:  # (rows of another process only)
            return None, None
        i = last_of[workload]
        after = next((w for j, w in when_at if j > i), when_at[-1][1])
        before = next((w for j, w in reversed(when_at) if j < first_of[workload]), None)
        whens = {after, before} - {None}
        cands = [v for k, v in limits.items() if k.startswith(prefix[unit]) and k.split("@", 1)[-1] in whens]
        if not cands:
            return None, None
        best = max(cands, key=lambda v: v["rate"])
        return best["rate"], f"{best['workload'].split('_', 1)[1]} {best['impl']}"

    by_workload = {}
    for r in rows:
        by_workload.setdefault(r["workload"], {})[r["impl"]] = r
    coretype = ctx.get("openblas_coretype")
    for r in rows:
        paired = r.pop("paired_limit", None)
        if paired:  # the median of the row's own fractions
            r["limit"], r["limit_name"] = paired["rate"], "stream-triad-nt alongside"
            r["fraction_of_limit"] = paired["fraction"]
            r["limit_min_rate"], r["limit_max_rate"] = paired["min_rate"], paired["max_rate"]
        else:
            limit, name = limit_for(r["workload"], r["rate_unit"])
            r["limit"] = limit
            r["limit_name"] = name
            r["fraction_of_limit"] = r["rate"] / limit if limit else None
            if r["workload"] in round_limits:  # the spread of the limit the row was divided by
                v = round_limits[r["workload"]]
                r["limit_min_rate"], r["limit_max_rate"] = v["worst_rate"], v["best_rate"]
        peers = by_workload[r["workload"]]
        ref = next((i for i in REF_ORDER if i in peers), None)
        r["ratio_ref"] = ref
        r["ratio_of_medians"] = r["seconds"] / peers[ref]["seconds"] if ref else None
        r["time_ratio"] = r["ratio_of_medians"]
        if ref and r["impl"] != ref:
            r.update(paired_ratios(r["_by_round"], peers[ref]["_by_round"]))
        if coretype:
            r["openblas_coretype"] = coretype

    def order(r):
        impl = r["impl"]
        return (IMPL_ORDER.index(impl) if impl in IMPL_ORDER else len(IMPL_ORDER), impl)

    for r in rows:
        del r["_by_round"]
    workloads = list(dict.fromkeys(r["workload"] for r in rows))  # in the order they ran
    rows.sort(key=lambda r: (workloads.index(r["workload"]), order(r)))
    return rows, limits, round_limits


def paired_ratios(mine, ref):
    """A row's speed against its reference, round by round (bench_cpu measures every
    implementation of a workload once per round, seconds apart): time_ratio is the median over
    the rounds both ran in of seconds / the reference's seconds in the same round, with its
    spread. The ratio of the two medians instead compares measurements made minutes apart, and
    on a machine whose memory bandwidth switches between about 55 and 95 GB/s within minutes one
    implementation's median can fall in the slow stretch and the other's in the fast one
    (gelu_chain's Eigen row, 2026-11-25 15:13: ratio of medians 0.94x, its rounds 0.75-1.27x,
    median 1.12x). Where both measured stream alongside (GB/s rows), equal_stream_ratio is the
    median over the rounds of the ratio of their fractions of stream: each time scaled by the
    bandwidth the machine gave it."""
    rounds = sorted(set(mine) & set(ref))
    if not rounds:
        return {}
    ratios = [mine[k][0] / ref[k][0] for k in rounds]
    out = {"time_ratio": statistics.median(ratios), "time_ratio_min": min(ratios), "time_ratio_max": max(ratios),
           "paired_rounds": len(rounds)}
    if all(mine[k][1] and ref[k][1] for k in rounds):
        scaled = [mine[k][0] * mine[k][1] / (ref[k][0] * ref[k][1]) for k in rounds]
        out.update({"equal_stream_ratio": statistics.median(scaled), "equal_stream_ratio_min": min(scaled),
                    "equal_stream_ratio_max": max(scaled)})
    return out


def fmt_time(s):
    return f"{s * 1e3:.3g}" if s < 10 else f"{s * 1e3:.0f}"


def fmt(x, spec):
    return "n/a" if x is None else format(x, spec)


def first_or_build(r):
    """A row's one-time cost: the first call (torch.compile compiles in it) or the build (kiln)."""
    if "first_call_seconds" in r:
        return f"{r['first_call_seconds']:.2f} s first call"
    if "build_seconds" in r:
        return f"{r['build_seconds']:.1f} s build"
    return "-"


def markdown(suite, ctx, rows, limits, round_limits, quick, errors):
    by_tol = {}
    for r in rows:
        if "tolerance" in r:
            by_tol.setdefault(r["tolerance"], []).append(r["workload"])
    tolerances = "; ".join(f"{t:.0e} for {', '.join(dict.fromkeys(w))}" for t, w in sorted(by_tol.items()))
    out = []
    out.append(f"## kiln benchmark suite `{suite}`{' (quick mode: small sizes, plumbing check only)' if quick else ''}")
    out.append("")
    out.append(f"- machine: {ctx.get('cpu_model', '?')}, {ctx.get('num_cpus', '?')} CPUs; {ctx.get('date', '')}; "
               f"load average at start {ctx.get('loadavg_at_start', '?')}")
    out.append(f"- threads: {ctx.get('threads', '?')} for every implementation but kiln-eager (1); "
               f"OpenBLAS kernels: {ctx.get('openblas_coretype', '?')} "
               f"(OPENBLAS_CORETYPE={ctx.get('openblas_coretype_env', '?')}); xsimd: {ctx.get('simd', '?')}; "
               f"libtorch kernels: {ctx.get('libtorch_cpu_capability', 'n/a')}; "
               f"OMP_WAIT_POLICY={ctx.get('omp_wait_policy', '?')}; seed {ctx.get('seed', '?')}")
    if limits:
        kinds = {}
        for k, v in limits.items():
            kinds.setdefault(v["impl"].split("@")[0], []).append(v)
        parts = [f"{kind} best {max(v['best_rate'] for v in vs):.1f}, medians "
                 f"{min(v['rate'] for v in vs):.1f}-{max(v['rate'] for v in vs):.1f} {vs[0]['rate_unit']}"
                 for kind, vs in kinds.items()]
        out.append(f"- limits, each measured {max(len(vs) for vs in kinds.values())} times"
                   f"{' at the start and at the end' if round_limits else ' in this run'}: {'; '.join(parts)}")
    if "build" in ctx:
        out.append(f"- build: {ctx['build']}")
    if "data" in ctx:
        out.append(f"- data: {ctx['data']}")
    if "torch_note" in ctx:  # the rows of the current PyTorch (bench/torch_rows.py)
        out.append(f"- {ctx['torch_note']}")
    if "workloads" in ctx:  # a suite whose workload names need a key (attention)
        out.append(f"- workloads: {ctx['workloads']}")
    if "rel_error_note" in ctx:  # a suite that explains its rates and errors itself (train)
        out.append(f"- {ctx['rel_error_note']}" + (f" (tolerance {tolerances}; bold: above it)" if tolerances else ""))
    else:
        if any("limit_min_rate" in r for r in rows):
            out.append("- fraction of limit, GB/s rows: within each measurement the workload's runs alternate with "
                       "runs of stream triad with non-temporal stores, about as much time each; the fraction is the "
                       "median over the row's rounds of its rate / that stream rate. GFLOP/s rows: the row's median "
                       "rate / the median of a register-only FMA loop measured in the workload's rounds like one "
                       "more implementation. The limit column gives the limit's median and its spread")
        else:
            out.append("- fraction of limit: a row's median rate / the best median rate of its limit measured right "
                       "before and right after its workload: GB/s rows / stream (copy, triad, triad with "
                       "non-temporal stores), GFLOP/s rows / a register-only FMA loop; the limit column gives it")
        out.append("- "
                   + ("GB/s counts the bytes a workload must move (inputs read once, output written once); "
                      if any(r["rate_unit"] == "GB/s" for r in rows) else "")
                   + ("vs = the median over the workload's rounds of seconds / seconds of the reference impl "
                      "named in the same round, its spread over the rounds in brackets (rows not measured in "
                      "rounds: the ratio of the medians); at equal stream (GB/s rows) = the same with each time "
                      "multiplied by the stream rate measured alongside it, i.e. the reference's fraction of stream "
                      "/ the row's; "
                      if any("paired_rounds" in r for r in rows) else "vs = seconds / seconds of the reference impl named; ")
                   # a suite that checks against another reference than kiln eager says which (attention)
                   + ctx.get("rel_error_def", "rel_error = max|y - eager| / max|eager| on the same inputs")
                   + (f" (tolerance {tolerances}; bold: above it)" if tolerances else ""))
    out.append("")
    has_limits = any(r["limit"] for r in rows)
    has_first = any("first_call_seconds" in r or "build_seconds" in r for r in rows)
    stream_paired = {r["workload"] for r in rows if "equal_stream_ratio" in r}
    has_equal_stream = bool(stream_paired)
    cols = ["workload", "impl", "median ms", "min-max ms", "rate"] + (["limit"] if has_limits else []) + \
        ["of limit", "vs"] + (["vs at equal stream"] if has_equal_stream else []) + ["rel_error"] + (["first call or build"] if has_first else [])
    out.append("| " + " | ".join(cols) + " |")
    out.append("| --- | --- |" + " ---: |" * (len(cols) - 2))
    for r in rows:
        vs = "n/a" if r["time_ratio"] is None else (
            "ref" if r["impl"] == r["ratio_ref"] else f"{r['time_ratio']:.2f}x {r['ratio_ref']}")
        if "time_ratio_min" in r:
            vs += f" ({r['time_ratio_min']:.2f}-{r['time_ratio_max']:.2f})"
        if has_equal_stream:  # "-": the workload measured no stream alongside (GFLOP/s rows)
            eq = f"{r['equal_stream_ratio']:.2f}x ({r['equal_stream_ratio_min']:.2f}-{r['equal_stream_ratio_max']:.2f})" \
                if "equal_stream_ratio" in r else "-" if r["workload"] not in stream_paired else \
                "ref" if r["impl"] == r["ratio_ref"] else "n/a"
            vs += f" | {eq}"
        err = "n/a" if r.get("no_output") else "not finite" if r["rel_error"] is None and r["impl"] != "kiln-eager" else (
            "reference" if r["impl"] == "kiln-eager" else f"{r['rel_error']:.1e}")
        if r.get("within_tolerance") is False:
            err = f"**{err} > {r['tolerance']:.0e}**"
        spread = f", {r['limit_min_rate']:.3g}-{r['limit_max_rate']:.3g}" if "limit_min_rate" in r else ""
        limit = (f" {fmt(r['limit'], '.3g')} ({r['limit_name'].split('@')[0]}{spread}) |" if r["limit"] else " n/a |") \
            if has_limits else ""
        out.append(f"| {r['workload']} | {r['impl']} | {fmt_time(r['seconds'])} | "
                   f"{fmt_time(r['min_seconds'])}-{fmt_time(r['max_seconds'])} | "
                   f"{r['rate']:.3g} {r['rate_unit']} |{limit} {fmt(r['fraction_of_limit'], '.1%')} | {vs} | {err} |"
                   + (f" {first_or_build(r)} |" if has_first else ""))
    failed = [r for r in rows if r.get("within_tolerance") is False]
    if failed:
        out.append("")
        own_ref = "rel_error_note" in ctx or "rel_error_def" in ctx
        out.append(("Outside the tolerance: " if own_ref else "Outside the tolerance against kiln eager: ") +
                   ", ".join(f"{r['workload']}/{r['impl']}" for r in failed))
    if errors:
        out.append("")
        out.append("Failed (no timing):")
        for name, msg in errors.items():
            out.append(f"- {name}: {msg}")
    skipped = [s for s in ctx.get("skipped", "").split("\n") if s]
    if skipped:
        out.append("")
        out.append("Not measured:")
        reasons = {}
        for s in skipped:
            name, why = s.split(": ", 1)
            reasons.setdefault(why, []).append(name)
        for why, names in reasons.items():
            impl = names[0].split("/")[1]
            wl = ", ".join(n.split("/")[0] for n in names)
            out.append(f"- {impl}: {why} ({wl})")
    return "\n".join(out) + "\n"


def plot(path, suite, ctx, rows, round_limits, quick):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    impls = [i for i in IMPL_ORDER if any(r["impl"] == i for r in rows)]
    impls += sorted({r["impl"] for r in rows} - set(impls))
    colors = {"kiln": "#d62728", "kiln-eager": "#ff9896", "hand-fused": "#2ca02c", "eigen": "#1f77b4",
              "xtensor": "#9467bd", "libtorch": "#ff7f0e", "openblas": "#7f7f7f", "kiln-unfused": "#e377c2",
              "libtorch-sdpa": "#ffbb78"}
    fig, ax = plt.subplots(figsize=(max(10, 1.5 * len(workloads) + 2), 6))
    cell = {(r["workload"], r["impl"]): r for r in rows}
    width = 0.8 / max(1, max(sum((w, i) in cell for i in impls) for w in workloads))
    # where no row has a physical limit (train's samples/s), the bars are the rates themselves
    rates = all(r["fraction_of_limit"] is None for r in rows)
    key = "rate" if rates else "fraction_of_limit"
    top, drawn = 0 if rates else 1.05, set()
    for i, w in enumerate(workloads):
        present = [impl for impl in impls if (w, impl) in cell and cell[(w, impl)][key] is not None]
        for j, impl in enumerate(present):  # the bars of a workload side by side, centred on it
            x = i + width * (j - (len(present) - 1) / 2)
            y = cell[(w, impl)][key]
            ax.bar(x, y, width, color=colors.get(impl), label=None if impl in drawn else impl)
            drawn.add(impl)
            top = max(top, y)
            text = (f"{y:.0f}" if y >= 100 else f"{y:.3g}") if rates else f"{y:.0%}" if y >= 0.01 else f"{y:.1%}"
            ax.text(x, y + 0.01 * (top if rates else 1), text, ha="center", va="bottom", fontsize=6, rotation=90)
    if not rates:
        ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(workloads)))
    ax.set_xticklabels(workloads, rotation=20, ha="right", fontsize=8)
    ax.set_ylim(0, top * 1.15)
    if rates:
        unit = rows[0]["rate_unit"]
        ax.set_ylabel(f"{unit} (higher is better)")
        what = f"median {unit}, no physical limit applies"
    else:
        ax.set_ylabel("fraction of the physical limit (higher is better)")
        in_turns = round_limits or any(r.get("limit_name") == "stream-triad-nt alongside" for r in rows)
        what = ("memory-bound rows vs stream measured in turns with each measurement, GEMM rows vs FMA peak "
                "measured in the workload's rounds") if in_turns else \
            "memory-bound rows vs stream, GEMM rows vs FMA peak, each measured right before and after the workload"
        if not any(r["rate_unit"] == "GFLOP/s" for r in rows):  # (the avx2 suite)
            what = what.split(", GEMM rows")[0]
        elif not any(r["rate_unit"] == "GB/s" for r in rows) and not in_turns:  # (autodiff, attention)
            what = "GFLOP/s vs FMA peak, measured right before and after each workload"
    ax.set_title(f"kiln '{suite}' suite{' (quick)' if quick else ''}: {what}\n"
                 f"{ctx.get('cpu_model', '')}, {ctx.get('threads', '?')} threads, OpenBLAS "
                 f"{ctx.get('openblas_coretype', '?')}, {ctx.get('date', '')[:10]}, load average at start "
                 f"{' '.join(ctx.get('loadavg_at_start', '?').split()[:3])}", fontsize=10)
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda k: impls.index(labels[k]))
    ax.legend([handles[k] for k in order], [labels[k] for k in order], ncol=len(labels), fontsize=8,
              loc="upper center", bbox_to_anchor=(0.5, -0.2))
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", required=True)
    ap.add_argument("--raw", required=True, help="Google Benchmark JSON (--benchmark_out)")
    ap.add_argument("--extra-raw", action="append", default=[],
                    help="more rows in the same layout, from another process of the same run (bench/torch_rows.py)")
    ap.add_argument("--build-seconds", action="append", default=[], metavar="IMPL=S",
                    help="the compile time of an implementation's translation unit (its rows' one-time cost)")
    ap.add_argument("--skipped", action="append", default=[], metavar="WORKLOAD/IMPL: WHY",
                    help="rows not measured, and why (listed under the table)")
    ap.add_argument("--out", required=True, help="directory for <suite>.json, .md, .png")
    args = ap.parse_args()

    ctx, groups, errors = load_runs(args.raw)
    for extra in args.extra_raw:
        extra_ctx, extra_groups, extra_errors = load_runs(extra)
        for g in extra_groups.values():
            g["extra"] = True
        groups.update(extra_groups)
        errors.update(extra_errors)
        if "torch_note" in extra_ctx:
            ctx["torch_note"] = extra_ctx["torch_note"]
    if not groups:
        sys.exit(f"report.py: no benchmark runs in {args.raw}")
    if args.skipped:
        ctx["skipped"] = ctx.get("skipped", "") + "".join(f"{x}\n" for x in args.skipped)
    quick = ctx.get("quick") == "true"
    rows, limits, round_limits = summarise(ctx, groups)
    for spec in args.build_seconds:
        impl, secs = spec.split("=", 1)
        for r in rows:
            if r["impl"] == impl:
                r["build_seconds"] = float(secs)
    os.makedirs(args.out, exist_ok=True)
    base = os.path.join(args.out, args.suite)
    with open(base + ".json", "w") as f:
        json.dump(rows, f, indent=1, allow_nan=False)  # strict JSON: no NaN or Infinity
        f.write("\n")
    md = markdown(args.suite, ctx, rows, limits, round_limits, quick, errors)
    with open(base + ".md", "w") as f:
        f.write(md)
    plot(base + ".png", args.suite, ctx, rows, round_limits, quick)
    print(md)
    print(f"report.py: wrote {base}.json, {base}.md, {base}.png")


if __name__ == "__main__":
    main()
