"""sm_90 tensor-core GEMM (issue 27 item 2, sm_90 tier): kiln's `gen tc-gemm --arch sm_90`
(wgmma, tensor copies onto mbarrier objects, a producer and two consumer warpgroups) against
cuBLAS (torch.matmul) in one run, every result checked first.

    python3 benches/gpu/tc90_gemm.py KILN_BINARY [--sizes 4096 8192] [--configs 128:4 256:3:p132:r]
                                                 [--check-sizes 256x256x256 1000x520x136]
                                                 [--transposes nn nt tn tt] [--no-fused]

C = A · B, f32 accumulation, output of the input type, for each transposition `--transposes`
(kiln's kernel-name letters: first A, then B; `t` = stored transposed): A stored M x K (n) or
K x M (t, `--trans-a`), B stored K x N (n) or N x K (t, `--trans-b`), all row-major; torch
multiplies the same storage through transposed views (cuBLAS takes the transposition as an
argument, no copy). Timed rows default to `nt` only (`--time-transposes` to widen); checks
run every transposition. A check size the generator refuses for a transposition (its stored
row not a multiple of 8 elements) is reported as refused, not failed.

A config is `BN:STAGES` optionally followed by `:p<G>` (persistent tiles, at most G
work-groups, `--persistent G`; `:p0` one work-group per tile; without it, kiln's default of
132) and `:r` (`--setmaxnreg`: producer 40, consumers 232
registers), e.g. `256:3:p132:r`; configs run in the given order on the same inputs, so one run
compares the options on and off.

Options on vs off at 4096^3 (bf16 and f16, `nt`; about a minute):
    python3 benches/gpu/tc90_gemm.py KILN --sizes 4096 --check-sizes 1000x520x136 \
        --transposes nt tn --no-fused --configs 256:3:p0 256:3:p0:r 256:3 256:3:r

Short run for every transposition (the final verification):
    python3 benches/gpu/tc90_gemm.py KILN --sizes 4096 --configs 256:3 --types bf16 \
        --check-sizes 136x72x203 1000x520x136 --time-transposes nn nt tn tt --no-fused

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


class Refused(Exception):
    """The generator refused the request (a pitch it cannot copy), by name."""


def build(kiln, gen_args, tmp, tag):
    kir = os.path.join(tmp, f"{tag}.kir")
    ptx = os.path.join(tmp, f"{tag}.ptx")
    g = subprocess.run([kiln, "gen", "tc-gemm", *gen_args, "-o", kir], capture_output=True,
                       text=True)
    if g.returncode != 0:
        if "not a multiple of 8" in g.stderr:
            raise Refused(g.stderr.strip().splitlines()[-1])
        raise RuntimeError(f"kiln gen failed: {g.stderr.strip()}")
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


def config_flags(cfg):
    """kiln's flags for config `BN:STAGES[:p<G>][:r]`, and its block width and stages."""
    bn, st, *opts = cfg.split(":")
    flags = ["--arch", "sm_90", "--block", f"128x{bn}", "--stages", st]
    for o in opts:
        if o == "r":
            flags.append("--setmaxnreg")
        elif o.startswith("p") and o[1:].isdigit():
            flags += ["--persistent", o[1:]]
        else:
            raise SystemExit(f"config {cfg}: unknown option `{o}` (p<G> or r)")
    return flags, bn, st


def tag(cfg):
    """A file-name-safe form of config `cfg`."""
    return cfg.replace(":", "_")


def trans_flags(t):
    """kiln's flags for transposition `t` (`nn`, `nt`, `tn`, `tt`)."""
    return (["--trans-a"] if t[0] == "t" else []) + (["--trans-b"] if t[1] == "t" else [])


