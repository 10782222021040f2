//! Comparisons fixed for the call, hoisted out of the batch loop: in the conditions of
//! `if`s and `while`s, a comparison whose operands are values fixed for the whole call
//! ([`V::invariant`]: constants, parameters, ids and sizes other than `global_id(0)`,
//! `local_id(0)` and `group_id(0)`, and hoisted `let`s of those) is the same lane mask in
//! every batch of the call, so it is computed once, before the loop, into a frame slot,
//! and each batch loads it (a 2-D stencil's `y > 0 && y < h - 1`, whose row is fixed for
//! a call). Such a comparison has no loads and no division that can fault, so computing
//! it early is unobservable. Only comparisons whose names are declared once in the kernel
//! (and parameters no `let` shadows) are taken, so a name means at the loop what it means
//! where it is computed.

use std::collections::HashMap;

use iced_x86::code_asm::*;
use kiln_ir::{
    walk_expr, walk_stmt, BinOp, Builtin, Expr, ExprNode, Kernel, Stmt, StmtNode, Type, UnOp, Visitor,
};

use super::{lane_type, R, V};
use crate::x86::sums::bound_name;

/// Names declared in a kernel (parameters included) and how often.
#[derive(Default)]
struct Decls(HashMap<String, usize>);

impl Visitor for Decls {
    fn visit_stmt(&mut self, s: &Stmt) {
        if let Some(n) = bound_name(s) {
            *self.0.entry(n.to_string()).or_default() += 1;
        }
        walk_stmt(self, s)
    }
}

/// The comparisons at the leaves of the kernel's `if` and `while` conditions (through
/// `&&`, `||` and `!`).
#[derive(Default)]
struct Conds<'k>(Vec<&'k Expr>);

impl<'k> Conds<'k> {
    fn leaves(&mut self, e: &'k Expr) {
        match e.node() {
            ExprNode::Binary { op: BinOp::LogicAnd | BinOp::LogicOr, a, b } => {
                self.leaves(a);
                self.leaves(b);
            }
            ExprNode::Unary { op: UnOp::Not, a } => self.leaves(a),
            ExprNode::Binary { op, .. } if op.is_comparison() => self.0.push(e),
            _ => {}
        }
    }

    fn block(&mut self, stmts: &'k [Stmt]) {
        for s in stmts {
            match s.node() {
                StmtNode::If { cond, then, otherwise } => {
                    self.leaves(cond);
                    self.block(then.stmts());
                    if let Some(o) = otherwise {
                        self.block(o.stmts());
                    }
                }
                StmtNode::While { cond, body } => {
                    self.leaves(cond);
                    self.block(body.stmts());
                }
                StmtNode::For { body, .. } => self.block(body.stmts()),
                StmtNode::Block(v) => self.block(v),
                _ => {}
            }
        }
    }
}

/// The names an expression reads.
struct Names<'a>(&'a mut Vec<String>);

impl Visitor for Names<'_> {
    fn visit_expr(&mut self, e: &Expr) {
        if let ExprNode::Var(v) = e.node() {
            self.0.push(v.name().to_string());
        }
        walk_expr(self, e)
    }
}

impl V {
    /// In the code run once per call, after the hoisted `let`s (in scope): the masks of the
    /// comparisons fixed for the call (see the module docs).
    pub(super) fn hoist_conds(&mut self, k: &Kernel) -> R<()> {
        let mut decls = Decls::default();
        for p in k.params() {
            *decls.0.entry(p.name().to_string()).or_default() += 1;
        }
        k.body().stmts().iter().for_each(|s| decls.visit_stmt(s));
        let mut conds = Conds::default();
        conds.block(k.body().stmts());
        for e in conds.0 {
            let ExprNode::Binary { a, b, .. } = e.node() else { continue };
            let mut names = Vec::new();
            Names(&mut names).visit_expr(e);
            let once = names.iter().all(|n| decls.0.get(n) == Some(&1));
            if !once
                || a.ty() != b.ty()
                || !lane_type(a.ty())
                || !self.invariant(a)
                || !self.invariant(b)
            {
                continue;
            }
            self.cond_top(e, 0)?;
            let slot = self.slot();
            self.a.vmovups(ymmword_ptr(r15 + slot), ymm0)?;
            self.hoisted_conds.push((e as *const Expr as usize, slot));
        }
        Ok(())
    }
}

