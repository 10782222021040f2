#!/usr/bin/env python3
"""Issue 15's x86 ratios from one run of the criterion bench runtime/benches/x86.rs.

Runs `cargo bench -p kiln-runtime --bench x86` (extra arguments go to criterion, e.g.
`--warm-up-time 1 --measurement-time 3`), then reads criterion's estimates of that run and
prints every ratio the issue asks for, each against a reference measured in the same run:

  python3 benches/x86_ratios.py -- --warm-up-time 1 --measurement-time 3

`--no-run` prints the ratios of the last run without benchmarking again;
`--bench-binary PATH` runs a bench binary built elsewhere instead of `cargo bench`.
KILN_X86_BENCH_LOG2N sets the chain's size (default 25: 2^25 f32).

Every ratio's two numbers come from the same run: the script records when its bench run
started and ended (target/criterion/x86_ratios.run) and fails if any estimate it reads was
written outside that run (an older run's, or one from a filtered `cargo bench` since). The
bench checks every timed variant bit for bit before timing it, and fails otherwise.
"""
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRIT = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "criterion")
RUN = os.path.join(CRIT, "x86_ratios.run")


def run_window():
    """(start, end) of the last complete bench run this script made, in seconds since the epoch."""
    try:
        with open(RUN) as f:
            start, end = (float(x) for x in f.read().split())
    except (OSError, ValueError):
        sys.exit(f"x86_ratios: no complete run recorded in {RUN}: run without --no-run")
    return start, end


def est(group, name, window):
    """(mean seconds per iteration, elements per iteration) of one benchmark of the run."""
    base = os.path.join(CRIT, group, name, "new")
    path = os.path.join(base, "estimates.json")
    try:
        written = os.path.getmtime(path)
    except OSError:
        sys.exit(f"x86_ratios: {group}/{name} was not measured in this run ({path} is missing)")
    if not window[0] <= written <= window[1]:
        sys.exit(f"x86_ratios: {group}/{name} comes from another run than the others "
                 f"({path} was written outside the run): rerun without --no-run or filters")
    with open(path) as f:
        mean = json.load(f)["mean"]["point_estimate"] * 1e-9
    with open(os.path.join(base, "benchmark.json")) as f:
        tp = json.load(f).get("throughput") or {}
    return mean, tp.get("Elements") or tp.get("Bytes") or 1


def line(what, value, target=None, higher_is_better=True):
    verdict = ""
    if target is not None:
        ok = value >= target if higher_is_better else value <= target
        verdict = f"  (target {'>=' if higher_is_better else '<='} {target}: {'met' if ok else 'NOT met'})"
    print(f"{what:<62} {value:8.3f}{verdict}")


def main():
    args = sys.argv[1:]
    if "--no-run" not in args:
        extra = args[args.index("--") + 1:] if "--" in args else []
        ours = args[:args.index("--")] if "--" in args else args
        if os.path.exists(RUN):
            os.remove(RUN)
        start = time.time()
        if "--bench-binary" in ours:
            # A bench binary built elsewhere (e.g. carried to the GPU machine's host).
            binary = ours[ours.index("--bench-binary") + 1]
            cmd = [binary, "--bench"] + extra
        else:
            cmd = ["cargo", "bench", "-p", "kiln-runtime", "--bench", "x86", "--"] + extra
        subprocess.run(cmd, cwd=ROOT, check=True)
        os.makedirs(CRIT, exist_ok=True)
        with open(RUN, "w") as f:
            f.write(f"{start} {time.time()}\n")
    window = run_window()
    est_ = lambda g, n: est(g, n, window)  # noqa: E731
    t = lambda g, n: est_(g, n)[0]  # noqa: E731
    n = est_("x86_chain", "fused_1t")[1]
    print(f"\nchain on {n} f32 elements ({os.cpu_count()} hardware threads)")
    line("fused 1 thread vs rustc -O loop 1 thread (time ratio)",
         t("x86_chain", "rustc_1t") / t("x86_chain", "fused_1t"), 0.8)
    line("fused vs unfused, 1 thread (speed-up)",
         t("x86_chain", "unfused_1t") / t("x86_chain", "fused_1t"), 2.4)
    line("fused vs unfused, all threads (speed-up)",
         t("x86_chain", "unfused_all") / t("x86_chain", "fused_all"), 2.4)
    line("fused all threads vs rustc -O loop all threads",
         t("x86_chain", "rustc_all") / t("x86_chain", "fused_all"))
    # Bytes moved: the chain reads a, b, c and writes out (16 B per element); the copy reads
    # and writes one array (8 B per element).
    chain_bw = 16 * n / t("x86_chain", "fused_all")
    copy_bw = 8 * n / t("x86_chain", "copy_all")
    print(f"{'fused all threads bandwidth, GB/s':<62} {chain_bw / 1e9:8.3f}")
    print(f"{'copy all threads bandwidth, GB/s':<62} {copy_bw / 1e9:8.3f}")
    line("fused all threads bandwidth vs copy bandwidth", chain_bw / copy_bw, 0.8)
    line("fused 1 thread vs interpreter (per element speed-up)",
         (t("x86_chain_interp", "interp_fused") / est_("x86_chain_interp", "interp_fused")[1])
         / (t("x86_chain", "fused_1t") / n))
    line("x86 reduction 1 thread vs rustc -O loop (time ratio)",
         t("x86_examples", "reduce_rustc") / t("x86_examples", "reduce_x86_1t"))
    line("x86 2-D stencil 1 thread vs rustc -O loop (time ratio)",
         t("x86_examples", "stencil_rustc") / t("x86_examples", "stencil_x86_1t"))
    line("x86 reduction, scalar code only, vs rustc -O loop (time ratio)",
         t("x86_examples", "reduce_rustc") / t("x86_examples", "reduce_x86_scalar_1t"))
    line("x86 2-D stencil, scalar code only, vs rustc -O loop (time ratio)",
         t("x86_examples", "stencil_rustc") / t("x86_examples", "stencil_x86_scalar_1t"))
    line("JIT compile (vector code) / PTX emission",
         t("x86_compile", "x86_jit") / t("x86_compile", "ptx_emit"), 2.0, False)
    line("JIT compile (scalar code) / PTX emission",
         t("x86_compile", "x86_jit_scalar") / t("x86_compile", "ptx_emit"), 2.0, False)
    line("Load of the stored image (both codes) / JIT compile (vector code)",
         t("x86_compile", "x86_image_load") / t("x86_compile", "x86_jit"))


if __name__ == "__main__":
    main()
