//! The lane code of everything beyond `+ - * / & | ^` and comparisons: `bool` values as
//! lane masks, `select`, unary operators, casts between f32, i32, u32 and bool, the
//! intrinsics (`min`, `max`, `abs`, `sqrt`, `fma`, `floor`, `ceil`, `trunc`) and integer
//! `/` and `%` with per-lane divisors.
//!
//! Each is the interpreter's operation (`kiln_ir::eval`) bit for bit, NaNs, signed zeros
//! and saturation included; the comments say why an instruction sequence is exactly it.
//! Operands are evaluated left to right, so that when one lane faults in two operands the
//! first one's fault is reported, as the interpreter reports it.

use iced_x86::code_asm::*;
use kiln_ir::{BinOp, Expr, ExprNode, Imm, Intrinsic, Scalar, Type, UnOp};

use super::expr::Src;
use super::{
    has_fma, no, Loc, CMP_EQ_OQ, CMP_GE_OQ, CMP_NEQ_UQ, CMP_ORD_Q, CMP_UNORD_Q, R, V, XMM, YMM,
};
use crate::x86::gen::Site;
use crate::x86::rt;

/// f32 bits of 2^31 and 2^32.
const F32_2P31: u32 = 0x4f00_0000;
const F32_2P32: u32 = 0x4f80_0000;
/// f32 bits of 1.0 and 65536.0.
const F32_ONE: u32 = 0x3f80_0000;
const F32_2P16: u32 = 0x4780_0000;

/// The scalar type of a 32-bit lane value (`None` for any other type).
fn lane_scalar(t: Type) -> Option<Scalar> {
    match t.scalar() {
        Some(s @ (Scalar::F32 | Scalar::I32 | Scalar::U32 | Scalar::Bool)) => Some(s),
        _ => None,
    }
}

/// True if the lane code has intrinsic `op` on operands of type `t` (see
/// [`V::intrinsic`]); `exp`, `log`, `sin` and `cos` are `math.rs`'s.
pub(super) fn has_intrinsic(op: Intrinsic, t: Type) -> bool {
    let f = t == Type::F32;
    match op {
        Intrinsic::Min | Intrinsic::Max | Intrinsic::Abs => {
            lane_scalar(t).is_some() && t != Type::BOOL
        }
        Intrinsic::Sqrt | Intrinsic::Floor | Intrinsic::Ceil | Intrinsic::Trunc => f,
        Intrinsic::Fma => f && has_fma(),
        Intrinsic::Mad | Intrinsic::Add3 => false,
        Intrinsic::Exp | Intrinsic::Log | Intrinsic::Sin | Intrinsic::Cos => false,
    }
}

/// True if `e` is a constant whose lane bits are all clear.
fn is_zero(e: &Expr) -> bool {
    matches!(e.node(), ExprNode::Imm(i) if rt::bits_of(kiln_ir::eval::cast(i.scalar(), *i)) as u32 == 0)
}

impl V {
    /// Registers needed by the operations of this module (see [`V::need`]); `None` for
    /// other nodes.
    pub(super) fn need_op(&self, e: &Expr) -> Option<usize> {
        Some(match e.node() {
            ExprNode::Select { cond, a, b } => {
                self.need_cond(cond).max(self.need_any(a) + 1).max(self.need_any(b) + 2)
            }
            ExprNode::Unary { a, .. } => self.need_any(a),
            ExprNode::Cast { to, a } => {
                let extra = match (lane_scalar(a.ty()), to) {
                    (Some(Scalar::F32), Scalar::U32) => 4,
                    (Some(Scalar::F32), Scalar::I32) => 3,
                    (Some(Scalar::U32), Scalar::F32) | (_, Scalar::Bool) => 2,
                    _ => 1,
                };
                self.need_any(a).max(extra)
            }
            ExprNode::Intrinsic { op, args } => {
                let mut n =
                    args.iter().enumerate().map(|(k, x)| self.need_any(x) + k).max().unwrap_or(1);
                if matches!(op, Intrinsic::Min | Intrinsic::Max) && e.ty() == Type::F32 {
                    n = n.max(4);
                }
                n
            }
            ExprNode::Binary { op: BinOp::Div | BinOp::Rem, a, b } if a.ty() != Type::F32 => {
                self.need(a).max(self.need(b) + 1).max(5)
            }
            _ => return None,
        })
    }

