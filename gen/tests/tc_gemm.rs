//! Tensor-core GEMM kernels (kiln_gen::tc) on the interpreter: all transpositions, f16 and
//! bf16 inputs, f32/f16/bf16 outputs, odd sizes (masked edge tiles), the aligned path of
//! asynchronous copies, and fused epilogues against the same operations run one kernel after
//! another. On the interpreter the f32 product is the sequential sum over k (docs/matrix.md),
//! so every comparison here is bit for bit.

mod common;

use common::tc::{buffer, round, to_f32, vals};
use kiln_gen::tc_epilogue::elementwise_kernel;
use kiln_gen::{EpOp, Epilogue, TcConfig, TcGemmProblem};
use kiln_ir::interp::{run, run_with, RunOptions};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Kernel, Scalar};

/// The sequential f32 product `sum_k a[i][k] * b[k][j]` (products exact), A and B as stored.
fn reference(p: &TcGemmProblem, a: &[f32], b: &[f32]) -> Vec<f32> {
    let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
    let at = |i: usize, l: usize| if p.trans_a { a[l * m + i] } else { a[i * k + l] };
    let bt = |l: usize, j: usize| if p.trans_b { b[j * k + l] } else { b[l * n + j] };
    let mut out = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let mut s = 0.0f32;
            for l in 0..k {
                s += at(i, l) * bt(l, j);
            }
            out[i * n + j] = s;
        }
    }
    out
}

fn run_kernel(k: &Kernel, r: &NdRange, args: &[Arg], bufs: &mut [Buffer], reverse: bool) {
    let opts = RunOptions { reverse_order: reverse, ..RunOptions::default() };
    run_with(k, r, args, bufs, &opts).unwrap_or_else(|e| panic!("{}: {e}", k.name()));
}

/// Runs the generated kernel on A, B (values `a`, `b`) and the epilogue's operands; returns
/// C as f32 values. Also runs it in the interpreter's reverse schedule, which must give the
/// same bits (a missing barrier around the local tiles would show).
fn run_tc(p: &TcGemmProblem, cfg: &TcConfig, a: &[f32], b: &[f32], extra: &Extra) -> Vec<f32> {
    let g = p.generate(cfg).unwrap_or_else(|e| panic!("{p:?} {cfg}: {e}"));
    // Every generated kernel prints and parses back.
    let text = kiln_ir::Module::new(vec![g.kernel.clone()]).to_string();
    let parsed = kiln_ir::parse_module(&text).unwrap_or_else(|e| panic!("{e:?}\n{text}"));
    assert!(parsed.kernels[0].is_equal(&g.kernel), "round trip of {}", g.kernel.name());
    let [_, _, ec] = g.buffer_elems;
    let mut results: Vec<Buffer> = Vec::new();
    for reverse in [false, true] {
        let mut bufs = vec![buffer(p.ty, a), buffer(p.ty, b), Buffer::zeroed(p.out, ec)];
        let mut args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
        for op in &p.epilogue.0 {
            match op {
                EpOp::Bias => {
                    bufs.push(buffer(Scalar::F32, &extra.bias));
                    args.push(Arg::Buffer(bufs.len() - 1));
                }
                EpOp::Add => {
                    bufs.push(buffer(p.out, &extra.res));
                    args.push(Arg::Buffer(bufs.len() - 1));
                }
                EpOp::Scale => args.push(Arg::scalar(extra.alpha)),
                EpOp::Relu | EpOp::Gelu => {}
            }
        }
        run_kernel(&g.kernel, &g.range(), &args, &mut bufs, reverse);
        results.push(bufs.swap_remove(2));
    }
    assert_eq!(
        results[0].as_bytes(),
        results[1].as_bytes(),
        "schedule-dependent result:\n{}",
        g.kernel
    );
    to_f32(&results[0])
}

/// The epilogue's operands.
struct Extra {
    bias: Vec<f32>,
    res: Vec<f32>,
    alpha: f32,
}

