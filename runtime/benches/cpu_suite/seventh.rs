//! The seventh set of the cpu suite (`cpu_suite_seventh.kir`,
//! `KILN_CPU_SUITE_SET=seventh|all`): kernels written after the first six sets, the way users
//! write them (guards, ranges rounded up, odd sizes, 2-D and 3-D launches), none of a kind
//! those sets have: the first position of a byte in fixed-length text records (an early-exit
//! `while`), the smallest Hamming distance of u64 fingerprints to a few queries (SWAR bit
//! counts), a top-down breadth-first search step over a CSR graph by global `atomic_min`,
//! exponentially weighted moving averages of f64 series (time-major, a loop-carried average),
//! a 7-point heat stencil over a 3-D range, point in polygon by the crossing number (a bool
//! flipped per crossed edge), block min-max normalization by a tree in local memory with a
//! barrier per level, ROT13 of ASCII text by u8 arithmetic and `%`, cartesian to polar
//! coordinates (`sqrt`, a polynomial arctangent folded by selects), a trimmed mean of a
//! sliding window insertion-sorted in a private array, modular exponentiation by squaring in
//! u64, and packing of RGB planes into 16-bit RGB565 pixels. Each is checked against its plain
//! Rust loop bit for bit.

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

use super::{data, f32_buf, keys, log2n, round_up, set_case, u32_buf, Case, Out};

const SEVENTH: &str = include_str!("../cpu_suite_seventh.kir");

