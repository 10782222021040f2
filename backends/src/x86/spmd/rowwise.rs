//! Row-uniform work done once per row instead of once per batch of eight.
//!
//! A call of the 8-lane code runs a row of work-items (one value of the ids of dimensions
//! 1 and 2) batch by batch, and computes what is fixed for the row once, before the batch
//! loop (`function.rs`: top-level `let`s, `hoist.rs`: comparisons and ranges, `memo.rs`:
//! `let`s that can fault). Two more kinds of such work:
//!
//! - `let`s nested in `if`s (not in loops) whose values are fixed for the row and can neither
//!   fault nor read memory (floyd's `let cse0 = i * n` under `if i < n && j < n`, which
//!   `-O` makes of the row's `dist[i * n + k]` and `dist[i * n + j]`): computed with the
//!   top-level ones, into a frame slot (the call's registers are the loop's), and in scope
//!   from where the `let` stands, copied there into the `let` register that computing it
//!   would have taken, if one is free. Computing them early is unobservable.
//! - loads at indices fixed for the row (`dist[i * n + k]`, embed's `ids[r]`) among the
//!   accesses of an `if` whose batches in a hoisted range take the branch in every lane
//!   ([`V::hoist_ranges`]): their index is compared once per row with the buffer's length,
//!   and where it is in bounds the range's unmasked copy of the branch loads the element
//!   with no test; where it is not, the range is empty and every batch runs the masked
//!   code, which tests and reports the fault as before. The element is read where it was
//!   (only its bounds are known early, and lengths do not change during a launch), so the
//!   order of effects is the interpreter's whatever the kernel stores.

use std::collections::HashMap;

use iced_x86::code_asm::*;
use kiln_ir::{Expr, ExprNode, Kernel, Scalar, Stmt, StmtNode, Var};

use super::hoist::names_of;
use super::{Bound, Kind, Loc, R, V};

/// `e` with every name of a `let` declared once replaced by its value (through such
/// `let`s of `let`s), so that [`V::invariant`] sees what a nested `let` is made of; `None`
/// past a few levels (no kernel needs more; it keeps the expression small).
pub(super) fn expand(
    e: &Expr,
    lets: &HashMap<String, Expr>,
    once: &dyn Fn(&str) -> bool,
    depth: usize,
) -> Option<Expr> {
    if depth > 8 {
        return None;
    }
    if let Some(d) = super::expr::desugar(e) {
        return expand(&d, lets, once, depth);
    }
    match e.node() {
        ExprNode::Var(v) => match lets.get(v.name()) {
            Some(value) if once(v.name()) => expand(value, lets, once, depth + 1),
            _ => Some(e.clone()),
        },
        ExprNode::Binary { op, a, b } => {
            Some(Expr::binary(*op, expand(a, lets, once, depth)?, expand(b, lets, once, depth)?))
        }
        // (Other operators as they are: a `let` they name is not fixed for the row, and
        // the caller's test turns the expression down.)
        _ => Some(e.clone()),
    }
}

/// The loads at a block's own level (in its `let`s, `var`s, assignments and stores, operands of
/// operands included; not those of nested `if`s and loops): buffer and index.
fn top_loads(stmts: &[Stmt]) -> Vec<(&Var, &Expr)> {
    fn expr<'k>(e: &'k Expr, out: &mut Vec<(&'k Var, &'k Expr)>) {
        if let ExprNode::Load { buf, index } = e.node() {
            out.push((buf, index));
        }
        for c in e.children() {
            expr(c, out);
        }
    }
    let mut out = Vec::new();
    for s in stmts {
        match s.node() {
            StmtNode::Let { value, .. }
            | StmtNode::Assign { value, .. }
            | StmtNode::Decl { init: value, .. } => expr(value, &mut out),
            StmtNode::Store { index, value, .. } => {
                expr(index, &mut out);
                expr(value, &mut out);
            }
            _ => {}
        }
    }
    out
}

