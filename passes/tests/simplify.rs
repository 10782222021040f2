//! The simplifier on expressions: the oneDNN example, the error policy, the index identities,
//! idempotence and same-handle behaviour, and random expressions evaluated before and after
//! (a failing case is shrunk by proptest and printed as .kir text).

use kiln_ir::testing::{arb_expr, ExprEnv};
use kiln_ir::{Expr, Imm, Scalar, Type, Var};
use kiln_passes::simplify::{node_count, simplify_expr, Limits};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

fn v(name: &str, ty: Type) -> Var {
    Var::new(name, ty)
}

#[test]
fn onednn_example_is_at_most_five_nodes() {
    let (a, b) = (v("a", Type::I32), v("b", Type::I32));
    let e = 2 * (&a + &b) - a.expr();
    let s = simplify_expr(&e);
    assert!(node_count(&s) <= 5, "{s}");
    assert_eq!(node_count(&s), 5, "{s}");
}

#[test]
fn remapping_identities() {
    let x = v("x", Type::U32);
    let e = (&x / 4u32) * 4u32 + (&x % 4u32);
    assert_eq!(simplify_expr(&e).to_string(), "x");
    let e = (&x % 7u32) % 7u32;
    assert_eq!(simplify_expr(&e).to_string(), "x % 7");
    let i = v("i", Type::I32);
    let e = (&i / 3) * 3 + (&i % 3);
    assert_eq!(simplify_expr(&e).to_string(), "i");
}

#[test]
fn work_item_ids_are_below_their_sizes() {
    use kiln_ir::Builtin;
    let lid = Expr::builtin(Builtin::LocalId, 1);
    let lsz = Expr::builtin(Builtin::LocalSize, 1);
    assert_eq!(simplify_expr(&(&lid % &lsz)).to_string(), "local_id(1)");
    assert_eq!(simplify_expr(&(&lid / &lsz)).to_string(), "0u32");
    assert_eq!(simplify_expr(&lid.cmp_lt(&lsz)).to_string(), "true");
    assert_eq!(simplify_expr(&lsz.cmp_gt(&lid)).to_string(), "true");
    // Different dimensions: no fact.
    let other = Expr::builtin(Builtin::LocalSize, 0);
    assert_eq!(simplify_expr(&(&lid % &other)).to_string(), "local_id(1) % local_size(0)");
}

#[test]
fn may_fail_operands_are_kept() {
    let (a, b) = (v("a", Type::I32), v("b", Type::I32));
    // 0 * (a / b): b may be zero, so the division stays.
    let e = Expr::i32(0) * (&a / &b);
    let s = simplify_expr(&e);
    assert!(s.to_string().contains("a / b"), "{s}");
    // With a non-zero constant divisor it folds.
    let e = Expr::i32(0) * (&a / 3);
    assert_eq!(simplify_expr(&e).to_string(), "0");
    // x - x with a possibly failing x is kept.
    let e = (&a / &b) - (&a / &b);
    assert!(simplify_expr(&e).to_string().contains("a / b"));
    // A constant division by zero is not folded.
    let e = Expr::i32(1) / Expr::i32(0);
    assert_eq!(simplify_expr(&e).to_string(), "1 / 0");
}

#[test]
fn floats_are_not_reassociated_or_zero_folded() {
    let x = v("x", Type::F32);
    for (e, want) in [
        (&x + 0.0f32, "x + 0.0"),
        (&x * 0.0f32, "x * 0.0"),
        ((&x + 1.0f32) + 1.0f32, "x + 1.0 + 1.0"),
    ] {
        let s = simplify_expr(&e);
        assert_eq!(s.to_string(), want);
    }
    assert_eq!(simplify_expr(&(&x * 1.0f32)).to_string(), "x");
    assert_eq!(simplify_expr(&(&x - 0.0f32)).to_string(), "x");
}

