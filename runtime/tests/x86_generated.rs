//! The generator's GEMM kernels on the x86 JIT: vector tile loads and stores (`--vec 2/4/8`),
//! every transposition, odd sizes, f16 storage, split-K: the 8-lane code (which these
//! kernels get, vector values included) gives the interpreter's bits.

mod x86_common;

use x86_common::{avx2, fallback, three_ways};

use kiln_gen::{GemmConfig, GemmProblem};
use kiln_ir::launch::{Arg, Buffer};
use kiln_ir::{Imm, Scalar};

/// `len` small integers (exact in f16 and f32 sums) varied by `seed`.
fn ints(ty: Scalar, len: usize, seed: u32) -> Buffer {
    let mut b = Buffer::zeroed(ty, len);
    for i in 0..len {
        let v = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(seed) >> 29;
        b.set(i, Imm::float(ty, f64::from(v) - 3.0)).expect("a float element");
    }
    b
}

fn case(p: GemmProblem, cfg: GemmConfig) {
    let g = p.generate(&cfg).unwrap_or_else(|e| panic!("{p:?} {cfg}: {e}"));
    let [na, nb, nc] = g.buffer_elems;
    let mut bufs = vec![ints(p.ty, na, 1), ints(p.ty, nb, 2), ints(p.ty, nc, 3)];
    let (alpha, beta) = (Arg::scalar(2.0f32), Arg::scalar(-1.0f32));
    match &g.split {
        None => {
            assert_eq!(fallback(&g.kernel), None, "{p:?} {cfg}");
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), alpha, beta];
            assert_eq!(three_ways(&g.kernel, &g.range(), &args, &bufs), avx2(), "{p:?} {cfg}");
        }
        Some(s) => {
            bufs.push(Buffer::zeroed(Scalar::F32, s.workspace_elems));
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(3)];
            assert_eq!(three_ways(&g.kernel, &g.range(), &args, &bufs), avx2(), "{p:?} {cfg}");
        }
    }
}

#[test]
fn generated_gemms_with_vector_tiles_agree() {
    let shapes = [(16, 24, 8), (17, 13, 9), (33, 40, 21), (8, 64, 5)];
    let mut n = 0;
    for (i, &(m, nn, k)) in shapes.iter().enumerate() {
        for trans in 0..4 {
            for vec in [2, 4, 8] {
                let p = GemmProblem {
                    m,
                    n: nn,
                    k,
                    trans_a: trans & 1 != 0,
                    trans_b: trans & 2 != 0,
                    ty: if (i + trans) % 3 == 0 { Scalar::F16 } else { Scalar::F32 },
                };
                let cfg = GemmConfig {
                    wg_m: [2, 4, 8][(i + vec) % 3],
                    wg_n: 4,
                    tm: [1, 2, 4][(trans + i) % 3],
                    tn: vec as u32,
                    k_tile: [4, 8, 16][(trans + vec) % 3],
                    slm_depth: 1 + ((i + trans) % 3) as u32,
                    vec: vec as u32,
                    split_k: if trans == 3 && i % 2 == 1 { 3 } else { 1 },
                    unroll: (i + vec) % 2 == 0,
                };
                // (Configurations the generator refuses for a shape are skipped.)
                if p.generate(&cfg).is_ok() {
                    case(p, cfg);
                    n += 1;
                }
            }
        }
    }
    assert!(n >= 30, "only {n} configurations generated");
}
