//! Conditions as lane masks: comparisons, `&&`, `||`, `!` (`V::cond`), with comparisons
//! reading their operands where they are when they can (`V::cmp_operands`).

use iced_x86::code_asm::*;
use kiln_ir::{BinOp, Expr, ExprNode, Imm, Scalar, Type, UnOp};

use super::expr::Src;
use super::{lane_type, no, R, TEMPS, V, YMM};

impl V {
    /// A statement's condition into `ymm{d}`, in deep mode if it needs more temporaries than
    /// there are.
    pub(super) fn cond_top(&mut self, e: &Expr, d: usize) -> R<()> {
        let deep = d + self.need_cond(e) > TEMPS;
        self.deep_if(deep, |v| v.cond(e, d))
    }

    /// Evaluates a condition into `ymm{d}` as a lane mask (all ones where true). Float
    /// comparisons use the quiet predicates that are false on NaN, except `!=` (true on
    /// NaN), as the scalar comparisons are.
    pub(super) fn cond(&mut self, e: &Expr, d: usize) -> R<()> {
        if self.must_spill(d, |v| v.need_cond(e)) {
            return self.spilled(d, 1, |v| v.cond(e, 0));
        }
        let addr = e as *const Expr as usize;
        if let Some(&(_, slot)) = self.hoisted_conds.iter().find(|h| h.0 == addr) {
            self.a.vmovups(YMM[d], ymmword_ptr(r15 + slot))?;
            return Ok(());
        }
        if let Some(r) = self.from64(e, d) {
            return r;
        }
        if let Some(r) = self.op_cond(e, d) {
            return r;
        }
        let ones = self.imm_slot(u32::MAX);
        match e.node() {
            ExprNode::Binary { op, a, b } if op.is_comparison() => {
                // (Narrow integers compare as their signed 32-bit extensions.)
                if a.ty() != b.ty()
                    || !(lane_type(a.ty()) || super::narrow::narrow(a.ty()).is_some())
                {
                    return no(format!("a comparison of {}", a.ty()));
                }
                // (Equality is the same on u32 bits as on i32 ones: no sign flips.)
                let equality = matches!(op, BinOp::Eq | BinOp::Ne);
                if a.ty() != Type::U32 || equality {
                    if let Some(r) = self.cmp_operands(*op, a, b, d) {
                        return r;
                    }
                }
                if a.ty() == Type::U32 && !equality {
                    if let Some(r) = self.cmp_u32_imm(*op, a, b, d) {
                        return r;
                    }
                }
                if a.ty() == Type::U32 && matches!(op, BinOp::Lt | BinOp::Gt) {
                    if let Some(r) = self.cmp_u32_flip_reg(*op, a, b, d) {
                        return r;
                    }
                }
                let (ra, rb) = self.pair(a, b, d)?;
                if a.ty() == Type::U32 && self.cmp_u32_order(*op, ra, rb, d)? {
                    return Ok(());
                }
                let (x, y, z) = (YMM[d], YMM[ra], YMM[rb]);
                match a.ty().scalar() {
                    Some(Scalar::F32) => {
                        let pred = super::float_pred(*op);
                        self.a.vcmpps(x, y, z, pred)?;
                    }
                    t => {
                        if t == Some(Scalar::U32) && !equality {
                            // Unsigned order is signed order with the sign bits flipped.
                            let sign = ymmword_ptr(r15 + self.imm_slot(0x8000_0000));
                            self.a.vpxor(y, y, sign)?;
                            self.a.vpxor(z, z, sign)?;
                        }
                        // a > b is gt(a, b); a < b is gt(b, a); the others negate these or
                        // equality.
                        let (cmp_gt, swap, negate) = match op {
                            BinOp::Eq => (false, false, false),
                            BinOp::Ne => (false, false, true),
                            BinOp::Gt => (true, false, false),
                            BinOp::Lt => (true, true, false),
                            BinOp::Le => (true, false, true),
                            _ => (true, true, true),
                        };
                        let (p, q) = if swap { (z, y) } else { (y, z) };
                        if cmp_gt {
                            self.a.vpcmpgtd(x, p, q)?;
                        } else {
                            self.a.vpcmpeqd(x, p, q)?;
                        }
                        if negate {
                            self.a.vpxor(x, x, ymmword_ptr(r15 + ones))?;
                        }
                    }
                }
            }
            ExprNode::Binary {
                op: op @ (BinOp::LogicAnd | BinOp::LogicOr | BinOp::And | BinOp::Or),
                a,
                b,
            } if a.ty() == Type::BOOL => {
                // `&&` and `||` do not short-circuit (kiln_ir's semantics): both sides are
                // evaluated, left first, in every lane, as the interpreter does.
                self.cond(a, d)?;
                self.cond(b, d + 1)?;
                if matches!(op, BinOp::LogicAnd | BinOp::And) {
                    self.a.vpand(YMM[d], YMM[d], YMM[d + 1])?;
                } else {
                    self.a.vpor(YMM[d], YMM[d], YMM[d + 1])?;
                }
            }
            ExprNode::Unary { op: UnOp::Not, a } => {
                self.cond(a, d)?;
                self.a.vpxor(YMM[d], YMM[d], ymmword_ptr(r15 + ones))?;
            }
            _ => return no(format!("the condition `{e}`")),
        }
        Ok(())
    }

