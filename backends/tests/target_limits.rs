//! Each backend checks its target's fixed limits before emitting (issue 12): a kernel past
//! one is refused with the kernel and the limit named, never emitted as output the target's
//! assembler rejects, never with a size truncated. Where a kernel stays within the limits
//! and the external tool is available (`KILN_SPIRV_VAL`, `KILN_PTXAS`), the output is
//! validated; without the tool those checks skip with a message, unless `KILN_REQUIRE_TOOLS`
//! is set, when they fail.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use kiln_backends::spirv::{emit, Flavour};
use kiln_backends::{amdgpu, ptx};
use kiln_ir::{parse_module, Kernel};

fn tool(env: &str) -> Option<PathBuf> {
    kiln_ir::testing::tool(env)
}

/// Runs `tool args.. file` on `bytes` written to a scratch file; Err with its output.
fn run_tool(tool: &PathBuf, args: &[&str], bytes: &[u8], name: &str) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("kiln-limits-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(name);
    std::fs::write(&file, bytes).unwrap();
    let out = Command::new(tool)
        .args(args)
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", tool.display()));
    let _ = std::fs::remove_dir_all(&dir);
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

fn kernel(src: &str) -> Kernel {
    parse_module(src).unwrap_or_else(|e| panic!("{e}")).kernels.remove(0)
}

/// A kernel `many` with `n` parameters: buffers and `u32` scalars alternating.
fn many_params(n: usize) -> Kernel {
    let params: Vec<String> = (0..n)
        .map(|i| if i % 2 == 0 { format!("b{i}: ptr<global, u32>") } else { format!("s{i}: u32") })
        .collect();
    let last = if n.is_multiple_of(2) { n - 1 } else { n - 2 };
    kernel(&format!("kernel many({}) {{ b0[0] = s1 + s{last}; }}", params.join(", ")))
}

/// Issue 12: 1,000 parameters made SPIR-V (OpenCL flavour) with more than 255 function
/// parameters, which spirv-val rejects.
#[test]
fn spirv_opencl_1000_params_are_refused() {
    let e = emit(&many_params(1000), Flavour::OpenCl).unwrap_err().to_string();
    assert!(e.contains("`many`") && e.contains("(1000)") && e.contains("255"), "{e}");
    // 255 is within the limit, and valid.
    let m = emit(&many_params(255), Flavour::OpenCl).unwrap();
    if let Some(val) = tool("KILN_SPIRV_VAL") {
        run_tool(&val, &["--target-env", "opencl2.2"], &m.to_bytes(), "p255.spv").unwrap();
    }
}

/// Issue 12: the Vulkan flavour passes no function parameters (bindings and push
/// constants), so 1,000 parameters are valid SPIR-V; the device checks its own limits.
#[test]
fn spirv_vulkan_1000_params_are_valid() {
    let m = emit(&many_params(1000), Flavour::Vulkan).unwrap();
    assert_eq!(m.layout.buffers.len(), 500);
    if let Some(val) = tool("KILN_SPIRV_VAL") {
        run_tool(&val, &["--target-env", "vulkan1.1"], &m.to_bytes(), "vk1000.spv").unwrap();
    }
}

/// Issue 12: 1,000 parameters made PTX with more parameter space than ptxas takes
/// (4352 bytes before PTX ISA 8.1, kiln's default versions).
#[test]
fn ptx_1000_params_are_refused() {
    let opts = ptx::Options::default();
    assert!(opts.version() < (8, 1));
    let e = ptx::emit_kernel(&many_params(1000), &opts).unwrap_err().to_string();
    assert!(e.contains("`many`") && e.contains("(8008)") && e.contains("limit of 4352"), "{e}");
    // The most parameters that fit (8-byte buffers and 4-byte scalars alternate, each
    // aligned, then the 12 offset bytes): emitted, and ptxas takes them.
    let fits = (1..1000).rev().find(|&n| ptx::param_bytes(&many_params(n)) <= 4352).unwrap();
    let text = ptx::emit_kernel(&many_params(fits), &opts).unwrap();
    assert!(ptx::emit_kernel(&many_params(fits + 1), &opts).is_err());
    // PTX ISA 8.1 allows 32764 bytes: 1,000 parameters are emitted, and ptxas takes them.
    let v81 = ptx::Options { sm: 90, ptx_version: Some((8, 1)) };
    let text81 = ptx::emit_kernel(&many_params(1000), &v81).unwrap();
    let over = ptx::emit_kernel(&many_params(fits + 1), &v81).unwrap();
    if let Some(ptxas) = tool("KILN_PTXAS") {
        let args = ["-arch=sm_90", "-o", "/dev/null"];
        run_tool(&ptxas, &args, text.as_bytes(), "fits.ptx").unwrap();
        run_tool(&ptxas, &args, text81.as_bytes(), "v81.ptx").unwrap();
        // The limit is ptxas's own: one parameter more, declared as PTX 7.8, is rejected.
        let over78 = over.replace(".version 8.1", ".version 7.8");
        let e = run_tool(&ptxas, &args, over78.as_bytes(), "over.ptx").unwrap_err();
        assert!(e.contains("too much parameter space"), "{e}");
    }
}

/// Issue 12: shared and per-thread local memory past the targets' limits are refused: 48 KiB
/// of static shared memory before sm_80, 227 KiB of dynamic shared memory from sm_80 on.
#[test]
fn ptx_huge_arrays_are_refused() {
    let opts = ptx::Options::default();
    let local = kernel("kernel big(o: ptr<global, f32>) { local t: f32[58113]; o[0] = t[0]; }");
    let e = ptx::emit_kernel(&local, &opts).unwrap_err().to_string();
    assert!(e.contains("shared") && e.contains("232448"), "{e}");
    let old = kernel("kernel big(o: ptr<global, f32>) { local t: f32[12289]; o[0] = t[0]; }");
    let e = ptx::emit_kernel(&old, &ptx::Options::sm(75)).unwrap_err().to_string();
    assert!(e.contains("shared") && e.contains("49152"), "{e}");
    let private =
        kernel("kernel big(o: ptr<global, f32>) { private t: f32[131073]; o[0] = t[0]; }");
    let e = ptx::emit_kernel(&private, &opts).unwrap_err().to_string();
    assert!(e.contains("private") && e.contains("524288"), "{e}");
}

/// Issue 12: the AMDGPU backend computed LDS sizes in `u32` and truncated them modulo
/// 2^32 (a 2^30 + 1 element f32 array became 4 bytes).
#[test]
fn amdgpu_lds_size_is_not_truncated() {
    let k = kernel("kernel big(o: ptr<global, f32>) { local t: f32[1073741825]; o[0] = t[0]; }");
    let e = amdgpu::compile(&k).unwrap_err().to_string();
    assert!(e.contains("`big`") && e.contains("`t`") && e.contains("65536"), "{e}");
    assert!(e.contains("4294967300"), "the size is not truncated: {e}");
}

/// Issue 12: the AMDGPU backend truncated scratch (private array) sizes modulo 2^32.
#[test]
fn amdgpu_scratch_size_is_not_truncated() {
    let k = kernel("kernel big(o: ptr<global, f64>) { private t: f64[536870913]; o[0] = t[0]; }");
    let e = amdgpu::compile(&k).unwrap_err().to_string();
    assert!(e.contains("`big`") && e.contains("scratch") && e.contains("4294967304"), "{e}");
    // One within the limit compiles, its size in the kernel descriptor.
    let n = amdgpu::MAX_SCRATCH_BYTES / 8;
    let ok = kernel(&format!(
        "kernel fits(o: ptr<global, f64>) {{ private t: f64[{n}]; o[0] = t[0]; }}"
    ));
    let asm = amdgpu::compile(&ok).unwrap().asm;
    assert!(asm.contains(&format!("private_segment_fixed_size {}", n * 8)), "{asm}");
}

/// Issue 12: 1,000 parameters on AMDGPU compile (kernel arguments are far below the
/// `s_load` offset limit), with every argument at its own offset.
#[test]
fn amdgpu_1000_params_compile() {
    let c = amdgpu::compile(&many_params(1000)).unwrap();
    assert_eq!(c.func.param_offsets.len(), 1000);
    let last = *c.func.param_offsets.last().unwrap();
    assert!(last > 4000 && (last as u64) < amdgpu::MAX_KERNARG_BYTES as u64, "{last}");
}
