//! Full unrolling of constant-trip loops (`unroll`), by hand: what it unrolls (nested loops
//! innermost first, any integer counter type, empty loops), what it leaves alone (variable
//! bounds, too many iterations, barriers), each checked against the interpreter and the
//! verifier. Random kernels are in `differential.rs`; generated GEMM kernels in kiln-gen.

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::{arb_kernel, results_match, TestCase};
use kiln_ir::{parse_module, verify_kernel, Kernel};
use kiln_passes::unroll::unroll;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;

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

/// Unrolls; the result verifies, matches the interpreter, and a second run changes nothing.
fn check(c: &TestCase) -> String {
    let want = c.run().expect("original runs");
    let k2 = unroll(&c.kernel);
    verify_kernel(&k2).unwrap_or_else(|e| panic!("{e:?}\n{k2}"));
    let got = c.run_kernel(&k2).unwrap_or_else(|e| panic!("{e}\n{k2}"));
    results_match(&want, &got)
        .unwrap_or_else(|m| panic!("{m}\n--- input\n{}\n--- output\n{k2}", c.kernel));
    assert!(unroll(&k2).ptr_eq(&k2), "a second run changed\n{k2}");
    // The output prints and parses back to itself.
    let back = parse_module(&k2.to_string()).expect("reparses");
    assert!(back.kernels[0].is_equal(&k2));
    k2.to_string()
}

fn loops(k: &Kernel) -> usize {
    k.to_string().matches("for ").count()
}

#[test]
fn nested_constant_loops_unroll_completely() {
    let c = case(
        "kernel k(o: ptr<global, i32>) {
           let i: u32 = global_id(0);
           var s: i32 = 0;
           for a: i32 in 0 .. 3 { for b: u8 in 1u8 .. 8u8 step 3u8 { let t: i32 = a * (b as i32); s = s + t; } }
           o[i] = s;
         }",
    );
    let out = check(&c);
    assert!(!out.contains("for "), "{out}");
    assert_eq!(out.matches("let t: i32").count(), 9, "{out}");
    assert!(out.contains("let b: u8 = 7;"), "{out}");
}

#[test]
fn empty_and_single_trip_loops() {
    let c = case(
        "kernel k(o: ptr<global, i32>) {
           let i: u32 = global_id(0);
           for a: i32 in 5 .. 2 { o[i] = 1; }
           for b: i32 in -4 .. -3 step 7 { o[i] = o[i] + b; }
         }",
    );
    let out = check(&c);
    assert!(!out.contains("for "), "{out}");
    assert!(out.contains("let b: i32 = -4;"), "{out}");
}

#[test]
fn what_is_left_alone() {
    // Variable bound, too many iterations, a barrier in the body.
    for src in [
        "kernel k(o: ptr<global, i32>) { let i: u32 = global_id(0);
           for a: u32 in 0u32 .. i { o[i] = o[i] + 1; } }",
        "kernel k(o: ptr<global, i32>) { let i: u32 = global_id(0);
           for a: i32 in 0 .. 65 { o[i] = o[i] + a; } }",
        "kernel k(o: ptr<global, i32>) { let i: u32 = global_id(0);
           for a: i32 in 0 .. 2 { o[i] = o[i] + a; barrier(local); } }",
    ] {
        let c = case(src);
        let k2 = unroll(&c.kernel);
        assert!(k2.ptr_eq(&c.kernel), "changed:\n{k2}");
        assert_eq!(loops(&k2), 1);
    }
    // A loop too big to unroll keeps its small inner loop unrolled.
    let c = case(
        "kernel k(o: ptr<global, i32>) { let i: u32 = global_id(0);
           for a: i32 in 0 .. 60 { for b: i32 in 0 .. 30 { o[i] = o[i] + a * b; } } }",
    );
    let out = check(&c);
    assert_eq!(out.matches("for ").count(), 1, "{out}");
    assert!(out.contains("for a: i32 in 0 .. 60"), "{out}");
}

/// The differential test over random kernels is only as strong as how often it unrolls.
#[test]
fn unroll_fires_on_random_kernels() {
    let mut runner = TestRunner::deterministic();
    let n = 300;
    let fired = (0..n)
        .filter(|_| {
            let case = arb_kernel().new_tree(&mut runner).expect("generates").current();
            !unroll(&case.kernel).ptr_eq(&case.kernel)
        })
        .count();
    eprintln!("unroll changed {fired} of {n} random kernels");
    assert!(fired >= n / 20, "unroll changed only {fired} of {n} random kernels");
}

/// The statements around an unrolled loop, and those of branches and loops it leaves, come
/// back as the same handles (the pass walks statements only, and answers "unchanged" for a
/// statement without nested ones without rebuilding it).
#[test]
fn statements_without_loops_keep_their_handles() {
    let c = case(
        "kernel k(o: ptr<global, i32>) {
           let i: u32 = global_id(0);
           var s: i32 = 0;
           if i < 4u32 { s = s + 1; } else { s = s - 1; }
           for a: i32 in 0 .. 3 { s = s + a; }
           while s > 100 { s = s - 1; }
           o[i] = s;
         }",
    );
    let k2 = unroll(&c.kernel);
    check(&c);
    let (before, after) = (c.kernel.body().stmts(), k2.body().stmts());
    assert_eq!(before.len(), after.len(), "{k2}");
    for (j, (a, b)) in before.iter().zip(after).enumerate() {
        // Statement 3 is the loop, unrolled; the others are left as they were.
        assert_eq!(a.ptr_eq(b), j != 3, "statement {j}\n{k2}");
    }
}
