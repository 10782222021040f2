//! Shared helpers of the AMDGPU tests: llvm-mc acceptance and a generator of random
//! kernels inside the backend's subset.
#![allow(dead_code)]

use std::io::Write;
use std::process::{Command, Stdio};

use kiln_ir::testing::TestCase;
use kiln_ir::{parse_module, Kernel};

/// Parses the first kernel of a source text.
pub fn kernel(src: &str) -> Kernel {
    parse_module(src).unwrap_or_else(|e| panic!("{e}")).kernels.remove(0)
}

fn llvm_mc() -> Option<String> {
    kiln_ir::testing::tool("KILN_LLVM_MC").map(|p| p.display().to_string())
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

/// A random subset kernel as a test case (see `kiln_backends::amdgpu::gen`).
pub fn gen_case(seed: u64) -> TestCase {
    let g = kiln_backends::amdgpu::gen::gen_case(seed);
    TestCase { kernel: g.kernel, range: g.range, args: g.args, buffers: g.buffers }
}
