//! The tensor-core GEMM's epilogue built by kiln's epilogue fusion (the GEMM and one
//! element-wise kernel per operation, `kiln_gen::tc_epilogue::fusion_list`) against the
//! generator's own fused epilogue: the same bits on the interpreter, and PTX of the same
//! shape that ptxas accepts.

mod common;

use common::tc::buffer;
use kiln_gen::tc_epilogue::fusion_list;
use kiln_gen::{EpOp, Epilogue, TcConfig, TcGemmProblem};
use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer};
use kiln_ir::Scalar;
use kiln_passes::fusion::{fuse_kernels, ArgMap};

fn vals(n: usize, seed: u64) -> Vec<f32> {
    (0..n).map(|i| ((i as u64 * 11 + seed * 7) % 32) as f32 / 8.0 - 2.0).collect()
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

// ---- random GEMMs and chains -------------------------------------------------------------

use kiln_gen::tc_epilogue::elementwise_kernel;
use kiln_gen::{GemmConfig, GemmProblem};
use kiln_passes::fusion::{ConstValue, Constant, FusionSpec, ParamRef, RangeSpec};
use proptest::prelude::*;

/// A chain of operations from indices into [`EpOp::ALL`], each operation with a parameter
/// at most once (its parameter would be ambiguous).
fn chain_of(ix: &[usize]) -> Epilogue {
    let mut ops: Vec<EpOp> = Vec::new();
    for &i in ix {
        let op = EpOp::ALL[i % EpOp::ALL.len()];
        if op.param(Scalar::F32).is_none() || !ops.contains(&op) {
            ops.push(op);
        }
    }
    Epilogue(ops)
}

/// The fp32 tiled GEMM of `kiln_gen` followed by the element-wise kernels of `ep`, fused by
/// epilogue fusion, against the kernels one after another on the interpreter.
fn tiled_gemm_chain(p: GemmProblem, cfg: GemmConfig, ep: &Epilogue) -> Result<(), String> {
    let g = p.generate(&cfg)?;
    let (m, n) = (p.m, p.n);
    let mut kernels = vec![g.kernel.clone()];
    kernels.extend(ep.0.iter().map(|&op| elementwise_kernel(Some(op), m, n, Scalar::F32)));
    let range = |k: &kiln_ir::Kernel, r: kiln_ir::launch::NdRange| {
        let r = k.attrs().nd_range.as_ref().map_or(r, |nd| {
            kiln_ir::launch::NdRange::new(&nd.global).with_local(nd.local.as_deref().unwrap_or(&[]))
        });
        let s = RangeSpec::new(&r.global[..r.dims]);
        match r.local {
            Some(l) => s.with_local(&l[..r.dims]),
            None => s,
        }
    };
    let gemm_range = g.range();
    let ndranges: Vec<RangeSpec> = kernels.iter().map(|k| range(k, gemm_range)).collect();
    let mut y = vec![ParamRef::new(0, 2)];
    y.extend((1..kernels.len()).map(|e| ParamRef::new(e, 0)));
    let spec = FusionSpec {
        name: "gemm_chain".into(),
        kernels: kernels.iter().map(|k| k.name().to_string()).collect(),
        ndranges: ndranges.clone(),
        identical: vec![y],
        // beta = 0: the GEMM does not read C (the proof evaluates its `beta == 0` branch).
        constants: vec![Constant { param: ParamRef::new(0, 4), value: ConstValue::Float(0.0) }],
        epilogue: true,
        ..FusionSpec::default()
    };
    let mut distinct: Vec<kiln_ir::Kernel> = Vec::new();
    for k in &kernels {
        if !distinct.iter().any(|d| d.name() == k.name()) {
            distinct.push(k.clone());
        }
    }
    let module = kiln_ir::Module::new(distinct);
    let [ea, eb, ec] = g.buffer_elems;
    let pool = vec![
        Buffer::from_slice(&vals(ea, 1)),
        Buffer::from_slice(&vals(eb, 2)),
        Buffer::zeroed(Scalar::F32, ec),
        Buffer::from_slice(&vals(n as usize, 3)),
        Buffer::from_slice(&vals(ec, 4)),
    ];
    let lists: Vec<Vec<Arg>> = std::iter::once(vec![
        Arg::Buffer(0),
        Arg::Buffer(1),
        Arg::Buffer(2),
        Arg::scalar(1.25f32),
        Arg::scalar(0.0f32),
    ])
    .chain(ep.0.iter().map(|&op| [Arg::Buffer(2)].into_iter().chain(op_arg(op)).collect()))
    .collect();
    let mut want = pool.clone();
    for (k, (args, r)) in kernels.iter().zip(lists.iter().zip(&ndranges)) {
        let mut nd = kiln_ir::launch::NdRange::new(&r.global);
        if let Some(l) = &r.local {
            nd = nd.with_local(l);
        }
        run(k, &nd, args, &mut want).map_err(|e| e.to_string())?;
    }
    let f = kiln_passes::fusion::fuse_kernels(&module, &spec).map_err(|e| e.to_string())?;
    let bound = f.bind_args(&module, &spec, &lists).map_err(|e| e.to_string())?;
    let mut got = pool;
    run(&f.kernel, &f.range, &bound, &mut got).map_err(|e| format!("{e}\n{}", f.kernel))?;
    if got[2].as_bytes() != want[2].as_bytes() {
        return Err(format!("fused result differs:\n{}", f.kernel));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10, ..ProptestConfig::default() })]

    /// The fp32 tiled GEMM (random odd shapes, transposes and blockings) followed by a
    /// random element-wise chain over its output, rounded up to 256 work-items.
    #[test]
    fn tiled_gemm_with_random_chain_equals_one_after_another(
        m in 1i64..20, n in 1i64..20, k in 1i64..12,
        trans_a in any::<bool>(), trans_b in any::<bool>(),
        wg in prop::sample::select(vec![2u32, 4, 8]), tm in 1u32..3, tn in 1u32..3,
        depth in 1u32..3,
        ops in prop::collection::vec(0usize..5, 1..4),
    ) {
        let p = GemmProblem { m, n, k, trans_a, trans_b, ty: Scalar::F32 };
        let cfg = GemmConfig { wg_m: wg, wg_n: wg, tm, tn, k_tile: 4, slm_depth: depth, ..GemmConfig::default() };
        tiled_gemm_chain(p, cfg, &chain_of(&ops)).map_err(TestCaseError::fail)?;
    }

    /// The tensor-core GEMM (random odd shapes, transposes, output types) with a random
    /// epilogue: the fusion-built kernel gives the generator's bits.
    #[test]
    fn tc_gemm_with_random_epilogue_equals_the_generators(
        m in 1i64..40, n in 1i64..40, k in 1i64..40,
        trans_a in any::<bool>(), trans_b in any::<bool>(),
        out in prop::sample::select(vec![Scalar::F32, Scalar::BF16]),
        ops in prop::collection::vec(0usize..5, 1..4),
    ) {
        check(&TcGemmProblem { trans_a, trans_b, out, epilogue: chain_of(&ops), ..TcGemmProblem::new(m, n, k, Scalar::BF16) });
    }
}
