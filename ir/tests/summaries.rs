//! What every expression node keeps about its tree for passes to skip subtrees in O(1)
//! (`Expr::name_bits`, `Expr::has_constant_operands`), and the verifier's table of recent
//! name lookups, which must follow every change of the scopes.

use kiln_ir::expr::name_bit;
use kiln_ir::{verify_kernel, AddrSpace, BinOp, Expr, Kernel, Scalar, Stmt, Type, UnOp, Var};

/// A tree's name bits hold the bit of every variable it refers to, as a value or as a load's
/// buffer, and (here, with no two names sharing a bit) no other.
#[test]
fn name_bits_hold_every_name_the_tree_refers_to() {
    let x = Var::new("x", Type::ptr(AddrSpace::Global, Scalar::I32));
    let (i, kk) = (Var::new("i", Type::I32), Var::new("kk", Type::I32));
    let e = x.load(i.expr() + kk.expr() * 2) + i.expr();
    for n in ["x", "i", "kk"] {
        assert_ne!(e.name_bits() & name_bit(n), 0, "{n}");
    }
    let others = ["acc_7_9", "a_v0", "ta_e"];
    assert!(others
        .iter()
        .all(|n| name_bit(n) & (name_bit("x") | name_bit("i") | name_bit("kk")) == 0));
    assert!(others.iter().all(|n| e.name_bits() & name_bit(n) == 0));
    assert_eq!(Expr::i32(3).name_bits(), 0);
    // A node made again with an origin keeps its summary.
    assert_eq!(e.with_origin("`src`".into()).name_bits(), e.name_bits());
}

/// An operator whose operands are all constants, anywhere in the tree, is what folding could
/// evaluate; a constant operand beside a variable, or a load's constant index, is not.
#[test]
fn constant_operands_are_found_anywhere_in_the_tree() {
    let i = Var::new("i", Type::I32);
    let x = Var::new("x", Type::ptr(AddrSpace::Global, Scalar::I32));
    let sum = |a: Expr, b: Expr| Expr::binary(BinOp::Add, a, b);
    assert!(!sum(i.expr(), Expr::i32(1)).has_constant_operands());
    assert!(!x.load(Expr::i32(1)).has_constant_operands());
    assert!(!Expr::i32(1).has_constant_operands());
    let folded = sum(Expr::i32(1), Expr::i32(2));
    assert!(folded.has_constant_operands());
    assert!(sum(i.expr(), folded.clone()).has_constant_operands());
    assert!(x.load(sum(i.expr(), folded)).has_constant_operands());
    assert!(Expr::unary(UnOp::Neg, Expr::i32(3)).has_constant_operands());
    assert!(Expr::i32(3).cast(Scalar::F32).has_constant_operands());
    assert!(!i.expr().cast(Scalar::F32).has_constant_operands());
}

/// A name referred to again (the same `Var`, the same name allocation) after its scope ended
/// is unbound, and after a sibling scope binds it anew it is that binding: the verifier's
/// table of recent lookups answers neither from the old binding.
#[test]
fn recent_lookups_follow_the_scopes() {
    let x = Var::new("x", Type::ptr(AddrSpace::Global, Scalar::U32));
    let a = Var::new("a", Type::U32);
    let kernel = |body: Vec<Stmt>| Kernel::new("k", vec![x.clone()], Stmt::block(body));
    let inner = || {
        Stmt::block([
            Stmt::let_(&a, Expr::u32(1)),
            Stmt::store(&x, a.expr(), a.expr()),
            Stmt::store(&x, a.expr(), a.expr()),
        ])
    };
    assert!(verify_kernel(&kernel(vec![inner(), inner()])).is_ok());
    let after = kernel(vec![inner(), Stmt::store(&x, Expr::u32(0), a.expr())]);
    let errs = verify_kernel(&after).expect_err("`a` is out of scope");
    assert!(errs.iter().any(|e| e.to_string().contains("unbound variable `a`")), "{errs:?}");
    // Bound again as another type in a sibling scope: referred to as u32, bound as i32.
    let a_i32 = Var::new("a", Type::I32);
    let retyped = kernel(vec![
        inner(),
        Stmt::block([Stmt::let_(&a_i32, Expr::i32(1)), Stmt::store(&x, Expr::u32(0), a.expr())]),
    ]);
    let errs = verify_kernel(&retyped).expect_err("`a` is an i32 there");
    assert!(errs.iter().any(|e| e.to_string().contains("bound as i32")), "{errs:?}");
}
