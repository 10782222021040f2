"""The SGEMM suite of issue 26: kiln tuned, kiln default and cuBLAS (cupy, TF32 off) in one
run, on square, tall-skinny, deep-K, transposed, odd-sized problems and a batch of small
GEMMs, every result checked against cuBLAS's before it is timed.

    python3 benches/gpu/gemm_suite.py KILN_BINARY [--quick] [--only NAME...] [--max-candidates N]
                                      [--exhaustive] [--ptxas PTXAS]

For each problem:
* kiln default: `kiln gen gemm M N K --device cuda` with no blocking flags and an empty
  cache (so no stored winner): the tuner model's first choice, what a user gets untuned;
* kiln tuned: `kiln tune --device cuda gemm M N K -o FILE` in a fresh cache per problem (the
  model-guided search; its wall time is reported, the issue asks <= 30 s at 4096^3, and what
  the tuner itself measured for the default and its winner);
* with --exhaustive, kiln exhaustive: `kiln tune --exhaustive` (every blocking of the
  documented subset, ~200 at 4096^3) in another fresh cache, and tuned / exhaustive (the
  issue asks >= 0.97);
* each kernel is lowered with `kiln emit --target ptx -O` and launched through cupy with its
  own #nd_range (split-K: the partial-products kernel, then the reduction, through a
  workspace); cuBLAS is cupy.matmul on the same (transposed) operands.
Results: max |kiln - cuBLAS| / max |cuBLAS| must be below 1e-4, or the problem is marked
WRONG and its ratio is not printed. Times (CUDA events) are medians of three rounds, each
the median of 10 launches after 3 warm-ups, cuBLAS and the kiln kernels of a problem taking
turns within each round after 0.2 s of warming up together (kiln_gen.interleaved_ms).
A batch row runs kiln's batched kernel (`--batch N`: one launch for the batch) against one
batched cupy.matmul.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("CUPY_TF32", "0")
import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402
from kiln_gen import interleaved_ms, kernels_of, launcher  # noqa: E402

# name, M, N, K, trans_a, trans_b, batch
PROBLEMS = [
    ("square 1024", 1024, 1024, 1024, False, False, 1),
    ("square 2048", 2048, 2048, 2048, False, False, 1),
    ("square 4096", 4096, 4096, 4096, False, False, 1),
    ("square 8192", 8192, 8192, 8192, False, False, 1),
    ("2048x8192x1024", 2048, 8192, 1024, False, False, 1),
    ("tall-skinny 16384x256x2048", 16384, 256, 2048, False, False, 1),
    ("tall-skinny 256x16384x2048", 256, 16384, 2048, False, False, 1),
    ("deep-K 1536x1536x12288", 1536, 1536, 12288, False, False, 1),
    ("deep-K 512x512x32768", 512, 512, 32768, False, False, 1),
    ("4096^3 A^T", 4096, 4096, 4096, True, False, 1),
    ("4096^3 B^T", 4096, 4096, 4096, False, True, 1),
    ("4096^3 A^T B^T", 4096, 4096, 4096, True, True, 1),
    ("odd 3000^3", 3000, 3000, 3000, False, False, 1),
    ("odd 1000^3", 1000, 1000, 1000, False, False, 1),
    ("odd 1023x1025x1027", 1023, 1025, 1027, False, False, 1),
    ("batch 256 x 64^3", 64, 64, 64, False, False, 256),
    ("batch 64 x 256^3", 256, 256, 256, False, False, 64),
]
QUICK = {"square 1024", "square 4096", "deep-K 1536x1536x12288", "4096^3 B^T", "odd 3000^3",
         "batch 256 x 64^3"}


def gen_args(m, n, k, ta, tb, batch=1):
    return (["gemm", str(m), str(n), str(k)] + (["--trans-a"] if ta else []) + (["--trans-b"] if tb else [])
            + (["--batch", str(batch)] if batch > 1 else []))


def tuner_summary(out):
    """What `kiln tune` measured: the default's time (timed first) and the winner's, in ms, and how
    many it timed, from its output."""
    times = re.findall(r"^  (.+): ([\d.]+) ms$", out, re.M)
    won = re.search(r"^(.+): winner of (\d+)", out, re.M)
    if not times or not won:
        return "tuner output not understood"
    mine = dict(times)
    return (f"tuner: default {float(times[0][1]):.3f} ms, winner {float(mine.get(won.group(1), 'nan')):.3f} ms "
            f"of {won.group(2)}")


def registers(kiln, tmp, tag, ptxas):
    """ptxas -v's registers and spills of the default and tuned kernels, with --ptxas."""
    if not ptxas:
        return ""
    out = []
    for which in ["default", "tuned"]:
        ptx = os.path.join(tmp, f"{tag}_{which}.ptx")
        if not os.path.exists(ptx):
            continue
        err = subprocess.run([ptxas, "-arch=sm_90", "-v", ptx, "-o", os.devnull], capture_output=True,
                             text=True).stderr
        regs = re.findall(r"Used (\d+) registers", err)
        spills = re.findall(r"(\d+) bytes spill stores", err)
        out.append(f"{which} {'/'.join(regs)} regs, {'/'.join(spills) or '0'} B spilled")
    return "; " + "; ".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("--quick", action="store_true", help="five problems only")
    ap.add_argument("--only", nargs="*", help="problem names (substrings)")
    ap.add_argument("--max-candidates", default="24")
    ap.add_argument("--ptxas", help="ptxas binary: print each kernel's registers and spills")
    ap.add_argument("--exhaustive", action="store_true",
                    help="also time the documented subset fully (kiln tune --exhaustive)")
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"device: {dev}; cuBLAS via cupy.matmul, CUPY_TF32={os.environ['CUPY_TF32']}")
    rs = np.random.default_rng(0)
    rows = []
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        empty = os.path.join(tmp, "empty-cache")
        for name, m, n, k, ta, tb, batch in PROBLEMS:
            if args.quick and name not in QUICK:
                continue
            if args.only and not any(o in name for o in args.only):
                continue
            tag = re.sub(r"[^0-9a-zA-Z]+", "_", name)
            shape_a = (k, m) if ta else (m, k)
            shape_b = (n, k) if tb else (k, n)
            a = cp.asarray(rs.standard_normal((batch, *shape_a), dtype=np.float32))
            b = cp.asarray(rs.standard_normal((batch, *shape_b), dtype=np.float32))
            opa = a.transpose(0, 2, 1) if ta else a
            opb = b.transpose(0, 2, 1) if tb else b
            want = cp.matmul(opa, opb)
            flop = 2.0 * m * n * k * batch
            row = {"name": name}
            # kiln default: no blocking flags, nothing stored.
            kir_d = os.path.join(tmp, f"{tag}_default.kir")
            subprocess.run([kiln, "gen", *gen_args(m, n, k, ta, tb, batch), "--device", "cuda", "-o", kir_d],
                           check=True, env={**os.environ, "KILN_CACHE_DIR": empty})
            # kiln tuned: the default search in a fresh cache.
            kir_t = os.path.join(tmp, f"{tag}_tuned.kir")
            t0 = time.perf_counter()
            out = subprocess.run([kiln, "tune", "--device", "cuda", "--max-candidates", args.max_candidates,
                                  *gen_args(m, n, k, ta, tb, batch), "-o", kir_t], check=True,
                                 env={**os.environ, "KILN_CACHE_DIR": os.path.join(tmp, f"{tag}-tuned")},
                                 stdout=subprocess.PIPE, text=True).stdout
            row["tune_s"] = time.perf_counter() - t0
            row["tuner"] = tuner_summary(out)
            variants = [("default", kir_d), ("tuned", kir_t)]
            if args.exhaustive:
                kir_x = os.path.join(tmp, f"{tag}_exhaustive.kir")
                t0 = time.perf_counter()
                subprocess.run([kiln, "tune", "--device", "cuda", "--exhaustive", *gen_args(m, n, k, ta, tb, batch),
                                "-o", kir_x], check=True, stdout=subprocess.DEVNULL,
                               env={**os.environ, "KILN_CACHE_DIR": os.path.join(tmp, f"{tag}-exhaustive")})
                row["exhaustive_s"] = time.perf_counter() - t0
                variants.append(("exhaustive", kir_x))
            runs = [lambda: cp.matmul(opa, opb)]
            checked = []
            for which, kir in variants:
                kernels, ws, blocking = kernels_of(kiln, kir, tmp, f"{tag}_{which}")
                c = cp.zeros((batch, m, n), dtype=np.float32)
                run_all = launcher(kernels, ws, a, b, c)
                run_all()
                cp.cuda.Device().synchronize()
                err = float(cp.max(cp.abs(c - want)) / cp.max(cp.abs(want)))
                ok = err < 1e-4
                runs.append(run_all)
                checked.append((which, blocking, ok, err))
                failed |= not ok
            # cuBLAS and the kiln kernels in interleaved rounds (see kiln_gen.interleaved_ms).
            times = interleaved_ms(runs)
            row["cublas"] = flop / times[0] / 1e9
            for (which, blocking, ok, err), ms in zip(checked, times[1:]):
                row[which] = (flop / ms / 1e9, blocking, ok, err)
            rows.append(row)
            d, t = row["default"], row["tuned"]
            print(f"{name}: cuBLAS {row['cublas']:.2f}, default {d[0]:.2f} ({d[1]}){'' if d[2] else ' WRONG'}, "
                  f"tuned {t[0]:.2f} ({t[1]}){'' if t[2] else ' WRONG'} TFLOP/s; tune {row['tune_s']:.1f} s "
                  f"({row['tuner']}){registers(kiln, tmp, tag, args.ptxas)}", flush=True)
    print()
    print("| problem | cuBLAS TFLOP/s | kiln default | default / cuBLAS | kiln tuned | tuned / cuBLAS | tune time |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        d, t = r["default"], r["tuned"]
        ratio = lambda x: f"{x[0] / r['cublas']:.3f}x" if x[2] else f"WRONG (err {x[3]:.1e})"
        print(f"| {r['name']} | {r['cublas']:.2f} | {d[0]:.2f} | {ratio(d)} | {t[0]:.2f} | {ratio(t)} "
              f"| {r['tune_s']:.1f} s |")
    for r in rows:
        print(f"  {r['name']}: default `{r['default'][1]}`, tuned `{r['tuned'][1]}`")
    if args.exhaustive:
        print()
        print("| problem | kiln tuned | kiln exhaustive (subset) | tuned / exhaustive | exhaustive time |")
        print("|---|---|---|---|---|")
        for r in rows:
            t, x = r["tuned"], r["exhaustive"]
            print(f"| {r['name']} | {t[0]:.2f} | {x[0]:.2f} (`{x[1]}`) | {t[0] / x[0]:.3f} "
                  f"| {r['exhaustive_s']:.0f} s |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
