//! The fifth set of the cpu suite (`cpu_suite_fifth.kir`, `KILN_CPU_SUITE_SET=fifth|all`):
//! kernels written after the first four sets, the way users write them (guards, ranges
//! rounded up, odd sizes, 2-D launches), none of a kind those sets have: 8-bit alpha blending
//! in u16 arithmetic with a channel loop, CRC-32 by a 256-entry table (gathers whose index
//! depends on the previous step), ray-sphere hits (`sqrt` and a division under a
//! data-dependent `if`, a running minimum), 2x2 max pooling (2-D, loads at a stride of 2),
//! Conway's life on 8-bit cells wrapped by `%`, batch-norm inference whose parameters are
//! indexed by `global_id(1) % c`, cube roots by Newton's iteration until convergence (a
//! data-dependent `while`, `abs`), Monte-Carlo pi by xorshift32 with a local atomic count per
//! work-group, pairwise squared distances (2-D, a loop over the dimensions), a Floyd-Warshall
//! relaxation step in place (`min`, 2-D), softplus (`exp` and `log`) and an FIR filter with its
//! taps in a buffer. Each is checked against its plain Rust loop bit for bit, except softplus
//! (`exp`/`log`: relative error at most 1e-4).

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

use super::{data, f32_buf, keys, log2n, round_up, set_case, u32_buf, Case, Out};

const FIFTH: &str = include_str!("../cpu_suite_fifth.kir");

