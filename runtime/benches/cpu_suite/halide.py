"""Issue 24's cpu suite written as Halide pipelines: the reference `cpu_suite` compares kiln with
when the `halide` Python package is installed (`pip install halide`).

    python3 runtime/benches/cpu_suite/halide.py [--log2n 22] [--threads N] [--only a,b]

Each kernel of `cpu_suite.kir` (and `examples/reduce.kir`, `examples/stencil2d.kir`) becomes the
same computation on the same sizes and the same kind of data, scheduled as a Halide user would:
8- or 16-wide vectors on the innermost dimension (tails shifted inwards, which lets Halide
partition the loops), and for the all-thread variant the outer one split into parallel chunks. Every result is first checked against NumPy (relative 1e-4 of the
result's scale: Halide's sums run in another order than the kernels' and its transcendentals
are LLVM's), then each variant is timed, the median of 7 realizations into buffers made once.
Prints one line per kernel, `halide NAME MS_1T MS_ALL` (milliseconds), then `halide done`.
Where Halide cannot express a kernel as written (Mandelbrot's data-dependent loop exit), the
docstring of its builder says what it computes instead.
"""
import argparse
import os
import sys
import time

import numpy as np


def data(n, seed, lo, span):
    """`cpu_suite.rs`'s `data`: `lo + ((i * 2654435761) ^ seed) % 1000 * (span / 1000)` in f32."""
    i = np.arange(n, dtype=np.uint64)
    h = ((i * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)) ^ np.uint64(seed)
    return (np.float32(lo) + (h % np.uint64(1000)).astype(np.float32) * np.float32(span / 1000.0)).astype(np.float32)


