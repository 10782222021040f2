"""Tensor-core convolution (issue 27 item 4): kiln's `gen tc-conv` (NHWC activations, KRSC
filters, mma.sync path) against torch conv2d (cuDNN, channels_last) in one run, every result
checked first.

    python3 benches/gpu/tc_conv.py KILN_BINARY [--types bf16 f16] [--configs ...] [--no-tune]

The layers are conv.py's (ResNet-50's 3x3 convolutions, padding 1, stride 1 and the stride-2
first convolution of each stage, batch 32), in bf16 and f16 with f32 accumulation and an
output of the input type. For each layer and type:
* kiln with each blocking of --configs (`BMxBN:WMxWN:KTILE:STAGES`);
* kiln tuned: `kiln tune tc-conv ... --device cuda` (the model's best candidates timed by
  kiln's CUDA device, in a fresh cache; its wall time reported), then that blocking;
* the reference: torch.nn.functional.conv2d on channels_last tensors (cuDNN), the same
  memory as kiln's x (N, H, W, C) and w (K, R, S, C).
Check: max |kiln - torch| / max |torch| below 2e-2 (output rounding, summation order), else
the row is marked WRONG and the script exits 1. Times: medians of 10 after 3 warm-ups (CUDA
events). Printed: TFLOP/s (2 N K C R S P Q flops) and kiln's speed relative to cuDNN.
"""
import argparse
import math
import os
import re
import subprocess
import sys
import tempfile
import time

import cupy as cp
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from conv import BATCH, LAYERS  # noqa: E402
from kiln_gen import median_ms, tc_kernel  # noqa: E402


def geometry(layer):
    c, k, h, w, stride = layer
    return ["--mb", str(BATCH), "--ic", str(c), "--oc", str(k), "--input", f"{h}x{w}",
            "--kernel", "3x3", "--stride", f"{stride}x{stride}", "--pad", "1x1"]


def blocking_flags(cfg):
    blk, warps, kt, st = cfg.split(":")
    return ["--block", blk, "--warps", warps, "--k-tile", kt, "--stages", st]


def tuned(kiln, layer, ty, tmp, max_candidates):
    """`kiln tune tc-conv` on CUDA in a fresh cache: the blocking (as --configs writes it) and
    the tuner's wall time, or None and why."""
    env = dict(os.environ, KILN_CACHE_DIR=os.path.join(tmp, f"cache{time.monotonic_ns()}"))
    t0 = time.perf_counter()
    r = subprocess.run([kiln, "tune", "tc-conv", *geometry(layer), "--type", ty, "--out", ty,
                        "--device", "cuda", "--max-candidates", str(max_candidates)],
                       capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    m = re.search(r"^block=(\d+)x(\d+)x(\d+) warps=(\d+x\d+) stages=(\d+): fastest", r.stdout, re.M)
    if r.returncode != 0 or not m:
        return None, wall, (r.stderr.strip() or r.stdout.strip())[-300:]
    bm, bn, bk, warps, st = m.groups()
    failed = sum(1 for l in r.stdout.splitlines() if ": failed:" in l)
    return f"{bm}x{bn}:{warps}:{bk}:{st}", wall, f"{failed} candidates failed"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("--types", nargs="*", default=["bf16", "f16"])
    ap.add_argument("--configs", nargs="*", default=["128x128:2x4:32:2", "128x64:2x2:32:2",
                                                     "128x64:2x2:64:2", "128x128:2x4:32:3"])
    ap.add_argument("--no-tune", action="store_true")
    ap.add_argument("--max-candidates", type=int, default=6)
    ap.add_argument("--only", nargs="*", type=int, help="layers by input channels (64 128 ...)")
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    torch.backends.cudnn.benchmark = True
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}, cuDNN "
          f"{torch.backends.cudnn.version()}; batch {BATCH}, NHWC / channels_last")
    z = np.uint32(0)
    failed = False
    ratios = {t: [] for t in args.types}
    with tempfile.TemporaryDirectory() as tmp:
        for layer in LAYERS:
            c, k, h, w, stride = layer
            if args.only and c not in args.only:
                continue
            p, q = (h + 2 - 3) // stride + 1, (w + 2 - 3) // stride + 1
            flop = 2.0 * BATCH * k * c * 9 * p * q
            for ty in args.types:
                dt = {"bf16": torch.bfloat16, "f16": torch.float16}[ty]
                torch.manual_seed(0)
                x = torch.randn(BATCH, h, w, c, device="cuda", dtype=dt)  # NHWC
                wt = torch.randn(k, 3, 3, c, device="cuda", dtype=dt) / math.sqrt(9 * c)  # KRSC
                xv, wv = x.permute(0, 3, 1, 2), wt.permute(0, 3, 1, 2)  # channels_last views

                def reference():
                    return torch.nn.functional.conv2d(xv, wv, stride=stride, padding=1)
                ref = reference().permute(0, 2, 3, 1)  # N, P, Q, K
                t_ref = median_ms(reference)
                name = f"{ty} {c}->{k} {h}x{w} s{stride}"
                configs = [(cfg, "") for cfg in args.configs]
                if not args.no_tune:
                    cfg, wall, note = tuned(kiln, layer, ty, tmp, args.max_candidates)
                    if cfg is None:
                        print(f"  {name} tuned: kiln tune failed ({wall:.1f} s): {note}")
                    else:
                        configs.append((cfg, f" tuned in {wall:.1f} s, {note}"))
                best = None
                for cfg, note in configs:
                    y = torch.empty(BATCH, p, q, k, device="cuda", dtype=dt)
                    gen = ["tc-conv", *geometry(layer), "--type", ty, "--out", ty,
                           *blocking_flags(cfg)]
                    try:
                        f, grid, block, _ = tc_kernel(kiln, gen, tmp, f"{name}{cfg}")
                    except Exception as e:  # noqa: BLE001
                        print(f"  {name} {cfg}: build failed: {e}")
                        failed = True
                        continue
                    args_ = (np.uint64(x.data_ptr()), np.uint64(wt.data_ptr()),
                             np.uint64(y.data_ptr()), z, z, z)
                    run = lambda: f(grid, block, args_)  # noqa: E731
                    run()
                    cp.cuda.Device().synchronize()
                    err = ((y.float() - ref.float()).abs().max()
                           / ref.float().abs().max().clamp_min(1e-30)).item()
                    if not err < 2e-2:
                        print(f"  {name} {cfg}: WRONG (rel err {err:.2e})")
                        failed = True
                        continue
                    t = median_ms(run)
                    print(f"  {name} {cfg}{note}: kiln {t:.3f} ms ({flop / t / 1e9:.1f} TFLOP/s), "
                          f"cuDNN {t_ref:.3f} ms ({flop / t_ref / 1e9:.1f} TFLOP/s), "
                          f"ratio {t_ref / t:.3f}, err {err:.1e}")
                    if best is None or t < best[0]:
                        best = (t, cfg)
                if best:
                    ratios[ty].append(t_ref / best[0])
                    print(f"{name}: best {best[1]}: kiln/cuDNN speed {t_ref / best[0]:.3f}")
    for ty, r in ratios.items():
        if r:
            geo = math.exp(sum(math.log(v) for v in r) / len(r))
            print(f"{ty}: geometric mean kiln/cuDNN speed over {len(r)} layers: {geo:.3f} "
                  f"(min {min(r):.3f}, max {max(r):.3f})")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
