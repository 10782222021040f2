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
use kiln_ir::{walk_expr, walk_stmt, BinOp, Expr, ExprNode, Kernel, Stmt, StmtNode, UnOp, Visitor};

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
