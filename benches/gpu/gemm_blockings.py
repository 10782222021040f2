"""Fixed blockings of one SGEMM against cuBLAS (cupy.matmul, TF32 off) in one run, each
also with its global loads rewritten to the read-only path (`ld.global.nc`), to measure what
the PTX backend would gain from marking read-only operands: every result checked first.

    python3 benches/gpu/gemm_blockings.py KILN_BINARY [M N K] [--trans-b] [--blocking FLAGS...]
                                          [--data normal|both]

Without --blocking, the blockings in BLOCKINGS. Prints TFLOP/s and the ratio to cuBLAS for
each blocking as kiln emits it and with `.nc` loads, and ptxas's register count when
KILN_PTXAS names ptxas.
"""
import argparse
import os
import re
import subprocess
import tempfile

os.environ.setdefault("CUPY_TF32", "0")
import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402
from kiln_gen import kernels_of, launcher, median_ms  # noqa: E402

BLOCKINGS = [
    "--wg 8x16 --tile 8x8 --k-tile 8",
    "--wg 16x16 --tile 8x8 --k-tile 8",
    "--wg 16x16 --tile 8x8 --k-tile 16",
    "--wg 8x16 --tile 8x8 --k-tile 16",
    "--wg 16x16 --tile 8x16 --k-tile 8",
    "--wg 16x16 --tile 16x8 --k-tile 8",
    "--wg 8x16 --tile 16x8 --k-tile 8",
    "--wg 16x8 --tile 8x16 --k-tile 8",
    "--wg 8x16 --tile 16x8 --k-tile 16",
]
COMMON = "--slm 2 --unroll --vec 4"


def nc(ptx):
    """Global loads through the read-only (non-coherent) path: exact here, since no kernel
    writes A or B."""
    return re.sub(r"\bld\.global\.", "ld.global.nc.", ptx)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("mnk", nargs="*", type=int, default=[4096, 4096, 4096])
    ap.add_argument("--trans-b", action="store_true")
    ap.add_argument("--blocking", nargs="*")
    ap.add_argument("--data", choices=["normal", "both"], default="normal",
                    help="operands standard normal (default; each blocking also with .nc loads), or "
                         "`both`: each blocking on normal and on uniform [-1, 1) operands (what kiln "
                         "tune times with), without the .nc variant")
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    m, n, k = args.mnk
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rs = np.random.default_rng(0)
    a = cp.asarray(rs.standard_normal((m, k), dtype=np.float32))
    b = cp.asarray(rs.standard_normal((n, k) if args.trans_b else (k, n), dtype=np.float32))
    opb = b.T if args.trans_b else b
    au = cp.asarray(rs.uniform(-1, 1, (m, k)).astype(np.float32))
    bu = cp.asarray(rs.uniform(-1, 1, b.shape).astype(np.float32))
    want = cp.matmul(a, opb)
    want_u = cp.matmul(au, bu.T if args.trans_b else bu)
    flop = 2.0 * m * n * k
    ref = flop / median_ms(lambda: cp.matmul(a, opb)) / 1e9
    print(f"device: {dev}; {m}x{n}x{k}{' B^T' if args.trans_b else ''}: cuBLAS {ref:.2f} TFLOP/s")
    ptxas = os.environ.get("KILN_PTXAS")
    with tempfile.TemporaryDirectory() as tmp:
        for i, blocking in enumerate(args.blocking or BLOCKINGS):
            kir = os.path.join(tmp, f"b{i}.kir")
            gen = [kiln, "gen", "gemm", str(m), str(n), str(k), *(["--trans-b"] if args.trans_b else []),
                   *blocking.split(), *COMMON.split(), "-o", kir]
            if subprocess.run(gen).returncode != 0:
                print(f"  {blocking}: not generated")
                continue
            regs = ""
            if ptxas:
                subprocess.run([kiln, "emit", kir, "--target", "ptx", "-O", "-o", f"{kir}.ptx"], check=True)
                out = subprocess.run([ptxas, "-arch=sm_90", "-v", f"{kir}.ptx", "-o", "/dev/null"],
                                     capture_output=True, text=True).stderr
                regs = " " + ", ".join(re.findall(r"Used \d+ registers|\d+ bytes spill stores", out))
            line = f"  {blocking}{regs}:"
            if args.data == "both":
                variants = [("normal", None, a, b, want), ("uniform", None, au, bu, want_u)]
            else:
                variants = [("plain", None, a, b, want), ("nc", nc, a, b, want)]
            for tag, filt, x, y, expect in variants:
                kernels, ws, _ = kernels_of(kiln, kir, tmp, f"b{i}_{tag}", filt)
                c = cp.zeros((m, n), dtype=np.float32)
                run = launcher(kernels, ws, x, y, c)
                run()
                cp.cuda.Device().synchronize()
                err = float(cp.max(cp.abs(c - expect)) / cp.max(cp.abs(expect)))
                tf = flop / median_ms(run) / 1e9
                line += f" {tag} {tf:.2f} TFLOP/s {tf / ref:.3f}x{'' if err < 1e-4 else ' WRONG'};"
            print(line, flush=True)


if __name__ == "__main__":
    main()
