//! The random kernel generator (feature `testing`): every generated case is well typed (by
//! the rules the verifier enforces, re-checked here by a small independent checker), runs on
//! the interpreter without error, deterministically, and gives the same buffers under the
//! reverse schedule (no data races). Also checks that generation covers every construct.
#![cfg(feature = "testing")]

use std::collections::BTreeSet;

use kiln_ir::interp::{run_with, RunOptions};
use kiln_ir::launch::Arg;
use kiln_ir::testing::{
    arb_expr, arb_kernel, case_from_bytes, case_from_choices, results_match, ExprEnv, GenConfig,
    TestCase, STEP_LIMIT,
};
use kiln_ir::{
    walk_expr, walk_stmt, AddrSpace, AtomicOp, BinOp, Expr, ExprNode, FuncKind, Intrinsic, Kernel,
    Scalar, Stmt, StmtNode, Type, UnOp, Var, Visitor,
};
use proptest::prelude::*;

// ---- an independent type checker for the verifier's rules ---------------------------------

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Param,
    Let,
    Mutable,
    Other,
}

struct Checker {
    scope: Vec<(Var, Kind)>,
}

impl Checker {
    fn lookup(&self, v: &Var) -> Result<Kind, String> {
        match self.scope.iter().rev().find(|(b, _)| b.name() == v.name()) {
            Some((b, k)) if b.ty() == v.ty() => Ok(*k),
            Some((b, _)) => {
                Err(format!("`{}` used as {} but bound as {}", v.name(), v.ty(), b.ty()))
            }
            None => Err(format!("`{}` not in scope", v.name())),
        }
    }

    fn bind(&mut self, v: &Var, k: Kind) -> Result<(), String> {
        if self.scope.iter().any(|(b, _)| b.name() == v.name()) {
            return Err(format!("`{}` shadows a binding in scope", v.name()));
        }
        self.scope.push((v.clone(), k));
        Ok(())
    }

    /// The type of `e`; f16 operands are only allowed under a cast.
    fn expr(&self, e: &Expr) -> Result<Scalar, String> {
        let t = self.expr_inner(e)?;
        if Type::Scalar(t) != e.ty() {
            return Err(format!("expression type {} but node says {}", t, e.ty()));
        }
        Ok(t)
    }

    fn operand(&self, e: &Expr) -> Result<Scalar, String> {
        let t = self.expr(e)?;
        if t == Scalar::F16 {
            return Err("f16 used other than by load, store or cast".into());
        }
        Ok(t)
    }

    fn int_index(&self, e: &Expr) -> Result<(), String> {
        if self.operand(e)?.is_int() {
            Ok(())
        } else {
            Err("non-integer index".into())
        }
    }

    fn pointer(&self, v: &Var) -> Result<(AddrSpace, Scalar), String> {
        self.lookup(v)?;
        match v.ty() {
            Type::Ptr(s, e) if e != Scalar::Bool => Ok((s, e)),
            t => Err(format!("`{}` of type {t} is not a pointer to a storable type", v.name())),
        }
    }

