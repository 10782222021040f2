//! Fixed points over random kernels: every pass run a second time on its own output, and the
//! default pipeline run again on a fully optimized kernel, return the pointer-identical
//! `Kernel` handle (nothing is rebuilt when nothing changes), and simplifying twice changes
//! nothing more than simplifying once.
//! `KILN_PASS_CASES` sets the number of cases per pass (default 500; the pipeline gets a
//! fifth of them, as it runs every pass twice).

use kiln_ir::testing::{arb_kernel, TestCase};
use kiln_ir::Kernel;
use kiln_passes::manager::PASSES;
use kiln_passes::pipeline::optimize;
use kiln_passes::simplify::simplify_kernel;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;

fn cases() -> u32 {
    std::env::var("KILN_PASS_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(500)
}

fn random_cases(n: u32) -> impl Iterator<Item = TestCase> {
    let mut runner = TestRunner::deterministic();
    (0..n).map(move |_| arb_kernel().new_tree(&mut runner).expect("a case").current())
}

/// Runs `f` on its own output; the second run must return the very same handle.
fn second_run_is_identity(name: &str, f: &dyn Fn(&Kernel) -> Kernel, n: u32) {
    for case in random_cases(n) {
        let once = f(&case.kernel);
        let twice = f(&once);
        if !twice.ptr_eq(&once) {
            let (a, b) = (once.to_string(), twice.to_string());
            let diff: Vec<String> = a
                .lines()
                .zip(b.lines())
                .filter(|(x, y)| x != y)
                .take(6)
                .map(|(x, y)| format!("- {x}\n+ {y}"))
                .collect();
            panic!(
                "{name}: a second run {} the kernel; first differing lines:\n{}\n--- input\n{}",
                if a == b { "rebuilt (unchanged)" } else { "changed" },
                diff.join("\n"),
                case.kernel
            );
        }
    }
}

#[test]
fn every_pass_is_a_fixed_point_on_its_own_output() {
    for (name, f, _) in PASSES {
        second_run_is_identity(name, f, cases());
    }
}

/// One run of the pipeline is not always a fixed point (its last `let-opt` inlines constants
/// that only a later `simplify` would fold), so the property is checked on fully optimized
/// kernels: the pipeline reaches a fixed point within a few rounds, and from there a further
/// run returns the very same handle.
#[test]
fn the_default_pipeline_is_a_fixed_point_on_optimized_kernels() {
    let to_fixed_point = |k: &Kernel| {
        let mut k = optimize(k);
        for _ in 0..4 {
            let next = optimize(&k);
            if next.ptr_eq(&k) {
                break;
            }
            k = next;
        }
        k
    };
    second_run_is_identity("-O to a fixed point", &to_fixed_point, cases() / 5);
}

#[test]
fn simplification_is_idempotent() {
    for case in random_cases(cases()) {
        let once = simplify_kernel(&case.kernel);
        let twice = simplify_kernel(&once);
        assert!(twice.is_equal(&once), "simplify changed its own output:\n{once}\n---\n{twice}");
        assert!(twice.ptr_eq(&once), "simplify rebuilt its own (unchanged) output:\n{once}");
    }
}
