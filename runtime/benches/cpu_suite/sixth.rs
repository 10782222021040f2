//! The sixth set of the cpu suite (`cpu_suite_sixth.kir`, `KILN_CPU_SUITE_SET=sixth|all`):
//! kernels written after the first five sets, the way users write them (guards, ranges
//! rounded up, odd sizes, 2-D launches), none of a kind those sets have: run-length decoding
//! by a binary search of the run starts (a `while` whose loads depend on the previous trip), a
//! smoothstep colour ramp into three planes, a 3x3 median of 8-bit pixels by a min/max network
//! with a copied border, 64-bit FNV-1a hashes of variable-length records (a byte loop bounded
//! by an offset table), tridiagonal solves in f64 by the Thomas algorithm (loop-carried
//! divisions, a backward loop), sparse dot products of sorted column lists merged by a
//! `while`, a particle step on a struct of arrays in place with selects, a scaled transpose
//! through a 16 x 17 tile of local memory with a barrier, ordered (Bayer) dithering to u8 by
//! `floor`, piecewise-linear table lookup (`floor`, an f32 to i32 cast, clamped indices), a
//! bitmap built by global `atomic_or`, and Q16.16 fixed-point products saturated through i64.
//! Each is checked against its plain Rust loop bit for bit.

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

use super::{data, f32_buf, keys, log2n, round_up, set_case, u32_buf, Case, Out};

const SIXTH: &str = include_str!("../cpu_suite_sixth.kir");

/// Prefix sums of `lens` from 0: `lens.len() + 1` offsets.
fn offsets(lens: impl Iterator<Item = usize>) -> Vec<u32> {
    let mut offs = vec![0u32];
    for l in lens {
        offs.push(offs[offs.len() - 1] + l as u32);
    }
    offs
}

/// `rows` sorted lists of distinct columns below 68 (0 to 16 of them), as CSR offsets and
/// columns.
fn sparse_rows(rows: usize, seed: u32) -> (Vec<u32>, Vec<u32>) {
    let k = keys(rows, seed);
    let mut cols = Vec::new();
    let mut ptr = vec![0u32];
    for &key in &k {
        let (nnz, mut c, mut s) = (key % 17, key >> 5 & 3, key >> 7);
        for _ in 0..nnz {
            cols.push(c);
            c += 1 + s % 4;
            s /= 4;
            if s == 0 {
                s = key >> 11 | 1;
            }
        }
        ptr.push(cols.len() as u32);
    }
    (ptr, cols)
}

