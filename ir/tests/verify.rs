//! The verifier's rules, one test per rule, on IR built through the API; plus valid kernels
//! that must verify cleanly and a batch of nonsense that must not panic.

use kiln_ir::verify::Node;
use kiln_ir::{
    verify_kernel, verify_module, AddrSpace, AtomicOp, Attrs, BinOp, Builtin, Expr, Func, Imm,
    Intrinsic, Kernel, MemFence, Module, Scalar, Stmt, Type, UnOp, Var, VerifyError,
};

// ---------------------------------------------------------------------------------------------
// helpers

fn v(name: &str, ty: Type) -> Var {
    Var::new(name, ty)
}

fn gptr(elem: Scalar) -> Type {
    Type::ptr(AddrSpace::Global, elem)
}

fn kernel(params: &[&Var], body: Vec<Stmt>) -> Kernel {
    Kernel::new("k", params.iter().map(|p| (*p).clone()).collect(), Stmt::block(body))
}

fn errors(k: &Kernel) -> Vec<VerifyError> {
    verify_kernel(k).err().unwrap_or_default()
}

/// Asserts that verifying `k` fails with exactly one error containing `what`; returns it.
fn one_error(k: &Kernel, what: &str) -> VerifyError {
    let errs = errors(k);
    let msgs: Vec<&str> = errs.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(errs.len(), 1, "expected one error containing {what:?}, got {msgs:#?}");
    assert!(msgs[0].contains(what), "expected {what:?} in {:?}", msgs[0]);
    assert_eq!(errs[0].kernel, "k");
    errs.into_iter().next().unwrap()
}

fn assert_ok(k: &Kernel) {
    if let Err(errs) = verify_kernel(k) {
        let msgs: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        panic!("expected {k:?} to verify, got {msgs:#?}");
    }
}

fn node_is_expr(e: &VerifyError, want: &Expr) {
    match &e.node {
        Some(Node::Expr(x)) => assert!(x.ptr_eq(want), "error located at {x:?}, not {want:?}"),
        other => panic!("error {:?} has node {other:?}, expected an expression", e.message),
    }
}

fn node_is_stmt(e: &VerifyError, want: &Stmt) {
    match &e.node {
        Some(Node::Stmt(x)) => assert!(x.ptr_eq(want), "error located at {x:?}, not {want:?}"),
        other => panic!("error {:?} has node {other:?}, expected a statement", e.message),
    }
}

/// A kernel that evaluates `e` into a `let` of its own type, with `params` in scope.
fn eval(params: &[&Var], e: Expr) -> Kernel {
    let ty = if e.ty().is_ptr() { Type::I32 } else { e.ty() };
    kernel(params, vec![Stmt::let_(&v("r", ty), e)])
}

// ---------------------------------------------------------------------------------------------
// expressions

#[test]
fn arithmetic_operands_must_have_the_same_type() {
    let x = v("x", Type::F32);
    let n = v("n", Type::U32);
    let e = &x + &n;
    let err = one_error(
        &eval(&[&x, &n], e.clone()),
        "operands of `+` have different types: `x` is f32, `n` is u32",
    );
    node_is_expr(&err, &e);
    for op in [BinOp::Sub, BinOp::Mul, BinOp::Div, BinOp::Rem, BinOp::Shl, BinOp::And] {
        let i = v("i", Type::I32);
        let j = v("j", Type::I64);
        let e = Expr::binary(op, i.expr(), j.expr());
        one_error(&eval(&[&i, &j], e), &format!("operands of `{}` have different", op.symbol()));
    }
}

#[test]
fn arithmetic_needs_arithmetic_types() {
    let a = v("a", Type::BOOL);
    let b = v("b", Type::BOOL);
    one_error(&eval(&[&a, &b], &a + &b), "`+` needs arithmetic operands");
    one_error(&eval(&[&a, &b], &a / &b), "`/` needs arithmetic operands");
    let p = v("p", gptr(Scalar::F32));
    let q = v("q", gptr(Scalar::F32));
    one_error(&eval(&[&p, &q], &p - &q), "`-` needs arithmetic operands");
    for t in [Type::I8, Type::U16, Type::I64, Type::U64, Type::F32, Type::F64] {
        let x = v("x", t);
        assert_ok(&eval(&[&x], &x * &x + &x - &x / &x));
    }
}

#[test]
fn remainder_is_integers_only() {
    let x = v("x", Type::F32);
    let y = v("y", Type::F32);
    one_error(&eval(&[&x, &y], &x % &y), "`%` needs integer operands");
    let i = v("i", Type::U8);
    assert_ok(&eval(&[&i], &i % &i));
}

#[test]
fn bitwise_ops_take_integers_or_bools() {
    let x = v("x", Type::F64);
    one_error(&eval(&[&x], &x & &x), "`&` needs integer or bool operands");
    one_error(&eval(&[&x], &x ^ &x), "`^` needs integer or bool operands");
    let b = v("b", Type::BOOL);
    assert_ok(&eval(&[&b], (&b & &b) | (&b ^ &b)));
    let i = v("i", Type::I16);
    assert_ok(&eval(&[&i], (&i & &i) | (&i ^ &i)));
}

#[test]
fn shifts_take_the_same_integer_type() {
    let a = v("a", Type::U32);
    let s = v("s", Type::I32);
    one_error(&eval(&[&a, &s], &a << &s), "operands of `<<` have different types");
    let f = v("f", Type::F32);
    one_error(&eval(&[&f], &f >> &f), "`>>` needs integer operands");
    let b = v("b", Type::BOOL);
    one_error(&eval(&[&b], &b << &b), "`<<` needs integer operands");
    assert_ok(&eval(&[&a], (&a << 3) >> 1));
}

#[test]
fn comparisons() {
    let i = v("i", Type::I32);
    let n = v("n", Type::U32);
    let e = i.expr().cmp_lt(&n);
    let err = one_error(&eval(&[&i, &n], e.clone()), "operands of `<` have different types");
    node_is_expr(&err, &e);
    let b = v("b", Type::BOOL);
    one_error(&eval(&[&b], b.expr().cmp_lt(&b)), "`<` needs arithmetic operands");
    one_error(&eval(&[&b], b.expr().cmp_ge(&b)), "`>=` needs arithmetic operands");
    // `==` and `!=` work on any scalar but f16, including bool.
    assert_ok(&eval(&[&b], b.expr().cmp_eq(&b)));
    assert_ok(&eval(&[&i], i.expr().cmp_ne(&i)));
    let p = v("p", gptr(Scalar::I32));
    one_error(&eval(&[&p], p.expr().cmp_eq(&p)), "`==` needs scalar operands other than f16");
    // The result is bool.
    let r = Stmt::let_(&v("r", Type::BOOL), i.expr().cmp_le(&i));
    assert_ok(&kernel(&[&i], vec![r]));
}

#[test]
fn logical_ops_take_bools() {
    let i = v("i", Type::I32);
    let b = v("b", Type::BOOL);
    let e = i.expr().logic_and(&b);
    one_error(&eval(&[&i, &b], e), "operand `i` of `&&` is i32, not bool");
    let e = b.expr().logic_or(&i);
    one_error(&eval(&[&i, &b], e), "operand `i` of `||` is i32, not bool");
    assert_ok(&eval(&[&b], b.expr().logic_and(&b).logic_or(&b)));
}

#[test]
fn unary_operators() {
    let b = v("b", Type::BOOL);
    let i = v("i", Type::U32);
    let f = v("f", Type::F32);
    one_error(&eval(&[&b], Expr::unary(UnOp::Neg, &b)), "unary `-` needs an arithmetic operand");
    one_error(&eval(&[&i], Expr::unary(UnOp::Not, &i)), "unary `!` needs a bool operand");
    one_error(&eval(&[&f], Expr::unary(UnOp::BitNot, &f)), "unary `~` needs an integer operand");
    assert_ok(&eval(&[&b], !b.expr()));
    assert_ok(&eval(&[&i], !i.expr()));
    assert_ok(&eval(&[&i], -i.expr()));
    assert_ok(&eval(&[&f], -f.expr()));
}

#[test]
fn select_rules() {
    let c = v("c", Type::U32);
    let x = v("x", Type::F32);
    let y = v("y", Type::F64);
    one_error(&eval(&[&c, &x], Expr::select(&c, &x, &x)), "condition `c` of select is u32");
    one_error(
        &eval(&[&x, &y], Expr::select(true, &x, &y)),
        "arms of select have different types: `x` is f32, `y` is f64",
    );
    let h = v("h", Type::F16);
    one_error(&eval(&[&h], Expr::select(true, &h, &h)), "select needs scalar arms other than f16");
    assert_ok(&eval(&[&x], Expr::select(x.expr().cmp_gt(0.0), &x, -x.expr())));
}

#[test]
fn casts_are_scalar_to_scalar() {
    let p = v("p", gptr(Scalar::F32));
    let e = p.expr().cast(Scalar::U64);
    one_error(&eval(&[&p], e), "cannot cast `p`, a pointer (ptr<global, f32>), to u64");
    let b = v("b", Type::BOOL);
    let h = v("h", Type::F16);
    for to in Scalar::ALL {
        assert_ok(&eval(&[&b], b.expr().cast(to)));
        assert_ok(&eval(&[&h], h.expr().cast(to)));
    }
}

