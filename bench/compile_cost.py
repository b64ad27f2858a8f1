#!/usr/bin/env python3
"""Build cost of kiln: what a translation unit costs the compiler (wall seconds, peak memory).

Two suites:
  programs (default)  small programs written with kiln and, beside each, the same program
         written with Eigen's Tensor module (bench/compile/{kiln,eigen}_*.cpp): the header and an
         empty main, one eager expression, three, an MLP forward, an MLP training step; and
         kiln's Fashion-MNIST example. Each is compiled and linked with g++ and clang at -O2
         (kiln with -fopenmp -DKILN_HAVE_OPENMP=1, as its CMake target builds), kiln's and
         Eigen's in alternation, --repeat times; the median is kept. kiln's programs are also
         built with KILN_SEPARATE_COMPILATION ("kiln-separate"), linking the object that
         <kiln/src.hpp> compiles once per compiler (that compile is a row of its own). Writes
         bench/results/compile.json.
  scaling  for each compiler and N, a program that captures a graph, runs the whole pipeline on
         it at compile time (`kiln::plan<E>`) and evaluates it once, compiled with -c -O2:
           chain  N pointwise ops one after another (tanh, * 1.5, alternating): depth N
           wide   N independent branches tanh(x * k) summed as a balanced tree
           mlp    forward and backward of an MLP with N hidden layers (64 wide, relu,
                  cross-entropy): outputs(loss, grad(loss, wrt(every weight and bias)))
         With --steps, also finds (by bisection, clang only, -fsyntax-only) the smallest
         -fconstexpr-steps each chain needs (clang's default: 1,048,576 per constant evaluation).
         Writes bench/results/compile_scaling.json.
With --baseline DIR (another checkout's include/), each kiln program is also built with those
headers right after its own build ("kiln@base", "kiln-separate@base"), and a second table gives
this tree's time and memory over the baseline's: a before-and-after of a change within one run.
Prints a Markdown table. Run it on a quiet machine: the build uses one core per compile.
Usage: bench/compile_cost.py [--suite programs|scaling] [--compilers g++,clang++] [--repeat 3]
       [--sizes 25,50,...] [--shapes chain,wide,mlp] [--timeout 300] [--steps] [--out FILE]
       [--baseline DIR]
"""
import argparse, json, os, platform, re, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INCLUDE = os.path.join(ROOT, 'include')

def chain_source(n):
    lines = ['#include <kiln/kiln.hpp>', 'using namespace kiln;', 'int main() {',
             '  auto e0 = input<"x", f32, shape<dyn, 16>>{};']
    for k in range(1, n + 1):
        lines.append(f'  auto e{k} = ' + (f'tanh(e{k-1});' if k % 2 else f'e{k-1} * 1.5f;'))
    return finish(lines, f'e{n}')

def wide_source(n):
    lines = ['#include <kiln/kiln.hpp>', 'using namespace kiln;', 'int main() {',
             '  auto x = input<"x", f32, shape<dyn, 16>>{};']
    level = []
    for k in range(n):
        lines.append(f'  auto b{k} = tanh(x * {k + 1}.0f);')
        level.append(f'b{k}')
    depth = 0
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level) - 1, 2):
            name = f's{depth}_{i // 2}'
            lines.append(f'  auto {name} = {level[i]} + {level[i + 1]};')
            nxt.append(name)
        if len(level) % 2:
            nxt.append(level[-1])
        level, depth = nxt, depth + 1
    return finish(lines, level[0])

def mlp_source(n):
    lines = ['#include <kiln/kiln.hpp>', 'using namespace kiln;', 'int main() {',
             '  using In = input<"in", f32, shape<dyn, 64>>;', '  using Lab = input<"lab", i64, shape<dyn>>;',
             '  auto h0 = In{};']
    params = []
    for k in range(1, n + 2):
        out = 64 if k <= n else 10
        lines.append(f'  using W{k} = param<"w{k}", f32, shape<{out}, 64>>;')
        lines.append(f'  using B{k} = param<"b{k}", f32, shape<{out}>>;')
        params += [f'W{k}{{}}', f'B{k}{{}}']
        if k <= n:
            lines.append(f'  auto h{k} = relu(linear(h{k-1}, W{k}{{}}, B{k}{{}}));')
    lines.append(f'  auto loss = cross_entropy(linear(h{n}, W{n+1}{{}}, B{n+1}{{}}), Lab{{}});')
    lines.append(f'  auto step = outputs(loss, grad(loss, wrt({", ".join(params)})));')
    lines += ['  static_assert(!check_graph(plan<decltype(step)>::schedule.g));',
              '  return explain_type<decltype(step)>().kernels > 0 ? 0 : 1;', '}']
    return '\n'.join(lines) + '\n'

