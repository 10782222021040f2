//! AMDGPU listings: instruction choice by divergence, and llvm-mc acceptance of every listing
//! (examples and hand cases). llvm-mc comes from `KILN_LLVM_MC` (set by `cargo xtask test`);
//! without it the llvm-mc checks are skipped with a message, unless `KILN_REQUIRE_TOOLS=1`.

mod amdgpu_common;

use amdgpu_common::assert_assembles;
use kiln_backends::amdgpu::compile;
use kiln_backends::target::ErrorKind;
use kiln_ir::parse_module;

fn asm_of(src: &str) -> String {
    let m = parse_module(src).unwrap_or_else(|e| panic!("{e}"));
    let c = compile(&m.kernels[0]).unwrap_or_else(|e| panic!("{e}"));
    assert_assembles(&c.asm);
    c.asm
}

#[test]
fn classic_example_uses_salu_for_uniform_and_valu_for_divergent() {
    let asm = asm_of(
        "kernel classic(inp: ptr<global, i32>, out: ptr<global, i32>) {
            let v1: i32 = inp[0] + inp[1];
            let v2: i32 = v1 + local_id(0) as i32;
            out[0] = v1;
            out[1] = v2;
        }",
    );
    assert!(asm.contains("s_add_i32"), "{asm}");
    assert!(asm.contains("v_add_u32"), "{asm}");
}

fn example(name: &str) -> kiln_ir::Kernel {
    let path = format!("{}/../examples/{name}", env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(path).unwrap();
    parse_module(&src).unwrap().kernels.remove(0)
}

/// Every example either compiles to a listing llvm-mc accepts, or is rejected clearly; the
/// SALU/VALU counts over the examples are printed (`cargo test -p kiln-backends --test
/// amdgpu_asm examples -- --nocapture`).
#[test]
fn examples_assemble() {
    let (mut salu, mut valu) = (0, 0);
    for name in ["saxpy.kir", "reduce.kir", "stencil2d.kir", "divergent.kir"] {
        let k = example(name);
        match compile(&k) {
            Ok(c) => {
                assert_assembles(&c.asm);
                let (s, v) = c.salu_valu_counts();
                println!("{name}: {s} SALU, {v} VALU");
                salu += s;
                valu += v;
            }
            Err(e) => panic!("{name}: {e}"),
        }
    }
    println!("total: {salu} SALU, {valu} VALU");
    assert!(salu > 0 && valu > 0);
}

#[test]
fn reduce_uses_lds_barrier_and_uniform_loop() {
    let c = compile(&example("reduce.kir")).unwrap();
    for needle in
        ["ds_write_b32", "ds_read_b32", "s_barrier", "s_cbranch_scc0", "s_and_saveexec_b64"]
    {
        assert!(c.asm.contains(needle), "missing {needle}:\n{}", c.asm);
    }
    assert!(c.asm.contains(".amdhsa_group_segment_fixed_size 256"), "{}", c.asm);
}

#[test]
fn divergent_if_else_uses_exec_masks() {
    let asm = asm_of(
        "kernel k(out: ptr<global, u32>) {
            var x: u32 = 0;
            if local_id(0) < 5 { x = 1; } else { x = 2; }
            out[local_id(0)] = x;
        }",
    );
    for needle in [
        "v_cmp_ne_u32_e64",
        "s_and_saveexec_b64",
        "s_xor_b64",
        "s_cbranch_execz",
        "s_or_saveexec_b64",
        "s_or_b64 exec, exec",
    ] {
        assert!(asm.contains(needle), "missing {needle}:\n{asm}");
    }
}

#[test]
fn uniform_if_uses_scc_branch() {
    let asm = asm_of(
        "kernel k(n: u32, out: ptr<global, u32>) {
            var x: u32 = 0;
            if n < 5 { x = 1; } else { x = 2; }
            out[local_id(0)] = x;
        }",
    );
    assert!(asm.contains("s_cmp_lt_u32") && asm.contains("s_cbranch_scc0"), "{asm}");
    assert!(!asm.contains("saveexec"), "{asm}");
}

