//! The sm_90 tensor-core GEMM (kiln_gen::tc90) on the interpreter: f16 and bf16 inputs,
//! f32/f16/bf16 outputs, every transpose (K-major and MN-major factors), odd sizes (tensor
//! copies zero-fill past M, N and K; the store is masked), every block width, and a fused
//! epilogue. On the interpreter the f32 product is the
//! sequential sum over k, so every comparison is bit for bit; refusals are by name.

mod common;

use common::tc::{buffer, round, to_f32, vals};
use half::bf16;
use kiln_gen::tc90::{generate, Tc90Config};
use kiln_gen::{EpOp, Epilogue, TcGemmProblem};
use kiln_ir::interp::{run_with, RunOptions};
use kiln_ir::launch::{Arg, Buffer};
use kiln_ir::Scalar;

/// `v` (row-major `rows x cols`) stored transposed if `t`.
fn stored(v: &[f32], rows: usize, cols: usize, t: bool) -> Vec<f32> {
    if !t {
        return v.to_vec();
    }
    (0..rows * cols).map(|x| v[(x % rows) * cols + x / rows]).collect()
}

/// Runs the kernel (both interpreter schedules) and compares every element of C, bit for
/// bit, with the sequential product (A M x K, B N x K, each stored as `p` says) through the
/// epilogue `post`.
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
    let (sa, sb) = (stored(&a, m, k, p.trans_a), stored(&b, n, k, !p.trans_b));
    for reverse in [false, true] {
        let mut bufs =
            vec![buffer(p.ty, &sa), buffer(p.ty, &sb), buffer(p.out, &vec![f32::NAN; m * n])];
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
        Tc90Config { bn: 128, stages: 2, persistent: 0, ..Default::default() },
        vec![],
        |_, _, x| x,
    );
    check(
        &problem(128, 64, 128, Scalar::F16, Scalar::F16),
        Tc90Config { bn: 64, stages: 3, ..Default::default() },
        vec![],
        |_, _, x| x,
    );
}

#[test]
fn odd_sizes_are_zero_filled_and_masked() {
    // M, N and K past whole blocks and stages; more k-tiles than stages (the ring wraps).
    check(
        &problem(131, 72, 200, Scalar::BF16, Scalar::BF16),
        Tc90Config { bn: 64, stages: 2, persistent: 0, ..Default::default() },
        vec![],
        |_, _, x| x,
    );
    check(
        &problem(40, 200, 24, Scalar::F16, Scalar::F32),
        Tc90Config { bn: 256, stages: 2, ..Default::default() },
        vec![],
        |_, _, x| x,
    );
}

/// Every (trans_a, trans_b).
const TRANSPOSES: [(bool, bool); 4] = [(false, false), (false, true), (true, false), (true, true)];

#[test]
fn every_transpose_equals_the_sequential_sum() {
    // A stored K x M and B stored K x N go through `wgmma`'s MN-major layouts: odd M, N and K
    // (pitches multiples of 8 where they are the stored rows), both element types, two block
    // widths (two and four N boxes per stage) and a ring that wraps.
    for (ta, tb) in TRANSPOSES {
        let p = |m, n, k, ty, out| TcGemmProblem {
            trans_a: ta,
            trans_b: tb,
            ..problem(m, n, k, ty, out)
        };
        check(
            &p(136, 72, 200, Scalar::BF16, Scalar::F32),
            Tc90Config { bn: 128, stages: 2, ..Default::default() },
            vec![],
            |_, _, x| x,
        );
        check(
            &p(40, 264, 88, Scalar::F16, Scalar::F16),
            Tc90Config { bn: 256, stages: 2, ..Default::default() },
            vec![],
            |_, _, x| x,
        );
    }
    // Both factors MN-major: K needs no multiple of 8 (the copies zero-fill past it).
    let p = TcGemmProblem {
        trans_a: true,
        trans_b: false,
        ..problem(24, 16, 75, Scalar::BF16, Scalar::BF16)
    };
    check(&p, Tc90Config { bn: 64, stages: 2, ..Default::default() }, vec![], |_, _, x| x);
}