    /// Registers for `e` as a value or, for `bool`, as a mask.
    fn need_any(&self, e: &Expr) -> usize {
        if e.ty() == Type::BOOL {
            self.need_cond(e)
        } else {
            self.need(e)
        }
    }

    /// `e` into `ymm{d}`: its value, or for `bool` its lane mask.
    fn any(&mut self, e: &Expr, d: usize) -> R<()> {
        if e.ty() == Type::BOOL {
            self.cond(e, d)
        } else {
            self.expr(e, d)
        }
    }

    /// The nodes of this module as values (`ymm{d}`, temporaries above it).
    pub(super) fn op_expr(&mut self, e: &Expr, d: usize) -> R<()> {
        match e.node() {
            ExprNode::Select { cond, a, b } => self.select(cond, a, b, d),
            ExprNode::Unary { op, a } => self.unary(*op, a, d),
            ExprNode::Cast { to, a } => self.cast(*to, a, d),
            ExprNode::Intrinsic { op, args } => self.intrinsic(*op, args, e.ty(), d),
            ExprNode::Binary { op: op @ (BinOp::Div | BinOp::Rem), a, b }
                if a.ty() != Type::F32 =>
            {
                self.lane_div(e, *op == BinOp::Rem, a, b, d)
            }
            _ => no(format!("`{e}`")),
        }
    }

    /// `bool` nodes beyond comparisons and `! && ||` as lane masks into `ymm{d}`; `None` if
    /// `e` is none of them.
    pub(super) fn op_cond(&mut self, e: &Expr, d: usize) -> Option<R<()>> {
        Some(match e.node() {
            ExprNode::Imm(Imm::Bool(b)) => {
                let ones = self.imm_slot(if *b { u32::MAX } else { 0 });
                self.a.vmovups(YMM[d], ymmword_ptr(r15 + ones)).map_err(Into::into)
            }
            ExprNode::Var(v) => self.bool_var(v, d),
            ExprNode::Select { cond, a, b } => self.select(cond, a, b, d),
            ExprNode::Cast { to: Scalar::Bool, a } => self.cast(Scalar::Bool, a, d),
            // Masks are all ones or zero: `==` is their equality, `!=` and `^` their xor.
            ExprNode::Binary { op: op @ (BinOp::Eq | BinOp::Ne | BinOp::Xor), a, b }
                if a.ty() == Type::BOOL =>
            {
                let r = self.cond(a, d).and_then(|_| self.cond(b, d + 1));
                r.and_then(|_| {
                    let (x, y) = (YMM[d], YMM[d + 1]);
                    if *op == BinOp::Eq {
                        self.a.vpcmpeqd(x, x, y)?;
                    } else {
                        self.a.vpxor(x, x, y)?;
                    }
                    Ok(())
                })
            }
            _ => return None,
        })
    }

    /// Registers for the masks of [`V::op_cond`]; `None` for other nodes.
    pub(super) fn need_op_cond(&self, e: &Expr) -> Option<usize> {
        match e.node() {
            ExprNode::Imm(_) | ExprNode::Var(_) => Some(1),
            ExprNode::Select { .. } | ExprNode::Cast { .. } => self.need_op(e),
            ExprNode::Binary { op: BinOp::Eq | BinOp::Ne | BinOp::Xor, a, b }
                if a.ty() == Type::BOOL =>
            {
                Some(self.need_cond(a).max(self.need_cond(b) + 1))
            }
            _ => None,
        }
    }

