//! Generated GEMM kernels on the interpreter against a naive f64 reference: all four
//! transpositions, f32 and f16 storage, odd sizes (1, 3, 17, 100), random configurations;
//! each kernel also round-trips through the text format and lowers to PTX and SPIR-V.

mod common;

use common::{check_generated, compare, run_generated, Rng};
use kiln_gen::{GemmConfig, GemmProblem};
use kiln_ir::Scalar;

/// C = alpha * op(A) op(B) + beta * C in f64; also the sum of |terms| per element.
fn reference(
    p: &GemmProblem,
    a: &[f64],
    b: &[f64],
    c: &[f64],
    alpha: f64,
    beta: f64,
) -> (Vec<f64>, Vec<f64>) {
    let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
    let at = |i: usize, l: usize| if p.trans_a { a[l * m + i] } else { a[i * k + l] };
    let bt = |l: usize, j: usize| if p.trans_b { b[j * k + l] } else { b[l * n + j] };
    let mut out = vec![0.0; m * n];
    let mut scale = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let (mut s, mut t) = (0.0, 0.0);
            for l in 0..k {
                s += at(i, l) * bt(l, j);
                t += (at(i, l) * bt(l, j)).abs();
            }
            let old = if beta == 0.0 { 0.0 } else { beta * c[i * n + j] };
            out[i * n + j] = alpha * s + old;
            scale[i * n + j] = (alpha * t).abs() + old.abs();
        }
    }
    (out, scale)
}

fn random_config(r: &mut Rng) -> GemmConfig {
    let pick = |r: &mut Rng, v: &[u32]| v[r.range(0, v.len() as i64 - 1) as usize];
    GemmConfig {
        wg_m: pick(r, &[1, 2, 4, 8]),
        wg_n: pick(r, &[1, 2, 4, 8]),
        tm: pick(r, &[1, 2, 3, 4]),
        tn: pick(r, &[1, 2, 3, 4]),
        k_tile: pick(r, &[1, 2, 4, 5, 8, 16]),
        slm_depth: pick(r, &[1, 2, 3]),
        vec: pick(r, &[1, 2, 4]),
        split_k: 1,
        unroll: r.range(0, 1) == 1,
    }
}

/// One case: integer data, so f32 results are exact (and f16 too while sums stay small).
fn case(p: GemmProblem, cfg: GemmConfig, seed: u64, exact: bool) {
    let mut r = Rng(seed | 1);
    let g = p.generate(&cfg).unwrap_or_else(|e| panic!("{p:?} {cfg}: {e}"));
    check_generated(&g);
    let (na, nb, nc) = (g.buffer_elems[0], g.buffer_elems[1], g.buffer_elems[2]);
    let (a, b, c) = if exact {
        (r.ints(na), r.ints(nb), r.ints(nc))
    } else {
        (r.reals(na, p.ty), r.reals(nb, p.ty), r.reals(nc, p.ty))
    };
    for (alpha, beta) in [(1.0f32, 0.0f32), (2.0, -1.0), (0.5, 0.25)] {
        let (want, scale) = reference(&p, &a, &b, &c, alpha as f64, beta as f64);
        let mut got = c.clone();
        run_generated(&g, p.ty, &a, &b, &mut got, alpha, beta);
        let what = format!("{p:?} {cfg} alpha={alpha} beta={beta}");
        if exact && (p.ty == Scalar::F32 || p.k <= 64) {
            assert_eq!(got, want, "{what}");
        } else {
            compare(&what, &got, &want, &scale, p.ty);
        }
    }
}

