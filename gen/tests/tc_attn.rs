//! Attention as one tensor-core kernel (kiln_gen::tc_attn) on the interpreter against a
//! plain softmax(Q·K^T / sqrt(D))·V in f64: head dimensions 64 and 128, causal and not,
//! lengths that are not multiples of the query or key blocks. The kernel rounds P to the
//! input type before P·V and O once at the end, so the comparison allows a few bf16 ulps of
//! the output's scale. ptxas (sm_80) assembles the PTX where `KILN_PTXAS` is set.

use half::{bf16, f16};
use kiln_gen::TcAttnProblem;
use kiln_ir::interp::{run_with, RunOptions};
use kiln_ir::launch::{Arg, Buffer};
use kiln_ir::testing::tool;
use kiln_ir::Scalar;

/// Deterministic values in [-2, 2), exact in bf16 and f16 (multiples of 1/8).
fn vals(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 32) as f32 / 8.0 - 2.0
        })
        .collect()
}

fn buffer(ty: Scalar, v: &[f32]) -> Buffer {
    match ty {
        Scalar::F16 => Buffer::from_slice(&v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>()),
        _ => Buffer::from_slice(&v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>()),
    }
}

fn to_f32(b: &Buffer) -> Vec<f32> {
    match b.elem() {
        Scalar::F16 => b.to_vec::<f16>().unwrap().into_iter().map(f16::to_f32).collect(),
        _ => b.to_vec::<bf16>().unwrap().into_iter().map(bf16::to_f32).collect(),
    }
}

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
    if let Some(ptxas) = tool("KILN_PTXAS") {
        let ptx = kiln_backends::ptx::emit_kernel(&g.kernel, &kiln_backends::ptx::Options::sm(80))
            .unwrap_or_else(|e| panic!("ptx: {e}"));
        assert!(ptx.contains("mma.sync.aligned.m16n8k16"), "{ptx}");
        let dir = std::env::temp_dir().join(format!("kiln-tc-attn-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join(format!("{}.ptx", g.kernel.name()));
        std::fs::write(&f, &ptx).unwrap();
        let out = std::process::Command::new(ptxas)
            .arg("-arch=sm_80")
            .arg(&f)
            .arg("-o")
            .arg(f.with_extension("cubin"))
            .output()
            .expect("run ptxas");
        assert!(out.status.success(), "ptxas: {}", String::from_utf8_lossy(&out.stderr));
    }
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