impl Extra {
    fn new(p: &TcGemmProblem) -> Extra {
        let (m, n) = (p.m as usize, p.n as usize);
        let res = vals(m * n, 7).into_iter().map(|x| round(p.out, x)).collect();
        Extra { bias: vals(n, 5), res, alpha: 0.75 }
    }
}

fn small() -> TcConfig {
    TcConfig { bm: 32, bn: 32, bk: 32, warps_m: 1, warps_n: 2, stages: 3 }
}

fn check_plain(p: &TcGemmProblem, cfg: &TcConfig) {
    let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
    let a: Vec<f32> = vals(m * k, 1);
    let b: Vec<f32> = vals(k * n, 2);
    let got = run_tc(p, cfg, &a, &b, &Extra::new(p));
    let want: Vec<f32> = reference(p, &a, &b).into_iter().map(|x| round(p.out, x)).collect();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.to_bits(), w.to_bits(), "{} {cfg}: element {i}: {g} != {w}", p.name());
    }
}

#[test]
fn tc_gemm_all_transposes_odd_sizes() {
    for (ty, out) in [(Scalar::F16, Scalar::F32), (Scalar::BF16, Scalar::BF16)] {
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            let p = TcGemmProblem {
                trans_a: ta,
                trans_b: tb,
                out,
                ..TcGemmProblem::new(37, 29, 45, ty)
            };
            check_plain(&p, &small());
        }
    }
}

#[test]
fn tc_gemm_aligned_sizes_use_async_copies() {
    // Full tiles everywhere: every tile copy is a 16-byte copy_async.
    let p = TcGemmProblem { out: Scalar::F16, ..TcGemmProblem::new(64, 64, 96, Scalar::BF16) };
    let cfg = TcConfig { bm: 64, bn: 32, bk: 32, warps_m: 2, warps_n: 1, stages: 4 };
    let g = p.generate(&cfg).unwrap();
    let text = g.kernel.to_string();
    // No element-by-element path (an `if`/`else` that zero-fills past the edges).
    assert!(text.contains("copy_async(") && !text.contains("else"), "{text}");
    check_plain(&p, &cfg);
    // Row lengths that are not multiples of 8 cannot use 16-byte copies: plain loads.
    let odd = TcGemmProblem { trans_b: true, ..TcGemmProblem::new(16, 9, 13, Scalar::F16) };
    let g = odd.generate(&small()).unwrap();
    assert!(!g.kernel.to_string().contains("copy_async("));
    check_plain(&odd, &small());
}

#[test]
fn tc_gemm_fewer_k_tiles_than_stages() {
    // K = 16 is one tile; the prologue's later stages copy nothing.
    let p = TcGemmProblem { trans_a: true, ..TcGemmProblem::new(20, 40, 16, Scalar::F16) };
    let cfg = TcConfig { bm: 32, bn: 64, bk: 16, warps_m: 2, warps_n: 1, stages: 4 };
    check_plain(&p, &cfg);
}

/// The fused epilogue gives the bits of the GEMM (f32 output) followed by one element-wise
/// kernel per operation and the final conversion.
fn check_fused(p: &TcGemmProblem) {
    let cfg = small();
    let (m, n, k) = (p.m as usize, p.n as usize, p.k as usize);
    let a = vals(m * k, 3);
    let b = vals(k * n, 4);
    let extra = Extra::new(p);
    let fused = run_tc(p, &cfg, &a, &b, &extra);

    let plain = TcGemmProblem { out: Scalar::F32, epilogue: Epilogue::default(), ..p.clone() };
    let g = plain.generate(&cfg).unwrap();
    let mut bufs = vec![
        buffer(p.ty, &a),
        buffer(p.ty, &b),
        Buffer::zeroed(Scalar::F32, m * n),
        buffer(Scalar::F32, &extra.bias),
        buffer(p.out, &extra.res),
        Buffer::zeroed(p.out, m * n),
    ];
    run(&g.kernel, &g.range(), &[Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)], &mut bufs)
        .unwrap();
    let product = to_f32(&bufs[2]);
    for op in p.epilogue.0.iter().copied().map(Some).chain([None]) {
        let kern = elementwise_kernel(op, p.m, p.n, p.out);
        kiln_ir::verify_kernel(&kern).unwrap();
        let mut args = vec![Arg::Buffer(2)];
        match op {
            Some(EpOp::Bias) => args.push(Arg::Buffer(3)),
            Some(EpOp::Add) => args.push(Arg::Buffer(4)),
            Some(EpOp::Scale) => args.push(Arg::scalar(extra.alpha)),
            None => args.push(Arg::Buffer(5)),
            _ => {}
        }
        let nd = kern.attrs().nd_range.clone().unwrap();
        let r = NdRange::new(&nd.global).with_local(nd.local.as_ref().unwrap());
        run(&kern, &r, &args, &mut bufs).unwrap();
    }
    let unfused = to_f32(&bufs[5]);
    for (i, (f, u)) in fused.iter().zip(&unfused).enumerate() {
        assert_eq!(f.to_bits(), u.to_bits(), "{}: element {i}: fused {f} != unfused {u}", p.name());
    }
    // And the epilogue did something: the result is not the plain product.
    assert!(unfused.iter().zip(&product).any(|(x, y)| x != y));
}

