#!/usr/bin/env python3
"""The current PyTorch's rows of a benchmark suite: torch from PyPI, eager and torch.compile.

    bench/torch_rows.py --suite train --handoff DIR --threads 2 --reps 5 --out raw.json

bench/run.sh runs it right after the suite's own binary, in the same run, with the Python of the
virtual environment that scripts/setup-bench.sh makes (KILN_BENCH_TORCH_VENV, .venv-torch by
default), and merges what it writes into the suite's raw results before bench/report.py reads
them. It writes Google Benchmark's JSON layout (report.py's conventions: one benchmark per
repetition named "<workload>/<impl>", the counters amount, rate_scale, threads, rel_error and
tolerance), so its rows land in the suite's table beside kiln's and libtorch 1.13's.

Suites:
- train: the MLP training step of bench_train (784-512-256-10, relu, mean cross-entropy,
  torch.optim.Adam lr 1e-3), as a PyTorch user writes it: "torch" is eager; "torch-compile" is
  the same loop with the model under torch.compile and the optimizer's step compiled too (the
  recipe of PyTorch's tutorial "Compiling the optimizer"). bench_train hands over (directory
  $KILN_BENCH_HANDOFF) each workload's batches, kiln's initial weights and kiln's weights after
  its first step: both rows start from the same weights, take their first step on batch 0
  untimed, and rel_error compares loss and weights with kiln's as bench_train compares libtorch's
  (max of the loss's relative error and each parameter's L2 relative error).
- transformer: bench_transformer's layer step (a pre-norm causal encoder layer, width 128, 4
  heads, feed-forward 512, GELU, mse_loss, AdamW lr 1e-3, weight decay 0.01) as
  torch.nn.TransformerEncoderLayer(norm_first=True) with a causal mask, handed over and compared
  as train's (the parameters' L2 error over all of them as one vector, as bench_transformer's).

- attention: the attention suite's workloads (q, k, v [4, 8, T, 64], f32, scale 1/8, causal or
  not, the forward alone or with the gradients of sum(y * r)): "torch" is PyTorch's own op,
  torch.nn.functional.scaled_dot_product_attention (its fused CPU kernels), "torch-compile" the
  attention as a user writes it (matmul, masked_fill, softmax, matmul) under torch.compile, which
  rewrites it into the fused op. Inputs are drawn here (q, k uniform in [-2, 2), v, r in [-1, 1),
  as bench_attention draws its own) and rel_error is against the same attention and gradients
  computed in double, head by head, max|y - ref| / max|ref| over the outputs.

- cpu: the cpu suite's workloads at its sizes (gelu(x*a+b) on 16M floats, row softmax
  4096x4096, layer_norm 8192x1024, matmul 512/1024/2048, gelu(x w + bias) 1024x1024x4096, the
  MLP forward 784-1024-1024-10 at batch 16 and 256), as one PyTorch call or the obvious few:
  "torch" eager, "torch-compile" the same function under torch.compile. avx2: the avx2 suite's
  two gelu chains with PyTorch's kernels held to AVX2 (ATEN_CPU_CAPABILITY=avx2, and inductor's
  vectors to 256 bits), as bench_avx2 holds kiln's and its peers'.
- autodiff: the autodiff suite's training step of that MLP without the optimizer (loss and the
  six gradients; mean cross-entropy of integer labels) at batch 16 and 256, loss.backward()
  eager and with the model under torch.compile.
- export: the export suite's forward of the Fashion-MNIST MLP (784-512-256-10) at batch 1 and
  64 under torch.inference_mode, eager and compiled.
These draw their inputs here, in the suites' distributions (the same seed gives the same
values from run to run, not the C++ suite's values), and rel_error is against the same
computation in double, max|y - ref| / max|ref| over the outputs, as the suites measure theirs.

A repetition runs steps for at least --min-time seconds after a warm-up (torch.compile compiles
in the warm-up, which is not timed: its compile time is printed, with inductor's caches off)
and reports their mean.
"""
import argparse
import json
import os
import sys
import time


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", required=True, choices=["train", "attention", "transformer", "cpu", "avx2", "autodiff", "export"])
    ap.add_argument("--handoff", help="the directory the suite's binary wrote (train, transformer)")
    ap.add_argument("--quick", action="store_true", help="the suites' --quick sizes")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.3)
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps before the repetitions")
    ap.add_argument("--impls", default="torch,torch-compile")
    ap.add_argument("--out", required=True)
    return ap.parse_args()


