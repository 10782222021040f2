//! The third set of the cpu suite (`cpu_suite_third.kir`, `KILN_CPU_SUITE_SET=third|all`):
//! kernels written after kiln was tuned on the first two sets, the way users write them
//! (guards, ranges rounded up, odd sizes, 2-D launches), one or two per operation family:
//! per-row loops (layer norm, u32 sums in u64), strided 8-bit and interleaved accesses (RGB to
//! gray, complex multiply), index arithmetic by `/` and `%` (an NCHW to NHWC permute), a
//! clamped 3x3 blur, float to i8 quantization, vector types (`vload4`/`vstore`), per-bin
//! `atomic_min`/`atomic_max`, f16 storage, sigmoid and tanh from `exp`, an embedding gather,
//! bit manipulation with divergent ifs, and a matrix-vector product tiled in local memory.
//! Each is checked against its plain Rust loop bit for bit, except the gate (`exp`: relative
//! error at most 1e-4).

use half::f16;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

use super::{data, f32_buf, keys, log2n, round_up, set_case, u32_buf, Case, Out};

const THIRD: &str = include_str!("../cpu_suite_third.kir");

/// The third set's cases, sized by `KILN_CPU_SUITE_LOG2N` as the first set is.
pub(crate) fn cases() -> Vec<Case> {
    let big = 1usize << log2n();
    let n = big - 37;
    let range1 = |n: usize| NdRange::new(&[round_up(n, 256)]).with_local(&[256]);
    let range2 = |w: usize, h: usize| {
        NdRange::new(&[round_up(w, 16), round_up(h, 16)]).with_local(&[16, 16])
    };
    let rows64 = |rows: usize| NdRange::new(&[round_up(rows, 64)]).with_local(&[64]);
    let b = |i: usize| Arg::Buffer(i);
    let u = |v: usize| Arg::scalar(v as u32);
    let mut v = Vec::new();

    // Layer norm of rows x 257.
    let cols = 257usize;
    let rows = big / cols / 2;
    let lx = data(rows * cols, 51, -5.0, 10.0);
    let (lg, lb) = (data(cols, 52, 0.5, 1.0), data(cols, 53, -0.5, 1.0));
    let eps = 1e-5f32;
    let (x, g, be) = (lx.clone(), lg.clone(), lb.clone());
    let mut y = vec![0f32; rows * cols];
    v.push(set_case(
        THIRD,
        "layernorm",
        rows64(rows),
        vec![b(0), b(1), b(2), b(3), u(rows), u(cols), Arg::scalar(eps)],
        vec![f32_buf(&lx), f32_buf(&lg), f32_buf(&lb), Buffer::zeroed(Scalar::F32, rows * cols)],
        3,
        0.0,
        Some(2 * 4 * rows * cols),
        Box::new(move |keep| {
            for r in 0..rows {
                let row = &x[r * cols..(r + 1) * cols];
                let mut s = 0f32;
                for &v in row {
                    s += v;
                }
                let mean = s / cols as f32;
                let mut q = 0f32;
                for &v in row {
                    let d = v - mean;
                    q += d * d;
                }
                let inv = 1.0 / (q / cols as f32 + eps).sqrt();
                for j in 0..cols {
                    y[r * cols + j] = (row[j] - mean) * inv * g[j] + be[j];
                }
            }
            keep.then(|| Out::F32(y.clone()))
        }),
    ));

    // RGB to gray, n pixels.
    let rgb: Vec<u8> = keys(3 * n, 54).iter().map(|k| (k >> 11) as u8).collect();
    let rg = rgb.clone();
    let mut gray = vec![0u8; n];
    v.push(set_case(
        THIRD,
        "rgb2gray",
        range1(n),
        vec![b(0), b(1), u(n)],
        vec![Buffer::from_slice(&rgb), Buffer::zeroed(Scalar::U8, n)],
        1,
        0.0,
        Some(4 * n),
        Box::new(move |keep| {
            for (o, p) in gray.iter_mut().zip(rg.chunks_exact(3)) {
                let (r, g, b) = (p[0] as u32, p[1] as u32, p[2] as u32);
                *o = ((77 * r + 150 * g + 29 * b + 128) >> 8) as u8;
            }
            keep.then(|| Out::U8(gray.clone()))
        }),
    ));

    // NCHW to NHWC of nb images of 3 x 509 x 515.
    let (pc, ph, pw) = (3usize, 509usize, 515usize);
    let nb = (big / (pc * ph * pw)).max(1);
    let total = nb * pc * ph * pw;
    let ps = data(total, 55, -5.0, 10.0);
    let s = ps.clone();
    let mut pd = vec![0f32; total];
    v.push(set_case(
        THIRD,
        "permute",
        range1(total),
        vec![b(0), b(1), u(pc), u(ph), u(pw), u(total)],
        vec![f32_buf(&ps), Buffer::zeroed(Scalar::F32, total)],
        1,
        0.0,
        Some(2 * 4 * total),
        Box::new(move |keep| {
            for bb in 0..nb {
                for y in 0..ph {
                    for x in 0..pw {
                        for c in 0..pc {
                            pd[((bb * ph + y) * pw + x) * pc + c] =
                                s[((bb * pc + c) * ph + y) * pw + x];
                        }
                    }
                }
            }
            keep.then(|| Out::F32(pd.clone()))
        }),
    ));

    // 3x3 box blur of a w x h image, edges clamped.
    let w = (1usize << log2n().div_ceil(2)) - 13;
    let h = big / (w + 13) - 7;
    let bs = data(w * h, 56, 0.0, 255.0);
    let s = bs.clone();
    let mut bd = vec![0f32; w * h];
    v.push(set_case(
        THIRD,
        "blur3",
        range2(w, h),
        vec![b(0), b(1), u(w), u(h)],
        vec![f32_buf(&bs), Buffer::zeroed(Scalar::F32, w * h)],
        1,
        0.0,
        Some(2 * 4 * w * h),
        Box::new(move |keep| {
            for y in 0..h as i32 {
                for x in 0..w as i32 {
                    let mut acc = 0f32;
                    for dy in -1..2 {
                        let yy = (y + dy).clamp(0, h as i32 - 1) as usize;
                        for dx in -1..2 {
                            let xx = (x + dx).clamp(0, w as i32 - 1) as usize;
                            acc += s[yy * w + xx];
                        }
                    }
                    bd[y as usize * w + x as usize] = acc * 0.11111111;
                }
            }
            keep.then(|| Out::F32(bd.clone()))
        }),
    ));

    // int8 quantization (some values saturate).
    let qx = data(n, 57, -6.0, 12.0);
    let inv_scale = 25.0f32;
    let x = qx.clone();
    let mut qo = vec![0i8; n];
    v.push(set_case(
        THIRD,
        "quantize",
        range1(n),
        vec![b(0), b(1), Arg::scalar(inv_scale), u(n)],
        vec![f32_buf(&qx), Buffer::zeroed(Scalar::I8, n)],
        1,
        0.0,
        Some(5 * n),
        Box::new(move |keep| {
            for (o, &v) in qo.iter_mut().zip(&x) {
                *o = (v * inv_scale + 0.5).floor().clamp(-128.0, 127.0) as i8;
            }
            keep.then(|| Out::I8(qo.clone()))
        }),
    ));

    // Complex multiply of cn interleaved pairs.
    let cn = big / 2 - 37;
    let (ca, cb) = (data(2 * cn, 58, -5.0, 10.0), data(2 * cn, 59, -5.0, 10.0));
    let (a, bb) = (ca.clone(), cb.clone());
    let mut cc = vec![0f32; 2 * cn];
    v.push(set_case(
        THIRD,
        "cmul",
        range1(cn),
        vec![b(0), b(1), b(2), u(cn)],
        vec![f32_buf(&ca), f32_buf(&cb), Buffer::zeroed(Scalar::F32, 2 * cn)],
        2,
        0.0,
        Some(3 * 8 * cn),
        Box::new(move |keep| {
            for i in 0..cn {
                let (ar, ai, br, bi) = (a[2 * i], a[2 * i + 1], bb[2 * i], bb[2 * i + 1]);
                cc[2 * i] = ar * br - ai * bi;
                cc[2 * i + 1] = ar * bi + ai * br;
            }
            keep.then(|| Out::F32(cc.clone()))
        }),
    ));

    // Premultiplied alpha of pn RGBA pixels (some products above 1 clamp).
    let pn = big / 4 - 37;
    let px = data(4 * pn, 60, 0.0, 1.25);
    let p = px.clone();
    let mut po = vec![0f32; 4 * pn];
    v.push(set_case(
        THIRD,
        "premul",
        range1(pn),
        vec![b(0), b(1), u(pn)],
        vec![f32_buf(&px), Buffer::zeroed(Scalar::F32, 4 * pn)],
        1,
        0.0,
        Some(2 * 16 * pn),
        Box::new(move |keep| {
            for (o, p) in po.chunks_exact_mut(4).zip(p.chunks_exact(4)) {
                let a = p[3];
                let q = [p[0] * a, p[1] * a, p[2] * a, p[3] * 1.0];
                for (o, q) in o.iter_mut().zip(q) {
                    *o = q.min(1.0);
                }
            }
            keep.then(|| Out::F32(po.clone()))
        }),
    ));

    // Per-bin minimum and maximum of n values over 1024 bins.
    let (bk, bv) = (keys(n, 61), keys(n, 62));
    let init: Vec<u32> = (0..2048).map(|j| if j % 2 == 0 { u32::MAX } else { 0 }).collect();
    let (kr, vr, ir) = (bk.clone(), bv.clone(), init.clone());
    let mut mm = init.clone();
    let mut c = set_case(
        THIRD,
        "binrange",
        range1(n),
        vec![b(0), b(1), b(2), u(n)],
        vec![u32_buf(&bk), u32_buf(&bv), u32_buf(&init)],
        2,
        0.0,
        None,
        Box::new(move |keep| {
            mm.copy_from_slice(&ir);
            for (&k, &v) in kr.iter().zip(&vr) {
                let b = (k & 1023) as usize;
                mm[2 * b] = mm[2 * b].min(v);
                mm[2 * b + 1] = mm[2 * b + 1].max(v);
            }
            keep.then(|| Out::U32(mm.clone()))
        }),
    );
    c.reset = Some(u32_buf(&init));
    v.push(c);

    // Half-precision scale and shift.
    let hx: Vec<f16> = data(n, 63, -300.0, 600.0).into_iter().map(f16::from_f32).collect();
    let (ha, hb) = (0.7f32, 3.25f32);
    let x = hx.clone();
    let mut hy = vec![f16::ZERO; n];
    v.push(set_case(
        THIRD,
        "half_scale",
        range1(n),
        vec![b(0), b(1), Arg::scalar(ha), Arg::scalar(hb), u(n)],
        vec![Buffer::from_slice(&hx), Buffer::zeroed(Scalar::F16, n)],
        1,
        0.0,
        Some(2 * 2 * n),
        Box::new(move |keep| {
            for (o, &v) in hy.iter_mut().zip(&x) {
                *o = f16::from_f32(v.to_f32() * ha + hb);
            }
            keep.then(|| Out::F16(hy.iter().map(|h| h.to_bits()).collect()))
        }),
    ));

    // Row sums of u32 data in u64: rows x 129.
    let sc = 129usize;
    let sr = big / sc;
    let sx = keys(sr * sc, 64);
    let x = sx.clone();
    let mut so = vec![0u64; sr];
    v.push(set_case(
        THIRD,
        "rowsum64",
        rows64(sr),
        vec![b(0), b(1), u(sr), u(sc)],
        vec![u32_buf(&sx), Buffer::zeroed(Scalar::U64, sr)],
        1,
        0.0,
        Some(4 * sr * sc),
        Box::new(move |keep| {
            for (o, row) in so.iter_mut().zip(x.chunks_exact(sc)) {
                let mut s = 0u64;
                for &v in row {
                    s += v as u64;
                }
                *o = s;
            }
            keep.then(|| Out::U64(so.clone()))
        }),
    ));

    // Sigmoid gated by tanh.
    let gx = data(n, 65, -8.0, 16.0);
    let x = gx.clone();
    let mut gy = vec![0f32; n];
    v.push(set_case(
        THIRD,
        "gate",
        range1(n),
        vec![b(0), b(1), u(n)],
        vec![f32_buf(&gx), Buffer::zeroed(Scalar::F32, n)],
        1,
        1e-4,
        Some(2 * 4 * n),
        Box::new(move |keep| {
            for (o, &v) in gy.iter_mut().zip(&x) {
                let sig = 1.0 / (1.0 + (-v).exp());
                let e = (2.0 * v.clamp(-9.0, 9.0)).exp();
                let th = (e - 1.0) / (e + 1.0);
                *o = sig * (2.0 + th);
            }
            keep.then(|| Out::F32(gy.clone()))
        }),
    ));

    // Embedding lookup: er rows of 100 from a table of 5000.
    let (dim, vocab) = (100usize, 5000usize);
    let er = big / dim;
    let table = data(vocab * dim, 66, -1.0, 2.0);
    let ids: Vec<u32> = keys(er, 67).iter().map(|k| k % vocab as u32).collect();
    let (t, id) = (table.clone(), ids.clone());
    let mut eo = vec![0f32; er * dim];
    v.push(set_case(
        THIRD,
        "embed",
        range2(dim, er),
        vec![b(0), b(1), b(2), u(dim), u(er)],
        vec![f32_buf(&table), u32_buf(&ids), Buffer::zeroed(Scalar::F32, er * dim)],
        2,
        0.0,
        Some(2 * 4 * er * dim),
        Box::new(move |keep| {
            for (o, &k) in eo.chunks_exact_mut(dim).zip(&id) {
                let k = k as usize;
                o.copy_from_slice(&t[k * dim..(k + 1) * dim]);
            }
            keep.then(|| Out::F32(eo.clone()))
        }),
    ));

    // Bit reversal and leading zeros (some keys 0).
    let rk: Vec<u32> =
        keys(n, 68).iter().map(|k| if k % 97 == 0 { 0 } else { k >> (k % 31) }).collect();
    let k = rk.clone();
    let mut ro = vec![0u32; n];
    v.push(set_case(
        THIRD,
        "bitrev",
        range1(n),
        vec![b(0), b(1), u(n)],
        vec![u32_buf(&rk), Buffer::zeroed(Scalar::U32, n)],
        1,
        0.0,
        Some(2 * 4 * n),
        Box::new(move |keep| {
            for (o, &k) in ro.iter_mut().zip(&k) {
                *o = k.reverse_bits() ^ k.leading_zeros();
            }
            keep.then(|| Out::U32(ro.clone()))
        }),
    ));

    // Matrix-vector product, rows x 515.
    let mc = 515usize;
    let mr = big / mc;
    let (ma, mx) = (data(mr * mc, 69, -1.0, 2.0), data(mc, 70, -1.0, 2.0));
    let (a, x) = (ma.clone(), mx.clone());
    let mut my = vec![0f32; mr];
    v.push(set_case(
        THIRD,
        "matvec",
        rows64(mr),
        vec![b(0), b(1), b(2), u(mr), u(mc)],
        vec![f32_buf(&ma), f32_buf(&mx), Buffer::zeroed(Scalar::F32, mr)],
        2,
        0.0,
        Some(4 * mr * mc),
        Box::new(move |keep| {
            for (o, row) in my.iter_mut().zip(a.chunks_exact(mc)) {
                let mut acc = 0f32;
                for (&a, &x) in row.iter().zip(&x) {
                    acc += a * x;
                }
                *o = acc;
            }
            keep.then(|| Out::F32(my.clone()))
        }),
    ));
    v
}