#[test]
fn gemm_all_transpositions_odd_sizes() {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let sizes = [1, 3, 17];
    let mut n = 0;
    for trans_a in [false, true] {
        for trans_b in [false, true] {
            for ty in [Scalar::F32, Scalar::F16] {
                let (m, nn, k) = (
                    sizes[r.range(0, 2) as usize],
                    sizes[r.range(0, 2) as usize],
                    sizes[r.range(0, 2) as usize],
                );
                let p = GemmProblem { m, n: nn, k, trans_a, trans_b, ty };
                let cfg = random_config(&mut r);
                case(p, cfg, r.next(), n % 2 == 0);
                n += 1;
            }
        }
    }
}

#[test]
fn gemm_random_shapes_and_configs() {
    let mut r = Rng(0x2545_f491_4f6c_dd1d);
    for i in 0..12 {
        let dim = |r: &mut Rng| [1, 2, 3, 5, 7, 16, 17, 33][r.range(0, 7) as usize];
        let p = GemmProblem {
            m: dim(&mut r),
            n: dim(&mut r),
            k: dim(&mut r),
            trans_a: r.range(0, 1) == 1,
            trans_b: r.range(0, 1) == 1,
            ty: if i % 3 == 2 { Scalar::F16 } else { Scalar::F32 },
        };
        let cfg = random_config(&mut r);
        case(p, cfg, r.next(), i % 2 == 0);
    }
}

#[test]
fn gemm_100_cubed() {
    let p = GemmProblem { m: 100, n: 100, k: 100, trans_a: false, trans_b: true, ty: Scalar::F32 };
    let cfg = GemmConfig {
        wg_m: 8,
        wg_n: 8,
        tm: 4,
        tn: 4,
        k_tile: 16,
        slm_depth: 2,
        unroll: true,
        vec: 4,
        split_k: 1,
    };
    case(p, cfg, 7, false);
}

#[test]
fn default_candidates_generate() {
    // Every candidate for a small problem generates a verified kernel (what a tuner needs).
    let cands = GemmConfig::candidates(17, 3, 5);
    assert!(!cands.is_empty());
    let p = GemmProblem { m: 17, n: 3, k: 5, trans_a: false, trans_b: false, ty: Scalar::F32 };
    for c in &cands {
        p.generate(c).unwrap_or_else(|e| panic!("{c}: {e}"));
    }
}

#[test]
fn bad_problems_are_refused() {
    let p = GemmProblem { m: 0, n: 3, k: 5, trans_a: false, trans_b: false, ty: Scalar::F32 };
    assert!(p.generate(&GemmConfig::default()).unwrap_err().contains("positive"));
    let p = GemmProblem { ty: Scalar::I32, m: 2, ..p };
    assert!(p.generate(&GemmConfig::default()).unwrap_err().contains("f32 and f16"));
    let big = GemmConfig { wg_m: 32, wg_n: 32, ..GemmConfig::default() };
    assert!(big.validate().unwrap_err().contains("work-items"));
    let deep = GemmConfig { slm_depth: 4, ..GemmConfig::default() };
    assert!(deep.validate().unwrap_err().contains("slm_depth"));
}

/// The `slm-buffer` pass turns the generator's single-buffered kernels into double-buffered
/// ones that still verify, still match the reference, and keep every other check
/// (round trip, PTX, SPIR-V, AMDGPU simulator, both schedules).
#[test]
fn slm_buffer_pass_double_buffers_generated_kernels() {
    let mut r = Rng(0x51f1_5eed);
    for i in 0..8 {
        let mut cfg = random_config(&mut r);
        cfg.slm_depth = 1;
        let dim = |r: &mut Rng| [1, 3, 17, 20][r.range(0, 3) as usize];
        let p = GemmProblem {
            m: dim(&mut r),
            n: dim(&mut r),
            k: dim(&mut r),
            trans_a: r.range(0, 1) == 1,
            trans_b: r.range(0, 1) == 1,
            ty: if i % 4 == 3 { Scalar::F16 } else { Scalar::F32 },
        };
        let mut g = p.generate(&cfg).unwrap();
        let before = g.kernel.clone();
        g.kernel = kiln_passes::slm_buffering::slm_double_buffer(&g.kernel);
        assert!(!g.kernel.ptr_eq(&before), "{p:?} {cfg}: not double-buffered\n{before}");
        assert_eq!(g.kernel.to_string().matches("barrier(local)").count(), 2, "{}", g.kernel);
        check_generated(&g);
        let (a, b, c) =
            (r.ints(g.buffer_elems[0]), r.ints(g.buffer_elems[1]), r.ints(g.buffer_elems[2]));
        let (want, _) = reference(&p, &a, &b, &c, 2.0, 1.0);
        let mut got = c.clone();
        run_generated(&g, p.ty, &a, &b, &mut got, 2.0, 1.0);
        if p.ty == Scalar::F32 {
            assert_eq!(got, want, "{p:?} {cfg}\n{}", g.kernel);
        }
        // A second run finds nothing more to do.
        assert!(kiln_passes::slm_buffering::slm_double_buffer(&g.kernel).ptr_eq(&g.kernel));
    }
}

