//! AMDGPU listings: instruction choice by divergence, and llvm-mc acceptance of every listing
//! (examples and hand cases). llvm-mc comes from `KILN_LLVM_MC` (set by `cargo xtask test`);
//! without it the llvm-mc checks are skipped with a message, unless `KILN_REQUIRE_TOOLS=1`.

use std::io::Write;
use std::process::{Command, Stdio};

use kiln_backends::amdgpu::compile;
use kiln_ir::parse_module;

fn llvm_mc() -> Option<String> {
    match std::env::var("KILN_LLVM_MC") {
        Ok(p) if !p.is_empty() => Some(p),
        _ => {
            if std::env::var("KILN_REQUIRE_TOOLS").is_ok_and(|v| v == "1") {
                panic!("KILN_REQUIRE_TOOLS=1 but KILN_LLVM_MC is not set");
            }
            eprintln!("skipping llvm-mc checks: KILN_LLVM_MC is not set");
            None
        }
    }
}

/// Asserts that llvm-mc assembles the listing for gfx900.
pub fn assert_assembles(asm: &str) {
    let Some(mc) = llvm_mc() else { return };
    let mut child = Command::new(mc)
        .args(["-triple=amdgcn-amd-amdhsa", "-mcpu=gfx900", "-filetype=obj", "-o", "/dev/null"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run llvm-mc");
    child.stdin.take().unwrap().write_all(asm.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "llvm-mc rejected the listing:\n{}\n{asm}",
        String::from_utf8_lossy(&out.stderr)
    );
}

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
