//! The affine normal form ([`kiln_passes::simplify::affine`]): it keeps every value (wrapping
//! included) and every error, is only taken when cheaper, is a fixed point, and settles the
//! index arithmetic of generated kernels without an e-graph.

use kiln_ir::testing::{arb_expr, ExprEnv};
use kiln_ir::{BinOp, Expr, ExprNode, Imm, Scalar, Type, Var};
use kiln_passes::simplify::affine::{constant_difference, normalize};
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

#[test]
fn a_constant_difference_is_the_difference_of_the_values() {
    let env = ExprEnv { vars: vars(), buffers: vec![] };
    let tys = [Scalar::I32, Scalar::U32, Scalar::U8, Scalar::I64];
    // Pairs that share atoms: `b` is `a` plus a random offset rebuilt around it, or another
    // random expression (whose difference is rarely constant).
    let strategy = (proptest::sample::select(tys.to_vec()), 0u64..u64::MAX, -5i128..5)
        .prop_flat_map(move |(ty, seed, k)| {
            (arb_expr(ty, env.clone(), 4), arb_expr(ty, env.clone(), 4), Just(seed), Just(k))
        });
    let found = std::cell::Cell::new(0u32);
    let result = runner(1000).run(&strategy, |(a, other, seed, k)| {
        let ty = a.ty().scalar().expect("scalar");
        let shifted = &(&a * 1) + &Expr::int(ty, k);
        for b in [shifted, other] {
            let Some(d) = constant_difference(&a, &b) else { continue };
            found.set(found.get() + 1);
            prop_assert!(!a.may_fail() && !b.may_fail(), "{a} - {b}: an atom may fail");
            for env in envs(seed) {
                let (x, y) = (eval(&a, &env), eval(&b, &env));
                let (Ok(x), Ok(y)) = (x, y) else {
                    prop_assert!(false, "{a} - {b} = {d}, yet one side fails at {env:?}");
                    unreachable!()
                };
                let diff = eval(&(a.clone() - b.clone()), &env).expect("no failure");
                let want = eval(&Expr::int(ty, d), &env).expect("a constant");
                prop_assert_eq!(diff, want, "{} - {} ({:?}, {:?}) at {:?}", a, b, x, y, env);
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // The shifted pair settles wherever `a` cannot fail: a check that never finds one
    // would check nothing.
    assert!(found.get() >= 300, "only {} constant differences found", found.get());
}

#[test]
fn a_constant_difference_needs_every_atom_to_cancel() {
    let var = |n: &str| v(n, Type::I32);
    let (m0, ty, n0, tx) = (var("m0"), var("ty"), var("n0"), var("tx"));
    // A GEMM epilogue's lane 3 against lane 0: the same row, three columns on.
    let lane = |j: i32| &(&(&m0 + &(&ty * 4)) * 4096) + &(&n0 + &(&(&tx * 4) + j));
    assert_eq!(constant_difference(&lane(3), &lane(0)), Some(3));
    assert_eq!(constant_difference(&lane(0), &lane(3)), Some(-3));
    // A term left over (`n0` against `tx`), or atoms equal only once simplified
    // (`m0 * ty` against `ty * m0`): not settled here.
    assert_eq!(constant_difference(&(&n0 + 1), &tx), None);
    assert_eq!(constant_difference(&(&(&m0 * &ty) + 1), &(&ty * &m0)), None);
    // An atom that may fail (a division by a variable) is never cancelled.
    let q = &m0 / &tx;
    assert_eq!(constant_difference(&(&q + 2), &q), None);
    // Wrapping: u8 arithmetic is modulo 256.
    let w = v("w", Type::U8);
    assert_eq!(
        constant_difference(&(&(&w * 200) + &(&w * 56)), &Expr::int(Scalar::U8, 1)),
        Some(-1)
    );
    // Different types are never compared.
    assert_eq!(constant_difference(&m0, &v("l", Type::I64)), None);
}