    fn expr_inner(&self, e: &Expr) -> Result<Scalar, String> {
        match e.node() {
            // The generator makes scalar kernels only (tests/vectors.rs covers vectors).
            ExprNode::VecLoad { .. }
            | ExprNode::Extract { .. }
            | ExprNode::Insert { .. }
            | ExprNode::Vector { .. } => Err(format!("vector expression `{e}`")),
            ExprNode::Var(v) => {
                self.lookup(v)?;
                v.ty().scalar().ok_or_else(|| format!("pointer `{}` used as a value", v.name()))
            }
            ExprNode::Imm(i) => Ok(i.scalar()),
            ExprNode::Unary { op, a } => {
                let t = self.operand(a)?;
                let ok = match op {
                    UnOp::Neg => t.is_arith(),
                    UnOp::Not => t == Scalar::Bool,
                    UnOp::BitNot => t.is_int(),
                };
                if ok {
                    Ok(t)
                } else {
                    Err(format!("`{}` on {t}", op.symbol()))
                }
            }
            ExprNode::Binary { op, a, b } => {
                let (ta, tb) = (self.operand(a)?, self.operand(b)?);
                if ta != tb {
                    return Err(format!("`{}` on {ta} and {tb}", op.symbol()));
                }
                let ok = match op {
                    BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div => ta.is_arith(),
                    BinOp::Rem | BinOp::Shl | BinOp::Shr => ta.is_int(),
                    BinOp::And | BinOp::Or | BinOp::Xor => ta.is_int() || ta == Scalar::Bool,
                    BinOp::Eq | BinOp::Ne => true,
                    BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge => ta.is_arith(),
                    BinOp::LogicAnd | BinOp::LogicOr => ta == Scalar::Bool,
                };
                if !ok {
                    return Err(format!("`{}` on {ta}", op.symbol()));
                }
                Ok(if op.is_comparison() || op.is_logical() { Scalar::Bool } else { ta })
            }
            ExprNode::Select { cond, a, b } => {
                let (tc, ta, tb) = (self.operand(cond)?, self.operand(a)?, self.operand(b)?);
                if tc != Scalar::Bool || ta != tb {
                    return Err(format!("select({tc}, {ta}, {tb})"));
                }
                Ok(ta)
            }
            ExprNode::Cast { to, a } => {
                self.expr(a)?;
                Ok(*to)
            }
            ExprNode::Load { buf, index } => {
                let (_, elem) = self.pointer(buf)?;
                self.int_index(index)?;
                Ok(elem)
            }
            ExprNode::Builtin { dim, .. } => {
                if *dim > 2 {
                    return Err("built-in dimension > 2".into());
                }
                Ok(Scalar::U32)
            }
            ExprNode::Intrinsic { op, args } => {
                if args.len() != op.arity() {
                    return Err(format!("`{}` arity", op.name()));
                }
                let types = args.iter().map(|a| self.operand(a)).collect::<Result<Vec<_>, _>>()?;
                let t = types[0];
                let ok = types.iter().all(|&x| x == t)
                    && if op.float_only() {
                        matches!(t, Scalar::F32 | Scalar::F64)
                    } else if op.int_only() {
                        t.is_int()
                    } else {
                        t.is_arith()
                    };
                if !ok {
                    return Err(format!("`{}` on {types:?}", op.name()));
                }
                Ok(t)
            }
        }
    }

