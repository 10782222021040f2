//! u32 `/` and `%` of lanes close to lane 0 by a divisor fixed for the call (index
//! decomposition: `i % c`, `i / c` with `i` the batch's `global_id(0)`, then the quotient
//! split again by the next size). Such lanes are lane 0's value plus a small offset, so
//! one scalar division of lane 0 and a small division of the offsets give every lane:
//! cheaper than [`V::recip_div`]'s two f64 halves, and without its shuffles. The lanes are
//! checked per batch, so the result never depends on an analysis of where they come from:
//! where the check fails (lanes far apart, a large divisor), `recip_div` runs instead.
//!
//! Why it is exact. The path runs where the divisor `d` is in `[1, 2^20]`, lane 0's dividend
//! `a0` is below `2^32 - 2^16` and every lane's `o = a - a0` (wrapping) is below 2^16; then
//! `a = a0 + o` without wrapping. With `q' = trunc(a0 * RN(1/d))` (f64: `q` or `q - 1`, see
//! `recip.rs`) and `r' = a0 - q' * d` in `[0, 2d)`, `a = q' * d + s` with
//! `s = r' + o < 2^21 + 2^16`, so `a / d = q' + s / d` and `a % d = s - (s / d) * d`. For
//! the small `s / d`: `x = s + 0.5` is exact in f32 and `p = RN(x * f)` with `f` the f32
//! reciprocal (`RN32(RN64(1/d))`, relative error below `2^-24 (1 + 2^-29)`) is within
//! `(x / d)(2^-23 + 2^-47)` of `x / d`, less than `0.5 / d` for `x < 2^22`; `x / d` is at
//! least `0.5 / d` from every integer (`s + 0.5 = n d + r + 0.5`, `0 <= r < d`), so
//! `trunc(p)` is `n = s / d`.
//!
//! A `/` and a `%` of the same operands, `let`s of one block (`ch = i % c; p = i / c`),
//! share one computation: the first computes both, the second reads the other from a
//! slot (here, in `recip.rs` and in `divconst.rs`; `math.rs` pairs `sin` and `cos` of one
//! argument the same way). The first runs before the second wherever the second runs (same block, earlier),
//! and their operands read nothing that changes between them.

use std::collections::{HashMap, HashSet};

use iced_x86::code_asm::*;
use kiln_ir::{BinOp, Builtin, Expr, ExprNode, Intrinsic, Stmt, StmtNode, Type};

use super::{R, V, XMM, YMM};

/// `o` must have none of these bits (offsets below 2^16).
const FAR: u32 = 0xffff_0000;

/// The largest divisor of the path.
const MAX_DIVISOR: u32 = 1 << 20;

