//! Differential tests: the wave64 simulator running the AMDGPU backend's code must reproduce
//! the reference interpreter's buffers.

use kiln_backends::amdgpu::{compile, compile_with, sim};
use kiln_backends::target::ErrorKind;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::{arb_kernel_with, results_match, GenConfig, TestCase};
use std::collections::HashSet;

mod amdgpu_common;
use amdgpu_common::{assert_assembles, gen_case, kernel};
use kiln_passes::divergence::analyze_with;
use proptest::prelude::*;
use proptest::strategy::ValueTree;

fn simulate(c: &kiln_backends::amdgpu::Compiled, case: &TestCase) -> Result<Vec<Buffer>, String> {
    let mut bufs = case.buffers.clone();
    sim::run(c, &case.kernel, &case.range, &case.args, &mut bufs)?;
    Ok(bufs)
}

/// Compiles and simulates; compares with the interpreter. Ok(false) if rejected.
fn differential(case: &TestCase) -> Result<bool, String> {
    let c = match compile(&case.kernel) {
        Ok(c) => c,
        Err(e) if e.kind == ErrorKind::Unsupported => return Ok(false),
        Err(e) => return Err(e.to_string()),
    };
    let want = case.run().map_err(|e| e.to_string())?;
    let got = simulate(&c, case).map_err(|e| format!("{e}\n{}\n{}", case.kernel, c.asm))?;
    results_match(&want, &got).map_err(|e| format!("{e}\n{}\n{}", case.kernel, c.asm))?;
    Ok(true)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("AMDGPU_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(64), ..ProptestConfig::default() })]
    #[test]
    fn simulator_matches_interpreter_on_random_subset_kernels(seed in any::<u64>()) {
        let case = gen_case(seed);
        let r = differential(&case);
        prop_assert!(r == Ok(true), "{:?}", r);
        assert_assembles(&compile(&case.kernel).unwrap().asm);
    }
}

/// A planted miscompile: the analysis is forced to call the divergent `lid` uniform. The
/// backend then keeps it in an SGPR (via `v_readfirstlane_b32`), and the differential test
/// must catch the wrong results, on a fixed kernel and on most random ones.
#[test]
fn planted_miscompile_is_caught() {
    let case = gen_case(7);
    let lid = case.kernel.body().stmts().iter().find_map(|s| match s.node() {
        kiln_ir::StmtNode::Let { var, .. } if var.name() == "lid" => Some(var.clone()),
        _ => None,
    });
    let forced: HashSet<_> = lid.into_iter().collect();
    let mut caught = 0;
    for seed in 0..40u64 {
        let case = gen_case(seed * 7919 + 1);
        assert_eq!(differential(&case), Ok(true), "honest compile must match");
        let div = analyze_with(&case.kernel, &forced);
        let c = compile_with(&case.kernel, &div).unwrap();
        let want = case.run().unwrap();
        let got = simulate(&c, &case);
        if got.is_err() || results_match(&want, &got.unwrap()).is_err() {
            caught += 1;
        }
    }
    assert!(caught >= 20, "only {caught} of 40 planted miscompiles caught");

    // The classic example with v2 forced uniform.
    let k = kernel(
        "kernel classic(inp: ptr<global, i32>, out: ptr<global, i32>) {
            let v1: i32 = inp[0] + inp[1];
            let v2: i32 = v1 + local_id(0) as i32;
            out[local_id(0) * 2] = v1;
            out[local_id(0) * 2 + 1] = v2;
        }",
    );
    let v2 = kiln_ir::Var::new("v2", kiln_ir::Type::I32);
    let case = TestCase {
        kernel: k.clone(),
        range: NdRange::new(&[64]).with_local(&[64]),
        args: vec![Arg::Buffer(0), Arg::Buffer(1)],
        buffers: vec![Buffer::from_slice(&[3i32, 4]), Buffer::zeroed(kiln_ir::Scalar::I32, 128)],
    };
    assert_eq!(differential(&case), Ok(true));
    let bad = compile_with(&k, &analyze_with(&k, &[v2].into_iter().collect())).unwrap();
    let got = simulate(&bad, &case).unwrap();
    let err = results_match(&case.run().unwrap(), &got).unwrap_err();
    assert!(err.contains("element 3"), "{err}");
}

