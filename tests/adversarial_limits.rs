//! The adversarial cases of issue 12 whose inputs are too large to check in
//! (tests/adversarial/README.md): a kernel with 1,000 parameters through `kiln emit` for
//! every target. Each target either emits valid output or refuses with the kernel and the
//! limit named; never a signal, a panic, or output its assembler rejects.

use std::path::PathBuf;
use std::process::{Command, Output};

/// A kernel `many` with 1,000 parameters: buffers and `u32` scalars alternating.
fn thousand_params(dir: &std::path::Path) -> PathBuf {
    let params: Vec<String> = (0..1000)
        .map(|i| if i % 2 == 0 { format!("b{i}: ptr<global, u32>") } else { format!("s{i}: u32") })
        .collect();
    let src = format!("kernel many({}) {{\n  b0[0] = s1 + s999;\n}}\n", params.join(", "));
    let path = dir.join("limits_1000_params.kir");
    std::fs::write(&path, src).unwrap();
    path
}

fn emit(kir: &std::path::Path, target: &str, out: &std::path::Path) -> Output {
    let o = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["emit", "--target", target])
        .arg(kir)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.code().is_some(), "{target}: killed by a signal; {stderr}");
    assert!(!stderr.contains("panicked"), "{target}: panicked; {stderr}");
    o
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-adv-limits-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Issue 12: PTX for 1,000 parameters exceeded ptxas's parameter space (4352 bytes before
/// PTX ISA 8.1).
#[test]
fn limits_emit_ptx_1000_params() {
    let dir = scratch("ptx");
    let o = emit(&thousand_params(&dir), "ptx", &dir.join("out.ptx"));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("`many`") && stderr.contains("limit of 4352"), "{stderr}");
    assert!(!dir.join("out.ptx").exists(), "no output on refusal");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 12: SPIR-V (OpenCL flavour) for 1,000 parameters had more than 255 function
/// parameters.
#[test]
fn limits_emit_spirv_cl_1000_params() {
    let dir = scratch("spirv-cl");
    let o = emit(&thousand_params(&dir), "spirv-cl", &dir.join("out.spv"));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("`many`") && stderr.contains("limit of 255"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 12: the Vulkan flavour passes parameters as bindings and push constants, so 1,000
/// of them emit; the device refuses what it cannot bind when it builds.
#[test]
fn limits_emit_spirv_vk_1000_params() {
    let dir = scratch("spirv-vk");
    let out = dir.join("out.spv");
    let o = emit(&thousand_params(&dir), "spirv-vk", &out);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let words = std::fs::read(&out).unwrap();
    assert_eq!(words[..4], 0x0723_0203u32.to_le_bytes(), "a SPIR-V module");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 12: 1,000 parameters on AMDGPU: 8 KB of kernel arguments, within gfx9's limits.
#[test]
fn limits_emit_amdgpu_1000_params() {
    let dir = scratch("amdgpu");
    let out = dir.join("out.s");
    let o = emit(&thousand_params(&dir), "amdgpu", &out);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let asm = std::fs::read_to_string(&out).unwrap();
    assert!(asm.contains(".amdhsa_kernel many"), "{}", &asm[..asm.len().min(400)]);
    let _ = std::fs::remove_dir_all(&dir);
}
