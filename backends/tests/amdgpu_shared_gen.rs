//! The AMDGPU backend against the shared kernel generator (`kiln_ir::testing`): every
//! generated kernel (all scalar types, f16, private arrays, divergent control flow, several
//! work-groups; atomics off, which the backend does not lower yet) must compile, assemble
//! with llvm-mc, and run in the simulator to the interpreter's exact buffers.

use kiln_backends::amdgpu::{compile, sim};
use kiln_ir::testing::{arb_kernel_with, results_match, GenConfig};
use proptest::prelude::*;

mod amdgpu_common;
use amdgpu_common::assert_assembles;

fn config() -> GenConfig {
    GenConfig { atomics: false, approx_intrinsics: false, ..GenConfig::default() }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("AMDGPU_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(48),
        ..ProptestConfig::default()
    })]
    #[test]
    fn shared_generator_kernels_compile_and_match(case in arb_kernel_with(config())) {
        let c = compile(&case.kernel);
        prop_assert!(c.is_ok(), "{:?}\n{}", c.as_ref().err(), case.kernel);
        let c = c.unwrap();
        assert_assembles(&c.asm);
        let want = case.run().unwrap();
        let mut got = case.buffers.clone();
        let r = sim::run(&c, &case.kernel, &case.range, &case.args, &mut got);
        prop_assert!(r.is_ok(), "{:?}\n{}\n{}", r, case.kernel, c.asm);
        let m = results_match(&want, &got);
        prop_assert!(m.is_ok(), "{:?}\n{}\n{}", m, case.kernel, c.asm);
    }
}