#[test]
fn f16_is_storage_only() {
    let hp = v("h", gptr(Scalar::F16));
    let x = hp.load(0u32);
    one_error(&eval(&[&hp], &x + &x), "`+` needs arithmetic operands");
    let err = one_error(&eval(&[&hp], x.cmp_lt(&x)), "f16 is a storage type");
    assert!(err.message.contains("`<`"), "{}", err.message);
    one_error(&eval(&[&hp], x.cmp_eq(&x)), "`==` needs scalar operands other than f16");
    one_error(&eval(&[&hp], -x.clone()), "f16 is a storage type");
    one_error(&eval(&[&hp], Expr::intrinsic(Intrinsic::Sqrt, [x.clone()])), "f16");
    // Load, store, cast, literal, let/var and assignment are fine.
    let t = v("t", Type::F16);
    let w = v("w", Type::F16);
    assert_ok(&kernel(
        &[&hp],
        vec![
            Stmt::let_(&t, hp.load(1u32)),
            Stmt::decl(&w, Expr::float(Scalar::F16, 0.5)),
            Stmt::assign(&w, &t),
            Stmt::store(&hp, 2u32, w.expr()),
            Stmt::store(&hp, 3u32, (t.expr().cast(Scalar::F32) * 2.0).cast(Scalar::F16)),
        ],
    ));
}

#[test]
fn loads() {
    let n = v("n", Type::U32);
    let e = n.load(0u32);
    let err = one_error(&eval(&[&n], e.clone()), "from `n`, which is u32, not a pointer");
    node_is_expr(&err, &e);
    let x = v("x", gptr(Scalar::F32));
    let f = v("f", Type::F32);
    let idx = f.expr();
    let err = one_error(
        &eval(&[&x, &f], x.load(idx.clone())),
        "index `f` of the load from `x` is f32; indices must be integers",
    );
    node_is_expr(&err, &idx);
    let y = v("y", gptr(Scalar::F32));
    one_error(&eval(&[&x], y.load(0u32)), "load from unbound variable `y`");
    // Any integer type indexes; loads from constant and generic memory are fine.
    let c = v("c", Type::ptr(AddrSpace::Constant, Scalar::I8));
    let g = v("g", Type::ptr(AddrSpace::Generic, Scalar::U64));
    let i = v("i", Type::I64);
    assert_ok(&eval(&[&c, &i], c.load(&i)));
    assert_ok(&eval(&[&g], g.load(Expr::int(Scalar::U8, 3))));
}

#[test]
fn builtin_dimensions() {
    let e = Expr::global_id(3);
    let err = one_error(&eval(&[], e.clone()), "`global_id(3)`: dimension 3 is out of range");
    node_is_expr(&err, &e);
    one_error(&eval(&[], Expr::builtin(Builtin::NumGroups, 255)), "`num_groups(255)`");
    for b in Builtin::ALL {
        for d in 0..3 {
            let e = Expr::builtin(b, d);
            assert_eq!(e.ty(), Type::U32);
            assert_ok(&eval(&[], e));
        }
    }
}

#[test]
fn intrinsics() {
    let x = v("x", Type::F32);
    let y = v("y", Type::F64);
    let n = v("n", Type::U32);
    one_error(
        &eval(&[&x], Expr::intrinsic(Intrinsic::Min, [x.expr()])),
        "`min` takes 2 arguments, got 1",
    );
    one_error(&eval(&[], Expr::intrinsic(Intrinsic::Sqrt, [])), "`sqrt` takes 1 argument, got 0");
    one_error(
        &eval(&[&x, &y], x.expr().max(&y)),
        "arguments of `max` have different types: `x` is f32, `y` is f64",
    );
    one_error(
        &eval(&[&x, &y], Expr::intrinsic(Intrinsic::Fma, [x.expr(), x.expr(), y.expr()])),
        "arguments of `fma` have different types",
    );
    one_error(
        &eval(&[&n], Expr::intrinsic(Intrinsic::Sqrt, [n.expr()])),
        "`sqrt` needs f32 or f64 arguments, but `n` is u32",
    );
    let b = v("b", Type::BOOL);
    one_error(&eval(&[&b], b.expr().min(&b)), "`min` needs arithmetic arguments");
    one_error(
        &eval(&[&b], Expr::intrinsic(Intrinsic::Abs, [b.expr()])),
        "`abs` needs arithmetic arguments",
    );
    assert_ok(&eval(&[&n], n.expr().min(&n).max(&n)));
    assert_ok(&eval(&[&n], Expr::intrinsic(Intrinsic::Abs, [n.expr()])));
    let w = v("w", Type::I64);
    one_error(
        &eval(&[&x], Expr::intrinsic(Intrinsic::Mad, [x.expr(), x.expr(), x.expr()])),
        "`mad` needs integer arguments, but its arguments are f32",
    );
    for op in Intrinsic::ALL {
        let zs = if op.int_only() { [&n, &w] } else { [&x, &y] };
        for z in zs {
            let args = vec![z.expr(); op.arity()];
            assert_ok(&eval(&[z], Expr::intrinsic(op, args)));
        }
    }
}

#[test]
fn variable_references() {
    let x = v("x", Type::F32);
    let e = x.expr();
    let err = one_error(&eval(&[], e.clone()), "use of unbound variable `x`");
    node_is_expr(&err, &e);
    // Same name, other type.
    let x_as_u32 = v("x", Type::U32);
    one_error(
        &kernel(&[&x], vec![Stmt::let_(&v("r", Type::U32), &x_as_u32)]),
        "`x` is referred to as u32 but bound as f32 (a kernel parameter)",
    );
}

#[test]
fn malformed_immediates() {
    let e = Expr::imm(Imm::Int(Scalar::F32, 1));
    one_error(&eval(&[], e), "malformed immediate");
    let e = Expr::imm(Imm::Float(Scalar::U8, 1.0));
    one_error(&eval(&[], e), "malformed immediate");
    // Integers are kept sign- or zero-extended, floats rounded to their type.
    let e = Expr::imm(Imm::Int(Scalar::U8, 300));
    one_error(&eval(&[], e), "bits 0x12c are not a canonical u8");
    let e = Expr::imm(Imm::Int(Scalar::I8, 0xff));
    one_error(&eval(&[], e), "not a canonical i8");
    let e = Expr::imm(Imm::Float(Scalar::F32, 0.1));
    one_error(&eval(&[], e), "is not a f32 value");
    for e in [
        Expr::int(Scalar::I8, -1),
        Expr::int(Scalar::U64, -1),
        Expr::f32(0.1),
        Expr::float(Scalar::F16, 0.1),
        Expr::f32(f32::NAN),
        Expr::f64(f64::INFINITY),
    ] {
        assert_ok(&eval(&[], e));
    }
}

#[test]
fn errors_do_not_cascade_up_an_expression() {
    // One mistake deep inside: one error, not one per enclosing operator.
    let x = v("x", Type::F32);
    let n = v("n", Type::U32);
    let bad = &x + &n;
    let e = (bad.clone() * 2.0 - &x).cmp_lt(1.0);
    let err = one_error(&eval(&[&x, &n], Expr::select(e, 1.0f32, 0.0f32)), "operands of `+`");
    node_is_expr(&err, &bad);
}

// ---------------------------------------------------------------------------------------------
// statements

#[test]
fn let_and_var_declared_type_matches_value() {
    let a = v("a", Type::F32);
    let x = v("x", Type::U32);
    let value = a.expr();
    let err = one_error(
        &kernel(&[&a], vec![Stmt::let_(&x, value.clone())]),
        "`let x` is declared u32 but its value `a` is f32",
    );
    node_is_expr(&err, &value);
    one_error(
        &kernel(&[&a], vec![Stmt::decl(&x, &a)]),
        "`var x` is declared u32 but its value `a` is f32",
    );
}

#[test]
fn let_cannot_bind_pointers() {
    let p = v("p", gptr(Scalar::F32));
    let q = v("q", gptr(Scalar::F32));
    let s = Stmt::let_(&q, &p);
    let err = one_error(&kernel(&[&p], vec![s.clone()]), "`let q` binds a pointer");
    node_is_stmt(&err, &s);
    one_error(&kernel(&[&p], vec![Stmt::decl(&q, &p)]), "`var q` binds a pointer");
}