    /// A `bool` name's mask: a `let` or `var` holds one; a parameter holds 0 or 1.
    fn bool_var(&mut self, v: &kiln_ir::Var, d: usize) -> R<()> {
        match self.find(v.name()).map(|b| b.loc) {
            Some(Loc::Reg(r)) => self.a.vmovaps(YMM[d], YMM[r])?,
            Some(Loc::Slot(off)) => self.a.vmovups(YMM[d], ymmword_ptr(r15 + off))?,
            Some(Loc::Scalar(_)) => return no(format!("internal: `{}` in a GPR", v.name())),
            None => match self.param(v) {
                Some(slot) => {
                    let off = self.const_slot((slot as u64, 1));
                    let zero = self.imm_slot(0);
                    let ones = self.imm_slot(u32::MAX);
                    self.a.vmovups(YMM[d], ymmword_ptr(r15 + off))?;
                    self.a.vpcmpeqd(YMM[d], YMM[d], ymmword_ptr(r15 + zero))?;
                    self.a.vpxor(YMM[d], YMM[d], ymmword_ptr(r15 + ones))?;
                }
                None => return no(format!("`{}` of type bool", v.name())),
            },
        }
        Ok(())
    }

    /// `cond ? a : b`: all three evaluated in every lane, in that order (as the
    /// interpreter does), then blended.
    fn select(&mut self, cond: &Expr, a: &Expr, b: &Expr, d: usize) -> R<()> {
        if lane_scalar(a.ty()).is_none() && super::narrow::narrow(a.ty()).is_none() {
            return no(format!("a select of {}", a.ty()));
        }
        self.cond(cond, d)?;
        if a.ty() != Type::BOOL {
            // Operands read where they are where that keeps the order of evaluation: the
            // value for true as the memory operand when it is a leaf (which cannot fault),
            // the other from its register when one holds it.
            let (x, m) = (YMM[d], YMM[d]);
            // A constant 0 on one side (all bits clear, f32 +0.0 included): the mask (all ones
            // or all zeros in a lane) ANDed with the other side, one instruction for the
            // three of a blend.
            if is_zero(a) {
                let y = self.operand_reg(b, d + 1)?;
                self.a.vpandn(x, m, y)?;
                return Ok(());
            }
            if is_zero(b) {
                let y = self.operand_reg(a, d + 1)?;
                self.a.vpand(x, m, y)?;
                return Ok(());
            }
            if self.is_leaf(a) {
                let y = self.operand_reg(b, d + 1)?;
                match self.src(a)? {
                    Src::Reg(r) => self.a.vblendvps(x, y, YMM[r], m)?,
                    Src::Mem(t) => self.a.vblendvps(x, y, t, m)?,
                }
                return Ok(());
            }
            if let Some(r) = self.src_if_reg(b) {
                self.expr(a, d + 1)?;
                self.a.vblendvps(x, YMM[r], YMM[d + 1], m)?;
                return Ok(());
            }
        }
        self.any(a, d + 1)?;
        self.any(b, d + 2)?;
        self.a.vblendvps(YMM[d], YMM[d + 2], YMM[d + 1], YMM[d])?;
        Ok(())
    }

    fn unary(&mut self, op: UnOp, a: &Expr, d: usize) -> R<()> {
        let t = lane_scalar(a.ty());
        match (op, t) {
            (UnOp::Neg, Some(Scalar::F32)) => {
                // The sign bit flips, NaNs included (the scalar code's `xor`).
                self.expr(a, d)?;
                let sign = self.imm_slot(0x8000_0000);
                self.a.vxorps(YMM[d], YMM[d], ymmword_ptr(r15 + sign))?;
            }
            (UnOp::Neg, Some(Scalar::I32 | Scalar::U32)) => {
                // vpsignd by -1 negates, wrapping (MIN stays MIN).
                self.expr(a, d)?;
                let ones = self.imm_slot(u32::MAX);
                self.a.vpsignd(YMM[d], YMM[d], ymmword_ptr(r15 + ones))?;
            }
            (UnOp::BitNot, Some(Scalar::I32 | Scalar::U32)) => {
                self.expr(a, d)?;
                let ones = self.imm_slot(u32::MAX);
                self.a.vpxor(YMM[d], YMM[d], ymmword_ptr(r15 + ones))?;
            }
            _ => return no(format!("`{}` on {}", op.symbol(), a.ty())),
        }
        Ok(())
    }

