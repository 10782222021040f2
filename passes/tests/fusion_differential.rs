//! The judge: random lists of random kernels with random compatible nd-ranges (1-3 dims,
//! with and without local sizes and offsets, repeats, shared and promoted buffers, constants);
//! running the fused kernel once gives exactly the buffers the sequential runs give, and
//! internalized buffers keep their initial contents.

mod fusion_util;

use fusion_util::{check, random_scenario};
use proptest::collection::vec;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn fused_equals_sequential(raw in vec(any::<u32>(), 0..6000)) {
        let s = random_scenario(&raw);
        if let Err(m) = check(&s) {
            prop_assert!(false, "{m}\nspec: {:?}", s.spec);
        }
    }
}