    /// A comparison `a op b` of f32, i32 or 8/16-bit values into `ymm{d}` with its operands
    /// read where they are: a `let` register or `global_id(0)`'s as the instruction's first
    /// source, a leaf (a parameter's or constant's slot, a load at `global_id(0)`) as its
    /// memory operand, so that neither is copied to a temporary first. `None` where neither
    /// operand allows that (the caller then computes both, as before). Only leaves and
    /// registers are not computed, and they cannot fault, so the order of faults stays the
    /// interpreter's.
    fn cmp_operands(&mut self, op: BinOp, a: &Expr, b: &Expr, d: usize) -> Option<R<()>> {
        let float = a.ty() == Type::F32;
        // a > b is gt(a, b); a < b is gt(b, a); the others negate these or equality. (f32:
        // a predicate each, a and b in order.)
        let (cmp_gt, swap, negate) = match op {
            BinOp::Eq => (false, false, false),
            BinOp::Ne => (false, false, true),
            BinOp::Gt => (true, false, false),
            BinOp::Lt => (true, true, false),
            BinOp::Le => (true, false, true),
            _ => (true, true, true),
        };
        let (p, q) = if swap && !float { (b, a) } else { (a, b) };
        let (p_reg, q_reg) = (self.src_if_reg(p), self.src_if_reg(q));
        if !(self.is_leaf(q) || q_reg.is_some()) && p_reg.is_none() {
            return None;
        }
        Some((|| {
            let x = YMM[d];
            let (y, z) = if self.is_leaf(q) || q_reg.is_some() {
                let y = self.operand_reg(p, d)?;
                (y, self.src(q)?)
            } else {
                // p in a register, q computed.
                self.expr(q, d)?;
                (YMM[p_reg.expect("a register")], Src::Reg(d))
            };
            if float {
                let pred = super::float_pred(op);
                match z {
                    Src::Reg(r) => self.a.vcmpps(x, y, YMM[r], pred)?,
                    Src::Mem(m) => self.a.vcmpps(x, y, m, pred)?,
                }
                return Ok(());
            }
            match (z, cmp_gt) {
                (Src::Reg(r), true) => self.a.vpcmpgtd(x, y, YMM[r])?,
                (Src::Reg(r), false) => self.a.vpcmpeqd(x, y, YMM[r])?,
                (Src::Mem(m), true) => self.a.vpcmpgtd(x, y, m)?,
                (Src::Mem(m), false) => self.a.vpcmpeqd(x, y, m)?,
            }
            if negate {
                let ones = self.imm_slot(u32::MAX);
                self.a.vpxor(x, x, ymmword_ptr(r15 + ones))?;
            }
            Ok(())
        })())
    }

