//! The cheap pre-simplifier and the test that skips the e-graph: the pre-pass keeps every
//! value (errors included), and pre-simplifying plus skipping egg where the gate says it
//! cannot help never gives a costlier result than running every expression through egg.

use kiln_ir::testing::{arb_expr, ExprEnv};
use kiln_ir::{BinOp, Builtin, Expr, Imm, Scalar, Type, Var};
use kiln_passes::simplify::affine::normalize;
use kiln_passes::simplify::gate::egg_may_help;
use kiln_passes::simplify::pre::presimplify;
use kiln_passes::simplify::{expr_cost, simplify_expr_with, Limits};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

fn v(name: &str, ty: Type) -> Var {
    Var::new(name, ty)
}

#[path = "common/eval.rs"]
mod eval;
use eval::{eval, same};

fn vars() -> Vec<Var> {
    // Few variables per type, so random expressions repeat operands (what cancels).
    vec![
        v("a", Type::I32),
        v("b", Type::I32),
        v("u", Type::U32),
        v("w", Type::U8),
        v("f", Type::F32),
        v("p", Type::BOOL),
    ]
}

fn strategy() -> impl Strategy<Value = (Expr, u64)> {
    let env = ExprEnv { vars: vars(), buffers: vec![] };
    let tys = [Scalar::I32, Scalar::U32, Scalar::U8, Scalar::F32, Scalar::Bool];
    (proptest::sample::select(tys.to_vec()), 0u64..u64::MAX)
        .prop_flat_map(move |(ty, seed)| (arb_expr(ty, env.clone(), 5), Just(seed)))
}

fn envs(seed: u64) -> Vec<Vec<(Var, Imm)>> {
    let mut x = seed;
    (0..8)
        .map(|_| {
            vars()
                .into_iter()
                .map(|var| {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let bits = (x >> 17) as i64 as i128;
                    let ty = var.ty().scalar().unwrap_or(Scalar::I32);
                    let small = [0i128, 1, -1, 2][(x & 3) as usize];
                    let val = if x & 4 == 0 { small } else { bits };
                    let imm = if ty == Scalar::Bool {
                        Imm::Bool(val & 1 == 1)
                    } else if ty.is_float() {
                        Imm::float(ty, val as f64 / 7.0)
                    } else {
                        Imm::int(ty, val)
                    };
                    (var, imm)
                })
                .collect()
        })
        .collect()
}

