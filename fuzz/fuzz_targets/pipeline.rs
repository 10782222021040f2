//! Differential fuzzing of the default optimization pipeline: a random kernel (built from the
//! input bytes with `case_from_bytes`) gives the same interpreter results before and after
//! `kiln_passes::pipeline::optimize`, and the optimized kernel verifies.
#![no_main]

use kiln_ir::testing::{case_from_bytes, results_match, GenConfig};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let case = case_from_bytes(data, &GenConfig::default());
    let Ok(before) = case.run() else { return };
    let k = kiln_passes::pipeline::optimize(&case.kernel);
    if let Err(e) = kiln_ir::verify_kernel(&k) {
        panic!("optimized kernel does not verify: {e:?}\n--- input\n{}\n--- output\n{k}", case.kernel);
    }
    let after = case.run_kernel(&k).unwrap_or_else(|e| {
        panic!("optimized kernel fails: {e}\n--- input\n{}\n--- output\n{k}", case.kernel)
    });
    if let Err(m) = results_match(&before, &after) {
        panic!("{m}\n--- input\n{}\n--- output\n{k}", case.kernel);
    }
});