    fn stmt(&mut self, s: &Stmt, top: bool) -> Result<(), String> {
        match s.node() {
            StmtNode::VecStore { .. } => Err("vector store".into()),
            StmtNode::Let { var, value } | StmtNode::Decl { var, init: value } => {
                let t = self.operand(value)?;
                if var.ty() != Type::Scalar(t) {
                    return Err(format!("`{}: {}` bound to a {t}", var.name(), var.ty()));
                }
                let kind = if matches!(s.node(), StmtNode::Let { .. }) {
                    Kind::Let
                } else {
                    Kind::Mutable
                };
                self.bind(var, kind)
            }
            StmtNode::Assign { var, value } => {
                if self.lookup(var)? != Kind::Mutable {
                    return Err(format!("assignment to non-var `{}`", var.name()));
                }
                if var.ty() != Type::Scalar(self.operand(value)?) {
                    return Err("assignment type".into());
                }
                Ok(())
            }
            StmtNode::Store { buf, index, value } => {
                let (space, elem) = self.pointer(buf)?;
                if space == AddrSpace::Constant {
                    return Err("store through constant".into());
                }
                self.int_index(index)?;
                if self.expr(value)? != elem {
                    return Err("store type".into());
                }
                Ok(())
            }
            StmtNode::Alloc { var, .. } => {
                match var.ty() {
                    Type::Ptr(AddrSpace::Local, e) if top && e != Scalar::Bool => {}
                    Type::Ptr(AddrSpace::Private, e) if e != Scalar::Bool => {}
                    t => return Err(format!("array `{}: {t}` (top level: {top})", var.name())),
                }
                self.bind(var, Kind::Other)
            }
            StmtNode::If { cond, then, otherwise } => {
                if self.operand(cond)? != Scalar::Bool {
                    return Err("if condition".into());
                }
                self.scoped(then)?;
                match otherwise {
                    Some(o) => self.scoped(o),
                    None => Ok(()),
                }
            }
            StmtNode::For { var, lo, hi, step, body } => {
                let t = var.ty().scalar().filter(|t| t.is_int()).ok_or("non-integer counter")?;
                for e in [lo, hi, step] {
                    if self.operand(e)? != t {
                        return Err("for bound type".into());
                    }
                }
                let mark = self.scope.len();
                self.bind(var, Kind::Other)?;
                let r = self.scoped(body);
                self.scope.truncate(mark);
                r
            }
            StmtNode::While { cond, body } => {
                if self.operand(cond)? != Scalar::Bool {
                    return Err("while condition".into());
                }
                self.scoped(body)
            }
            StmtNode::Block(stmts) => {
                let mark = self.scope.len();
                for st in stmts {
                    self.stmt(st, top)?;
                }
                self.scope.truncate(mark);
                Ok(())
            }
            StmtNode::Call { result, func, args } => match func.kind() {
                FuncKind::Matrix(op) => Err(format!("generated `{}`", op.name())),
                FuncKind::Barrier(_) | FuncKind::Fence(_) => {
                    if args.is_empty() && result.is_none() {
                        Ok(())
                    } else {
                        Err("barrier/fence operands".into())
                    }
                }
                FuncKind::Atomic(op) => {
                    if args.len() != 2 + op.value_operands() {
                        return Err("atomic arity".into());
                    }
                    let buf = args[0].as_var().ok_or("atomic on a non-variable")?;
                    let (space, elem) = self.pointer(buf)?;
                    let elem_ok =
                        matches!(elem, Scalar::I32 | Scalar::U32 | Scalar::I64 | Scalar::U64)
                            || (elem == Scalar::F32 && op == AtomicOp::Add);
                    if !matches!(space, AddrSpace::Global | AddrSpace::Local) || !elem_ok {
                        return Err(format!("{} on ptr<{space}, {elem}>", op.name()));
                    }
                    self.int_index(&args[1])?;
                    for v in &args[2..] {
                        if self.operand(v)? != elem {
                            return Err("atomic operand type".into());
                        }
                    }
                    if let Some(r) = result {
                        if r.ty() != Type::Scalar(elem) {
                            return Err("atomic result type".into());
                        }
                        self.bind(r, Kind::Other)?;
                    }
                    Ok(())
                }
            },
        }
    }

    fn scoped(&mut self, s: &Stmt) -> Result<(), String> {
        let mark = self.scope.len();
        let r = self.stmt(s, false);
        self.scope.truncate(mark);
        r
    }
}

fn check_kernel(k: &Kernel) -> Result<(), String> {
    let mut c = Checker { scope: Vec::new() };
    for p in k.params() {
        match p.ty() {
            Type::Scalar(s) if s != Scalar::F16 => {}
            Type::Ptr(AddrSpace::Global | AddrSpace::Constant | AddrSpace::Generic, e)
                if e != Scalar::Bool => {}
            t => return Err(format!("parameter `{}: {t}`", p.name())),
        }
        c.bind(p, Kind::Param)?;
    }
    c.stmt(k.body(), true)
}

// ---- properties ----------------------------------------------------------------------------

fn env_vars() -> (Var, Var, Var) {
    (
        Var::new("x", Type::I32),
        Var::new("y", Type::F32),
        Var::new("buf", Type::ptr(AddrSpace::Global, Scalar::U8)),
    )
}

fn expr_env() -> ExprEnv {
    let (x, y, buf) = env_vars();
    ExprEnv { vars: vec![x, y], buffers: vec![(buf, 3)] }
}

