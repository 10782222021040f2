//! The affine normal form ([`kiln_passes::simplify::affine`]): it keeps every value (wrapping
//! included) and every error, is only taken when cheaper, is a fixed point, and settles the
//! index arithmetic of generated kernels without an e-graph.

use kiln_ir::testing::{arb_expr, ExprEnv};
use kiln_ir::{BinOp, Expr, ExprNode, Imm, Scalar, Type, Var};
use kiln_passes::simplify::affine::normalize;
use kiln_passes::simplify::gate::egg_may_help;
use kiln_passes::simplify::{expr_cost, simplify_expr};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

#[path = "common/eval.rs"]
#[allow(dead_code)]
mod eval;
use eval::eval;

fn vars() -> Vec<Var> {
    // Few variables per type, so random expressions repeat (and cancel) atoms.
    vec![
        Var::new("a", Type::I32),
        Var::new("b", Type::I32),
        Var::new("u", Type::U32),
        Var::new("w", Type::U8),
        Var::new("l", Type::I64),
    ]
}

/// Variable values: small ones (0, 1, -1, 2) and large ones, so that products wrap.
fn envs(seed: u64) -> Vec<Vec<(Var, Imm)>> {
    let mut x = seed;
    (0..8)
        .map(|_| {
            vars()
                .into_iter()
                .map(|var| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let small = [0i128, 1, -1, 2][(x & 3) as usize];
                    let val = if x & 4 == 0 { small } else { (x >> 7) as i64 as i128 };
                    let ty = var.ty().scalar().unwrap_or(Scalar::I32);
                    (var, Imm::int(ty, val))
                })
                .collect()
        })
        .collect()
}

fn runner(cases: u32) -> TestRunner {
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha))
}

#[test]
fn the_normal_form_keeps_every_value_and_error() {
    let env = ExprEnv { vars: vars(), buffers: vec![] };
    let tys = [Scalar::I32, Scalar::U32, Scalar::U8, Scalar::I64];
    let strategy = (proptest::sample::select(tys.to_vec()), 0u64..u64::MAX)
        .prop_flat_map(move |(ty, seed)| (arb_expr(ty, env.clone(), 5), Just(seed)));
    let changed = std::cell::Cell::new(0u32);
    let result = runner(2000).run(&strategy, |(e, seed)| {
        let n = normalize(&e);
        prop_assert_eq!(n.ty(), e.ty());
        if n.ptr_eq(&e) {
            return Ok(());
        }
        changed.set(changed.get() + 1);
        prop_assert!(expr_cost(&n) < expr_cost(&e), "{e}\n=> {n}");
        prop_assert!(
            normalize(&n).ptr_eq(&n),
            "not a fixed point: {e}\n=> {n}\n=> {}",
            normalize(&n)
        );
        for env in envs(seed) {
            // The same value, or the same error (message included).
            let (before, after) = (eval(&e, &env), eval(&n, &env));
            prop_assert_eq!(&before, &after, "{}\n=> {}\nat {:?}", e, n, env);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // A normal form that never applies would check nothing.
    assert!(changed.get() >= 200, "only {} of 2000 expressions changed", changed.get());
}

fn v(name: &str, ty: Type) -> Expr {
    Var::new(name, ty).expr()
}

#[test]
fn constants_fold_and_equal_terms_cancel_across_products() {
    let (m0, ty, n0, tx) =
        (v("m0", Type::I32), v("ty", Type::I32), v("n0", Type::I32), v("tx", Type::I32));
    // The GEMM epilogue's store index: the constants of both factors meet.
    let e = &(&m0 + &(&(&ty * 4) + 1)) * 4096 + &(&n0 + &(&(&tx * 4) + 64));
    assert_eq!(normalize(&e).to_string(), "m0 * 4096 + ty * 16384 + n0 + tx * 4 + 4160");
    let (a, b) = (v("a", Type::I32), v("b", Type::I32));
    assert_eq!(normalize(&(&(&(&a * 3) + &b) - &(&a * 3))).to_string(), "b");
    // Equal coefficients share one multiplication; a negative constant is subtracted.
    let e = &(&(&a + 1) * 4) + &(&(&b - 2) * 4);
    assert_eq!(normalize(&e).to_string(), "(a + b) * 4 - 4");
    // Wrapping coefficients: 200 + 100 is 44 modulo 2^8.
    let w = v("w", Type::U8);
    assert_eq!(normalize(&(&(&w * 200) + &(&w * 100))).to_string(), "w * 44");
    // Already minimal: the very same handle.
    let e = &(&a * 4) + &b;
    assert!(normalize(&e).ptr_eq(&e));
}

#[test]
fn a_region_that_may_fail_is_left_alone() {
    let (a, b) = (v("a", Type::I32), v("b", Type::I32));
    // `a / b` may divide by zero: cancelling it would lose the error.
    let e = &(&(&a / &b) + 1) - &(&a / &b);
    assert!(normalize(&e).ptr_eq(&e), "{}", normalize(&e));
    // A division named by its source keeps its name when the region around it is rebuilt.
    let named = Expr::binary(BinOp::Div, a.clone(), Expr::i32(3)).with_origin(" `a / 3`".into());
    let e = &(&(&named + 2) + 3) * 2;
    let n = normalize(&e);
    assert_eq!(n.to_string(), "a / 3 * 2 + 10");
    fn find_div(e: &Expr) -> Option<Expr> {
        if matches!(e.node(), ExprNode::Binary { op: BinOp::Div, .. }) {
            return Some(e.clone());
        }
        e.children().iter().find_map(|c| find_div(c))
    }
    let d = find_div(&n).expect("the division is kept");
    assert_eq!(d.origin(), Some(" `a / 3`"));
}

#[test]
fn affine_index_arithmetic_needs_no_egraph() {
    let var = |n: &str| v(n, Type::I32);
    let (m0, ka_r, ka_q, kt) = (var("m0"), var("ka_r"), var("ka_q"), var("kt"));
    for e in [
        &(&(&m0 + &ka_r) * 4096) + &(&ka_q * 4),
        &(&(&(&(&kt * 8) + 8) + &ka_r) * 4096) + &(&(&m0 + &ka_q) * 4),
        &(&kt + 1) * 512,
    ] {
        let n = normalize(&e);
        assert!(!egg_may_help(&n), "{e} => {n}");
        // And the simplifier as a whole finds nothing cheaper than the normal form.
        assert!(expr_cost(&simplify_expr(&e)) <= expr_cost(&n), "{e}");
    }
}