    /// `a as to` (see `kiln_ir::eval::cast`).
    fn cast(&mut self, to: Scalar, a: &Expr, d: usize) -> R<()> {
        if to == Scalar::Bool && super::narrow::narrow(a.ty()).is_some() {
            // `!= 0` of the value as i32 (f16: as f32, exact).
            let via = if a.ty() == Type::F16 { Scalar::F32 } else { Scalar::I32 };
            return self.cast(Scalar::Bool, &a.cast(via), d);
        }
        let Some(from) = lane_scalar(a.ty()) else {
            return no(format!("a cast from {}", a.ty()));
        };
        let x = YMM[d];
        if from == Scalar::Bool {
            // 0 or 1 of the target type: the mask ANDed with 1's bits.
            self.cond(a, d)?;
            let one = match to {
                Scalar::Bool => return Ok(()),
                Scalar::F32 => F32_ONE,
                Scalar::I32 | Scalar::U32 => 1,
                _ => return no(format!("a cast to {to}")),
            };
            let one = self.imm_slot(one);
            self.a.vpand(x, x, ymmword_ptr(r15 + one))?;
            return Ok(());
        }
        self.expr(a, d)?;
        let t = YMM[d + 1];
        match (from, to) {
            // Same width integers, or a type to itself: every bit stays.
            (f, t2) if f == t2 => {}
            (Scalar::I32, Scalar::U32) | (Scalar::U32, Scalar::I32) => {}
            (_, Scalar::Bool) => {
                // `!= 0`; a float NaN is true and -0.0 false (the unordered predicate).
                self.a.vpxor(t, t, t)?;
                if from == Scalar::F32 {
                    self.a.vcmpps(x, x, t, CMP_NEQ_UQ)?;
                } else {
                    let ones = self.imm_slot(u32::MAX);
                    self.a.vpcmpeqd(x, x, t)?;
                    self.a.vpxor(x, x, ymmword_ptr(r15 + ones))?;
                }
            }
            // Round to nearest even, as the scalar conversion.
            (Scalar::I32, Scalar::F32) => self.a.vcvtdq2ps(x, x)?,
            (Scalar::U32, Scalar::F32) => {
                // hi * 65536 and lo are exact in f32, so their sum is rounded once: the
                // correctly rounded u32 value.
                let lo16 = self.imm_slot(0xffff);
                let k = self.imm_slot(F32_2P16);
                self.a.vpsrld(t, x, 16)?;
                self.a.vpand(x, x, ymmword_ptr(r15 + lo16))?;
                self.a.vcvtdq2ps(t, t)?;
                self.a.vmulps(t, t, ymmword_ptr(r15 + k))?;
                self.a.vcvtdq2ps(x, x)?;
                self.a.vaddps(x, x, t)?;
            }
            (Scalar::F32, Scalar::I32) => {
                // Truncation gives 0x80000000 for NaN and out-of-range values: that is
                // i32::MIN below the range; at or above 2^31 the xor with the all-ones
                // mask makes it i32::MAX; NaN lanes are cleared.
                let u = YMM[d + 2];
                let c31 = self.imm_slot(F32_2P31);
                self.a.vcmpps(t, x, ymmword_ptr(r15 + c31), CMP_GE_OQ)?;
                self.a.vcmpps(u, x, x, CMP_ORD_Q)?;
                self.a.vcvttps2dq(x, x)?;
                self.a.vpxor(x, x, t)?;
                self.a.vpand(x, x, u)?;
            }
            (Scalar::F32, Scalar::U32) => {
                // max(x, 0) takes NaN and negatives to 0 (vmaxps returns its second
                // operand when one is NaN); below 2^31 a signed truncation is exact, from
                // 2^31 the truncation of x - 2^31 (exact) with the top bit set; at or
                // above 2^32 every bit is set.
                let (u, w) = (YMM[d + 2], YMM[d + 3]);
                let zero = self.imm_slot(0);
                let (c31, c32) = (self.imm_slot(F32_2P31), self.imm_slot(F32_2P32));
                let sign = self.imm_slot(0x8000_0000);
                self.a.vmaxps(x, x, ymmword_ptr(r15 + zero))?;
                self.a.vcmpps(t, x, ymmword_ptr(r15 + c32), CMP_GE_OQ)?;
                self.a.vcmpps(u, x, ymmword_ptr(r15 + c31), CMP_GE_OQ)?;
                self.a.vsubps(w, x, ymmword_ptr(r15 + c31))?;
                self.a.vcvttps2dq(w, w)?;
                self.a.vpxor(w, w, ymmword_ptr(r15 + sign))?;
                self.a.vcvttps2dq(x, x)?;
                self.a.vblendvps(x, x, w, u)?;
                self.a.vpor(x, x, t)?;
            }
            _ => return no(format!("a cast from {from} to {to}")),
        }
        Ok(())
    }

