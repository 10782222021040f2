"""Attention in one generated kernel (issue 27 item 6, stretch): kiln's `gen tc-attn`
(Q·K^T, online softmax, ·V on mma.sync) against torch.nn.functional.scaled_dot_product_attention
(the fastest backend torch picks: flash / cuDNN / memory-efficient) in one run, every result
checked first.

    python3 benches/gpu/tc_attn.py KILN_BINARY [--len 1024 4096] [--dims 64 128] [--warps 4]

Shapes: batch 4 x 16 heads, sequence length --len, head dimension 64 and 128, bf16, causal
and not. Q, K, V, O are [heads, L, D] row-major (torch's [B, H, L, D] contiguous).
Check: max |kiln - torch| / max |torch| below 3e-2 (P is rounded to bf16 before P·V, as in
flash attention), else the row is marked WRONG and the script exits 1. Times: medians of 10
after 3 warm-ups (CUDA events). Printed: TFLOP/s (4 B H L^2 D flops, halved when causal) and
kiln's speed relative to torch.
"""
import argparse
import os
import sys
import tempfile

import cupy as cp
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from kiln_gen import median_ms, tc_kernel  # noqa: E402

B, H = 4, 16


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("--len", nargs="*", type=int, default=[1024, 4096])
    ap.add_argument("--dims", nargs="*", type=int, default=[64, 128])
    ap.add_argument("--warps", nargs="*", type=int, default=[4])
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; batch {B} x {H} "
          f"heads, bf16")
    z = np.uint32(0)
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.len:
            for d in args.dims:
                for causal in [False, True]:
                    torch.manual_seed(0)
                    q, k, v = (torch.randn(B, H, n, d, device="cuda", dtype=torch.bfloat16)
                               for _ in range(3))

                    def reference():
                        return torch.nn.functional.scaled_dot_product_attention(
                            q, k, v, is_causal=causal)
                    ref = reference()
                    t_ref = median_ms(reference)
                    flop = 4.0 * B * H * n * n * d / (2 if causal else 1)
                    name = f"L={n} D={d}{' causal' if causal else ''}"
                    for w in args.warps:
                        o = torch.empty_like(q)
                        gen = ["tc-attn", str(B * H), str(n), str(d), "--warps", str(w)]
                        gen += ["--causal"] if causal else []
                        try:
                            f, grid, block, _ = tc_kernel(kiln, gen, tmp, f"a{n}_{d}_{causal}_{w}")
                        except Exception as e:  # noqa: BLE001
                            print(f"  {name} warps {w}: build failed: {e}")
                            failed = True
                            continue
                        a = tuple(np.uint64(t.data_ptr()) for t in (q, k, v, o)) + (z, z, z)
                        run = lambda: f(grid, block, a)  # noqa: E731
                        run()
                        cp.cuda.Device().synchronize()
                        err = ((o.float() - ref.float()).abs().max()
                               / ref.float().abs().max().clamp_min(1e-30)).item()
                        if not err < 3e-2:
                            print(f"  {name} warps {w}: WRONG (rel err {err:.2e})")
                            failed = True
                            continue
                        t = median_ms(run)
                        print(f"{name} warps {w}: kiln {t:.3f} ms ({flop / t / 1e9:.1f} TFLOP/s), "
                              f"torch SDPA {t_ref:.3f} ms ({flop / t_ref / 1e9:.1f} TFLOP/s), "
                              f"ratio {t_ref / t:.3f}, err {err:.1e}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