/// The default `-O` pipeline (what `kiln run` and the devices apply before emitting) keeps
/// generated kernels' results bit-identical, and its output still verifies.
#[test]
fn default_pipeline_preserves_generated_kernels() {
    let mut r = Rng(0x0b5e_55ed);
    for i in 0..4 {
        let mut cfg = random_config(&mut r);
        cfg.unroll = i % 2 == 1;
        let p = GemmProblem {
            m: [3, 17][i % 2],
            n: [5, 9][(i / 2) % 2],
            k: 11,
            trans_a: i % 3 == 0,
            trans_b: i % 2 == 0,
            ty: if i == 3 { Scalar::F16 } else { Scalar::F32 },
        };
        let g = p.generate(&cfg).unwrap();
        let (a, b, c) = (
            r.reals(g.buffer_elems[0], p.ty),
            r.reals(g.buffer_elems[1], p.ty),
            r.reals(g.buffer_elems[2], p.ty),
        );
        let mut plain = c.clone();
        run_generated(&g, p.ty, &a, &b, &mut plain, 1.5, -0.5);
        let mut opt = g.clone();
        opt.kernel = kiln_passes::pipeline::optimize(&g.kernel);
        check_generated(&opt);
        let mut got = c.clone();
        run_generated(&opt, p.ty, &a, &b, &mut got, 1.5, -0.5);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&plain), "{p:?} {cfg}\n{}", opt.kernel);
    }
}

/// Vector blockings whose work-items form 8 x 4 warp tiles and whose register blocks split
/// into groups `wg * vec` apart (tile 8x8 with vec 4, ...), including a block that does not
/// split (tm = 2 under vec = 4) and shapes that are not multiples of the tile.
#[test]
fn gemm_warp_tiled_vector_groups() {
    let cfg = |wg_m, wg_n, tm, tn, k_tile, vec| GemmConfig {
        wg_m,
        wg_n,
        tm,
        tn,
        k_tile,
        slm_depth: 2,
        unroll: true,
        vec,
        split_k: 1,
    };
    let p = |m, n, k, trans_a, trans_b| GemmProblem { m, n, k, trans_a, trans_b, ty: Scalar::F32 };
    let cases = [
        (p(64, 128, 24, false, false), cfg(8, 16, 8, 8, 8, 4)),
        (p(37, 70, 19, false, true), cfg(4, 8, 4, 8, 4, 2)),
        (p(33, 130, 9, true, false), cfg(8, 16, 2, 8, 8, 4)),
        (p(40, 64, 16, true, true), cfg(4, 16, 8, 4, 8, 4)),
    ];
    for (i, (p, c)) in cases.into_iter().enumerate() {
        case(p, c, 11 + i as u64, i % 2 == 0);
    }
}

