#!/usr/bin/env python3
"""Compiles one translation unit again, as the build compiled it, and prints its wall seconds.

    bench/unit_seconds.py build-bench/compile_commands.json bench/train_kiln.cpp [bench_train.dir]

bench/run.sh gives kiln's rows of a suite their one-time cost this way (the compile of the unit
that holds kiln's model, beside torch.compile's first call), without ccache, whatever the build
itself found in the cache. The object goes to a temporary file. Where several targets compile
the unit (kiln_rows.cpp: bench_cpu and bench_avx2), the optional third argument picks the one
whose object path holds it (CMake's "<target>.dir").
"""
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__.split("\n\n")[1])
    db, source = sys.argv[1], os.path.abspath(sys.argv[2])
    with open(db) as f:
        entries = [e for e in json.load(f) if os.path.abspath(os.path.join(e["directory"], e["file"])) == source]
    if len(sys.argv) == 4:
        where = lambda e: e.get("output") or e.get("command") or " ".join(e.get("arguments", []))  # noqa: E731
        entries = [e for e in entries if sys.argv[3] in where(e)]
    if not entries:
        sys.exit(f"unit_seconds.py: {source} is not in {db}")
    e = entries[0]
    argv = e["arguments"] if "arguments" in e else shlex.split(e["command"])
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "unit.o")
        if "-o" in argv:
            argv = list(argv)
            argv[argv.index("-o") + 1] = out
        else:
            argv = list(argv) + ["-o", out]
        t0 = time.perf_counter()
        subprocess.run(argv, cwd=e["directory"], check=True, stdout=subprocess.DEVNULL)
        print(f"{time.perf_counter() - t0:.1f}")


if __name__ == "__main__":
    main()