/// The shared generator's kernels (every type and construct, approximate intrinsics
/// included: they only differ by rounding, so the check here is that they compile and
/// assemble), over a fixed, reproducible sequence: every one compiles, and those without
/// approximate intrinsics match the interpreter exactly.
#[test]
fn shared_generator_kernels_compile_deterministically() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strat = arb_kernel_with(GenConfig { approx_intrinsics: true, ..GenConfig::default() });
    for _ in 0..60 {
        let case = strat.new_tree(&mut runner).unwrap().current();
        let c = compile(&case.kernel).unwrap_or_else(|e| panic!("{e}\n{}", case.kernel));
        assert_assembles(&c.asm);
        let text = case.kernel.to_string();
        if !["exp(", "log(", "sin(", "cos("].iter().any(|f| text.contains(f)) {
            assert_eq!(differential(&case), Ok(true));
        }
    }
}

/// 300 divergent values live at once exceed the 256 VGPRs: the allocator spills VGPRs to
/// scratch (`scratch_store_dword` / `scratch_load_dword`) and the results still match.
#[test]
fn vgpr_pressure_spills_to_scratch() {
    let mut src = String::from("kernel big(out: ptr<global, u32>) {\n");
    for i in 0..300 {
        src.push_str(&format!("let a{i}: u32 = local_id(0) * {};\n", i + 3));
    }
    src.push_str("if local_id(0) % 2 == 0 {\n");
    for i in 0..300 {
        src.push_str(&format!("out[local_id(0) * 300 + {i}] = a{i};\n"));
    }
    src.push_str("}\n}\n");
    let k = kernel(&src);
    let c = compile(&k).unwrap();
    assert!(c.asm.contains("scratch_store_dword") && c.asm.contains("scratch_load_dword"));
    assert!(c.asm.contains("flat_scratch_lo"));
    assert_assembles(&c.asm);
    let case = TestCase {
        kernel: k,
        range: NdRange::new(&[128]).with_local(&[64]),
        args: vec![Arg::Buffer(0)],
        buffers: vec![Buffer::zeroed(kiln_ir::Scalar::U32, 128 * 300)],
    };
    assert_eq!(differential(&case), Ok(true));
}

/// What cannot be spilled (64-bit values live in VGPR pairs) is a clear error.
#[test]
fn register_pressure_is_a_clear_error() {
    // 200 i64 values live at once need 400 VGPRs; pairs are not spilled.
    let mut src = String::from("kernel big(out: ptr<global, i64>) {\n");
    for i in 0..200 {
        src.push_str(&format!("let a{i}: i64 = local_id(0) as i64 * {};\n", i + 3));
    }
    for i in 0..200 {
        src.push_str(&format!("out[local_id(0) + {i}] = a{i};\n"));
    }
    src.push_str("}\n");
    match compile(&kernel(&src)) {
        Err(e) if e.kind == ErrorKind::RegisterPressure => {
            assert!(e.message.contains("VGPRs"), "{e}")
        }
        other => panic!("expected a register-pressure error, got {other:?}"),
    }
}

fn example(name: &str) -> kiln_ir::Kernel {
    let path = format!("{}/../examples/{name}", env!("CARGO_MANIFEST_DIR"));
    kernel(&std::fs::read_to_string(path).unwrap())
}

fn floats(n: usize, seed: u32) -> Buffer {
    let v: Vec<f32> = (0..n as u32).map(|i| ((i * 37 + seed) % 101) as f32 * 0.31 - 7.0).collect();
    Buffer::from_slice(&v)
}

