//! `kiln emit --target spirv-cl|spirv-vk` and `kiln run --device vulkan`.

use std::path::PathBuf;
use std::process::{Command, Output};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln")).current_dir(root()).args(args).output().unwrap()
}

#[test]
fn emit_writes_a_spirv_binary_and_a_disassembly() {
    let out = std::env::temp_dir().join(format!("kiln-emit-{}.spv", std::process::id()));
    for target in ["spirv-vk", "spirv-cl"] {
        let o =
            kiln(&["emit", "examples/reduce.kir", "--target", target, "-o", out.to_str().unwrap()]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let bytes = std::fs::read(&out).unwrap();
        assert_eq!(&bytes[..4], &0x0723_0203u32.to_le_bytes(), "SPIR-V magic");
        if let Some(val) = std::env::var_os("KILN_SPIRV_VAL") {
            let env = if target == "spirv-vk" { "vulkan1.1" } else { "opencl2.2" };
            let v = Command::new(val).args(["--target-env", env]).arg(&out).output().unwrap();
            assert!(v.status.success(), "{}", String::from_utf8_lossy(&v.stderr));
        }
        let o = kiln(&["emit", "examples/reduce.kir", "--target", target, "--text"]);
        let text = String::from_utf8_lossy(&o.stdout);
        assert!(text.contains("OpEntryPoint") && text.contains("\"reduce\""), "{text}");
        assert!(text.contains("OpControlBarrier"), "{text}");
    }
    std::fs::remove_file(&out).ok();
    // An unknown target is a malformed command line: exit code 2.
    let o = kiln(&["emit", "examples/reduce.kir", "--target", "x87"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown target `x87`"));
}

#[test]
fn run_on_vulkan_prints_what_the_interpreter_prints() {
    let args = |dev: &'static str| {
        vec![
            "run",
            "examples/saxpy.kir",
            "--global",
            "8",
            "--arg",
            "x=iota:8",
            "--arg",
            "y=iota:8",
            "--arg",
            "a=2.5",
            "--arg",
            "n=7",
            "--device",
            dev,
        ]
    };
    let want = kiln(&args("interp"));
    let got = kiln(&args("vulkan"));
    if !got.status.success() {
        let err = String::from_utf8_lossy(&got.stderr);
        if err.contains("vulkan device unavailable") {
            // Skipped, or (with KILN_REQUIRE_TOOLS) failed, by the one rule.
            kiln_ir::testing::require("KILN_REQUIRE_TOOLS", Err::<(), _>(err));
            return;
        }
        panic!("{err}");
    }
    assert_eq!(String::from_utf8_lossy(&got.stdout), String::from_utf8_lossy(&want.stdout));
    assert!(String::from_utf8_lossy(&got.stdout).contains("y: f32[8] = [0.0, 3.5, 7.0"));
}
