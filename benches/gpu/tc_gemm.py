"""Tensor-core GEMM (issue 27 items 4-5): kiln's `gen tc-gemm` (sm_80 path: mma.sync, ldmatrix,
cp.async) against cuBLAS (torch.matmul) in one run, every result checked first.

    python3 benches/gpu/tc_gemm.py KILN_BINARY [--sizes 4096 8192] [--configs "128x128:2x4:32:2" ...]
        [--base OLD_KILN_BINARY ... [--base-configs ...]]

Rows:
* bf16 and f16 GEMM N^3, f32 accumulation, output of the input type: kiln vs torch.matmul;
* GEMM + bias + ReLU + scale (bf16 out): kiln's fused epilogue vs torch.matmul followed by
  the same three element-wise ops as separate torch kernels (add, relu, mul);
* with `--base`, the same rows for other kiln binaries (earlier versions, rows labelled with
  the binary's file name), so a change is compared with what it replaces in the same run,
  on the same card;
* JIT: wall time of `kiln gen tc-gemm` + `kiln emit --target ptx -O` for the 4096^3 kernel
  (two processes: an upper bound of the in-process time).
First, odd sizes and every transposition (f32 output) against torch within 1e-3 (relative),
NaN-filled outputs. Check: max |kiln - torch| / max |torch| below 2e-2 (bf16/f16 output rounding, different
summation order), else the row is marked WRONG and its ratio not printed. Times: medians of
10 after 3 warm-ups, CUDA events.
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
import torch

# torch and cupy both launch on the legacy default stream here, so CUDA events on cupy's
# stream time torch's kernels too.

sys.path.insert(0, os.path.dirname(__file__))
from kiln_gen import median_ms  # noqa: E402


def build(kiln, args, tmp, tag):
    kir = os.path.join(tmp, f"{tag}.kir")
    ptx = os.path.join(tmp, f"{tag}.ptx")
    t0 = time.perf_counter()
    subprocess.run([kiln, "gen", "tc-gemm", *args, "-o", kir], check=True)
    subprocess.run([kiln, "emit", kir, "--target", "ptx", "-O", "-o", ptx], check=True)
    jit_ms = (time.perf_counter() - t0) * 1e3
    src = open(kir).read()
    name = re.search(r"kernel (\w+)\(", src).group(1)
    g0, g1, l0, l1 = map(int, re.search(
        r"#nd_range\(global = \[(\d+), (\d+)\], local = \[(\d+), (\d+)\]", src).groups())
    mod = cp.RawModule(path=ptx)
    f = mod.get_function(name)
    # Past 48 KiB the kernel's local memory is dynamic shared memory (PTX backend): opt the
    # function in and pass the size at every launch.
    m = re.search(rf"// kiln.dynamic_shared_bytes {name} (\d+)", open(ptx).read())
    smem = int(m.group(1)) if m else 0
    if smem:
        try:
            f.max_dynamic_shared_size_bytes = smem
        except AttributeError:
            cp.cuda.driver.funcSetAttribute(
                f.ptr, cp.cuda.driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
    launch = lambda grid, block, a: f(grid, block, a, shared_mem=smem)  # noqa: E731
    return launch, (g0 // l0, g1 // l1, 1), (l0, l1, 1), jit_ms


def ptr(t):
    """A torch tensor's device address as a kernel's pointer argument (cupy has no bfloat16
    dtype, so tensors are not converted to cupy arrays)."""
    return np.uint64(t.data_ptr())


def check(got, want):
    got, want = got.float(), want.float()
    err = (got - want).abs().max().item() / max(want.abs().max().item(), 1e-30)
    return err


def check_shapes(kiln, tmp, configs):
    """Odd sizes and every transposition, f32 output, against torch in f32 from the same
    bf16 inputs: relative error below 1e-3 (only the summation order differs). Returns
    whether all passed."""
    ok = True
    z = np.uint32(0)
    for (m, n, k) in [(37, 29, 45), (1000, 520, 264), (384, 512, 1024)]:
        for ta in (False, True):
            for tb in (False, True):
                torch.manual_seed(m + n + k)
                a = torch.randn(k, m) if ta else torch.randn(m, k)
                b = torch.randn(n, k) if tb else torch.randn(k, n)
                a = a.to("cuda", torch.bfloat16)
                b = b.to("cuda", torch.bfloat16)
                ref = (a.float().T if ta else a.float()) @ (b.float().T if tb else b.float())
                for cfg in configs:
                    blk, warps, kt, st = cfg.split(":")
                    gen = [str(m), str(n), str(k), "--type", "bf16", "--out", "f32", "--block",
                           blk, "--warps", warps, "--k-tile", kt, "--stages", st]
                    gen += ["--trans-a"] * ta + ["--trans-b"] * tb
                    c = torch.full((m, n), float("nan"), device="cuda")
                    try:
                        f, grid, block, _ = build(kiln, gen, tmp, f"chk{m}{ta:d}{tb:d}{cfg.replace(':', '_')}")
                    except Exception as e:  # noqa: BLE001
                        print(f"  check {m}x{n}x{k} ta={ta:d} tb={tb:d} {cfg}: build failed: {e}")
                        ok = False
                        continue
                    f(grid, block, (ptr(a), ptr(b), ptr(c), z, z, z))
                    cp.cuda.Device().synchronize()
                    err = check(c, ref)
                    if not err < 1e-3:
                        print(f"  check {m}x{n}x{k} ta={ta:d} tb={tb:d} {cfg}: WRONG (rel err {err:.2e})")
                        ok = False
    print(f"checks (odd sizes, all transpositions, {len(configs)} blockings): "
          f"{'all pass' if ok else 'FAILURES above'}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("--sizes", nargs="*", type=int, default=[4096, 8192])
    ap.add_argument("--configs", nargs="*", default=["128x256:2x4:32:4", "256x128:4x2:64:3",
                                                     "128x256:2x4:64:3", "128x128:2x2:64:2"])
    ap.add_argument("--base", action="append", default=[],
                    help="another kiln binary timed in the same run (rows labelled with its "
                         "file name); may be repeated")
    ap.add_argument("--base-configs", nargs="*", default=["128x128:2x2:64:2"])
    ap.add_argument("--check-configs", nargs="*",
                    default=["128x256:2x4:32:4", "128x128:2x2:64:2", "128x128:2x4:32:2"])
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    # (binary, row label, blocking) for every kernel timed.
    variants = [(kiln, "", cfg) for cfg in args.configs]
    for base in args.base:
        label = os.path.basename(base) + " "
        variants += [(os.path.abspath(base), label, cfg) for cfg in args.base_configs]
    dev = torch.cuda.get_device_name(0)
    print(f"device: {dev}; cuBLAS via torch.matmul {torch.__version__}")
    z = np.uint32(0)
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        failed = not check_shapes(kiln, tmp, args.check_configs)
        for n in args.sizes:
            for dt, name in [(torch.bfloat16, "bf16"), (torch.float16, "f16")]:
                torch.manual_seed(0)
                a = torch.randn(n, n, device="cuda", dtype=dt)
                b = torch.randn(n, n, device="cuda", dtype=dt)
                ref = torch.matmul(a, b)
                t_ref = median_ms(lambda: torch.matmul(a, b))
                flop = 2.0 * n * n * n
                best = None
                for binary, label, cfg in variants:
                    blk, warps, kt, st = cfg.split(":")
                    c = torch.empty(n, n, device="cuda", dtype=dt)
                    gen = [str(n)] * 3 + ["--type", name, "--out", name, "--block", blk,
                                          "--warps", warps, "--k-tile", kt, "--stages", st]
                    try:
                        f, grid, block, jit = build(binary, gen, tmp,
                                                    f"g{n}{name}{label.strip()}{cfg.replace(':', '_')}")
                    except Exception as e:  # noqa: BLE001
                        print(f"  {label}{name} {n}^3 {cfg}: build failed: {e}")
                        failed = True
                        continue
                    pa, pb, pc = ptr(a), ptr(b), ptr(c)
                    run = lambda: f(grid, block, (pa, pb, pc, z, z, z))  # noqa: E731
                    run()
                    cp.cuda.Device().synchronize()
                    err = check(c, ref)
                    if err > 2e-2:
                        print(f"  {label}{name} {n}^3 {cfg}: WRONG (rel err {err:.2e})")
                        failed = True
                        continue
                    t = median_ms(run)
                    print(f"  {label}{name} {n}^3 {cfg}: kiln {t:.3f} ms ({flop / t / 1e9:.1f} TFLOP/s), "
                          f"cuBLAS {t_ref:.3f} ms ({flop / t_ref / 1e9:.1f} TFLOP/s), "
                          f"ratio {t_ref / t:.3f}, err {err:.1e}, jit {jit:.0f} ms")
                    if not label and (best is None or t < best[0]):
                        best = (t, cfg)
                if best:
                    print(f"{name} {n}^3: best {best[1]}: kiln/cuBLAS speed {t_ref / best[0]:.3f}")
            # The fused epilogue: bias (f32, per column), relu, scale; bf16 in and out.
            torch.manual_seed(1)
            a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            bias = torch.randn(n, device="cuda", dtype=torch.float32)
            bias_b = bias.to(torch.bfloat16)  # keeps torch's chain in bf16, as kiln's output
            alpha = 0.5

            def unfused():
                y = torch.matmul(a, b)
                y = y + bias_b
                y = torch.relu(y)
                return y * alpha
            ref = unfused()
            t_ref = median_ms(unfused)
            best = None
            for binary, label, cfg in variants:
                blk, warps, kt, st = cfg.split(":")
                c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
                gen = [str(n)] * 3 + ["--type", "bf16", "--out", "bf16", "--epilogue",
                                      "bias,relu,scale", "--block", blk, "--warps", warps,
                                      "--k-tile", kt, "--stages", st]
                try:
                    f, grid, block, jit = build(binary, gen, tmp,
                                                f"e{n}{label.strip()}{cfg.replace(':', '_')}")
                except Exception as e:  # noqa: BLE001
                    print(f"  {label}fused {n}^3 {cfg}: build failed: {e}")
                    failed = True
                    continue
                args_ = (ptr(a), ptr(b), ptr(c), ptr(bias), np.float32(alpha), z, z, z)
                run = lambda: f(grid, block, args_)  # noqa: E731
                run()
                cp.cuda.Device().synchronize()
                err = check(c, ref)
                if err > 2e-2:
                    print(f"  {label}fused {n}^3 {cfg}: WRONG (rel err {err:.2e})")
                    failed = True
                    continue
                t = median_ms(run)
                print(f"  {label}fused bias+relu+scale bf16 {n}^3 {cfg}: kiln {t:.3f} ms, "
                      f"cuBLAS+3 torch kernels {t_ref:.3f} ms, speedup {t_ref / t:.3f}, err {err:.1e}")
                if not label and (best is None or t < best[0]):
                    best = (t, cfg)
            if best:
                print(f"fused {n}^3: best {best[1]}: speedup over cuBLAS + separate kernels "
                      f"{t_ref / best[0]:.3f}")
        # JIT time of the default 4096^3 kernel, generator + PTX emission, best of 5.
        jits = []
        for i in range(5):
            t0 = time.perf_counter()
            kir = os.path.join(tmp, f"jit{i}.kir")
            subprocess.run([kiln, "gen", "tc-gemm", "4096", "4096", "4096", "-o", kir], check=True)
            subprocess.run([kiln, "emit", kir, "--target", "ptx", "-O", "-o", kir + ".ptx"], check=True)
            jits.append((time.perf_counter() - t0) * 1e3)
        print(f"jit (two processes, gen + emit -O) 4096^3 default: best {min(jits):.1f} ms")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
