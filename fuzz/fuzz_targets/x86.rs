//! x86 JIT: a random kernel from the shared `kiln_ir::testing` generator (every feature,
//! barriers and local memory included) is compiled to x86-64, unoptimized and with `-O`,
//! each with the AVX2 lanes where the kernel qualifies and scalar only, run in this process
//! and compared with the interpreter. A crash here is a host crash the
//! backend promised never to cause.
#![no_main]

use kiln_backends::x86::{compile, X86Options, X86RunOptions};
use kiln_ir::testing::{case_from_bytes, results_match, GenConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let case = case_from_bytes(data, &GenConfig { approx_intrinsics: true, ..GenConfig::default() });
    let want = case.run().expect("generated kernels run");
    for (optimize, scalar) in [(false, false), (true, false), (false, true), (true, true)] {
        let p = compile(&case.kernel, &X86Options { optimize, scalar, ..X86Options::default() })
            .unwrap_or_else(|e| panic!("{e}\n{}", case.kernel));
        let mut got = case.buffers.clone();
        let opts = X86RunOptions { max_loop_iterations: Some(10_000_000), ..X86RunOptions::default() };
        p.run_with(&case.range, &case.args, &mut got, &opts)
            .unwrap_or_else(|e| panic!("x86: {e}\n{}\n{}", case.kernel, p.disassemble()));
        if let Err(e) = results_match(&want, &got) {
            panic!("{e}\n{}\n{}", case.kernel, p.disassemble());
        }
    }
});