impl V {
    /// The quotient (or with `rem` the remainder) of the u32 lanes of `ymm{d}` by those of
    /// `ymm{d+1}` (equal lanes, not 0 where a lane is active: the caller checked) into
    /// `ymm{d}`, and with `both` the other one into that slot; `slot` and `slot32` hold the
    /// divisor's f64 and f32 reciprocals (`recip.rs`), `ks` the constants
    /// [`V::recip_div`] takes, which runs where the lanes are not close (see the module
    /// docs). `ymm{d+2}` to `ymm{d+4}`, `rax`, `r10`, `r11` are clobbered.
    pub(super) fn near_div(
        &mut self,
        rem: bool,
        (slot, slot32): (i32, i32),
        d: usize,
        ks: (i32, i32),
        both: Option<i32>,
    ) -> R<()> {
        let (x, y, t, u, v) = (YMM[d], YMM[d + 1], YMM[d + 2], YMM[d + 3], YMM[d + 4]);
        let (tx, vx) = (XMM[d + 2], XMM[d + 4]);
        let far = self.imm_slot(FAR);
        let half = self.imm_slot(0.5f32.to_bits());
        let mut slow = self.a.create_label();
        let mut done = self.a.create_label();
        self.a.vmovd(eax, XMM[d])?;
        self.a.cmp(eax, FAR as i32)?;
        self.a.jae(slow)?;
        self.a.vmovd(r10d, XMM[d + 1])?;
        self.a.lea(r11d, dword_ptr(r10 - 1))?;
        self.a.cmp(r11d, (MAX_DIVISOR - 1) as i32)?;
        self.a.ja(slow)?;
        self.a.vmovd(tx, eax)?;
        self.a.vpbroadcastd(t, tx)?;
        self.a.vpsubd(u, x, t)?;
        self.a.vptest(u, ymmword_ptr(r15 + far))?;
        self.a.jne(slow)?;
        // q' and r' of lane 0 (`rax` holds a0 zero-extended).
        self.a.vcvtsi2sd(tx, tx, rax)?;
        self.a.vmulsd(tx, tx, qword_ptr(r15 + slot))?;
        self.a.vcvttsd2si(r11, tx)?;
        if !rem || both.is_some() {
            self.a.vmovd(vx, r11d)?;
        }
        self.a.imul_2(r11d, r10d)?;
        self.a.sub(eax, r11d)?;
        self.a.vmovd(tx, eax)?;
        self.a.vpbroadcastd(t, tx)?;
        // s, then n = s / d.
        self.a.vpaddd(u, u, t)?;
        self.a.vcvtdq2ps(t, u)?;
        self.a.vaddps(t, t, ymmword_ptr(r15 + half))?;
        self.a.vmulps(t, t, ymmword_ptr(r15 + slot32))?;
        self.a.vcvttps2dq(t, t)?;
        if let Some(other) = both {
            self.a.vpbroadcastd(x, vx)?;
            self.a.vpaddd(x, x, t)?;
            self.a.vpmulld(v, t, y)?;
            self.a.vpsubd(u, u, v)?;
            self.both_out(rem, other, d)?;
        } else if rem {
            self.a.vpmulld(v, t, y)?;
            self.a.vpsubd(x, u, v)?;
        } else {
            self.a.vpbroadcastd(v, vx)?;
            self.a.vpaddd(x, v, t)?;
        }
        self.a.jmp(done)?;
        self.bind(&mut slow)?;
        self.recip_div(rem, slot, d, ks, both)?;
        self.bind(&mut done)
    }

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

/// A `let` whose value [`V::plan_shares`] may pair: its address, a tag (`/` 0 and `%` 1,
/// `sin` 2 and `cos` 3: partners differ in the low bit) and the operands (the argument twice
/// for `sin`/`cos`). Divisions are of u32 lanes (`recip.rs`, `near.rs`, `divconst.rs` share
/// them) or by a constant (`divconst.rs`): the paths that fill the slot.
fn pairable(s: &Stmt) -> Option<(usize, u8, Expr, Expr)> {
    let StmtNode::Let { value, .. } = s.node() else { return None };
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
                || a.ty().scalar().and_then(|t| super::divconst::const_plan(t, b)).is_some() =>
        {
            Some((value.addr(), (*op == BinOp::Rem) as u8, a.clone(), b.clone()))
        }
        _ => None,
    }
}

/// Whether `e` is computed from `global_id(0)` or `local_id(0)` (`Some(true)`), through
/// `let`s declared once (`lets`), by arithmetic with uniform names and constants, without
/// loads or divergent `var`s (`None`). Only such dividends take [`V::near_div`]: lanes of
/// data are rarely near each other, and would pay its check for nothing.
pub(super) fn from_ids(
    e: &Expr,
    lets: &HashMap<String, Expr>,
    div_vars: &HashSet<String>,
    depth: u32,
) -> Option<bool> {
    if depth > 32 {
        return None;
    }
    let sub = |x: &Expr| from_ids(x, lets, div_vars, depth + 1);
    match e.node() {
        ExprNode::Builtin { kind: Builtin::GlobalId | Builtin::LocalId, dim: 0 } => Some(true),
        ExprNode::Builtin { .. } | ExprNode::Imm(_) => Some(false),
        ExprNode::Var(v) => match lets.get(v.name()) {
            Some(x) => sub(x),
            None if div_vars.contains(v.name()) => None,
            None => Some(false),
        },
        ExprNode::Binary { a, b, .. } => Some(sub(a)? | sub(b)?),
        ExprNode::Unary { a, .. } | ExprNode::Cast { a, .. } => sub(a),
        _ => None,
    }
}

/// The `/` and `%` pairs of the blocks being generated (`V::plan_shares`).
#[derive(Default)]
pub(super) struct Shares {
    /// The divisions whose dividends [`from_ids`] takes (node addresses).
    pub(super) near: HashSet<usize>,
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