    /// An intrinsic call on lane values (see [`has_intrinsic`]). One match on the function:
    /// the place a new one is added.
    fn intrinsic(&mut self, op: Intrinsic, args: &[Expr], ty: Type, d: usize) -> R<()> {
        let Some(first) = args.first() else { return no(format!("`{}`", op.name())) };
        if !has_intrinsic(op, first.ty()) {
            return no(format!("`{}` on {}", op.name(), first.ty()));
        }
        let t = lane_scalar(ty);
        let max = op == Intrinsic::Max;
        if matches!(op, Intrinsic::Min | Intrinsic::Max) && t == Some(Scalar::F32) {
            if let Some((other, c)) = const_bound(max, args) {
                // One instruction with the constant as the second operand (see
                // `const_bound`); the constant has nothing to evaluate, so the other
                // operand's faults come in the same order.
                self.expr(other, d)?;
                let c = ymmword_ptr(r15 + self.imm_slot(c));
                if max {
                    self.a.vmaxps(YMM[d], YMM[d], c)?;
                } else {
                    self.a.vminps(YMM[d], YMM[d], c)?;
                }
                return Ok(());
            }
        }
        for (k, x) in args.iter().enumerate() {
            self.expr(x, d + k)?;
        }
        let (x, y) = (YMM[d], YMM[d + 1]);
        match (op, t) {
            (Intrinsic::Min | Intrinsic::Max, Some(Scalar::F32)) => self.float_min_max(max, d)?,
            (Intrinsic::Min, Some(Scalar::I32)) => self.a.vpminsd(x, x, y)?,
            (Intrinsic::Min, _) => self.a.vpminud(x, x, y)?,
            (Intrinsic::Max, Some(Scalar::I32)) => self.a.vpmaxsd(x, x, y)?,
            (Intrinsic::Max, _) => self.a.vpmaxud(x, x, y)?,
            (Intrinsic::Abs, Some(Scalar::F32)) => {
                // Only the sign bit clears: a NaN keeps its payload.
                let m = self.imm_slot(0x7fff_ffff);
                self.a.vandps(x, x, ymmword_ptr(r15 + m))?;
            }
            // Wrapping: abs(i32::MIN) is i32::MIN.
            (Intrinsic::Abs, Some(Scalar::I32)) => self.a.vpabsd(x, x)?,
            (Intrinsic::Abs, _) => {}
            // Correctly rounded, as the scalar `sqrtss`; a NaN is quieted.
            (Intrinsic::Sqrt, _) => self.a.vsqrtps(x, x)?,
            // Rounding with the precision exception suppressed (bit 3).
            (Intrinsic::Floor, _) => self.a.vroundps(x, x, 9)?,
            (Intrinsic::Ceil, _) => self.a.vroundps(x, x, 10)?,
            (Intrinsic::Trunc, _) => self.a.vroundps(x, x, 11)?,
            // One rounding. The interpreter's `mul_add` is libm's `fmaf`, which on an FMA3
            // CPU is `vfmadd213ss a, b, c` (a = b * a + c): the same instruction with the
            // same operands picks the same NaN when several are.
            (Intrinsic::Fma, _) => {
                self.fma = true;
                self.a.vfmadd213ps(x, y, YMM[d + 2])?
            }
            _ => return no(format!("`{}` on {}", op.name(), first.ty())),
        }
        Ok(())
    }