#[test]
fn unchanged_expressions_come_back_pointer_equal() {
    let (a, b) = (v("a", Type::I32), v("b", Type::I32));
    for e in [
        &a + &b,
        a.expr(),
        (&a * &b).cmp_lt(&b),
        Expr::select(a.expr().cmp_lt(0), a.expr(), b.expr()),
    ] {
        assert!(simplify_expr(&e).ptr_eq(&e), "{e}");
    }
}

#[path = "common/eval.rs"]
mod eval;
use eval::{eval, same};

#[test]
fn random_expressions_keep_their_value_and_simplify_idempotently() {
    let vars = vec![
        v("a", Type::I32),
        v("b", Type::I32),
        v("u", Type::U32),
        v("w", Type::U8),
        v("l", Type::I64),
        v("f", Type::F32),
        v("d", Type::F64),
        v("p", Type::BOOL),
    ];
    let env = ExprEnv { vars: vars.clone(), buffers: vec![] };
    let tys = [Scalar::I32, Scalar::U32, Scalar::U8, Scalar::I64, Scalar::F32, Scalar::Bool];
    let strat = (proptest::sample::select(tys.to_vec()), 0u64..u64::MAX)
        .prop_flat_map(move |(ty, seed)| (arb_expr(ty, env.clone(), 4), Just(seed)));
    let mut runner =
        TestRunner::new(Config { cases: 500, failure_persistence: None, ..Config::default() });
    let result = runner.run(&strat, |(e, seed)| {
        let s = simplify_expr(&e);
        prop_assert_eq!(s.ty(), e.ty());
        let s2 = simplify_expr(&s);
        prop_assert!(s2.ptr_eq(&s), "not idempotent:\n{}\n-> {}\n-> {}", e, s, s2);
        let mut x = seed;
        for _ in 0..8 {
            let env: Vec<(Var, Imm)> = vars
                .iter()
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
                    (var.clone(), imm)
                })
                .collect();
            let (before, after) = (eval(&e, &env), eval(&s, &env));
            prop_assert!(same(&before, &after), "{e}\n=> {s}\nat {env:?}: {before:?} vs {after:?}");
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// A kernel storing `x_i * y + x_i * z` for `n` parameters `x_i`: each is distinct, and only
/// the e-graph (factoring a non-constant) finds `x_i * (y + z)` (the affine normal form
/// leaves products of two variables alone).
fn factoring_kernel(n: usize) -> kiln_ir::Kernel {
    let params: Vec<String> = (0..n).map(|i| format!("x{i}: u32")).collect();
    let stores: Vec<String> = (0..n).map(|i| format!("o[{i}u32] = x{i} * y + x{i} * z;")).collect();
    let src = format!(
        "kernel k(o: ptr<global, u32>, y: u32, z: u32, {}) {{ {} }}",
        params.join(", "),
        stores.join(" ")
    );
    kiln_ir::parse_module(&src).expect("parses").kernels[0].clone()
}

/// True if the store to `o[i]` multiplies once.
fn factored(text: &str, i: usize) -> bool {
    let head = format!("o[{i}u32] = ");
    text.lines()
        .map(str::trim)
        .find(|l| l.starts_with(&head))
        .is_some_and(|l| l.matches('*').count() == 1)
}

#[test]
fn a_spent_budget_leaves_the_rest_to_the_cheap_pass_the_same_way_every_time() {
    use kiln_ir::Mutator;
    use kiln_passes::simplify::StmtSimplifier;
    let k = factoring_kernel(40);
    // The default budget scales with the kernel: everything is simplified.
    let full = kiln_passes::simplify::simplify_kernel(&k).to_string();
    assert!((0..40).all(|i| factored(&full, i)), "{full}");
    // A budget of a few small e-graphs: the first expressions get one, the rest not.
    let tight = Limits { nodes: 50, work_per_node: 0, ..Limits::default() };
    let once = StmtSimplifier::new(tight.clone()).mutate_kernel(&k).to_string();
    let done = (0..40).filter(|&i| factored(&once, i)).count();
    assert!(factored(&once, 0) && !factored(&once, 39) && done < 40, "{once}");
    assert!((0..done).all(|i| factored(&once, i)), "in the kernel's order:\n{once}");
    // Work units, not time: the same result on every run, whatever the machine does.
    for _ in 0..5 {
        assert_eq!(StmtSimplifier::new(tight.clone()).mutate_kernel(&k).to_string(), once);
    }
}

#[test]
fn each_distinct_expression_is_simplified_once_within_a_kernel() {
    use kiln_ir::Mutator;
    use kiln_passes::simplify::StmtSimplifier;
    // The same hard index inside 30 different statements: with a budget for about one
    // e-graph, every copy still gets its result (the copies cost nothing).
    let stores: Vec<String> =
        (0..30).map(|i| format!("o[{i}u32] = a[x * 3u32 + x * 5u32] + {i}u32;")).collect();
    let src = format!(
        "kernel k(o: ptr<global, u32>, a: ptr<global, u32>, x: u32) {{ {} }}",
        stores.join(" ")
    );
    let k = kiln_ir::parse_module(&src).expect("parses").kernels[0].clone();
    let tight = Limits { nodes: 50, work_per_node: 0, ..Limits::default() };
    let text = StmtSimplifier::new(tight).mutate_kernel(&k).to_string();
    assert_eq!(text.matches("a[x * 8]").count(), 30, "{text}");
}

#[test]
fn expressions_of_one_shape_share_an_e_graph_result_only_where_their_leaves_agree() {
    // One operator shape, `min(#0, #1)`, over leaves that the rules tell apart: variables
    // (nothing to do), a work-item id with its size (`range-min`), and one leaf twice. The
    // e-graph's result for a shape is reused within a kernel; these must each get their own.
    let src = "kernel k(o: ptr<global, u32>, x: u32, y: u32, z: u32) { \
        o[0u32] = min(x, y); o[1u32] = min(local_id(0), local_size(0)); \
        o[2u32] = min(y, z); o[3u32] = min(local_id(1), local_size(1)); \
        o[4u32] = min(z, z); o[5u32] = min(local_size(0), local_id(0)); }";
    let k = kiln_ir::parse_module(src).expect("parses").kernels[0].clone();
    let text = kiln_passes::simplify::simplify_kernel(&k).to_string();
    let stored = |i: usize| {
        let head = format!("o[{i}u32] = ");
        let line = text.lines().map(str::trim).find(|l| l.starts_with(&head));
        line.map(|l| l[head.len()..].trim_end_matches(';').to_string()).unwrap_or_default()
    };
    assert_eq!(stored(0), "min(x, y)", "{text}");
    assert_eq!(stored(1), "local_id(0)", "{text}");
    assert_eq!(stored(2), "min(y, z)", "{text}");
    assert_eq!(stored(3), "local_id(1)", "{text}");
    assert_eq!(stored(4), "z", "{text}");
    // Each expression alone (no reuse across expressions) gives the same.
    for (i, want) in [(0, "min(x, y)"), (1, "local_id(0)"), (4, "z")] {
        let e = match k.body().stmts()[i].node() {
            kiln_ir::StmtNode::Store { value, .. } => value.clone(),
            s => panic!("a store, not {s:?}"),
        };
        assert_eq!(simplify_expr(&e).to_string(), want);
    }
    assert_eq!(stored(5), simplify_expr(&min_size_id()).to_string(), "{text}");
}

/// `min(local_size(0), local_id(0))`.
fn min_size_id() -> Expr {
    use kiln_ir::{Builtin, Intrinsic};
    Expr::intrinsic(
        Intrinsic::Min,
        [Expr::builtin(Builtin::LocalSize, 0), Expr::builtin(Builtin::LocalId, 0)],
    )
}