/// Issue 26: split-K (partial products per slice of K into a workspace, then the slices
/// added in slice order) on random shapes, odd sizes and all transpositions: the
/// interpreter (both schedules) and the AMDGPU simulator give the reference's bits on
/// integer data, and the reals within rounding.
#[test]
fn split_k_random_shapes() {
    let mut r = Rng(0x5eed_0026_5917_0001);
    for i in 0..10 {
        let dim = |r: &mut Rng| [1, 3, 8, 17, 33][r.range(0, 4) as usize];
        let p = GemmProblem {
            m: dim(&mut r),
            n: dim(&mut r),
            k: [19, 40, 64, 100, 257][r.range(0, 4) as usize],
            trans_a: r.range(0, 1) == 1,
            trans_b: r.range(0, 1) == 1,
            ty: if i % 4 == 3 { Scalar::F16 } else { Scalar::F32 },
        };
        let cfg =
            GemmConfig { split_k: [2, 3, 4, 8][r.range(0, 3) as usize], ..random_config(&mut r) };
        let g = p.generate(&cfg).unwrap();
        assert_eq!(g.split.is_some(), cfg.slices(p.k as u64) > 1, "{p:?} {cfg}");
        case(p, cfg, r.next(), i % 2 == 0);
    }
    // Vector loads and vector stores into the workspace (C's 32 x 32 elements are whole
    // vectors), double and triple buffered.
    for slm_depth in [2, 3] {
        let p =
            GemmProblem { m: 32, n: 32, k: 200, trans_a: true, trans_b: false, ty: Scalar::F32 };
        let cfg = GemmConfig {
            wg_m: 4,
            wg_n: 4,
            tm: 4,
            tn: 4,
            k_tile: 8,
            slm_depth,
            unroll: true,
            vec: 4,
            split_k: 4,
        };
        let g = p.generate(&cfg).unwrap();
        assert_eq!(g.split.as_ref().map(|s| s.slices), Some(4));
        assert!(g.kernel.to_string().contains("vstore(w, "), "{}", g.kernel);
        case(p, cfg, 11, true);
    }
}

/// Register blocks of 8 x 16 and 16 x 8 (a 128 x 256 work-group tile at 16 x 16
/// work-items): 4-lane and scalar, transposed operands, sizes that are not multiples of the
/// tile; larger blocks refused.
#[test]
fn gemm_8x16_register_blocks() {
    let mut r = Rng(0x8f16_0026_0003);
    for (i, (tm, tn)) in [(8, 16), (16, 8)].into_iter().enumerate() {
        let p =
            GemmProblem { m: 19, n: 37, k: 11, trans_a: i == 0, trans_b: i == 1, ty: Scalar::F32 };
        let cfg = GemmConfig {
            wg_m: 2,
            wg_n: 2,
            tm,
            tn,
            k_tile: 8,
            slm_depth: 2,
            unroll: i == 0,
            vec: [4, 1][i],
            split_k: 1,
        };
        case(p, cfg, r.next(), true);
    }
    let bad = GemmConfig { tm: 17, tn: 1, ..GemmConfig::default() };
    assert!(bad.validate().unwrap_err().contains("exceeds 8x16 or 16x8"));
    let bad = GemmConfig { tm: 16, tn: 16, ..GemmConfig::default() };
    assert!(bad.validate().unwrap_err().contains("exceeds 8x16 or 16x8"));
}