    /// `min`/`max` of the f32 lanes in `ymm{d}` (x) and `ymm{d+1}` (y) into `ymm{d}`, as
    /// `kiln_ir::eval` defines them (IEEE minimumNumber/maximumNumber): a NaN x gives y,
    /// quieted if it is a NaN too; a NaN y gives x; equal values differing in the sign of
    /// zero give -0.0 for `min`, +0.0 for `max`.
    fn float_min_max(&mut self, max: bool, d: usize) -> R<()> {
        let (x, y, r, e) = (YMM[d], YMM[d + 1], YMM[d + 2], YMM[d + 3]);
        // vminps/vmaxps return their second operand (x) when either is NaN or both are
        // zeros: right for a NaN y; the other cases are fixed below.
        if max {
            self.a.vmaxps(r, y, x)?;
            // Equal lanes: x & y (+0.0 if either is); others keep r (the mask is all ones).
            self.a.vcmpps(e, x, y, CMP_NEQ_UQ)?;
            self.a.vorps(e, e, y)?;
            self.a.vandps(r, r, e)?;
        } else {
            self.a.vminps(r, y, x)?;
            // Equal lanes: x | y (-0.0 if either is); others keep r.
            self.a.vcmpps(e, x, y, CMP_EQ_OQ)?;
            self.a.vandps(e, e, y)?;
            self.a.vorps(r, r, e)?;
        }
        // A NaN x: y * 1.0, which is y exactly, or y quieted if it is a NaN.
        let one = self.imm_slot(F32_ONE);
        self.a.vmulps(e, y, ymmword_ptr(r15 + one))?;
        self.a.vcmpps(x, x, x, CMP_UNORD_Q)?;
        self.a.vblendvps(x, r, e, x)?;
        Ok(())
    }

    /// An i32/u32 `/` or `%` with per-lane divisors. A zero divisor in an active lane is an
    /// error of the lowest such lane. The quotient is computed in f64, four lanes at a
    /// time: the operands are exact there, and the correctly rounded quotient of two
    /// integers below 2^32 in magnitude never reaches the next integer (its distance to
    /// one is at least 1/|b|, its error at most |a/b| * 2^-53), so truncating it is the
    /// integer quotient; i32::MIN / -1 converts to i32::MIN (the wrapped quotient).
    /// The remainder is a - q * b, wrapping (0 for i32::MIN % -1).
    pub(super) fn lane_div(&mut self, e: &Expr, rem: bool, a: &Expr, b: &Expr, d: usize) -> R<()> {
        let unsigned = match lane_scalar(a.ty()) {
            Some(Scalar::U32) => true,
            Some(Scalar::I32) => false,
            // 8/16-bit values extended to 32 bits are i32 values of the same magnitude
            // (`narrow.rs` re-extends the result).
            _ if super::narrow::narrow(a.ty()).is_some() => false,
            _ => return no(format!("`{}` on {}", if rem { "%" } else { "/" }, a.ty())),
        };
        if self.shared_value(e, d)? {
            return Ok(());
        }
        // A nonzero constant divisor: a multiply by its magic number (`divconst.rs`).
        let plan = a.ty().scalar().and_then(|t| super::divconst::const_plan(t, b));
        if let Some(plan) = plan {
            self.expr(a, d)?;
            let both = self.share_slot(e);
            return self.const_div(rem, plan, d, both);
        }
        self.expr(a, d)?;
        self.expr(b, d + 1)?;
        let (x, y, t, u, v) = (YMM[d], YMM[d + 1], YMM[d + 2], YMM[d + 3], YMM[d + 4]);
        // A divisor fixed for the call: its magic number (`divuniform.rs`).
        let magic = self.magic_slots(e);
        // A divisor with a magic number is the same in every lane: one scalar test skips
        // the lanes' check where it is not 0.
        let mut nonzero_divisor = None;
        if magic.is_some() {
            let ok = self.a.create_label();
            self.a.vmovd(eax, XMM[d + 1])?;
            self.a.test(eax, eax)?;
            self.a.jne(ok)?;
            nonzero_divisor = Some(ok);
        }
        // Zero divisors among the active lanes.
        self.a.vpxor(t, t, t)?;
        self.a.vpcmpeqd(t, y, t)?;
        self.active(d + 3)?;
        self.a.vpand(t, t, u)?;
        let site = Site::Div { rem, expr: e.fault_site() };
        self.fault_stub(d + 1, d + 2, d + 3, rt::ERR_DIV_ZERO, site, false, None)?;
        if let Some(mut ok) = nonzero_divisor {
            self.bind(&mut ok)?;
        }
        if let Some(slots) = magic {
            let both = self.share_slot(e);
            return self.magic_div(rem, !unsigned, slots, d, both);
        }
        // u32 to f64: (v ^ 2^31) as i32, then + 2^31, exactly.
        let sign = self.imm_slot(0x8000_0000);
        let k = self.const_slot((0xc1e0_0000_0000_0000, 4)); // -2^31 as f64
        let sign128 = xmmword_ptr(r15 + sign);
        let half = |s: &mut V, dst: usize, src: usize, high: bool| -> R<()> {
            let (yd, xd) = (YMM[dst], XMM[dst]);
            let mut from = XMM[src];
            if high {
                s.a.vextracti128(xd, YMM[src], 1)?;
                from = xd;
            }
            if unsigned {
                s.a.vpxor(xd, from, sign128)?;
                from = xd;
            }
            s.a.vcvtdq2pd(yd, from)?;
            if unsigned {
                s.a.vsubpd(yd, yd, ymmword_ptr(r15 + k))?;
            }
            Ok(())
        };
        for high in [false, true] {
            let (q, w) = if high { (u, v) } else { (t, u) };
            let (qi, wi) = if high { (d + 3, d + 4) } else { (d + 2, d + 3) };
            half(self, qi, d, high)?;
            half(self, wi, d + 1, high)?;
            self.a.vdivpd(q, q, w)?;
            if unsigned {
                // Truncated first (exact), then shifted into i32 range (exact).
                self.a.vroundpd(q, q, 11)?;
                self.a.vaddpd(q, q, ymmword_ptr(r15 + k))?;
            }
            self.a.vcvttpd2dq(XMM[qi], q)?;
        }
        self.a.vinserti128(t, t, XMM[d + 3], 1)?;
        if unsigned {
            self.a.vpxor(t, t, ymmword_ptr(r15 + sign))?;
        }
        if rem {
            self.a.vpmulld(t, t, y)?;
            self.a.vpsubd(x, x, t)?;
        } else {
            self.a.vmovaps(x, t)?;
        }
        Ok(())
    }
}

