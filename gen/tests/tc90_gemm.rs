//! The sm_90 tensor-core GEMM (kiln_gen::tc90) on the interpreter: f16 and bf16 inputs,
//! f32/f16/bf16 outputs, odd sizes (tensor copies zero-fill past M, N and K; the store is
//! masked), every block width, and a fused epilogue. On the interpreter the f32 product is the
//! sequential sum over k, so every comparison is bit for bit; refusals are by name.

mod common;

use common::tc::{buffer, round, to_f32, vals};
use half::bf16;
use kiln_gen::tc90::{generate, Tc90Config};
use kiln_gen::{EpOp, Epilogue, TcGemmProblem};
use kiln_ir::interp::{run_with, RunOptions};
use kiln_ir::launch::{Arg, Buffer};
use kiln_ir::Scalar;

/// Runs the kernel (both interpreter schedules) and compares every element of C, bit for
/// bit, with the sequential product (A M x K, B N x K) through the epilogue `post`.
fn check(
    p: &TcGemmProblem,
    cfg: Tc90Config,
    extra: Vec<Buffer>,
    post: impl Fn(usize, usize, f32) -> f32,
) {
    let g = generate(p, &cfg).unwrap_or_else(|e| panic!("{e}"));
    let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
    let a = vals(m * k, 1 + m as u64);
    let b = vals(n * k, 2 + n as u64);
    let mut want = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f32;
            for l in 0..k {
                s += a[i * k + l] * b[j * k + l];
            }
            want[i * n + j] = round(p.out, post(i, j, s));
        }
    }
    for reverse in [false, true] {
        let mut bufs =
            vec![buffer(p.ty, &a), buffer(p.ty, &b), buffer(p.out, &vec![f32::NAN; m * n])];
        bufs.extend(extra.iter().cloned());
        let args: Vec<Arg> = (0..bufs.len()).map(Arg::Buffer).collect();
        let opts = RunOptions { reverse_order: reverse, ..RunOptions::default() };
        run_with(&g.kernel, &g.range(), &args, &mut bufs, &opts)
            .unwrap_or_else(|e| panic!("{}: {e}", g.kernel.name()));
        let got = to_f32(&bufs[2]);
        for (i, (x, y)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                x.to_bits(),
                y.to_bits(),
                "{} C[{}][{}] reverse {reverse}",
                g.kernel.name(),
                i / n,
                i % n
            );
        }
    }
}

fn problem(m: i64, n: i64, k: i64, ty: Scalar, out: Scalar) -> TcGemmProblem {
    TcGemmProblem { trans_b: true, out, ..TcGemmProblem::new(m, n, k, ty) }
}

#[test]
fn whole_blocks_equal_the_sequential_sum() {
    check(
        &problem(128, 128, 192, Scalar::BF16, Scalar::F32),
        Tc90Config { bn: 128, stages: 2 },
        vec![],
        |_, _, x| x,
    );
    check(
        &problem(128, 64, 128, Scalar::F16, Scalar::F16),
        Tc90Config { bn: 64, stages: 3 },
        vec![],
        |_, _, x| x,
    );
}

#[test]
fn odd_sizes_are_zero_filled_and_masked() {
    // M, N and K past whole blocks and stages; more k-tiles than stages (the ring wraps).
    check(
        &problem(131, 72, 200, Scalar::BF16, Scalar::BF16),
        Tc90Config { bn: 64, stages: 2 },
        vec![],
        |_, _, x| x,
    );
    check(
        &problem(40, 200, 24, Scalar::F16, Scalar::F32),
        Tc90Config { bn: 256, stages: 2 },
        vec![],
        |_, _, x| x,
    );
}

#[test]
fn fused_epilogue_matches_its_definition() {
    let (m, n) = (96usize, 80usize);
    let mut p = problem(m as i64, n as i64, 64, Scalar::BF16, Scalar::BF16);
    p.epilogue = Epilogue(vec![EpOp::Bias, EpOp::Relu, EpOp::Scale]);
    let bias = vals(n, 9);
    let alpha = 0.75f32;
    let g = generate(&p, &Tc90Config { bn: 128, stages: 2 }).unwrap();
    let names: Vec<String> = g.kernel.params().iter().map(|v| v.name().to_string()).collect();
    assert_eq!(names[..3], ["a", "b", "c"]);
    let (k, mu) = (64usize, m);
    let a = vals(mu * k, 3);
    let b = vals(n * k, 4);
    let mut bufs = vec![
        buffer(Scalar::BF16, &a),
        buffer(Scalar::BF16, &b),
        buffer(Scalar::BF16, &vec![f32::NAN; m * n]),
        Buffer::from_slice(&bias),
    ];
    let mut args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3)];
    args.push(Arg::scalar(alpha));
    run_with(&g.kernel, &g.range(), &args, &mut bufs, &RunOptions::default()).unwrap();
    let got = to_f32(&bufs[2]);
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f32;
            for l in 0..k {
                s += a[i * k + l] * b[j * k + l];
            }
            let want = bf16::from_f32((s + bias[j]).max(0.0) * alpha).to_f32();
            assert_eq!(got[i * n + j].to_bits(), want.to_bits(), "C[{i}][{j}]");
        }
    }
}

#[test]
fn unsupported_layouts_and_pitches_are_refused_by_name() {
    let cfg = Tc90Config::default();
    let mut p = problem(64, 64, 64, Scalar::BF16, Scalar::F32);
    p.trans_b = false;
    let e = generate(&p, &cfg).unwrap_err();
    assert!(e.contains("B stored K x N") && e.contains("--trans-b"), "{e}");
    let p = problem(64, 64, 60, Scalar::BF16, Scalar::F32);
    let e = generate(&p, &cfg).unwrap_err();
    assert!(e.contains("K = 60 is not a multiple of 8"), "{e}");
    let e = generate(
        &problem(64, 64, 64, Scalar::BF16, Scalar::F32),
        &Tc90Config { bn: 96, stages: 2 },
    )
    .unwrap_err();
    assert!(e.contains("64, 128 or 256"), "{e}");
    let e = generate(
        &problem(64, 64, 64, Scalar::BF16, Scalar::F32),
        &Tc90Config { bn: 256, stages: 6 },
    )
    .unwrap_err();
    assert!(e.contains("227 KiB"), "{e}");
}
