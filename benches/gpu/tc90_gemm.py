"""sm_90 tensor-core GEMM (issue 27 item 2, sm_90 tier): kiln's `gen tc-gemm --arch sm_90`
(wgmma, tensor copies onto mbarrier objects, a producer and two consumer warpgroups) against
cuBLAS (torch.matmul) in one run, every result checked first.

    python3 benches/gpu/tc90_gemm.py KILN_BINARY [--sizes 4096 8192] [--configs 128:4 256:4]
                                                 [--check-sizes 256x256x256 1000x520x136]

C = A · B^T with A M x K and B N x K row-major (kiln's `--trans-b`; torch: a @ bt.t(), which
cuBLAS runs as a TN GEMM at the same speed as NN), f32 accumulation, output of the input type.

Launching: the PTX names its tensor maps on `// kiln.tensor_map <kernel> <n> <param> <elem>
<width> <height> <pitch> <box w> <box h> <swizzle>` lines; this script encodes each with the
driver's cuTensorMapEncodeTiled (ctypes on libcuda), copies the 128-byte map to device memory
and passes its address as the kernel's hidden parameter n (after the three offset
parameters). Dynamic shared memory as in tc_gemm.py. The PTX is assembled with ptxas
--gpu-name sm_90a when ptxas is on PATH (else the driver JIT-compiles it).

Check: max |kiln - torch| / max |torch| below 2e-2 (bf16/f16 output rounding, summation
order), else the row is WRONG and its ratio not printed. For each size it also times the
GEMM with `--epilogue bias,relu,scale` (bf16) against torch.matmul followed by the same
three operations as separate torch kernels. Times: medians of 10 after 3
warm-ups, CUDA events.
"""
import argparse
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile

import cupy as cp
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from kiln_gen import median_ms  # noqa: E402

_cuda = ctypes.CDLL("libcuda.so.1")
_DTYPE = {"f16": 6, "bf16": 9, "f32": 7}
_SIZE = {"f16": 2, "bf16": 2, "f32": 4}
_SWIZZLE = {"noswizzle": 0, "sw32": 1, "sw64": 2, "sw128": 3}


def tensor_map(ptr, elem, width, height, pitch, bw, bh, swizzle):
    """A CUtensorMap (128 bytes) for a row-major `height x width` tensor at `ptr`."""
    out = (ctypes.c_uint64 * 16)()
    dims = (ctypes.c_uint64 * 2)(width, height)
    strides = (ctypes.c_uint64 * 1)(pitch * _SIZE[elem])
    box = (ctypes.c_uint32 * 2)(bw, bh)
    estr = (ctypes.c_uint32 * 2)(1, 1)
    r = _cuda.cuTensorMapEncodeTiled(
        ctypes.byref(out), ctypes.c_int(_DTYPE[elem]), ctypes.c_uint32(2), ctypes.c_void_p(ptr),
        dims, strides, box, estr, ctypes.c_int(0), ctypes.c_int(_SWIZZLE[swizzle]),
        ctypes.c_int(3), ctypes.c_int(0))
    if r != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed: CUresult {r}")
    return bytes(out)