/// The fifth set's cases, sized by `KILN_CPU_SUITE_LOG2N` as the first set is.
pub(crate) fn cases() -> Vec<Case> {
    let big = 1usize << log2n();
    let n = big - 37;
    let range1 = |n: usize| NdRange::new(&[round_up(n, 256)]).with_local(&[256]);
    let b = |i: usize| Arg::Buffer(i);
    let u = |v: usize| Arg::scalar(v as u32);
    let mut v = Vec::new();

    // n RGBA pixels blended over n opaque ones.
    let px = |seed| -> Vec<u8> { keys(4 * n, seed).iter().map(|k| (k >> 9) as u8).collect() };
    let (bs, bd) = (px(101), px(102));
    let (s, d) = (bs.clone(), bd.clone());
    let mut bo = vec![0u8; 4 * n];
    v.push(set_case(
        FIFTH,
        "blend",
        range1(n),
        vec![b(0), b(1), b(2), u(n)],
        vec![Buffer::from_slice(&bs), Buffer::from_slice(&bd), Buffer::zeroed(Scalar::U8, 4 * n)],
        2,
        0.0,
        Some(3 * 4 * n),
        Box::new(move |keep| {
            for ((o, s), d) in bo.chunks_exact_mut(4).zip(s.chunks_exact(4)).zip(d.chunks_exact(4))
            {
                let a = s[3] as u16;
                for c in 0..3 {
                    let t = s[c] as u16 * a + d[c] as u16 * (255 - a) + 128;
                    o[c] = ((t + (t >> 8)) >> 8) as u8;
                }
                o[3] = 255;
            }
            keep.then(|| Out::U8(bo.clone()))
        }),
    ));

    // CRC-32 of cn records of 20 bytes.
    let (len, cn) = (20usize, big / 16 - 37);
    let table: Vec<u32> = (0..256u32)
        .map(|mut c| {
            for _ in 0..8 {
                c = if c & 1 != 0 { 0xedb8_8320 ^ (c >> 1) } else { c >> 1 };
            }
            c
        })
        .collect();
    let bytes: Vec<u8> = keys(len * cn, 103).iter().map(|k| (k >> 11) as u8).collect();
    let (t, by) = (table.clone(), bytes.clone());
    let mut crc = vec![0u32; cn];
    v.push(set_case(
        FIFTH,
        "crc32",
        range1(cn),
        vec![b(0), b(1), b(2), u(len), u(cn)],
        vec![Buffer::from_slice(&bytes), u32_buf(&table), Buffer::zeroed(Scalar::U32, cn)],
        2,
        0.0,
        None,
        Box::new(move |keep| {
            for (o, rec) in crc.iter_mut().zip(by.chunks_exact(len)) {
                let mut c = 0xffff_ffffu32;
                for &x in rec {
                    c = t[((c ^ x as u32) & 255) as usize] ^ c >> 8;
                }
                *o = !c;
            }
            keep.then(|| Out::U32(crc.clone()))
        }),
    ));

    // rn rays against 8 spheres (some rays miss them all).
    let rn = big / 4 - 37;
    let (rdx, rdy, rdz) =
        (data(rn, 104, -1.0, 2.0), data(rn, 105, -1.0, 2.0), data(rn, 106, 0.5, 1.0));
    let spheres: Vec<f32> = (0..8)
        .flat_map(|s| {
            let s = s as f32;
            [0.7 * s - 2.5, 1.5 - 0.4 * s, 4.0 + s, 0.3 + 0.15 * s]
        })
        .collect();
    let (x, y, z, sp) = (rdx.clone(), rdy.clone(), rdz.clone(), spheres.clone());
    let mut hits = vec![0f32; rn];
    v.push(set_case(
        FIFTH,
        "raysphere",
        range1(rn),
        vec![b(0), b(1), b(2), b(3), b(4), u(8), u(rn)],
        vec![
            f32_buf(&rdx),
            f32_buf(&rdy),
            f32_buf(&rdz),
            f32_buf(&spheres),
            Buffer::zeroed(Scalar::F32, rn),
        ],
        4,
        0.0,
        None,
        Box::new(move |keep| {
            for i in 0..hits.len() {
                let (x, y, z) = (x[i], y[i], z[i]);
                let a = x * x + y * y + z * z;
                let mut best = f32::INFINITY;
                for s in sp.chunks_exact(4) {
                    let b = x * s[0] + y * s[1] + z * s[2];
                    let c = s[0] * s[0] + s[1] * s[1] + s[2] * s[2] - s[3];
                    let disc = b * b - a * c;
                    if disc >= 0.0 {
                        let t = (b - disc.sqrt()) / a;
                        if t > 0.0 && t < best {
                            best = t;
                        }
                    }
                }
                hits[i] = best;
            }
            keep.then(|| Out::F32(hits.clone()))
        }),
    ));

    // 2x2 max pooling of a w x h image (both odd: the last column and row are dropped).
    let w = (1usize << log2n().div_ceil(2)) - 13;
    let h = big / (w + 13) - 7;
    let (ow, oh) = (w / 2, h / 2);
    let img = data(w * h, 107, -5.0, 10.0);
    let im = img.clone();
    let mut pooled = vec![0f32; ow * oh];
    v.push(set_case(
        FIFTH,
        "maxpool",
        NdRange::new(&[round_up(ow, 16), round_up(oh, 16)]).with_local(&[16, 16]),
        vec![b(0), b(1), u(w), u(ow), u(oh)],
        vec![f32_buf(&img), Buffer::zeroed(Scalar::F32, ow * oh)],
        1,
        0.0,
        Some(4 * (4 + 1) * ow * oh),
        Box::new(move |keep| {
            for y in 0..oh {
                for x in 0..ow {
                    let (r0, r1) = (2 * y * w + 2 * x, 2 * y * w + 2 * x + w);
                    pooled[y * ow + x] = im[r0].max(im[r0 + 1]).max(im[r1].max(im[r1 + 1]));
                }
            }
            keep.then(|| Out::F32(pooled.clone()))
        }),
    ));

    // One generation of life on the same w x h, about a third of the cells alive.
    let cells: Vec<u8> = keys(w * h, 108).iter().map(|k| u8::from((k >> 13) % 3 == 0)).collect();
    let ce = cells.clone();
    let mut next = vec![0u8; w * h];
    v.push(set_case(
        FIFTH,
        "life",
        NdRange::new(&[round_up(w, 32), round_up(h, 8)]).with_local(&[32, 8]),
        vec![b(0), b(1), u(w), u(h)],
        vec![Buffer::from_slice(&cells), Buffer::zeroed(Scalar::U8, w * h)],
        1,
        0.0,
        Some(2 * w * h),
        Box::new(move |keep| {
            for y in 0..h {
                let (yu, yc, yd) = ((y + h - 1) % h * w, y * w, (y + 1) % h * w);
                for x in 0..w {
                    let (xl, xr) = ((x + w - 1) % w, (x + 1) % w);
                    let cnt: u32 =
                        [yu + xl, yu + x, yu + xr, yc + xl, yc + xr, yd + xl, yd + x, yd + xr]
                            .iter()
                            .map(|&j| ce[j] as u32)
                            .sum();
                    let alive = ce[yc + x] != 0;
                    next[yc + x] = u8::from(cnt == 3 || alive && cnt == 2);
                }
            }
            keep.then(|| Out::U8(next.clone()))
        }),
    ));

    // Batch-norm of 3 images of 19 channels of hw values each.
    let (chans, planes) = (19usize, 57usize);
    let hw = big / 64 - 37;
    let bx = data(planes * hw, 109, -5.0, 10.0);
    let (bm, bv) = (data(chans, 110, -1.0, 2.0), data(chans, 111, 0.1, 2.0));
    let (bg, bb) = (data(chans, 112, 0.5, 1.0), data(chans, 113, -0.5, 1.0));
    let eps = 1e-5f32;
    let (x, mean, var, gamma, beta) = (bx.clone(), bm.clone(), bv.clone(), bg.clone(), bb.clone());
    let mut by = vec![0f32; planes * hw];
    v.push(set_case(
        FIFTH,
        "batchnorm",
        NdRange::new(&[round_up(hw, 256), planes as u32]).with_local(&[256, 1]),
        vec![b(0), b(1), b(2), b(3), b(4), b(5), u(hw), u(planes), u(chans), Arg::scalar(eps)],
        vec![
            f32_buf(&bx),
            Buffer::zeroed(Scalar::F32, planes * hw),
            f32_buf(&bm),
            f32_buf(&bv),
            f32_buf(&bg),
            f32_buf(&bb),
        ],
        1,
        0.0,
        Some(2 * 4 * planes * hw),
        Box::new(move |keep| {
            for q in 0..planes {
                let ch = q % chans;
                let s = gamma[ch] / (var[ch] + eps).sqrt();
                for p in q * hw..(q + 1) * hw {
                    by[p] = (x[p] - mean[ch]) * s + beta[ch];
                }
            }
            keep.then(|| Out::F32(by.clone()))
        }),
    ));

    // Cube roots of nn values in [1, 1000).
    let nn = big / 8 - 37;
    let na = data(nn, 114, 1.0, 999.0);
    let a = na.clone();
    let mut roots = vec![0f32; nn];
    v.push(set_case(
        FIFTH,
        "newton",
        range1(nn),
        vec![b(0), b(1), u(nn)],
        vec![f32_buf(&na), Buffer::zeroed(Scalar::F32, nn)],
        1,
        0.0,
        None,
        Box::new(move |keep| {
            for (o, &v) in roots.iter_mut().zip(&a) {
                let mut x = 1.0 + v / 3.0;
                let (mut d, mut it) = (x, 0u32);
                while d.abs() > 0.000001 * x && it < 40 {
                    d = (x - v / (x * x)) / 3.0;
                    x -= d;
                    it += 1;
                }
                *o = x;
            }
            keep.then(|| Out::F32(roots.clone()))
        }),
    ));

    // Monte-Carlo pi: mn work-items of 32 trials (two draws each).
    let (mn, trials) = (big / 16 - 37, 32usize);
    let seeds: Vec<u32> = keys(mn, 115).iter().map(|&k| k | 1).collect();
    let groups = mn.div_ceil(256);
    let sd = seeds.clone();
    let mut counts = vec![0u32; groups];
    v.push(set_case(
        FIFTH,
        "montecarlo",
        range1(mn),
        vec![b(0), b(1), u(trials), u(mn)],
        vec![u32_buf(&seeds), Buffer::zeroed(Scalar::U32, groups)],
        1,
        0.0,
        None,
        Box::new(move |keep| {
            let xorshift = |s: &mut u32| {
                *s ^= *s << 13;
                *s ^= *s >> 17;
                *s ^= *s << 5;
                (*s >> 8) as f32 / 16777216.0
            };
            for (g, o) in counts.iter_mut().enumerate() {
                let mut hits = 0u32;
                for &seed in &sd[g * 256..((g + 1) * 256).min(mn)] {
                    let mut s = seed;
                    for _ in 0..trials {
                        let x = xorshift(&mut s);
                        let y = xorshift(&mut s);
                        if x * x + y * y <= 1.0 {
                            hits += 1;
                        }
                    }
                }
                *o = hits;
            }
            keep.then(|| Out::U32(counts.clone()))
        }),
    ));

    // Squared distances between pm and pk points of 6 dimensions.
    let side = 1usize << (log2n() / 2);
    let (pm, pk, dims) = (side * 7 / 8 - 3, side - 5, 6usize);
    let (pp, pq) = (data(pm * dims, 116, -2.0, 4.0), data(pk * dims, 117, -2.0, 4.0));
    let (p, q) = (pp.clone(), pq.clone());
    let mut dist2 = vec![0f32; pm * pk];
    v.push(set_case(
        FIFTH,
        "pdist",
        NdRange::new(&[round_up(pk, 16), round_up(pm, 16)]).with_local(&[16, 16]),
        vec![b(0), b(1), b(2), u(pm), u(pk), u(dims)],
        vec![f32_buf(&pp), f32_buf(&pq), Buffer::zeroed(Scalar::F32, pm * pk)],
        2,
        0.0,
        Some(4 * pm * pk),
        Box::new(move |keep| {
            for i in 0..pm {
                for j in 0..pk {
                    let mut acc = 0f32;
                    for t in 0..dims {
                        let diff = p[i * dims + t] - q[j * dims + t];
                        acc += diff * diff;
                    }
                    dist2[i * pk + j] = acc;
                }
            }
            keep.then(|| Out::F32(dist2.clone()))
        }),
    ));

    // A Floyd-Warshall step through vertex fn / 3 of fn vertices (a zero diagonal).
    let fnv = side - 3;
    let via = fnv / 3;
    let mut fd = data(fnv * fnv, 118, 1.0, 99.0);
    for i in 0..fnv {
        fd[i * fnv + i] = 0.0;
    }
    let mut dm = fd.clone();
    v.push(set_case(
        FIFTH,
        "floyd",
        NdRange::new(&[round_up(fnv, 64), fnv as u32]).with_local(&[64, 1]),
        vec![b(0), u(via), u(fnv)],
        vec![f32_buf(&fd)],
        0,
        0.0,
        Some(2 * 4 * fnv * fnv),
        Box::new(move |keep| {
            // In place, as the kernel: row and column `via` stay as they are.
            for i in 0..fnv {
                let dik = dm[i * fnv + via];
                for j in 0..fnv {
                    let through = dik + dm[via * fnv + j];
                    dm[i * fnv + j] = dm[i * fnv + j].min(through);
                }
            }
            keep.then(|| Out::F32(dm.clone()))
        }),
    ));

    // Softplus of n values in [-4, 24) (the select's two sides both taken).
    let sx = data(n, 119, -4.0, 28.0);
    let x = sx.clone();
    let mut sy = vec![0f32; n];
    v.push(set_case(
        FIFTH,
        "softplus",
        range1(n),
        vec![b(0), b(1), u(n)],
        vec![f32_buf(&sx), Buffer::zeroed(Scalar::F32, n)],
        1,
        1e-4,
        Some(2 * 4 * n),
        Box::new(move |keep| {
            for (o, &v) in sy.iter_mut().zip(&x) {
                *o = if v > 20.0 { v } else { (1.0 + v.exp()).ln() };
            }
            keep.then(|| Out::F32(sy.clone()))
        }),
    ));

    // A 15-tap FIR filter over n outputs.
    let ntaps = 15usize;
    let (fx, ft) = (data(n + ntaps - 1, 120, -1.0, 2.0), data(ntaps, 121, -0.5, 1.0));
    let (x, taps) = (fx.clone(), ft.clone());
    let mut fy = vec![0f32; n];
    v.push(set_case(
        FIFTH,
        "fir",
        range1(n),
        vec![b(0), b(1), b(2), u(ntaps), u(n)],
        vec![f32_buf(&fx), f32_buf(&ft), Buffer::zeroed(Scalar::F32, n)],
        2,
        0.0,
        Some(2 * 4 * n),
        Box::new(move |keep| {
            for (i, o) in fy.iter_mut().enumerate() {
                let mut acc = 0f32;
                for k in 0..ntaps {
                    acc += taps[k] * x[i + k];
                }
                *o = acc;
            }
            keep.then(|| Out::F32(fy.clone()))
        }),
    ));
    v
}
