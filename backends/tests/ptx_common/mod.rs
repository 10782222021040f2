//! Shared helpers of the PTX assembling tests: a module's PTX as written or through the
//! build driver's -O pipeline, and ptxas on it with a numbered listing when it rejects it.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use kiln_backends::ptx::{emit_module, Options, Ptx};
use kiln_ir::Module;

/// The module's PTX for `sm`: as written, or through the build driver's -O pipeline (what
/// devices run) when `optimize`.
pub fn ptx_for(m: &Module, sm: u32, optimize: bool) -> String {
    if optimize {
        let opt = kiln_backends::options::BuildOptions::parse("-O").unwrap();
        kiln_backends::driver::build(&Ptx(Options::sm(sm)), m, &opt).unwrap().output
    } else {
        emit_module(m, &Options::sm(sm)).unwrap()
    }
}

/// Writes `ptx` to `dir/<stem>.ptx` and fails, with the numbered PTX, unless ptxas run with
/// `arch_flag` assembles it (`arch` names the target in the message).
pub fn assert_assembles(
    ptxas: &Path,
    arch_flag: &str,
    arch: &str,
    dir: &Path,
    stem: &str,
    ptx: &str,
) {
    let file = dir.join(format!("{stem}.ptx"));
    std::fs::File::create(&file).unwrap().write_all(ptx.as_bytes()).unwrap();
    let out = Command::new(ptxas)
        .arg(arch_flag)
        .arg(&file)
        .arg("-o")
        .arg(dir.join(format!("{stem}.cubin")))
        .output()
        .expect("run ptxas");
    let numbered: String =
        ptx.lines().enumerate().map(|(i, l)| format!("{:5} {l}\n", i + 1)).collect();
    assert!(
        out.status.success(),
        "ptxas {arch} rejected the module:\n{}\n{numbered}",
        String::from_utf8_lossy(&out.stderr)
    );
}