def build(kiln, gen_args, tmp, tag):
    kir = os.path.join(tmp, f"{tag}.kir")
    ptx = os.path.join(tmp, f"{tag}.ptx")
    subprocess.run([kiln, "gen", "tc-gemm", *gen_args, "-o", kir], check=True)
    subprocess.run([kiln, "emit", kir, "--target", "ptx", "-O", "-o", ptx], check=True)
    src = open(kir).read()
    text = open(ptx).read()
    name = re.search(r"kernel (\w+)\(", src).group(1)
    g0, g1, l0, l1 = map(int, re.search(
        r"#nd_range\(global = \[(\d+), (\d+)\], local = \[(\d+), (\d+)\]", src).groups())
    path = ptx
    if shutil.which("ptxas"):
        cubin = os.path.join(tmp, f"{tag}.cubin")
        o = subprocess.run(["ptxas", "--gpu-name=sm_90a", "-v", ptx, "-o", cubin],
                           capture_output=True, text=True, check=True)
        info = [l for l in o.stderr.splitlines() if "registers" in l or "spill" in l]
        print(f"    ptxas: {' | '.join(x.strip() for x in info)}")
        path = cubin
    mod = cp.RawModule(path=path)
    f = mod.get_function(name)
    m = re.search(rf"// kiln.dynamic_shared_bytes {name} (\d+)", text)
    smem = int(m.group(1)) if m else 0
    if smem:
        try:
            f.max_dynamic_shared_size_bytes = smem
        except AttributeError:
            cp.cuda.driver.funcSetAttribute(
                f.ptr, cp.cuda.driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
    maps = [l.split()[2:] for l in text.splitlines() if l.startswith("// kiln.tensor_map ")]
    return f, (g0 // l0, g1 // l1, 1), (l0, l1, 1), smem, maps


def launcher(built, tensors, extra=()):
    """A function launching the kernel on `tensors` (name -> torch tensor), with the tensor
    maps encoded for them (kept alive in the closure)."""
    f, grid, block, smem, maps = built
    z = np.uint32(0)
    keep = []
    hidden = []
    for fields in maps:
        _kname, _n, param, elem, w, h, pitch, bw, bh, sw = fields
        t = tensors[param]
        blob = tensor_map(t.data_ptr(), elem, int(w), int(h), int(pitch), int(bw), int(bh), sw)
        d = cp.asarray(np.frombuffer(blob, dtype=np.uint8))
        keep.append(d)
        hidden.append(np.uint64(d.data.ptr))
    args = (np.uint64(tensors["a"].data_ptr()), np.uint64(tensors["b"].data_ptr()),
            np.uint64(tensors["c"].data_ptr()), *extra, z, z, z, *hidden)
    return lambda: f(grid, block, args, shared_mem=smem)  # noqa: E731


def rel_err(got, want):
    got, want = got.float(), want.float()
    if torch.isnan(got).any():
        return float("inf")
    return (got - want).abs().max().item() / max(want.abs().max().item(), 1e-30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("--sizes", nargs="*", type=int, default=[4096, 8192])
    ap.add_argument("--configs", nargs="*", default=["128:4", "256:3", "256:4"])
    ap.add_argument("--check-sizes", nargs="*",
                    default=["256x256x256", "1000x520x136", "131x72x200", "384x768x1024"])
    ap.add_argument("--types", nargs="*", default=["bf16", "f16"])
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    print(f"device: {torch.cuda.get_device_name(0)}; cuBLAS via torch.matmul {torch.__version__}")
    dts = {"bf16": torch.bfloat16, "f16": torch.float16}
    failed = False
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        # Correctness first, odd sizes included (fresh random inputs, poisoned output).
        for spec in args.check_sizes:
            m, n, k = map(int, spec.split("x"))
            for name in args.types:
                for cfg in args.configs:
                    bn, st = cfg.split(":")
                    dt = dts[name]
                    a = torch.randn(m, k, device="cuda", dtype=dt)
                    bt = torch.randn(n, k, device="cuda", dtype=dt)
                    c = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
                    gen = [str(m), str(n), str(k), "--type", name, "--out", name, "--trans-b",
                           "--arch", "sm_90", "--block", f"128x{bn}", "--stages", st]
                    try:
                        built = build(kiln, gen, tmp, f"c{m}_{n}_{k}_{name}_{bn}_{st}")
                    except Exception as e:  # noqa: BLE001
                        print(f"  check {spec} {name} {cfg}: build failed: {e}")
                        failed = True
                        continue
                    launcher(built, {"a": a, "b": bt, "c": c})()
                    cp.cuda.Device().synchronize()
                    ref = (a.double() @ bt.double().t())
                    err = rel_err(c, ref)
                    ok = err < 2e-2
                    failed |= not ok
                    print(f"  check {spec} {name} {cfg}: rel err {err:.2e} {'ok' if ok else 'WRONG'}")
        for n in args.sizes:
            for name in args.types:
                dt = dts[name]
                torch.manual_seed(0)
                a = torch.randn(n, n, device="cuda", dtype=dt)
                bt = torch.randn(n, n, device="cuda", dtype=dt)
                ref = torch.matmul(a, bt.t())
                t_ref = median_ms(lambda: torch.matmul(a, bt.t()))
                flop = 2.0 * n * n * n
                best = None
                for cfg in args.configs:
                    bn, st = cfg.split(":")
                    c = torch.full((n, n), float("nan"), device="cuda", dtype=dt)
                    gen = [str(n)] * 3 + ["--type", name, "--out", name, "--trans-b", "--arch",
                                          "sm_90", "--block", f"128x{bn}", "--stages", st]
                    try:
                        built = build(kiln, gen, tmp, f"g{n}{name}{bn}_{st}")
                    except Exception as e:  # noqa: BLE001
                        print(f"  {name} {n}^3 {cfg}: build failed: {e}")
                        failed = True
                        continue
                    run = launcher(built, {"a": a, "b": bt, "c": c})
                    run()
                    cp.cuda.Device().synchronize()
                    err = rel_err(c, ref)
                    if err > 2e-2:
                        print(f"  {name} {n}^3 {cfg}: WRONG (rel err {err:.2e})")
                        failed = True
                        continue
                    t = median_ms(run)
                    t2 = median_ms(run)
                    print(f"  {name} {n}^3 block 128x{bn} stages {st}: kiln {t:.3f} ms "
                          f"(again {t2:.3f}; {flop / t / 1e9:.1f} TFLOP/s), cuBLAS {t_ref:.3f} ms "
                          f"({flop / t_ref / 1e9:.1f} TFLOP/s), ratio {t_ref / t:.3f}, err {err:.1e}")
                    if best is None or t < best[0]:
                        best = (t, cfg)
                if best:
                    rows.append(f"{name} {n}^3: best 128x{best[1]}: kiln/cuBLAS {t_ref / best[0]:.3f} "
                                f"({flop / best[0] / 1e9:.0f} vs {flop / t_ref / 1e9:.0f} TFLOP/s)")
            # The fused epilogue (issue 27 item 5): bias (f32, per column), ReLU, scale, bf16 in
            # and out, against cuBLAS followed by the same three operations as torch kernels.
            torch.manual_seed(1)
            a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            bt = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
            bias = torch.randn(n, device="cuda", dtype=torch.float32)
            bias_b = bias.to(torch.bfloat16)  # keeps torch's chain in bf16, as kiln's output
            alpha = 0.5

            def unfused():
                y = torch.matmul(a, bt.t())
                y = y + bias_b
                y = torch.relu(y)
                return y * alpha
            ref = unfused()
            t_ref = median_ms(unfused)
            best = None
            for cfg in args.configs:
                bn, st = cfg.split(":")
                c = torch.full((n, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                gen = [str(n)] * 3 + ["--type", "bf16", "--out", "bf16", "--trans-b", "--arch",
                                      "sm_90", "--block", f"128x{bn}", "--stages", st,
                                      "--epilogue", "bias,relu,scale"]
                try:
                    built = build(kiln, gen, tmp, f"e{n}_{bn}_{st}")
                except Exception as e:  # noqa: BLE001
                    print(f"  fused {n}^3 {cfg}: build failed: {e}")
                    failed = True
                    continue
                run = launcher(built, {"a": a, "b": bt, "c": c},
                               (np.uint64(bias.data_ptr()), np.float32(alpha)))
                run()
                cp.cuda.Device().synchronize()
                err = rel_err(c, ref)
                if err > 2e-2:
                    print(f"  fused {n}^3 {cfg}: WRONG (rel err {err:.2e})")
                    failed = True
                    continue
                t = median_ms(run)
                print(f"  fused bias+relu+scale bf16 {n}^3 128x{bn} stages {st}: kiln {t:.3f} ms, "
                      f"cuBLAS + 3 torch kernels {t_ref:.3f} ms, speedup {t_ref / t:.3f}, err {err:.1e}")
                if best is None or t < best[0]:
                    best = (t, cfg)
            if best:
                rows.append(f"fused bias+relu+scale bf16 {n}^3: best 128x{best[1]}: speedup over "
                            f"cuBLAS + separate kernels {t_ref / best[0]:.3f}")
    print("\n".join(rows))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