#[test]
fn assignment_only_to_var_variables() {
    let n = v("n", Type::U32);
    let t = v("t", Type::U32);
    let s = Stmt::assign(&t, 1u32);
    let err = one_error(
        &kernel(&[], vec![Stmt::let_(&t, 0u32), s.clone()]),
        "cannot assign to `t`: `t` is a `let` binding, which is immutable",
    );
    node_is_stmt(&err, &s);
    one_error(
        &kernel(&[&n], vec![Stmt::assign(&n, 0u32)]),
        "cannot assign to `n`: `n` is a kernel parameter",
    );
    let arr = v("arr", Type::ptr(AddrSpace::Private, Scalar::U32));
    let arr2 = v("arr2", Type::ptr(AddrSpace::Private, Scalar::U32));
    one_error(
        &kernel(&[], vec![Stmt::alloc(&arr, 4), Stmt::alloc(&arr2, 4), Stmt::assign(&arr, &arr2)]),
        "cannot assign to `arr`: `arr` is an array",
    );
    let c = v("c", gptr(Scalar::U32));
    let old = v("old", Type::U32);
    let add =
        Stmt::call_into(&old, Func::atomic(AtomicOp::Add), [c.expr(), 0u32.into(), 1u32.into()]);
    one_error(
        &kernel(&[&c], vec![add, Stmt::assign(&old, 0u32)]),
        "`old` is the result of `atomic_add`",
    );
    one_error(&kernel(&[], vec![Stmt::assign(&t, 0u32)]), "assignment to unbound variable `t`");
    // Type of the assigned value.
    let f = v("f", Type::F32);
    let val = f.expr();
    let err = one_error(
        &kernel(&[&f], vec![Stmt::decl(&t, 0u32), Stmt::assign(&t, val.clone())]),
        "assigned value `f` is f32 but `t` is u32",
    );
    node_is_expr(&err, &val);
    assert_ok(&kernel(&[], vec![Stmt::decl(&t, 0u32), Stmt::assign(&t, &t + 1u32)]));
}

#[test]
fn stores() {
    let w = v("w", Type::ptr(AddrSpace::Constant, Scalar::F32));
    let s = Stmt::store(&w, 0u32, 1.0f32);
    let err = one_error(
        &kernel(&[&w], vec![s.clone()]),
        "store through `w`, a pointer to constant memory",
    );
    node_is_stmt(&err, &s);
    let y = v("y", gptr(Scalar::F32));
    let n = v("n", Type::U32);
    let val = n.expr();
    let err = one_error(
        &kernel(&[&y, &n], vec![Stmt::store(&y, 0u32, val.clone())]),
        "stored value `n` is u32 but `y` holds f32 elements",
    );
    node_is_expr(&err, &val);
    let idx = Expr::f32(1.0);
    let err = one_error(&kernel(&[&y], vec![Stmt::store(&y, idx.clone(), 1.0f32)]), "index `");
    assert!(err.message.contains("of the store to `y` is f32; indices must be integers"));
    node_is_expr(&err, &idx);
    one_error(
        &kernel(&[&n], vec![Stmt::store(&n, 0u32, 1u32)]),
        "store through `n`, which is u32, not a pointer",
    );
    one_error(
        &kernel(&[], vec![Stmt::store(&y, 0u32, 1.0f32)]),
        "store through unbound variable `y`",
    );
    let g = v("g", Type::ptr(AddrSpace::Generic, Scalar::I64));
    assert_ok(&kernel(&[&g], vec![Stmt::store(&g, Expr::i64(-1), Expr::i64(5))]));
}

#[test]
fn arrays() {
    let tile = v("tile", Type::ptr(AddrSpace::Local, Scalar::F32));
    let flags = v("flags", Type::ptr(AddrSpace::Local, Scalar::Bool));
    one_error(&kernel(&[], vec![Stmt::alloc(&flags, 8)]), "local array `flags` has bool elements");
    one_error(&kernel(&[], vec![Stmt::alloc(&tile, 0)]), "array `tile` has 0 elements");
    let g = v("g", gptr(Scalar::F32));
    one_error(&kernel(&[], vec![Stmt::alloc(&g, 4)]), "array `g` has type ptr<global, f32>");
    let s = v("s", Type::F32);
    one_error(&kernel(&[], vec![Stmt::alloc(&s, 4)]), "array `s` has type f32");
    // Local arrays at kernel scope only.
    let a = Stmt::alloc(&tile, 64);
    let err = one_error(
        &kernel(&[], vec![Stmt::block([a.clone()])]),
        "local array `tile` declared inside a nested block; local arrays must be at kernel scope",
    );
    node_is_stmt(&err, &a);
    one_error(
        &kernel(&[], vec![Stmt::if_(true, Stmt::block([Stmt::alloc(&tile, 64)]))]),
        "local array `tile` declared inside an `if`",
    );
    one_error(
        &kernel(
            &[],
            vec![Stmt::if_else(true, Stmt::block([]), Stmt::block([Stmt::alloc(&tile, 64)]))],
        ),
        "declared inside an `else`",
    );
    let i = v("i", Type::U32);
    one_error(
        &kernel(&[], vec![Stmt::for_(&i, 0u32, 4u32, 1u32, Stmt::alloc(&tile, 64))]),
        "declared inside a `for` loop",
    );
    one_error(
        &kernel(&[], vec![Stmt::while_(false, Stmt::block([Stmt::alloc(&tile, 64)]))]),
        "declared inside a `while` loop",
    );
    // Private arrays anywhere; local arrays directly in the body.
    let p = v("p", Type::ptr(AddrSpace::Private, Scalar::I32));
    assert_ok(&kernel(
        &[],
        vec![
            Stmt::alloc(&tile, 64),
            Stmt::for_(
                &i,
                0u32,
                4u32,
                1u32,
                Stmt::block([
                    Stmt::alloc(&p, 4),
                    Stmt::store(&p, &i, 1),
                    Stmt::store(&tile, &i, 1.0f32),
                ]),
            ),
        ],
    ));
    // A kernel whose body is the alloc itself is at kernel scope too.
    assert_ok(&Kernel::new("k", vec![], Stmt::alloc(&tile, 1)));
}

#[test]
fn conditions_are_bool() {
    let n = v("n", Type::U32);
    let c = n.expr();
    let err = one_error(
        &kernel(&[&n], vec![Stmt::if_(c.clone(), Stmt::block([]))]),
        "condition `n` of `if` is u32, not bool",
    );
    node_is_expr(&err, &c);
    one_error(
        &kernel(&[&n], vec![Stmt::while_(&n, Stmt::block([]))]),
        "condition `n` of `while` is u32, not bool",
    );
}

#[test]
fn for_loops() {
    let t = v("t", Type::F32);
    let s = Stmt::for_(&t, 0.0f32, 1.0f32, 0.25f32, Stmt::block([]));
    let err = one_error(
        &kernel(&[], vec![s.clone()]),
        "loop counter `t` is f32; `for` counters must be integers",
    );
    node_is_stmt(&err, &s);
    let k = v("k", Type::U32);
    let n = v("n", Type::I32);
    let hi = n.expr();
    let err = one_error(
        &kernel(&[&n], vec![Stmt::for_(&k, 0u32, hi.clone(), 1u32, Stmt::block([]))]),
        "upper bound `n` of the `for` loop is i32 but its counter `k` is u32",
    );
    node_is_expr(&err, &hi);
    one_error(&kernel(&[], vec![Stmt::for_(&k, 0, 4u32, 1u32, Stmt::block([]))]), "lower bound");
    one_error(&kernel(&[], vec![Stmt::for_(&k, 0u32, 4u32, 1, Stmt::block([]))]), "step");
    // The counter is immutable in the body and not in scope in its own bounds.
    one_error(
        &kernel(&[], vec![Stmt::for_(&k, 0u32, 4u32, 1u32, Stmt::assign(&k, 2u32))]),
        "cannot assign to `k`: `k` is the counter of an enclosing `for` loop",
    );
    one_error(
        &kernel(&[], vec![Stmt::for_(&k, 0u32, &k, 1u32, Stmt::block([]))]),
        "use of unbound variable `k`",
    );
}

#[test]
fn barriers_and_fences() {
    let s = Stmt::barrier(MemFence { local: false, global: false });
    let err = one_error(&kernel(&[], vec![s.clone()]), "`barrier` with an empty fence");
    node_is_stmt(&err, &s);
    one_error(
        &kernel(&[], vec![Stmt::call(Func::fence(MemFence { local: false, global: false }), [])]),
        "`fence` with an empty fence",
    );
    one_error(
        &kernel(&[], vec![Stmt::call(Func::barrier(MemFence::LOCAL), [Expr::u32(0)])]),
        "`barrier` takes no operands, got 1",
    );
    let r = v("r", Type::U32);
    one_error(
        &kernel(&[], vec![Stmt::call_into(&r, Func::barrier(MemFence::GLOBAL), [])]),
        "`barrier(global)` has no result, but it is bound to `r`",
    );
    assert_ok(&kernel(
        &[],
        vec![
            Stmt::barrier(MemFence::LOCAL),
            Stmt::barrier(MemFence::GLOBAL),
            Stmt::barrier(MemFence::BOTH),
            Stmt::call(Func::fence(MemFence::BOTH), []),
        ],
    ));
}

fn atomic(op: AtomicOp, args: Vec<Expr>) -> Stmt {
    Stmt::call(Func::atomic(op), args)
}