/// The conditions of the kernel's `if`s, nested ones included.
fn if_conds<'k>(stmts: &'k [Stmt], out: &mut Vec<&'k Expr>) {
    for s in stmts {
        match s.node() {
            StmtNode::If { cond, then, otherwise } => {
                out.push(cond);
                if_conds(then.stmts(), out);
                if let Some(o) = otherwise {
                    if_conds(o.stmts(), out);
                }
            }
            StmtNode::While { body, .. } | StmtNode::For { body, .. } => {
                if_conds(body.stmts(), out)
            }
            StmtNode::Block(v) => if_conds(v, out),
            _ => {}
        }
    }
}

/// The operands of a conjunction `a && b && ...` (a single operand for anything else).
fn conjuncts<'k>(e: &'k Expr, out: &mut Vec<&'k Expr>) {
    match e.node() {
        ExprNode::Binary { op: BinOp::LogicAnd, a, b } => {
            conjuncts(a, out);
            conjuncts(b, out);
        }
        _ => out.push(e),
    }
}

/// Names bound to `global_id(0)` by a `let` (`let x: u32 = global_id(0)`).
#[derive(Default)]
struct GidLets(Vec<String>);

impl Visitor for GidLets {
    fn visit_stmt(&mut self, s: &Stmt) {
        if let StmtNode::Let { var, value } = s.node() {
            if matches!(value.node(), ExprNode::Builtin { kind: Builtin::GlobalId, dim: 0 }) {
                self.0.push(var.name().to_string());
            }
        }
        walk_stmt(self, s)
    }
}

/// One operand of a condition's conjunction, for [`V::hoist_ranges`].
enum Part<'k> {
    /// `global_id(0) op e` (`<`, `<=`, `>`, `>=`, unsigned), `e` fixed for the call.
    Gid(BinOp, &'k Expr),
    /// A comparison fixed for the call, its lane mask in this slot ([`V::hoist_conds`]).
    Fixed(i32),
}

/// `b op' a` for `a op b`.
fn flipped(op: BinOp) -> Option<BinOp> {
    Some(match op {
        BinOp::Lt => BinOp::Gt,
        BinOp::Le => BinOp::Ge,
        BinOp::Gt => BinOp::Lt,
        BinOp::Ge => BinOp::Le,
        _ => return None,
    })
}