#[test]
fn tc_gemm_fused_epilogues_equal_unfused() {
    let ep = |s: &str| Epilogue::parse(s).unwrap();
    check_fused(&TcGemmProblem {
        out: Scalar::BF16,
        epilogue: ep("bias,relu,scale"),
        ..TcGemmProblem::new(33, 40, 24, Scalar::BF16)
    });
    check_fused(&TcGemmProblem {
        trans_b: true,
        out: Scalar::F32,
        epilogue: ep("bias,gelu,add"),
        ..TcGemmProblem::new(19, 35, 40, Scalar::F16)
    });
}

#[test]
fn tc_gemm_refusals_name_the_problem() {
    let err = |p: TcGemmProblem, cfg: TcConfig| p.generate(&cfg).unwrap_err();
    let e = err(TcGemmProblem::new(16, 16, 16, Scalar::F32), TcConfig::default());
    assert!(e.contains("must be f16 or bf16"), "{e}");
    let e = err(TcGemmProblem::new(16, 0, 16, Scalar::F16), TcConfig::default());
    assert!(e.contains("N = 0"), "{e}");
    let e = err(
        TcGemmProblem::new(16, 16, 16, Scalar::F16),
        TcConfig { bk: 24, ..TcConfig::default() },
    );
    assert!(e.contains("multiple of 16"), "{e}");
    let e = err(
        TcGemmProblem::new(16, 16, 16, Scalar::F16),
        TcConfig { stages: 1, ..TcConfig::default() },
    );
    assert!(e.contains("stages"), "{e}");
    let e = Epilogue::parse("bias,tanh").unwrap_err();
    assert!(e.contains("`tanh`"), "{e}");
    let e = Epilogue::parse("bias,relu,bias").unwrap_err();
    assert!(e.contains("twice"), "{e}");
    for cfg in TcConfig::candidates(4096, 4096, 4096).iter().chain(&TcConfig::candidates(5, 7, 9)) {
        cfg.validate().unwrap();
    }
}

