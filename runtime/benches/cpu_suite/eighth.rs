//! The eighth set of the cpu suite (`cpu_suite_eighth.kir`,
//! `KILN_CPU_SUITE_SET=eighth|all`): kernels written after the first seven sets, the way users
//! write them (guards, ranges rounded up, odd sizes, a 2-D launch), none of a kind those sets
//! have: stream compaction by a local atomic counter (no prefix sum), base64 encoding through
//! an alphabet table with `=` padding, edit distances of short words with a private row,
//! 4x4 matrix inverses by the adjugate, cubic roots by 32 steps of bisection, one level of the
//! reversible CDF 5/3 wavelet on i32 rows (arithmetic shifts, mirrored ends), dot products of
//! f16 rows accumulated in f32, integer square roots by Newton's iteration (a division by the
//! lane's own estimate per trip), quaternion slerp (an acos polynomial, `sin`), logistic
//! regression scores in f64 (`exp`), days to civil dates by signed division by constants, and
//! a bitonic sort of 256 values per work-group in local memory. Each is checked against its
//! plain Rust loop, bit for bit but for slerp's `sin` and the logistic's `exp` (kiln's own
//! algorithms, not the host's libm: a relative tolerance).

use half::f16;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

use super::{data, f32_buf, keys, log2n, round_up, set_case, u32_buf, Case, Out};

const EIGHTH: &str = include_str!("../cpu_suite_eighth.kir");