SOURCES = {'chain': lambda n: chain_source(n), 'wide': lambda n: wide_source(n), 'mlp': lambda n: mlp_source(n)}

def finish(lines, out):
    lines += [f'  using E = decltype({out});',
              '  static_assert(!check_graph(plan<E>::schedule.g));',
              '  tensor<float, 2> t({2, 16});',
              f'  auto r = eval({out}, {{{{"x", t}}}});',
              '  return r.numel() == 32 ? 0 : 1;', '}']
    return '\n'.join(lines) + '\n'

def measure(cxx, src_path, timeout):
    cmd = ['/usr/bin/time', '-f', '%e %M', cxx, '-std=c++20', '-O2', f'-I{INCLUDE}', '-c', src_path, '-o', os.devnull]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {'ok': False, 'error': f'timeout after {timeout} s', 'seconds': None, 'peak_mb': None}
    last = p.stderr.strip().splitlines()[-1].split()
    seconds, kb = float(last[0]), int(last[1])
    err = ''
    if p.returncode != 0:
        m = re.search(r'(error|fatal error): (.*)', p.stderr)
        err = m.group(2)[:160] if m else 'failed'
    return {'ok': p.returncode == 0, 'error': err, 'seconds': seconds, 'peak_mb': round(kb / 1024)}

PROGRAMS = ['empty', 'eager1', 'eager3', 'mlp_forward', 'mlp_train']
EIGEN = '/usr/include/eigen3'

def link_cost(cxx, src, flags, timeout, extra_objects=(), object_out=None, libs=()):
    """Compiles and links src to a program in a scratch directory (or, given object_out,
    compiles it to that object): seconds and peak MB."""
    with tempfile.TemporaryDirectory() as tmp:
        out = ['-c', '-o', object_out] if object_out else ['-o', os.path.join(tmp, 'a.out')]
        cmd = ['/usr/bin/time', '-f', '%e %M', cxx, '-std=c++20', '-O2', *flags, src, *extra_objects, *libs, *out]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, None, f'timeout after {timeout} s'
    last = p.stderr.strip().splitlines()[-1].split()
    if p.returncode != 0:
        m = re.search(r'(error|fatal error): (.*)', p.stderr)
        return None, None, m.group(2)[:160] if m else 'failed'
    return float(last[0]), round(int(last[1]) / 1024), ''

def cpu_model():
    """The CPU's name with its family and model (a VM's name alone may not tell Zen 3 from 5)."""
    info = {}
    try:
        for line in open('/proc/cpuinfo'):
            key, _, value = line.partition(':')
            info.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor()
    return f"{info.get('model name', '?')}, family {info.get('cpu family', '?')} model {info.get('model', '?')}"

def compiler_version(cxx):
    return subprocess.run([cxx, '--version'], capture_output=True, text=True).stdout.splitlines()[0]

