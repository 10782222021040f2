//! `var`s that are `global_id(0)` plus a batch-uniform offset, kept as the offset, for the
//! lanes.
//!
//! A loop over time-major series walks `x[t * m + i]`, which `-O`'s strength reduction
//! (`kiln_passes::strength::iv`) turns into `var t_iv0 = m + i; for t in ... { ... x[t_iv0]
//! ...; t_iv0 = t_iv0 + m; }` (`ewma` of the seventh cpu suite set). On the lanes such a
//! `var` is divergent (its lanes differ), so an access at it is a gather and per-lane
//! stores, though its lanes are consecutive in every trip. Here, before the lanes' code is
//! generated, such a variable `v` holds `v - global_id(0)` instead (its declaration and
//! every assignment lose their `global_id(0)` term) and each read of it is `v +
//! global_id(0)`: where the offset is batch-uniform (`uniform.rs`), an access there is
//! `Kind::Contig`, one (masked) vector access with the span's one compare.
//!
//! ## The form
//!
//! A `u32` `var` bound once in the kernel whose initial value and every assigned value
//! *split*: `e` splits into `r` (so that `e == r + global_id(0)` in `u32`'s ring) if it is
//! `global_id(0)` or a `let` of it (`r` 0), a read of such a variable (`r` its offset), `a +
//! b` or `b + a` with `a` splitting into `s` (`r` is `s + b`), `a - b` with `a` splitting
//! (`s - b`), or `mad(p, q, a)` with `a` splitting (`mad(p, q, s)`). The variables are
//! found together (one's value may read another), and only those whose offsets are then
//! batch-uniform are kept: a divergent offset would cost an add per read for nothing.
//!
//! ## Why the result is the interpreter's
//!
//! `u32` addition, subtraction and `mad` wrap, so `a + b == (s + b) + global_id(0)` when
//! `a == s + global_id(0)`, and likewise for the others; by induction over the statements
//! each such variable holds its old value minus `global_id(0)` at every point, so every read
//! `v + global_id(0)` is its old value. The rewritten expressions evaluate the same loads
//! and divisions in the same order (only reads of names and `global_id(0)`, which cannot
//! fault, are dropped or replaced), and a division whose operands change keeps its source's
//! text as its fault site (`kiln_passes::origin`), so faults are the same too. Where a
//! batch's lanes wrap around 2^32, the access paths stay exact: the span test takes the
//! vector access only for a lane-0 index at most the length minus 8 (below 2^31), and the
//! checked, masked access places lane `k` at lane 0's index sign-extended plus `k`, which
//! for every lane in bounds is its index (`mem.rs`).

use std::collections::HashSet;

use kiln_ir::{
    walk_mutate_expr, walk_mutate_stmt, walk_stmt, BinOp, Builtin, Expr, ExprNode, Intrinsic,
    Kernel, Mutator, Scalar, Stmt, StmtNode, Type, Visitor,
};

/// The kernel with the `var`s of the form above kept as their offsets from `global_id(0)`
/// (see the module docs); the same kernel where none qualifies.
pub(crate) fn offset_vars(k: &Kernel) -> Kernel {
    let gids = super::expr::gid0_names(k.body().stmts());
    let bound = kiln_passes::util::bound_names(k.body());
    let mut cands: HashSet<String> = declared_u32(k.body())
        .into_iter()
        .filter(|n| bound.get(n) == Some(&1) && !gids.contains(n))
        .collect();
    // Each round only drops names, so this ends; the bound is a safety net.
    for _ in 0..16 {
        cands = closed(&gids, k.body(), cands);
        if cands.is_empty() {
            return k.clone();
        }
        let split = Split { gids: &gids, vars: &cands };
        let new = k.with_body(Rewrite { split: &split }.mutate_stmt(k.body()));
        let div = super::uniform::divergent_vars(&new);
        if cands.iter().all(|n| !div.contains(n)) {
            // (`v + global_id(0)` is one level deeper than `v`.)
            return kiln_ir::depth::bound_kernel(&new);
        }
        cands.retain(|n| !div.contains(n));
    }
    k.clone()
}

/// The names of the `u32` `var`s declared in `s`.
fn declared_u32(s: &Stmt) -> Vec<String> {
    struct D(Vec<String>);
    impl Visitor for D {
        fn visit_expr(&mut self, _: &Expr) {}
        fn visit_stmt(&mut self, s: &Stmt) {
            if let StmtNode::Decl { var, .. } = s.node() {
                if var.ty() == Type::U32 {
                    self.0.push(var.name().to_string());
                }
            }
            walk_stmt(self, s)
        }
    }
    let mut d = D(Vec::new());
    d.visit_stmt(s);
    d.0
}

/// Splits values into offsets from `global_id(0)` (see the module docs).
struct Split<'a> {
    /// Names bound only by `let`s of `global_id(0)`.
    gids: &'a HashSet<String>,
    /// The variables kept as offsets.
    vars: &'a HashSet<String>,
}