fn check_case(case: &TestCase) -> Result<(), TestCaseError> {
    check_kernel(&case.kernel).map_err(|e| TestCaseError::fail(format!("ill-typed: {e}")))?;
    if let Err(errs) = kiln_ir::verify_kernel(&case.kernel) {
        let errs: Vec<String> = errs.iter().map(ToString::to_string).collect();
        return Err(TestCaseError::fail(format!("the verifier rejects it: {}", errs.join("; "))));
    }
    let first = case.run().map_err(|e| TestCaseError::fail(e.to_string()))?;
    let second = case.run().map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&first, &second, "not deterministic");
    let mut reversed = case.buffers.clone();
    let opts =
        RunOptions { max_steps: Some(STEP_LIMIT), reverse_order: true, ..RunOptions::default() };
    run_with(&case.kernel, &case.range, &case.args, &mut reversed, &opts)
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    results_match(&first, &reversed)
        .map_err(|e| TestCaseError::fail(format!("schedule-dependent: {e}")))?;
    prop_assert_eq!(first.len(), case.buffers.len());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn generated_kernels_are_well_typed_and_run_deterministically(case in arb_kernel()) {
        check_case(&case)?;
    }

    #[test]
    fn generated_expressions_are_well_typed_and_evaluate(
        (ty, e) in proptest::sample::select(Scalar::ALL.to_vec())
            .prop_flat_map(|ty| arb_expr(ty, expr_env(), 4).prop_map(move |e| (ty, e)))
    ) {
        let (x, y, buf) = env_vars();
        prop_assert_eq!(e.ty(), Type::Scalar(ty));
        // Evaluate it in a one-item kernel.
        let out_elem = if ty == Scalar::Bool { Scalar::U8 } else { ty };
        let out = Var::new("out", Type::ptr(AddrSpace::Global, out_elem));
        let k = Kernel::new("e", vec![x, y, buf, out.clone()],
            Stmt::store(&out, 0u32, if ty == Scalar::Bool { e.cast(Scalar::U8) } else { e }));
        check_kernel(&k).map_err(TestCaseError::fail)?;
        let mut bufs = vec![kiln_ir::launch::Buffer::from_slice(&[1u8, 2, 3]),
            kiln_ir::launch::Buffer::zeroed(out_elem, 1)];
        let args = [Arg::scalar(-7i32), Arg::scalar(2.5f32), Arg::Buffer(0), Arg::Buffer(1)];
        kiln_ir::interp::run(&k, &kiln_ir::launch::NdRange::new(&[1]), &args, &mut bufs)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
}

#[test]
fn fuzz_bytes_and_exhausted_streams_give_valid_cases() {
    let cfg = GenConfig::default();
    // The empty stream is the simplest kernel.
    let simplest = case_from_choices(&[], &cfg);
    check_case(&simplest).unwrap();
    assert_eq!(simplest.range.dims, 1);
    for n in 0..64u32 {
        let bytes: Vec<u8> =
            (0..n * 37).map(|i| (i.wrapping_mul(2654435761) >> (n % 24)) as u8).collect();
        check_case(&case_from_bytes(&bytes, &cfg)).unwrap();
    }
}

/// Collects what a kernel contains.
#[derive(Default)]
struct Features(BTreeSet<String>);

impl Visitor for Features {
    fn visit_expr(&mut self, e: &Expr) {
        let tag = match e.node() {
            ExprNode::Unary { op, .. } => format!("unary {}", op.symbol()),
            ExprNode::Binary { op, .. } => {
                format!("binary {} {}", op.symbol(), e.children()[0].ty())
            }
            ExprNode::Select { .. } => "select".into(),
            ExprNode::Cast { to, a } => {
                self.0.insert(format!("cast from {}", a.ty()));
                format!("cast to {to}")
            }
            ExprNode::Load { buf, .. } => format!("load {}", buf.ty()),
            ExprNode::Builtin { kind, .. } => format!("builtin {}", kind.name()),
            ExprNode::Intrinsic { op, .. } => format!("intrinsic {}", op.name()),
            ExprNode::Var(_) => "var".into(),
            ExprNode::Imm(i) => format!("imm {}", i.scalar()),
            ExprNode::VecLoad { .. }
            | ExprNode::Extract { .. }
            | ExprNode::Insert { .. }
            | ExprNode::Vector { .. } => "vector".into(),
        };
        self.0.insert(tag);
        walk_expr(self, e);
    }