#[test]
fn atomics() {
    let c = v("c", Type::ptr(AddrSpace::Constant, Scalar::U32));
    let arg = c.expr();
    let err = one_error(
        &kernel(&[&c], vec![atomic(AtomicOp::Add, vec![arg.clone(), 0u32.into(), 1u32.into()])]),
        "`atomic_add` on `c`, a pointer to constant memory",
    );
    node_is_expr(&err, &arg);
    let p = v("p", Type::ptr(AddrSpace::Private, Scalar::U32));
    one_error(
        &kernel(
            &[],
            vec![
                Stmt::alloc(&p, 4),
                atomic(AtomicOp::Or, vec![p.expr(), 0u32.into(), 1u32.into()]),
            ],
        ),
        "`atomic_or` on `p`, a pointer to private memory",
    );
    let f = v("f", gptr(Scalar::F32));
    one_error(
        &kernel(&[&f], vec![atomic(AtomicOp::Max, vec![f.expr(), 0u32.into(), 1.0f32.into()])]),
        "`atomic_max` on `f`, whose elements are f32",
    );
    assert_ok(&kernel(
        &[&f],
        vec![atomic(AtomicOp::Add, vec![f.expr(), 0u32.into(), 1.0f32.into()])],
    ));
    let h = v("h", gptr(Scalar::I16));
    one_error(
        &kernel(
            &[&h],
            vec![atomic(AtomicOp::Add, vec![h.expr(), 0u32.into(), Expr::int(Scalar::I16, 1)])],
        ),
        "whose elements are i16",
    );
    let g = v("g", gptr(Scalar::U32));
    let val = Expr::i32(1);
    let err = one_error(
        &kernel(&[&g], vec![atomic(AtomicOp::Add, vec![g.expr(), 0u32.into(), val.clone()])]),
        "value `",
    );
    assert!(err.message.contains("of `atomic_add` is i32 but the memory holds u32 elements"));
    node_is_expr(&err, &val);
    one_error(
        &kernel(&[&g], vec![atomic(AtomicOp::CmpXchg, vec![g.expr(), 0u32.into(), 1u32.into()])]),
        "`atomic_cmpxchg` takes 4 operands (pointer, index, compare, value), got 3",
    );
    one_error(
        &kernel(&[&g], vec![atomic(AtomicOp::Xchg, vec![g.expr(), 0u32.into()])]),
        "`atomic_xchg` takes 3 operands (pointer, index, value), got 2",
    );
    one_error(
        &kernel(
            &[&g],
            vec![atomic(AtomicOp::CmpXchg, vec![g.expr(), 0u32.into(), Expr::i32(0), 1u32.into()])],
        ),
        "compare value",
    );
    one_error(
        &kernel(&[&g], vec![atomic(AtomicOp::Add, vec![g.load(0u32), 0u32.into(), 1u32.into()])]),
        "the first operand of `atomic_add` must be a pointer variable",
    );
    let n = v("n", Type::U32);
    one_error(
        &kernel(&[&n], vec![atomic(AtomicOp::Add, vec![n.expr(), 0u32.into(), 1u32.into()])]),
        "`atomic_add` on `n`, which is u32, not a pointer",
    );
    one_error(
        &kernel(&[&g], vec![atomic(AtomicOp::Add, vec![g.expr(), 0.5f32.into(), 1u32.into()])]),
        "of `atomic_add` is f32; indices must be integers",
    );
    let old = v("old", Type::I32);
    let s =
        Stmt::call_into(&old, Func::atomic(AtomicOp::Add), [g.expr(), 0u32.into(), 1u32.into()]);
    let err = one_error(
        &kernel(&[&g], vec![s.clone()]),
        "result `old` of `atomic_add` is declared i32 but the memory holds u32 elements",
    );
    node_is_stmt(&err, &s);
    let u = v("u", gptr(Scalar::U32));
    one_error(
        &kernel(&[&g], vec![atomic(AtomicOp::Add, vec![u.expr(), 0u32.into(), 1u32.into()])]),
        "use of unbound variable `u`",
    );
}

#[test]
fn every_atomic_on_every_memory() {
    let tile = v("tile", Type::ptr(AddrSpace::Local, Scalar::I64));
    let g = v("g", Type::ptr(AddrSpace::Generic, Scalar::I64));
    let mut body = vec![Stmt::alloc(&tile, 4)];
    for (k, op) in AtomicOp::ALL.into_iter().enumerate() {
        for (j, p) in [&tile, &g].into_iter().enumerate() {
            let mut args = vec![p.expr(), Expr::u32(1)];
            args.extend((0..op.value_operands()).map(|_| Expr::i64(3)));
            let r = v(&format!("r{k}_{j}"), Type::I64);
            body.push(Stmt::call_into(&r, Func::atomic(op), args));
        }
    }
    assert_ok(&kernel(&[&g], body));
}

// ---------------------------------------------------------------------------------------------
// scoping

#[test]
fn no_shadowing() {
    let i = v("i", Type::U32);
    let inner = Stmt::for_(&i, 0u32, 4u32, 1u32, Stmt::block([]));
    let err = one_error(
        &kernel(&[], vec![Stmt::let_(&i, Expr::global_id(0)), inner.clone()]),
        "`i` is already bound here, as a `let` binding",
    );
    node_is_stmt(&err, &inner);
    let n = v("n", Type::U32);
    one_error(
        &kernel(&[&n], vec![Stmt::let_(&n, 5u32)]),
        "`n` is already bound here, as a kernel parameter",
    );
    one_error(
        &kernel(&[], vec![Stmt::decl(&n, 5u32), Stmt::if_(true, Stmt::let_(&n, 1u32))]),
        "`n` is already bound here, as a `var` variable",
    );
    // Shadowing by another type does not cascade into type errors afterwards.
    let nf = v("n", Type::F32);
    let errs = errors(&kernel(
        &[&n],
        vec![Stmt::block([Stmt::let_(&nf, 1.0f32), Stmt::let_(&v("m", Type::F32), &nf + 1.0)])],
    ));
    assert_eq!(errs.len(), 1, "{errs:#?}");
}

#[test]
fn sequential_rebinding_is_fine() {
    let x = v("x", gptr(Scalar::U32));
    let i = v("i", Type::U32);
    let t = v("t", Type::U32);
    let t64 = v("t", Type::U64);
    assert_ok(&kernel(
        &[&x],
        vec![
            Stmt::for_(&i, 0u32, 4u32, 1u32, Stmt::store(&x, &i, &i)),
            Stmt::for_(&i, 0u32, 8u32, 2u32, Stmt::store(&x, &i, &i + 1u32)),
            Stmt::if_else(
                x.load(0u32).cmp_eq(0u32),
                Stmt::block([Stmt::let_(&t, 1u32), Stmt::store(&x, 0u32, &t)]),
                Stmt::block([
                    Stmt::let_(&t64, 2u64),
                    Stmt::store(&x, 0u32, t64.expr().cast(Scalar::U32)),
                ]),
            ),
            Stmt::block([Stmt::let_(&t, 3u32)]),
            Stmt::let_(&t, 4u32),
            Stmt::store(&x, 1u32, &t),
        ],
    ));
}

#[test]
fn bindings_end_with_their_block() {
    let t = v("t", Type::U32);
    let x = v("x", gptr(Scalar::U32));
    let use_ = Stmt::store(&x, 0u32, &t);
    one_error(
        &kernel(&[&x], vec![Stmt::if_(true, Stmt::block([Stmt::let_(&t, 1u32)])), use_]),
        "use of unbound variable `t`",
    );
    // A single-statement branch is a block of its own.
    one_error(
        &kernel(&[&x], vec![Stmt::if_(true, Stmt::let_(&t, 1u32)), Stmt::store(&x, 0u32, &t)]),
        "use of unbound variable `t`",
    );
    let i = v("i", Type::U32);
    one_error(
        &kernel(
            &[&x],
            vec![Stmt::for_(&i, 0u32, 4u32, 1u32, Stmt::block([])), Stmt::store(&x, &i, 0u32)],
        ),
        "use of unbound variable `i`",
    );
    // Use before the binding.
    one_error(
        &kernel(&[&x], vec![Stmt::store(&x, 0u32, &t), Stmt::let_(&t, 1u32)]),
        "use of unbound variable `t`",
    );
}

// ---------------------------------------------------------------------------------------------
// kernels and modules

#[test]
fn kernel_headers() {
    let x = v("x", Type::F32);
    one_error(&kernel(&[&x, &x], vec![]), "parameter `x` is declared twice");
    let l = v("l", Type::ptr(AddrSpace::Local, Scalar::F32));
    one_error(&kernel(&[&l], vec![]), "parameter `l` is a pointer to local memory");
    let p = v("p", Type::ptr(AddrSpace::Private, Scalar::F32));
    one_error(&kernel(&[&p], vec![]), "parameter `p` is a pointer to private memory");
    let b = v("b", gptr(Scalar::Bool));
    let err = one_error(&kernel(&[&b], vec![]), "parameter `b` points to bool elements");
    assert!(err.node.is_none());
    let attrs =
        Attrs { reqd_work_group_size: Some([64, 0, 1]), fast_math: false, ..Attrs::default() };
    one_error(
        &Kernel::with_attrs("k", vec![], attrs, Stmt::block([])),
        "`#reqd_work_group_size(64, 0, 1)`: every component must be positive",
    );
    // Every scalar and the three pointer spaces are fine parameters.
    let mut params: Vec<Var> =
        Scalar::ALL.iter().map(|s| v(&format!("s_{s}"), Type::from(*s))).collect();
    for sp in [AddrSpace::Global, AddrSpace::Constant, AddrSpace::Generic] {
        params.push(v(&format!("p_{sp}"), Type::ptr(sp, Scalar::F16)));
    }
    let attrs =
        Attrs { reqd_work_group_size: Some([8, 8, 1]), fast_math: true, ..Attrs::default() };
    assert_ok(&Kernel::with_attrs("k", params, attrs, Stmt::block([])));
}

