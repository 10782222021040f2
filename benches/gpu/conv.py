"""kiln's generated 2-D convolution (NCHW, f32) on the GPU against cuDNN, same run.

    python3 benches/gpu/conv.py KILN_BINARY

The ResNet-50 3x3 layers at batch 32 (stride 1, padding 1; the stride-2 first conv of each
stage included): `kiln gen conv` writes each kernel for each blocking in CONFIGS, `kiln emit
--target ptx -O` lowers it, cupy launches it with the kernel's #nd_range. The reference is
cuDNN through cupyx (cupyx.scipy / cupy.cudnn when the installation has it); without cuDNN it
is the same problem as im2col + cuBLAS GEMM (cupy.matmul, TF32 off), and the script says
which one it used. Results are checked against the reference (relative error); times are
medians of 10 runs after 3 warm-ups with CUDA events. Reported: TFLOP/s (2*N*K*C*R*S*P*Q
flops), the ratio to the reference and % of the GPU's fp32 peak (FP32_PEAK_TFLOPS, default
67 for the H100 SXM; set it for other GPUs).
"""
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("CUPY_TF32", "0")
import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402
from kiln_gen import generated, median_ms  # noqa: E402

PEAK = float(os.environ.get("FP32_PEAK_TFLOPS", "67"))
# (C in, K out, H, W, stride): ResNet-50's 3x3 convolutions.
LAYERS = [
    (64, 64, 56, 56, 1),
    (128, 128, 56, 56, 2),
    (128, 128, 28, 28, 1),
    (256, 256, 28, 28, 2),
    (256, 256, 14, 14, 1),
    (512, 512, 14, 14, 2),
    (512, 512, 7, 7, 1),
]
BATCH = 32
CONFIGS = [
    "--wg 16x16 --tile 4x4 --k-tile 8 --slm 2 --unroll",
    "--wg 16x16 --tile 4x4 --k-tile 8 --slm 2 --unroll --vec 4",
    "--wg 16x16 --tile 8x8 --k-tile 8 --slm 2 --unroll --vec 4",
    "--wg 8x16 --tile 8x4 --k-tile 16 --slm 2 --unroll --vec 4",
    "--wg 8x16 --tile 8x8 --k-tile 8 --slm 2 --unroll --vec 4",
]


def im2col_reference(x, w, stride):
    """The 3x3, padding 1 convolution as im2col + cuBLAS GEMM (cupy.matmul, TF32 off): a
    function computing it."""
    n, c, h, wd = x.shape
    k = w.shape[0]
    p = (h + 2 - 3) // stride + 1
    q = (wd + 2 - 3) // stride + 1
    xp = cp.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    wm = w.reshape(k, c * 9)

    def run():
        cols = cp.stack([xp[:, :, r:r + stride * p:stride, s:s + stride * q:stride]
                         for r in range(3) for s in range(3)], axis=2)
        cols = cols.reshape(n, c * 9, p * q)
        return cp.matmul(wm, cols).reshape(n, k, p, q)
    return run


def reference(x, w, stride):
    """cuDNN where cupy has it, else im2col + cuBLAS. Returns (name, fn)."""
    try:
        from cupy import cudnn  # noqa: F401
        from cupyx import cudnn as xcudnn  # noqa: F401
        from cupy.cuda import cudnn as libcudnn  # noqa: F401

        y = cp.empty((x.shape[0], w.shape[0], (x.shape[2] + 2 - 3) // stride + 1,
                      (x.shape[3] + 2 - 3) // stride + 1), dtype=np.float32)

        def run():
            cudnn.convolution_forward(x, w, None, y, (1, 1), (stride, stride), (1, 1), 1,
                                      auto_tune=True, tensor_core="never")
            return y
        run()
        return "cuDNN", run
    except Exception as e:  # noqa: BLE001
        print(f"  (no cuDNN through cupy: {e}; using im2col + cuBLAS)")
    return "im2col+cuBLAS", im2col_reference(x, w, stride)


def kiln_conv(kiln, layer, cfg, tmp):
    c, k, h, w, stride = layer
    args = ["conv", "--mb", str(BATCH), "--ic", str(c), "--oc", str(k), "--input", f"{h}x{w}",
            "--kernel", "3x3", "--stride", f"{stride}x{stride}", "--pad", "1x1", *cfg.split()]
    return generated(kiln, args, f"c{c}k{k}h{h}s{stride}_{cfg}", tmp)


def main():
    kiln = sys.argv[1]
    dev = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"device: {dev}; fp32 peak {PEAK} TFLOP/s (FP32_PEAK_TFLOPS); batch {BATCH}")
    rs = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        for layer in LAYERS:
            c, k, h, w, stride = layer
            x = cp.asarray(rs.standard_normal((BATCH, c, h, w), dtype=np.float32))
            wt = cp.asarray(rs.standard_normal((k, c, 3, 3), dtype=np.float32))
            ref_name, ref = reference(x, wt, stride)
            want = ref().copy()
            p, q = want.shape[2], want.shape[3]
            flop = 2.0 * BATCH * k * c * 9 * p * q
            ref_ms = median_ms(ref)
            print(f"{c}->{k} {h}x{w} stride {stride}: {ref_name} {ref_ms:.3f} ms = "
                  f"{flop / ref_ms / 1e9:.2f} TFLOP/s ({flop / ref_ms / 1e9 / PEAK:.1%} of peak)")
            best = None
            for cfg in CONFIGS:
                try:
                    f, grid, block = kiln_conv(kiln, layer, cfg, tmp)
                except subprocess.CalledProcessError as e:
                    print(f"  {cfg}: not generated ({e})")
                    continue
                y = cp.zeros_like(want)
                z = np.uint32(0)
                args = (x, wt, y, np.float32(1.0), np.float32(0.0), z, z, z)
                try:
                    f(grid, block, args)
                    cp.cuda.Device().synchronize()
                except cp.cuda.driver.CUDADriverError as e:
                    print(f"  {cfg}: launch failed: {e}")
                    continue
                err = float(cp.max(cp.abs(y - want)) / cp.max(cp.abs(want)))
                ms = median_ms(lambda: f(grid, block, args))
                ok = err < 1e-4
                tf = flop / ms / 1e9
                print(f"  {cfg}: {ms:.3f} ms = {tf:.2f} TFLOP/s ({tf / PEAK:.1%} of peak), "
                      f"{ref_ms / ms:.3f}x {ref_name}, max rel err {err:.2e}{'' if ok else ' WRONG'}")
                if ok and (best is None or ms < best[0]):
                    best = (ms, cfg)
            if best:
                ms, cfg = best
                tf = flop / ms / 1e9
                print(f"  best: {cfg}: {tf:.2f} TFLOP/s ({tf / PEAK:.1%} of peak), "
                      f"{ref_ms / ms:.3f}x {ref_name}")


if __name__ == "__main__":
    main()