def rel_l2(a, b):
    import torch
    d = torch.linalg.vector_norm((a.double() - b.double())).item()
    n = max(torch.linalg.vector_norm(b.double()).item(), 1e-30)
    e = d / n
    return e if e == e and e != float("inf") else 1e30


def handed_over_rows(args, torch, name, w, batches, make, loss_of, param_error):
    """The "torch" and "torch-compile" rows of one training workload that a suite's binary handed
    over: make() builds the model from kiln's initial weights and returns (model, params,
    optimizer); loss_of(fwd, batch) is the loss of a batch; param_error(params) compares the
    parameters after the first step with kiln's. Both rows take their first step on batch 0
    untimed; rel_error is the larger of the loss's relative error and param_error."""
    rows, nb = [], len(batches)
    for impl in args.impls.split(","):
        torch.manual_seed(0)
        model, params, opt = make()
        fwd, opt_step = model, opt.step
        if impl == "torch-compile":
            fwd = torch.compile(model, dynamic=False)
            opt_step = torch.compile(opt.step, dynamic=False)
        elif impl != "torch":
            sys.exit(f"torch_rows.py: unknown impl {impl}")

        def step(k):
            opt.zero_grad(set_to_none=True)
            loss = loss_of(fwd, batches[k])
            loss.backward()
            opt_step()
            return loss.item()

        t0 = time.perf_counter()
        first = step(0)
        first_s = time.perf_counter() - t0
        err_loss = abs(first - w["kiln_loss"]) / max(abs(w["kiln_loss"]), 1e-30)
        err_params = param_error(params)
        rel_error = max(err_loss if err_loss == err_loss else 1e30, err_params)
        nxt = [1 % nb]

        def run():
            step(nxt[0])
            nxt[0] = (nxt[0] + 1) % nb

        for _ in range(args.warmup):
            run()
        print(f"torch_rows.py: {name}/{impl}: first step {first_s:.2f} s"
              f"{' (torch.compile compiles in it)' if impl == 'torch-compile' else ''}, "
              f"loss {first:.7f} against kiln's {w['kiln_loss']:.7f}, rel_error {rel_error:.2e}", file=sys.stderr)
        rows += timed_reps(args, run, name, impl, {
            "amount": float(w["batch"]), "rate_scale": 1.0, "threads": float(args.threads),
            "tolerance": w["tolerance"], "rel_error": rel_error, "rel_error_loss": err_loss,
            "rel_error_params": err_params, "loss_first_step": first, "first_call_seconds": first_s,
            "label": "samples/s"})
    return rows


def handoffs(args):
    """The workloads the suite's binary handed over: (name, its directory prefix, its JSON)."""
    names = sorted(f[:-5] for f in os.listdir(args.handoff) if f.endswith(".json"))
    if not names:
        sys.exit(f"torch_rows.py: nothing handed over in {args.handoff}")
    for name in names:
        base = os.path.join(args.handoff, name)
        with open(base + ".json") as f:
            yield name, base, json.load(f)