#[test]
fn module_kernel_names_are_unique() {
    let a = Kernel::new("a", vec![], Stmt::block([]));
    let b = Kernel::new("b", vec![], Stmt::block([]));
    verify_module(&Module::new(vec![a.clone(), b.clone()])).unwrap();
    let errs = verify_module(&Module::new(vec![a.clone(), b, a])).unwrap_err();
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].kernel, "a");
    assert_eq!(errs[0].to_string(), "in kernel `a`: another kernel is already named `a`");
}

#[test]
fn all_errors_in_source_order() {
    let x = v("x", gptr(Scalar::F32));
    let n = v("n", Type::U32);
    let w = v("w", Type::ptr(AddrSpace::Constant, Scalar::F32));
    let k = kernel(
        &[&x, &n, &w],
        vec![
            Stmt::let_(&v("a", Type::F32), &n + 1u32),
            Stmt::if_(&n, Stmt::block([Stmt::store(&w, 0u32, 1.0f32)])),
            Stmt::assign(&n, 0u32),
            Stmt::store(&x, Expr::global_id(7), x.load(0u32) % 2.0),
        ],
    );
    let msgs: Vec<String> = errors(&k).into_iter().map(|e| e.message).collect();
    let want = [
        "`let a` is declared f32",
        "condition `n` of `if`",
        "store through `w`",
        "cannot assign to `n`",
        "dimension 7",
        "`%` needs integer operands",
    ];
    assert_eq!(msgs.len(), want.len(), "{msgs:#?}");
    for (m, w) in msgs.iter().zip(want) {
        assert!(m.contains(w), "{m:?} should contain {w:?}; all: {msgs:#?}");
    }
    // Across kernels, too.
    let k2 = Kernel::new("k2", vec![n.clone()], Stmt::assign(&n, 1u32));
    let errs = verify_module(&Module::new(vec![k, k2])).unwrap_err();
    assert_eq!(errs.len(), 7);
    assert_eq!(errs[6].kernel, "k2");
    assert!(errs[6].to_string().starts_with("in kernel `k2`: cannot assign to `n`"));
}

// ---------------------------------------------------------------------------------------------
// valid kernels

#[test]
fn saxpy_and_reduce_verify() {
    let x = v("x", gptr(Scalar::F32));
    let y = v("y", gptr(Scalar::F32));
    let a = v("a", Type::F32);
    let n = v("n", Type::U32);
    let i = v("i", Type::U32);
    let saxpy = Kernel::new(
        "saxpy",
        vec![x.clone(), y.clone(), a.clone(), n.clone()],
        Stmt::block([
            Stmt::let_(&i, Expr::global_id(0)),
            Stmt::if_(i.expr().cmp_lt(&n), Stmt::store(&y, &i, &a * x.load(&i) + y.load(&i))),
        ]),
    );
    assert_ok(&saxpy);

    let out = v("out", gptr(Scalar::F32));
    let counts = v("counts", gptr(Scalar::U32));
    let tile = v("tile", Type::ptr(AddrSpace::Local, Scalar::F32));
    let tmp = v("tmp", Type::ptr(AddrSpace::Private, Scalar::F32));
    let acc = v("acc", Type::F32);
    let k = v("k", Type::U32);
    let j = v("j", Type::U32);
    let s = v("s", Type::F32);
    let old = v("old", Type::U32);
    let attrs =
        Attrs { reqd_work_group_size: Some([64, 1, 1]), fast_math: false, ..Attrs::default() };
    let reduce = Kernel::with_attrs(
        "reduce",
        vec![x.clone(), out.clone(), counts.clone()],
        attrs,
        Stmt::block([
            Stmt::alloc(&tile, 64),
            Stmt::alloc(&tmp, 4),
            Stmt::decl(&acc, 0.0f32),
            Stmt::for_(
                &k,
                0u32,
                4u32,
                1u32,
                Stmt::block([
                    Stmt::store(&tmp, &k, x.load(Expr::global_id(0) * 4u32 + &k)),
                    Stmt::assign(&acc, &acc + tmp.load(&k)),
                ]),
            ),
            Stmt::store(&tile, Expr::local_id(0), &acc),
            Stmt::barrier(MemFence::LOCAL),
            Stmt::call_into(
                &old,
                Func::atomic(AtomicOp::Add),
                [counts.expr(), 0u32.into(), 1u32.into()],
            ),
            Stmt::call(Func::atomic(AtomicOp::Max), [counts.expr(), 1u32.into(), old.expr()]),
            Stmt::if_else(
                Expr::local_id(0).cmp_eq(0u32),
                Stmt::block([
                    Stmt::decl(&s, 0.0f32),
                    Stmt::for_(&j, 0u32, 64u32, 1u32, Stmt::assign(&s, &s + tile.load(&j))),
                    Stmt::store(&out, Expr::group_id(0), &s),
                ]),
                Stmt::block([Stmt::call(Func::fence(MemFence::GLOBAL), [])]),
            ),
        ]),
    );
    assert_ok(&reduce);
    verify_module(&Module::new(vec![saxpy, reduce])).unwrap();
}

#[test]
fn nested_loops_and_while() {
    let x = v("x", gptr(Scalar::I32));
    let i = v("i", Type::I32);
    let j = v("j", Type::I64);
    let c = v("c", Type::I32);
    let k = kernel(
        &[&x],
        vec![
            Stmt::decl(&c, 0),
            Stmt::for_(
                &i,
                0,
                8,
                1,
                Stmt::for_(
                    &j,
                    Expr::i64(0),
                    i.expr().cast(Scalar::I64),
                    Expr::i64(2),
                    Stmt::block([
                        Stmt::assign(&c, &c + j.expr().cast(Scalar::I32)),
                        Stmt::store(&x, &j, &c),
                    ]),
                ),
            ),
            Stmt::while_(c.expr().cmp_gt(0), Stmt::assign(&c, &c >> 1)),
        ],
    );
    assert_ok(&k);
}

#[test]
fn deep_expressions_do_not_overflow() {
    let x = v("x", Type::I32);
    let mut e = x.expr();
    for _ in 0..100_000 {
        e = e + 1;
    }
    assert_ok(&eval(&[&x], e.clone()));
    // An error at the root of a deep tree is reported without printing all of it.
    let bad = e.cast(Scalar::F32) + Expr::i32(1);
    let err = one_error(&eval(&[&x], bad), "operands of `+` have different types");
    assert!(err.message.len() < 300, "{}", err.message);
}

// ---------------------------------------------------------------------------------------------
// robustness

#[test]
fn weird_ir_never_panics() {
    let p = v("p", gptr(Scalar::F32));
    let n = v("n", Type::U32);
    let b = v("b", Type::BOOL);
    let pb = v("pb", Type::ptr(AddrSpace::Local, Scalar::Bool));
    let wrong = v("p", Type::U32);
    let exprs: Vec<Expr> = vec![
        n.load(p.expr()),
        p.load(p.expr()),
        wrong.load(0u32),
        pb.load(0u32),
        Expr::intrinsic(Intrinsic::Fma, []),
        Expr::intrinsic(Intrinsic::Min, [p.expr(), p.expr(), p.expr(), p.expr()]),
        Expr::intrinsic(Intrinsic::Abs, [p.expr()]),
        Expr::select(&p, &p, &n),
        Expr::select(Expr::intrinsic(Intrinsic::Sin, []), &b, &b),
        Expr::unary(UnOp::Not, &p),
        Expr::unary(UnOp::Neg, Expr::intrinsic(Intrinsic::Max, [])),
        Expr::binary(BinOp::LogicAnd, &p, Expr::global_id(200)),
        Expr::binary(BinOp::Shl, Expr::f64(1.0), &p),
        Expr::imm(Imm::Int(Scalar::Bool, 7)).cast(Scalar::F16),
        Expr::imm(Imm::Float(Scalar::Bool, f64::NAN)),
        p.expr().cast(Scalar::Bool).cast(Scalar::F16) + p.expr(),
        Expr::cast(&Expr::builtin(Builtin::GlobalOffset, 9), Scalar::Bool),
    ];
    let vars = [&p, &n, &b, &pb, &wrong, &v("", Type::F32)];
    let mut stmts = Vec::new();
    for (k, e) in exprs.iter().enumerate() {
        stmts.push(Stmt::let_(&v(&format!("l{k}"), e.ty()), e.clone()));
        stmts.push(Stmt::decl(&v("dup", Type::F64), e.clone()));
        stmts.push(Stmt::assign(vars[k % vars.len()], e.clone()));
        stmts.push(Stmt::store(vars[k % vars.len()], e.clone(), e.clone()));
        stmts.push(Stmt::if_(e.clone(), Stmt::alloc(&pb, 0)));
        stmts.push(Stmt::while_(e.clone(), Stmt::block([])));
        stmts.push(Stmt::for_(
            &v("f", e.ty()),
            e.clone(),
            e.clone(),
            e.clone(),
            Stmt::assign(&v("f", e.ty()), e.clone()),
        ));
        for op in AtomicOp::ALL {
            stmts.push(Stmt::call(Func::atomic(op), vec![e.clone(); k % 6]));
            stmts.push(Stmt::call_into(
                &v("old", e.ty()),
                Func::atomic(op),
                vec![p.expr(), e.clone(), e.clone()],
            ));
        }
        stmts
            .push(Stmt::call(Func::barrier(MemFence { local: false, global: false }), [e.clone()]));
    }
    stmts.push(Stmt::alloc(&p, u32::MAX));
    stmts.push(Stmt::alloc(&n, 0));
    stmts.push(Stmt::block([Stmt::block([Stmt::block([Stmt::alloc(&pb, 1)])])]));
    let params: Vec<Var> = vec![p.clone(), p.clone(), pb.clone(), wrong.clone(), b.clone()];
    let attrs =
        Attrs { reqd_work_group_size: Some([0, 0, 0]), fast_math: true, ..Attrs::default() };
    let k = Kernel::with_attrs("", params, attrs, Stmt::block(stmts));
    let errs = errors(&k);
    assert!(errs.len() > 100, "{}", errs.len());
    for e in &errs {
        assert!(!e.message.is_empty());
        let _ = e.to_string();
    }
    // Bodies that are not blocks, empty modules.
    assert_ok(&Kernel::new("k", vec![], Stmt::block([])));
    let _ = verify_kernel(&Kernel::new("k", vec![], Stmt::assign(&n, 1u32)));
    verify_module(&Module::default()).unwrap();
}

