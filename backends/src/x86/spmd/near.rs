//! `/` and `%` pairs: a `/` and a `%` of the same operands (index decomposition: `ch = i % c;
//! p = i / c`), `let`s or assignments of one block, share one computation. (The file once
//! held a division of lanes near lane 0, which `divuniform.rs`'s magic numbers replaced.)
//!
//! The first computes both, the second reads the other from a slot (`divuniform.rs` and
//! `divconst.rs` fill it; `math.rs` pairs `sin` and `cos` of one argument the same way). The
//! first runs before the second wherever the second runs (same block, earlier), and their
//! operands read nothing that changes between them (parameters, ids, constants and `let`s
//! declared once: no `var`).

use std::collections::HashSet;

use iced_x86::code_asm::*;
use kiln_ir::{BinOp, Expr, ExprNode, Intrinsic, Stmt, StmtNode, Type};

use super::{R, V, YMM};

impl V {
    /// With the quotient in `ymm{d}` and the remainder in `ymm{d+3}`: the one asked for
    /// (`rem`) into `ymm{d}`, the other into slot `other`.
    pub(super) fn both_out(&mut self, rem: bool, other: i32, d: usize) -> R<()> {
        let (x, u) = (YMM[d], YMM[d + 3]);
        if rem {
            self.a.vmovups(ymmword_ptr(r15 + other), x)?;
            self.a.vmovaps(x, u)?;
        } else {
            self.a.vmovups(ymmword_ptr(r15 + other), u)?;
        }
        Ok(())
    }

    /// Before the statements of a block: pairs of `let`s in it of `a / b` and `a % b`, or of
    /// `sin(a)` and `cos(a)` (either order, no barrier between them) whose operands read
    /// only parameters, ids, constants and `let`s declared once (so both see the same
    /// values), the first one to compute both ([`V::share_slot`]); returns what
    /// [`V::end_shares`] takes at the end of the block.
    pub(super) fn plan_shares(&mut self, stmts: &[Stmt]) -> (usize, usize) {
        let mark = (self.shares.plan.len(), self.shares.ready.len());
        let mut taken = Vec::new();
        for (i, s) in stmts.iter().enumerate() {
            let Some((first, op, a, b)) = pairable(s) else { continue };
            if taken.contains(&first) || !self.shares.stable(&a, 0) || !self.shares.stable(&b, 0) {
                continue;
            }
            // Not across a barrier: region code runs every batch of a group up to it before
            // any goes on, and the slot is not saved per batch.
            let partner = stmts[i + 1..]
                .iter()
                .take_while(|s| crate::x86::gen::count_barriers(s) == 0)
                .filter_map(pairable)
                .find(|(addr, o, a2, b2)| {
                    *o == op ^ 1 && !taken.contains(addr) && *a2 == a && *b2 == b
                });
            if let Some((second, ..)) = partner {
                taken.push(second);
                let slot = self.slot();
                self.shares.plan.push((first, second, slot));
            }
        }
        mark
    }

    /// After a block: its pairs are forgotten.
    pub(super) fn end_shares(&mut self, (plan, ready): (usize, usize)) {
        self.shares.plan.truncate(plan);
        self.shares.ready.truncate(ready);
    }

    /// For the first of a planned pair, about to compute both: the slot for the other,
    /// which from here on reads it from there ([`V::shared_value`]).
    pub(super) fn share_slot(&mut self, e: &Expr) -> Option<i32> {
        let &(_, second, slot) = self.shares.plan.iter().find(|p| p.0 == e.addr())?;
        self.shares.ready.push(second);
        Some(slot)
    }

    /// The second of a pair whose first has run: its value from the slot into `ymm{d}`.
    /// (Nothing of it can fault: a zero divisor faulted in the first one's lowest active lane, which left no lane
    /// active here: the divisor is the same in every lane.)
    pub(super) fn shared_value(&mut self, e: &Expr, d: usize) -> R<bool> {
        if !self.shares.ready.contains(&e.addr()) {
            return Ok(false);
        }
        let slot = self.shares.plan.iter().find(|p| p.1 == e.addr()).map(|p| p.2);
        let Some(slot) = slot else { return Ok(false) };
        self.a.vmovups(YMM[d], ymmword_ptr(r15 + slot))?;
        Ok(true)
    }
}

/// A `let` (or, for a division, an assignment) whose value [`V::plan_shares`] may pair: its
/// address, a tag (`/` 0 and `%` 1, `sin` 2 and `cos` 3: partners differ in the low bit) and
/// the operands (the argument twice for `sin`/`cos`). Divisions are of i32/u32 lanes or by a
/// constant: `divuniform.rs` and `divconst.rs` fill the slot, and where the general path
/// computes the first (which leaves the slot alone), the second computes itself. An
/// assignment cannot change the operands: they read no `var` ([`Shares::stable`]).
fn pairable(s: &Stmt) -> Option<(usize, u8, Expr, Expr)> {
    let value = match s.node() {
        StmtNode::Let { value, .. } => value,
        StmtNode::Assign { value, .. } if matches!(value.node(), ExprNode::Binary { .. }) => value,
        _ => return None,
    };
    if let Some((op, x)) = super::math::lanes_math(value) {
        let tag = match op {
            Intrinsic::Sin => 2,
            Intrinsic::Cos => 3,
            _ => return None,
        };
        return Some((value.addr(), tag, x.clone(), x.clone()));
    }
    match value.node() {
        ExprNode::Binary { op: op @ (BinOp::Div | BinOp::Rem), a, b }
            if a.ty() == Type::U32
                || a.ty() == Type::I32
                || a.ty().scalar().and_then(|t| super::divconst::const_plan(t, b)).is_some() =>
        {
            Some((value.addr(), (*op == BinOp::Rem) as u8, a.clone(), b.clone()))
        }
        _ => None,
    }
}

/// The `/` and `%` pairs of the blocks being generated (`V::plan_shares`).
#[derive(Default)]
pub(super) struct Shares {
    /// Parameters and `let`s declared once in the kernel.
    pub(super) stable: HashSet<String>,
    /// First's address, second's address, the slot of the second's value.
    plan: Vec<(usize, usize, i32)>,
    /// Seconds whose first has been generated.
    ready: Vec<usize>,
}

impl Shares {
    /// True if `e` reads only stable names, ids and constants (no memory).
    fn stable(&self, e: &Expr, depth: u32) -> bool {
        depth < 16
            && match e.node() {
                ExprNode::Var(v) => self.stable.contains(v.name()),
                ExprNode::Imm(_) | ExprNode::Builtin { .. } => true,
                ExprNode::Binary { a, b, .. } => {
                    self.stable(a, depth + 1) && self.stable(b, depth + 1)
                }
                ExprNode::Unary { a, .. } | ExprNode::Cast { a, .. } => self.stable(a, depth + 1),
                _ => false,
            }
    }
}
