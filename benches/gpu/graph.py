"""Command graphs on the GPU: kiln's graph replay against a hand-built CUDA graph of the same
kernels (cupy) and against eager launches, all in the same run.

    python3 benches/gpu/graph.py BIN_DIR [--elems N] [--reps R]

BIN_DIR holds `kiln` and `graph_bench` (benches/gpu/build_all.sh). Steps:

1. `graph_bench --device cuda`: kiln's numbers. chain100: host time of 100 eager submissions
   of a one-work-item kernel (`inc` of graph.kir) on an in-order queue vs one replay of the
   recorded graph (a CUDA graph through the driver API), submit only and submit+wait;
   elementwise4: t1 = a*b; t2 = t1+c; t3 = t2*s; out = t3-b over N f32 (default 2^28) as a
   graph of four kernels, unfused vs fused (fuse_chains + internalize), submit+wait per
   replay, outputs compared bit for bit.
2. cupy, with kiln's own PTX of the same kernels (`kiln emit --target ptx -O`): 100 eager
   launches of `inc` and a CUDA graph of them captured from a stream, host time of the
   launches only and of launch+synchronize; the four elementwise kernels as a captured CUDA
   graph, launch+synchronize. Median of R after warm-up; the same clock (perf_counter) as
   kiln's Instant.
3. Ratios: kiln graph / cupy graph, kiln eager / kiln graph, kiln fused / unfused.

Every timed result is checked (graph_bench checks its own against the host's arithmetic and
fails otherwise; here the counter after the chain100 launches and elementwise4's output bit
for bit); a wrong one fails the script before any ratio is printed.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

import cupy as cp  # noqa: E402
import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def median_us(fn, reps, warm=3):
    for _ in range(warm):
        fn()
    cp.cuda.Device().synchronize()
    t = []
    for _ in range(reps):
        s = time.perf_counter()
        fn()
        t.append((time.perf_counter() - s) * 1e6)
    return float(np.median(t))


def check(what, ok, why):
    """Fails the script, before any ratio is printed, when a timed result is wrong."""
    if not ok:
        sys.exit(f"{what}: wrong result ({why}); no ratios")


def kiln_results(bin_dir, elems, reps):
    out = subprocess.run(
        [os.path.join(bin_dir, "graph_bench"), "--device", "cuda", "--elems", str(elems),
         "--reps", str(reps)],
        check=True, capture_output=True, text=True).stdout
    print(out, end="")
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^RESULT (\S+) (\S+)$", out, re.M)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("bin_dir")
    p.add_argument("--elems", type=int, default=1 << 28)
    p.add_argument("--reps", type=int, default=20)
    a = p.parse_args()
    kiln = kiln_results(a.bin_dir, a.elems, a.reps)

    with tempfile.TemporaryDirectory() as tmp:
        ptx = os.path.join(tmp, "graph.ptx")
        subprocess.run([os.path.join(a.bin_dir, "kiln"), "emit", os.path.join(HERE, "graph.kir"),
                        "--target", "ptx", "-O", "-o", ptx], check=True)
        mod = cp.RawModule(path=ptx)
        z = np.uint32(0)  # kiln's three hidden global-offset parameters

        # chain100: eager launches vs a captured CUDA graph.
        inc = mod.get_function("inc")
        x = cp.zeros(1, dtype=np.uint32)
        stream = cp.cuda.Stream(non_blocking=True)

        def launches():  # on the current stream (`with stream:`)
            for _ in range(100):
                inc((1,), (1,), (x, z, z, z))

        with stream:
            eager_submit = median_us(launches, a.reps)
            eager_wait = median_us(lambda: (launches(), stream.synchronize()), a.reps)
            stream.begin_capture()
            launches()
            graph = stream.end_capture()
            graph_submit = median_us(lambda: graph.launch(stream=stream), a.reps)
            stream.synchronize()
            graph_wait = median_us(lambda: (graph.launch(stream=stream), stream.synchronize()), a.reps)
        # Every timed launch incremented x once: four timed loops of warm-up + reps rounds.
        stream.synchronize()
        want = 4 * (3 + a.reps) * 100
        check("cupy chain100", int(x.get()[0]) == want, f"x is {int(x.get()[0])}, not {want}")
        print(f"cupy chain100: eager submit {eager_submit:.1f} us, submit+wait {eager_wait:.1f} us; "
              f"CUDA graph launch {graph_submit:.1f} us, launch+wait {graph_wait:.1f} us")

        # elementwise4: the four kernels as a captured CUDA graph.
        n = a.elems
        fs = [mod.get_function(k) for k in ("k1", "k2", "k3", "k4")]
        arr = lambda s: (cp.arange(n, dtype=np.float32) % 1000) * np.float32(s)  # noqa: E731
        av, bv, cv = arr(0.5), arr(0.25), arr(2.0)
        t1, t2, t3, out = (cp.empty(n, dtype=np.float32) for _ in range(4))
        grid, block = (n // 256,), (256,)
        with stream:
            stream.begin_capture()
            fs[0](grid, block, (av, bv, t1, z, z, z))
            fs[1](grid, block, (t1, cv, t2, z, z, z))
            fs[2](grid, block, (t2, t3, np.float32(1.5), z, z, z))
            fs[3](grid, block, (t3, bv, out, z, z, z))
            g4 = stream.end_capture()
            g4_wait = median_us(lambda: (g4.launch(stream=stream), stream.synchronize()), a.reps)
        ha, hb, hc = av.get(), bv.get(), cv.get()
        want = ((ha * hb + hc) * np.float32(1.5) - hb).view(np.uint32)
        check("cupy elementwise4", np.array_equal(out.get().view(np.uint32), want),
              "out differs from the host's f32 arithmetic")
        print(f"cupy elementwise4 CUDA graph (unfused, kiln's PTX): {g4_wait / 1e3:.3f} ms")

    print("== ratios (same run)")
    kg, ke = kiln["chain100.graph.submit_wait_us"], kiln["chain100.eager.submit_wait_us"]
    print(f"chain100 submit+wait: kiln eager {ke:.1f} us, kiln graph {kg:.1f} us "
          f"({ke / kg:.1f}x), cupy eager {eager_wait:.1f} us, cupy CUDA graph {graph_wait:.1f} us; "
          f"kiln graph / cupy graph = {kg / graph_wait:.2f}")
    ks = kiln["chain100.graph.submit_us"]
    print(f"chain100 host submit only: kiln eager {kiln['chain100.eager.submit_us']:.1f} us, "
          f"kiln graph {ks:.1f} us, cupy eager {eager_submit:.1f} us, cupy graph {graph_submit:.1f} us")
    u, f = kiln["elementwise4.unfused_us"], kiln["elementwise4.fused_us"]
    print(f"elementwise4 over {n} f32: kiln unfused graph {u / 1e3:.3f} ms, cupy graph of the same "
          f"kernels {g4_wait / 1e3:.3f} ms ({u / g4_wait:.2f}), kiln fused graph {f / 1e3:.3f} ms: "
          f"fused {u / f:.2f}x faster than unfused (target 2.4x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
