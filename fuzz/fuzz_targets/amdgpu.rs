//! AMDGPU backend: a random kernel (seeded by the input bytes) is compiled, run on the wave64
//! simulator and compared with the interpreter. Two generators, the backend's subset
//! generator and the shared `kiln_ir::testing` one (every feature but the approximate
//! intrinsics): every kernel must compile, and the simulator must match the interpreter.
#![no_main]

use kiln_backends::amdgpu::{compile, gen, sim};
use kiln_ir::testing::{case_from_bytes, results_match, GenConfig, TestCase};
use libfuzzer_sys::fuzz_target;

fn check(case: &TestCase) {
    let c = compile(&case.kernel).unwrap_or_else(|e| panic!("{e}\n{}", case.kernel));
    let want = case.run().expect("generated kernels run");
    let mut got = case.buffers.clone();
    sim::run(&c, &case.kernel, &case.range, &case.args, &mut got)
        .unwrap_or_else(|e| panic!("simulator: {e}\n{}\n{}", case.kernel, c.asm));
    if let Err(e) = results_match(&want, &got) {
        panic!("{e}\n{}\n{}", case.kernel, c.asm);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut seed = [0u8; 8];
    let n = data.len().min(8);
    seed[..n].copy_from_slice(&data[..n]);
    let g = gen::gen_case(u64::from_le_bytes(seed));
    check(&TestCase { kernel: g.kernel, range: g.range, args: g.args, buffers: g.buffers });
    let config = GenConfig { approx_intrinsics: false, ..GenConfig::default() };
    check(&case_from_bytes(data, &config));
});
