//! Every pass and the default pipeline, differentially tested against the interpreter on
//! random kernels: identical buffers (bitwise; NaNs compare equal) before and after, and the
//! output verifies. `KILN_PASS_CASES` sets the number of cases per pass (default 500); the
//! soak test `soak_pipeline` (ignored; run with `--release -- --ignored`) runs 20,000. A
//! failure is shrunk to a smallest failing kernel, printed as `.kir` text (`common::shrink`).

use kiln_ir::testing::{arb_kernel, arb_kernel_with, results_match, GenConfig, TestCase};
use kiln_ir::{verify_kernel, Intrinsic, Kernel, Visitor};
use kiln_passes::manager::PASSES;
use kiln_passes::pipeline::optimize;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestError, TestRunner};

mod common;

fn cases() -> u32 {
    std::env::var("KILN_PASS_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(500)
}

fn check(
    name: &str,
    pass: &dyn Fn(&Kernel) -> Kernel,
    case: &TestCase,
) -> Result<(), TestCaseError> {
    let before = case.run().map_err(|e| TestCaseError::fail(format!("original fails: {e}")))?;
    let k2 = pass(&case.kernel);
    if let Err(errs) = verify_kernel(&k2) {
        return Err(TestCaseError::fail(format!(
            "{name}: output does not verify: {errs:?}\n--- input\n{}\n--- output\n{k2}",
            case.kernel
        )));
    }
    let after = case
        .run_kernel(&k2)
        .map_err(|e| TestCaseError::fail(format!("{name}: output fails: {e}\n{k2}")))?;
    results_match(&before, &after).map_err(|m| {
        TestCaseError::fail(format!("{name}: {m}\n--- input\n{}\n--- output\n{k2}", case.kernel))
    })?;
    // A second run changes the result no further in meaning, and still verifies.
    let k3 = pass(&k2);
    prop_assert!(verify_kernel(&k3).is_ok(), "{name}: second run does not verify");
    Ok(())
}

fn run_pass(name: &str, pass: &dyn Fn(&Kernel) -> Kernel, n: u32) {
    run_pass_on(name, pass, n, arb_kernel());
}

/// [`run_pass`] on the kernels `kernels` generates.
fn run_pass_on(
    name: &str,
    pass: &dyn Fn(&Kernel) -> Kernel,
    n: u32,
    kernels: impl Strategy<Value = TestCase>,
) {
    let mut runner =
        TestRunner::new(Config { cases: n, failure_persistence: None, ..Config::default() });
    match runner.run(&kernels, |case| check(name, pass, &case)) {
        Ok(()) => {}
        // Proptest's own shrinking works on the choice stream; shrink the kernel itself
        // further and print the smallest failing kernel as .kir text.
        Err(TestError::Fail(why, case)) => {
            panic!("{why}\n{}", common::shrink_report(name, pass, &case))
        }
        Err(e) => panic!("{e}"),
    }
}

macro_rules! pass_test {
    ($test:ident, $name:literal) => {
        #[test]
        fn $test() {
            let f = PASSES.iter().find(|p| p.0 == $name).map(|p| p.1).expect("known pass");
            run_pass($name, &f, cases());
        }
    };
}

pass_test!(simplify_matches_interpreter, "simplify");
pass_test!(let_opt_matches_interpreter, "let-opt");
pass_test!(cse_matches_interpreter, "cse");

/// Random kernels whose statements use subexpressions again, loads included
/// ([`GenConfig::repeat_subexprs`]): repeats in a `select`'s condition and arms, failing
/// repeats evaluated after other failing operands, what CSE binds (the kernels above repeat
/// a load rarely). Four times as many cases (each is small).
#[test]
fn cse_matches_interpreter_on_repeated_subexpressions() {
    let cfg = GenConfig { repeat_subexprs: true, ..GenConfig::default() };
    run_pass_on("cse", &kiln_passes::cse::cse, cases() * 4, arb_kernel_with(cfg));
}
pass_test!(licm_matches_interpreter, "licm");
pass_test!(strength_matches_interpreter, "strength");
pass_test!(dce_matches_interpreter, "dce");
pass_test!(constprop_matches_interpreter, "constprop");
pass_test!(peephole_matches_interpreter, "peephole");
pass_test!(scalarize_matches_interpreter, "scalarize");
pass_test!(var_to_let_matches_interpreter, "var-to-let");
pass_test!(unroll_matches_interpreter, "unroll");
pass_test!(slm_buffer_matches_interpreter, "slm-buffer");

/// The generator's private arrays include constant-indexed ones, so the differential test
/// above exercises the replacement, not only the pass's refusal.
#[test]
fn scalarize_fires_on_random_kernels() {
    let mut runner = TestRunner::deterministic();
    let n = 500;
    let fired = (0..n)
        .filter(|_| {
            let case = arb_kernel().new_tree(&mut runner).expect("generates").current();
            !kiln_passes::scalarize::scalarize(&case.kernel).ptr_eq(&case.kernel)
        })
        .count();
    eprintln!("scalarize replaced arrays in {fired} of {n} random kernels");
    assert!(fired > 0, "no random kernel had a constant-indexed private array");
}

#[test]
fn default_pipeline_matches_interpreter() {
    run_pass("pipeline", &optimize, cases());
}

#[test]
#[ignore = "soak test: cargo test --release -p kiln-passes -- --ignored"]
fn soak_pipeline() {
    run_pass("pipeline", &optimize, 20_000);
}

#[test]
fn every_pass_leaves_an_unchanged_kernel_pointer_equal() {
    let m = kiln_ir::parse_module(
        "kernel k(x: ptr<global, u32>) { let i: u32 = global_id(0); x[i] = i; }",
    )
    .expect("parses");
    let k = &m.kernels[0];
    for (name, f, _) in PASSES {
        let k2 = f(k);
        assert!(k2.body().ptr_eq(k.body()), "{name} rebuilt an unchanged kernel:\n{k2}");
    }
}

/// The peephole differential test above is only as strong as the number of random kernels in
/// which it fuses something. Every generated kernel's prologue has u32 index arithmetic
/// (`group_id(0) * local_size(0) + local_id(0)`), so count what goes beyond it: new `add3`s,
/// and new `mad`s of other integer types.
#[test]
fn peephole_fuses_in_many_random_kernels() {
    let n = cases();
    let mut fused = 0u32;
    let mut runner = TestRunner::deterministic();
    for _ in 0..n {
        let case = arb_kernel().new_tree(&mut runner).expect("a case").current();
        let k2 = kiln_passes::peephole::peephole(&case.kernel);
        if count_fused(&k2) > count_fused(&case.kernel) {
            fused += 1;
        }
    }
    eprintln!("peephole fused add3 or a non-u32 mad in {fused} of {n} random kernels");
    assert!(fused >= n / 10, "peephole fused beyond the prologue in only {fused} of {n} kernels");
}

/// The number of `add3` calls and non-u32 `mad` calls in `k`.
fn count_fused(k: &Kernel) -> usize {
    struct Count(usize);
    impl Visitor for Count {
        fn visit_expr(&mut self, e: &kiln_ir::Expr) {
            if let kiln_ir::ExprNode::Intrinsic { op, .. } = e.node() {
                let u32_mad = *op == Intrinsic::Mad && e.ty() == kiln_ir::Type::U32;
                self.0 +=
                    usize::from(*op == Intrinsic::Add3 || (*op == Intrinsic::Mad && !u32_mad));
            }
            kiln_ir::walk_expr(self, e)
        }
    }
    let mut c = Count(0);
    c.visit_stmt(k.body());
    c.0
}

/// The CSE differential test must see unbound repeats bound in many random kernels.
#[test]
fn cse_binds_repeats_in_many_random_kernels() {
    let n = cases();
    let mut runner = TestRunner::deterministic();
    let mut hit = 0;
    for _ in 0..n {
        let case = arb_kernel().new_tree(&mut runner).expect("a case").current();
        let k2 = kiln_passes::cse::repeats::bind_repeats(&case.kernel);
        hit += u32::from(!k2.body().ptr_eq(case.kernel.body()));
    }
    eprintln!("repeated subexpressions bound in {hit} of {n} random kernels");
    assert!(hit >= n / 10, "repeated subexpressions bound in only {hit} of {n} kernels");
}

#[test]
#[ignore = "soak test: cargo test --release -p kiln-passes --test differential -- --ignored"]
fn soak_every_pass() {
    for (name, f, _) in PASSES {
        run_pass(name, f, 5_000);
    }
}
