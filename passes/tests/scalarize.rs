//! Scalar replacement of private arrays (`scalarize`) and single-assignment vars to lets
//! (`var-to-let`), by hand: what it replaces, what it
//! must leave alone, and the zeroing rule (an array starts zeroed each time its declaration
//! runs), each checked against the interpreter. Random kernels are in `differential.rs`.

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::{results_match, TestCase};
use kiln_ir::{parse_module, verify_kernel, Kernel};
use kiln_passes::pipeline::optimize;
use kiln_passes::scalarize::scalarize;
use kiln_passes::var_to_let::var_to_let;

fn case(src: &str) -> TestCase {
    let k = parse_module(src).expect("parses").kernels[0].clone();
    let n = k.params().len();
    TestCase {
        kernel: k,
        range: NdRange::new(&[8]).with_local(&[4]),
        args: (0..n).map(Arg::Buffer).collect(),
        buffers: (0..n)
            .map(|b| Buffer::from_slice(&[3i32, -1, 7, 0, 9, 2, -5, 4].map(|x| x + b as i32)))
            .collect(),
    }
}

/// Runs `f` on the case's kernel; the result verifies and matches the interpreter. Returns
/// the printed result.
fn check(c: &TestCase, f: fn(&Kernel) -> Kernel) -> String {
    let want = c.run().expect("original runs");
    let k2 = f(&c.kernel);
    verify_kernel(&k2).unwrap_or_else(|e| panic!("{e:?}\n{k2}"));
    let got = c.run_kernel(&k2).unwrap_or_else(|e| panic!("{e}\n{k2}"));
    results_match(&want, &got)
        .unwrap_or_else(|m| panic!("{m}\n--- input\n{}\n--- output\n{k2}", c.kernel));
    k2.to_string()
}

#[test]
fn internalized_one_element_buffers_become_vars() {
    let c = case(
        "kernel k(a: ptr<global, i32>, b: ptr<global, i32>, o: ptr<global, i32>) {
           private t: i32[1];
           let i: u32 = global_id(0);
           t[0u32] = a[i] + b[i];
           o[i] = t[0u32] * 2;
         }",
    );
    let out = check(&c, scalarize);
    assert!(!out.contains("private"), "{out}");
    assert!(out.contains("var t: i32 = 0;"), "{out}");
    let opt = check(&c, optimize);
    assert!(!opt.contains("private"), "{opt}");
}

#[test]
fn elements_start_zeroed_and_keep_their_own_values() {
    let c = case(
        "kernel k(o: ptr<global, i32>, p: ptr<global, i32>) {
           let i: u32 = global_id(0);
           private t: i32[3];
           o[i] = t[1u32];
           t[2u32] = 5;
           t[0u32] = o[i] + 11;
           p[i] = t[2u32] * 100 + t[0u32] * 10 + t[1u32];
         }",
    );
    let out = check(&c, scalarize);
    assert!(!out.contains("private") && out.contains("var t_2: i32 = 0;"), "{out}");
}

#[test]
fn a_declaration_in_a_loop_zeroes_its_elements_every_iteration() {
    let c = case(
        "kernel k(o: ptr<global, i32>) {
           let i: u32 = global_id(0);
           for j: i32 in 0 .. 3 {
             private t: i32[2];
             o[i] = o[i] + t[1u32] + t[0u32];
             t[0u32] = 7;
             t[1u32] = j;
           }
         }",
    );
    let out = check(&c, scalarize);
    assert!(!out.contains("private"), "{out}");
}

#[test]
fn arrays_with_a_variable_or_out_of_range_index_stay_arrays() {
    let c = case(
        "kernel k(o: ptr<global, i32>) {
           let i: u32 = global_id(0);
           private d: i32[2];
           private e: i32[2];
           d[i % 2u32] = 4;
           o[i] = d[0u32];
           if i > 100u32 { e[2u32] = 1; }
           o[i] = o[i] + e[1u32];
         }",
    );
    let out = check(&c, scalarize);
    assert!(out.contains("private d: i32[2]") && out.contains("private e: i32[2]"), "{out}");
    assert!(scalarize(&c.kernel).ptr_eq(&c.kernel), "an unchanged kernel is the same handle");
}

#[test]
fn names_of_elements_do_not_collide() {
    let c = case(
        "kernel k(o: ptr<global, i32>) {
           let t_0: u32 = global_id(0);
           private t: i32[2];
           t[0u32] = 3;
           t[1u32] = o[t_0];
           o[t_0] = t[0u32] - t[1u32];
         }",
    );
    let out = check(&c, scalarize);
    assert!(out.contains("var t_0_2: i32 = 0;") && out.contains("var t_1: i32 = 0;"), "{out}");
}

#[test]
fn a_var_assigned_once_becomes_a_let() {
    let c = case(
        "kernel k(a: ptr<global, i32>, o: ptr<global, i32>) {
           var x: i32 = 0;
           let i: u32 = global_id(0);
           x = a[i] * 3;
           o[i] = x + x;
         }",
    );
    let out = check(&c, var_to_let);
    assert!(out.contains("let x: i32 = a[i] * 3;") && !out.contains("var x"), "{out}");
    // The whole pipeline: fused-style scalars end as plain values.
    let opt = check(&c, optimize);
    assert!(!opt.contains("var "), "{opt}");
}

#[test]
fn vars_that_must_stay_vars() {
    let c = case(
        "kernel k(a: ptr<global, i32>, o: ptr<global, i32>) {
           let i: u32 = global_id(0);
           var early: i32 = 5;
           o[i] = early;
           early = a[i];
           var twice: i32 = 0;
           twice = 1;
           twice = a[i];
           var nested: i32 = 0;
           if i > 2u32 { nested = 4; }
           var selfref: i32 = 2;
           selfref = selfref + a[i];
           var failing: i32 = 7 / a[0u32];
           failing = 1;
           o[i] = o[i] + early + twice + nested + selfref + failing;
         }",
    );
    let out = check(&c, var_to_let);
    for v in ["early", "twice", "nested", "selfref", "failing"] {
        assert!(out.contains(&format!("var {v}: i32")), "{v} became a let:\n{out}");
    }
    assert!(var_to_let(&c.kernel).ptr_eq(&c.kernel));
}

/// The differential test in `differential.rs` exercises the rewrite, not only refusals.
#[test]
fn var_to_let_fires_on_random_kernels() {
    use proptest::strategy::{Strategy, ValueTree};
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let fired = (0..500)
        .filter(|_| {
            let case = kiln_ir::testing::arb_kernel().new_tree(&mut runner).unwrap().current();
            !var_to_let(&case.kernel).ptr_eq(&case.kernel)
        })
        .count();
    eprintln!("var-to-let rewrote {fired} of 500 random kernels");
    assert!(fired > 0);
}