    /// An unsigned comparison with a constant (`x > 1`, `3 <= x`), in two instructions
    /// reading the constant as their memory operand: `x > c` as the signed order of `x`
    /// with its sign bit flipped and `c` flipped when the code is generated; `x <= c` as
    /// `max(x, c) == c`, `x >= c` as `min(x, c) == c`, and `x < c` as `x <= c - 1`.
    /// `None` for other shapes (and `x < 0`, never true, left to the general code).
    fn cmp_u32_imm(&mut self, op: BinOp, a: &Expr, b: &Expr, d: usize) -> Option<R<()>> {
        let imm = |e: &Expr| match e.node() {
            ExprNode::Imm(Imm::Int(_, bits)) => u32::try_from(*bits).ok(),
            _ => None,
        };
        // The constant on the right: `c < x` is `x > c`, and so on.
        let (x, c, op) = match (imm(a), imm(b)) {
            (_, Some(c)) => (a, c, op),
            (Some(c), None) => {
                let mirrored = match op {
                    BinOp::Lt => BinOp::Gt,
                    BinOp::Gt => BinOp::Lt,
                    BinOp::Le => BinOp::Ge,
                    _ => BinOp::Le,
                };
                (b, c, mirrored)
            }
            _ => return None,
        };
        let (op, c) = match op {
            BinOp::Lt => (BinOp::Le, c.checked_sub(1)?),
            _ => (op, c),
        };
        Some((|| {
            let y = self.operand_reg(x, d)?;
            let z = YMM[d];
            if op == BinOp::Gt {
                let sign = self.imm_slot(0x8000_0000);
                let flipped = self.imm_slot(c ^ 0x8000_0000);
                self.a.vpxor(z, y, ymmword_ptr(r15 + sign))?;
                self.a.vpcmpgtd(z, z, ymmword_ptr(r15 + flipped))?;
                return Ok(());
            }
            let c = ymmword_ptr(r15 + self.imm_slot(c));
            if op == BinOp::Le {
                self.a.vpmaxud(z, y, c)?;
            } else {
                self.a.vpminud(z, y, c)?;
            }
            self.a.vpcmpeqd(z, z, c)?;
            Ok(())
        })())
    }

    /// A u32 `a < b` or `a > b` into `ymm{d}` with an operand that lives in a register (a
    /// `let` register, `global_id(0)`'s) flipped from there: its sign flip (`vpxor` with the
    /// sign bits) writes the temporary, so it needs no copy first (a guard's `i < n`, a
    /// row's `r < rows`). The other operand is computed into `ymm{d}` as `pair` computes
    /// its first (every temporary from `ymm{d}` free for it), and a register cannot fault,
    /// so the order of faults is the interpreter's. `None` (nothing
    /// emitted) where neither operand is in a register.
    fn cmp_u32_flip_reg(&mut self, op: BinOp, a: &Expr, b: &Expr, d: usize) -> Option<R<()>> {
        let (ra, rb) = (self.src_if_reg(a), self.src_if_reg(b));
        if ra.is_none() && rb.is_none() {
            return None;
        }
        Some((|| {
            let sign = ymmword_ptr(r15 + self.imm_slot(0x8000_0000));
            // The flipped operands: the computed one in `ymm{d}` (with every temporary from
            // there, as `pair` gives its first), the register's flipped into `ymm{d+1}`.
            let (fa, fb) = match (ra, rb) {
                (Some(r), Some(q)) => {
                    self.a.vpxor(YMM[d], YMM[r], sign)?;
                    self.a.vpxor(YMM[d + 1], YMM[q], sign)?;
                    (d, d + 1)
                }
                (Some(r), None) | (None, Some(r)) => {
                    let computed = if ra.is_some() { b } else { a };
                    self.expr(computed, d)?;
                    self.a.vpxor(YMM[d], YMM[d], sign)?;
                    self.a.vpxor(YMM[d + 1], YMM[r], sign)?;
                    if ra.is_some() {
                        (d + 1, d)
                    } else {
                        (d, d + 1)
                    }
                }
                (None, None) => unreachable!("checked above"),
            };
            // a > b is gt(a, b); a < b is gt(b, a).
            let (p, q) = if op == BinOp::Gt { (fa, fb) } else { (fb, fa) };
            self.a.vpcmpgtd(YMM[d], YMM[p], YMM[q])?;
            Ok(())
        })())
    }

    /// `a <= b` or `a >= b` of u32 values in `ymm{ra}` and `ymm{rb}` (one of them
    /// `ymm{d}`) into `ymm{d}`: `a <= b` is `max(a, b) == b` and `min(a, b) == a`, `a >= b`
    /// the same with `a` and `b` swapped; of each pair the form that compares with the
    /// operand not overwritten. Two instructions, where flipping both sign bits takes
    /// three and the negation a fourth. `false` (nothing emitted) for other operators.
    fn cmp_u32_order(&mut self, op: BinOp, ra: usize, rb: usize, d: usize) -> R<bool> {
        let le = match op {
            BinOp::Le => true,
            BinOp::Ge => false,
            _ => return Ok(false),
        };
        let (x, y, z) = (YMM[d], YMM[ra], YMM[rb]);
        // The operand kept: `b` when `a` is overwritten, else `a`.
        let (kept, max) = if ra == d { (z, le) } else { (y, !le) };
        if max {
            self.a.vpmaxud(x, y, z)?;
        } else {
            self.a.vpminud(x, y, z)?;
        }
        self.a.vpcmpeqd(x, x, kept)?;
        Ok(true)
    }
}
