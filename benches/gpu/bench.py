"""kiln vs CUDA C (NVRTC) on the chain t1 = a + b; t2 = t1 * c; out = t2 - a over 2^28 f32.

Run by benches/gpu/run.sh on the GPU machine. Both kiln's PTX (from `kiln emit`) and the
CUDA C kernels (compiled by NVRTC) are loaded and launched through cupy with the same
launch shape and timed with CUDA events; GB/s counts the bytes each kernel must move. Each
kernel's output is checked bit for bit against the host's arithmetic before anything is
timed; a wrong one fails the script.
"""
import os, re, subprocess, sys, tempfile, time
import numpy as np
import cupy as cp

KILN = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
N = 1 << int(os.environ.get("KILN_BENCH_LOG2N", "28"))
BLOCK = 256
ITERS = int(os.environ.get("KILN_BENCH_ITERS", "20"))

CUDA_SRC = r'''
extern "C" __global__ void add(const float* a, const float* b, float* t1, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) t1[i] = a[i] + b[i]; }
extern "C" __global__ void mul(const float* t1, const float* c, float* t2, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) t2[i] = t1[i] * c[i]; }
extern "C" __global__ void sub(const float* t2, const float* a, float* out, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = t2[i] - a[i]; }
extern "C" __global__ void fused(const float* a, const float* b, const float* c, float* out, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = (a[i] + b[i]) * c[i] - a[i]; }
extern "C" __global__ void copy(const float* a, float* out, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) out[i] = a[i]; }
'''

def kiln_emit(path_out):
    best = None
    for _ in range(5):
        r = subprocess.run([KILN, "emit", os.path.join(HERE, "chain.kir"), "--target", "ptx",
                            "--sm", "90", "--time", "-o", path_out], capture_output=True, text=True, check=True)
        us = float(re.search(r"in ([0-9.]+) us", r.stderr).group(1))
        best = us if best is None else min(best, us)
    return best

def nvrtc_compile():
    """NVRTC time to compile the same five kernels from CUDA C to PTX (best of 5)."""
    try:
        try:
            from cuda.bindings import nvrtc
        except ImportError:
            from cuda import nvrtc
        best = None
        for _ in range(5):
            err, prog = nvrtc.nvrtcCreateProgram(CUDA_SRC.encode(), b"chain.cu", 0, [], [])
            opts = [b"--gpu-architecture=compute_90", b"--fmad=false"]
            t0 = time.perf_counter()
            err, = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
            dt = (time.perf_counter() - t0) * 1e6
            assert int(err) == 0, err
            nvrtc.nvrtcDestroyProgram(prog)
            best = dt if best is None else min(best, dt)
        return best, "cuda-python nvrtcCompileProgram"
    except Exception as e:  # fall back to cupy with an empty cache
        os.environ["CUPY_CACHE_DIR"] = tempfile.mkdtemp()
        t0 = time.perf_counter()
        cp.RawModule(code=CUDA_SRC, options=("--fmad=false",)).compile()
        return (time.perf_counter() - t0) * 1e6, f"cupy RawModule.compile ({e})"