def keys(n, seed):
    """`cpu_suite.rs`'s `keys`: `(i * 2654435761) ^ (seed * 0x9e3779b9)` in u32."""
    i = np.arange(n, dtype=np.uint64)
    s = (seed * 0x9E3779B9) & 0xFFFFFFFF
    return (((i * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)) ^ np.uint64(s)).astype(np.uint32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--log2n", type=int, default=22)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    # The runtime's thread pool reads this when it starts (at the first parallel realization).
    os.environ["HL_NUM_THREADS"] = str(args.threads)
    try:
        import halide as hl
    except ImportError:
        print("halide not installed (pip install halide)")
        return 0
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    big = 1 << args.log2n
    n = big - 37
    w = 1 << ((args.log2n + 1) // 2)
    h = big // w
    target = hl.get_jit_target_from_environment()
    x, y, g, l = hl.Var("x"), hl.Var("y"), hl.Var("g"), hl.Var("l")

    def sched(f, v, width, parallel, chunk):
        """`f` vectorized `width` wide on x; with `parallel`, `v` split into parallel chunks of
        `chunk` first (for x, the vectors then go within each chunk)."""
        if parallel:
            vo, vi = hl.Var(), hl.Var()
            f.split(v, vo, vi, chunk).parallel(vo)
            f.vectorize(vi if v is x else x, width)
        else:
            f.vectorize(x, width)

    cases = []

    def case(name, build, out, check, tol=1e-4):
        if only and name not in only:
            return
        cases.append((name, build, out, check, tol))

    # saxpy: out = a * x + y.
    xs, ys = data(n, 1, -5.0, 10.0), data(n, 2, -5.0, 10.0)
    a = np.float32(1.5)

    def saxpy(parallel):
        bx, by = hl.Buffer(xs), hl.Buffer(ys)
        f = hl.Func("saxpy")
        f[x] = hl.f32(float(a)) * bx[x] + by[x]
        sched(f, x, 16, parallel, 1 << 16)
        return f

    case("saxpy", saxpy, lambda: hl.Buffer(hl.Float(32), [n]), a * xs + ys)

    ca, cb, cc = data(n, 3, -5.0, 10.0), data(n, 4, -5.0, 10.0), data(n, 5, -5.0, 10.0)
    s = np.float32(0.75)
    chain_ref = np.maximum(ca * cb + cc, np.float32(0)) * s - cb
    for name in ["chain_max", "chain_if"]:
        def chain(parallel, name=name):
            ba, bb, bc = hl.Buffer(ca), hl.Buffer(cb), hl.Buffer(cc)
            f = hl.Func(name)
            t = ba[x] * bb[x] + bc[x]
            r = hl.max(t, 0.0) if name == "chain_max" else hl.select(t < 0.0, hl.f32(0.0), t)
            f[x] = r * hl.f32(float(s)) - bb[x]
            sched(f, x, 16, parallel, 1 << 16)
            return f
        case(name, chain, lambda: hl.Buffer(hl.Float(32), [n]), chain_ref)

    # The 5-point stencil over a w x h grid, borders copied.
    src = data(w * h, 6, -5.0, 10.0)
    s2 = src.reshape(h, w)
    st_ref = s2.copy()
    st_ref[1:-1, 1:-1] = np.float32(0.5) * s2[1:-1, 1:-1] + np.float32(0.125) * (
        s2[1:-1, :-2] + s2[1:-1, 2:] + s2[:-2, 1:-1] + s2[2:, 1:-1])

    def stencil(parallel):
        b = hl.Buffer(s2)
        # Clamped neighbours (what the border's select discards anyway): with a boundary
        # condition Func instead, Halide's loops ran 8x slower here.
        cx, cy = (lambda e: hl.clamp(e, 0, w - 1)), (lambda e: hl.clamp(e, 0, h - 1))
        f = hl.Func("stencil2d")
        inner = (x > 0) & (x < w - 1) & (y > 0) & (y < h - 1)
        f[x, y] = hl.select(inner, 0.5 * b[x, y] + 0.125 * (b[cx(x - 1), y] + b[cx(x + 1), y] + b[x, cy(y - 1)]
                                                            + b[x, cy(y + 1)]), b[x, y])
        sched(f, y, 16, parallel, 8)
        return f

    case("stencil2d", stencil, lambda: hl.Buffer(hl.Float(32), [w, h]), st_ref)

    # Sums of groups of 64: 8 lanes of 8 contiguous elements each, then the lanes.
    xr = data(n, 7, -5.0, 10.0)
    groups = -(-n // 64)
    xpad = np.zeros(groups * 64, dtype=np.float32)
    xpad[:n] = xr
    red_ref = xpad.reshape(groups, 64).astype(np.float64).sum(axis=1).astype(np.float32)

    def reduce(parallel):
        b = hl.Buffer(xpad)
        r8 = hl.RDom([(0, 8)])
        lanes = hl.Func("lanes")
        lanes[l, g] = hl.f32(0.0)
        lanes[l, g] += b[g * 64 + r8.x * 8 + l]
        f = hl.Func("reduce")
        f[g] = hl.f32(0.0)
        f[g] += lanes[r8.x, g]
        at = g
        if parallel:
            go, at = hl.Var(), hl.Var()
            f.split(g, go, at, 1 << 12, hl.TailStrategy.GuardWithIf).parallel(go)
            f.update().split(g, go, at, 1 << 12, hl.TailStrategy.GuardWithIf).parallel(go)
        lanes.compute_at(f, at).vectorize(l)
        lanes.update().vectorize(l)
        return f

    case("reduce", reduce, lambda: hl.Buffer(hl.Float(32), [groups]), red_ref)

    # Black-Scholes call prices.
    price, strike, years = data(n, 8, 10.0, 90.0), data(n, 9, 10.0, 90.0), data(n, 10, 0.25, 4.75)
    r_, v_ = np.float32(0.02), np.float32(0.3)

    def cnd_np(d):
        l_ = np.abs(d)
        k = 1.0 / (1.0 + 0.2316419 * l_)
        p = k * (0.31938153 + k * (-0.35656378 + k * (1.7814779 + k * (-1.821256 + k * 1.3302745))))
        w_ = 1.0 - 0.3989423 * np.exp(-0.5 * l_ * l_) * p
        return np.where(d < 0, 1.0 - w_, w_)

    p64, k64, t64 = price.astype(np.float64), strike.astype(np.float64), years.astype(np.float64)
    sq = np.sqrt(t64)
    d1 = (np.log(p64 / k64) + (0.02 + 0.5 * 0.09) * t64) / (0.3 * sq)
    d2 = d1 - 0.3 * sq
    opt_ref = (p64 * cnd_np(d1) - k64 * np.exp(-0.02 * t64) * cnd_np(d2)).astype(np.float32)

    def options(parallel):
        bp, bk, bt = hl.Buffer(price), hl.Buffer(strike), hl.Buffer(years)
        S, K, T = bp[x], bk[x], bt[x]
        r, v = hl.f32(float(r_)), hl.f32(float(v_))

        F = hl.f32

        def cnd(d):
            l_ = hl.abs(d)
            k = 1.0 / (1.0 + F(0.2316419) * l_)
            p = k * (F(0.31938153) + k * (F(-0.35656378) + k * (F(1.7814779) + k * (F(-1.821256) + k * F(1.3302745)))))
            w_ = 1.0 - F(0.3989423) * hl.exp(-0.5 * l_ * l_) * p
            return hl.select(d < 0.0, 1.0 - w_, w_)

        sq = hl.sqrt(T)
        d1 = (hl.log(S / K) + (r + 0.5 * v * v) * T) / (v * sq)
        d2 = d1 - v * sq
        f = hl.Func("options")
        f[x] = S * cnd(d1) - K * hl.exp(-r * T) * cnd(d2)
        sched(f, x, 8, parallel, 1 << 14)
        return f

    case("options", options, lambda: hl.Buffer(hl.Float(32), [n]), opt_ref, tol=1e-3)

    # Mandelbrot on (w/2) x (h/2) points, 64 iterations at most.
    mw, mh, max_iter = w // 2, h // 2, 64
    x0, y0 = np.float32(-2.0), np.float32(-1.25)
    dx, dy = np.float32(2.5 / mw), np.float32(2.5 / mh)

    def mandel_np(cx, cy):
        zx = np.zeros_like(cx)
        zy = np.zeros_like(cy)
        it = np.zeros(cx.shape, dtype=np.uint32)
        live = np.ones(cx.shape, dtype=bool)
        for _ in range(max_iter):
            live &= zx * zx + zy * zy <= np.float32(4.0)
            xt = zx * zx - zy * zy + cx
            ny = np.float32(2.0) * zx * zy + cy
            zx = np.where(live, xt, zx)
            zy = np.where(live, ny, zy)
            it += live.astype(np.uint32)
        return it

    tx = (x0 + np.arange(mw, dtype=np.float32) * dx).astype(np.float32)
    ty = (y0 + np.arange(mh, dtype=np.float32) * dy).astype(np.float32)
    gx, gy = np.meshgrid(tx, ty)
    mandel_ref = mandel_np(gx.astype(np.float32), gy.astype(np.float32)).astype(np.float32)

    def mandel(cx, cy, name, parallel):
        """Every point runs all 64 iterations, each one a no-op once the point has escaped:
        Halide has no loop whose trip count depends on the data."""
        r = hl.RDom([(0, max_iter)])
        z = hl.Func(name + "_z")
        z[x, y] = (hl.f32(0.0), hl.f32(0.0), hl.u32(0))
        zx, zy, it = z[x, y][0], z[x, y][1], z[x, y][2]
        # `r.x >= 0` ties the update to the RDom: it runs once per iteration.
        live = (zx * zx + zy * zy <= 4.0) & (r.x >= 0)
        z[x, y] = (hl.select(live, zx * zx - zy * zy + cx, zx),
                   hl.select(live, 2.0 * zx * zy + cy, zy),
                   hl.select(live, it + 1, it))
        f = hl.Func(name)
        f[x, y] = hl.f32(z[x, y][2])
        xo, xi = hl.Var(), hl.Var()
        f.split(x, xo, xi, 8).vectorize(xi)
        z.compute_at(f, xo).vectorize(x)
        z.update().vectorize(x)
        if parallel:
            f.parallel(y)
        return f

    def mandel_cast(parallel):
        return mandel(x0 + hl.f32(x) * dx, y0 + hl.f32(y) * dy, "mandel_cast", parallel)

    def mandel_table(parallel):
        bx, by = hl.Buffer(tx), hl.Buffer(ty)
        return mandel(bx[x], by[y], "mandel_table", parallel)

    # The iteration counts go out as f32 (exact below 2^24) so that one check fits all kernels.
    # Halide may reassociate and contract float arithmetic (unless told `strict_float`), which
    # moves points on the set's border by an iteration: at most 1 in 1000 may differ.
    case("mandel_cast", mandel_cast, lambda: hl.Buffer(hl.Float(32), [mw, mh]), mandel_ref, tol=-1e-3)
    case("mandel_table", mandel_table, lambda: hl.Buffer(hl.Float(32), [mw, mh]), mandel_ref, tol=-1e-3)

    # A 256-bin histogram of the low byte.
    hd = keys(n, 11)
    hist_ref = np.bincount(hd & 255, minlength=256).astype(np.float32)

    def histogram(parallel):
        b = hl.Buffer(hd)
        r = hl.RDom([(0, n)])
        f = hl.Func("histogram")
        f[x] = hl.u32(0)
        f[hl.clamp(hl.i32(b[r.x] & 255), 0, 255)] += hl.u32(1)
        out = hl.Func("histogram_f")
        out[x] = hl.f32(f[x])
        if parallel:
            ro, ri = hl.RVar(), hl.RVar()
            u = hl.Var()
            f.update().split(r.x, ro, ri, 1 << 16)
            part = f.update().rfactor(ro, u)
            part.compute_root().update().parallel(u)
        f.compute_root()
        return out

    case("histogram", histogram, lambda: hl.Buffer(hl.Float(32), [256]), hist_ref, tol=0.0)

    # Naive GEMM on gn x gn matrices.
    gn = 1 << (3 * args.log2n // 8)
    ga, gb = data(gn * gn, 12, -1.0, 2.0).reshape(gn, gn), data(gn * gn, 13, -1.0, 2.0).reshape(gn, gn)
    gemm_ref = (ga.astype(np.float64) @ gb.astype(np.float64)).astype(np.float32)

    def gemm(parallel):
        A, B = hl.Buffer(ga), hl.Buffer(gb)
        k = hl.RDom([(0, gn)])
        f = hl.Func("gemm_naive")
        f[x, y] = hl.f32(0.0)
        f[x, y] += A[k.x, y] * B[x, k.x]
        f.vectorize(x, 8)
        f.update().reorder(x, k.x, y).vectorize(x, 8, hl.TailStrategy.GuardWithIf)
        if parallel:
            f.parallel(y)
            f.update().parallel(y)
        return f

    case("gemm_naive", gemm, lambda: hl.Buffer(hl.Float(32), [gn, gn]), gemm_ref)

    # Row softmax over rows x 256.
    cols = 256
    rows = big // cols // 4 - 3
    sx = data(rows * cols, 14, -4.0, 8.0).reshape(rows, cols)
    e = np.exp(sx.astype(np.float64) - sx.max(axis=1, keepdims=True))
    soft_ref = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)

    def softmax(parallel):
        X = hl.Buffer(sx)
        k = hl.RDom([(0, cols)])
        m = hl.Func("m")
        m[y] = hl.maximum(X[k.x, y])
        ex = hl.Func("ex")
        ex[x, y] = hl.exp(X[x, y] - m[y])
        s = hl.Func("s")
        s[y] = hl.sum(ex[k.x, y])
        f = hl.Func("softmax")
        f[x, y] = ex[x, y] / s[y]
        at = y
        if parallel:
            yo, at = hl.Var(), hl.Var()
            f.split(y, yo, at, 64).parallel(yo)
        f.vectorize(x, 8)
        ex.compute_at(f, at).vectorize(x, 8)
        m.compute_at(f, at)
        s.compute_at(f, at)
        return f

    case("softmax", softmax, lambda: hl.Buffer(hl.Float(32), [cols, rows]), soft_ref)

    # MurmurHash3's finalizer.
    hk = keys(n, 15)
    hh = hk.astype(np.uint64)
    hh ^= hh >> np.uint64(16)
    hh = (hh * np.uint64(2246822507)) & np.uint64(0xFFFFFFFF)
    hh ^= hh >> np.uint64(13)
    hh = (hh * np.uint64(3266489909)) & np.uint64(0xFFFFFFFF)
    hh ^= hh >> np.uint64(16)
    hash_ref = hh.astype(np.uint32)

    def hashk(parallel):
        b = hl.Buffer(hk)
        v = b[x]
        v = v ^ (v >> 16)
        v = v * hl.u32(2246822507)
        v = v ^ (v >> 13)
        v = v * hl.u32(3266489909)
        v = v ^ (v >> 16)
        f = hl.Func("hash")
        f[x] = v
        sched(f, x, 8, parallel, 1 << 16)
        return f

    case("hash", hashk, lambda: hl.Buffer(hl.UInt(32), [n]), hash_ref, tol=0.0)

    for name, build, out, want, tol in cases:
        times = []
        for parallel in (False, True):
            f = build(parallel)
            f.compile_jit(target)
            o = out()
            f.realize(o)
            got = np.asarray(o)
            if got.dtype != want.dtype:
                got = got.astype(want.dtype)
            if tol < 0.0:
                differ = float(np.count_nonzero(got != want)) / want.size
                if not differ <= -tol:
                    print(f"halide {name}: {differ:.3g} of the results differ (allowed {-tol})", file=sys.stderr)
                    return 1
            elif tol == 0.0:
                if not np.array_equal(got, want):
                    bad = np.argwhere(got != want)[0]
                    print(f"halide {name}: wrong result at {tuple(bad)}: {got[tuple(bad)]} != {want[tuple(bad)]}",
                          file=sys.stderr)
                    return 1
            else:
                scale = max(float(np.abs(want).max()), 1e-6)
                err = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()) / scale
                if not err <= tol:
                    print(f"halide {name}: error {err:.3g} of the result's scale (allowed {tol})", file=sys.stderr)
                    return 1
            samples = []
            for _ in range(7):
                t0 = time.perf_counter()
                f.realize(o)
                samples.append(time.perf_counter() - t0)
            times.append(sorted(samples)[3] * 1e3)
        print(f"halide {name} {times[0]:.4f} {times[1]:.4f}", flush=True)
    print("halide done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
