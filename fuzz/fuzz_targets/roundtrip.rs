//! Random well-typed kernels (from `kiln_ir::testing`, seeded by the input bytes) print to text
//! that parses back to an equal kernel.
#![no_main]

use kiln_ir::testing::arb_kernel;
use kiln_ir::Module;
use libfuzzer_sys::fuzz_target;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

fuzz_target!(|data: &[u8]| {
    let mut seed = [0u8; 32];
    let n = data.len().min(32);
    seed[..n].copy_from_slice(&data[..n]);
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let Ok(tree) = arb_kernel().new_tree(&mut runner) else { return };
    let case = tree.current();
    let module = Module::new(vec![case.kernel.clone()]);
    let text = module.to_string();
    let parsed = kiln_ir::parse_module(&text)
        .unwrap_or_else(|d| panic!("printed kernel does not parse:\n{d}\n--- printed:\n{text}"));
    assert!(
        parsed.is_equal(&module),
        "print/parse changed the kernel\n--- printed:\n{text}\n--- reprinted:\n{parsed}"
    );
    assert_eq!(parsed.to_string(), text, "printing is not a fixed point");
});