#[test]
fn presimplify_keeps_every_value() {
    let mut runner =
        TestRunner::new(Config { cases: 1000, failure_persistence: None, ..Config::default() });
    let result = runner.run(&strategy(), |(e, seed)| {
        let p = presimplify(&e);
        prop_assert_eq!(p.ty(), e.ty());
        prop_assert!(expr_cost(&p) <= expr_cost(&e) + 2, "{e}\n=> {p}");
        for env in envs(seed) {
            let (before, after) = (eval(&e, &env), eval(&p, &env));
            prop_assert!(same(&before, &after), "{e}\n=> {p}\nat {env:?}: {before:?} vs {after:?}");
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// A runner with a fixed seed: the strength checks compare two bounded searches, so a
/// failure must reproduce.
fn fixed_runner(cases: u32) -> TestRunner {
    let config = Config { cases, failure_persistence: None, ..Config::default() };
    TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha))
}

#[test]
fn where_the_gate_skips_egg_egg_finds_nothing_cheaper() {
    let full = Limits { presimplify: false, ..Limits::default() };
    let fast = Limits::default();
    // The cases the gate skips egg for, which alone reach the comparison.
    let compared = std::cell::Cell::new(0u32);
    let result = fixed_runner(1000).run(&strategy(), |(e, _)| {
        // What the simplifier's cheap round hands the gate.
        let p = normalize(&presimplify(&e));
        if egg_may_help(&p) {
            return Ok(());
        }
        compared.set(compared.get() + 1);
        let (slow, quick) = (simplify_expr_with(&p, &full), simplify_expr_with(&p, &fast));
        prop_assert!(
            expr_cost(&quick) <= expr_cost(&slow),
            "{p}\negg: {slow} (cost {})\nwithout egg at the top: {quick} (cost {})",
            expr_cost(&slow),
            expr_cost(&quick),
        );
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let compared = compared.get();
    // 647 of the fixed sample's 1000 reached it when this was written: a gate that lets
    // egg see (nearly) everything would leave this test checking nothing.
    assert!(compared >= 600, "only {compared} of 1000 expressions reached the comparison");
}

#[test]
fn the_pre_pass_loses_no_strength_overall() {
    // Both paths end in node-limited e-graph searches, which are not monotone, and a folded
    // constant can leave egg fewer routes (`-(4294967294) * u` folds to `2 * u`, while egg
    // alone happens to reach the cheaper `u + u` by distributing over the unfolded form):
    // a rare single expression may come out costlier (3 in 8000 random ones, by 2 each, when
    // this was written). Summed over the fixed sample, the pre-pass path must not be.
    let full = Limits { presimplify: false, ..Limits::default() };
    let fast = Limits::default();
    let totals = std::cell::Cell::new((0u64, 0u64));
    let result = fixed_runner(1000).run(&strategy(), |(e, _)| {
        let (slow, quick) = totals.get();
        totals.set((
            slow + expr_cost(&simplify_expr_with(&e, &full)),
            quick + expr_cost(&simplify_expr_with(&e, &fast)),
        ));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let (slow, quick) = totals.get();
    assert!(quick <= slow, "total cost with the pre-pass {quick}, egg only {slow}");
}

#[test]
fn remapping_identities_need_no_egraph() {
    let gid = Expr::builtin(Builtin::GlobalId, 0);
    let lid = Expr::builtin(Builtin::LocalId, 0);
    let c = Expr::u32(12);
    let off = Expr::u32(13);
    let g2 = &gid + &off;
    for (e, want) in [
        (&(&gid / &c) * &c + &(&gid % &c), "global_id(0)"),
        (&(&gid % &c) + &(&c * &(&gid / &c)), "global_id(0)"),
        (&(&(&g2 / &c) * &c + &(&g2 % &c)) - &off, "global_id(0)"),
        (&(&(&gid % &c) % &c) + &(&(&gid / &c) * &c), "global_id(0)"),
        (&(&(&gid * &c) + &lid) - &(&lid + &(&gid * &c)) + &gid, "global_id(0)"),
        (&(&c * &(&gid + Expr::u32(1))) - &c, "global_id(0) * 12"),
        (&(&gid * Expr::u32(1) + Expr::u32(0)) - &(&lid * Expr::u32(0)), "global_id(0)"),
        (&(&(&lid + &gid) * Expr::u32(2)) - &(&lid + &gid), "local_id(0) + global_id(0)"),
        (&(&(&lid + &gid) + &c) - &(&gid + &c), "local_id(0)"),
        (&(&gid + Expr::u32(1)) - &(&lid + Expr::u32(3)), "global_id(0) - local_id(0) - 2"),
    ] {
        let p = presimplify(&e);
        assert_eq!(p.to_string(), want, "{e}");
        assert!(!egg_may_help(&p), "{p}");
    }
}

#[test]
fn the_gate_sends_what_egg_improves_to_egg() {
    let (a, b) = (v("a", Type::I32), v("b", Type::I32));
    let lid = Expr::builtin(Builtin::LocalId, 1);
    let lsz = Expr::builtin(Builtin::LocalSize, 1);
    for e in [&(&a * &b) - &a, &lid % &lsz, a.expr().min(b.expr())] {
        assert!(egg_may_help(&normalize(&presimplify(&e))), "{e}");
    }
    for e in [&a + &b, &(&a * 4) + &b, (&a + &b).cmp_lt(7), &a / &b] {
        assert!(!egg_may_help(&e), "{e}");
    }
}

#[test]
fn affine_regions_are_settled_without_egg() {
    // What only egg found before the affine normal form: now the normal form's, as cheap.
    let (a, b) = (v("a", Type::I32), v("b", Type::I32));
    let full = Limits { presimplify: false, ..Limits::default() };
    for e in [2 * (&a + &b) - a.expr(), -(&a + &b), &(&(&a + &b) * 3) - &(&b * 3)] {
        let n = normalize(&presimplify(&e));
        assert!(!egg_may_help(&n), "{e} => {n}");
        let egg = simplify_expr_with(&e, &full);
        assert!(expr_cost(&n) <= expr_cost(&egg), "{e}: {n} vs egg's {egg}");
    }
}

/// Index arithmetic of generated tiles: one id split by a shift and a mask, each part
/// scaled. The id occurs in two scopes (`>>`, `&`) that no rule joins.
#[test]
fn a_leaf_repeated_in_separate_scopes_builds_no_egraph() {
    let l = Expr::builtin(Builtin::LocalId, 0).cast(Scalar::I32);
    let m0 = v("m0", Type::I32);
    let shr = |x: &Expr, k: i128| Expr::binary(BinOp::Shr, x.clone(), Expr::int(Scalar::I32, k));
    let and = |x: &Expr, k: i128| Expr::binary(BinOp::And, x.clone(), Expr::int(Scalar::I32, k));
    let full = Limits { presimplify: false, ..Limits::default() };
    for e in [
        &(shr(&l, 2) * 40) + &(and(&l, 3) * 8),
        &(&(&m0 + &shr(&l, 2)) * 4096) + &(and(&l, 3) * 8),
        &(shr(&(&l + 256), 4) * 136) + &(and(&(&l + 256), 15) * 8),
        // Two comparisons of different values (a bounds check).
        Expr::binary(
            BinOp::LogicAnd,
            Expr::binary(BinOp::Lt, m0.expr(), l.clone()),
            Expr::binary(BinOp::Lt, v("y", Type::I32).expr(), v("h", Type::I32).expr()),
        ),
    ] {
        let p = normalize(&presimplify(&e));
        assert!(!egg_may_help(&p), "{p}");
        // What egg would make of it is no cheaper.
        let egg = simplify_expr_with(&p, &full);
        assert!(expr_cost(&egg) >= expr_cost(&p), "{p}: egg finds {egg}");
    }
}

/// Two units of one kind in one scope may become equal by rewriting inside them; they go to
/// egg, which finds what their equality gives.
#[test]
fn units_that_may_become_equal_go_to_egg() {
    let (a, b) = (v("a", Type::I32), v("b", Type::I32));
    let shr = |x: Expr| Expr::binary(BinOp::Shr, x, Expr::int(Scalar::I32, 2));
    let cases = [
        &(shr(&a + &b) * 3) + &(shr(&b + &a) * 5),
        &(&(&a & &b) * 3) + &(&(&b & &a) * 5),
        Expr::binary(
            BinOp::LogicAnd,
            Expr::binary(BinOp::Lt, a.expr(), b.expr()),
            Expr::binary(BinOp::Gt, b.expr(), a.expr()),
        ),
    ];
    for e in cases {
        let p = normalize(&presimplify(&e));
        assert!(egg_may_help(&p), "{p}");
        let s = kiln_passes::simplify::simplify_expr(&e);
        assert!(expr_cost(&s) < expr_cost(&p), "{e} => {s}");
    }
}

/// True if a leaf (a non-operator operand) occurs twice in the operator part of `e`.
fn repeats_leaf(e: &Expr) -> bool {
    fn walk(e: &Expr, seen: &mut Vec<Expr>) -> bool {
        if e.as_imm().is_some() {
            return false;
        }
        if !kiln_passes::simplify::lang::is_operator(e) {
            if seen.contains(e) {
                return true;
            }
            seen.push(e.clone());
            return false;
        }
        e.children().iter().any(|c| walk(c, seen))
    }
    walk(e, &mut Vec::new())
}

/// Random index-like expressions over two leaves that mix the scope kinds (ring, shifts,
/// masks, `|`, `^`, `/`, `%`): where the gate skips egg although a leaf repeats (in separate
/// scopes), egg finds nothing cheaper.
#[test]
fn across_scopes_the_gate_skips_only_what_egg_cannot_improve() {
    let leaves = vec![
        v("a", Type::I32).expr(),
        v("b", Type::I32).expr(),
        Expr::builtin(Builtin::LocalId, 0).cast(Scalar::I32),
    ];
    let leaf = prop_oneof![
        2 => proptest::sample::select(leaves),
        1 => (3i128..200).prop_map(|k| Expr::int(Scalar::I32, k)),
    ];
    let ops = [
        BinOp::Add,
        BinOp::Sub,
        BinOp::Mul,
        BinOp::Shr,
        BinOp::Shl,
        BinOp::And,
        BinOp::Or,
        BinOp::Xor,
        BinOp::Div,
        BinOp::Rem,
    ];
    let expr = leaf.prop_recursive(4, 24, 2, move |inner| {
        (proptest::sample::select(ops.to_vec()), inner.clone(), inner)
            .prop_map(|(op, x, y)| Expr::binary(op, x, y))
    });
    let full = Limits { presimplify: false, ..Limits::default() };
    let compared = std::cell::Cell::new(0u32);
    let result = fixed_runner(3000).run(&expr, |e| {
        let p = normalize(&presimplify(&e));
        // The cases scopes decide: a leaf repeats, which alone sent them all to egg before.
        if egg_may_help(&p) || !kiln_passes::simplify::lang::is_operator(&p) || !repeats_leaf(&p) {
            return Ok(());
        }
        compared.set(compared.get() + 1);
        let (slow, quick) =
            (simplify_expr_with(&p, &full), simplify_expr_with(&p, &Limits::default()));
        prop_assert!(
            expr_cost(&quick) <= expr_cost(&slow),
            "{p}\negg: {slow} (cost {})\nwithout egg at the top: {quick} (cost {})",
            expr_cost(&slow),
            expr_cost(&quick),
        );
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // About 1200 of the fixed sample when this was written.
    assert!(compared.get() >= 500, "only {} expressions reached the comparison", compared.get());
}
