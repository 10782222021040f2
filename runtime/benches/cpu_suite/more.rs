//! The held-out set of the cpu suite (`cpu_suite_more.kir`, `KILN_CPU_SUITE_SET=more|all`):
//! kernels written after kiln was tuned on the first set, one per operation family a user
//! reaches for (2-D ids, transcendentals and selects, local memory and barriers, lane-varying
//! loops, gathers, 8-bit and 64-bit types), each against its plain Rust loop. All are checked
//! bit for bit except GELU (`exp`: relative error at most 1e-4).

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

use super::{data, f32_buf, keys, log2n, round_up, set_case, u32_buf, Case, Out};

const MORE: &str = include_str!("../cpu_suite_more.kir");

/// Deterministic f64 data in `[lo, lo + span)`.
fn data64(n: usize, seed: u32, lo: f64, span: f64) -> Vec<f64> {
    data(n, seed, 0.0, 1.0).into_iter().map(|v| lo + v as f64 * span).collect()
}

/// The held-out cases, sized by `KILN_CPU_SUITE_LOG2N` as the first set is.
pub(crate) fn cases() -> Vec<Case> {
    let big = 1usize << log2n();
    let n = big - 37;
    let range1 = |n: usize| NdRange::new(&[round_up(n, 256)]).with_local(&[256]);
    let range2 = |w: usize, h: usize| {
        NdRange::new(&[round_up(w, 16), round_up(h, 16)]).with_local(&[16, 16])
    };
    let b = |i: usize| Arg::Buffer(i);
    let mut v = Vec::new();

    // Transpose of an h x w matrix, both odd.
    let w = (1usize << log2n().div_ceil(2)) - 13;
    let h = big / (w + 13) - 7;
    let src = data(w * h, 21, -5.0, 10.0);
    let s = src.clone();
    let mut dst = vec![0f32; w * h];
    v.push(set_case(
        MORE,
        "transpose",
        range2(w, h),
        vec![b(0), b(1), Arg::scalar(w as u32), Arg::scalar(h as u32)],
        vec![f32_buf(&src), Buffer::zeroed(Scalar::F32, w * h)],
        1,
        0.0,
        Some(2 * 4 * w * h),
        Box::new(move |keep| {
            for y in 0..h {
                for x in 0..w {
                    dst[x * h + y] = s[y * w + x];
                }
            }
            keep.then(|| Out::F32(dst.clone()))
        }),
    ));

    // GELU.
    let gx = data(n, 22, -12.0, 24.0);
    let g = gx.clone();
    let mut out = vec![0f32; n];
    v.push(set_case(
        MORE,
        "gelu",
        range1(n),
        vec![b(0), b(1), Arg::scalar(n as u32)],
        vec![f32_buf(&gx), Buffer::zeroed(Scalar::F32, n)],
        1,
        1e-4,
        Some(2 * 4 * n),
        Box::new(move |keep| {
            for (o, &v) in out.iter_mut().zip(&g) {
                let z = (0.7978846 * (v + 0.044715 * v * v * v)).clamp(-15.0, 15.0);
                let gv = v / (1.0 + (-2.0 * z).exp());
                *o = if v < -10.0 { 0.0 } else { gv };
            }
            keep.then(|| Out::F32(out.clone()))
        }),
    ));

    // 7-tap convolution, zero outside [0, n).
    let cx = data(n, 23, -5.0, 10.0);
    let taps = [0.03125f32, -0.125, 0.25, 0.6875, 0.25, -0.125, 0.03125];
    let c = cx.clone();
    let mut y = vec![0f32; n];
    v.push(set_case(
        MORE,
        "conv7",
        range1(n),
        vec![b(0), b(1), b(2), Arg::scalar(n as u32)],
        vec![f32_buf(&cx), f32_buf(&taps), Buffer::zeroed(Scalar::F32, n)],
        2,
        0.0,
        Some(2 * 4 * n),
        Box::new(move |keep| {
            for (i, o) in y.iter_mut().enumerate() {
                let mut acc = 0f32;
                for (k, t) in taps.iter().enumerate() {
                    let x = (i + k).checked_sub(3).and_then(|j| c.get(j)).copied().unwrap_or(0.0);
                    acc += t * x;
                }
                *o = acc;
            }
            keep.then(|| Out::F32(y.clone()))
        }),
    ));

    // Per-row argmax over rows x 301 (the data's 1000 values give ties).
    let cols = 301usize;
    let rows = big / cols / 2;
    let ax = data(rows * cols, 24, -5.0, 10.0);
    let a = ax.clone();
    let mut idx = vec![0u32; rows];
    v.push(set_case(
        MORE,
        "argmax",
        NdRange::new(&[round_up(rows, 64)]).with_local(&[64]),
        vec![b(0), b(1), Arg::scalar(rows as u32), Arg::scalar(cols as u32)],
        vec![f32_buf(&ax), Buffer::zeroed(Scalar::U32, rows)],
        1,
        0.0,
        Some(4 * rows * cols),
        Box::new(move |keep| {
            for (r, o) in idx.iter_mut().enumerate() {
                let row = &a[r * cols..(r + 1) * cols];
                let (mut best, mut bi) = (row[0], 0);
                for (j, &x) in row.iter().enumerate().skip(1) {
                    if x > best {
                        (best, bi) = (x, j as u32);
                    }
                }
                *o = bi;
            }
            keep.then(|| Out::U32(idx.clone()))
        }),
    ));

    // Inclusive scan of each group of 256.
    let sk = keys(n, 25);
    let k = sk.clone();
    let mut sy = vec![0u32; n];
    v.push(set_case(
        MORE,
        "scan",
        range1(n),
        vec![b(0), b(1), Arg::scalar(n as u32)],
        vec![u32_buf(&sk), Buffer::zeroed(Scalar::U32, n)],
        1,
        0.0,
        Some(2 * 4 * n),
        Box::new(move |keep| {
            for (o, x) in sy.chunks_mut(256).zip(k.chunks(256)) {
                let mut s = 0u32;
                for (o, x) in o.iter_mut().zip(x) {
                    s = s.wrapping_add(*x);
                    *o = s;
                }
            }
            keep.then(|| Out::U32(sy.clone()))
        }),
    ));

    // Bilinear resize to dw x dh from an image 0.7 times as wide and high.
    let (dw, dh) = (w, h);
    let (sw, sh) = (dw * 7 / 10, dh * 7 / 10);
    let (scx, scy) = (sw as f32 / dw as f32, sh as f32 / dh as f32);
    let img = data(sw * sh, 26, 0.0, 255.0);
    let im = img.clone();
    let mut rd = vec![0f32; dw * dh];
    v.push(set_case(
        MORE,
        "resize",
        range2(dw, dh),
        vec![
            b(0),
            b(1),
            Arg::scalar(sw as u32),
            Arg::scalar(sh as u32),
            Arg::scalar(dw as u32),
            Arg::scalar(dh as u32),
            Arg::scalar(scx),
            Arg::scalar(scy),
        ],
        vec![f32_buf(&img), Buffer::zeroed(Scalar::F32, dw * dh)],
        1,
        0.0,
        Some(4 * (dw * dh + sw * sh)),
        Box::new(move |keep| {
            let clamp = |v: i32, hi: usize| v.max(0).min(hi as i32 - 1) as usize;
            for y in 0..dh {
                let fy = (y as f32 + 0.5) * scy - 0.5;
                let y0f = fy.floor();
                let ay = fy - y0f;
                let (y0, y1) = (clamp(y0f as i32, sh), clamp(y0f as i32 + 1, sh));
                for x in 0..dw {
                    let fx = (x as f32 + 0.5) * scx - 0.5;
                    let x0f = fx.floor();
                    let ax = fx - x0f;
                    let (x0, x1) = (clamp(x0f as i32, sw), clamp(x0f as i32 + 1, sw));
                    let (p00, p01) = (im[y0 * sw + x0], im[y0 * sw + x1]);
                    let (p10, p11) = (im[y1 * sw + x0], im[y1 * sw + x1]);
                    let top = p00 + ax * (p01 - p00);
                    let bot = p10 + ax * (p11 - p10);
                    rd[y * dw + x] = top + ay * (bot - top);
                }
            }
            keep.then(|| Out::F32(rd.clone()))
        }),
    ));

    // n-body accelerations of nt targets from 1000 bodies.
    let nt = (big >> 8) - 5;
    let m = 1000usize;
    let eps = 0.01f32;
    let t: Vec<Vec<f32>> = (0..3).map(|s| data(nt, 27 + s, -1.0, 2.0)).collect();
    let bd: Vec<Vec<f32>> = (0..3).map(|s| data(m, 30 + s, -1.0, 2.0)).collect();
    let bm = data(m, 33, 0.5, 1.0);
    let (tr, br, bmr) = (t.clone(), bd.clone(), bm.clone());
    let mut acc = vec![0f32; 3 * nt];
    let mut args: Vec<Arg> = (0..8).map(b).collect();
    args.extend([Arg::scalar(nt as u32), Arg::scalar(m as u32), Arg::scalar(eps)]);
    let mut bufs: Vec<Buffer> = t.iter().chain(&bd).map(|v| f32_buf(v)).collect();
    bufs.extend([f32_buf(&bm), Buffer::zeroed(Scalar::F32, 3 * nt)]);
    v.push(set_case(
        MORE,
        "nbody",
        NdRange::new(&[round_up(nt, 64)]).with_local(&[64]),
        args,
        bufs,
        7,
        0.0,
        None,
        Box::new(move |keep| {
            for i in 0..nt {
                let (xi, yi, zi) = (tr[0][i], tr[1][i], tr[2][i]);
                let (mut ax, mut ay, mut az) = (0f32, 0f32, 0f32);
                for j in 0..m {
                    let (dx, dy, dz) = (br[0][j] - xi, br[1][j] - yi, br[2][j] - zi);
                    let d2 = dx * dx + dy * dy + dz * dz + eps;
                    let inv = 1.0 / d2.sqrt();
                    let s = bmr[j] * inv * inv * inv;
                    ax += dx * s;
                    ay += dy * s;
                    az += dz * s;
                }
                acc[3 * i..3 * i + 3].copy_from_slice(&[ax, ay, az]);
            }
            keep.then(|| Out::F32(acc.clone()))
        }),
    ));

    // Bit tricks.
    let bk = keys(n, 34);
    let kr = bk.clone();
    let mut bo = vec![0u32; n];
    v.push(set_case(
        MORE,
        "bits",
        range1(n),
        vec![b(0), b(1), Arg::scalar(n as u32)],
        vec![u32_buf(&bk), Buffer::zeroed(Scalar::U32, n)],
        1,
        0.0,
        Some(2 * 4 * n),
        Box::new(move |keep| {
            for (o, &k) in bo.iter_mut().zip(&kr) {
                let pc = k.count_ones();
                let sign = ((k as i32) >> 31) as u32;
                *o = k.rotate_left(pc & 31) ^ pc ^ (sign & 0xff00);
            }
            keep.then(|| Out::U32(bo.clone()))
        }),
    ));

    // daxpy into a third vector.
    let (dx, dy) = (data64(n, 35, -5.0, 10.0), data64(n, 36, -5.0, 10.0));
    let da = 1.25f64;
    let (xr, yr) = (dx.clone(), dy.clone());
    let mut dz = vec![0f64; n];
    v.push(set_case(
        MORE,
        "daxpy",
        range1(n),
        vec![b(0), b(1), b(2), Arg::scalar(da), Arg::scalar(n as u32)],
        vec![Buffer::from_slice(&dx), Buffer::from_slice(&dy), Buffer::zeroed(Scalar::F64, n)],
        2,
        0.0,
        Some(3 * 8 * n),
        Box::new(move |keep| {
            for ((z, x), y) in dz.iter_mut().zip(&xr).zip(&yr) {
                *z = da * x + y;
            }
            keep.then(|| Out::F64(dz.clone()))
        }),
    ));

    // dgemv: rows x 61.
    let gc = 61usize;
    let gr = big / 8 / gc;
    let (ga, gx) = (data64(gr * gc, 37, -1.0, 2.0), data64(gc, 38, -1.0, 2.0));
    let (gar, gxr) = (ga.clone(), gx.clone());
    let mut gy = vec![0f64; gr];
    v.push(set_case(
        MORE,
        "dgemv",
        NdRange::new(&[round_up(gr, 64)]).with_local(&[64]),
        vec![b(0), b(1), b(2), Arg::scalar(gr as u32), Arg::scalar(gc as u32)],
        vec![Buffer::from_slice(&ga), Buffer::from_slice(&gx), Buffer::zeroed(Scalar::F64, gr)],
        2,
        0.0,
        Some(8 * gr * gc),
        Box::new(move |keep| {
            for (r, o) in gy.iter_mut().enumerate() {
                let mut acc = 0f64;
                for j in 0..gc {
                    acc += gar[r * gc + j] * gxr[j];
                }
                *o = acc;
            }
            keep.then(|| Out::F64(gy.clone()))
        }),
    ));

    // 8-bit thresholding.
    let tn = 4 * n + 1;
    let pix: Vec<u8> = keys(tn, 39).iter().map(|k| (k >> 13) as u8).collect();
    let (lo, hi) = (40u8, 200u8);
    let pr = pix.clone();
    let mut po = vec![0u8; tn];
    v.push(set_case(
        MORE,
        "threshold",
        range1(tn),
        vec![b(0), b(1), Arg::scalar(lo), Arg::scalar(hi), Arg::scalar(tn as u32)],
        vec![Buffer::from_slice(&pix), Buffer::zeroed(Scalar::U8, tn)],
        1,
        0.0,
        Some(2 * tn),
        Box::new(move |keep| {
            for (o, &p) in po.iter_mut().zip(&pr) {
                *o = if p > hi {
                    255
                } else if p < lo {
                    0
                } else {
                    p / 2
                };
            }
            keep.then(|| Out::U8(po.clone()))
        }),
    ));

    // CSR SpMV: rows of 0 to 15 entries, columns spread over x.
    let sr = big / 8 - 3;
    let xl = big / 4 + 1;
    let rk = keys(sr, 40);
    let mut rowptr = vec![0u32];
    for k in &rk {
        rowptr.push(rowptr.last().unwrap() + (k >> 7) % 16);
    }
    let nnz = *rowptr.last().unwrap() as usize;
    let col: Vec<u32> = keys(nnz, 41).iter().map(|k| k % xl as u32).collect();
    let val = data(nnz, 42, -1.0, 2.0);
    let sx = data(xl, 43, -1.0, 2.0);
    let (rp, cr, vr, xr) = (rowptr.clone(), col.clone(), val.clone(), sx.clone());
    let mut spy = vec![0f32; sr];
    v.push(set_case(
        MORE,
        "spmv",
        NdRange::new(&[round_up(sr, 64)]).with_local(&[64]),
        vec![b(0), b(1), b(2), b(3), b(4), Arg::scalar(sr as u32)],
        vec![
            u32_buf(&rowptr),
            u32_buf(&col),
            f32_buf(&val),
            f32_buf(&sx),
            Buffer::zeroed(Scalar::F32, sr),
        ],
        4,
        0.0,
        Some(4 * (sr + 1) + 8 * nnz + 4 * sr),
        Box::new(move |keep| {
            for (r, o) in spy.iter_mut().enumerate() {
                let mut acc = 0f32;
                for k in rp[r] as usize..rp[r + 1] as usize {
                    acc += vr[k] * xr[cr[k] as usize];
                }
                *o = acc;
            }
            keep.then(|| Out::F32(spy.clone()))
        }),
    ));
    v
}
