//! Two regions across a barrier run as one (`region.rs`): a region `A` that only stores
//! values to local arrays at `local_id(0)`, the barrier, and a region `B` that reads those
//! arrays only at `local_id(0)` minus a constant — a Hillis-Steele scan's `t[lid] = v;
//! barrier; var v = t[lid]; if lid >= off { v = v + t[lid - off]; }`, once its group loop
//! is unrolled (`known.rs`, which then runs the rounds as one list of statements so that a
//! round's last region meets the next round's first).
//!
//! ## Why this is the interpreter's schedule
//!
//! The merged region runs, batch after batch, `A` then `B`. Where the interpreter runs `B`
//! for a work-item, every work-item has run `A`; here, the work-items of this batch and of
//! the earlier ones have. What `B` can observe of that difference:
//!
//! * its loads of `A`'s arrays, at `local_id(0) - c` for a constant `c` below 2^31: a lane
//!   whose id is at least `c` reads an element of its own batch or an earlier one, which
//!   `A` has written; any other lane's index wraps to at least 2^31, past every local
//!   array, and faults as it would after the barrier (the same index and lane);
//! * its stores to `A`'s arrays, only at `local_id(0)`: elements no later batch's `A`
//!   writes, so `B`'s value stays, as after the barrier; and `A` reads no memory, so no
//!   store of `B` reaches it;
//! * faults: `A` has none (a store at `local_id(0)`, below the fixed group size, to an
//!   array at least that long, of a name or constant), so the first fault is `B`'s first
//!   in batch and lane order, as after the barrier;
//! * everything else `B` does (other buffers, its names) `A` neither reads nor writes.
//!
//! `B` has no calls (atomics, barriers) and no loops, so nothing else is ordered by the
//! barrier, and the budget of back-edges is not touched by either; nor vector loads or
//! stores (`vload4`, `vstore4`) of `A`'s arrays.

use std::collections::HashSet;

use kiln_ir::{walk_expr, walk_stmt, BinOp, Expr, ExprNode, Imm, Stmt, StmtNode, Type, Visitor};

use super::{no, R, V};
use crate::x86::gen::count_barriers;

/// What `B` does with the arrays `A` writes (by memory table), and whether it does
/// anything the merge cannot keep in order.
struct Reads<'v> {
    v: &'v V,
    written: HashSet<u32>,
    ok: bool,
}

impl Reads<'_> {
    fn table(&self, buf: &kiln_ir::Var) -> Option<u32> {
        self.v.buf(buf).filter(|t| self.written.contains(t))
    }
}

impl Visitor for Reads<'_> {
    fn visit_expr(&mut self, e: &Expr) {
        match e.node() {
            ExprNode::Load { buf, index }
                if self.table(buf).is_some() && !self.v.at_or_below_lid(index) =>
            {
                self.ok = false
            }
            ExprNode::VecLoad { buf, .. } if self.table(buf).is_some() => self.ok = false,
            _ => {}
        }
        walk_expr(self, e)
    }

    fn visit_stmt(&mut self, s: &Stmt) {
        match s.node() {
            StmtNode::Call { .. } | StmtNode::While { .. } | StmtNode::For { .. } => {
                self.ok = false
            }
            StmtNode::Store { buf, index, .. }
                if self.table(buf).is_some() && !self.v.lid_exactly(index) =>
            {
                self.ok = false
            }
            StmtNode::VecStore { buf, .. } if self.table(buf).is_some() => self.ok = false,
            _ => {}
        }
        walk_stmt(self, s)
    }
}

impl V {
    /// The end of the run of region statements of `stmts` starting at `i`.
    pub(super) fn run_end(&self, stmts: &[Stmt], i: usize) -> R<usize> {
        let mut j = i;
        while j < stmts.len() && !self.is_group_stmt(&stmts[j]) && count_barriers(&stmts[j]) == 0 {
            if let StmtNode::Alloc { var, .. } = stmts[j].node() {
                if let Type::Ptr(kiln_ir::AddrSpace::Private, _) = var.ty() {
                    return no(format!("private array `{}` in scope across a barrier", var.name()));
                }
            }
            j += 1;
        }
        Ok(j)
    }

    /// For the run of region statements `stmts[i..j]`: where a barrier and another run
    /// follow and the two may run as one region ([`V::mergeable`]), that region, and the
    /// end of the second run; else `None` (no code).
    pub(super) fn merged_region(&mut self, stmts: &[Stmt], i: usize, j: usize) -> R<Option<usize>> {
        let next = |s: &Stmt| !self.is_group_stmt(s) && count_barriers(s) == 0;
        let barrier = stmts.get(j).is_some_and(|s| s.barrier_fence().is_some());
        if !barrier || !stmts.get(j + 1).is_some_and(next) {
            return Ok(None);
        }
        let k = self.run_end(stmts, j + 1)?;
        if !self.mergeable(&stmts[i..j], &stmts[j + 1..k]) {
            return Ok(None);
        }
        let merged: Vec<Stmt> = stmts[i..j].iter().chain(&stmts[j + 1..k]).cloned().collect();
        self.region(&merged)?;
        // (Proofs name accesses by the address of their index.)
        self.regions.as_mut().expect("region mode").keep.push(merged);
        Ok(Some(k))
    }

