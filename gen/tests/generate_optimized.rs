//! `generate_optimized`, the generator's kernels through `-O` verified once (by `-O`'s
//! verifier), hands out exactly what `optimize` of `generate`'s verified kernels is, with the
//! same launch: a JIT that takes the shorter path builds the same code.

use kiln_gen::tuner::{first_choice, Target};
use kiln_gen::{generate, generate_optimized, ConvProblem, GemmConfig, GemmProblem, GemmViews};
use kiln_ir::{Kernel, Scalar};
use kiln_passes::pipeline::optimize;

/// `generate_optimized(views, cfg)` against `optimize` of `generate(views, cfg)`'s kernels.
fn check(views: &GemmViews, cfg: &GemmConfig, what: &str) {
    let plain = generate(views, cfg).expect("generates");
    let chained = generate_optimized(views, cfg).expect("generates");
    let text = |k: &Kernel| k.to_string();
    assert_ne!(text(&chained.kernel), text(&plain.kernel), "{what}: -O changed something");
    assert_eq!(text(&chained.kernel), text(&optimize(&plain.kernel)), "{what} ({cfg})");
    assert_eq!(
        (chained.global, chained.local, chained.buffer_elems, chained.mnk),
        (plain.global, plain.local, plain.buffer_elems, plain.mnk),
        "{what}: the launch"
    );
    match (&chained.split, &plain.split) {
        (Some(c), Some(p)) => {
            assert_eq!(text(&c.reduce), text(&optimize(&p.reduce)), "{what}: split-K's reduce");
            assert_eq!(
                (c.slices, c.reduce_global, c.reduce_local),
                (p.slices, p.reduce_global, p.reduce_local)
            );
        }
        (None, None) => {}
        _ => panic!("{what}: split-K in one path only"),
    }
}

#[test]
fn generate_optimized_is_optimize_of_generate() {
    let p = |m, n, k, trans_a, trans_b| GemmProblem { m, n, k, trans_a, trans_b, ty: Scalar::F32 };
    let tuned_4096 = first_choice([4096; 3], &Target::h100());
    let tuned = p(4096, 4096, 4096, false, false);
    check(&tuned.views().unwrap(), &tuned_4096, "the tuned 4096^3 GEMM");
    let problem = tuned.generate_optimized(&tuned_4096).expect("generates");
    assert_eq!(
        problem.kernel.to_string(),
        optimize(&tuned.generate(&tuned_4096).unwrap().kernel).to_string(),
        "GemmProblem::generate_optimized"
    );
    let odd = p(100, 60, 36, true, false);
    check(&odd.views().unwrap(), &GemmConfig::default(), "an odd transposed GEMM");
    let split = GemmConfig { split_k: 4, ..GemmConfig::default() };
    let deep = p(64, 48, 1000, false, true);
    let g = generate_optimized(&deep.views().unwrap(), &split).expect("generates");
    assert!(g.split.is_some(), "split-K is taken");
    check(&deep.views().unwrap(), &split, "split-K");
    let batched = p(33, 17, 9, false, false).batched(3);
    check(&batched.views().unwrap(), &GemmConfig::default(), "a batched GEMM");
    let conv = ConvProblem::new(2, 8, 9, 9, 16, 3, 3).with_padding(1, 1);
    check(&conv.views().unwrap(), &GemmConfig::default(), "a convolution");
}