def programs_suite(a):
    here = os.path.join(ROOT, 'bench', 'compile')
    kiln_flags = [f'-I{INCLUDE}', '-fopenmp', '-DKILN_HAVE_OPENMP=1']
    jobs = []  # (program, library, source, flags)
    for prog in PROGRAMS:
        jobs.append((prog, 'kiln', os.path.join(here, f'kiln_{prog}.cpp'), kiln_flags))
        jobs.append((prog, 'eigen', os.path.join(here, f'eigen_{prog}.cpp'), [f'-I{EIGEN}', '-fopenmp']))
    jobs.append(('fashion_mnist_example', 'kiln', os.path.join(ROOT, 'examples', 'train_fashion_mnist.cpp'),
                 kiln_flags + [f'-I{os.path.join(ROOT, "examples")}']))
    # kiln with KILN_SEPARATE_COMPILATION: each program links the run-time object that
    # <kiln/src.hpp> compiles once per compiler (its cost is the row "runtime (src.hpp)")
    sep_flags = kiln_flags + ['-DKILN_SEPARATE_COMPILATION']
    for prog in PROGRAMS:
        jobs.append((prog, 'kiln-separate', os.path.join(here, f'kiln_{prog}.cpp'), sep_flags))
    jobs.append(('fashion_mnist_example', 'kiln-separate', os.path.join(ROOT, 'examples', 'train_fashion_mnist.cpp'),
                 sep_flags + [f'-I{os.path.join(ROOT, "examples")}']))
    def on_baseline(flags):  # the same flags with the baseline's headers for this tree's
        return [f'-I{os.path.abspath(a.baseline)}' if f == f'-I{INCLUDE}' else f for f in flags]
    if a.baseline:  # each kiln job, then the same with the baseline's headers
        jobs = [j for job in jobs for j in ([job] if job[1] == 'eigen' else
                [job, (job[0], job[1] + '@base', job[2], on_baseline(job[3]))])]
    rows = []
    tmp_rt = tempfile.TemporaryDirectory()
    for cxx in a.compilers.split(','):
        rt_src = os.path.join(tmp_rt.name, 'runtime.cpp')
        rt_obj = {}
        with open(rt_src, 'w') as f:
            f.write('#include <kiln/src.hpp>\n')
        for suffix in ([''] + (['@base'] if a.baseline else [])):
            obj = os.path.join(tmp_rt.name, f'runtime-{cxx}{suffix}.o')
            flags = on_baseline(sep_flags) if suffix else sep_flags
            # (kiln before separate compilation has no src.hpp: no object, its separate rows are skipped)
            sec, mb, err = link_cost(cxx, rt_src, flags, a.timeout, object_out=obj)
            if not err:
                rt_obj[suffix] = obj
            r = {'program': 'runtime (src.hpp)', 'library': 'kiln-separate' + suffix, 'compiler': cxx, 'ok': not err,
                 'error': err, 'seconds': sec, 'peak_mb': mb, 'runs_seconds': [sec]}
            rows.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
        for prog, lib, src, flags in jobs:
            suffix = '@base' if lib.endswith('@base') else ''
            separate = lib.startswith('kiln-separate')
            if not os.path.exists(src) or (separate and suffix not in rt_obj):
                continue
            runs, err = [], ''
            objs = [rt_obj[suffix]] if separate else []
            for _ in range(a.repeat):
                sec, mb, err = link_cost(cxx, src, flags, a.timeout, objs, libs=['-lz'] if 'fashion' in prog else [])
                if err:
                    break
                runs.append((sec, mb))
            r = {'program': prog, 'library': lib, 'compiler': cxx, 'ok': not err, 'error': err,
                 'seconds': statistics.median(x[0] for x in runs) if runs and not err else None,
                 'peak_mb': max(x[1] for x in runs) if runs and not err else None,
                 'runs_seconds': [x[0] for x in runs]}
            rows.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
    meta = {'cpu': cpu_model(), 'cores': os.cpu_count(), 'date': time.strftime('%Y-%m-%d'),
            'commit': subprocess.run(['git', '-C', ROOT, 'rev-parse', '--short', 'HEAD'], capture_output=True,
                                     text=True).stdout.strip(),
            'compilers': {c: compiler_version(c) for c in a.compilers.split(',')},
            'flags': '-std=c++20 -O2, compile and link; kiln: -fopenmp -DKILN_HAVE_OPENMP=1 (kiln-separate: and -DKILN_SEPARATE_COMPILATION, linking the object of <kiln/src.hpp> compiled once); eigen: -fopenmp',
            'repeat': a.repeat, 'kiln_headers': a.include or 'this checkout', 'baseline_headers': a.baseline}
    out = a.out or os.path.join(ROOT, 'bench', 'results', 'compile.json')
    with open(out, 'w') as f:
        json.dump({'meta': meta, 'rows': rows}, f, indent=1)
    by = {(r['program'], r['library'], r['compiler']): r for r in rows}
    print(f"{meta['cpu']}, {meta['cores']} cores, {meta['date']}, {meta['commit']}")
    print('| program | compiler | kiln s | kiln MB | kiln separate s | separate MB | Eigen s | Eigen MB '
          '| kiln / Eigen | separate / Eigen |')
    print('| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
    def cell(r):
        if not r:
            return '', ''
        return (f"{r['seconds']:.2f}" if r['ok'] else r['error']), str(r['peak_mb'] or '')
    def ratio(x, e):
        return f"{x['seconds'] / e['seconds']:.2f}" if x and e and x['ok'] and e['ok'] else ''
    for cxx in a.compilers.split(','):
        for prog in PROGRAMS + ['fashion_mnist_example', 'runtime (src.hpp)']:
            k, s, e = (by.get((prog, lib, cxx)) for lib in ('kiln', 'kiln-separate', 'eigen'))
            if not (k or s):
                continue
            print(f"| {prog} | {cxx} | {' | '.join(cell(k))} | {' | '.join(cell(s))} | {' | '.join(cell(e))} "
                  f"| {ratio(k, e)} | {ratio(s, e)} |")

    if a.baseline:
        print()
        print(f'Against the baseline headers ({a.baseline}), in the same run: this tree over the baseline (below 1: '
              'this tree is cheaper)')
        print('| program | compiler | kiln s | kiln MB | separate s | separate MB |')
        print('| --- | --- | ---: | ---: | ---: | ---: |')
        def over(x, b, key):
            return f"{x[key] / b[key]:.2f}" if x and b and x['ok'] and b['ok'] and b[key] else ''
        for cxx in a.compilers.split(','):
            for prog in PROGRAMS + ['fashion_mnist_example', 'runtime (src.hpp)']:
                k, kb, s_, sb = (by.get((prog, lib, cxx)) for lib in ('kiln', 'kiln@base', 'kiln-separate',
                                                                       'kiln-separate@base'))
                if not (k or s_):
                    continue
                print(f"| {prog} | {cxx} | {over(k, kb, 'seconds')} | {over(k, kb, 'peak_mb')} "
                      f"| {over(s_, sb, 'seconds')} | {over(s_, sb, 'peak_mb')} |")

def min_steps(src, guess=None):
    """Smallest -fconstexpr-steps with which clang accepts src (within 2%), or None above 16M.
    A guess (the previous size's count scaled) brackets the search, so that a large program
    takes a few clang runs instead of a dozen."""
    def ok(steps):
        cmd = ['clang++', '-std=c++20', '-fsyntax-only', f'-fconstexpr-steps={steps}', f'-I{INCLUDE}', src]
        return subprocess.run(cmd, capture_output=True).returncode == 0
    lo, hi = 1000, 16_000_000
    if guess:
        lo, hi = max(1000, int(guess * 0.85)), int(guess * 1.2)
        while hi < 16_000_000 and not ok(hi):
            lo, hi = hi, hi * 2
        while lo > 1000 and ok(lo):
            hi, lo = lo, lo // 2
    if not ok(hi):
        return None
    while hi - lo > hi // 50:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi

def main():
    global INCLUDE
    ap = argparse.ArgumentParser()
    ap.add_argument('--suite', choices=['programs', 'scaling'], default='programs')
    ap.add_argument('--repeat', type=int, default=3)
    ap.add_argument('--sizes', default='25,50,100,200,400,800,1600')
    ap.add_argument('--compilers', default='g++,clang++')
    ap.add_argument('--shapes', default='chain,wide')
    ap.add_argument('--timeout', type=int, default=300)
    ap.add_argument('--steps', action='store_true')
    ap.add_argument('--include', default=None, help='kiln headers to measure (default: this checkout)')
    ap.add_argument('--out', default=None)
    ap.add_argument('--baseline', default=None, help='another include/ to measure beside this one, job by job')
    a = ap.parse_args()
    INCLUDE = a.include or INCLUDE
    if a.suite == 'programs':
        return programs_suite(a)
    a.out = a.out or os.path.join(ROOT, 'bench', 'results', 'compile_scaling.json')
    sizes = [int(s) for s in a.sizes.split(',')]
    rows = []
    last_steps, last_n = {}, {}  # per shape: the last size's step count (to guess the next)
    with tempfile.TemporaryDirectory() as tmp:
        for shape in a.shapes.split(','):
            for n in sizes:
                src = os.path.join(tmp, f'{shape}{n}.cpp')
                with open(src, 'w') as f:
                    f.write(SOURCES[shape](n))
                steps = None
                if a.steps:
                    guess = last_steps[shape] * n // last_n[shape] if shape in last_steps else None
                    steps = min_steps(src, guess)
                    if steps:
                        last_steps[shape], last_n[shape] = steps, n
                for cxx in a.compilers.split(','):
                    r = measure(cxx, src, a.timeout)
                    r.update({'workload': f'{shape}-{n}', 'shape': shape, 'n': n, 'compiler': cxx})
                    if steps is not None and cxx.startswith('clang'):
                        r['constexpr_steps'] = steps
                    rows.append(r)
                    print(json.dumps(r), file=sys.stderr, flush=True)
    with open(a.out, 'w') as f:
        json.dump(rows, f, indent=1)
    print('| graph | N | compiler | seconds | peak MB | clang constexpr steps (max per evaluation) | result |')
    print('| --- | --- | --- | --- | --- | --- | --- |')
    for r in rows:
        res = 'ok' if r['ok'] else r['error']
        steps = r.get('constexpr_steps', '')
        print(f"| {r['shape']} | {r['n']} | {r['compiler']} | {r['seconds']} | {r['peak_mb']} | {steps} | {res} |")

if __name__ == '__main__':
    main()