    fn visit_stmt(&mut self, s: &Stmt) {
        let tag = match s.node() {
            StmtNode::Let { .. } => "let".to_string(),
            StmtNode::Decl { .. } => "var".into(),
            StmtNode::Assign { .. } => "assign".into(),
            StmtNode::VecStore { .. } => "vector store".into(),
            StmtNode::Store { buf, .. } => {
                format!("store {}", buf.ty().addr_space().map_or("", |a| a.name()))
            }
            StmtNode::Alloc { var, .. } => {
                format!("alloc {}", var.ty().addr_space().map_or("", |a| a.name()))
            }
            StmtNode::If { otherwise: Some(_), .. } => "if-else".into(),
            StmtNode::If { .. } => "if".into(),
            StmtNode::For { var, body, .. } => {
                let mut inner = Features::default();
                inner.visit_stmt(body);
                if inner.0.contains("barrier") {
                    self.0.insert("barrier in loop".into());
                }
                if inner.0.iter().any(|t| t.starts_with("for")) {
                    self.0.insert("nested for".into());
                }
                format!("for {}", var.ty())
            }
            StmtNode::While { .. } => "while".into(),
            StmtNode::Block(_) => "block".into(),
            StmtNode::Call { result, func, args } => match func.kind() {
                FuncKind::Barrier(_) => "barrier".into(),
                FuncKind::Fence(_) => "fence".into(),
                FuncKind::Matrix(op) => op.name().into(),
                FuncKind::Atomic(op) => {
                    let space = args[0].ty().addr_space().map_or("", |a| a.name());
                    self.0.insert(format!("atomic {space} result {}", result.is_some()));
                    self.0.insert(format!(
                        "atomic elem {}",
                        args[0].ty().elem().unwrap_or(Scalar::Bool)
                    ));
                    format!("atomic {}", op.name())
                }
            },
        };
        self.0.insert(tag);
        walk_stmt(self, s);
    }
}

#[test]
fn generation_covers_every_construct() {
    let cfg = GenConfig::default();
    let mut f = Features::default();
    let mut binds: Vec<String> = Vec::new();
    // A cheap deterministic stream source (xorshift), 400 kernels.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..400 {
        let choices: Vec<u32> = (0..3000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 32) as u32
            })
            .collect();
        let case = case_from_choices(&choices, &cfg);
        f.visit_kernel(&case.kernel);
        f.0.insert(format!("dims {}", case.range.dims));
        if case.range.offset.iter().any(|&o| o > 0) {
            f.0.insert("offset".into());
        }
        if case.kernel.attrs().reqd_work_group_size.is_some() {
            f.0.insert("reqd".into());
        }
        let bufs: Vec<usize> = case
            .args
            .iter()
            .filter_map(|a| match a {
                Arg::Buffer(b) => Some(*b),
                _ => None,
            })
            .collect();
        if bufs.len() > bufs.iter().collect::<BTreeSet<_>>().len() {
            f.0.insert("aliasing".into());
        }
        for p in case.kernel.params() {
            f.0.insert(format!("param {}", p.ty().addr_space().map_or("scalar", |a| a.name())));
        }
        // A name bound twice in one kernel (after the first binding's scope ended).
        struct Names<'a>(&'a mut Vec<String>);
        impl Visitor for Names<'_> {
            fn visit_stmt(&mut self, s: &Stmt) {
                match s.node() {
                    StmtNode::Let { var, .. }
                    | StmtNode::Decl { var, .. }
                    | StmtNode::For { var, .. }
                    | StmtNode::Alloc { var, .. } => self.0.push(var.name().to_string()),
                    _ => {}
                }
                walk_stmt(self, s);
            }
        }
        let before = binds.len();
        Names(&mut binds).visit_kernel(&case.kernel);
        let these: BTreeSet<&String> = binds[before..].iter().collect();
        if these.len() < binds.len() - before {
            f.0.insert("name re-bound".into());
        }
    }
    let mut want: Vec<String> = [
        "let",
        "var",
        "assign",
        "store global",
        "store generic",
        "store local",
        "store private",
        "alloc local",
        "alloc private",
        "if",
        "if-else",
        "while",
        "barrier",
        "barrier in loop",
        "nested for",
        "fence",
        "atomic global result true",
        "atomic global result false",
        "atomic local result true",
        "atomic elem f32",
        "select",
        "dims 1",
        "dims 2",
        "dims 3",
        "offset",
        "reqd",
        "aliasing",
        "param constant",
        "param generic",
        "param scalar",
        "name re-bound",
        "cast to f16",
        "cast from f16",
        "cast to bool",
        "cast from bool",
        "load ptr<global, f16>",
        "load ptr<constant, f32>",
        "load ptr<local, i64>",
        "load ptr<private, u8>",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for t in ["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"] {
        want.push(format!("for {t}"));
    }
    for op in BinOp::ALL {
        want.push(format!(
            "binary {} {}",
            op.symbol(),
            if op.is_logical() { "bool" } else { "i32" }
        ));
    }
    for op in [BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Div, BinOp::Lt] {
        want.push(format!("binary {} f32", op.symbol()));
        want.push(format!("binary {} f64", op.symbol()));
    }
    for op in [UnOp::Neg, UnOp::Not, UnOp::BitNot] {
        want.push(format!("unary {}", op.symbol()));
    }
    for op in Intrinsic::ALL.iter().filter(|i| !i.is_approximate()) {
        want.push(format!("intrinsic {}", op.name()));
    }
    for b in kiln_ir::Builtin::ALL {
        want.push(format!("builtin {}", b.name()));
    }
    for op in AtomicOp::ALL {
        want.push(format!("atomic {}", op.name()));
    }
    let missing: Vec<&String> = want.iter().filter(|w| !f.0.contains(*w)).collect();
    assert!(missing.is_empty(), "never generated: {missing:?}");
    // Approximate intrinsics stay off by default.
    assert!(!f.0.iter().any(|t| t == "intrinsic exp" || t == "intrinsic sin"));
}