/// Base64's alphabet.
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The eighth set's cases, sized by `KILN_CPU_SUITE_LOG2N` as the first set is.
pub(crate) fn cases() -> Vec<Case> {
    let big = 1usize << log2n();
    let n = big - 37;
    let range1 = |n: usize| NdRange::new(&[round_up(n, 256)]).with_local(&[256]);
    let b = |i: usize| Arg::Buffer(i);
    let u = |v: usize| Arg::scalar(v as u32);
    let mut v = Vec::new();

    // n values in [-10, 20), those above 5 kept (about half), in segments of 256.
    let (cx, ct) = (data(n, 181, -10.0, 30.0), 5.0f32);
    let groups = n.div_ceil(256);
    let xc = cx.clone();
    let (mut kept, mut counts) = (vec![0f32; groups * 256], vec![0u32; groups]);
    v.push(set_case(
        EIGHTH,
        "compact",
        range1(n),
        vec![b(0), b(1), b(2), Arg::scalar(ct), u(n)],
        vec![
            f32_buf(&cx),
            Buffer::zeroed(Scalar::F32, groups * 256),
            Buffer::zeroed(Scalar::U32, groups),
        ],
        1,
        0.0,
        None,
        Box::new(move |keep| {
            for (g, xs) in xc.chunks(256).enumerate() {
                let mut k = 0;
                for &x in xs {
                    if x > ct {
                        kept[g * 256 + k] = x;
                        k += 1;
                    }
                }
                counts[g] = k as u32;
            }
            keep.then(|| Out::F32(kept.clone()))
        }),
    ));

    // big - 38 bytes (not a multiple of 3: the last group is padded).
    let blen = big - 38;
    let bsrc: Vec<u8> = keys(blen, 182).iter().map(|k| (k >> 13) as u8).collect();
    let bgroups = blen.div_ceil(3);
    let s = bsrc.clone();
    let mut enc = vec![0u8; 4 * bgroups];
    v.push(set_case(
        EIGHTH,
        "base64",
        range1(bgroups),
        vec![b(0), b(1), b(2), u(blen), u(bgroups)],
        vec![
            Buffer::from_slice(&bsrc),
            Buffer::from_slice(ALPHABET),
            Buffer::zeroed(Scalar::U8, 4 * bgroups),
        ],
        2,
        0.0,
        Some(blen + 4 * bgroups),
        Box::new(move |keep| {
            for (src, dst) in s.chunks(3).zip(enc.chunks_mut(4)) {
                let byte = |k: usize| src.get(k).map_or(0, |&c| c as u32);
                let w = byte(0) << 16 | byte(1) << 8 | byte(2);
                dst[0] = ALPHABET[(w >> 18) as usize];
                dst[1] = ALPHABET[(w >> 12 & 63) as usize];
                dst[2] = if src.len() > 1 { ALPHABET[(w >> 6 & 63) as usize] } else { b'=' };
                dst[3] = if src.len() > 2 { ALPHABET[(w & 63) as usize] } else { b'=' };
            }
            keep.then(|| Out::U8(enc.clone()))
        }),
    ));

    // ln pairs of words of 1 to 16 letters of a 6-letter alphabet, the second a misspelling of
    // the first (about one letter in four changed, a length up to 2 apart).
    let ln = big / 16 - 37;
    let (ka, kb) = (keys(16 * ln, 183), keys(16 * ln, 184));
    let wa: Vec<u8> = ka.iter().map(|k| b'a' + (k >> 9) as u8 % 6).collect();
    let wb: Vec<u8> = wa
        .iter()
        .zip(&kb)
        .map(|(&c, k)| if (k >> 7) % 4 == 0 { b'a' + (k >> 12) as u8 % 6 } else { c })
        .collect();
    let la: Vec<u32> = keys(ln, 185).iter().map(|k| (k >> 5) % 16 + 1).collect();
    let lb: Vec<u32> = la
        .iter()
        .zip(keys(ln, 186))
        .map(|(&l, k)| (l + (k >> 6) % 5).saturating_sub(2).clamp(1, 16))
        .collect();
    let (a, bw, al, bl) = (wa.clone(), wb.clone(), la.clone(), lb.clone());
    let mut dist = vec![0u32; ln];
    v.push(set_case(
        EIGHTH,
        "levenshtein",
        range1(ln),
        vec![b(0), b(1), b(2), b(3), b(4), u(ln)],
        vec![
            Buffer::from_slice(&wa),
            u32_buf(&la),
            Buffer::from_slice(&wb),
            u32_buf(&lb),
            Buffer::zeroed(Scalar::U32, ln),
        ],
        4,
        0.0,
        None,
        Box::new(move |keep| {
            for (i, d) in dist.iter_mut().enumerate() {
                let x = &a[16 * i..16 * i + al[i] as usize];
                let y = &bw[16 * i..16 * i + bl[i] as usize];
                let mut row = [0u32; 17];
                for (q, r) in row.iter_mut().enumerate().take(y.len() + 1) {
                    *r = q as u32;
                }
                for (p, &cx) in x.iter().enumerate() {
                    let mut diag = row[0];
                    row[0] = p as u32 + 1;
                    for (q, &cy) in y.iter().enumerate() {
                        let up = row[q + 1];
                        let cost = u32::from(cx != cy);
                        row[q + 1] = (up + 1).min(row[q] + 1).min(diag + cost);
                        diag = up;
                    }
                }
                *d = row[y.len()];
            }
            keep.then(|| Out::U32(dist.clone()))
        }),
    ));

    // mn matrices: entries in [-1, 1), 2 added to the diagonal.
    let mn = big / 16 - 37;
    let mut mats = data(16 * mn, 187, -1.0, 2.0);
    for (e, x) in mats.iter_mut().enumerate() {
        if e % 16 % 5 == 0 {
            *x += 2.0;
        }
    }
    let ms = mats.clone();
    let mut inv = vec![0f32; 16 * mn];
    v.push(set_case(
        EIGHTH,
        "inv4",
        range1(mn),
        vec![b(0), b(1), u(mn)],
        vec![f32_buf(&mats), Buffer::zeroed(Scalar::F32, 16 * mn)],
        1,
        0.0,
        Some(2 * 4 * 16 * mn),
        Box::new(move |keep| {
            for (m, r) in ms.chunks(16).zip(inv.chunks_mut(16)) {
                let [a00, a01, a02, a03, a10, a11, a12, a13, a20, a21, a22, a23, a30, a31, a32, a33] =
                    m.try_into().expect("16 entries");
                let s0 = a00 * a11 - a10 * a01;
                let s1 = a00 * a12 - a10 * a02;
                let s2 = a00 * a13 - a10 * a03;
                let s3 = a01 * a12 - a11 * a02;
                let s4 = a01 * a13 - a11 * a03;
                let s5 = a02 * a13 - a12 * a03;
                let c5 = a22 * a33 - a32 * a23;
                let c4 = a21 * a33 - a31 * a23;
                let c3 = a21 * a32 - a31 * a22;
                let c2 = a20 * a33 - a30 * a23;
                let c1 = a20 * a32 - a30 * a22;
                let c0 = a20 * a31 - a30 * a21;
                let det = s0 * c5 - s1 * c4 + s2 * c3 + s3 * c2 - s4 * c1 + s5 * c0;
                let k = if det == 0.0 { 0.0 } else { 1.0 / det };
                r[0] = (a11 * c5 - a12 * c4 + a13 * c3) * k;
                r[1] = (-a01 * c5 + a02 * c4 - a03 * c3) * k;
                r[2] = (a31 * s5 - a32 * s4 + a33 * s3) * k;
                r[3] = (-a21 * s5 + a22 * s4 - a23 * s3) * k;
                r[4] = (-a10 * c5 + a12 * c2 - a13 * c1) * k;
                r[5] = (a00 * c5 - a02 * c2 + a03 * c1) * k;
                r[6] = (-a30 * s5 + a32 * s2 - a33 * s1) * k;
                r[7] = (a20 * s5 - a22 * s2 + a23 * s1) * k;
                r[8] = (a10 * c4 - a11 * c2 + a13 * c0) * k;
                r[9] = (-a00 * c4 + a01 * c2 - a03 * c0) * k;
                r[10] = (a30 * s4 - a31 * s2 + a33 * s0) * k;
                r[11] = (-a20 * s4 + a21 * s2 - a23 * s0) * k;
                r[12] = (-a10 * c3 + a11 * c1 - a12 * c0) * k;
                r[13] = (a00 * c3 - a01 * c1 + a02 * c0) * k;
                r[14] = (-a30 * s3 + a31 * s1 - a32 * s0) * k;
                r[15] = (a20 * s3 - a21 * s1 + a22 * s0) * k;
            }
            keep.then(|| Out::F32(inv.clone()))
        }),
    ));

    // cn cubics: c0, c1, c2 in [-1, 1), c3 in [0.5, 1.5), searched in [-2, 2].
    let cn = big / 4 - 37;
    let mut coef = data(4 * cn, 188, -1.0, 2.0);
    for c3 in coef.iter_mut().skip(3).step_by(4) {
        *c3 = *c3 * 0.5 + 1.0;
    }
    let (lo, hi) = (-2.0f32, 2.0f32);
    let cf = coef.clone();
    let mut roots = vec![0f32; cn];
    v.push(set_case(
        EIGHTH,
        "bisect",
        range1(cn),
        vec![b(0), b(1), Arg::scalar(lo), Arg::scalar(hi), u(cn)],
        vec![f32_buf(&coef), Buffer::zeroed(Scalar::F32, cn)],
        1,
        0.0,
        None,
        Box::new(move |keep| {
            for (r, c) in roots.iter_mut().zip(cf.chunks(4)) {
                let f = |x: f32| ((c[3] * x + c[2]) * x + c[1]) * x + c[0];
                let (mut a, mut b) = (lo, hi);
                let neg = f(a) < 0.0;
                for _ in 0..32 {
                    let mid = 0.5 * (a + b);
                    if (f(mid) < 0.0) == neg {
                        a = mid;
                    } else {
                        b = mid;
                    }
                }
                *r = 0.5 * (a + b);
            }
            keep.then(|| Out::F32(roots.clone()))
        }),
    ));

    // A w x rows image of 16-bit samples in i32 (w even).
    let side = 1usize << log2n().div_ceil(2);
    let (ww, wrows) = (side - 6, big / side - 3);
    let wx: Vec<i32> = keys(ww * wrows, 189).iter().map(|k| (k >> 16) as i32 - 32768).collect();
    let xs = wx.clone();
    let mut wy = vec![0i32; ww * wrows];
    v.push(set_case(
        EIGHTH,
        "lift53",
        NdRange::new(&[round_up(ww / 2, 64), wrows as u32]).with_local(&[64, 1]),
        vec![b(0), b(1), u(ww), u(wrows)],
        vec![Buffer::from_slice(&wx), Buffer::zeroed(Scalar::I32, ww * wrows)],
        1,
        0.0,
        Some(2 * 4 * ww * wrows),
        Box::new(move |keep| {
            let half = ww / 2;
            for (x, y) in xs.chunks(ww).zip(wy.chunks_mut(ww)) {
                let detail =
                    |i: usize| x[2 * i + 1] - ((x[2 * i] + x[(2 * i + 2).min(ww - 2)]) >> 1);
                for i in 0..half {
                    let d = detail(i);
                    let dl = if i == 0 { d } else { detail(i - 1) };
                    y[i] = x[2 * i] + ((dl + d + 2) >> 2);
                    y[half + i] = d;
                }
            }
            keep.then(|| Out::I32(wy.clone()))
        }),
    ));

    // hr rows of 64 halves.
    let (hc, hr) = (64usize, big / 64 - 37);
    let ha: Vec<f16> = data(hr * hc, 190, -2.0, 4.0).iter().map(|&x| f16::from_f32(x)).collect();
    let hv: Vec<f16> = data(hc, 191, -1.0, 2.0).iter().map(|&x| f16::from_f32(x)).collect();
    let (am, vv) = (ha.clone(), hv.clone());
    let mut hy = vec![0f32; hr];
    v.push(set_case(
        EIGHTH,
        "hdot",
        range1(hr),
        vec![b(0), b(1), b(2), u(hc), u(hr)],
        vec![Buffer::from_slice(&ha), Buffer::from_slice(&hv), Buffer::zeroed(Scalar::F32, hr)],
        2,
        0.0,
        Some(2 * hr * hc + 4 * hr),
        Box::new(move |keep| {
            for (y, row) in hy.iter_mut().zip(am.chunks(hc)) {
                let mut acc = 0f32;
                for (a, x) in row.iter().zip(&vv) {
                    acc += a.to_f32() * x.to_f32();
                }
                *y = acc;
            }
            keep.then(|| Out::F32(hy.clone()))
        }),
    ));

    // qn values of 8 to 32 bits.
    let qn = big / 4 - 37;
    let qx: Vec<u32> = keys(qn, 192).iter().map(|&k| k >> (k % 25)).collect();
    let xq = qx.clone();
    let mut qr = vec![0u32; qn];
    v.push(set_case(
        EIGHTH,
        "isqrt",
        range1(qn),
        vec![b(0), b(1), u(qn)],
        vec![u32_buf(&qx), Buffer::zeroed(Scalar::U32, qn)],
        1,
        0.0,
        None,
        Box::new(move |keep| {
            for (r, &x) in qr.iter_mut().zip(&xq) {
                let mut s = x;
                if x > 1 {
                    s = x / 2;
                    let mut t = (s + x / s) / 2;
                    while t < s {
                        s = t;
                        t = (s + x / s) / 2;
                    }
                }
                *r = s;
            }
            keep.then(|| Out::U32(qr.clone()))
        }),
    ));

    // sn pairs of unit quaternions (one in 16 pairs equal), weights in [0, 1).
    let sn = big / 4 - 37;
    let unit = |seed: u32| -> Vec<f32> {
        let mut q = data(4 * sn, seed, -1.0, 2.0);
        for c in q.chunks_mut(4) {
            let len = (c[0] * c[0] + c[1] * c[1] + c[2] * c[2] + c[3] * c[3]).sqrt().max(1e-3);
            c.iter_mut().for_each(|x| *x /= len);
        }
        q
    };
    let (sa, mut sb) = (unit(199), unit(200));
    for p in (0..sn).step_by(16) {
        sb[4 * p..4 * p + 4].copy_from_slice(&sa[4 * p..4 * p + 4]);
    }
    let st = data(sn, 194, 0.0, 1.0);
    let (qa, qb, tt) = (sa.clone(), sb.clone(), st.clone());
    let mut sq = vec![0f32; 4 * sn];
    v.push(set_case(
        EIGHTH,
        "slerp",
        range1(sn),
        vec![b(0), b(1), b(2), b(3), u(sn)],
        vec![f32_buf(&sa), f32_buf(&sb), f32_buf(&st), Buffer::zeroed(Scalar::F32, 4 * sn)],
        3,
        1e-4,
        Some(4 * 13 * sn),
        Box::new(move |keep| {
            for (i, o) in sq.chunks_mut(4).enumerate() {
                let (a, b) = (&qa[4 * i..4 * i + 4], &qb[4 * i..4 * i + 4]);
                let dot = a[0] * b[0] + a[1] * b[1] + a[2] * b[2] + a[3] * b[3];
                let sgn = if dot < 0.0 { -1.0 } else { 1.0 };
                let d = dot.abs();
                let u = tt[i];
                let (mut wa, mut wb) = (1.0 - u, u * sgn);
                if d < 0.9995 {
                    let th = (1.0 - d).sqrt()
                        * (((-0.0187293 * d + 0.074261) * d - 0.2121144) * d + 1.5707288);
                    let inv = 1.0 / th.sin();
                    wa = ((1.0 - u) * th).sin() * inv;
                    wb = (u * th).sin() * inv * sgn;
                }
                for (o, (x, y)) in o.iter_mut().zip(a.iter().zip(b)) {
                    *o = wa * x + wb * y;
                }
            }
            keep.then(|| Out::F32(sq.clone()))
        }),
    ));

    // ln samples of 8 features in [-1, 1), weights in [-0.5, 0.5).
    let (fd, fnn, bias) = (8usize, big / 8 - 37, 0.125f64);
    let fx: Vec<f64> = data(fd * fnn, 195, -1.0, 2.0).iter().map(|&x| f64::from(x)).collect();
    let fw: Vec<f64> = data(fd, 196, -0.5, 1.0).iter().map(|&x| f64::from(x)).collect();
    let (xf, wf) = (fx.clone(), fw.clone());
    let mut fp = vec![0f64; fnn];
    v.push(set_case(
        EIGHTH,
        "logistic",
        range1(fnn),
        vec![b(0), b(1), b(2), Arg::scalar(bias), u(fd), u(fnn)],
        vec![Buffer::from_slice(&fx), Buffer::from_slice(&fw), Buffer::zeroed(Scalar::F64, fnn)],
        2,
        1e-12,
        Some(8 * (fd + 1) * fnn),
        Box::new(move |keep| {
            for (p, x) in fp.iter_mut().zip(xf.chunks(fd)) {
                let mut z = bias;
                for (a, w) in x.iter().zip(&wf) {
                    z += a * w;
                }
                *p = 1.0 / (1.0 + (-z).exp());
            }
            keep.then(|| Out::F64(fp.clone()))
        }),
    ));

    // n day numbers in [-200000, 200000) (the years 1422 to 2517).
    let days: Vec<i32> = keys(n, 197).iter().map(|k| (k % 400_000) as i32 - 200_000).collect();
    let dz = days.clone();
    let mut ymd = vec![0i32; n];
    v.push(set_case(
        EIGHTH,
        "civil",
        range1(n),
        vec![b(0), b(1), u(n)],
        vec![Buffer::from_slice(&days), Buffer::zeroed(Scalar::I32, n)],
        1,
        0.0,
        Some(2 * 4 * n),
        Box::new(move |keep| {
            for (o, &d) in ymd.iter_mut().zip(&dz) {
                let z = d + 719_468;
                let era = (if z >= 0 { z } else { z - 146_096 }) / 146_097;
                let doe = z - era * 146_097;
                let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
                let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
                let mp = (5 * doy + 2) / 153;
                let day = doy - (153 * mp + 2) / 5 + 1;
                let month = if mp < 10 { mp + 3 } else { mp - 9 };
                let year = yoe + era * 400 + i32::from(month <= 2);
                *o = year * 10_000 + month * 100 + day;
            }
            keep.then(|| Out::I32(ymd.clone()))
        }),
    ));

    // on values in [-1000, 1000), sorted by blocks of 256 (the last one partial).
    let on = big / 4 - 37;
    let ox = data(on, 198, -1000.0, 2000.0);
    let xo = ox.clone();
    let mut oy = vec![0f32; on];
    v.push(set_case(
        EIGHTH,
        "bsort",
        range1(on),
        vec![b(0), b(1), u(on)],
        vec![f32_buf(&ox), Buffer::zeroed(Scalar::F32, on)],
        1,
        0.0,
        Some(2 * 4 * on),
        Box::new(move |keep| {
            for (xs, ys) in xo.chunks(256).zip(oy.chunks_mut(256)) {
                ys.copy_from_slice(xs);
                ys.sort_unstable_by(f32::total_cmp);
            }
            keep.then(|| Out::F32(oy.clone()))
        }),
    ));
    v
}