// ---------------------------------------------------------------------------------------------
// The verify-error files of the corpus (tests/errors/*.kir at the workspace root), rebuilt with
// the builders: the first error must contain the file's `// expect:` text and be about the node
// that the file's `// at:` position points to. (The corpus runner, tests/error_corpus.rs, checks
// the files themselves through the parser.)

enum At {
    E(Expr),
    S(Stmt),
    Header,
}

fn corpus_expect(name: &str) -> String {
    let path = format!("{}/../tests/errors/{name}.kir", env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let first = src.lines().next().unwrap_or_default();
    first.strip_prefix("// expect: ").unwrap_or_else(|| panic!("{path}: no expect line")).into()
}

fn mirror(name: &str, m: Module, at: At) {
    let expect = corpus_expect(name);
    let errs = verify_module(&m).err().unwrap_or_default();
    let first = errs.first().unwrap_or_else(|| panic!("{name}: verifies cleanly"));
    assert!(
        first.message.contains(&expect),
        "{name}: {:?} does not contain {expect:?}",
        first.message
    );
    match (&first.node, at) {
        (Some(Node::Expr(x)), At::E(e)) => assert!(x.ptr_eq(&e), "{name}: located at {x:?}"),
        (Some(Node::Stmt(x)), At::S(s)) => assert!(x.ptr_eq(&s), "{name}: located at {x:?}"),
        (None, At::Header) => {}
        (n, _) => panic!("{name}: error located at the wrong kind of node: {n:?}"),
    }
    let all: Vec<&str> = errs.iter().map(|e| e.message.as_str()).collect();
    assert!(errs.iter().all(|e| e.message.contains(&expect)), "{name}: extra errors {all:#?}");
}

fn one(name: &str, params: &[&Var], body: Vec<Stmt>, at: At) {
    let k = Kernel::new(name, params.iter().map(|p| (*p).clone()).collect(), Stmt::block(body));
    mirror(name, Module::new(vec![k]), at);
}

fn gid() -> Expr {
    Expr::global_id(0)
}

#[test]
fn corpus_expression_errors() {
    let x = v("x", gptr(Scalar::F32));
    let y = v("y", gptr(Scalar::F32));
    let n = v("n", Type::U32);
    let i = v("i", Type::U32);
    let li = Stmt::let_(&i, gid());

    let e = x.load(&i) + &n;
    one(
        "type_mixed_operands",
        &[&x, &y, &n],
        vec![li.clone(), Stmt::store(&y, &i, e.clone())],
        At::E(e),
    );

    let e = x.load(&i) % 2.0;
    one("type_float_remainder", &[&x], vec![li.clone(), Stmt::store(&x, &i, e.clone())], At::E(e));

    let e = x.load(&i) << 1;
    one("type_float_shift", &[&x], vec![li.clone(), Stmt::store(&x, &i, e.clone())], At::E(e));

    let si = v("i", Type::I32);
    let c = si.expr().cmp_lt(&n);
    one(
        "type_signed_unsigned_compare",
        &[&x, &n],
        vec![
            Stmt::let_(&si, gid().cast(Scalar::I32)),
            Stmt::if_(c.clone(), Stmt::block([Stmt::store(&x, &si, 0.0f32)])),
        ],
        At::E(c),
    );

    let (p, q, both) = (v("p", Type::BOOL), v("q", Type::BOOL), v("both", Type::BOOL));
    let out = v("out", gptr(Scalar::U32));
    let e = &p + &q;
    one(
        "type_bool_arithmetic",
        &[&x, &y, &out],
        vec![
            li.clone(),
            Stmt::let_(&p, x.load(&i).cmp_gt(0.0)),
            Stmt::let_(&q, y.load(&i).cmp_gt(0.0)),
            Stmt::let_(&both, e.clone()),
            Stmt::store(&out, &i, both.expr().cast(Scalar::U32)),
        ],
        At::E(e),
    );

    let xu = v("x", gptr(Scalar::U32));
    let m = v("m", Type::U32);
    let e = m.expr().logic_and(xu.load(&i));
    one(
        "type_logical_and_on_integers",
        &[&xu, &m],
        vec![li.clone(), Stmt::if_(e.clone(), Stmt::block([Stmt::store(&xu, &i, 0u32)]))],
        At::E(e),
    );

    let e = Expr::unary(UnOp::BitNot, x.load(&i));
    one("type_bitnot_on_float", &[&x], vec![li.clone(), Stmt::store(&x, &i, e.clone())], At::E(e));

    let e = Expr::select(x.load(&i).cmp_gt(0.0), x.load(&i), 0u32);
    one("type_select_arms", &[&x], vec![li.clone(), Stmt::store(&x, &i, e.clone())], At::E(e));

    let e = Expr::select(&n, x.load(&i), 0.0f32);
    one(
        "type_select_condition",
        &[&x, &n],
        vec![li.clone(), Stmt::store(&x, &i, e.clone())],
        At::E(e),
    );

    let o64 = v("out", gptr(Scalar::U64));
    let e = x.expr().cast(Scalar::U64);
    one("type_cast_pointer", &[&x, &o64], vec![Stmt::store(&o64, 0u32, e.clone())], At::E(e));

    let h = v("h", gptr(Scalar::F16));
    let e = h.load(&i) * 2.0;
    one("type_f16_arithmetic", &[&h], vec![li.clone(), Stmt::store(&h, &i, e.clone())], At::E(e));
    // Also when the literal was not given the f16 type.
    let e2 = h.load(&i) * Expr::f32(2.0);
    let k = Kernel::new("k", vec![h.clone()], Stmt::block([li.clone(), Stmt::store(&h, &i, e2)]));
    one_error(&k, "f16 is a storage type");

    let e = n.load(&i);
    one(
        "type_load_from_scalar",
        &[&x, &n],
        vec![li.clone(), Stmt::store(&x, &i, e.cast(Scalar::F32))],
        At::E(e),
    );

    let t = v("t", Type::F32);
    let idx = t.expr();
    one(
        "type_float_index",
        &[&x, &y, &t],
        vec![li.clone(), Stmt::store(&y, &i, x.load(idx.clone()))],
        At::E(idx),
    );

    let z = v("z", Type::U32);
    let e = Expr::global_id(3);
    one(
        "type_builtin_dimension",
        &[&xu],
        vec![Stmt::let_(&z, e.clone()), Stmt::store(&xu, &z, &z)],
        At::E(e),
    );

    let e = Expr::intrinsic(Intrinsic::Sqrt, [n.expr()]);
    one(
        "type_sqrt_of_integer",
        &[&x, &n],
        vec![li.clone(), Stmt::store(&x, &i, e.clone())],
        At::E(e),
    );

    let e = Expr::intrinsic(Intrinsic::Min, [x.load(&i)]);
    one("type_intrinsic_arity", &[&x], vec![li.clone(), Stmt::store(&x, &i, e.clone())], At::E(e));

    let e = x.load(&i).min(&n);
    one(
        "type_min_mixed_arguments",
        &[&x, &n],
        vec![li.clone(), Stmt::store(&x, &i, e.clone())],
        At::E(e),
    );
}

#[test]
fn corpus_statement_errors() {
    let x = v("x", gptr(Scalar::F32));
    let xu = v("x", gptr(Scalar::U32));
    let out = v("out", gptr(Scalar::F32));
    let outu = v("out", gptr(Scalar::U32));
    let n = v("n", Type::U32);
    let i = v("i", Type::U32);
    let k = v("k", Type::U32);
    let li = Stmt::let_(&i, gid());

    let count = v("count", Type::U32);
    let val = x.load(&i);
    one(
        "stmt_let_type_mismatch",
        &[&x, &outu],
        vec![li.clone(), Stmt::let_(&count, val.clone()), Stmt::store(&outu, &i, &count)],
        At::E(val),
    );

    let p = v("p", gptr(Scalar::F32));
    let s = Stmt::let_(&p, &x);
    one("stmt_let_binds_pointer", &[&x], vec![s.clone(), Stmt::store(&p, 0u32, 1.0f32)], At::S(s));

    let sv = v("s", Type::F32);
    let s = Stmt::assign(&sv, &sv + x.load(&k));
    one(
        "stmt_assign_to_let",
        &[&x, &out],
        vec![
            Stmt::let_(&sv, 0.0f32),
            Stmt::for_(&k, 0u32, 16u32, 1u32, Stmt::block([s.clone()])),
            Stmt::store(&out, 0u32, &sv),
        ],
        At::S(s),
    );

    let s = Stmt::assign(&n, &n - 1u32);
    one(
        "stmt_assign_to_param",
        &[&xu, &n],
        vec![Stmt::while_(
            n.expr().cmp_gt(0u32),
            Stmt::block([Stmt::store(&xu, &n, &n), s.clone()]),
        )],
        At::S(s),
    );

    let s = Stmt::assign(&k, 64u32);
    one(
        "stmt_assign_loop_counter",
        &[&x, &outu],
        vec![Stmt::for_(
            &k,
            0u32,
            64u32,
            1u32,
            Stmt::block([Stmt::if_(
                x.load(&k).cmp_lt(0.0),
                Stmt::block([Stmt::store(&outu, 0u32, &k), s.clone()]),
            )]),
        )],
        At::S(s),
    );

    let total = v("total", Type::U32);
    let val = x.load(&k);
    one(
        "stmt_assign_type_mismatch",
        &[&x, &outu],
        vec![
            Stmt::decl(&total, 0u32),
            Stmt::for_(&k, 0u32, 8u32, 1u32, Stmt::block([Stmt::assign(&total, val.clone())])),
            Stmt::store(&outu, 0u32, &total),
        ],
        At::E(val),
    );

    let w = v("w", Type::ptr(AddrSpace::Constant, Scalar::F32));
    let g = v("g", gptr(Scalar::F32));
    let s = Stmt::store(&w, &i, w.load(&i) - 0.1 * g.load(&i));
    one("stmt_store_to_constant", &[&w, &g], vec![li.clone(), s.clone()], At::S(s));

    let val = n.expr();
    one(
        "stmt_store_value_mismatch",
        &[&out, &n],
        vec![li.clone(), Stmt::store(&out, &i, val.clone())],
        At::E(val),
    );

    let flags = v("flags", Type::ptr(AddrSpace::Local, Scalar::Bool));
    let s = Stmt::alloc(&flags, 64);
    one(
        "stmt_local_array_of_bool",
        &[&x],
        vec![s.clone(), Stmt::store(&flags, Expr::local_id(0), x.load(gid()).cmp_gt(0.0))],
        At::S(s),
    );

    let tile = v("tile", Type::ptr(AddrSpace::Local, Scalar::F32));
    let s = Stmt::alloc(&tile, 64);
    one(
        "stmt_local_array_in_if",
        &[&x, &out],
        vec![Stmt::if_(
            Expr::local_id(0).cmp_eq(0u32),
            Stmt::block([
                s.clone(),
                Stmt::store(&tile, 0u32, x.load(Expr::group_id(0))),
                Stmt::store(&out, Expr::group_id(0), tile.load(0u32)),
            ]),
        )],
        At::S(s),
    );

    let b = v("b", Type::U32);
    let s = Stmt::alloc(&tile, 16);
    let y = v("y", gptr(Scalar::F32));
    one(
        "stmt_local_array_in_loop",
        &[&x, &y],
        vec![Stmt::for_(
            &b,
            0u32,
            4u32,
            1u32,
            Stmt::block([
                s.clone(),
                Stmt::store(&tile, Expr::local_id(0), x.load(&b * 16u32 + Expr::local_id(0))),
                Stmt::barrier(MemFence::LOCAL),
                Stmt::store(
                    &y,
                    &b * 16u32 + Expr::local_id(0),
                    tile.load(Expr::u32(15) - Expr::local_id(0)),
                ),
                Stmt::barrier(MemFence::LOCAL),
            ]),
        )],
        At::S(s),
    );

    let tmp = v("tmp", Type::ptr(AddrSpace::Private, Scalar::F32));
    let s = Stmt::alloc(&tmp, 0);
    one(
        "stmt_array_of_zero_elements",
        &[&x],
        vec![s.clone(), Stmt::store(&x, 0u32, 0.0f32)],
        At::S(s),
    );

    let c = n.expr();
    one(
        "stmt_if_condition_integer",
        &[&x, &n],
        vec![Stmt::if_(c.clone(), Stmt::block([Stmt::store(&x, 0u32, 1.0f32)]))],
        At::E(c),
    );

    let kv = v("k", Type::U32);
    let c = kv.expr();
    one(
        "stmt_while_condition_integer",
        &[&xu, &n],
        vec![
            Stmt::decl(&kv, &n),
            Stmt::while_(
                c.clone(),
                Stmt::block([Stmt::assign(&kv, &kv - 1u32), Stmt::store(&xu, &kv, 0u32)]),
            ),
        ],
        At::E(c),
    );

    let t = v("t", Type::F32);
    let s = Stmt::for_(&t, 0.0f32, 1.0f32, 0.25f32, Stmt::block([Stmt::store(&x, 0u32, &t)]));
    one("stmt_for_float_counter", &[&x], vec![s.clone()], At::S(s));

    let m = v("m", Type::I32);
    let hi = m.expr();
    one(
        "stmt_for_bound_mismatch",
        &[&x, &m],
        vec![Stmt::for_(&k, 0u32, hi.clone(), 1u32, Stmt::block([Stmt::store(&x, &k, 0.0f32)]))],
        At::E(hi),
    );

    let s = Stmt::barrier(MemFence { local: false, global: false });
    one(
        "stmt_barrier_empty_fence",
        &[&x],
        vec![
            Stmt::alloc(&tile, 64),
            Stmt::store(&tile, Expr::local_id(0), x.load(gid())),
            s.clone(),
            Stmt::store(&x, gid(), tile.load(Expr::u32(63) - Expr::local_id(0))),
        ],
        At::S(s),
    );
}

#[test]
fn corpus_atomic_scope_and_kernel_errors() {
    let atomic = |op: AtomicOp, args: Vec<Expr>| Stmt::call(Func::atomic(op), args);

    let c = v("c", Type::ptr(AddrSpace::Constant, Scalar::U32));
    let arg = c.expr();
    one(
        "atomic_on_constant",
        &[&c],
        vec![atomic(AtomicOp::Add, vec![arg.clone(), Expr::i32(0), Expr::u32(1)])],
        At::E(arg),
    );

    let xu = v("x", gptr(Scalar::U32));
    let hist = v("hist", Type::ptr(AddrSpace::Private, Scalar::U32));
    let b = v("b", Type::U32);
    let arg = hist.expr();
    one(
        "atomic_on_private",
        &[&xu],
        vec![
            Stmt::alloc(&hist, 16),
            Stmt::let_(&b, xu.load(gid()) % 16u32),
            atomic(AtomicOp::Add, vec![arg.clone(), b.expr(), Expr::u32(1)]),
        ],
        At::E(arg),
    );

    let x = v("x", gptr(Scalar::F32));
    let out = v("out", gptr(Scalar::F32));
    let arg = out.expr();
    one(
        "atomic_max_on_float",
        &[&x, &out],
        vec![atomic(AtomicOp::Max, vec![arg.clone(), Expr::i32(0), x.load(gid())])],
        At::E(arg),
    );

    let counts = v("counts", gptr(Scalar::U32));
    let val = Expr::i32(1);
    one(
        "atomic_value_mismatch",
        &[&counts],
        vec![atomic(AtomicOp::Add, vec![counts.expr(), Expr::i32(0), val.clone()])],
        At::E(val),
    );

    let outi = v("out", gptr(Scalar::I32));
    let old = v("old", Type::I32);
    let s = Stmt::call_into(
        &old,
        Func::atomic(AtomicOp::Add),
        [counts.expr(), Expr::i32(0), Expr::u32(1)],
    );
    one(
        "atomic_result_mismatch",
        &[&counts, &outi],
        vec![s.clone(), Stmt::store(&outi, gid(), &old)],
        At::S(s),
    );

    let n = v("n", Type::U32);
    let s = Stmt::let_(&n, &n * 2u32);
    one(
        "scope_shadow_parameter",
        &[&xu, &n],
        vec![s.clone(), Stmt::store(&xu, 0u32, &n)],
        At::S(s),
    );

    let (a, bb, cc) =
        (v("a", gptr(Scalar::F32)), v("b", gptr(Scalar::F32)), v("c", gptr(Scalar::F32)));
    let i = v("i", Type::U32);
    let inner = Stmt::for_(
        &i,
        0u32,
        16u32,
        1u32,
        Stmt::block([Stmt::store(&cc, &i * 16u32 + &i, a.load(&i) * bb.load(&i))]),
    );
    one(
        "scope_shadow_loop_counter",
        &[&a, &bb, &cc],
        vec![Stmt::for_(&i, 0u32, 16u32, 1u32, Stmt::block([inner.clone()]))],
        At::S(inner),
    );

    let body = Stmt::block([Stmt::let_(&i, gid()), Stmt::store(&x, &i, x.load(&i) + 1.0)]);
    let k = Kernel::new("add", vec![x.clone(), x.clone()], body);
    mirror("kernel_duplicate_parameter", Module::new(vec![k]), At::Header);

    let tile = v("tile", Type::ptr(AddrSpace::Local, Scalar::F32));
    let body = Stmt::block([Stmt::store(&tile, Expr::local_id(0), x.load(gid()))]);
    let k = Kernel::new("stage", vec![x.clone(), tile.clone()], body);
    mirror("kernel_local_pointer_parameter", Module::new(vec![k]), At::Header);

    let flags = v("flags", gptr(Scalar::Bool));
    let body =
        Stmt::block([Stmt::let_(&i, gid()), Stmt::store(&flags, &i, x.load(&i).cmp_gt(0.0))]);
    let k = Kernel::new("flag", vec![x.clone(), flags.clone()], body);
    mirror("kernel_bool_buffer_parameter", Module::new(vec![k]), At::Header);

    let attrs =
        Attrs { reqd_work_group_size: Some([0, 1, 1]), fast_math: false, ..Attrs::default() };
    let k = Kernel::with_attrs("tiny", vec![x.clone()], attrs, Stmt::store(&x, gid(), 0.0f32));
    mirror("kernel_zero_work_group_size", Module::new(vec![k]), At::Header);

    let af = v("a", Type::F32);
    let k1 = Kernel::new(
        "scale",
        vec![x.clone(), af.clone()],
        Stmt::block([Stmt::store(&x, gid(), &af * x.load(gid()))]),
    );
    let x64 = v("x", gptr(Scalar::F64));
    let a64 = v("a", Type::F64);
    let k2 = Kernel::new(
        "scale",
        vec![x64.clone(), a64.clone()],
        Stmt::block([Stmt::store(&x64, gid(), &a64 * x64.load(gid()))]),
    );
    mirror("kernel_duplicate_name", Module::new(vec![k1, k2]), At::Header);

    // Reported by the parser when parsing (names are resolved there); by the verifier for IR
    // built through the API.
    let y = v("y", gptr(Scalar::F32));
    let partial = v("partial", Type::F32);
    let use_ = partial.expr();
    one(
        "scope_unbound_after_block",
        &[&x, &y, &n],
        vec![
            Stmt::let_(&i, gid()),
            Stmt::if_(i.expr().cmp_lt(&n), Stmt::block([Stmt::let_(&partial, x.load(&i) * 0.5)])),
            Stmt::store(&y, &i, use_.clone()),
        ],
        At::E(use_),
    );
}

#[test]
fn every_verify_error_file_is_mirrored() {
    // Keep this list in step with the mirrors above: a new verify-error file needs a mirror.
    let dir = format!("{}/../tests/errors", env!("CARGO_MANIFEST_DIR"));
    let this = include_str!("verify.rs");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let stem = path.file_stem().unwrap().to_string_lossy().to_string();
        if path.extension().is_some_and(|e| e == "kir")
            && !stem.starts_with("parse_")
            && !this.contains(&format!("\"{stem}\""))
        {
            missing.push(stem);
        }
    }
    assert!(missing.is_empty(), "corpus files without a builder mirror: {missing:?}");
}

