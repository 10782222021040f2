//! Batched GEMM (`GemmProblem::batched`, one launch for the batch: dimension 2 of the launch
//! runs over the batch): random shapes, transpositions, batch strides with gaps between the
//! matrices, vectors and split-K, on the interpreter (both schedules) and the AMDGPU
//! simulator against a naive f64 reference per matrix. Elements of C between the matrices
//! must keep their values.

mod common;

use common::{check_generated, run_generated, Rng};
use kiln_gen::{BatchedGemm, GemmConfig, GemmProblem};
use kiln_ir::Scalar;

/// C[i] = alpha * op(A[i]) op(B[i]) + beta * C[i] in f64, on whole buffers: the elements of
/// C that belong to no matrix keep their values.
fn reference(p: &BatchedGemm, a: &[f64], b: &[f64], c: &[f64], alpha: f64, beta: f64) -> Vec<f64> {
    let g = &p.gemm;
    let (m, n, k) = (g.m as usize, g.n as usize, g.k as usize);
    let [sa, sb, sc] = p.strides.map(|s| s as usize);
    let mut out = c.to_vec();
    for z in 0..p.batch as usize {
        let at = |i: usize, l: usize| a[z * sa + if g.trans_a { l * m + i } else { i * k + l }];
        let bt = |l: usize, j: usize| b[z * sb + if g.trans_b { j * k + l } else { l * n + j }];
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k).map(|l| at(i, l) * bt(l, j)).sum();
                let o = &mut out[z * sc + i * n + j];
                *o = alpha * s + if beta == 0.0 { 0.0 } else { beta * *o };
            }
        }
    }
    out
}

fn random_config(r: &mut Rng) -> GemmConfig {
    let pick = |r: &mut Rng, v: &[u32]| v[r.range(0, v.len() as i64 - 1) as usize];
    GemmConfig {
        wg_m: pick(r, &[1, 2, 4, 8]),
        wg_n: pick(r, &[2, 4, 8]),
        tm: pick(r, &[1, 2, 4]),
        tn: pick(r, &[1, 2, 4]),
        k_tile: pick(r, &[2, 4, 8]),
        slm_depth: pick(r, &[1, 2, 3]),
        vec: pick(r, &[1, 2, 4]),
        split_k: pick(r, &[1, 1, 2, 3]),
        unroll: r.range(0, 1) == 1,
    }
}

fn case(p: BatchedGemm, cfg: GemmConfig, seed: u64) {
    let mut r = Rng(seed | 1);
    let g = p.generate(&cfg).unwrap_or_else(|e| panic!("{p:?} {cfg}: {e}"));
    check_generated(&g);
    let range = g.range();
    let slices = g.split.as_ref().map_or(1, |s| s.slices);
    let z = p.batch as u32 * slices;
    assert_eq!((range.dims, range.global[2]), (if z > 1 { 3 } else { 2 }, z), "{p:?} {cfg}");
    let [na, nb, nc] = g.buffer_elems;
    let (a, b, c) = (r.ints(na), r.ints(nb), r.ints(nc));
    for (alpha, beta) in [(1.0f32, 0.0f32), (2.0, -1.0)] {
        let want = reference(&p, &a, &b, &c, alpha as f64, beta as f64);
        let mut got = c.clone();
        run_generated(&g, p.gemm.ty, &a, &b, &mut got, alpha, beta);
        assert_eq!(got, want, "{p:?} {cfg} alpha={alpha} beta={beta}");
    }
}

#[test]
fn batched_gemm_random_shapes_strides_and_configs() {
    let mut r = Rng(0xba7c_4ed0_0026_0002);
    for i in 0..14 {
        let dim = |r: &mut Rng| [1, 3, 4, 8, 17, 20][r.range(0, 5) as usize];
        let gemm = GemmProblem {
            m: dim(&mut r),
            n: dim(&mut r),
            k: [1, 5, 8, 19, 32][r.range(0, 4) as usize],
            trans_a: r.range(0, 1) == 1,
            trans_b: r.range(0, 1) == 1,
            ty: Scalar::F32,
        };
        let mut p = gemm.batched(r.range(1, 5));
        // Gaps between the matrices of A and B (C's split-K workspace needs C dense).
        if i % 2 == 1 {
            p.strides[0] += [0, 4, 7][r.range(0, 2) as usize];
            p.strides[1] += [0, 4, 7][r.range(0, 2) as usize];
        }
        let mut cfg = random_config(&mut r);
        if i % 3 == 2 {
            cfg.split_k = 1;
            p.strides[2] += 4;
        }
        case(p, cfg, r.next());
    }
}

/// Whole vectors: 4-lane loads and stores of every operand, also with split-K, when each
/// matrix starts on a multiple of 4 elements; a stride that is not keeps scalar accesses.
#[test]
fn batched_gemm_keeps_vectors_where_aligned() {
    let cfg = GemmConfig {
        wg_m: 4,
        wg_n: 8,
        tm: 4,
        tn: 4,
        k_tile: 8,
        slm_depth: 2,
        unroll: true,
        vec: 4,
        split_k: 1,
    };
    for trans in [false, true] {
        let gemm =
            GemmProblem { m: 16, n: 32, k: 24, trans_a: trans, trans_b: trans, ty: Scalar::F32 };
        for split_k in [1, 3] {
            let p = gemm.batched(3);
            let c = GemmConfig { split_k, ..cfg };
            let text = p.generate(&c).unwrap().kernel.to_string();
            assert!(text.contains("vload4(a, ") && text.contains("vload4(b, "), "{text}");
            case(p, c, 7 + split_k as u64);
        }
        let mut odd = gemm.batched(2);
        odd.strides = [16 * 24 + 1, 24 * 32 + 2, 16 * 32 + 3];
        let text = odd.generate(&cfg).unwrap().kernel.to_string();
        assert!(!text.contains("vload4(a, ") && !text.contains("vstore(c, "), "{text}");
        case(odd, cfg, 5);
    }
}

#[test]
fn batched_gemm_bad_problems_are_refused() {
    let gemm = GemmProblem { m: 4, n: 4, k: 4, trans_a: false, trans_b: false, ty: Scalar::F32 };
    let cfg = GemmConfig::default();
    let err = |p: BatchedGemm| p.generate(&cfg).unwrap_err();
    assert!(err(gemm.batched(0)).contains("batch must be from 1"));
    let mut p = gemm.batched(2);
    p.strides[1] = 15;
    assert!(err(p).contains("batch stride of B, 15, is less than its 16 elements"));
    let mut p = gemm.batched(2);
    p.strides[2] = 20;
    let split = GemmConfig { split_k: 2, k_tile: 2, ..cfg };
    let e = p.generate(&split).unwrap_err();
    assert!(e.contains("batch x M x N = 32 elements (it has 36)"), "{e}");
    let e = gemm.batched(70000).generate(&cfg).unwrap_err();
    assert!(e.contains("70000 batch indices x 1 split-K slices"), "{e}");
}