/// The operand that is not a constant, and the constant's f32 bits, of an f32 `min`/`max`
/// (`max` true) of two lane values where one of them is a constant that makes
/// `vminps`/`vmaxps x, c` (c the second operand) the interpreter's result in every lane.
///
/// Proof against `kiln_ir::eval`'s rule (IEEE minimumNumber/maximumNumber: a NaN operand
/// gives the other one, quieted if both are NaN; -0.0 < +0.0), for a constant c that is not
/// a NaN, in either argument position (the rule is symmetric when at most one operand is a
/// NaN), and x the other lane value:
/// - x NaN: the rule gives c (not a NaN, so quieting leaves it); `vminps`/`vmaxps` give the
///   second operand where either is a NaN: c.
/// - x and c unequal, neither NaN: both give the smaller (larger) one.
/// - x == c and c is not a zero: equal non-zero floats have the same bits, any pick is right.
/// - x == c, both zeros: the rule gives -0.0 for `min` if either is, +0.0 for `max` if
///   either is; the instructions give the second operand, c. Right when c is -0.0 for
///   `min` or +0.0 for `max`; a +0.0 bound of `min` (-0.0 of `max`) is not taken here.
pub(super) fn const_bound(max: bool, args: &[Expr]) -> Option<(&Expr, u32)> {
    let [a, b] = args else { return None };
    let value = |e: &Expr| match e.node() {
        ExprNode::Imm(Imm::Float(Scalar::F32, v)) => Some(*v as f32),
        _ => None,
    };
    let (other, c) = match (value(a), value(b)) {
        (None, Some(c)) => (a, c),
        (Some(c), None) => (b, c),
        _ => return None,
    };
    let zero_ok = if max { c.is_sign_positive() } else { c.is_sign_negative() };
    (!c.is_nan() && (c != 0.0 || zero_ok)).then_some((other, c.to_bits()))
}