#[test]
fn every_transpose_fuses_the_epilogue() {
    let (m, n) = (72usize, 48usize);
    let bias = vals(n, 5);
    for (ta, tb) in TRANSPOSES {
        let mut p = problem(m as i64, n as i64, 40, Scalar::F16, Scalar::F32);
        (p.trans_a, p.trans_b) = (ta, tb);
        p.epilogue = Epilogue(vec![EpOp::Bias, EpOp::Relu]);
        let b = bias.clone();
        check(
            &p,
            Tc90Config { bn: 64, stages: 2, ..Default::default() },
            vec![Buffer::from_slice(&bias)],
            move |_, j, x| (x + b[j]).max(0.0),
        );
    }
}

/// Stores of a kernel's text: (2-lane `vstore`s, scalar stores into `c`).
fn stores(text: &str) -> (usize, usize) {
    (text.matches("vstore(c,").count(), text.matches("  c[").count())
}

#[test]
fn even_n_stores_column_pairs_and_odd_n_single_elements() {
    // Even N: each work-item's neighbouring columns leave as one aligned 2-lane store; odd N
    // (B stored N x K, so N has no multiple-of-8 rule): one element at a time, the last
    // column's pair half-outside C. Both through an epilogue that reads per column.
    for (n, pairs) in [(48usize, true), (75, false)] {
        let m = 40usize;
        let bias = vals(n, 7);
        let mut p = problem(m as i64, n as i64, 24, Scalar::BF16, Scalar::BF16);
        p.epilogue = Epilogue(vec![EpOp::Bias, EpOp::Gelu]);
        let cfg = Tc90Config { bn: 64, stages: 2, ..Default::default() };
        let text = generate(&p, &cfg).unwrap().kernel.to_string();
        let (v, scalar) = stores(&text);
        assert_eq!((v > 0, scalar > 0), (pairs, !pairs), "N = {n}: {v} vstores, {scalar} stores");
        let b = bias.clone();
        check(&p, cfg, vec![Buffer::from_slice(&bias)], move |_, j, x| {
            let x = x + b[j];
            x / (1.0 + (-1.595_769f32 * (x + 0.044715 * x * x * x)).exp())
        });
    }
}

#[test]
fn fused_epilogue_matches_its_definition() {
    let (m, n) = (96usize, 80usize);
    let mut p = problem(m as i64, n as i64, 64, Scalar::BF16, Scalar::BF16);
    p.epilogue = Epilogue(vec![EpOp::Bias, EpOp::Relu, EpOp::Scale]);
    let bias = vals(n, 9);
    let alpha = 0.75f32;
    let g = generate(&p, &Tc90Config { bn: 128, stages: 2, ..Default::default() }).unwrap();
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
    // The stored row of each factor (K, M or N by its transpose) is the copy's pitch.
    let pitch = |m, n, k, ta, tb| {
        let p = TcGemmProblem {
            trans_a: ta,
            trans_b: tb,
            ..problem(m, n, k, Scalar::BF16, Scalar::F32)
        };
        generate(&p, &cfg).unwrap_err()
    };
    let e = pitch(64, 64, 60, false, true);
    assert!(
        e.contains("A is stored M x K, so its rows are K = 60 elements, not a multiple of 8"),
        "{e}"
    );
    let e = pitch(64, 64, 60, true, true);
    assert!(e.contains("B is stored N x K, so its rows are K = 60"), "{e}");
    let e = pitch(60, 64, 64, true, false);
    assert!(e.contains("A is stored K x M, so its rows are M = 60"), "{e}");
    let e = pitch(64, 60, 64, false, false);
    assert!(e.contains("B is stored K x N, so its rows are N = 60"), "{e}");
    // A size that is no stored row needs no multiple of 8 (K, with both factors MN-major).
    let p = TcGemmProblem {
        trans_a: true,
        trans_b: false,
        ..problem(64, 64, 61, Scalar::BF16, Scalar::F32)
    };
    generate(&p, &cfg).unwrap();
    let e = generate(
        &problem(64, 64, 64, Scalar::BF16, Scalar::F32),
        &Tc90Config { bn: 96, stages: 2, ..Default::default() },
    )
    .unwrap_err();
    assert!(e.contains("64, 128 or 256"), "{e}");
    let e = generate(
        &problem(64, 64, 64, Scalar::BF16, Scalar::F32),
        &Tc90Config { bn: 256, stages: 6, ..Default::default() },
    )
    .unwrap_err();
    assert!(e.contains("227 KiB"), "{e}");
}