/// The seventh set's cases, sized by `KILN_CPU_SUITE_LOG2N` as the first set is.
// (The references spell clamps and range tests as the kernels do.)
#[allow(clippy::manual_clamp, clippy::manual_range_contains)]
pub(crate) fn cases() -> Vec<Case> {
    let big = 1usize << log2n();
    let n = big - 37;
    let range1 = |n: usize| NdRange::new(&[round_up(n, 256)]).with_local(&[256]);
    let b = |i: usize| Arg::Buffer(i);
    let u = |v: usize| Arg::scalar(v as u32);
    let mut v = Vec::new();

    // sn records of 64 lower-case letters, searched for 'q' (absent from about a fifth).
    let (len, sn, c) = (64usize, big / 64 - 37, b'q');
    let text: Vec<u8> = keys(sn * len, 161).iter().map(|k| b'a' + (k >> 9) as u8 % 26).collect();
    let t = text.clone();
    let mut pos = vec![0u32; sn];
    v.push(set_case(
        SEVENTH,
        "strfind",
        range1(sn),
        vec![b(0), b(1), Arg::scalar(c), u(len), u(sn)],
        vec![Buffer::from_slice(&text), Buffer::zeroed(Scalar::U32, sn)],
        1,
        0.0,
        None,
        Box::new(move |keep| {
            for (p, rec) in pos.iter_mut().zip(t.chunks(len)) {
                *p = rec.iter().position(|&x| x == c).unwrap_or(len) as u32;
            }
            keep.then(|| Out::U32(pos.clone()))
        }),
    ));

    // hn fingerprints against 8 queries.
    let (hn, hm) = (big / 4 - 37, 8usize);
    let u64s = |n: usize, seed: u32| -> Vec<u64> {
        let (lo, hi) = (keys(n, seed), keys(n, seed + 1));
        lo.iter().zip(&hi).map(|(&l, &h)| (h.rotate_left(13) as u64) << 32 | l as u64).collect()
    };
    let (fp, qs) = (u64s(hn, 162), u64s(hm, 164));
    let (f, q) = (fp.clone(), qs.clone());
    let mut dist = vec![0u32; hn];
    v.push(set_case(
        SEVENTH,
        "hamming",
        range1(hn),
        vec![b(0), b(1), b(2), u(hm), u(hn)],
        vec![Buffer::from_slice(&fp), Buffer::from_slice(&qs), Buffer::zeroed(Scalar::U32, hn)],
        2,
        0.0,
        Some(12 * hn),
        Box::new(move |keep| {
            for (d, &x) in dist.iter_mut().zip(&f) {
                *d = q.iter().map(|&y| (x ^ y).count_ones()).min().unwrap_or(64);
            }
            keep.then(|| Out::U32(dist.clone()))
        }),
    ));

    // A graph of gn vertices of 0 to 8 neighbours each, levels 0 to 3 or unvisited, step 2.
    // (Offering a level twice changes nothing, so neither side resets `next` between runs.)
    let (gn, cur, unvisited) = (big / 4 - 37, 2u32, u32::MAX);
    let gk = keys(gn, 165);
    let mut rowptr = vec![0u32];
    let mut col = Vec::new();
    for (vtx, &k) in gk.iter().enumerate() {
        for e in 0..(k >> 5) % 9 {
            col.push(((vtx as u64 * 7 + e as u64 * 40503 + (k >> 11) as u64) % gn as u64) as u32);
        }
        rowptr.push(col.len() as u32);
    }
    let level: Vec<u32> = keys(gn, 166)
        .iter()
        .map(|k| if (k >> 7) % 5 == 4 { unvisited } else { (k >> 7) % 5 })
        .collect();
    let (rp, cl, lv) = (rowptr.clone(), col.clone(), level.clone());
    let mut next = level.clone();
    v.push(set_case(
        SEVENTH,
        "bfs",
        range1(gn),
        vec![b(0), b(1), b(2), b(3), Arg::scalar(cur), u(gn)],
        vec![u32_buf(&rowptr), u32_buf(&col), u32_buf(&level), u32_buf(&level)],
        3,
        0.0,
        None,
        Box::new(move |keep| {
            for vtx in 0..gn {
                if lv[vtx] == cur {
                    for &w in &cl[rp[vtx] as usize..rp[vtx + 1] as usize] {
                        if lv[w as usize] == unvisited {
                            next[w as usize] = next[w as usize].min(cur + 1);
                        }
                    }
                }
            }
            keep.then(|| Out::U32(next.clone()))
        }),
    ));

    // em series of 48 steps, time-major.
    let (steps, em, alpha) = (48usize, big / 128 - 37, 0.125f64);
    let ex: Vec<f64> = data(steps * em, 167, 50.0, 100.0).iter().map(|&p| p as f64).collect();
    let x = ex.clone();
    let mut ey = vec![0f64; steps * em];
    v.push(set_case(
        SEVENTH,
        "ewma",
        range1(em),
        vec![b(0), b(1), Arg::scalar(alpha), u(steps), u(em)],
        vec![Buffer::from_slice(&ex), Buffer::zeroed(Scalar::F64, steps * em)],
        1,
        0.0,
        Some(2 * 8 * steps * em),
        Box::new(move |keep| {
            ey[..em].copy_from_slice(&x[..em]);
            for t in 1..steps {
                let (done, row) = ey.split_at_mut(t * em);
                let prev = &done[(t - 1) * em..];
                for i in 0..em {
                    row[i] = prev[i] + alpha * (x[t * em + i] - prev[i]);
                }
            }
            keep.then(|| Out::F64(ey.clone()))
        }),
    ));

    // An nx x ny x nz grid (all odd).
    let side = 1usize << log2n().div_ceil(3);
    let (nx, ny) = (side - 13, side - 7);
    let nz = big / (side * side) - 3;
    let cells = nx * ny * nz;
    let kh = 0.125f32;
    let hu = data(cells, 168, 0.0, 100.0);
    let uu = hu.clone();
    let mut hv = vec![0f32; cells];
    v.push(set_case(
        SEVENTH,
        "heat3d",
        NdRange::new(&[round_up(nx, 32), round_up(ny, 4), round_up(nz, 2)]).with_local(&[32, 4, 2]),
        vec![b(0), b(1), Arg::scalar(kh), u(nx), u(ny), u(nz)],
        vec![f32_buf(&hu), Buffer::zeroed(Scalar::F32, cells)],
        1,
        0.0,
        Some(2 * 4 * cells),
        Box::new(move |keep| {
            let p = nx * ny;
            for z in 0..nz {
                for y in 0..ny {
                    for x in 0..nx {
                        let c = (z * ny + y) * nx + x;
                        if x == 0 || y == 0 || z == 0 || x == nx - 1 || y == ny - 1 || z == nz - 1 {
                            hv[c] = uu[c];
                            continue;
                        }
                        let s =
                            uu[c - 1] + uu[c + 1] + uu[c - nx] + uu[c + nx] + uu[c - p] + uu[c + p];
                        hv[c] = uu[c] + kh * (s - 6.0 * uu[c]);
                    }
                }
            }
            keep.then(|| Out::F32(hv.clone()))
        }),
    ));

    // pn points in [-1.2, 1.2)^2 against a 13-pointed star.
    let (pn, pm) = (big / 4 - 37, 13usize);
    let (ppx, ppy) = (data(pn, 169, -1.2, 2.4), data(pn, 170, -1.2, 2.4));
    let (svx, svy): (Vec<f32>, Vec<f32>) = (0..pm)
        .map(|k| {
            let a = k as f32 * std::f32::consts::TAU / pm as f32;
            let rad = if k % 2 == 0 { 1.0 } else { 0.45 };
            (rad * a.cos(), rad * a.sin())
        })
        .unzip();
    let (qx, qy, wx, wy) = (ppx.clone(), ppy.clone(), svx.clone(), svy.clone());
    let mut inside = vec![0u8; pn];
    v.push(set_case(
        SEVENTH,
        "pip",
        range1(pn),
        vec![b(0), b(1), b(2), b(3), b(4), u(pm), u(pn)],
        vec![
            f32_buf(&ppx),
            f32_buf(&ppy),
            f32_buf(&svx),
            f32_buf(&svy),
            Buffer::zeroed(Scalar::U8, pn),
        ],
        4,
        0.0,
        None,
        Box::new(move |keep| {
            for (o, (&x, &y)) in inside.iter_mut().zip(qx.iter().zip(&qy)) {
                let mut c = false;
                let mut j = pm - 1;
                for k in 0..pm {
                    let (xi, yi, xj, yj) = (wx[k], wy[k], wx[j], wy[j]);
                    if (yi > y) != (yj > y) && x < (xj - xi) * (y - yi) / (yj - yi) + xi {
                        c = !c;
                    }
                    j = k;
                }
                *o = c as u8;
            }
            keep.then(|| Out::U8(inside.clone()))
        }),
    ));

    // n values normalized by blocks of 256 (the last one partial).
    let bx = data(n, 171, -40.0, 90.0);
    let xb = bx.clone();
    let mut by = vec![0f32; n];
    v.push(set_case(
        SEVENTH,
        "blocknorm",
        range1(n),
        vec![b(0), b(1), u(n)],
        vec![f32_buf(&bx), Buffer::zeroed(Scalar::F32, n)],
        1,
        0.0,
        Some(2 * 4 * n),
        Box::new(move |keep| {
            for (xs, ys) in xb.chunks(256).zip(by.chunks_mut(256)) {
                let lo = xs.iter().fold(f32::INFINITY, |a, &b| a.min(b));
                let hi = xs.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
                for (y, &x) in ys.iter_mut().zip(xs) {
                    *y = (x - lo) / (hi - lo);
                }
            }
            keep.then(|| Out::F32(by.clone()))
        }),
    ));

    // n bytes of printable ASCII.
    let rt: Vec<u8> = keys(n, 172).iter().map(|k| 32 + (k >> 8) as u8 % 95).collect();
    let src = rt.clone();
    let mut rot = vec![0u8; n];
    v.push(set_case(
        SEVENTH,
        "rot13",
        range1(n),
        vec![b(0), b(1), u(n)],
        vec![Buffer::from_slice(&rt), Buffer::zeroed(Scalar::U8, n)],
        1,
        0.0,
        Some(2 * n),
        Box::new(move |keep| {
            for (o, &c) in rot.iter_mut().zip(&src) {
                *o = match c {
                    b'a'..=b'z' => (c - b'a' + 13) % 26 + b'a',
                    b'A'..=b'Z' => (c - b'A' + 13) % 26 + b'A',
                    _ => c,
                };
            }
            keep.then(|| Out::U8(rot.clone()))
        }),
    ));

    // n points in [-2, 2)^2 to polar coordinates (the result checked is the angle; the radius
    // is a `sqrt`, exact on both sides).
    let (cx, cy) = (data(n, 173, -2.0, 4.0), data(n, 174, -2.0, 4.0));
    let (xs, ys) = (cx.clone(), cy.clone());
    let (mut rad, mut theta) = (vec![0f32; n], vec![0f32; n]);
    v.push(set_case(
        SEVENTH,
        "polar",
        range1(n),
        vec![b(0), b(1), b(2), b(3), u(n)],
        vec![
            f32_buf(&cx),
            f32_buf(&cy),
            Buffer::zeroed(Scalar::F32, n),
            Buffer::zeroed(Scalar::F32, n),
        ],
        3,
        0.0,
        Some(4 * 4 * n),
        Box::new(move |keep| {
            for i in 0..n {
                let (x, y) = (xs[i], ys[i]);
                let (ax, ay) = (x.abs(), y.abs());
                let a = ax.min(ay) / ax.max(ay).max(1e-30);
                let s = a * a;
                let mut t = ((-0.046496473 * s + 0.15931422) * s - 0.32762277) * s * a + a;
                if ay > ax {
                    t = std::f32::consts::FRAC_PI_2 - t;
                }
                if x < 0.0 {
                    t = std::f32::consts::PI - t;
                }
                theta[i] = if y < 0.0 { -t } else { t };
                rad[i] = (x * x + y * y).sqrt();
            }
            keep.then(|| Out::F32(theta.clone()))
        }),
    ));

    // Trimmed means of wn windows of 8.
    let wn = big / 4 - 37;
    let sx = data(wn, 175, -10.0, 20.0);
    let xw = sx.clone();
    let mut sy = vec![0f32; wn];
    v.push(set_case(
        SEVENTH,
        "sort8",
        range1(wn),
        vec![b(0), b(1), u(wn)],
        vec![f32_buf(&sx), Buffer::zeroed(Scalar::F32, wn)],
        1,
        0.0,
        Some(2 * 4 * wn),
        Box::new(move |keep| {
            for (i, o) in sy.iter_mut().enumerate() {
                let mut w = [0f32; 8];
                for (k, s) in w.iter_mut().enumerate() {
                    *s = xw[(i + k).min(wn - 1)];
                }
                for k in 1..8 {
                    let v = w[k];
                    let mut j = k;
                    while j > 0 && w[j - 1] > v {
                        w[j] = w[j - 1];
                        j -= 1;
                    }
                    w[j] = v;
                }
                *o = (w[2] + w[3] + w[4] + w[5]) * 0.25;
            }
            keep.then(|| Out::F32(sy.clone()))
        }),
    ));

    // mn powers modulo 10^9 + 7, exponents of 8 to 31 bits.
    let (mn, md) = (big / 16 - 37, 1_000_000_007u32);
    let mb = keys(mn, 176);
    let me: Vec<u32> = keys(mn, 177).iter().map(|&k| k >> (k % 24)).collect();
    let (bs, es) = (mb.clone(), me.clone());
    let mut pw = vec![0u32; mn];
    v.push(set_case(
        SEVENTH,
        "modpow",
        range1(mn),
        vec![b(0), b(1), b(2), u(md as usize), u(mn)],
        vec![u32_buf(&mb), u32_buf(&me), Buffer::zeroed(Scalar::U32, mn)],
        2,
        0.0,
        None,
        Box::new(move |keep| {
            let m = md as u64;
            for (o, (&base, &e)) in pw.iter_mut().zip(bs.iter().zip(&es)) {
                let (mut b, mut e, mut r) = (base as u64 % m, e, 1u64);
                while e > 0 {
                    if e & 1 == 1 {
                        r = r * b % m;
                    }
                    b = b * b % m;
                    e >>= 1;
                }
                *o = r as u32;
            }
            keep.then(|| Out::U32(pw.clone()))
        }),
    ));

    // n pixels in [-0.1, 1.1)^3 to RGB565.
    let (pr, pg, pb) = (data(n, 178, -0.1, 1.2), data(n, 179, -0.1, 1.2), data(n, 180, -0.1, 1.2));
    let (r, g, bl) = (pr.clone(), pg.clone(), pb.clone());
    let mut px = vec![0u16; n];
    v.push(set_case(
        SEVENTH,
        "rgb565",
        range1(n),
        vec![b(0), b(1), b(2), b(3), u(n)],
        vec![f32_buf(&pr), f32_buf(&pg), f32_buf(&pb), Buffer::zeroed(Scalar::U16, n)],
        3,
        0.0,
        Some(14 * n),
        Box::new(move |keep| {
            for i in 0..n {
                let q = |x: f32, top: f32| (x.max(0.0).min(1.0) * top + 0.5) as u32;
                let (r5, g6, b5) = (q(r[i], 31.0), q(g[i], 63.0), q(bl[i], 31.0));
                px[i] = (r5 << 11 | g6 << 5 | b5) as u16;
            }
            keep.then(|| Out::U16(px.clone()))
        }),
    ));
    v
}
