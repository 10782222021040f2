//! Random well-typed kernels (from `kiln_ir::testing`, built from the input bytes) lower to
//! PTX without error (f64 transcendental functions aside, which are refused by design), and
//! when `KILN_PTXAS` names a ptxas, it assembles the PTX for sm_90.
#![no_main]

use std::io::Write;
use std::process::Command;

use kiln_backends::ptx::{emit_kernel, Options};
use kiln_ir::testing::{case_from_bytes, GenConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let cfg = GenConfig { approx_intrinsics: true, ..GenConfig::default() };
    let case = case_from_bytes(data, &cfg);
    let ptx = match emit_kernel(&case.kernel, &Options::default()) {
        Ok(p) => p,
        Err(e) if e.message.contains("f64") => return,
        Err(e) => panic!("{e}\nkernel:\n{}", case.kernel),
    };
    let Some(ptxas) = std::env::var_os("KILN_PTXAS").filter(|p| !p.is_empty()) else { return };
    let path = std::env::temp_dir().join(format!("kiln-fuzz-ptx-{}.ptx", std::process::id()));
    std::fs::File::create(&path).unwrap().write_all(ptx.as_bytes()).unwrap();
    let out = Command::new(ptxas)
        .args(["-arch=sm_90", "-o", "/dev/null"])
        .arg(&path)
        .output()
        .expect("run ptxas");
    assert!(
        out.status.success(),
        "ptxas rejected the PTX:\n{}\n{ptx}\nkernel:\n{}",
        String::from_utf8_lossy(&out.stderr),
        case.kernel
    );
});
