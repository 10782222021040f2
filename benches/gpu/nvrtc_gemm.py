"""NVRTC's compile time for a CUDA C SGEMM kernel of the size kiln generates, next to kiln's
generation + optimization + PTX emission of its own, same run.

    python3 benches/gpu/nvrtc_gemm.py KILN_BINARY

The CUDA C kernel has kiln's GPU blocking (16x16 threads, 4x4 register blocks, k-tile 16,
double-buffered shared tiles, float4 shared reads and C stores, unrolled inner loops): NVRTC
compiles it to PTX for compute_90 (best of 5, cuda-python's nvrtc, or cupy with an empty
cache). kiln's side: `kiln gen gemm 1024 1024 1024` with the same blocking (process start
included, best of 5), then `kiln emit --target ptx -O --time` (lowering and -O pipeline,
parsing excluded, best of 5). The criterion bench `cargo bench -p kiln-gen --bench generate`
measures kiln's three steps in-process without the process start.
"""
import os
import re
import subprocess
import sys
import tempfile
import time

CUDA_SRC = r"""
#define BM 64
#define BN 64
#define BK 16
extern "C" __global__ void __launch_bounds__(256) sgemm(const float* __restrict__ A,
    const float* __restrict__ B, float* __restrict__ C, int M, int N, int K, float alpha, float beta) {
  __shared__ __align__(16) float As[2][BK][BM];
  __shared__ __align__(16) float Bs[2][BK][BN];
  int tx = threadIdx.x, ty = threadIdx.y, lid = ty * 16 + tx;
  int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  float acc[4][4] = {};
  auto load = [&](int slot, int k0) {
    #pragma unroll
    for (int e = 0; e < (BM * BK) / 256; ++e) {
      int i = lid + e * 256, r = i % BM, k = i / BM;
      As[slot][k][r] = (m0 + r < M && k0 + k < K) ? A[(m0 + r) * K + k0 + k] : 0.f;
    }
    #pragma unroll
    for (int e = 0; e < (BN * BK) / (256 * 4); ++e) {
      int i = lid + e * 256, q = i % (BN / 4), k = i / (BN / 4);
      float4 v = (k0 + k < K) ? *reinterpret_cast<const float4*>(&B[(k0 + k) * N + n0 + 4 * q])
                              : make_float4(0.f, 0.f, 0.f, 0.f);
      *reinterpret_cast<float4*>(&Bs[slot][k][4 * q]) = v;
    }
  };
  int nk = (K + BK - 1) / BK;
  load(0, 0);
  __syncthreads();
  for (int kt = 0; kt < nk; ++kt) {
    int s = kt & 1;
    if (kt + 1 < nk) load(s ^ 1, (kt + 1) * BK);
    #pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float4 a = *reinterpret_cast<const float4*>(&As[s][kk][ty * 4]);
      float4 b = *reinterpret_cast<const float4*>(&Bs[s][kk][tx * 4]);
      float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
      #pragma unroll
      for (int i = 0; i < 4; ++i)
        #pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
  #pragma unroll
  for (int i = 0; i < 4; ++i) {
    int m = m0 + ty * 4 + i, n = n0 + tx * 4;
    if (m < M && n < N) {
      float4* c = reinterpret_cast<float4*>(&C[m * N + n]);
      float4 o = *c;
      *c = make_float4(alpha * acc[i][0] + beta * o.x, alpha * acc[i][1] + beta * o.y,
                       alpha * acc[i][2] + beta * o.z, alpha * acc[i][3] + beta * o.w);
    }
  }
}
"""

BLOCKING = ["--wg", "16x16", "--tile", "4x4", "--k-tile", "16", "--slm", "2", "--unroll", "--vec", "4"]


def nvrtc_us():
    try:
        try:
            from cuda.bindings import nvrtc
        except ImportError:
            from cuda import nvrtc
        best = None
        for _ in range(5):
            err, prog = nvrtc.nvrtcCreateProgram(CUDA_SRC.encode(), b"sgemm.cu", 0, [], [])
            opts = [b"--gpu-architecture=compute_90", b"-std=c++17"]
            t0 = time.perf_counter()
            err, = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
            dt = (time.perf_counter() - t0) * 1e6
            assert int(err) == 0, err
            nvrtc.nvrtcDestroyProgram(prog)
            best = dt if best is None else min(best, dt)
        return best, "cuda-python nvrtcCompileProgram"
    except Exception as e:  # noqa: BLE001 - fall back to cupy with an empty cache
        import cupy as cp
        best = None
        for _ in range(5):
            os.environ["CUPY_CACHE_DIR"] = tempfile.mkdtemp()
            t0 = time.perf_counter()
            cp.RawModule(code=CUDA_SRC, options=("-std=c++17",)).compile()
            dt = (time.perf_counter() - t0) * 1e6
            best = dt if best is None else min(best, dt)
        return best, f"cupy RawModule.compile, empty cache ({e})"


def main():
    kiln = sys.argv[1]
    tmp = tempfile.mkdtemp()
    kir = os.path.join(tmp, "g.kir")
    gen_us = None
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run([kiln, "gen", "gemm", "1024", "1024", "1024", *BLOCKING, "-o", kir], check=True)
        dt = (time.perf_counter() - t0) * 1e6
        gen_us = dt if gen_us is None else min(gen_us, dt)
    emit_us = None
    for _ in range(5):
        r = subprocess.run([kiln, "emit", kir, "--target", "ptx", "-O", "--time", "-o",
                            os.path.join(tmp, "g.ptx")], check=True, capture_output=True, text=True)
        us = float(re.search(r"in ([0-9.]+) us", r.stderr).group(1))
        emit_us = us if emit_us is None else min(emit_us, us)
    nv, how = nvrtc_us()
    print(f"kiln gen gemm (process, generation): {gen_us:.0f} us; kiln emit -O to PTX (in-process): "
          f"{emit_us:.0f} us; NVRTC CUDA C -> PTX: {nv:.0f} us [{how}]; "
          f"NVRTC / kiln emit = {nv / emit_us:.1f}x")


if __name__ == "__main__":
    main()