#[test]
fn examples_match_the_interpreter() {
    let saxpy = TestCase {
        kernel: example("saxpy.kir"),
        range: NdRange::new(&[192]).with_local(&[64]),
        args: vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(1.75f32), Arg::scalar(150u32)],
        buffers: vec![floats(192, 1), floats(192, 2)],
    };
    let reduce = TestCase {
        kernel: example("reduce.kir"),
        range: NdRange::new(&[256]).with_local(&[64]),
        args: vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(200u32)],
        buffers: vec![floats(256, 3), Buffer::zeroed(kiln_ir::Scalar::F32, 4)],
    };
    let stencil = TestCase {
        kernel: example("stencil2d.kir"),
        range: NdRange::new(&[16, 12]).with_local(&[8, 4]),
        args: vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(14u32), Arg::scalar(11u32)],
        buffers: vec![floats(16 * 12, 4), Buffer::zeroed(kiln_ir::Scalar::F32, 16 * 12)],
    };
    let data: Vec<u32> = (0..128u32).map(|i| i * 7 % 53 + 1).collect();
    let divergent = TestCase {
        kernel: example("divergent.kir"),
        range: NdRange::new(&[128]).with_local(&[64]),
        args: vec![Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(120u32)],
        buffers: vec![
            Buffer::from_slice(&data),
            Buffer::zeroed(kiln_ir::Scalar::U32, 128),
            Buffer::zeroed(kiln_ir::Scalar::I32, 128),
        ],
    };
    for case in [saxpy, reduce, stencil, divergent] {
        assert_eq!(differential(&case), Ok(true), "{}", case.kernel.name());
    }
}

/// The divergence analysis is also sound on the subset generator's kernels, which assign
/// outer variables under divergent `if`s and loops far more often than the shared generator.
#[test]
fn divergence_analysis_is_sound_on_subset_kernels() {
    for seed in 0..150u64 {
        let case = gen_case(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let div = kiln_passes::divergence::analyze(&case.kernel);
        let r = kiln_passes::divergence::trace::check_uniformity(
            &case.kernel,
            &div,
            &case.range,
            &case.args,
            &case.buffers,
        );
        assert!(r.is_ok(), "{}", r.unwrap_err());
    }
}

/// Division by constants at the edges: MIN / -1 wraps, remainders take the dividend's sign.
#[test]
fn constant_division_edge_cases() {
    let k = kernel(
        "kernel d(x: ptr<global, i32>, u: ptr<global, u32>, o: ptr<global, i32>, p: ptr<global, u32>) {
            let i: u32 = local_id(0);
            let a: i32 = x[i];
            o[i * 6] = a / -1;
            o[i * 6 + 1] = a % -1;
            o[i * 6 + 2] = a / 7;
            o[i * 6 + 3] = a % -7;
            o[i * 6 + 4] = a / -16;
            o[i * 6 + 5] = a % 16;
            let b: u32 = u[i];
            p[i * 3] = b / 7;
            p[i * 3 + 1] = b % 641;
            p[i * 3 + 2] = b / 4294967295;
        }",
    );
    let xs = [i32::MIN, i32::MAX, -1, 0, 1, -7, 7, -8, 100, -100, i32::MIN + 1, 12345678];
    let us = [u32::MAX, 0, 1, 6, 7, 640, 641, 642, 1 << 31, 99999, u32::MAX - 1, 3];
    let case = TestCase {
        kernel: k,
        range: NdRange::new(&[12]).with_local(&[12]),
        args: (0..4).map(Arg::Buffer).collect(),
        buffers: vec![
            Buffer::from_slice(&xs),
            Buffer::from_slice(&us),
            Buffer::zeroed(kiln_ir::Scalar::I32, 72),
            Buffer::zeroed(kiln_ir::Scalar::U32, 36),
        ],
    };
    assert_eq!(differential(&case), Ok(true));
}