/// Emits the kernel for sm_80 and, with `KILN_PTXAS`, assembles it for sm_80 and sm_90a.
fn ptx_assembles(p: &TcGemmProblem, cfg: &TcConfig) -> String {
    let g = p.generate(cfg).unwrap_or_else(|e| panic!("{p:?} {cfg}: {e}"));
    let ptx = kiln_backends::ptx::emit_kernel(&g.kernel, &kiln_backends::ptx::Options::sm(80))
        .unwrap_or_else(|e| panic!("ptx: {e}\n{}", g.kernel));
    if let Some(ptxas) = kiln_ir::testing::tool("KILN_PTXAS") {
        let dir = std::env::temp_dir().join(format!("kiln-tc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join(format!("{}_{}.ptx", g.kernel.name(), cfg.stages));
        std::fs::write(&f, &ptx).unwrap();
        for arch in ["sm_80", "sm_90a"] {
            let out = std::process::Command::new(&ptxas)
                .arg(format!("-arch={arch}"))
                .arg(&f)
                .arg("-o")
                .arg(f.with_extension(format!("{arch}.cubin")))
                .output()
                .expect("run ptxas");
            assert!(
                out.status.success(),
                "ptxas {arch}: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                g.kernel.name()
            );
        }
    }
    ptx
}

#[test]
fn tc_gemm_ptx_uses_mma_ldmatrix_and_cp_async() {
    // The benchmark's kernel (default blocking, aligned sizes) and an odd, transposed one.
    let big = TcGemmProblem {
        out: Scalar::BF16,
        epilogue: Epilogue::parse("bias,relu,scale").unwrap(),
        ..TcGemmProblem::new(4096, 4096, 4096, Scalar::BF16)
    };
    let ptx = ptx_assembles(&big, &TcConfig::default());
    for form in ["mma.sync.aligned.m16n8k16", "ldmatrix.sync.aligned", "cp.async", ".target sm_80"]
    {
        assert!(ptx.contains(form), "no `{form}` in the PTX");
    }
    let odd = TcGemmProblem {
        trans_a: true,
        trans_b: true,
        ..TcGemmProblem::new(37, 29, 45, Scalar::F16)
    };
    let ptx = ptx_assembles(&odd, &small());
    assert!(ptx.contains("ldmatrix.sync.aligned") && ptx.contains(".trans"));
}

#[test]
fn tc_gemm_deep_pipelines_use_dynamic_shared_memory() {
    // 128x128x32 with 3 and 4 stages needs more than 48 KiB of local memory: the PTX takes
    // it from a dynamic window whose size it names, and ptxas accepts it.
    let p = TcGemmProblem::new(4096, 4096, 4096, Scalar::BF16);
    for stages in [3, 4] {
        let cfg = TcConfig { stages, ..TcConfig::default() };
        let g = p.generate(&cfg).unwrap();
        // The window: every array of the kernel, within the blocking's (upper-bound) count.
        let bytes = kiln_backends::ptx::dynamic_shared_bytes(&g.kernel);
        assert!(bytes > 48 * 1024 && bytes <= cfg.local_bytes() as u64, "{cfg}: {bytes}");
        let ptx = ptx_assembles(&p, &cfg);
        let name = g.kernel.name().to_string();
        assert!(ptx.contains(&format!("// kiln.dynamic_shared_bytes {name} {bytes}\n")), "{cfg}");
        assert!(ptx.contains(".extern .shared"), "{cfg}");
    }
    // The default blocking still fits static shared memory (no launch setup).
    let ptx = ptx_assembles(&p, &TcConfig::default());
    assert!(!ptx.contains(".extern .shared") && !ptx.contains("kiln.dynamic_shared_bytes"));
}

#[test]
fn tc_gemm_banded_block_order_covers_c_once() {
    // 16 block rows (two bands of 8) by 3 block columns: the work-groups walk C band by band;
    // every element is still computed once, with the plain product's bits.
    let p = TcGemmProblem { out: Scalar::BF16, ..TcGemmProblem::new(512, 96, 16, Scalar::F16) };
    let cfg = TcConfig { bk: 16, ..small() };
    let text = p.generate(&cfg).unwrap().kernel.to_string();
    assert!(text.contains("/ 24"), "the band walk (8 rows x 3 columns):\n{text}");
    check_plain(&p, &cfg);
}

#[test]
fn tc_gemm_k_loop_has_no_divisions_or_per_load_lane_math() {
    // Power-of-two blockings index with shifts and masks: ptxas expands a signed division by
    // a constant into a reciprocal sequence, which dominated the k-loop's integer work.
    let p =
        TcGemmProblem { out: Scalar::BF16, ..TcGemmProblem::new(4096, 4096, 4096, Scalar::BF16) };
    let g = p.generate(&TcConfig::default()).unwrap();
    let text = g.kernel.to_string();
    assert!(!text.contains(" / ") && !text.contains(" % "), "{text}");
    // `ldmatrix` lane offsets (constant strides) are computed once at entry: one `%laneid`
    // read per (stride, width) plus the epilogue's 8 fragment stores (m16n16k16), not one
    // per load.
    let ptx = ptx_assembles(&p, &TcConfig::default());
    assert_eq!(ptx.matches("%laneid").count(), 2 + 8, "{ptx}");
    // The results keep the plain product's bits (shifts equal divisions on these indices).
    check_plain(&TcGemmProblem::new(64, 64, 64, Scalar::F16), &TcConfig { stages: 2, ..small() });
}

#[test]
fn tc_gemm_pipelines_of_every_depth_and_fragment_width() {
    // Fragments are loaded a k-step ahead across tiles and every slot is in flight at once:
    // stage counts 2 to 4, k-tiles of 1 to 3 k-steps (odd counts too), more tiles than
    // stages, and both fragment widths (m16n16k16 where the warp's tile is a multiple of 16
    // wide, m16n8k16 for 24), each with the sequential product's bits in both schedules.
    let p = TcGemmProblem { out: Scalar::BF16, ..TcGemmProblem::new(64, 96, 208, Scalar::BF16) };
    for (bn, wn, bk, stages) in [(32, 2, 16, 2), (48, 2, 48, 3), (32, 1, 32, 4), (96, 2, 16, 3)] {
        let cfg = TcConfig { bm: 32, bn, bk, warps_m: 2, warps_n: wn, stages };
        check_plain(&p, &cfg);
        let t = TcGemmProblem { trans_a: true, trans_b: true, ..p.clone() };
        check_plain(&t, &cfg);
    }
    // The deepest 128x256 pipeline fits the 227 KiB with one staging chunk per warp.
    let deep = TcConfig { bm: 128, bn: 256, bk: 64, warps_m: 2, warps_n: 4, stages: 4 };
    deep.validate().unwrap();
    assert!(deep.local_bytes() <= kiln_gen::tc::MAX_LOCAL_BYTES, "{}", deep.local_bytes());
    // The default blocking stages its epilogue through one chunk per warp (two would take
    // it past static shared memory): the two-barrier path.
    check_plain(&TcGemmProblem::new(128, 128, 32, Scalar::F16), &TcConfig::default());
}

#[test]
fn tc_gemm_k_loop_loads_fragments_ahead_and_b_in_pairs() {
    let p =
        TcGemmProblem { out: Scalar::BF16, ..TcGemmProblem::new(4096, 4096, 4096, Scalar::BF16) };
    let cfg = TcConfig { bm: 128, bn: 128, bk: 64, warps_m: 2, warps_n: 2, stages: 3 };
    let g = p.generate(&cfg).unwrap();
    let text = g.kernel.to_string();
    // The first k-step's fragments are loaded before the loop: the loop's barrier is not
    // a stall with no fragments in registers.
    let before = &text[..text.find("for kt").expect("the k-loop")];
    assert!(before.contains("frag_load("), "{text}");
    // The tile copies in the loop use offsets computed once per work-item before it.
    let inside = &text[text.find("for kt").unwrap()..];
    let copies: Vec<&str> = inside.lines().filter(|l| l.contains("copy_async(")).collect();
    assert!(!copies.is_empty() && copies.iter().all(|l| l.contains("_dst") && l.contains("_src")));
    // Every B fragment (64-wide warp tile) is two n-blocks: one `ldmatrix.x4`, no `.x2`.
    let ptx = ptx_assembles(&p, &cfg);
    assert!(ptx.contains("ldmatrix.sync.aligned.m8n8.x4.trans"), "{ptx}");
    assert!(!ptx.contains(".x2"), "{ptx}");
    // The four A (and B) loads of a warp and k-step share one address register, their
    // offsets in the instruction's immediate: three of every four carry one.
    let loads: Vec<&str> = ptx.lines().filter(|l| l.contains("ldmatrix")).collect();
    let with_imm = loads.iter().filter(|l| l.contains("+")).count();
    assert!(4 * with_imm >= 3 * loads.len(), "{with_imm} of {}:\n{ptx}", loads.len());
}