impl Split<'_> {
    /// `r` with `e == r + global_id(0)` (reads of the variables in `r` and in the operands
    /// it keeps meaning their offsets' values, see [`Rewrite`]), if `e` has the form.
    fn split(&self, e: &Expr) -> Option<Expr> {
        if e.ty() != Type::U32 {
            return None;
        }
        let zero = || Expr::int(Scalar::U32, 0);
        match e.node() {
            ExprNode::Builtin { kind: Builtin::GlobalId, dim: 0 } => Some(zero()),
            ExprNode::Var(v) if self.gids.contains(v.name()) => Some(zero()),
            ExprNode::Var(v) if self.vars.contains(v.name()) => Some(e.clone()),
            ExprNode::Binary { op: BinOp::Add, a, b } => match self.split(a) {
                Some(s) => Some(self.join(e, s, b, true)),
                None => Some(self.join(e, self.split(b)?, a, false)),
            },
            ExprNode::Binary { op: BinOp::Sub, a, b } => {
                let s = self.split(a)?;
                Some(e.rebuild(ExprNode::Binary { op: BinOp::Sub, a: s, b: self.reads(b) }))
            }
            ExprNode::Intrinsic { op: Intrinsic::Mad, args } if args.len() == 3 => {
                let s = self.split(&args[2])?;
                let (p, q) = (self.reads(&args[0]), self.reads(&args[1]));
                Some(Expr::intrinsic(Intrinsic::Mad, [p, q, s]))
            }
            _ => None,
        }
    }

    /// `s + other` (`left`: `s` stands for the left operand of `e`, an addition), in `e`'s
    /// order; `other` alone where `s` is 0.
    fn join(&self, e: &Expr, s: Expr, other: &Expr, left: bool) -> Expr {
        let other = self.reads(other);
        if s.as_imm().is_some_and(|i| i.is_zero()) {
            return other;
        }
        let (a, b) = if left { (s, other) } else { (other, s) };
        e.rebuild(ExprNode::Binary { op: BinOp::Add, a, b })
    }

    /// `e` with each read of a variable kept as its offset read as `v + global_id(0)`.
    fn reads(&self, e: &Expr) -> Expr {
        Rewrite { split: self }.mutate_expr(e)
    }
}

/// The variables of `vars` whose initial and assigned values all split given the ones kept
/// (dropping one can stop another's values from splitting: to a fixed point).
fn closed(gids: &HashSet<String>, body: &Stmt, mut vars: HashSet<String>) -> HashSet<String> {
    loop {
        let split = Split { gids, vars: &vars };
        let mut bad = Bad { split: &split, out: HashSet::new() };
        bad.visit_stmt(body);
        if bad.out.is_empty() {
            return vars;
        }
        vars.retain(|n| !bad.out.contains(n));
    }
}

/// The variables one of whose values does not split.
struct Bad<'a> {
    split: &'a Split<'a>,
    out: HashSet<String>,
}

impl Visitor for Bad<'_> {
    fn visit_expr(&mut self, _: &Expr) {}
    fn visit_stmt(&mut self, s: &Stmt) {
        match s.node() {
            StmtNode::Decl { var, init: e } | StmtNode::Assign { var, value: e }
                if self.split.vars.contains(var.name()) && self.split.split(e).is_none() =>
            {
                self.out.insert(var.name().to_string());
            }
            _ => {}
        }
        walk_stmt(self, s)
    }
}

/// Declarations and assignments of the variables as their offsets, reads of them as
/// `v + global_id(0)`.
struct Rewrite<'a> {
    split: &'a Split<'a>,
}

impl Mutator for Rewrite<'_> {
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        if let ExprNode::Var(v) = e.node() {
            if self.split.vars.contains(v.name()) {
                let gid = Expr::builtin(Builtin::GlobalId, 0);
                return Expr::binary(BinOp::Add, e.clone(), gid);
            }
            return e.clone();
        }
        // (A division keeps its `origin`, or is given its source text as one.)
        let r = walk_mutate_expr(self, e);
        if !r.ptr_eq(e) && r.origin().is_none() && r.is_fault_division() {
            return r.with_origin(e.fault_site().into());
        }
        r
    }

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        match s.node() {
            StmtNode::Decl { var, init } if self.split.vars.contains(var.name()) => {
                Stmt::decl(var, self.offset(init))
            }
            StmtNode::Assign { var, value } if self.split.vars.contains(var.name()) => {
                Stmt::assign(var, self.offset(value))
            }
            _ => walk_mutate_stmt(self, s),
        }
    }
}

impl Rewrite<'_> {
    /// The offset of a value that splits (checked by [`Split::closed`]).
    fn offset(&self, e: &Expr) -> Expr {
        self.split.split(e).expect("a value of a variable kept as an offset splits")
    }
}