impl V {
    /// In the code run once per call, after [`V::hoist_conds`]: for each `if` whose
    /// condition is a conjunction of comparisons of `global_id(0)` (or a `let` of it) with
    /// unsigned values fixed for the call (`x > 0 && x < w - 1`) and of hoisted comparisons
    /// (`y > 0 && y < h - 1`), the range of lane-0 ids whose batch has the condition true in
    /// all eight lanes: a lane's id is lane 0's plus its lane number, so `gid < e` holds in
    /// every lane when `gid0 + 8 <= e`, `gid > e` when `gid0 > e`, and a fixed comparison
    /// holds in all lanes or in none. Computed in 64 bits (nothing wraps), the range is a
    /// frame slot's two qwords (lowest, highest; empty when a fixed comparison is false), and
    /// each batch tests its lane-0 id against them with two compares (one without lower
    /// bounds) to take the branch's unmasked copy (`if_stmt`) without computing the lane
    /// mask. The comparisons cannot fault, so not evaluating them is unobservable. Names are
    /// taken only where declared once, as in [`V::hoist_conds`].
    pub(super) fn hoist_ranges(&mut self, k: &Kernel) -> R<()> {
        let mut decls = Decls::default();
        for p in k.params() {
            *decls.0.entry(p.name().to_string()).or_default() += 1;
        }
        k.body().stmts().iter().for_each(|s| decls.visit_stmt(s));
        let mut gids = GidLets::default();
        k.body().stmts().iter().for_each(|s| gids.visit_stmt(s));
        let once = |n: &str| decls.0.get(n) == Some(&1);
        let is_gid = |e: &Expr| match e.node() {
            ExprNode::Builtin { kind: Builtin::GlobalId, dim: 0 } => true,
            ExprNode::Var(v) => gids.0.iter().any(|g| g == v.name()) && once(v.name()),
            _ => false,
        };
        let mut conds = Vec::new();
        if_conds(k.body().stmts(), &mut conds);
        'cond: for c in conds {
            let mut leaves = Vec::new();
            conjuncts(c, &mut leaves);
            let mut parts = Vec::new();
            for l in leaves {
                let addr = l as *const Expr as usize;
                if let Some(&(_, slot)) = self.hoisted_conds.iter().find(|h| h.0 == addr) {
                    parts.push(Part::Fixed(slot));
                    continue;
                }
                let ExprNode::Binary { op, a, b } = l.node() else { continue 'cond };
                let (op, e) = if is_gid(a) {
                    (*op, b)
                } else if is_gid(b) {
                    match flipped(*op) {
                        Some(op) => (op, a),
                        None => continue 'cond,
                    }
                } else {
                    continue 'cond;
                };
                let mut names = Vec::new();
                Names(&mut names).visit_expr(e);
                if !matches!(op, BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge)
                    || e.ty() != Type::U32
                    || !names.iter().all(|n| once(n))
                    || !self.invariant(e)
                    || !self.gpr_ok(e)
                {
                    continue 'cond;
                }
                parts.push(Part::Gid(op, e));
            }
            if !parts.iter().any(|p| matches!(p, Part::Gid(..))) {
                continue;
            }
            let slot = self.slot();
            let (lo, hi) = (qword_ptr(r15 + slot), qword_ptr(r15 + slot + 8));
            self.a.mov(lo, 0)?;
            self.a.mov(rax, i64::MAX)?;
            self.a.mov(hi, rax)?;
            let mut lower = false;
            for p in parts {
                match p {
                    Part::Gid(op, e) => {
                        // `e`, zero-extended into rax.
                        self.uniform_to_eax(e)?;
                        let adjust = match op {
                            BinOp::Lt => -8,
                            BinOp::Le => -7,
                            BinOp::Gt => 1,
                            _ => 0,
                        };
                        if adjust != 0 {
                            self.a.add(rax, adjust)?;
                        }
                        if matches!(op, BinOp::Lt | BinOp::Le) {
                            // highest = min(highest, rax)
                            self.a.cmp(rax, hi)?;
                            self.a.cmovg(rax, hi)?;
                            self.a.mov(hi, rax)?;
                        } else {
                            // lowest = max(lowest, rax)
                            self.a.cmp(rax, lo)?;
                            self.a.cmovl(rax, lo)?;
                            self.a.mov(lo, rax)?;
                            lower = true;
                        }
                    }
                    Part::Fixed(m) => {
                        // False in every lane: no batch is in the range.
                        self.a.vmovups(ymm0, ymmword_ptr(r15 + m))?;
                        self.a.vmovmskps(eax, ymm0)?;
                        self.a.cmp(eax, 0xff)?;
                        self.a.mov(r11, lo)?;
                        self.a.mov(rax, i64::MAX)?;
                        self.a.cmove(rax, r11)?;
                        self.a.mov(lo, rax)?;
                        lower = true;
                    }
                }
            }
            self.hoisted_ranges.push((c as *const Expr as usize, slot, lower));
        }
        Ok(())
    }
}