#[test]
fn every_transpose_lowers_to_transposed_wgmma_and_assembles_for_sm_90a() {
    // Per transpose: the `wgmma` immediates (imm-trans-a/b 1 for a factor stored MN-contiguous)
    // and the tensor maps' orientation (width = the stored row: K, M or N; boxes 64 x 128 or
    // bn of K rows, 64 x 64 of MN rows); ptxas accepts each kernel for sm_90a.
    let ptxas = kiln_ir::testing::tool("KILN_PTXAS");
    let dir = std::env::temp_dir().join(format!("kiln-tc90-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (ta, tb) in TRANSPOSES {
        for ty in [Scalar::F16, Scalar::BF16] {
            let mut p = problem(200, 136, 72, ty, Scalar::BF16);
            (p.trans_a, p.trans_b) = (ta, tb);
            p.epilogue = Epilogue(vec![EpOp::Bias, EpOp::Relu]);
            let g = generate(&p, &Tc90Config { bn: 128, stages: 3, ..Default::default() }).unwrap();
            let name = g.kernel.name().to_string();
            let ptx =
                kiln_backends::ptx::emit_kernel(&g.kernel, &kiln_backends::ptx::Options::sm(90))
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
            let imm = format!(", 1, 1, {}, {};", ta as u8, !tb as u8);
            assert_eq!(ptx.matches("wgmma.mma_async").count(), 4, "{name}");
            assert_eq!(ptx.matches(imm.as_str()).count(), 4, "{name}: {imm}");
            let a_map =
                if ta { "a {ty} 200 72 200 64 64 sw128" } else { "a {ty} 72 200 72 64 128 sw128" };
            let b_map =
                if tb { "b {ty} 72 136 72 64 128 sw128" } else { "b {ty} 136 72 136 64 64 sw128" };
            for (j, m) in [a_map, b_map].iter().enumerate() {
                let line =
                    format!("// kiln.tensor_map {name} {j} {}", m.replace("{ty}", &ty.to_string()));
                assert!(ptx.contains(&line), "{name}: no `{line}`");
            }
            // One copy per K-major factor, one per 64 MN rows of an MN-major one.
            let copies = if ta { 2 } else { 1 } + if tb { 1 } else { 2 };
            assert_eq!(ptx.matches("cp.async.bulk.tensor").count(), copies, "{name}");
            if let Some(ptxas) = &ptxas {
                let f = dir.join(format!("{name}.ptx"));
                std::fs::write(&f, &ptx).unwrap();
                let out = std::process::Command::new(ptxas)
                    .arg("--gpu-name=sm_90a")
                    .arg(&f)
                    .arg("-o")
                    .arg(f.with_extension("cubin"))
                    .output()
                    .expect("run ptxas");
                assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn persistent_tiles_equal_the_sequential_sum() {
    // 200 x 136 in 128 x 64 tiles: 6 tiles. Capped at 4 work-groups they take two rounds,
    // so 3 work-groups each compute two tiles with the ring running on across them (k =
    // 200: 4 k-tiles on 3 stages, so slots and phases straddle tiles); capped at 8, one
    // work-group per tile. Every transpose, with and without an epilogue, and with the
    // register budgets set.
    let bias = vals(136, 7);
    for (ta, tb) in TRANSPOSES {
        for (groups, setmaxnreg) in [(4, false), (8, true)] {
            let mut p = problem(200, 136, 200, Scalar::BF16, Scalar::F32);
            (p.trans_a, p.trans_b) = (ta, tb);
            let cfg = Tc90Config { bn: 64, stages: 3, persistent: groups, setmaxnreg };
            let g = generate(&p, &cfg).unwrap();
            assert_eq!(g.global, [if groups == 4 { 3 } else { 6 } * 384, 1], "{cfg}");
            check(&p, cfg, vec![], |_, _, x| x);
            p.epilogue = Epilogue(vec![EpOp::Bias, EpOp::Relu]);
            let b = bias.clone();
            check(&p, cfg, vec![Buffer::from_slice(&bias)], move |_, j, x| (x + b[j]).max(0.0));
        }
    }
    // One work-group for every tile (the ring's parity flips across many tiles), f16 out.
    let cfg = Tc90Config { bn: 64, stages: 2, persistent: 1, setmaxnreg: false };
    check(&problem(131, 72, 40, Scalar::F16, Scalar::F16), cfg, vec![], |_, _, x| x);
}

#[test]
fn persistent_tiles_follow_the_raster() {
    // 16 block rows of 128 and 2 columns: tiles are walked in bands of 8 block rows, here by
    // 5 work-groups (32 tiles: some compute 7, some 6).
    let p = problem(2048, 128, 24, Scalar::BF16, Scalar::F32);
    let cfg = Tc90Config { bn: 64, stages: 2, persistent: 5, setmaxnreg: false };
    check(&p, cfg, vec![], |_, _, x| x);
}

#[test]
fn persistent_and_setmaxnreg_kernels_assemble_for_sm_90a() {
    // Each option alone and both: the kernel carries its budgets (`setmaxnreg` and the entry
    // declaration ptxas needs to honour them) and its tile loop; ptxas accepts it for sm_90a
    // and does not ignore the budgets.
    let ptxas = kiln_ir::testing::tool("KILN_PTXAS");
    let dir = std::env::temp_dir().join(format!("kiln-tc90p-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (persistent, setmaxnreg) in [(132, false), (0, true), (132, true)] {
        let mut p = problem(4096, 4096, 4096, Scalar::BF16, Scalar::BF16);
        p.epilogue = Epilogue(vec![EpOp::Bias, EpOp::Relu]);
        let cfg = Tc90Config { persistent, setmaxnreg, ..Tc90Config::default() };
        let g = generate(&p, &cfg).unwrap();
        // 512 tiles on at most 132 work-groups take 4 rounds: 128 work-groups run them.
        let tiles = 32 * 16;
        let groups = if persistent > 0 { 128 } else { 16 };
        assert_eq!(g.global, [groups * 384, if persistent > 0 { 1 } else { 32 }], "{cfg}");
        let ptx = kiln_backends::ptx::emit_kernel(&g.kernel, &kiln_backends::ptx::Options::sm(90))
            .unwrap_or_else(|e| panic!("{cfg}: {e}"));
        assert_eq!(ptx.contains("setmaxnreg.dec.sync.aligned.u32 40;"), setmaxnreg, "{cfg}");
        assert_eq!(ptx.contains("setmaxnreg.inc.sync.aligned.u32 232;"), setmaxnreg, "{cfg}");
        assert_eq!(ptx.contains(".minnctapersm 1"), setmaxnreg, "{cfg}");
        let text = g.kernel.to_string();
        assert_eq!(text.contains(&format!(".. {tiles} step 128 {{")), persistent > 0, "{text}");
        let Some(ptxas) = &ptxas else { continue };
        let f = dir.join(format!("p{persistent}_{setmaxnreg}.ptx"));
        std::fs::write(&f, &ptx).unwrap();
        let out = std::process::Command::new(ptxas)
            .args(["--gpu-name=sm_90a", "-v"])
            .arg(&f)
            .arg("-o")
            .arg(f.with_extension("cubin"))
            .output()
            .expect("run ptxas");
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{cfg}: {log}");
        assert!(!log.contains("C7508"), "{cfg}: {log}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