/// The sixth set's cases, sized by `KILN_CPU_SUITE_LOG2N` as the first set is.
// (The references spell clamps and range tests as the kernels do.)
#[allow(clippy::manual_clamp, clippy::manual_range_contains)]
pub(crate) fn cases() -> Vec<Case> {
    let big = 1usize << log2n();
    let n = big - 37;
    let range1 = |n: usize| NdRange::new(&[round_up(n, 256)]).with_local(&[256]);
    let b = |i: usize| Arg::Buffer(i);
    let u = |v: usize| Arg::scalar(v as u32);
    let mut v = Vec::new();

    // rn outputs decoded from runs of 1 to 15 elements.
    let rn = big / 4 - 37;
    let mut starts = vec![0u32];
    for k in keys(rn, 131) {
        let next = starts[starts.len() - 1] + k % 15 + 1;
        if next as usize >= rn {
            break;
        }
        starts.push(next);
    }
    let runs = starts.len();
    let rv = data(runs, 132, -3.0, 6.0);
    let (st, vals) = (starts.clone(), rv.clone());
    let mut dec = vec![0f32; rn];
    v.push(set_case(
        SIXTH,
        "rledecode",
        range1(rn),
        vec![b(0), b(1), b(2), u(runs), u(rn)],
        vec![u32_buf(&starts), f32_buf(&rv), Buffer::zeroed(Scalar::F32, rn)],
        2,
        0.0,
        None,
        Box::new(move |keep| {
            for (i, o) in dec.iter_mut().enumerate() {
                let (mut lo, mut hi) = (0usize, runs);
                while hi - lo > 1 {
                    let mid = (lo + hi) / 2;
                    if st[mid] as usize <= i {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                *o = vals[lo];
            }
            keep.then(|| Out::F32(dec.clone()))
        }),
    ));

    // A colour ramp of n values in [-0.2, 1.2) between the edges 0.2 and 0.7.
    let (e0, e1) = (0.2f32, 0.7f32);
    let rx = data(n, 133, -0.2, 1.4);
    let x = rx.clone();
    let mut rgb = vec![0f32; 3 * n];
    v.push(set_case(
        SIXTH,
        "ramp",
        range1(n),
        vec![b(0), b(1), Arg::scalar(e0), Arg::scalar(e1), u(n)],
        vec![f32_buf(&rx), Buffer::zeroed(Scalar::F32, 3 * n)],
        1,
        0.0,
        Some(4 * 4 * n),
        Box::new(move |keep| {
            let (r, rest) = rgb.split_at_mut(n);
            let (g, bl) = rest.split_at_mut(n);
            for i in 0..n {
                let t = ((x[i] - e0) / (e1 - e0)).max(0.0).min(1.0);
                let s = t * t * (3.0 - 2.0 * t);
                r[i] = 0.1 + s * (0.9 - 0.1);
                g[i] = 0.2 + s * (0.5 - 0.2);
                bl[i] = 0.8 + s * (0.3 - 0.8);
            }
            keep.then(|| Out::F32(rgb.clone()))
        }),
    ));

    // The 3x3 median of a w x h 8-bit image (both odd).
    let w = (1usize << log2n().div_ceil(2)) - 13;
    let h = big / (w + 13) - 7;
    let px: Vec<u8> = keys(w * h, 134).iter().map(|k| (k >> 12) as u8).collect();
    let src = px.clone();
    let mut med = vec![0u8; w * h];
    v.push(set_case(
        SIXTH,
        "median3",
        NdRange::new(&[round_up(w, 32), round_up(h, 8)]).with_local(&[32, 8]),
        vec![b(0), b(1), u(w), u(h)],
        vec![Buffer::from_slice(&px), Buffer::zeroed(Scalar::U8, w * h)],
        1,
        0.0,
        Some(2 * w * h),
        Box::new(move |keep| {
            let med3 = |a: u8, b: u8, c: u8| a.min(b).max(a.max(b).min(c));
            for y in 0..h {
                for x in 0..w {
                    let c = y * w + x;
                    if x == 0 || y == 0 || x == w - 1 || y == h - 1 {
                        med[c] = src[c];
                        continue;
                    }
                    let row = |r: usize| {
                        let (a, b, c) = (src[r - 1], src[r], src[r + 1]);
                        (a.min(b).min(c), med3(a, b, c), a.max(b).max(c))
                    };
                    let (alo, amd, ahi) = row(c - w);
                    let (blo, bmd, bhi) = row(c);
                    let (clo, cmd, chi) = row(c + w);
                    let lo = alo.max(blo).max(clo);
                    let hi = ahi.min(bhi).min(chi);
                    med[c] = med3(lo, med3(amd, bmd, cmd), hi);
                }
            }
            keep.then(|| Out::U8(med.clone()))
        }),
    ));

    // FNV-1a of fnn records of 4 to 36 bytes.
    let fnn = big / 16 - 37;
    let offs = offsets(keys(fnn, 135).iter().map(|k| (k >> 3) as usize % 33 + 4));
    let total = offs[fnn] as usize;
    let bytes: Vec<u8> = keys(total, 136).iter().map(|k| (k >> 10) as u8).collect();
    let (of, by) = (offs.clone(), bytes.clone());
    let mut hashes = vec![0u64; fnn];
    v.push(set_case(
        SIXTH,
        "fnv64",
        range1(fnn),
        vec![b(0), b(1), b(2), u(fnn)],
        vec![Buffer::from_slice(&bytes), u32_buf(&offs), Buffer::zeroed(Scalar::U64, fnn)],
        2,
        0.0,
        None,
        Box::new(move |keep| {
            for (i, o) in hashes.iter_mut().enumerate() {
                let mut h = 0xcbf2_9ce4_8422_2325u64;
                for &x in &by[of[i] as usize..of[i + 1] as usize] {
                    h = (h ^ x as u64).wrapping_mul(0x100_0000_01b3);
                }
                *o = h;
            }
            keep.then(|| Out::U64(hashes.clone()))
        }),
    ));

    // tn diagonally dominant tridiagonal systems of 32 unknowns.
    let (m, tn) = (32usize, big / 128 - 37);
    let f64s = |seed, lo, span| -> Vec<f64> {
        data(m * tn, seed, lo, span).iter().map(|&x| x as f64).collect()
    };
    let (ta, tb, tc, td) =
        (f64s(137, -1.0, 2.0), f64s(138, 4.0, 2.0), f64s(139, -1.0, 2.0), f64s(140, -5.0, 10.0));
    let (a, bb, c, d) = (ta.clone(), tb.clone(), tc.clone(), td.clone());
    let (mut cw, mut xs) = (vec![0f64; m * tn], vec![0f64; m * tn]);
    v.push(set_case(
        SIXTH,
        "thomas",
        range1(tn),
        vec![b(0), b(1), b(2), b(3), b(4), b(5), u(m), u(tn)],
        vec![
            Buffer::from_slice(&ta),
            Buffer::from_slice(&tb),
            Buffer::from_slice(&tc),
            Buffer::from_slice(&td),
            Buffer::zeroed(Scalar::F64, m * tn),
            Buffer::zeroed(Scalar::F64, m * tn),
        ],
        5,
        0.0,
        None,
        Box::new(move |keep| {
            for s in 0..tn {
                let base = s * m;
                let (mut cp, mut dp) = (c[base] / bb[base], d[base] / bb[base]);
                cw[base] = cp;
                xs[base] = dp;
                for j in base + 1..base + m {
                    let den = bb[j] - a[j] * cp;
                    cp = c[j] / den;
                    dp = (d[j] - a[j] * dp) / den;
                    cw[j] = cp;
                    xs[j] = dp;
                }
                let mut xv = dp;
                for j in (base..base + m - 1).rev() {
                    xv = xs[j] - cw[j] * xv;
                    xs[j] = xv;
                }
            }
            keep.then(|| Out::F64(xs.clone()))
        }),
    ));

    // sn sparse rows of A and B, up to 16 columns each below 68.
    let sn = big / 16 - 37;
    let ((sap, sai), (sbp, sbi)) = (sparse_rows(sn, 141), sparse_rows(sn, 142));
    let (sav, sbv) = (data(sai.len(), 143, -1.0, 2.0), data(sbi.len(), 144, -1.0, 2.0));
    let (ap, ai, av) = (sap.clone(), sai.clone(), sav.clone());
    let (bp, bi, bv) = (sbp.clone(), sbi.clone(), sbv.clone());
    let mut dots = vec![0f32; sn];
    v.push(set_case(
        SIXTH,
        "sparsedot",
        range1(sn),
        vec![b(0), b(1), b(2), b(3), b(4), b(5), b(6), u(sn)],
        vec![
            u32_buf(&sap),
            u32_buf(&sai),
            f32_buf(&sav),
            u32_buf(&sbp),
            u32_buf(&sbi),
            f32_buf(&sbv),
            Buffer::zeroed(Scalar::F32, sn),
        ],
        6,
        0.0,
        None,
        Box::new(move |keep| {
            for (r, o) in dots.iter_mut().enumerate() {
                let (mut p, pe) = (ap[r] as usize, ap[r + 1] as usize);
                let (mut q, qe) = (bp[r] as usize, bp[r + 1] as usize);
                let mut acc = 0f32;
                while p < pe && q < qe {
                    let (ia, ib) = (ai[p], bi[q]);
                    if ia == ib {
                        acc += av[p] * bv[q];
                        p += 1;
                        q += 1;
                    } else if ia < ib {
                        p += 1;
                    } else {
                        q += 1;
                    }
                }
                *o = acc;
            }
            keep.then(|| Out::F32(dots.clone()))
        }),
    ));

    // One step of n particles (the reference steps its own copy, as the kernel does).
    let dt = 0.01f32;
    let mut state = data(n, 145, 0.0, 1.0);
    state.extend(data(n, 146, 0.0, 1.0));
    state.extend(data(2 * n, 147, -2.0, 4.0));
    let mut ps = state.clone();
    v.push(set_case(
        SIXTH,
        "particles",
        range1(n),
        vec![b(0), Arg::scalar(dt), u(n)],
        vec![f32_buf(&state)],
        0,
        0.0,
        Some(2 * 4 * 4 * n),
        Box::new(move |keep| {
            let (pos, vel) = ps.split_at_mut(2 * n);
            let (px, py) = pos.split_at_mut(n);
            let (vx, vy) = vel.split_at_mut(n);
            let mirror = |x: f32| {
                if x < 0.0 {
                    -x
                } else if x > 1.0 {
                    2.0 - x
                } else {
                    x
                }
            };
            for i in 0..n {
                let (ux, uy) = (vx[i], vy[i] - 9.81 * dt);
                let (x, y) = (px[i] + ux * dt, py[i] + uy * dt);
                px[i] = mirror(x);
                py[i] = mirror(y);
                vx[i] = if x < 0.0 || x > 1.0 { -0.9 * ux } else { ux };
                vy[i] = if y < 0.0 || y > 1.0 { -0.9 * uy } else { uy };
            }
            keep.then(|| Out::F32(ps.clone()))
        }),
    ));

    // The scaled transpose of the w x h image's f32 twin.
    let s = 1.5f32;
    let tsrc = data(w * h, 148, -5.0, 10.0);
    let ts = tsrc.clone();
    let mut tdst = vec![0f32; w * h];
    v.push(set_case(
        SIXTH,
        "tiletrans",
        NdRange::new(&[round_up(w, 16), round_up(h, 16)]).with_local(&[16, 16]),
        vec![b(0), b(1), Arg::scalar(s), u(w), u(h)],
        vec![f32_buf(&tsrc), Buffer::zeroed(Scalar::F32, w * h)],
        1,
        0.0,
        Some(2 * 4 * w * h),
        Box::new(move |keep| {
            for y in 0..h {
                for x in 0..w {
                    tdst[x * h + y] = ts[y * w + x] * s;
                }
            }
            keep.then(|| Out::F32(tdst.clone()))
        }),
    ));

    // Ordered dithering of a w x h grey image.
    let grey = data(w * h, 149, 0.0, 1.0);
    let bayer: Vec<f32> = [0, 8, 2, 10, 12, 4, 14, 6, 3, 11, 1, 9, 15, 7, 13, 5]
        .iter()
        .map(|&t| (t as f32 + 0.5) / 16.0)
        .collect();
    let (g, bay) = (grey.clone(), bayer.clone());
    let mut dith = vec![0u8; w * h];
    v.push(set_case(
        SIXTH,
        "dither",
        NdRange::new(&[round_up(w, 32), round_up(h, 8)]).with_local(&[32, 8]),
        vec![b(0), b(1), b(2), u(w), u(h)],
        vec![f32_buf(&grey), f32_buf(&bayer), Buffer::zeroed(Scalar::U8, w * h)],
        2,
        0.0,
        Some(5 * w * h),
        Box::new(move |keep| {
            for y in 0..h {
                for x in 0..w {
                    let t = g[y * w + x] * 15.0 + bay[(y & 3) * 4 + (x & 3)];
                    dith[y * w + x] = (t.floor().min(15.0) * 17.0) as u8;
                }
            }
            keep.then(|| Out::U8(dith.clone()))
        }),
    ));

    // n lookups in a 257-entry table over [-1, 1] (some points outside it).
    let (tm, x0, inv_dx) = (257usize, -1.0f32, 128.0f32);
    let (lx, lt) = (data(n, 150, -1.1, 2.2), data(tm, 151, -2.0, 4.0));
    let (x, table) = (lx.clone(), lt.clone());
    let mut ly = vec![0f32; n];
    v.push(set_case(
        SIXTH,
        "lut",
        range1(n),
        vec![b(0), b(1), b(2), Arg::scalar(x0), Arg::scalar(inv_dx), u(tm), u(n)],
        vec![f32_buf(&lx), f32_buf(&lt), Buffer::zeroed(Scalar::F32, n)],
        2,
        0.0,
        Some(2 * 4 * n),
        Box::new(move |keep| {
            for (o, &xi) in ly.iter_mut().zip(&x) {
                let t = (xi - x0) * inv_dx;
                let k = (t.floor() as i32).max(0).min(tm as i32 - 2);
                let f = t - k as f32;
                let (lo, hi) = (table[k as usize], table[k as usize + 1]);
                *o = lo + f * (hi - lo);
            }
            keep.then(|| Out::F32(ly.clone()))
        }),
    ));

    // A bitmap of 2^20 bits from n keys (setting a bit twice changes nothing, so neither side
    // clears it between runs).
    let nbits = 1usize << 20;
    let bk: Vec<u32> = keys(n, 152).iter().map(|k| (k >> 7) % nbits as u32).collect();
    let k2 = bk.clone();
    let mut bitmap = vec![0u32; nbits / 32];
    v.push(set_case(
        SIXTH,
        "bitset",
        range1(n),
        vec![b(0), b(1), u(n)],
        vec![u32_buf(&bk), Buffer::zeroed(Scalar::U32, nbits / 32)],
        1,
        0.0,
        None,
        Box::new(move |keep| {
            for &k in &k2 {
                bitmap[(k >> 5) as usize] |= 1 << (k & 31);
            }
            keep.then(|| Out::U32(bitmap.clone()))
        }),
    ));

    // n Q16.16 products, about a third of them saturated.
    let qa: Vec<i32> = keys(n, 153).iter().map(|&k| k as i32 >> 2).collect();
    let qb: Vec<i32> = keys(n, 154).iter().map(|&k| k as i32 >> 13).collect();
    let (a, bq) = (qa.clone(), qb.clone());
    let mut q = vec![0i32; n];
    v.push(set_case(
        SIXTH,
        "qmul",
        range1(n),
        vec![b(0), b(1), b(2), u(n)],
        vec![Buffer::from_slice(&qa), Buffer::from_slice(&qb), Buffer::zeroed(Scalar::I32, n)],
        2,
        0.0,
        Some(3 * 4 * n),
        Box::new(move |keep| {
            for i in 0..n {
                let p = (a[i] as i64 * bq[i] as i64 + 32768) >> 16;
                q[i] = p.clamp(i32::MIN as i64, i32::MAX as i64) as i32;
            }
            keep.then(|| Out::I32(q.clone()))
        }),
    ));
    v
}
