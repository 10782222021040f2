"""The convolution layers of issue 26: kiln's implicit-GEMM convolution, default and tuned,
against im2col + cuBLAS (cupy.matmul, TF32 off) in one run, every result checked first.

    python3 benches/gpu/conv_suite.py KILN_BINARY [--max-candidates N] [--only C...]

The layers are conv.py's: ResNet-50's 3x3 convolutions (padding 1, stride 1, and the
stride-2 first convolution of each stage), batch 32, NCHW f32. For each layer:
* kiln default: `kiln gen conv ... --device cuda` with no blocking flags and an empty cache
  (the tuner model's first choice);
* kiln tuned: `kiln tune --device cuda conv ... -o FILE` in a fresh cache per layer (the model-guided
  search, split-K included; its wall time is reported);
* each kernel lowered with `kiln emit --target ptx -O`, launched through cupy with its
  #nd_range (split-K: both kernels through a workspace);
* the reference: im2col (cupy slicing) + cuBLAS, the im2col included in its time.
Results: max |kiln - reference| / max |reference| must be below 1e-4, else the layer is
marked WRONG and the script exits 1. Times (CUDA events): the reference and both kiln
kernels of a layer in three interleaved rounds of medians of 10 (kiln_gen.interleaved_ms).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("CUPY_TF32", "0")
import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402
from conv import BATCH, LAYERS, im2col_reference  # noqa: E402
from kiln_gen import interleaved_ms, kernels_of, launcher  # noqa: E402


def conv_args(layer):
    c, k, h, w, stride = layer
    return ["conv", "--mb", str(BATCH), "--ic", str(c), "--oc", str(k), "--input", f"{h}x{w}",
            "--kernel", "3x3", "--stride", f"{stride}x{stride}", "--pad", "1x1"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("--max-candidates", default="24")
    ap.add_argument("--only", nargs="*", type=int, help="layers by input channels (64 128 ...)")
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"device: {dev}; batch {BATCH}; reference im2col + cuBLAS, CUPY_TF32={os.environ['CUPY_TF32']}")
    rs = np.random.default_rng(0)
    rows, failed = [], False
    with tempfile.TemporaryDirectory() as tmp:
        empty = os.path.join(tmp, "empty-cache")
        for layer in LAYERS:
            c, k, h, w, stride = layer
            if args.only and c not in args.only:
                continue
            name = f"{c}->{k} {h}x{w} s{stride}"
            tag = f"c{c}k{k}h{h}s{stride}"
            x = cp.asarray(rs.standard_normal((BATCH, c, h, w), dtype=np.float32))
            wt = cp.asarray(rs.standard_normal((k, c, 3, 3), dtype=np.float32))
            ref = im2col_reference(x, wt, stride)
            want = ref().copy()
            p, q = want.shape[2], want.shape[3]
            flop = 2.0 * BATCH * k * c * 9 * p * q
            row = {"name": name}
            kir_d = os.path.join(tmp, f"{tag}_default.kir")
            subprocess.run([kiln, "gen", *conv_args(layer), "--device", "cuda", "-o", kir_d], check=True,
                           env={**os.environ, "KILN_CACHE_DIR": empty})
            kir_t = os.path.join(tmp, f"{tag}_tuned.kir")
            t0 = time.perf_counter()
            subprocess.run([kiln, "tune", "--device", "cuda", "--max-candidates", args.max_candidates,
                            *conv_args(layer), "-o", kir_t], check=True, stdout=subprocess.DEVNULL,
                           env={**os.environ, "KILN_CACHE_DIR": os.path.join(tmp, f"{tag}-tuned")})
            row["tune_s"] = time.perf_counter() - t0
            runs, checked = [ref], []
            for which, kir in [("default", kir_d), ("tuned", kir_t)]:
                kernels, ws, blocking = kernels_of(kiln, kir, tmp, f"{tag}_{which}")
                y = cp.zeros_like(want)
                run = launcher(kernels, ws, x, wt, y)
                run()
                cp.cuda.Device().synchronize()
                err = float(cp.max(cp.abs(y - want)) / cp.max(cp.abs(want)))
                ok = err < 1e-4
                runs.append(run)
                checked.append((which, blocking, ok, err))
                failed |= not ok
            # The reference and both kiln kernels in interleaved rounds.
            times = interleaved_ms(runs)
            row["ref"] = flop / times[0] / 1e9
            for (which, blocking, ok, err), ms in zip(checked, times[1:]):
                row[which] = (flop / ms / 1e9, blocking, ok, err)
            rows.append(row)
            d, t = row["default"], row["tuned"]
            print(f"{name}: im2col+cuBLAS {row['ref']:.2f}, default {d[0]:.2f} ({d[1]}){'' if d[2] else ' WRONG'}, "
                  f"tuned {t[0]:.2f} ({t[1]}){'' if t[2] else ' WRONG'} TFLOP/s; tune {row['tune_s']:.1f} s",
                  flush=True)
    print()
    print("| layer (C->K, HxW, stride) | im2col+cuBLAS TFLOP/s | kiln default | default / ref | kiln tuned "
          "| tuned / ref | tune time |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        d, t = r["default"], r["tuned"]
        ratio = lambda x: f"{x[0] / r['ref']:.3f}x" if x[2] else f"WRONG (err {x[3]:.1e})"
        print(f"| {r['name']} | {r['ref']:.2f} | {d[0]:.2f} | {ratio(d)} | {t[0]:.2f} | {ratio(t)} "
              f"| {r['tune_s']:.1f} s |")
    for r in rows:
        print(f"  {r['name']}: default `{r['default'][1]}`, tuned `{r['tuned'][1]}`")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