/// Integer `mad` and `add3` on 32-bit values: uniform ones on SALU (`s_mul_i32`/`s_add_i32`),
/// divergent ones on VALU (`v_mul_lo_u32`/`v_add_u32`, `v_add3_u32`); llvm-mc accepts the
/// listing and the simulator reproduces the interpreter, wrapping included. Other widths
/// (here i64, on SALU pairs) lower to the separate wrapping operations.
#[test]
fn mad_and_add3_lower_to_salu_and_valu() {
    let k = kernel(
        "kernel fused(x: ptr<global, u32>, o: ptr<global, u32>, p: ptr<global, i32>, s: u32, t: i32) {
            let i: u32 = local_id(0);
            let u: u32 = mad(s, s, x[0]);
            let w: u32 = add3(s, x[1], 7u32);
            o[i * 4] = u + w;
            o[i * 4 + 1] = mad(x[i], s, x[i + 1]);
            o[i * 4 + 2] = add3(x[i], u, i);
            o[i * 4 + 3] = mad(i, 4294967295u32, w);
            p[i] = add3(t, p[i], mad(t, p[i], -7));
        }",
    );
    let c = compile(&k).unwrap_or_else(|e| panic!("{e}"));
    for inst in ["s_mul_i32", "s_add_i32", "v_mul_lo_u32", "v_add_u32", "v_add3_u32"] {
        assert!(c.asm.contains(inst), "no {inst} in\n{}", c.asm);
    }
    assert_assembles(&c.asm);
    let x: Vec<u32> = (0..80u32).map(|i| i.wrapping_mul(0x9e37_79b9) ^ (i << 28)).collect();
    let p: Vec<i32> = (0..64).map(|i| i32::MAX - i * 1_000_003).collect();
    let case = TestCase {
        kernel: k,
        range: NdRange::new(&[64]).with_local(&[64]),
        args: vec![
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::Buffer(2),
            Arg::scalar(0xdead_beefu32),
            Arg::scalar(-123_456_789i32),
        ],
        buffers: vec![
            Buffer::from_slice(&x),
            Buffer::zeroed(kiln_ir::Scalar::U32, 256),
            Buffer::from_slice(&p),
        ],
    };
    assert_eq!(differential(&case), Ok(true));
    let wide = kernel(
        "kernel w(o: ptr<global, i64>, a: i64) { o[local_id(0)] = mad(a, a, o[local_id(0)]); }",
    );
    let c = compile(&wide).unwrap_or_else(|e| panic!("{e}"));
    assert_assembles(&c.asm);
    let o: Vec<i64> = (0..64).map(|i| i64::MAX - i * 0x1234_5678_9abc).collect();
    let case = TestCase {
        kernel: wide,
        range: NdRange::new(&[64]).with_local(&[64]),
        args: vec![Arg::Buffer(0), Arg::scalar(-0x7654_3210_fedc_i64)],
        buffers: vec![Buffer::from_slice(&o)],
    };
    assert_eq!(differential(&case), Ok(true));
}

/// Subset kernels after the default `-O` pipeline (induction variables assigned in loops,
/// CSE lets, fusion) and after the peephole alone (which fuses their `gid * 3 + k` indices
/// into `mad`): the listing assembles and the simulator matches the interpreter, whenever
/// the backend accepts the kernel.
#[test]
fn optimized_subset_kernels_match_the_interpreter() {
    type PassFn = fn(&kiln_ir::Kernel) -> kiln_ir::Kernel;
    let passes: [(&str, PassFn); 2] =
        [("-O", kiln_passes::pipeline::optimize), ("peephole", kiln_passes::peephole::peephole)];
    let (mut ran, mut fused) = (0, 0);
    for seed in 0..60u64 {
        let original = gen_case(seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1);
        for (name, pass) in passes {
            let mut case = original.clone();
            case.kernel = pass(&original.kernel);
            let text = case.kernel.to_string();
            fused += usize::from(text.contains("mad(") || text.contains("add3("));
            let r = differential(&case);
            assert!(r.is_ok(), "{name}: {r:?}");
            if r == Ok(true) {
                assert_assembles(&compile(&case.kernel).unwrap().asm);
                ran += 1;
            }
        }
    }
    eprintln!("{ran} of 120 optimized subset kernels ran; {fused} had mad/add3");
    assert!(ran >= 60 && fused >= 30, "{ran} ran, {fused} fused");
}
