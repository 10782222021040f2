//! Random epilogue fusions (a producer over a matrix, then element-wise consumers with
//! guards, rounded-up and padded ranges, in place or not, a promoted output or not; the
//! generator of `passes/tests/fusion_util/epilogue.rs`, driven by the input bytes): the
//! fused kernel gives exactly the buffers of the kernels one after another, or the fusion
//! is refused by name where a consumer's work-item that runs nowhere could fault.
#![no_main]

#[path = "../../passes/tests/fusion_util/mod.rs"]
mod fusion_util;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let choices = kiln_ir::testing::choices_from_bytes(data);
    let (scenario, ops) = fusion_util::epilogue::random_chain_from(&choices);
    if let Err(m) = fusion_util::epilogue::check_chain(&scenario, &ops) {
        panic!("{m}\nspec: {:?}\n{}", scenario.spec, scenario.module);
    }
});