impl V {
    /// In the code run once per call (and per row), after the top-level `let`s: the nested
    /// `let`s fixed for the row that cannot fault (see the module docs), each into a frame
    /// slot (and a scalar copy where its value is integer arithmetic), recorded as hoisted.
    /// Only names declared once are taken, in values naming only names declared once.
    pub(super) fn hoist_nested(&mut self, k: &Kernel) -> R<()> {
        let decls = super::hoist::decl_counts(k);
        let mut found = Vec::new();
        fn walk<'k>(stmts: &'k [Stmt], top: bool, out: &mut Vec<&'k Stmt>) {
            for s in stmts {
                match s.node() {
                    StmtNode::Let { .. } if !top => out.push(s),
                    StmtNode::If { then, otherwise, .. } => {
                        walk(then.stmts(), false, out);
                        if let Some(o) = otherwise {
                            walk(o.stmts(), false, out);
                        }
                    }
                    // (Not in loops: a loop's code computes a `let` fixed for it once
                    // per entry already, into a register, where the body reads it.)
                    StmtNode::Block(v) => walk(v, false, out),
                    _ => {}
                }
            }
        }
        walk(k.body().stmts(), true, &mut found);
        for s in found {
            let StmtNode::Let { var, value } = s.node() else { continue };
            let mut names = vec![var.name().to_string()];
            names_of(value, &mut names);
            if !names.iter().all(|n| decls.get(n) == Some(&1))
                || !super::lane_type(var.ty())
                || var.ty().is_vector()
                || !self.invariant(value)
                || self.hoisted.iter().any(|h| h.0 == s.addr())
            {
                continue;
            }
            let mut dword = None;
            if super::scalar::int_type(var.ty()) && self.gpr_ok(value) {
                self.gpr(value)?;
                let off = self.slot();
                self.put_dword(off)?;
                dword = Some(off);
                self.a.vmovd(xmm0, eax)?;
                self.a.vpbroadcastd(ymm0, xmm0)?;
            } else {
                self.expr_top(value, 0)?;
            }
            let slot = self.slot();
            self.a.vmovups(ymmword_ptr(r15 + slot), ymm0)?;
            let loc = Loc::Slot(slot);
            let name = var.name().to_string();
            self.lets.push(Bound { dword, ..Bound::new(name, loc, Kind::Uniform) });
            self.hoisted.push((s.addr(), loc, dword));
            self.row_lets.push(s.addr());
        }
        Ok(())
    }

    /// Where a `let` hoisted at `loc` lives from its statement on: a nested one
    /// ([`V::hoist_nested`]) is copied from its slot into the next free `let` register,
    /// where one is free (the register computing it in the batch would have taken), so
    /// that the code reading it reads a register, not the frame; else it stays in `loc`.
    pub(super) fn row_let_home(&mut self, addr: usize, loc: Loc) -> R<Loc> {
        let Loc::Slot(slot) = loc else { return Ok(loc) };
        if !self.row_lets.contains(&addr) || !self.let_reg_free(self.next_reg) {
            return Ok(loc);
        }
        self.next_reg += 1;
        let r = self.next_reg - 1;
        self.a.vmovups(super::YMM[r], ymmword_ptr(r15 + slot))?;
        Ok(Loc::Reg(r))
    }

    /// For [`V::hoist_ranges`], in the code run once per row: the loads of `then` (the
    /// branch of a range) at indices fixed for the row, each compared with its buffer's
    /// length, an index out of bounds emptying the range (its lowest lane-0 id, at
    /// `lo`, set to the largest); returns the accesses proven (index address, table).
    pub(super) fn prove_row_loads(
        &mut self,
        then: &[Stmt],
        lo: i32,
        lets: &HashMap<String, Expr>,
        once: &dyn Fn(&str) -> bool,
    ) -> R<Vec<(usize, u32)>> {
        let mut proven = Vec::new();
        for (buf, index) in top_loads(then) {
            let Some(t) = self.buf(buf).filter(|_| self.private(buf).is_none()) else {
                continue;
            };
            let m = self.mems.get(self.mem_of(t) as usize);
            if !m.is_some_and(|m| {
                m.local.is_none() && matches!(m.elem, Scalar::F32 | Scalar::I32 | Scalar::U32)
            }) {
                continue;
            }
            let Some(e) = expand(index, lets, once, 0) else { continue };
            let mut names = Vec::new();
            names_of(&e, &mut names);
            if !names.iter().all(|n| once(n))
                || !super::scalar::int_type(e.ty())
                || !self.invariant(&e)
                || !self.gpr_ok(&e)
            {
                continue;
            }
            // The index, zero-extended (an `i32` one below 0 is a `u32` one past any
            // length), below the length: else no batch of the row is in the range.
            // (A jump, not a `cmov`: the same way in nearly every row.)
            self.gpr(&e)?;
            let mut inside = self.a.create_label();
            self.a.cmp(rax, qword_ptr(r14 + (t as i32 * 16 + 8)))?;
            self.a.jb(inside)?;
            self.a.mov(rax, i64::MAX)?;
            self.a.mov(qword_ptr(r15 + lo), rax)?;
            self.bind(&mut inside)?;
            proven.push((index as *const Expr as usize, t));
        }
        Ok(proven)
    }
}
