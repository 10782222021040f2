//! The fourth set of the cpu suite (`cpu_suite_fourth.kir`, `KILN_CPU_SUITE_SET=fourth|all`):
//! kernels written after the first three sets, the way users write them (guards, ranges
//! rounded up, odd sizes, 2-D launches), none of a kind those sets have: `while` loops whose
//! trip counts differ from lane to lane (Collatz steps, digit sums by `% 10` and `/ 10`), an
//! argmin by compare and select over a loop (k-means assignment), 64-bit integer arithmetic
//! (splitmix64), a Horner loop in f64, a Sobel filter on 8-bit pixels with a border guard,
//! `sin`/`cos` (a rotation), 8-bit YUV to interleaved RGB through clamped i32, i16 audio
//! mixing with saturation, a triangular loop (`for j in 0 .. i`), a global bitonic
//! compare-exchange step (`i ^ j`), a scatter through a permutation and 4x4 matrices in
//! private arrays. Each is checked against its plain Rust loop bit for bit, except the
//! rotation (`sin`/`cos`: relative error at most 1e-4).

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

use super::{data, f32_buf, keys, log2n, round_up, set_case, u32_buf, Case, Out};

const FOURTH: &str = include_str!("../cpu_suite_fourth.kir");

/// The fourth set's cases, sized by `KILN_CPU_SUITE_LOG2N` as the first set is.
pub(crate) fn cases() -> Vec<Case> {
    let big = 1usize << log2n();
    let n = big - 37;
    let range1 = |n: usize| NdRange::new(&[round_up(n, 256)]).with_local(&[256]);
    let b = |i: usize| Arg::Buffer(i);
    let u = |v: usize| Arg::scalar(v as u32);
    let mut v = Vec::new();

    // Collatz steps of cn start values in 1 ..= 20000 (compute-bound: an eighth of the elements).
    let cn = big / 8 - 37;
    let starts: Vec<u32> = keys(cn, 71).iter().map(|k| k % 20000 + 1).collect();
    let st = starts.clone();
    let mut steps = vec![0u32; cn];
    v.push(set_case(
        FOURTH,
        "collatz",
        range1(cn),
        vec![b(0), b(1), u(cn)],
        vec![u32_buf(&starts), Buffer::zeroed(Scalar::U32, cn)],
        1,
        0.0,
        None,
        Box::new(move |keep| {
            for (o, &s) in steps.iter_mut().zip(&st) {
                let (mut v, mut c) = (s, 0u32);
                while v > 1 {
                    v = if v & 1 == 0 { v >> 1 } else { v.wrapping_mul(3).wrapping_add(1) };
                    c += 1;
                }
                *o = c;
            }
            keep.then(|| Out::U32(steps.clone()))
        }),
    ));

    // k-means assignment of n points to 16 centroids.
    let kc = 16usize;
    let (px, py) = (data(n, 72, 0.0, 10.0), data(n, 73, 0.0, 10.0));
    let (cx, cy) = (data(kc, 74, 0.0, 10.0), data(kc, 75, 0.0, 10.0));
    let (x, y, ccx, ccy) = (px.clone(), py.clone(), cx.clone(), cy.clone());
    let mut label = vec![0u32; n];
    v.push(set_case(
        FOURTH,
        "kmeans",
        range1(n),
        vec![b(0), b(1), b(2), b(3), b(4), u(n), u(kc)],
        vec![
            f32_buf(&px),
            f32_buf(&py),
            f32_buf(&cx),
            f32_buf(&cy),
            Buffer::zeroed(Scalar::U32, n),
        ],
        4,
        0.0,
        None,
        Box::new(move |keep| {
            for i in 0..label.len() {
                let (mut best, mut arg) = (f32::INFINITY, 0u32);
                for c in 0..kc {
                    let (dx, dy) = (x[i] - ccx[c], y[i] - ccy[c]);
                    let d = dx * dx + dy * dy;
                    if d < best {
                        best = d;
                        arg = c as u32;
                    }
                }
                label[i] = arg;
            }
            keep.then(|| Out::U32(label.clone()))
        }),
    ));

    // splitmix64 of n indices.
    let seed = 0x0123_4567_89ab_cdefu64;
    let mut rnd = vec![0u64; n];
    v.push(set_case(
        FOURTH,
        "splitmix",
        range1(n),
        vec![b(0), Arg::scalar(seed), u(n)],
        vec![Buffer::zeroed(Scalar::U64, n)],
        0,
        0.0,
        Some(8 * n),
        Box::new(move |keep| {
            for (i, o) in rnd.iter_mut().enumerate() {
                let mut z = seed.wrapping_add((i as u64 + 1).wrapping_mul(0x9e3779b97f4a7c15));
                z = (z ^ z >> 30).wrapping_mul(0xbf58476d1ce4e5b9);
                z = (z ^ z >> 27).wrapping_mul(0x94d049bb133111eb);
                *o = z ^ z >> 31;
            }
            keep.then(|| Out::U64(rnd.clone()))
        }),
    ));

    // A degree-9 polynomial of n doubles.
    let deg = 9usize;
    let hx: Vec<f64> = data(n, 76, -1.0, 2.0).iter().map(|&v| v as f64).collect();
    let coef: Vec<f64> = (0..=deg).map(|k| 1.0 / (k as f64 + 1.5)).collect();
    let (x, c) = (hx.clone(), coef.clone());
    let mut hy = vec![0f64; n];
    v.push(set_case(
        FOURTH,
        "horner",
        range1(n),
        vec![b(0), b(1), b(2), u(deg), u(n)],
        vec![Buffer::from_slice(&hx), Buffer::from_slice(&coef), Buffer::zeroed(Scalar::F64, n)],
        2,
        0.0,
        Some(2 * 8 * n),
        Box::new(move |keep| {
            for (o, &t) in hy.iter_mut().zip(&x) {
                let mut acc = c[deg];
                for k in 0..deg {
                    acc = acc * t + c[deg - 1 - k];
                }
                *o = acc;
            }
            keep.then(|| Out::F64(hy.clone()))
        }),
    ));

    // Sobel magnitude of a w x h 8-bit image.
    let w = (1usize << log2n().div_ceil(2)) - 13;
    let h = big / (w + 13) - 7;
    let img: Vec<u8> = keys(w * h, 77).iter().map(|k| (k >> 9) as u8).collect();
    let s = img.clone();
    let mut edges = vec![0u8; w * h];
    v.push(set_case(
        FOURTH,
        "sobel",
        NdRange::new(&[round_up(w, 16), round_up(h, 16)]).with_local(&[16, 16]),
        vec![b(0), b(1), u(w), u(h)],
        vec![Buffer::from_slice(&img), Buffer::zeroed(Scalar::U8, w * h)],
        1,
        0.0,
        Some(2 * w * h),
        Box::new(move |keep| {
            let p = |i: usize| s[i] as i32;
            for y in 0..h {
                for x in 0..w {
                    edges[y * w + x] = if x > 0 && x < w - 1 && y > 0 && y < h - 1 {
                        let (up, mid, dn) = ((y - 1) * w + x, y * w + x, (y + 1) * w + x);
                        let gx = p(up + 1) - p(up - 1) + 2 * (p(mid + 1) - p(mid - 1)) + p(dn + 1)
                            - p(dn - 1);
                        let gy =
                            p(dn - 1) - p(up - 1) + 2 * (p(dn) - p(up)) + p(dn + 1) - p(up + 1);
                        ((gx * gx + gy * gy) as f32).sqrt().min(255.0) as u8
                    } else {
                        0
                    };
                }
            }
            keep.then(|| Out::U8(edges.clone()))
        }),
    ));

    // n points rotated by angles in [0, 0.6) (no cancellation: the check is relative).
    let (rx, ry) = (data(n, 78, 1.0, 1.0), data(n, 79, 0.0, 0.5));
    let th = data(n, 80, 0.0, 0.6);
    let (x, y, t) = (rx.clone(), ry.clone(), th.clone());
    let mut ro = vec![0f32; 2 * n];
    v.push(set_case(
        FOURTH,
        "rotate",
        range1(n),
        vec![b(0), b(1), b(2), b(3), u(n)],
        vec![f32_buf(&rx), f32_buf(&ry), f32_buf(&th), Buffer::zeroed(Scalar::F32, 2 * n)],
        3,
        1e-4,
        Some(5 * 4 * n),
        Box::new(move |keep| {
            let (ox, oy) = ro.split_at_mut(n);
            for i in 0..n {
                let (c, s) = (t[i].cos(), t[i].sin());
                ox[i] = x[i] * c - y[i] * s;
                oy[i] = x[i] * s + y[i] * c;
            }
            keep.then(|| Out::F32(ro.clone()))
        }),
    ));

    // YUV to RGB of n pixels (some channels clamp).
    let plane = |seed| -> Vec<u8> { keys(n, seed).iter().map(|k| (k >> 13) as u8).collect() };
    let (yp, up, vp) = (plane(81), plane(82), plane(83));
    let (yr, ur, vr) = (yp.clone(), up.clone(), vp.clone());
    let mut rgb = vec![0u8; 3 * n];
    v.push(set_case(
        FOURTH,
        "yuv2rgb",
        range1(n),
        vec![b(0), b(1), b(2), b(3), u(n)],
        vec![
            Buffer::from_slice(&yp),
            Buffer::from_slice(&up),
            Buffer::from_slice(&vp),
            Buffer::zeroed(Scalar::U8, 3 * n),
        ],
        3,
        0.0,
        Some(6 * n),
        Box::new(move |keep| {
            let clamp = |v: i32| v.clamp(0, 255) as u8;
            for (i, o) in rgb.chunks_exact_mut(3).enumerate() {
                let c = 298 * (yr[i] as i32 - 16) + 128;
                let (d, e) = (ur[i] as i32 - 128, vr[i] as i32 - 128);
                o[0] = clamp((c + 409 * e) >> 8);
                o[1] = clamp((c - 100 * d - 208 * e) >> 8);
                o[2] = clamp((c + 516 * d) >> 8);
            }
            keep.then(|| Out::U8(rgb.clone()))
        }),
    ));

    // Two i16 tracks of n samples mixed (loud enough that some samples saturate).
    let track = |seed| -> Vec<i16> { keys(n, seed).iter().map(|&k| (k >> 16) as i16).collect() };
    let (ta, tb) = (track(84), track(85));
    let (ga, gb) = (24000i32, 19000i32);
    let (a, bb) = (ta.clone(), tb.clone());
    let mut mixed = vec![0i16; n];
    v.push(set_case(
        FOURTH,
        "mix16",
        range1(n),
        vec![b(0), b(1), b(2), Arg::scalar(ga), Arg::scalar(gb), u(n)],
        vec![Buffer::from_slice(&ta), Buffer::from_slice(&tb), Buffer::zeroed(Scalar::I16, n)],
        2,
        0.0,
        Some(3 * 2 * n),
        Box::new(move |keep| {
            for ((o, &x), &y) in mixed.iter_mut().zip(&a).zip(&bb) {
                let s = (x as i32 * ga + y as i32 * gb) >> 15;
                *o = s.clamp(-32768, 32767) as i16;
            }
            keep.then(|| Out::I16(mixed.clone()))
        }),
    ));

    // Decimal digit sums of n keys (some small, some 0).
    let dk: Vec<u32> = keys(n, 86).iter().map(|k| k >> (k % 29)).collect();
    let k = dk.clone();
    let mut ds = vec![0u32; n];
    v.push(set_case(
        FOURTH,
        "digitsum",
        range1(n),
        vec![b(0), b(1), u(n)],
        vec![u32_buf(&dk), Buffer::zeroed(Scalar::U32, n)],
        1,
        0.0,
        Some(2 * 4 * n),
        Box::new(move |keep| {
            for (o, &k) in ds.iter_mut().zip(&k) {
                let (mut v, mut s) = (k, 0u32);
                while v != 0 {
                    s += v % 10;
                    v /= 10;
                }
                *o = s;
            }
            keep.then(|| Out::U32(ds.clone()))
        }),
    ));

    // A packed lower-triangular tm x tm matrix (about 2^log2n elements) times a vector.
    let tm = ((2 * big) as f64).sqrt() as usize - 37;
    let packed = tm * (tm + 1) / 2;
    let (tl, tx) = (data(packed, 87, -1.0, 2.0), data(tm, 88, -1.0, 2.0));
    let (l, x) = (tl.clone(), tx.clone());
    let mut ty = vec![0f32; tm];
    v.push(set_case(
        FOURTH,
        "trimv",
        range1(tm),
        vec![b(0), b(1), b(2), u(tm)],
        vec![f32_buf(&tl), f32_buf(&tx), Buffer::zeroed(Scalar::F32, tm)],
        2,
        0.0,
        Some(4 * packed),
        Box::new(move |keep| {
            for (i, o) in ty.iter_mut().enumerate() {
                let base = i * (i + 1) / 2;
                let mut acc = 0f32;
                for j in 0..i {
                    acc += l[base + j] * x[j];
                }
                *o = acc + l[base + i] * x[i];
            }
            keep.then(|| Out::F32(ty.clone()))
        }),
    ));

    // One bitonic step (pairs 32 apart, direction flipping every 4096) of n keys.
    let (bj, bk) = (32usize, 4096usize);
    let bsrc = keys(n, 89);
    let s = bsrc.clone();
    let mut bdst = vec![0u32; n];
    v.push(set_case(
        FOURTH,
        "bitonic",
        range1(n),
        vec![b(0), b(1), u(bj), u(bk), u(n)],
        vec![u32_buf(&bsrc), Buffer::zeroed(Scalar::U32, n)],
        1,
        0.0,
        Some(2 * 4 * n),
        Box::new(move |keep| {
            for i in 0..n {
                let p = i ^ bj;
                if p > i && p < n {
                    let (x, y) = (s[i], s[p]);
                    if (x > y) == (i & bk == 0) {
                        bdst[i] = y;
                        bdst[p] = x;
                    } else {
                        bdst[i] = x;
                        bdst[p] = y;
                    }
                }
            }
            keep.then(|| Out::U32(bdst.clone()))
        }),
    ));

    // A scatter of n values through a random permutation.
    let mut perm: Vec<u32> = (0..n as u32).collect();
    let mut r = 0x2545_f491u32;
    for i in (1..n).rev() {
        r ^= r << 13;
        r ^= r >> 17;
        r ^= r << 5;
        perm.swap(i, r as usize % (i + 1));
    }
    let sx = data(n, 90, -5.0, 10.0);
    let sc = 1.5f32;
    let (x, pm) = (sx.clone(), perm.clone());
    let mut so = vec![0f32; n];
    v.push(set_case(
        FOURTH,
        "scatter",
        range1(n),
        vec![b(0), b(1), b(2), Arg::scalar(sc), u(n)],
        vec![f32_buf(&sx), u32_buf(&perm), Buffer::zeroed(Scalar::F32, n)],
        2,
        0.0,
        Some(3 * 4 * n),
        Box::new(move |keep| {
            for (&x, &p) in x.iter().zip(&pm) {
                so[p as usize] = sc * x;
            }
            keep.then(|| Out::F32(so.clone()))
        }),
    ));

    // mn 4x4 matrices, each times one shared matrix.
    let mn = big / 16 - 37;
    let (ma, mb) = (data(16 * mn, 91, -1.0, 2.0), data(16, 92, -1.0, 2.0));
    let (a, bm) = (ma.clone(), mb.clone());
    let mut mc = vec![0f32; 16 * mn];
    v.push(set_case(
        FOURTH,
        "mat4",
        range1(mn),
        vec![b(0), b(1), b(2), u(mn)],
        vec![f32_buf(&ma), f32_buf(&mb), Buffer::zeroed(Scalar::F32, 16 * mn)],
        2,
        0.0,
        Some(2 * 4 * 16 * mn),
        Box::new(move |keep| {
            for (o, m) in mc.chunks_exact_mut(16).zip(a.chunks_exact(16)) {
                for r in 0..4 {
                    for col in 0..4 {
                        let mut acc = 0f32;
                        for e in 0..4 {
                            acc += m[4 * r + e] * bm[4 * e + col];
                        }
                        o[4 * r + col] = acc;
                    }
                }
            }
            keep.then(|| Out::F32(mc.clone()))
        }),
    ));
    v
}