def train_rows(args, torch):
    import numpy as np
    rows = []
    for name, base, w in handoffs(args):
        b, nb, n_in = w["batch"], w["batches"], w["in"]
        x = torch.from_numpy(np.fromfile(base + ".x", dtype="<f4").reshape(nb * b, n_in))
        y = torch.from_numpy(np.fromfile(base + ".y", dtype="<i8").reshape(nb * b))
        if x.shape[0] != y.shape[0] or int(y.min()) < 0 or int(y.max()) >= w["out"]:
            sys.exit(f"torch_rows.py: {name}: batches and labels do not match")
        batches = [(x[k * b:(k + 1) * b], y[k * b:(k + 1) * b]) for k in range(nb)]
        sizes = [(w["h1"], n_in), (w["h1"],), (w["h2"], w["h1"]), (w["h2"],), (w["out"], w["h2"]), (w["out"],)]
        init = [torch.from_numpy(np.fromfile(f"{base}.init.{q}", dtype="<f4").reshape(s)) for q, s in enumerate(sizes)]
        kiln = [torch.from_numpy(np.fromfile(f"{base}.kiln.{q}", dtype="<f4").reshape(s)) for q, s in enumerate(sizes)]

        def make():
            model = torch.nn.Sequential(torch.nn.Linear(n_in, w["h1"]), torch.nn.ReLU(),
                                        torch.nn.Linear(w["h1"], w["h2"]), torch.nn.ReLU(),
                                        torch.nn.Linear(w["h2"], w["out"]))
            params = list(model.parameters())
            with torch.no_grad():
                for p, v in zip(params, init):
                    p.copy_(v)
            return model, params, torch.optim.Adam(params, lr=1e-3)

        rows += handed_over_rows(args, torch, name, w, batches, make,
                                 lambda fwd, xy: torch.nn.functional.cross_entropy(fwd(xy[0]), xy[1]),
                                 lambda params: max(rel_l2(p.detach(), v) for p, v in zip(params, kiln)))
    return rows, [pypi_source(torch, args, "train") + ", eager and with the model and the optimizer step under "
                  "torch.compile; rel_error against kiln's first step"]


def transformer_rows(args, torch):
    import numpy as np
    rows = []
    for name, base, w in handoffs(args):
        b, nb, t, width = w["batch"], w["batches"], w["context"], w["width"]
        x = torch.from_numpy(np.fromfile(base + ".x", dtype="<f4").reshape(nb, b, t, width))
        tg = torch.from_numpy(np.fromfile(base + ".t", dtype="<f4").reshape(nb, b, t, width))
        batches = [(x[k], tg[k]) for k in range(nb)]
        mask = torch.nn.Transformer.generate_square_subsequent_mask(t)

        def make():
            layer = torch.nn.TransformerEncoderLayer(width, w["heads"], w["ff"], dropout=0.0, activation="gelu",
                                                     batch_first=True, norm_first=True)
            own = dict(layer.named_parameters())
            with torch.no_grad():
                for q, full in enumerate(w["params"]):
                    p = own[full.split(".", 1)[1]]  # "layer.self_attn.in_proj_weight" -> "self_attn...."
                    v = np.fromfile(f"{base}.init.{q}", dtype="<f4")
                    if v.size != p.numel():
                        sys.exit(f"torch_rows.py: {name}: {full} has {v.size} values, torch's {p.numel()}")
                    p.copy_(torch.from_numpy(v).reshape(p.shape))
            params = [own[full.split(".", 1)[1]] for full in w["params"]]
            return layer, params, torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)

        kiln = torch.cat([torch.from_numpy(np.fromfile(f"{base}.kiln.{q}", dtype="<f4")) for q in range(len(w["params"]))])
        rows += handed_over_rows(
            args, torch, name, w, batches, make,
            lambda fwd, xt: torch.nn.functional.mse_loss(fwd(xt[0], src_mask=mask, is_causal=True), xt[1]),
            # all parameters as one vector, as bench_transformer compares libtorch's (its compare() says why)
            lambda params: rel_l2(torch.cat([p.detach().reshape(-1) for p in params]), kiln))
    return rows, [pypi_source(torch, args, "transformer") + ": torch.nn.TransformerEncoderLayer (norm_first, "
                  "GELU, dropout 0, a causal mask), eager and with the layer and the optimizer step under torch.compile; "
                  "rel_error against kiln's first step"]


def timed_reps(args, run, name, impl, counters):
    """Repetitions of run() of at least --min-time each, as Google Benchmark rows."""
    rows = []
    for r in range(args.reps):
        iters, t0 = 0, time.perf_counter()
        while True:
            run()
            iters += 1
            el = time.perf_counter() - t0
            if el >= args.min_time:
                break
        rows.append(dict({"name": f"{name}/{impl}", "run_name": f"{name}/{impl}", "run_type": "iteration",
                          "repetitions": args.reps, "repetition_index": r, "iterations": iters,
                          "real_time": el / iters * 1e3, "cpu_time": el / iters * 1e3, "time_unit": "ms"},
                         **counters))
    return rows


