//! Differential fuzzing of the simplifier alone: a random kernel (from the input bytes) gives
//! the same interpreter results after the `simplify` pass, which verifies, and simplifying
//! again returns the very same kernel body (idempotence).
#![no_main]

use kiln_ir::testing::{case_from_bytes, results_match, GenConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let case = case_from_bytes(data, &GenConfig::default());
    let Ok(before) = case.run() else { return };
    let k = kiln_passes::simplify::simplify_kernel(&case.kernel);
    if let Err(e) = kiln_ir::verify_kernel(&k) {
        panic!("simplified kernel does not verify: {e:?}\n--- input\n{}\n--- output\n{k}", case.kernel);
    }
    let after = case.run_kernel(&k).unwrap_or_else(|e| {
        panic!("simplified kernel fails: {e}\n--- input\n{}\n--- output\n{k}", case.kernel)
    });
    if let Err(m) = results_match(&before, &after) {
        panic!("{m}\n--- input\n{}\n--- output\n{k}", case.kernel);
    }
});
