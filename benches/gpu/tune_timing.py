"""Why `kiln tune` and the suites rank blockings differently: the same kernels timed by the
tuner itself and, through cupy, by the tuner's method and by the suites' method, in one run.

    python3 benches/gpu/tune_timing.py KILN [--max-candidates N] [--blocking "wg=.. tile=.. ..."]
                                       -- gemm M N K | conv --mb ...

1. `kiln tune --device cuda --max-candidates N ARGS` in a fresh cache: the times it printed
   (its own timer: kiln's CUDA runtime, one set of buffers for the search) and its winner;
2. the tuner's default (the first it timed), its winner and each `--blocking` (the
   `Display` form the tuner prints) generated with `kiln gen ARGS` and lowered with `kiln
   emit --target ptx -O`, every output checked against the first's;
3. each timed through cupy the tuner's way (one after the other: 50 ms of launches, then the
   median of 5 samples, each a series of launches lasting about 1 ms, host clock around the
   series and a synchronize), and the suites' way (`kiln_gen.interleaved_ms`: CUDA events,
   one launch per sample, the blockings taking turns);
4. the same kernels with the PTX as kiln's CUDA device builds it for sm_90 (each entry
   starting with `griddepcontrol.wait; griddepcontrol.launch_dependents;`), both ways.
Prints one row per blocking: ms by each method and the ratio to the default by each.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import cupy as cp
import numpy as np
from kiln_gen import interleaved_ms, kernels_of, launcher


def flags_of(blocking):
    """`kiln gen` flags for a blocking in the tuner's `Display` form."""
    kv = dict(w.split("=", 1) for w in blocking.split())
    out = ["--wg", kv["wg"], "--tile", kv["tile"], "--k-tile", kv["k"], "--slm", kv["slm"],
           "--vec", kv["vec"]]
    if kv.get("unroll") == "1":
        out.append("--unroll")
    if "split" in kv:
        out += ["--split-k", kv["split"]]
    return out


def tuner_way(run, warm_s=0.05, samples=5, min_sample_s=1e-3, max_series=64):
    """The tuner's timing (kiln::tune::median_time) of `run` in ms."""
    dev = cp.cuda.Device()
    t0 = time.perf_counter()
    calls = 0
    while True:
        run()
        dev.synchronize()
        calls += 1
        if time.perf_counter() - t0 >= warm_s:
            break
    pace = (time.perf_counter() - t0) / calls
    series = max(1, min(max_series, int(np.ceil(min_sample_s / pace)))) if pace > 0 else max_series
    times = []
    for _ in range(samples):
        s = time.perf_counter()
        for _ in range(series):
            run()
        dev.synchronize()
        times.append((time.perf_counter() - s) / series)
    return float(np.median(times)) * 1e3


def with_grid_dependency(ptx):
    """What kiln's CUDA device adds to every entry on sm_90 (program.rs, with_grid_dependency)."""
    out, entry = [], False
    for line in ptx.splitlines(keepends=True):
        out.append(line)
        if line.startswith(".visible .entry "):
            entry = True
        elif entry and line.rstrip() == "{":
            out.append("\tgriddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;\n")
            entry = False
    return "".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("--max-candidates", default="12")
    ap.add_argument("--blocking", nargs="*", default=[])
    if "--" not in sys.argv:
        ap.error("the problem follows `--`: -- gemm M N K, or -- conv ...")
    cut = sys.argv.index("--")
    a = ap.parse_args(sys.argv[1:cut])
    args = sys.argv[cut + 1:]
    kiln = os.path.abspath(a.kiln)
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([kiln, "tune", "--device", "cuda", "--max-candidates", a.max_candidates,
                              *args], check=True, capture_output=True, text=True,
                             env={**os.environ, "KILN_CACHE_DIR": os.path.join(tmp, "cache")}).stdout
        timed = re.findall(r"^  (.+): ([\d.]+) ms$", out, re.M)
        won = re.search(r"^(.+): winner of", out, re.M).group(1)
        mine = dict(timed)
        blockings = [timed[0][0], won] + [b for b in a.blocking if b not in (timed[0][0], won)]
        if won == timed[0][0]:
            blockings = blockings[:1] + blockings[2:]
        runs, runs_gd, cs, sizes = [], [], [], None
        rs = np.random.default_rng(0)
        for i, blk in enumerate(blockings):
            kir = os.path.join(tmp, f"b{i}.kir")
            subprocess.run([kiln, "gen", *args, *flags_of(blk), "-o", kir], check=True)
            head = open(kir).read()
            if sizes is None:
                sizes = [int(x) for x in re.search(r"// Buffers: \w+ (\d+), \w+ (\d+), \w+ (\d+) elements",
                                                     head).groups()]
                x = cp.asarray(rs.standard_normal(sizes[0], dtype=np.float32))
                y = cp.asarray(rs.standard_normal(sizes[1], dtype=np.float32))
            for gd in (False, True):
                kernels, ws, _ = kernels_of(kiln, kir, tmp, f"b{i}{'g' if gd else ''}",
                                            with_grid_dependency if gd else None)
                c = cp.zeros(sizes[2], dtype=np.float32)
                run = launcher(kernels, ws, x, y, c)
                run()
                cp.cuda.Device().synchronize()
                (runs_gd if gd else runs).append(run)
                cs.append(c)
        ref = cs[0]
        errs = [float(cp.max(cp.abs(c - ref)) / cp.max(cp.abs(ref))) for c in cs]
        tuner = [tuner_way(r) for r in runs]
        suite = interleaved_ms(runs)
        tuner2 = [tuner_way(r) for r in runs]
        tuner_gd = [tuner_way(r) for r in runs_gd]
        suite_gd = interleaved_ms(runs_gd)
    print(f"device: {dev}; {' '.join(args)}; kiln tune timed {len(timed)}, winner `{won}`")
    print("| blocking | kiln tune ms | cupy tuner-way ms (before, after) | cupy suite-way ms | "
          "with griddepcontrol: tuner-way, suite-way ms | / default: kiln, tuner-way, suite-way, "
          "griddepcontrol tuner-way, suite-way |")
    print("|---|---|---|---|---|---|")
    k0 = float(mine.get(blockings[0], "nan"))
    failed = False
    errs = [max(errs[2 * i], errs[2 * i + 1]) for i in range(len(blockings))]
    for blk, err, t1, t2, s, g1, g2 in zip(blockings, errs, tuner, tuner2, suite, tuner_gd, suite_gd):
        k = float(mine.get(blk, "nan"))
        ok = err < 1e-4  # NaN is not
        bad = "" if ok else f" WRONG (err {err:.1e})"
        failed |= not ok
        print(f"| {blk}{bad} | {k:.3f} | {t1:.3f}, {t2:.3f} | {s:.3f} | {g1:.3f}, {g2:.3f} | "
              f"{k / k0:.3f}, {t1 / tuner[0]:.3f}, {s / suite[0]:.3f}, {g1 / tuner_gd[0]:.3f}, "
              f"{g2 / suite_gd[0]:.3f} |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