fn xorshift_streams(seed: u64, n: usize) -> impl Iterator<Item = Vec<u32>> {
    let mut state = seed;
    (0..n).map(move |_| {
        (0..3000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 32) as u32
            })
            .collect()
    })
}

#[test]
fn other_configurations_give_valid_cases() {
    let minimal = GenConfig {
        max_dims: 1,
        loops: false,
        barriers: false,
        atomics: false,
        private_arrays: false,
        local_arrays: false,
        f16: false,
        reuse_names: false,
        ..GenConfig::default()
    };
    let large = GenConfig {
        max_work_items: 256,
        max_stmts: 20,
        max_block_stmts: 5,
        max_nesting: 4,
        max_expr_depth: 5,
        approx_intrinsics: true,
        ..GenConfig::default()
    };
    // Statements that use their subexpressions again (loads too): still race-free and
    // in bounds.
    let repeats = GenConfig { repeat_subexprs: true, ..GenConfig::default() };
    for (cfg, seed) in [(minimal, 1u64), (large, 2), (repeats, 3)] {
        for choices in xorshift_streams(seed, 60) {
            let case = case_from_choices(&choices, &cfg);
            check_case(&case).unwrap();
            assert!(case.range.work_items() <= cfg.max_work_items as u64);
            assert!(case.range.dims <= cfg.max_dims);
        }
    }
}

/// Asserts that every expression's cached operators ([`Expr::has_binary`]) are those a walk
/// of its tree finds.
struct BinopsMatch(Result<(), String>);

impl Visitor for BinopsMatch {
    fn visit_expr(&mut self, e: &Expr) {
        fn walk_has(e: &Expr, op: BinOp) -> bool {
            matches!(e.node(), ExprNode::Binary { op: o, .. } if *o == op)
                || e.children().iter().any(|c| walk_has(c, op))
        }
        for op in BinOp::ALL {
            if self.0.is_ok() && e.has_binary(op) != walk_has(e, op) {
                self.0 = Err(format!("`{e}`: has_binary({}) is {}", op.symbol(), e.has_binary(op)));
            }
        }
        walk_expr(self, e);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// The operators kept per node, which passes read to skip subtrees, are exact on random
    /// kernels (the nodes the generator builds, and those rebuilt with an origin).
    #[test]
    fn cached_binary_operators_match_a_walk(case in arb_kernel()) {
        let mut check = BinopsMatch(Ok(()));
        check.visit_stmt(case.kernel.body());
        check.0.map_err(TestCaseError::fail)?;
        let named = kiln_ir::Mutator::mutate_kernel(&mut WithOrigin, &case.kernel);
        let mut check = BinopsMatch(Ok(()));
        check.visit_stmt(named.body());
        check.0.map_err(TestCaseError::fail)?;
    }
}

/// Rebuilds every node with an origin (a second way nodes are made).
struct WithOrigin;

impl kiln_ir::Mutator for WithOrigin {
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        kiln_ir::walk_mutate_expr(self, e).with_origin("`x`".into())
    }
}