    /// True if regions `a` and `b`, a barrier between them, may run as one region (see
    /// the module docs).
    pub(super) fn mergeable(&self, a: &[Stmt], b: &[Stmt]) -> bool {
        let Some(size) = self.regions.as_ref().and_then(|r| r.group_size) else { return false };
        if a.is_empty() || b.is_empty() {
            return false;
        }
        let mut written = HashSet::new();
        for s in a {
            let StmtNode::Store { buf, index, value } = s.node() else { return false };
            let Some(t) = self.buf(buf) else { return false };
            let m = self.mems.get(self.mem_of(t) as usize);
            let elem = m.map(|m| m.elem);
            let long = m.and_then(|m| m.local).is_some_and(|(_, count)| u64::from(count) >= size);
            if !long
                || !matches!(
                    elem,
                    Some(kiln_ir::Scalar::F32 | kiln_ir::Scalar::I32 | kiln_ir::Scalar::U32)
                )
                || !self.lid_exactly(index)
                || !matches!(value.node(), ExprNode::Var(_) | ExprNode::Imm(_))
            {
                return false;
            }
            written.insert(t);
        }
        let mut r = Reads { v: self, written, ok: true };
        b.iter().for_each(|s| r.visit_stmt(s));
        r.ok
    }

    /// True if `index` is `local_id(0)` or `local_id(0)` minus a constant below 2^31 and a
    /// multiple of 8. (Correct for any constant below 2^31; but a batch's 32-byte load
    /// across two batches' stores just made cannot take its value from them and waits for
    /// both to reach the cache: merged, the scan's rounds of offsets 1, 2 and 4 took longer
    /// than their two regions apart. A multiple of 8 reads exactly one earlier batch's
    /// store.)
    fn at_or_below_lid(&self, index: &Expr) -> bool {
        if self.lid_exactly(index) {
            return true;
        }
        match index.node() {
            ExprNode::Binary { op: BinOp::Sub, a, b } => {
                self.lid_exactly(a)
                    && matches!(b.as_imm(), Some(Imm::Int(_, c))
                        if (*c as u32) < 1 << 31 && (*c as u32).is_multiple_of(8))
                    && index.ty() == kiln_ir::Type::U32
            }
            _ => false,
        }
    }
}

/// Renames the names a round of an unrolled group loop declares at its top level
/// (`name'r` for round `r`), so that the rounds can stand in one list.
struct Rename<'n>(&'n HashSet<String>, usize);

impl kiln_ir::Mutator for Rename<'_> {
    fn mutate_var(&mut self, v: &kiln_ir::Var) -> kiln_ir::Var {
        if self.0.contains(v.name()) {
            kiln_ir::Var::new(format!("{}'{}", v.name(), self.1), v.ty())
        } else {
            v.clone()
        }
    }
}

impl V {
    /// The rounds of an unrolled group loop (region statements and barriers, each round
    /// ending with a barrier) as one list, where a round's last region and the next
    /// round's first may run as one ([`V::mergeable`]); `None` where no such pair is
    /// (each round is then generated on its own, as before), or where a round declares a
    /// name of `local_id(0)` or `global_id(0)`, which must keep its name. The divergence
    /// analysis's divergent names get their copies.
    pub(super) fn merged_rounds(&mut self, rounds: &[Vec<Stmt>]) -> Option<Vec<Stmt>> {
        let barrier = |s: &Stmt| s.barrier_fence().is_some();
        let any = rounds.windows(2).any(|w| {
            let (Some(last), Some(first)) = (w[0].last(), w[1].first()) else { return false };
            if !barrier(last) || barrier(first) {
                return false;
            }
            let body = &w[0][..w[0].len() - 1];
            let a = &body[body.iter().rposition(barrier).map_or(0, |p| p + 1)..];
            let b = &w[1][..w[1].iter().position(barrier).unwrap_or(w[1].len())];
            self.mergeable(a, b)
        });
        if !any {
            return None;
        }
        let mut flat = Vec::new();
        for (r, round) in rounds.iter().enumerate() {
            let mut names = HashSet::new();
            for s in round {
                if let StmtNode::Let { var, .. } | StmtNode::Decl { var, .. } = s.node() {
                    if self.regions().lids.contains(var.name()) || self.gid0.contains(var.name()) {
                        return None;
                    }
                    names.insert(var.name().to_string());
                }
                if let StmtNode::For { var, .. } = s.node() {
                    names.insert(var.name().to_string());
                }
                if let StmtNode::Call { result: Some(v), .. } = s.node() {
                    names.insert(v.name().to_string());
                }
            }
            // (The divergence analysis knows names: a divergent one's copies are too.)
            for n in &names {
                if self.div_vars.contains(n) {
                    self.div_vars.insert(format!("{n}'{r}"));
                }
            }
            let mut rename = Rename(&names, r);
            flat.extend(round.iter().map(|s| kiln_ir::Mutator::mutate_stmt(&mut rename, s)));
        }
        Some(flat)
    }
}
