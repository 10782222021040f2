//! Accesses at `local_id(0) - e` under a guard `local_id(0) >= e` (or `>`): a
//! Hillis-Steele scan's `if lid >= off { v = v + t[lid - off]; }`. In region loops of a
//! kernel that fixes its group's size `L` (a multiple of 8, `region.rs`), every lane's
//! `local_id(0)` is below `L`; where the guard holds, `local_id(0) - e` is at least 0 and
//! at most `local_id(0)`, so below `L`, and an access to a local array of at least `L`
//! elements is in bounds in every lane the guard lets through. So:
//!
//! * in the branch's masked code, such an access needs no check (its active lanes are
//!   among those the guard lets through, and the masked access touches no other lane's
//!   element) — no fault site, so no fault test at the batch's end;
//! * in the unmasked copy that a batch runs when lane 0's id passes the guard (`ctl.rs`:
//!   then every lane's does), it is proven as a region's accesses are (`proven.rs`): one
//!   plain vector access at lane 0's index, `local_id(0)`'s register minus `e`, a
//!   constant `e` as the displacement.
//!
//! `e` must keep its value in the branch: a constant, or a group-pure value naming nothing
//! the branch assigns. `local_id(0)` is a `let` (never assigned).

use std::collections::HashSet;

use kiln_ir::{walk_expr, walk_stmt, BinOp, Expr, ExprNode, Stmt, StmtNode, Type, Visitor};

use super::{Loc, V};

/// The accesses proven by the guards whose branches are being generated: the index's
/// address, the memory table, and whether the code is that guard's unmasked copy (every
/// lane of the batch passed it; code nested in it stays so).
pub(super) type Guarded = Vec<(usize, u32, bool)>;

/// The names assigned in a block and the loads and stores in it, by index.
#[derive(Default)]
struct Walk {
    assigned: HashSet<String>,
    accesses: Vec<(kiln_ir::Var, usize, Expr)>,
}

impl Visitor for Walk {
    fn visit_expr(&mut self, e: &Expr) {
        if let ExprNode::Load { buf, index } = e.node() {
            self.accesses.push((buf.clone(), index as *const Expr as usize, index.clone()));
        }
        walk_expr(self, e)
    }

    fn visit_stmt(&mut self, s: &Stmt) {
        match s.node() {
            StmtNode::Assign { var, .. } => {
                self.assigned.insert(var.name().to_string());
            }
            StmtNode::Store { buf, index, .. } => {
                self.accesses.push((buf.clone(), index as *const Expr as usize, index.clone()))
            }
            _ => {}
        }
        walk_stmt(self, s)
    }
}

impl V {
    /// The accesses of branch `then` of condition `cond` that its guard proves (see
    /// [`V::guarded_accesses`]): unchecked in `then`, proven in its unmasked copy (which
    /// only a batch whose lanes all pass the guard runs, however `ctl.rs` picks it).
    pub(super) fn guard(&self, cond: &Expr, then: &[Stmt]) -> Vec<(usize, u32)> {
        match self.lid_bound(cond) {
            Some((e, op)) => self.guarded_accesses(then, e, op),
            None => Vec::new(),
        }
    }

    /// The accesses of `then` at `local_id(0) - e` that guard `local_id(0) >= e` (`op`
    /// `Ge`, or `Gt`) proves in bounds (see the module docs); empty elsewhere.
    pub(super) fn guarded_accesses(&self, then: &[Stmt], e: &Expr, op: BinOp) -> Vec<(usize, u32)> {
        let Some(size) = self.regions.as_ref().and_then(|r| r.group_size) else {
            return Vec::new();
        };
        if !matches!(op, BinOp::Ge | BinOp::Gt) || !self.group_pure(e) {
            return Vec::new();
        }
        let mut w = Walk::default();
        then.iter().for_each(|s| w.visit_stmt(s));
        if super::proven::names_any(e, &w.assigned) {
            return Vec::new();
        }
        let lid = |x: &Expr| match x.node() {
            ExprNode::Var(v) => self.find(v.name()).is_some_and(|b| b.loc == Loc::Reg(super::LID)),
            _ => false,
        };
        let mut out = Vec::new();
        for (buf, addr, index) in &w.accesses {
            let ExprNode::Binary { op: BinOp::Sub, a, b } = index.node() else { continue };
            if index.ty() != Type::U32 || !lid(a) || b != e || self.private(buf).is_some() {
                continue;
            }
            let Some(t) = self.buf(buf) else { continue };
            let m = self.mems.get(self.mem_of(t) as usize);
            let elem = m.map(|m| m.elem);
            if !matches!(
                elem,
                Some(kiln_ir::Scalar::F32 | kiln_ir::Scalar::I32 | kiln_ir::Scalar::U32)
            ) {
                continue;
            }
            if m.and_then(|m| m.local).is_some_and(|(_, count)| u64::from(count) >= size) {
                out.push((*addr, t));
            }
        }
        out
    }

    /// True if a guard proves the access of table `t` at index address `addr` in every
    /// active lane (no check needed).
    pub(super) fn guarded(&self, addr: usize, t: u32) -> bool {
        self.guarded.iter().any(|g| g.0 == addr && g.1 == t)
    }

    /// True if, in addition, the code is the guard's unmasked copy: every lane's index is
    /// in bounds, as a region's proof makes it.
    pub(super) fn guarded_full(&self, addr: usize, t: u32) -> bool {
        self.guarded.contains(&(addr, t, true))
    }
}
