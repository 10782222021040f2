//! The failing-case shrinker (`common::shrink`) on a deliberately broken pass: it must keep
//! the case failing while reducing it to the one wrong construct.

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::{arb_kernel, TestCase};
use kiln_ir::{parse_module, walk_mutate_expr, BinOp, Expr, ExprNode, Kernel, Mutator, StmtNode};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;

mod common;
use common::{pass_error, shrink, shrink_report};

/// A miscompile: integer `a - b` becomes `b - a`.
fn broken(k: &Kernel) -> Kernel {
    struct Swap;
    impl Mutator for Swap {
        fn mutate_expr(&mut self, e: &Expr) -> Expr {
            let e = walk_mutate_expr(self, e);
            match e.node() {
                ExprNode::Binary { op: BinOp::Sub, a, b } if e.ty().is_int() => {
                    Expr::binary(BinOp::Sub, b.clone(), a.clone())
                }
                _ => e,
            }
        }
    }
    Swap.mutate_kernel(k)
}

fn count_subs(k: &Kernel) -> usize {
    k.to_string().matches(" - ").count()
}

#[test]
fn shrinks_a_hand_written_case_to_the_wrong_statement() {
    let src = "kernel k(o: ptr<global, i32>, x: ptr<global, i32>, a: i32) {
      let i: u32 = global_id(0);
      let t: i32 = x[i] * 3 + a;
      o[i] = t + 1;
      if i < 2 { o[i + 4] = min(t, a) * 2; } else { o[i + 4] = a - x[i] + 1; }
      for j: u32 in 0 .. 3 { o[i + 8] = o[i + 8] + x[j] * 5; }
      o[i + 12] = (x[i] << 2) ^ a;
    }";
    let kernel = parse_module(src).unwrap().kernels.remove(0);
    let case = TestCase {
        kernel,
        range: NdRange::new(&[4]),
        args: vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(7i32)],
        buffers: vec![
            Buffer::zeroed(kiln_ir::Scalar::I32, 16),
            Buffer::from_slice(&[1i32, 2, 3, 4]),
        ],
    };
    assert!(pass_error(&broken, &case).is_err(), "the broken pass must fail the case");
    let small = shrink(&broken, &case);
    assert!(pass_error(&broken, &small).is_err(), "the shrunk case must still fail");
    // Only the `if`'s else branch holds a subtraction: the store with it is all that is left
    // (with the `let i` it needs, or a constant in its place).
    let stmts = small.kernel.body().stmts();
    let stores = stmts.iter().filter(|s| matches!(s.node(), StmtNode::Store { .. })).count();
    assert_eq!(stores, 1, "{}", small.kernel);
    assert!(stmts.len() <= 2, "not shrunk far enough:\n{}", small.kernel);
    assert_eq!(count_subs(&small.kernel), 1, "{}", small.kernel);
    let report = shrink_report("broken", &broken, &case);
    assert!(report.contains("--- shrunk input (.kir)") && report.contains(" - "), "{report}");
    // The report's kernel is valid .kir text.
    let text = report.split("--- shrunk input (.kir)\n").nth(1).unwrap();
    let text = text.split("\n--- broken output").next().unwrap();
    parse_module(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
}

#[test]
fn shrinks_random_failing_cases() {
    let mut runner = TestRunner::deterministic();
    let mut shrunk = 0;
    let mut tried = 0;
    while shrunk < 3 && tried < 400 {
        tried += 1;
        let case = arb_kernel().new_tree(&mut runner).unwrap().current();
        if pass_error(&broken, &case).is_ok() {
            continue;
        }
        let t = std::time::Instant::now();
        let small = shrink(&broken, &case);
        eprintln!("shrunk in {:?}", t.elapsed());
        assert!(pass_error(&broken, &small).is_err(), "shrunk case no longer fails");
        let (before, after) = (case.kernel.to_string().len(), small.kernel.to_string().len());
        assert!(after < before, "no smaller:\n{}", small.kernel);
        // A subtraction must be left: it is the only thing the broken pass gets wrong.
        assert!(count_subs(&small.kernel) >= 1, "{}", small.kernel);
        assert!(small.kernel.body().stmts().len() <= 6, "not shrunk far enough:\n{}", small.kernel);
        shrunk += 1;
    }
    assert_eq!(shrunk, 3, "only {shrunk} failing cases among {tried} random kernels");
}