// ---------------------------------------------------------------------------------------------
// random nonsense: arbitrary (mostly ill-typed, ill-scoped) IR never makes the verifier panic

mod arbitrary_ir {
    use super::*;
    use proptest::prelude::*;

    fn any_type() -> impl Strategy<Value = Type> {
        let scalar = proptest::sample::select(Scalar::ALL.to_vec());
        let space = proptest::sample::select(AddrSpace::ALL.to_vec());
        prop_oneof![
            scalar.clone().prop_map(Type::Scalar),
            (space, scalar).prop_map(|(sp, s)| Type::ptr(sp, s)),
        ]
    }

    fn any_var() -> impl Strategy<Value = Var> {
        (proptest::sample::select(vec!["a", "b", "i", "p", "x"]), any_type())
            .prop_map(|(n, t)| Var::new(n, t))
    }

    fn any_imm() -> impl Strategy<Value = Imm> {
        let scalar = proptest::sample::select(Scalar::ALL.to_vec());
        prop_oneof![
            any::<bool>().prop_map(Imm::Bool),
            (scalar.clone(), any::<u64>()).prop_map(|(s, b)| Imm::Int(s, b)),
            (scalar, any::<f64>()).prop_map(|(s, v)| Imm::Float(s, v)),
        ]
    }