/// Issue 26 item 3: edge tiles read clamped rows of A and B instead of testing M and N, and
/// K's partial last k-tile is copied in a step peeled off the double-buffered loop (after
/// one, two or more k-tiles): the measured blocking (k-tiles of 8 and 16) on sizes that are
/// no multiple of its 64 x 128 tile, all transpositions, against the reference.
#[test]
fn edge_tiles_clamp_rows_and_peel_the_k_tail() {
    let cfg = |k_tile| GemmConfig {
        wg_m: 8,
        wg_n: 16,
        tm: 8,
        tn: 8,
        k_tile,
        slm_depth: 2,
        unroll: true,
        vec: 4,
        split_k: 1,
    };
    let mut r = Rng(0xed9e_0026_0003);
    let cases = [
        (70, 132, 5, 8),
        (68, 136, 13, 8),
        (3, 140, 21, 8),
        (72, 7, 24, 8),
        (65, 129, 40, 16),
        (66, 130, 20, 16),
    ];
    for (i, (m, n, k, k_tile)) in cases.into_iter().enumerate() {
        let p = GemmProblem {
            m,
            n,
            k,
            trans_a: i % 2 == 1,
            trans_b: (i / 2) % 2 == 1 || i == 4,
            ty: Scalar::F32,
        };
        case(p, cfg(k_tile), r.next(), i % 2 == 0);
    }
}

/// Issue 26 item 3: with B transposed both tiles are copied with vectors along K and stored
/// lane by lane, `BM` (`BN`) elements apart; their k-slices are padded by 4 elements so that
/// a warp's stores spread over the banks. Other transpositions keep dense tiles. Padded
/// kernels match the reference on sizes that are no multiple of the tile.
#[test]
fn transposed_b_pads_the_local_tiles() {
    let cfg = |k_tile| GemmConfig {
        wg_m: 8,
        wg_n: 16,
        tm: 8,
        tn: 8,
        k_tile,
        slm_depth: 2,
        unroll: true,
        vec: 4,
        split_k: 1,
    };
    let sizes = |p: &GemmProblem, k_tile| {
        let text = p.generate(&cfg(k_tile)).unwrap().kernel.to_string();
        let size = |name: &str| {
            let at = text.find(&format!("local {name}: f32[")).unwrap() + name.len() + 12;
            text[at..].split(']').next().unwrap().parse::<u32>().unwrap()
        };
        (size("a_s"), size("b_s"))
    };
    for (trans_a, trans_b) in [(false, false), (true, false), (false, true), (true, true)] {
        let p = GemmProblem { m: 256, n: 256, k: 64, trans_a, trans_b, ty: Scalar::F32 };
        let pad = if !trans_a && trans_b { 4 } else { 0 };
        // Two buffers of k_tile slices of 64 (A) and 128 (B) elements, plus the padding.
        assert_eq!(sizes(&p, 8), (2 * 8 * (64 + pad), 2 * 8 * (128 + pad)), "{p:?}");
        assert_eq!(sizes(&p, 16), (2 * 16 * (64 + pad), 2 * 16 * (128 + pad)), "{p:?}");
    }
    let mut r = Rng(0x0da0_0026_0003);
    for (i, (m, n, k)) in [(70, 132, 24), (65, 129, 40), (3, 140, 21)].into_iter().enumerate() {
        let p = GemmProblem { m, n, k, trans_a: false, trans_b: true, ty: Scalar::F32 };
        case(p, cfg([8, 16, 8][i]), r.next(), i % 2 == 0);
    }
}

/// Issue 26 item 3: the H100 target's large seed (`wg 16x8 tile 8x16 k 8`, 128 x 128 tiles)
/// on sizes that are no multiple of its tile, every transposition (B transposed with padded
/// tiles), against the reference.
#[test]
fn large_seed_on_edges_and_transpositions() {
    let cfg: GemmConfig = "wg=16x8 tile=8x16 k=8 slm=2 unroll=1 vec=4".parse().unwrap();
    assert_eq!(kiln_gen::tuner::Target::h100().large_seeds, [cfg]);
    let mut r = Rng(0x1a59_0026_0003);
    let cases = [(130, 136, 20), (129, 131, 13), (7, 140, 8), (140, 9, 33)];
    for (i, (m, n, k)) in cases.into_iter().enumerate() {
        let p = GemmProblem { m, n, k, trans_a: i % 2 == 1, trans_b: i / 2 == 1, ty: Scalar::F32 };
        case(p, cfg, r.next(), i % 2 == 0);
    }
}
