"""Several kiln binaries' convolution kernels against each other and im2col + cuBLAS (cupy,
TF32 off), in one run: each binary's untimed default (`kiln gen conv ... --device cuda`, an
empty cache) and each `--blocking` for conv.py's layers, every result checked first, then all
timed in interleaved rounds (kiln_gen.interleaved_ms), so that a generator change is measured
against the binary before it on the same card, clocks and data.

    python3 benches/gpu/conv_ab.py --bin NAME=PATH [NAME=PATH ...] [--blocking FLAGS ...]
                                   [--only C ...]

Blockings: `default` and each `--blocking` (kiln gen flags, e.g. "--wg 8x16 --tile 8x8
--k-tile 8 --slm 2 --unroll --vec 4"). Prints TFLOP/s and the ratio to im2col + cuBLAS per
layer, blocking and binary; a wrong result prints WRONG and the script exits 1.
"""
import argparse
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("CUPY_TF32", "0")
import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402
from conv import BATCH, LAYERS, im2col_reference  # noqa: E402
from conv_suite import conv_args  # noqa: E402
from kiln_gen import interleaved_ms, kernels_of, launcher  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", nargs="+", required=True, help="NAME=PATH of a kiln binary")
    ap.add_argument("--blocking", nargs="*", default=[])
    ap.add_argument("--only", nargs="*", type=int, help="layers by input channels (64 128 ...)")
    args = ap.parse_args()
    bins = [b.split("=", 1) for b in args.bin]
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"device: {dev}; batch {BATCH}; reference im2col + cuBLAS")
    print("| layer | blocking | binary | TFLOP/s | / reference |")
    print("|---|---|---|---|---|")
    rs = np.random.default_rng(0)
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        empty = os.path.join(tmp, "empty-cache")
        for li, layer in enumerate(LAYERS):
            c, k, h, w, stride = layer
            if args.only and c not in args.only:
                continue
            x = cp.asarray(rs.standard_normal((BATCH, c, h, w), dtype=np.float32))
            wt = cp.asarray(rs.standard_normal((k, c, 3, 3), dtype=np.float32))
            ref = im2col_reference(x, wt, stride)
            want = ref().copy()
            flop = 2.0 * BATCH * k * c * 9 * want.shape[2] * want.shape[3]
            runs, rows = [ref], []
            for bi, blocking in enumerate(["default", *args.blocking]):
                flags = ["--device", "cuda"] if blocking == "default" else blocking.split()
                for name, path in bins:
                    tag = f"l{li}b{bi}_{name}"
                    kir = os.path.join(tmp, f"{tag}.kir")
                    subprocess.run([os.path.abspath(path), "gen", *conv_args(layer), *flags, "-o", kir],
                                   check=True, env={**os.environ, "KILN_CACHE_DIR": empty})
                    kernels, ws, blk = kernels_of(os.path.abspath(path), kir, tmp, tag)
                    y = cp.zeros_like(want)
                    run = launcher(kernels, ws, x, wt, y)
                    run()
                    cp.cuda.Device().synchronize()
                    err = float(cp.max(cp.abs(y - want)) / cp.max(cp.abs(want)))
                    ok = err < 1e-4
                    failed |= not ok
                    runs.append(run)
                    rows.append((f"default: {blk}" if blocking == "default" else blk, name, ok, err))
            times = interleaved_ms(runs)
            rf = flop / times[0] / 1e9
            name = f"{c}->{k} {h}x{w} s{stride}"
            for (blk, bname, ok, err), ms in zip(rows, times[1:]):
                tf = flop / ms / 1e9
                ratio = f"{tf / rf:.3f}x" if ok else f"WRONG (err {err:.1e})"
                print(f"| {name} | {blk} | {bname} | {tf:.2f} | {ratio} |", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
