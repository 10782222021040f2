//! Random lists of random kernels with random compatible nd-ranges, shared and promoted
//! buffers and constants (the generator of `passes/tests/fusion_util`, driven by the input
//! bytes): the fused kernel, run once on the interpreter, gives exactly the buffers of the
//! sequential runs, internalized buffers untouched, and prints/parses back to itself.
#![no_main]

#[path = "../../passes/tests/fusion_util/mod.rs"]
mod fusion_util;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let choices = kiln_ir::testing::choices_from_bytes(data);
    let scenario = fusion_util::random_scenario(&choices);
    if let Err(m) = fusion_util::check(&scenario) {
        panic!("{m}\nspec: {:?}", scenario.spec);
    }
});