    fn any_expr() -> impl Strategy<Value = Expr> {
        let leaf = prop_oneof![
            any_var().prop_map(|v| v.expr()),
            any_imm().prop_map(Expr::imm),
            (proptest::sample::select(Builtin::ALL.to_vec()), 0u8..5)
                .prop_map(|(b, d)| Expr::builtin(b, d)),
        ];
        leaf.prop_recursive(5, 48, 4, |inner| {
            let un = proptest::sample::select(vec![UnOp::Neg, UnOp::Not, UnOp::BitNot]);
            prop_oneof![
                (un, inner.clone()).prop_map(|(op, a)| Expr::unary(op, a)),
                (proptest::sample::select(BinOp::ALL.to_vec()), inner.clone(), inner.clone())
                    .prop_map(|(op, a, b)| Expr::binary(op, a, b)),
                (inner.clone(), inner.clone(), inner.clone())
                    .prop_map(|(c, a, b)| Expr::select(c, a, b)),
                (inner.clone(), proptest::sample::select(Scalar::ALL.to_vec()))
                    .prop_map(|(a, s)| a.cast(s)),
                (any_var(), inner.clone()).prop_map(|(v, i)| Expr::load(&v, i)),
                (
                    proptest::sample::select(Intrinsic::ALL.to_vec()),
                    proptest::collection::vec(inner, 0..4)
                )
                    .prop_map(|(op, args)| Expr::intrinsic(op, args)),
            ]
        })
    }

    fn any_stmt() -> impl Strategy<Value = Stmt> {
        let fence =
            (any::<bool>(), any::<bool>()).prop_map(|(l, g)| MemFence { local: l, global: g });
        let leaf = prop_oneof![
            (any_var(), any_expr()).prop_map(|(v, e)| Stmt::let_(&v, e)),
            (any_var(), any_expr()).prop_map(|(v, e)| Stmt::decl(&v, e)),
            (any_var(), any_expr()).prop_map(|(v, e)| Stmt::assign(&v, e)),
            (any_var(), any_expr(), any_expr()).prop_map(|(v, i, e)| Stmt::store(&v, i, e)),
            (any_var(), 0u32..3).prop_map(|(v, n)| Stmt::alloc(&v, n)),
            (fence.clone(), proptest::collection::vec(any_expr(), 0..2))
                .prop_map(|(f, a)| Stmt::call(Func::barrier(f), a)),
            (fence, proptest::option::of(any_var())).prop_map(|(f, r)| Stmt::new(
                kiln_ir::StmtNode::Call { result: r, func: Func::fence(f), args: vec![] }
            )),
            (
                proptest::sample::select(AtomicOp::ALL.to_vec()),
                proptest::option::of(any_var()),
                proptest::collection::vec(any_expr(), 0..5)
            )
                .prop_map(|(op, r, args)| Stmt::new(kiln_ir::StmtNode::Call {
                    result: r,
                    func: Func::atomic(op),
                    args,
                })),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Stmt::block),
                (any_expr(), inner.clone(), proptest::option::of(inner.clone())).prop_map(
                    |(c, t, o)| match o {
                        Some(o) => Stmt::if_else(c, t, o),
                        None => Stmt::if_(c, t),
                    }
                ),
                (any_expr(), inner.clone()).prop_map(|(c, b)| Stmt::while_(c, b)),
                (any_var(), any_expr(), any_expr(), any_expr(), inner)
                    .prop_map(|(v, lo, hi, s, b)| Stmt::for_(&v, lo, hi, s, b)),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn verifier_never_panics(
            params in proptest::collection::vec(any_var(), 0..4),
            body in proptest::collection::vec(any_stmt(), 0..6),
            wgs in proptest::option::of(proptest::array::uniform3(0u32..3)),
        ) {
            let attrs = Attrs { reqd_work_group_size: wgs, fast_math: false, ..Attrs::default() };
            let k = Kernel::with_attrs("k", params, attrs, Stmt::block(body));
            let m = Module::new(vec![k.clone(), k]);
            if let Err(errs) = verify_module(&m) {
                for e in errs {
                    prop_assert!(!e.message.is_empty());
                    let _ = e.to_string();
                }
            }
            let _ = kiln_ir::check::check_module("<random>", &m);
        }
    }
}

#[test]
fn names_must_be_printable_identifiers() {
    for bad in ["i8", "let", "two words", "", "9lives", "nan"] {
        let v = Var::new(bad, Type::I32);
        let k = Kernel::new("k", vec![], Stmt::block([Stmt::let_(&v, Expr::i32(1))]));
        let errs = verify_kernel(&k).expect_err(bad);
        assert!(errs[0].message.contains("is not a valid name"), "{bad:?}: {}", errs[0].message);
    }
    let k = Kernel::new("for", vec![Var::new("f32", Type::F32)], Stmt::block([]));
    let errs = verify_kernel(&k).expect_err("bad kernel and parameter names");
    assert_eq!(errs.len(), 2, "{errs:?}");
    let ok = Var::new("_x9", Type::I32);
    let k = Kernel::new("k_1", vec![], Stmt::block([Stmt::let_(&ok, Expr::i32(1))]));
    assert!(verify_kernel(&k).is_ok());
}