def timed(fn, args):
    grid = ((N + BLOCK - 1) // BLOCK,)
    for _ in range(3):
        fn(grid, (BLOCK,), args)
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(ITERS):
        s, e = cp.cuda.Event(), cp.cuda.Event()
        s.record(); fn(grid, (BLOCK,), args); e.record(); e.synchronize()
        times.append(cp.cuda.get_elapsed_time(s, e) / 1e3)
    return float(np.median(times))

def main():
    ptx_path = os.path.join(tempfile.mkdtemp(), "chain.ptx")
    emit_us = kiln_emit(ptx_path)
    nvrtc_us, how = nvrtc_compile()
    kiln_mod = cp.RawModule(path=ptx_path)
    cuda_mod = cp.RawModule(code=CUDA_SRC, options=("--fmad=false",))
    rng = cp.random.default_rng(1)
    a, b, c = (rng.random(N, dtype=cp.float32) for _ in range(3))
    t1, t2, out = (cp.empty(N, cp.float32) for _ in range(3))
    n = np.uint32(N)
    z = np.uint32(0)
    kern = {  # name: (args, bytes moved)
        "add": ((a, b, t1, n), 12),
        "mul": ((t1, c, t2, n), 12),
        "sub": ((t2, a, out, n), 12),
        "fused": ((a, b, c, out, n), 16),
        "copy": ((a, out, n), 8),
    }
    # Every timed kernel, kiln's and CUDA C's, is checked first against the host's f32
    # arithmetic (one rounding per operation, as both compile it: kiln emits no contraction,
    # NVRTC runs with --fmad=false); a benchmark of a wrong kernel measures nothing.
    grid = ((N + BLOCK - 1) // BLOCK,)
    ha, hb, hc = (x.get() for x in (a, b, c))
    ht1 = ha + hb
    ht2 = ht1 * hc
    want = {"add": (t1, ht1), "mul": (t2, ht2), "sub": (out, ht2 - ha),
            "fused": (out, (ha + hb) * hc - ha), "copy": (out, ha)}
    bad = []
    for name, (args, _) in kern.items():
        dst, host = want[name]
        for who, fn, extra in (("kiln", kiln_mod.get_function(name), (z, z, z)),
                               ("CUDA C", cuda_mod.get_function(name), ())):
            if name in ("mul", "sub"):  # their inputs are the previous kernel's outputs
                t1.set(ht1)
                t2.set(ht2)
            dst.fill(np.float32(np.nan))  # a kernel that writes nothing cannot pass
            fn(grid, (BLOCK,), args + extra)
            cp.cuda.Device().synchronize()
            if not np.array_equal(dst.get().view(np.uint32), host.view(np.uint32)):
                bad.append(f"{who} {name}")
    if bad:
        sys.exit(f"wrong results, nothing timed: {', '.join(bad)}")

    rows = []
    for name, (args, per) in kern.items():
        tk = timed(kiln_mod.get_function(name), args + (z, z, z))
        tc = timed(cuda_mod.get_function(name), args)
        rows.append((name, per * N / tk / 1e9, per * N / tc / 1e9, tk, tc))

    copy_bw = max(r[2] for r in rows if r[0] == "copy")
    print(f"\n== kiln vs CUDA C (NVRTC), N = 2^{N.bit_length()-1} f32, block {BLOCK}, median of {ITERS} ==")
    print(f"device: {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    print(f"{'kernel':<8} {'kiln GB/s':>10} {'CUDA GB/s':>10} {'kiln/CUDA':>10} {'kiln ms':>9} {'CUDA ms':>9} {'% copy':>7}")
    for name, gk, gc, tk, tc in rows:
        print(f"{name:<8} {gk:10.1f} {gc:10.1f} {gk/gc:10.3f} {tk*1e3:9.3f} {tc*1e3:9.3f} {100*gk/copy_bw:6.1f}%")
    chain_k = sum(r[3] for r in rows if r[0] in ("add", "mul", "sub"))
    chain_c = sum(r[4] for r in rows if r[0] in ("add", "mul", "sub"))
    fused_k = [r for r in rows if r[0] == "fused"][0][3]
    print(f"3-kernel chain: kiln {chain_k*1e3:.3f} ms, CUDA C {chain_c*1e3:.3f} ms (kiln/CUDA time {chain_k/chain_c:.3f}); "
          f"kiln fused {fused_k*1e3:.3f} ms = {chain_k/fused_k:.2f}x faster than kiln's chain")
    print("results: every kernel above, kiln's and CUDA C's, equals the host's f32 arithmetic bit for bit")
    print(f"compile: kiln emit (5 kernels, IR -> PTX) {emit_us:.1f} us; NVRTC (CUDA C -> PTX) {nvrtc_us:.1f} us "
          f"[{how}]; ratio {nvrtc_us/emit_us:.0f}x")
    sys.stdout.flush()
    ptxas = subprocess.run(["bash", "-c", "command -v ptxas && command -v cuobjdump"], capture_output=True, text=True)
    if ptxas.returncode == 0:
        cubin = ptx_path.replace(".ptx", ".cubin")
        subprocess.run(["ptxas", "-arch=sm_90", "-v", ptx_path, "-o", cubin], check=False)
        sass = subprocess.run(["cuobjdump", "-sass", "-fun", "fused", cubin], capture_output=True, text=True).stdout
        print("\n== SASS of kiln's fused kernel (cuobjdump -sass) ==")
        print("\n".join(l for l in sass.splitlines() if "/*" in l and ";" in l))

main()
