//! Random well-typed kernels (from `kiln_ir::testing`, built from the input bytes) lower to
//! SPIR-V in both flavours, and `spirv-val` accepts every module for its target environment
//! (the validator is `$KILN_SPIRV_VAL`, else `spirv-val` on PATH). The only emission errors
//! allowed are the documented rejections.
#![no_main]

use std::io::Write;
use std::process::{Command, Stdio};

use kiln_backends::spirv::{emit, Flavour};
use kiln_ir::testing::{case_from_bytes, GenConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let cfg = GenConfig { approx_intrinsics: true, ..GenConfig::default() };
    let case = case_from_bytes(data, &cfg);
    let val = std::env::var("KILN_SPIRV_VAL").unwrap_or_else(|_| "spirv-val".into());
    for flavour in [Flavour::Vulkan, Flavour::OpenCl] {
        let m = match emit(&case.kernel, flavour) {
            Ok(m) => m,
            Err(e) => {
                let documented = match flavour {
                    Flavour::Vulkan => e.message.contains("on f64 cannot be expressed"),
                    Flavour::OpenCl => {
                        e.message.contains("f16 is not supported")
                            || e.message.contains("64-bit atomics are not supported")
                    }
                };
                assert!(documented, "{e}\n{}", case.kernel);
                continue;
            }
        };
        let mut child = Command::new(&val)
            .args(["--target-env", flavour.target_env(), "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot run spirv-val (set KILN_SPIRV_VAL)");
        child.stdin.take().unwrap().write_all(&m.to_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "spirv-val ({flavour:?}) rejects:\n{}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            case.kernel
        );
    }
});
