//! The tensor-core GEMM's epilogue built by kiln's epilogue fusion (the GEMM and one
//! element-wise kernel per operation, `kiln_gen::tc_epilogue::fusion_list`) against the
//! generator's own fused epilogue: the same bits on the interpreter, and PTX of the same
//! shape that ptxas accepts.

use half::bf16;
use kiln_gen::tc_epilogue::fusion_list;
use kiln_gen::{EpOp, Epilogue, TcConfig, TcGemmProblem};
use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer};
use kiln_ir::Scalar;
use kiln_passes::fusion::{fuse_kernels, ArgMap};

fn vals(n: usize, seed: u64) -> Vec<f32> {
    (0..n).map(|i| ((i as u64 * 11 + seed * 7) % 32) as f32 / 8.0 - 2.0).collect()
}

fn buffer(ty: Scalar, v: &[f32]) -> Buffer {
    match ty {
        Scalar::F32 => Buffer::from_slice(v),
        Scalar::BF16 => {
            Buffer::from_slice(&v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>())
        }
        Scalar::F16 => {
            Buffer::from_slice(&v.iter().map(|&x| half::f16::from_f32(x)).collect::<Vec<_>>())
        }
        t => panic!("{t}"),
    }
}

fn small() -> TcConfig {
    TcConfig { bm: 32, bn: 32, bk: 32, warps_m: 1, warps_n: 2, stages: 3 }
}

/// The pool: a, b, c (output type), bias, res (output type); alpha 0.75.
fn pool(p: &TcGemmProblem) -> Vec<Buffer> {
    let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
    vec![
        buffer(p.ty, &vals(m * k, 1)),
        buffer(p.ty, &vals(k * n, 2)),
        Buffer::zeroed(p.out, m * n),
        buffer(Scalar::F32, &vals(n, 3)),
        buffer(p.out, &vals(m * n, 4)),
    ]
}

fn op_arg(op: EpOp) -> Option<Arg> {
    match op {
        EpOp::Bias => Some(Arg::Buffer(3)),
        EpOp::Add => Some(Arg::Buffer(4)),
        EpOp::Scale => Some(Arg::scalar(0.75f32)),
        EpOp::Relu | EpOp::Gelu => None,
    }
}

fn ptx_lines(k: &kiln_ir::Kernel) -> (usize, String) {
    let ptx = kiln_backends::ptx::emit_kernel(k, &kiln_backends::ptx::Options::sm(80))
        .unwrap_or_else(|e| panic!("ptx: {e}\n{k}"));
    if let Some(ptxas) = kiln_ir::testing::tool("KILN_PTXAS") {
        let dir = std::env::temp_dir().join(format!("kiln-tc-epi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join(format!("{}.ptx", k.name()));
        std::fs::write(&f, &ptx).unwrap();
        let out = std::process::Command::new(&ptxas)
            .args(["-arch=sm_80", f.to_str().unwrap(), "-o"])
            .arg(f.with_extension("cubin"))
            .output()
            .expect("run ptxas");
        assert!(out.status.success(), "ptxas: {}", String::from_utf8_lossy(&out.stderr));
    }
    let insts = ptx
        .lines()
        .filter(|l| l.trim_end().ends_with(';') && !l.trim_start().starts_with('.'))
        .count();
    (insts, ptx)
}

/// The generator's fused kernel and the one kiln's fusion builds give the same bits.
fn check(p: &TcGemmProblem) {
    let cfg = small();
    let g = p.generate(&cfg).unwrap();
    let mut want = pool(p);
    let mut args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
    args.extend(p.epilogue.0.iter().filter_map(|&o| op_arg(o)));
    run(&g.kernel, &g.range(), &args, &mut want).unwrap();

    let (module, spec) = fusion_list(p, &cfg).unwrap();
    let f = fuse_kernels(&module, &spec).unwrap_or_else(|e| panic!("{}: {e}", p.name()));
    // Arguments as the list is launched: gemm(a, b, y), ops(y, param), cvt(y, c).
    let y = if p.out == Scalar::F32 { Arg::Buffer(2) } else { Arg::Buffer(5) };
    let mut lists = vec![vec![Arg::Buffer(0), Arg::Buffer(1), y.clone()]];
    for &op in &p.epilogue.0 {
        lists.push([y.clone()].into_iter().chain(op_arg(op)).collect());
    }
    if p.out != Scalar::F32 {
        lists.push(vec![y.clone(), Arg::Buffer(2)]);
        // The f32 intermediate is internalized: never passed.
        assert_eq!(
            f.args[0][2],
            ArgMap::Promoted { to: kiln_passes::fusion::PromoteTo::Private, size: 1 }
        );
    }
    let bound = f.bind_args(&module, &spec, &lists).unwrap();
    let mut got = pool(p);
    got.push(Buffer::zeroed(Scalar::F32, 1));
    run(&f.kernel, &f.range, &bound, &mut got).unwrap_or_else(|e| panic!("{e}\n{}", f.kernel));
    assert_eq!(got[2].as_bytes(), want[2].as_bytes(), "{}:\n{}", p.name(), f.kernel);
    // The epilogue did something.
    assert_ne!(want[2].as_bytes(), Buffer::zeroed(p.out, (p.m * p.n) as usize).as_bytes());

    let (gen_insts, _) = ptx_lines(&g.kernel);
    let (fused_insts, ptx) = ptx_lines(&f.kernel);
    assert!(ptx.contains("mma.sync.aligned.m16n8k16") && ptx.contains("ldmatrix"), "{ptx}");
    eprintln!(
        "{}: PTX instructions: generator {gen_insts}, epilogue fusion {fused_insts}",
        p.name()
    );
}

#[test]
fn fusion_built_epilogue_equals_the_generators() {
    let ep = |s: &str| Epilogue::parse(s).unwrap();
    check(&TcGemmProblem {
        out: Scalar::BF16,
        epilogue: ep("bias,relu,scale"),
        ..TcGemmProblem::new(33, 40, 24, Scalar::BF16)
    });
    check(&TcGemmProblem {
        trans_b: true,
        out: Scalar::F32,
        epilogue: ep("bias,gelu,add"),
        ..TcGemmProblem::new(19, 35, 40, Scalar::F16)
    });
    check(&TcGemmProblem {
        out: Scalar::BF16,
        epilogue: ep("bias,relu,scale"),
        ..TcGemmProblem::new(64, 64, 32, Scalar::BF16)
    });
}