#[test]
fn divergent_loop_retires_lanes_from_exec() {
    let asm = asm_of(
        "kernel k(out: ptr<global, u32>) {
            var i: u32 = 0;
            while i < local_id(0) { i = i + 1; }
            out[local_id(0)] = i;
        }",
    );
    assert!(asm.contains("s_andn2_b64 exec, exec"), "{asm}");
    assert!(asm.contains("s_or_b64 exec, exec"), "{asm}");
}

#[test]
fn uniform_constant_load_is_scalar_and_readfirstlane_crosses_files() {
    let asm = asm_of(
        "kernel k(c: ptr<constant, u32>, out: ptr<global, u32>, n: u32) {
            let a: u32 = c[n];
            let f: f32 = a as f32 * 2.0;
            let b: u32 = f as u32;
            out[local_id(0)] = a + b + local_id(0);
        }",
    );
    assert!(asm.contains("s_load_dword s"), "{asm}");
    assert!(asm.contains("v_readfirstlane_b32"), "{asm}");
    assert!(asm.contains("v_cvt_f32_u32") && asm.contains("v_mul_f32"), "{asm}");
}

/// Ill-formed input is a clear error naming the problem, never a panic.
#[test]
fn ill_formed_kernels_are_rejected() {
    use kiln_ir::{Expr, Kernel, Stmt, Type, Var};
    let o = Var::new("o", Type::ptr(kiln_ir::AddrSpace::Global, kiln_ir::Scalar::U32));
    // A store of an f32 value into a u32 buffer.
    let k = Kernel::new(
        "bad",
        vec![o.clone()],
        Stmt::block(vec![Stmt::store(&o, Expr::u32(0), Expr::f32(1.0))]),
    );
    match compile(&k) {
        Err(e) if e.kind == ErrorKind::IllFormed => assert!(!e.message.is_empty()),
        other => panic!("expected an ill-formed error, got {other:?}"),
    }
}

/// The divergence analysis' hand cases (`passes/tests/divergence.rs`): each compiles to a
/// listing llvm-mc accepts, or is rejected as unsupported (atomics, private memory, ...).
#[test]
fn divergence_hand_cases_assemble() {
    let path = format!("{}/../passes/tests/divergence.rs", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).unwrap();
    let (mut compiled, mut rejected) = (0, 0);
    for chunk in text.split("ann(\"").skip(1) {
        let src = &chunk[..chunk.find("\")").unwrap()];
        if !src.starts_with("kernel") {
            continue;
        }
        let k = parse_module(src).unwrap_or_else(|e| panic!("{e}")).kernels.remove(0);
        match compile(&k) {
            Ok(c) => {
                assert_assembles(&c.asm);
                compiled += 1;
            }
            Err(e) if e.kind == ErrorKind::Unsupported => rejected += 1,
            Err(e) => panic!("{e}"),
        }
    }
    println!("hand cases: {compiled} compiled, {rejected} rejected");
    assert!(compiled >= 20, "only {compiled} hand cases compiled");
}

/// Uniform 64-bit integer arithmetic stays on the SALU (SGPR pairs, carry in SCC); the
/// divergent half uses VALU pairs.
#[test]
fn uniform_64_bit_integers_use_salu_pairs() {
    let asm = asm_of(
        "kernel k(a: i64, b: u64, out: ptr<global, i64>) {
            let u: i64 = a * 3 + (b << 5u64) as i64 - (a >> 2);
            let e: bool = u == a;
            let d: i64 = u + local_id(0) as i64;
            out[local_id(0)] = e ? d : -u;
        }",
    );
    for needle in ["s_add_u32", "s_addc_u32", "s_lshl_b64", "s_ashr_i64", "s_cmp_eq_u64"] {
        assert!(asm.contains(needle), "missing {needle}:\n{asm}");
    }
    assert!(asm.contains("v_add_co_u32") && asm.contains("v_addc_co_u32"), "{asm}");
}
