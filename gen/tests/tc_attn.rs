//! Attention as one tensor-core kernel (kiln_gen::tc_attn) on the interpreter against a
//! plain softmax(Q·K^T / sqrt(D))·V in f64: head dimensions 64 and 128, causal and not,
//! lengths that are not multiples of the query or key blocks. The kernel rounds P to the
//! input type before P·V and O once at the end, so the comparison allows a few bf16 ulps of
//! the output's scale. ptxas (sm_80) assembles the PTX where `KILN_PTXAS` is set.

mod common;

use common::tc::{buffer, to_f32, vals};
use kiln_gen::TcAttnProblem;
use kiln_ir::interp::{run_with, RunOptions};
use kiln_ir::launch::{Arg, Buffer};
use kiln_ir::Scalar;

/// softmax(Q·K^T / sqrt(D) [causal]) · V in f64, per head.
fn reference(p: &TcAttnProblem, q: &[f32], k: &[f32], v: &[f32]) -> Vec<f64> {
    let (l, d) = (p.len as usize, p.dim as usize);
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0.0; q.len()];
    for h in 0..p.heads as usize {
        let at = |m: &[f32], r: usize, c: usize| m[(h * l + r) * d + c] as f64;
        for i in 0..l {
            let keys = if p.causal { i + 1 } else { l };
            let s: Vec<f64> = (0..keys)
                .map(|j| (0..d).map(|c| at(q, i, c) * at(k, j, c)).sum::<f64>() * scale)
                .collect();
            let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - mx).exp()).collect();
            let sum: f64 = e.iter().sum();
            for c in 0..d {
                out[(h * l + i) * d + c] = (0..keys).map(|j| e[j] * at(v, j, c)).sum::<f64>() / sum;
            }
        }
    }
    out
}

fn check(p: &TcAttnProblem) {
    let g = p.generate().unwrap_or_else(|e| panic!("{}: {e}", p.name()));
    let text = kiln_ir::Module::new(vec![g.kernel.clone()]).to_string();
    let parsed = kiln_ir::parse_module(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    assert!(parsed.kernels[0].is_equal(&g.kernel), "round trip of {}", g.kernel.name());
    let (q, k, v) = (vals(g.elems, 21), vals(g.elems, 22), vals(g.elems, 23));
    let mut results = Vec::new();
    for reverse in [false, true] {
        let mut bufs = vec![
            buffer(p.ty, &q),
            buffer(p.ty, &k),
            buffer(p.ty, &v),
            Buffer::zeroed(p.ty, g.elems),
        ];
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3)];
        let opts = RunOptions { reverse_order: reverse, ..RunOptions::default() };
        run_with(&g.kernel, &g.range(), &args, &mut bufs, &opts)
            .unwrap_or_else(|e| panic!("{}: {e}", p.name()));
        results.push(bufs.swap_remove(3));
    }
    assert_eq!(results[0].as_bytes(), results[1].as_bytes(), "schedule-dependent result");
    let got = to_f32(&results[0]);
    let want = reference(p, &q, &k, &v);
    let big = want.iter().fold(0.0f64, |a, &b| a.max(b.abs()));
    for (i, (&a, &b)) in got.iter().zip(&want).enumerate() {
        // P and O are rounded to the input type (8 bits for bf16): a few ulps of the scale.
        assert!((a as f64 - b).abs() <= 0.03 * big, "{}: element {i}: {a} != {b}", p.name());
    }
    common::tc::assemble_mma_sm80(&g.kernel, "tc-attn");
}

#[test]
fn tc_attn_head_dim_64_causal_and_not() {
    // 70 rows: two key blocks (the second partial), two query blocks of 2 warps.
    for causal in [false, true] {
        let p = TcAttnProblem { warps: 2, ..TcAttnProblem::new(2, 70, 64, causal, Scalar::BF16) };
        check(&p);
    }
}

#[test]
fn tc_attn_head_dim_128_f16() {
    check(&TcAttnProblem { warps: 1, ..TcAttnProblem::new(1, 37, 128, true, Scalar::F16) });
}

#[test]
fn tc_attn_refusals_say_why() {
    let e = TcAttnProblem::new(1, 16, 72, false, Scalar::BF16).generate().unwrap_err();
    assert!(e.contains("multiple of 16, at most 128"), "{e}");
    let e = TcAttnProblem::new(1, 16, 64, false, Scalar::F32).generate().unwrap_err();
    assert!(e.contains("must be f16 or bf16"), "{e}");
    let e = TcAttnProblem::new(0, 16, 64, false, Scalar::BF16).generate().unwrap_err();
    assert!(e.contains("heads = 0"), "{e}");
}