def attention_rows(args, torch):
    F = torch.nn.functional
    batch, heads, dim = 4, 8, 64
    scale = 1.0 / dim ** 0.5
    lengths = [256, 200] if args.quick else [1024, 4096]
    gen = torch.Generator().manual_seed(args.seed)

    def uniform(shape, lo, hi):
        return torch.rand(shape, generator=gen) * (hi - lo) + lo

    def naive(q, k, v, causal):
        s = torch.matmul(q, k.transpose(-2, -1)) * scale
        if causal:
            t = q.shape[-2]
            s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
        return torch.matmul(torch.softmax(s, dim=-1), v)

    def reference(q, k, v, r, causal):
        outs = [torch.empty(q.shape, dtype=torch.float64) for _ in range(4)]
        for b in range(batch):
            for h in range(heads):
                qq, kk, vv = (x[b, h].double().requires_grad_(True) for x in (q, k, v))
                y = naive(qq, kk, vv, causal)
                (y * r[b, h].double()).sum().backward()
                for o, val in zip(outs, (y.detach(), qq.grad, kk.grad, vv.grad)):
                    o[b, h] = val
        return outs

    def rel(a, ref):
        e = ((a.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
        return e if e == e and e != float("inf") else 1e30

    def available_bytes():
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
        return float("inf")

    rows, skipped = [], []
    for t in lengths:
        for causal in (False, True):
            shape = (batch, heads, t, dim)
            q, k = uniform(shape, -2, 2), uniform(shape, -2, 2)
            v, r = uniform(shape, -1, 1), uniform(shape, -1, 1)
            t0 = time.perf_counter()
            ref = reference(q, k, v, r, causal)
            print(f"torch_rows.py: attention T={t}{' causal' if causal else ''}: reference in double "
                  f"{time.perf_counter() - t0:.1f} s", file=sys.stderr)
            for backward in (False, True):
                name = f"{'fwd_bwd' if backward else 'fwd'}{'_causal' if causal else ''}_t{t}"
                forward = 4.0 * batch * heads * dim * t * t / (2 if causal else 1)
                for impl in args.impls.split(","):
                    if impl == "torch":
                        fn = lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=causal)  # noqa: E731
                    elif impl == "torch-compile":  # compiled afresh for each workload's shapes
                        # the naive spelling holds [B, H, T, T] scores: by estimate 3 such
                        # tensors forward, 8 with the backward's (a T = 4096 step ran a 24 GB
                        # machine out of memory); skipped, and said so, where they would not fit
                        need = (8 if backward else 3) * batch * heads * t * t * 4
                        if need > 0.8 * available_bytes():
                            skipped.append(f"{name}/torch-compile (needs about {need / 2**30:.0f} GiB, "
                                           f"{available_bytes() / 2**30:.0f} GiB available)")
                            print(f"torch_rows.py: skipped {skipped[-1]}", file=sys.stderr)
                            continue
                        compiled = torch.compile(naive, dynamic=False)
                        fn = lambda a, b, c: compiled(a, b, c, causal)  # noqa: E731
                    else:
                        sys.exit(f"torch_rows.py: unknown impl {impl}")
                    leaves = [x.clone().requires_grad_(backward) for x in (q, k, v)]

                    def run():
                        for x in leaves:
                            x.grad = None
                        if backward:
                            y = fn(*leaves)
                            (y * r).sum().backward()
                        else:
                            with torch.no_grad():
                                y = fn(*leaves)
                        return y

                    t0 = time.perf_counter()
                    y = run()
                    first = time.perf_counter() - t0
                    errs = [rel(y.detach(), ref[0])] + ([rel(x.grad, g) for x, g in zip(leaves, ref[1:])] if backward else [])
                    print(f"torch_rows.py: {name}/{impl}: first call {first:.2f} s, rel_error {max(errs):.2e}",
                          file=sys.stderr)
                    counters = {"amount": forward * (3.5 if backward else 1), "threads": float(args.threads),
                                "tolerance": 1e-4, "rel_error": max(errs), "first_call_seconds": first,
                                "label": "GFLOP/s"}
                    for o, e in zip(("y", "dq", "dk", "dv"), errs):
                        counters[f"rel_error_{o}"] = e
                    rows += timed_reps(args, run, name, impl, counters)
    note = (pypi_source(torch, args, "attention", ", its own inputs drawn alike") + ": "
            "F.scaled_dot_product_attention, and the matmul-softmax-matmul spelling under torch.compile; "
            "rel_error against its own double reference")
    if skipped:
        note += "; not run, for want of memory: " + ", ".join(skipped)
    return rows, [note]


def pypi_source(torch, args, suite, detail=""):
    """The start of each suite's note: which PyTorch ran its rows, and how."""
    return (f"torch, torch-compile: PyTorch {torch.__version__} from PyPI (bench/torch_rows.py, a separate Python "
            f"process right after bench_{suite}, {args.threads} threads{detail})")


def rel_max(ys, refs):
    """max over the outputs of max|y - ref| / max|ref| (the C++ suites' rel_error)."""
    worst = 0.0
    for y, ref in zip(ys, refs):
        e = ((y.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()
        worst = max(worst, e if e == e and e != float("inf") else 1e30)
    return worst


def compiled(torch, impl, fn):
    """fn as the row runs it: eager ("torch"), or under torch.compile ("torch-compile"), compiled
    afresh for the workload's shapes."""
    if impl == "torch":
        return fn
    if impl == "torch-compile":
        torch._dynamo.reset()
        return torch.compile(fn, dynamic=False)
    sys.exit(f"torch_rows.py: unknown impl {impl}")


def measured(args, name, make_call, refs, counters):
    """The rows of one workload: for each impl, make_call(impl) gives one timed call (no
    arguments, returning its outputs); its first call is checked against refs (the same in
    double) and timed on its own (torch.compile compiles in it), then the repetitions."""
    rows = []
    for impl in args.impls.split(","):
        call = make_call(impl)
        t0 = time.perf_counter()
        ys = call()
        first = time.perf_counter() - t0
        err = rel_max(ys, refs)
        for _ in range(args.warmup):
            call()
        print(f"torch_rows.py: {name}/{impl}: first call {first:.2f} s, rel_error {err:.2e}", file=sys.stderr)
        rows += timed_reps(args, call, name, impl,
                           dict(counters, threads=float(args.threads), rel_error=err, first_call_seconds=first))
    return rows


def uniform_of(torch, seed):
    gen = torch.Generator().manual_seed(seed)

    def uniform(shape, lo, hi):
        return torch.rand(shape, generator=gen) * (hi - lo) + lo
    return uniform


def glorot(uniform, n_in, n_out):
    r = (6.0 / (n_in + n_out)) ** 0.5
    return uniform((n_in, n_out), -r, r)


def cpu_rows(args, torch, avx2=False):
    """The cpu suite's workloads (bench_cpu.cpp's specs, at --quick its quick sizes); avx2: its
    gelu chains only. Weights are [in, out], as the C++ suite lays them out."""
    F = torch.nn.functional
    uniform = uniform_of(torch, args.seed)
    f32 = 4.0
    specs = []
    n = (1 << 20) + 3 if args.quick else 1 << 24
    count = "1048579" if args.quick else "16M"
    if avx2:
        specs += [("gelu_tanh_chain_" + count, "gelu_tanh", n), ("gelu_chain_" + count, "gelu", n)]
    else:
        q = args.quick
        specs += [("gelu_chain_" + count, "gelu", n),
                  ("softmax_%dx%d" % ((509, 1001) if q else (4096, 4096)), "softmax", (509, 1001) if q else (4096, 4096)),
                  ("layer_norm_%dx%d" % ((1003, 1021) if q else (8192, 1024)), "layer_norm",
                   (1003, 1021) if q else (8192, 1024))]
        specs += [(f"matmul_{m}", "matmul", m) for m in ((97, 128, 203) if q else (512, 1024, 2048))]
        lg = (127, 255, 513) if q else (1024, 1024, 4096)
        specs += [("linear_gelu_%dx%dx%d" % lg, "linear_gelu", lg)]
        specs += [(f"mlp_b{b}", "mlp", b) for b in ((16, 63) if q else (16, 256))]
    rows = []
    for name, what, size in specs:
        if what in ("gelu", "gelu_tanh"):  # z = x*a + b spans [-5, 5], as bench_cpu draws it
            approx = "tanh" if what == "gelu_tanh" else "none"
            inputs = [uniform((size,), -3, 3), uniform((size,), 0.5, 1.5), uniform((size,), -0.5, 0.5)]

            def fn(x, a, b, approx=approx):
                return (F.gelu(x * a + b, approximate=approx),)
            counters = {"amount": 4 * f32 * size, "label": "GB/s", "tolerance": 1e-5}
        elif what == "softmax":
            inputs = [uniform(size, -8, 8)]

            def fn(x):
                return (torch.softmax(x, dim=-1),)
            counters = {"amount": 2 * f32 * size[0] * size[1], "label": "GB/s", "tolerance": 1e-4}
        elif what == "layer_norm":
            m, k = size
            inputs = [uniform(size, -1.5, 2.5), uniform((k,), 0.5, 1.5), uniform((k,), -0.5, 0.5)]

            def fn(x, g, b):
                return (F.layer_norm(x, (x.shape[-1],), g, b, eps=1e-5),)
            counters = {"amount": f32 * (2.0 * m * k + 2.0 * k), "label": "GB/s", "tolerance": 1e-4}
        elif what == "matmul":
            inputs = [uniform((size, size), -1, 1), uniform((size, size), -1, 1)]

            def fn(a, b):
                return (a @ b,)
            counters = {"amount": 2.0 * size ** 3, "label": "GFLOP/s", "tolerance": 1e-4}
        elif what == "linear_gelu":
            m, k, nn = size
            r = 1.7 / k ** 0.5  # pre-activations of order 1
            inputs = [uniform((m, k), -1, 1), uniform((k, nn), -r, r), uniform((nn,), -0.5, 0.5)]

            def fn(x, w, b):
                return (F.gelu(torch.addmm(b, x, w)),)
            counters = {"amount": 2.0 * m * k * nn, "label": "GFLOP/s", "tolerance": 1e-4}
        else:  # mlp: inputs like pixels, Glorot-uniform weights
            inputs = [uniform((size, 784), 0, 1), glorot(uniform, 784, 1024), uniform((1024,), -0.1, 0.1),
                      glorot(uniform, 1024, 1024), uniform((1024,), -0.1, 0.1), glorot(uniform, 1024, 10),
                      uniform((10,), -0.1, 0.1)]

            def fn(x, w1, b1, w2, b2, w3, b3):
                h = torch.relu(torch.addmm(b1, x, w1))
                return (torch.addmm(b3, torch.relu(torch.addmm(b2, h, w2)), w3),)
            counters = {"amount": 2.0 * size * (784 * 1024 + 1024 * 1024 + 1024 * 10), "label": "GFLOP/s",
                        "tolerance": 1e-4}
        refs = fn(*[x.double() for x in inputs])
        with torch.inference_mode():
            rows += measured(args, name, lambda impl, fn=fn, inputs=inputs: (
                lambda f=compiled(torch, impl, fn): f(*inputs)), refs, counters)
    isa = torch.backends.cpu.get_cpu_capability() + (" (ATEN_CPU_CAPABILITY=avx2, inductor simdlen 8)" if avx2 else "")
    note = (pypi_source(torch, args, "avx2" if avx2 else "cpu", f", kernels: {isa}, its own inputs drawn alike") +
            ": eager, and the same function under torch.compile; rel_error against the same in "
            "double; vs is the ratio of medians (not paired by round), of limit n/a (no stream measured alongside)")
    return rows, [note]


def mlp_step_rows(args, torch):
    """The autodiff suite: loss and the six gradients of the MLP 784-1024-1024-10 (relu, mean
    cross-entropy), without an optimizer."""
    F = torch.nn.functional
    uniform = uniform_of(torch, args.seed)
    rows = []
    for b in ((16, 37) if args.quick else (16, 256)):
        x = uniform((b, 784), 0, 1)
        labels = torch.randint(0, 10, (b,), generator=torch.Generator().manual_seed(args.seed + b))
        params = [glorot(uniform, 784, 1024), uniform((1024,), -0.1, 0.1), glorot(uniform, 1024, 1024),
                  uniform((1024,), -0.1, 0.1), glorot(uniform, 1024, 10), uniform((10,), -0.1, 0.1)]

        def forward(x, w1, b1, w2, b2, w3, b3):
            h = torch.relu(torch.addmm(b2, torch.relu(torch.addmm(b1, x, w1)), w2))
            return F.cross_entropy(torch.addmm(b3, h, w3), labels)

        def step_of(fwd):
            def step(x, *ps):
                leaves = [p.detach().requires_grad_(True) for p in ps]
                loss = fwd(x, *leaves)
                return (loss.detach(),) + torch.autograd.grad(loss, leaves)
            return step

        forward_flops = 2.0 * b * (784 * 1024 + 1024 * 1024 + 1024 * 10)
        counters = {"amount": 3.0 * forward_flops, "label": "GFLOP/s", "tolerance": 1e-4}
        refs = step_of(forward)(x.double(), *[p.double() for p in params])
        rows += measured(args, f"mlp_step_b{b}", lambda impl, x=x, params=params, forward=forward, step_of=step_of: (
            lambda step=step_of(compiled(torch, impl, forward)): step(x, *params)), refs, counters)
    note = (pypi_source(torch, args, "autodiff", ", its own inputs drawn alike") + ": the step with "
            "torch.autograd.grad, eager and with the forward under torch.compile (AOTAutograd compiles its backward); "
            "rel_error against the same step in double")
    return rows, [note]


def export_rows(args, torch):
    """The export suite: the Fashion-MNIST MLP's forward (784-512-256-10, relu), batch 1 and 64,
    cycling through a set of requests as bench_export does."""
    uniform = uniform_of(torch, args.seed)
    rows = []
    ws = [glorot(uniform, 784, 512), uniform((512,), -0.1, 0.1), glorot(uniform, 512, 256),
          uniform((256,), -0.1, 0.1), glorot(uniform, 256, 10), uniform((10,), -0.1, 0.1)]

    def forward(x, w1, b1, w2, b2, w3, b3):
        return (torch.addmm(b3, torch.relu(torch.addmm(b2, torch.relu(torch.addmm(b1, x, w1)), w2)), w3),)

    def cycling(impl, requests):  # one call on the next request, the first on requests[0]
        f, nxt = compiled(torch, impl, forward), [0]

        def call():
            y = f(requests[nxt[0]], *ws)
            nxt[0] = (nxt[0] + 1) % len(requests)
            return y
        return call

    for b in (1, 64):
        requests = [uniform((b, 784), 0, 1) for _ in range(32 if args.quick else 256)]
        refs = forward(requests[0].double(), *[w.double() for w in ws])
        counters = {"amount": float(b), "rate_scale": 1.0, "label": "samples/s", "tolerance": 1e-4}
        with torch.inference_mode():
            rows += measured(args, f"mlp_forward_b{b}", lambda impl, r=requests: cycling(impl, r), refs, counters)
    note = (pypi_source(torch, args, "export", ", its own weights and requests drawn alike") + ": "
            "nn.Linear's addmm and relu under torch.inference_mode, eager and under torch.compile; rel_error "
            "against the same in double")
    return rows, [note]


def main():
    args = parse()
    if args.suite == "avx2":  # before torch loads: its kernels are chosen then
        os.environ["ATEN_CPU_CAPABILITY"] = "avx2"
    # torch.compile's first call compiles from nothing, as on a user's first run: inductor's
    # caches in /tmp (kept between runs) would otherwise make a second run's first call cheap
    os.environ.setdefault("TORCHINDUCTOR_FORCE_DISABLE_CACHES", "1")
    import torch
    torch.set_num_threads(args.threads)
    if args.suite == "avx2":
        import torch._inductor.config as inductor_config
        inductor_config.cpp.simdlen = 8  # 8 floats: AVX2's vectors
    if args.suite in ("train", "transformer") and not args.handoff:
        sys.exit(f"torch_rows.py: --suite {args.suite} needs --handoff")
    if args.suite == "train":
        rows, notes = train_rows(args, torch)
    elif args.suite == "transformer":
        rows, notes = transformer_rows(args, torch)
    elif args.suite == "attention":
        rows, notes = attention_rows(args, torch)
    elif args.suite in ("cpu", "avx2"):
        rows, notes = cpu_rows(args, torch, avx2=args.suite == "avx2")
    elif args.suite == "autodiff":
        rows, notes = mlp_step_rows(args, torch)
    else:
        rows, notes = export_rows(args, torch)
    out = {"context": {"torch_version": torch.__version__, "torch_note": " ".join(notes)}, "benchmarks": rows}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