def operands(m, n, k, t, dt):
    """(A as stored, B as stored, A as M x K view, B as K x N view), random, for `t`."""
    a_st = torch.randn(*((k, m) if t[0] == "t" else (m, k)), device="cuda", dtype=dt)
    b_st = torch.randn(*((n, k) if t[1] == "t" else (k, n)), device="cuda", dtype=dt)
    return (a_st, b_st, a_st.t() if t[0] == "t" else a_st, b_st.t() if t[1] == "t" else b_st)


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
                    default=["256x256x256", "1000x520x136", "131x72x200", "136x72x203",
                             "384x768x1024"])
    ap.add_argument("--types", nargs="*", default=["bf16", "f16"])
    ap.add_argument("--transposes", nargs="*", default=["nn", "nt", "tn", "tt"],
                    help="transpositions checked")
    ap.add_argument("--time-transposes", nargs="*", default=["nt"],
                    help="transpositions timed against cuBLAS")
    ap.add_argument("--no-fused", action="store_true", help="skip the fused-epilogue rows")
    args = ap.parse_args()
    kiln = os.path.abspath(args.kiln)
    print(f"device: {torch.cuda.get_device_name(0)}; cuBLAS via torch.matmul {torch.__version__}")
    dts = {"bf16": torch.bfloat16, "f16": torch.float16}
    failed = False
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        # Correctness first, odd sizes included (fresh random inputs, poisoned output).
        for spec, t, name, cfg in [(s, t, nm, c) for s in args.check_sizes
                                   for t in args.transposes for nm in args.types
                                   for c in args.configs]:
            m, n, k = map(int, spec.split("x"))
            flags, _bn, _st = config_flags(cfg)
            dt = dts[name]
            a_st, b_st, a, b = operands(m, n, k, t, dt)
            c = torch.full((m, n), float("nan"), device="cuda", dtype=dt)
            gen = [str(m), str(n), str(k), "--type", name, "--out", name, *trans_flags(t), *flags]
            what = f"check {t} {spec} {name} {cfg}"
            try:
                built = build(kiln, gen, tmp, f"c{t}{m}_{n}_{k}_{name}_{tag(cfg)}")
            except Refused as e:
                print(f"  {what}: refused ({e})")
                continue
            except Exception as e:  # noqa: BLE001
                print(f"  {what}: build failed: {e}")
                failed = True
                continue
            launcher(built, {"a": a_st, "b": b_st, "c": c})()
            cp.cuda.Device().synchronize()
            ref = a.double() @ b.double()
            err = rel_err(c, ref)
            ok = err < 2e-2
            failed |= not ok
            print(f"  {what}: rel err {err:.2e} {'ok' if ok else 'WRONG'}")
        for n in args.sizes:
            for tr, name in [(t, nm) for t in args.time_transposes for nm in args.types]:
                dt = dts[name]
                torch.manual_seed(0)
                a_st, b_st, a, b = operands(n, n, n, tr, dt)
                ref = torch.matmul(a, b)
                t_ref = median_ms(lambda: torch.matmul(a, b))
                flop = 2.0 * n * n * n
                best = None
                for cfg in args.configs:
                    flags, _, _ = config_flags(cfg)
                    c = torch.full((n, n), float("nan"), device="cuda", dtype=dt)
                    gen = [str(n)] * 3 + ["--type", name, "--out", name, *trans_flags(tr), *flags]
                    try:
                        built = build(kiln, gen, tmp, f"g{tr}{n}{name}{tag(cfg)}")
                    except Exception as e:  # noqa: BLE001
                        print(f"  {tr} {name} {n}^3 {cfg}: build failed: {e}")
                        failed = True
                        continue
                    run = launcher(built, {"a": a_st, "b": b_st, "c": c})
                    run()
                    cp.cuda.Device().synchronize()
                    err = rel_err(c, ref)
                    if err > 2e-2:
                        print(f"  {tr} {name} {n}^3 {cfg}: WRONG (rel err {err:.2e})")
                        failed = True
                        continue
                    t = median_ms(run)
                    t2 = median_ms(run)
                    print(f"  {tr} {name} {n}^3 {cfg}: kiln {t:.3f} ms "
                          f"(again {t2:.3f}; {flop / t / 1e9:.1f} TFLOP/s), cuBLAS {t_ref:.3f} ms "
                          f"({flop / t_ref / 1e9:.1f} TFLOP/s), ratio {t_ref / t:.3f}, err {err:.1e}")
                    if best is None or t < best[0]:
                        best = (t, cfg)
                if best:
                    rows.append(f"{tr} {name} {n}^3: best {best[1]}: kiln/cuBLAS "
                                f"{t_ref / best[0]:.3f} ({flop / best[0] / 1e9:.0f} vs "
                                f"{flop / t_ref / 1e9:.0f} TFLOP/s)")
            if args.no_fused:
                continue
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
                flags, _, _ = config_flags(cfg)
                c = torch.full((n, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                gen = [str(n)] * 3 + ["--type", "bf16", "--out", "bf16", "--trans-b", *flags,
                                      "--epilogue", "bias,relu,scale"]
                try:
                    built = build(kiln, gen, tmp, f"e{n}_{tag(cfg)}")
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
                print(f"  fused bias+relu+scale bf16 {n}^3 {cfg}: kiln {t:.3f} ms, "
                      f"cuBLAS + 3 torch kernels {t_ref:.3f} ms, speedup {t_ref / t:.3f}, err {err:.1e}")
                if best is None or t < best[0]:
                    best = (t, cfg)
            if best:
                rows.append(f"fused bias+relu+scale bf16 {n}^3: best {best[1]}: speedup over "
                            f"cuBLAS + separate kernels {t_ref / best[0]:.3f}")
    print("\n".join(rows))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
