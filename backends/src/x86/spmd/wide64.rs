//! `f64`, `i64` and `u64` values in the lane code: the eight lanes of a value in two
//! registers, lanes 0..3 in `ymm{d}` and lanes 4..7 in `ymm{d+1}` (four per register),
//! `let`s and `var`s in 64-byte slots of the vector frame.
//!
//! i64/u64 (`int64.rs`): `+ - & | ^` and comparisons are AVX2's qword instructions, which
//! wrap as the interpreter does; `*` is the low 64 bits of the product from three 32-bit
//! partial products (by a constant, `mul64const.rs`'s forms); shifts take counts modulo 64
//! (`i64 >>` as `((x ^ s) >>> n) ^ s`, s the sign mask; by a constant, immediate shifts, and
//! a constant or a name operand read in place: `inplace64.rs`); unsigned order is signed
//! order with the sign bits flipped; casts truncate to 32 bits or extend from them, and to
//! f64 round once (`int64_to_f64`); `/` and `%` are one scalar division per active lane
//! (`div64`).
//!
//! Why this is exact: `+ - * /`, `sqrt` (correctly rounded), `fma` (one rounding, the
//! interpreter's `mul_add` being the same FMA3 instruction), `floor`/`ceil`/`trunc`
//! (`vroundpd`), `-` and `abs` (the sign bit only) and the quiet comparisons are the scalar
//! code's IEEE operations lane by lane; `min`/`max` take `ops.rs`'s f32 fix-ups for the
//! interpreter's NaN and signed-zero rules; conversions between f32 and f64 round to
//! nearest even and quiet a NaN keeping its sign and top payload bits, as
//! `kiln_ir::eval::cast` does, and i32/u32 (and the 8/16-bit integers, extended) convert
//! exactly. Conditions of f64 values are qword masks narrowed to the lanes' dword masks.
//! Loads at exactly `global_id(0)` are two vector loads (the span is checked by the
//! driver), others checked gathers (`vgatherdpd`); stores at `global_id(0)` are (masked)
//! vector stores, others checked per-lane stores in lane order. Casts to i32/u32 (and
//! through them to 8/16-bit integers) saturate as the interpreter's, NaN giving 0 (see
//! `f64_to_int`). `exp` and `log` are `math64.rs`'s, `sin` and `cos` `trig64.rs`'s. Not yet in the lanes
//! (the kernel stays on the scalar code, saying so): 64-bit private arrays and atomics.
//! Conversions between i64/u64 and the floats (`int64.rs`): from f32 and f64 truncated and
//! saturating through an exact split into two dwords; to f64 rounded once; to f32 rounded
//! once, through a rounding to odd above 2^53.

use iced_x86::code_asm::*;
use kiln_ir::{BinOp, Expr, ExprNode, Intrinsic, Scalar, Type, UnOp, Var};

use super::{
    lane_type, no, Bound, Kind, Loc, CMP_EQ_OQ, CMP_GE_OQ, CMP_NEQ_UQ, CMP_UNORD_Q, R, TEMPS, V,
    XMM, YMM,
};

/// f64 bits of 1.0 and -2^31.
const F64_ONE: u64 = 0x3ff0_0000_0000_0000;
pub(super) const F64_M2P31: u64 = 0xc1e0_0000_0000_0000;

/// True for the 32-bit lane types (and bool) a cast from f64 converts to here.
fn to_32(to: Scalar) -> bool {
    matches!(to, Scalar::F32 | Scalar::I32 | Scalar::U32 | Scalar::Bool)
}

/// True for the types of this module's values: f64, i64, u64.
pub(super) fn is_64(t: Type) -> bool {
    matches!(t.scalar(), Some(Scalar::F64 | Scalar::I64 | Scalar::U64))
        && !matches!(t, Type::Ptr(..))
}

/// True for i64 and u64.
fn is_int64(t: Type) -> bool {
    matches!(t, Type::Scalar(Scalar::I64 | Scalar::U64))
}

impl V {
    /// The dword lanes of `ymm{src}` sign-extended to qwords (indices, or lane masks as
    /// qword masks): lanes 0..3 into `ymm{lo}`, 4..7 into `ymm{hi}` (`hi` may be `src`,
    /// `lo` must not).
    pub(super) fn qword_halves(&mut self, src: usize, lo: usize, hi: usize) -> R<()> {
        self.a.vpmovsxdq(YMM[lo], XMM[src])?;
        self.a.vextracti128(XMM[hi], YMM[src], 1)?;
        self.a.vpmovsxdq(YMM[hi], XMM[hi])?;
        Ok(())
    }

    /// A 32-byte slot holding the qword `bits` four times.
    pub(super) fn q_slot(&mut self, bits: u64) -> AsmMemoryOperand {
        ymmword_ptr(r15 + self.const_slot((bits, 4)))
    }

    /// Registers needed to compute f64 `e` into `ymm{d}`, `ymm{d+1}`.
    pub(super) fn need64(&self, e: &Expr) -> usize {
        match e.node() {
            ExprNode::Load { index, .. } if self.kind(index) != Kind::Gid0 => {
                self.need(index).max(5)
            }
            // One operand read in place (`inplace64.rs`): two temporaries.
            ExprNode::Binary { op, a, b }
                if is_int64(e.ty()) && self.split64(*op, a, b).is_some() =>
            {
                let (x, _) = self.split64(*op, a, b).expect("an operand in place");
                self.need64(x).max(4)
            }
            // (Temporaries: a product's partial products, a signed shift's sign mask, a
            // division's zero test.)
            ExprNode::Binary { op, a, b }
                if (matches!(op, BinOp::Mul | BinOp::Div | BinOp::Rem) && is_int64(e.ty()))
                    || (*op == BinOp::Shr && e.ty() == Type::I64) =>
            {
                self.need64(a).max(self.need64(b) + 2).max(6)
            }
            ExprNode::Binary { op, a, b } if self.reg_operand64(*op, a, e).is_some() => {
                self.need64(b).max(2)
            }
            ExprNode::Binary { a, b, .. } => self.need64(a).max(self.need64(b) + 2),
            ExprNode::Unary { a, .. } => self.need64(a).max(3),
            ExprNode::Intrinsic { .. } if super::expr::desugar(e).is_some() => {
                super::expr::desugar(e).map_or(2, |p| self.need64(&p))
            }
            ExprNode::Intrinsic { op, args } => {
                let n = args.iter().enumerate().map(|(k, x)| self.need64(x) + 2 * k).max();
                let n = n.unwrap_or(2);
                if matches!(op, Intrinsic::Min | Intrinsic::Max) {
                    n.max(6)
                } else if matches!(
                    op,
                    Intrinsic::Exp | Intrinsic::Log | Intrinsic::Sin | Intrinsic::Cos
                ) {
                    n.max(super::math64::EXP64_NEED)
                } else if *op == Intrinsic::Abs {
                    n.max(3)
                } else {
                    n
                }
            }
            ExprNode::Select { cond, a, b } => {
                self.need_cond(cond).max(self.need64(a) + 1).max(self.need64(b) + 3).max(6)
            }
            ExprNode::Cast { a, .. } if is_64(a.ty()) => self.need64(a).max(4),
            ExprNode::Cast { a, .. } if a.ty() == Type::BOOL => self.need_cond(a).max(2),
            // (From a float to i64/u64: two temporaries, `f64_to_int64`.)
            ExprNode::Cast { a, .. } if is_int64(e.ty()) && a.ty().is_float() => {
                self.need(a).max(4)
            }
            ExprNode::Cast { a, .. } => self.need(a).max(2),
            _ => 2,
        }
    }

    /// Registers for the nodes that consume f64 values into one 32-bit lane register
    /// (casts from f64, comparisons of f64); `None` for others.
    pub(super) fn need_from64(&self, e: &Expr) -> Option<usize> {
        match e.node() {
            ExprNode::Cast { to, a } if is_64(a.ty()) && to_32(*to) => Some(self.need64(a).max(4)),
            ExprNode::Binary { op, a, b } if op.is_comparison() && is_64(a.ty()) => {
                Some(self.need64(a).max(self.need64(b) + 2))
            }
            _ => None,
        }
    }

    /// Evaluates a statement's f64 `e` into `ymm{d}`, `ymm{d+1}`, in deep mode if it needs
    /// more temporaries than there are (`spill.rs`).
    pub(super) fn expr64_top(&mut self, e: &Expr, d: usize) -> R<()> {
        let deep = d + self.need64(e) > TEMPS;
        self.deep_if(deep, |v| v.expr64(e, d))
    }

    /// Evaluates f64 `e` into `ymm{d}` (lanes 0..3) and `ymm{d+1}` (lanes 4..7).
    pub(super) fn expr64(&mut self, e: &Expr, d: usize) -> R<()> {
        if self.must_spill(d, |v| v.need64(e)) {
            return self.spilled(d, 2, |v| v.expr64(e, 0));
        }
        if d + 2 > TEMPS {
            return no("internal: out of expression registers");
        }
        let (x, y) = (YMM[d], YMM[d + 1]);
        if let Some(plain) = super::expr::desugar(e) {
            return self.expr64(&plain, d);
        }
        let Some(ty) = e.ty().scalar() else { return no(format!("`{e}`")) };
        if is_int64(e.ty()) {
            if let Some(r) = self.int64_op(e, d) {
                return r;
            }
        }
        match e.node() {
            ExprNode::Imm(i) => {
                let bits = crate::x86::rt::bits_of(kiln_ir::eval::cast(ty, *i));
                let m = self.q_slot(bits);
                self.a.vmovupd(x, m)?;
                self.a.vmovupd(y, m)?;
            }
            ExprNode::Var(v) => match self.find(v.name()).map(|b| b.loc) {
                Some(Loc::Slot(off)) => {
                    self.a.vmovupd(x, ymmword_ptr(r15 + off))?;
                    self.a.vmovupd(y, ymmword_ptr(r15 + (off + 32)))?;
                }
                Some(Loc::Reg(r)) => {
                    self.a.vmovapd(x, YMM[r])?;
                    self.a.vmovapd(y, YMM[r + 1])?;
                }
                Some(_) => return no(format!("internal: `{}` is not in a slot", v.name())),
                None => match self.param(v) {
                    Some(slot) => {
                        self.a.vbroadcastsd(x, qword_ptr(r13 + slot))?;
                        self.a.vmovapd(y, x)?;
                    }
                    None => return no(format!("`{}` of type f64", v.name())),
                },
            },
            ExprNode::Load { buf, index } => match self.private(buf) {
                Some(p) => self.load_private(&p, index, e.ty(), d)?,
                None => self.load64(buf, index, e.ty(), d)?,
            },
            ExprNode::Binary { op, a, b } if self.reg_operand64(*op, a, e).is_some() => {
                // The left operand a name in registers (an accumulator): the right one
                // computed alone, then the operation reads the name's registers in place
                // (the same operand order, so the same NaN; a name has no effects to order).
                let r = self.reg_operand64(*op, a, e).expect("a register operand");
                self.expr64(b, d)?;
                for h in 0..2 {
                    let (p, q) = (YMM[r + h], YMM[d + h]);
                    match op {
                        BinOp::Add => self.a.vaddpd(q, p, q)?,
                        BinOp::Sub => self.a.vsubpd(q, p, q)?,
                        BinOp::Mul => self.a.vmulpd(q, p, q)?,
                        _ => self.a.vdivpd(q, p, q)?,
                    }
                }
            }
            ExprNode::Binary { op, a, b } => {
                self.expr64(a, d)?;
                self.expr64(b, d + 2)?;
                for h in 0..2 {
                    let (p, q) = (YMM[d + h], YMM[d + 2 + h]);
                    match op {
                        BinOp::Add => self.a.vaddpd(p, p, q)?,
                        BinOp::Sub => self.a.vsubpd(p, p, q)?,
                        BinOp::Mul => self.a.vmulpd(p, p, q)?,
                        BinOp::Div => self.a.vdivpd(p, p, q)?,
                        _ => return no(format!("`{}` on f64", op.symbol())),
                    }
                }
            }
            ExprNode::Unary { op: UnOp::Neg, a } => {
                self.expr64(a, d)?;
                let m = self.q_slot(1 << 63);
                self.a.vxorpd(x, x, m)?;
                self.a.vxorpd(y, y, m)?;
            }
            ExprNode::Intrinsic { op, args } => self.intrinsic64(*op, args, d)?,
            ExprNode::Select { cond, a, b } => {
                // In order (cond, a, b), as the interpreter evaluates them.
                self.cond(cond, d)?;
                self.expr64(a, d + 1)?;
                self.expr64(b, d + 3)?;
                let (c, t) = (YMM[d], YMM[d + 5]);
                self.a.vpmovsxdq(t, XMM[d])?;
                self.a.vextracti128(XMM[d], c, 1)?;
                self.a.vpmovsxdq(c, XMM[d])?;
                self.a.vblendvpd(t, YMM[d + 3], YMM[d + 1], t)?;
                self.a.vblendvpd(y, YMM[d + 4], YMM[d + 2], c)?;
                self.a.vmovapd(x, t)?;
            }
            ExprNode::Cast { to, a } => self.cast_to64(*to, a, d)?,
            _ => return no(format!("`{e}` on {ty}")),
        }
        Ok(())
    }

    /// For f64 `e` = `a op b` with `op` arithmetic: the first of the two `let` registers
    /// holding `a`, if `a` is a name bound there.
    fn reg_operand64(&self, op: BinOp, a: &Expr, e: &Expr) -> Option<usize> {
        if e.ty() != Type::F64 || !matches!(op, BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Div) {
            return None;
        }
        match (a.node(), a.as_var().and_then(|v| self.find(v.name())).map(|b| b.loc)) {
            (ExprNode::Var(_), Some(Loc::Reg(r))) => Some(r),
            _ => None,
        }
    }

    /// `a as to` (a 64-bit type) into `ymm{d}`, `ymm{d+1}`.
    fn cast_to64(&mut self, to: Scalar, a: &Expr, d: usize) -> R<()> {
        let (x, y) = (YMM[d], YMM[d + 1]);
        let from = a.ty();
        let to_t = Type::Scalar(to);
        if from == to_t || (is_int64(from) && is_int64(to_t)) {
            // The same bits.
            return self.expr64(a, d);
        }
        if from == Type::F16 && to == Scalar::F64 {
            // Exact through f32.
            return self.cast_to64(to, &a.cast(Scalar::F32), d);
        }
        if is_int64(from) && to == Scalar::F64 {
            return self.int64_to_f64(from == Type::I64, a, d);
        }
        if is_int64(to_t) && from.is_float() {
            // Exact to f64 (a NaN stays one), then truncated and saturated from there.
            self.cast_to64(Scalar::F64, a, d)?;
            return self.f64_to_int64(to == Scalar::U64, d);
        }
        if is_64(from) {
            return no(format!("a cast from {from} to {to}"));
        }
        if self.blocked_widen(to_t, a, d)? {
            return Ok(());
        }
        if from == Type::BOOL {
            self.cond(a, d)?;
            let one = self.imm_slot(1);
            self.a.vpand(x, x, ymmword_ptr(r15 + one))?;
        } else if lane_type(from) || super::narrow::narrow(from).is_some_and(|_| from != Type::F16)
        {
            self.expr(a, d)?;
        } else {
            return no(format!("a cast from {from} to f64"));
        }
        self.a.vextracti128(XMM[d + 1], x, 1)?;
        for (r, xr) in [(y, XMM[d + 1]), (x, XMM[d])] {
            if is_int64(to_t) {
                // Sign extension from signed types (8/16-bit values are extended already),
                // zero extension from u32 and bool.
                match from.scalar() {
                    Some(Scalar::U32 | Scalar::Bool) => self.a.vpmovzxdq(r, xr)?,
                    _ => self.a.vpmovsxdq(r, xr)?,
                }
                continue;
            }
            match from.scalar() {
                Some(Scalar::F32) => self.a.vcvtps2pd(r, xr)?,
                Some(Scalar::U32) => {
                    // (v ^ 2^31) as i32, then + 2^31: exact.
                    let sign = self.imm_slot(0x8000_0000);
                    self.a.vpxor(xr, xr, xmmword_ptr(r15 + sign))?;
                    self.a.vcvtdq2pd(r, xr)?;
                    let k = self.q_slot(F64_M2P31);
                    self.a.vsubpd(r, r, k)?;
                }
                _ => self.a.vcvtdq2pd(r, xr)?,
            }
        }
        Ok(())
    }

    /// Narrows qword masks in `ymm{d}`, `ymm{d+1}` to the lanes' dword mask in `ymm{d}`.
    pub(super) fn pack_masks(&mut self, d: usize) -> R<()> {
        let (x, y) = (YMM[d], YMM[d + 1]);
        // The low dwords of the qwords: [l0 l1 h0 h1 | l2 l3 h2 h3], then in lane order.
        self.a.vshufps(x, x, y, 0x88)?;
        self.a.vpermpd(x, x, 0xd8)?;
        Ok(())
    }

    /// The nodes consuming f64 values into `ymm{d}` (one 32-bit lane register): casts from
    /// f64 and comparisons of f64; `None` for others.
    pub(super) fn from64(&mut self, e: &Expr, d: usize) -> Option<R<()>> {
        match e.node() {
            // (To 8/16-bit integers: `narrow.rs`, through i32/u32.)
            ExprNode::Cast { to, a } if is_64(a.ty()) && to_32(*to) => {
                Some(self.cast_from64(*to, a, d))
            }
            ExprNode::Binary { op, a, b } if op.is_comparison() && is_64(a.ty()) => {
                Some(self.compare64(*op, a, b, d))
            }
            _ => None,
        }
    }

    fn cast_from64(&mut self, to: Scalar, a: &Expr, d: usize) -> R<()> {
        let (x, y) = (YMM[d], YMM[d + 1]);
        if is_int64(a.ty()) && to == Scalar::F32 {
            return self.int64_to_f32(a.ty() == Type::I64, a, d);
        }
        if is_int64(a.ty()) {
            self.expr64(a, d)?;
            match to {
                // Truncation: the low dwords.
                Scalar::I32 | Scalar::U32 => self.pack_masks(d)?,
                Scalar::Bool => {
                    let z = self.q_slot(0);
                    self.a.vpcmpeqq(x, x, z)?;
                    self.a.vpcmpeqq(y, y, z)?;
                    self.pack_masks(d)?;
                    let ones = self.imm_slot(u32::MAX);
                    self.a.vpxor(x, x, ymmword_ptr(r15 + ones))?;
                }
                _ => return no(format!("a cast from {} to {to}", a.ty())),
            }
            return Ok(());
        }
        match to {
            Scalar::F32 => {
                self.expr64(a, d)?;
                self.a.vcvtpd2ps(XMM[d], x)?;
                self.a.vcvtpd2ps(XMM[d + 1], y)?;
                self.a.vinsertf128(x, x, XMM[d + 1], 1)?;
            }
            Scalar::Bool => {
                // `!= 0`: a NaN is true, -0.0 false.
                self.expr64(a, d)?;
                let z = self.q_slot(0);
                self.a.vcmppd(x, x, z, CMP_NEQ_UQ)?;
                self.a.vcmppd(y, y, z, CMP_NEQ_UQ)?;
                self.pack_masks(d)?;
            }
            Scalar::I32 | Scalar::U32 => {
                self.expr64(a, d)?;
                self.f64_to_int(to == Scalar::U32, d)?;
            }
            _ => return no(format!("a cast from f64 to {to}")),
        }
        Ok(())
    }

    /// The saturating conversion of the f64 lanes in `ymm{d}`, `ymm{d+1}` to i32 or u32
    /// lanes in `ymm{d}` (`ymm{d+2}`, `ymm{d+3}` temporaries), NaN giving 0, as
    /// `kiln_ir::eval::cast`. i32: NaN lanes cleared first; truncation gives 0x80000000
    /// out of range, which is i32::MIN below and, flipped by the `>= 2^31` mask, i32::MAX
    /// above. u32: floor (= truncation on the range) minus 2^31 is exact and in i32 range
    /// for [0, 2^32), converted and shifted back; below 0 and for NaN that gives 0; at
    /// 2^32 and above the `>= 2^32` mask makes u32::MAX.
    fn f64_to_int(&mut self, unsigned: bool, d: usize) -> R<()> {
        let limit = if unsigned { 0x41f0_0000_0000_0000 } else { 0x41e0_0000_0000_0000 };
        let limit = self.q_slot(limit);
        for h in 0..2 {
            let x = YMM[d + h];
            if unsigned {
                self.a.vroundpd(x, x, 9)?;
            } else {
                // (ymm{d+3} is free until this half's mask: the low half's is in ymm{d+2}.)
                self.a.vcmppd(YMM[d + 3], x, x, super::CMP_ORD_Q)?;
                self.a.vandpd(x, x, YMM[d + 3])?;
            }
            self.a.vcmppd(YMM[d + 2 + h], x, limit, CMP_GE_OQ)?;
        }
        self.pack_masks(d + 2)?;
        if unsigned {
            let k = self.q_slot(F64_M2P31);
            self.a.vaddpd(YMM[d], YMM[d], k)?;
            self.a.vaddpd(YMM[d + 1], YMM[d + 1], k)?;
        }
        self.a.vcvttpd2dq(XMM[d], YMM[d])?;
        self.a.vcvttpd2dq(XMM[d + 1], YMM[d + 1])?;
        self.a.vinserti128(YMM[d], YMM[d], XMM[d + 1], 1)?;
        if unsigned {
            let sign = self.imm_slot(0x8000_0000);
            self.a.vpxor(YMM[d], YMM[d], ymmword_ptr(r15 + sign))?;
            self.a.vpor(YMM[d], YMM[d], YMM[d + 2])?;
        } else {
            self.a.vpxor(YMM[d], YMM[d], YMM[d + 2])?;
        }
        Ok(())
    }

    fn compare64(&mut self, op: BinOp, a: &Expr, b: &Expr, d: usize) -> R<()> {
        self.expr64(a, d)?;
        self.expr64(b, d + 2)?;
        if is_int64(a.ty()) {
            if a.ty() == Type::U64 {
                // Unsigned order is signed order with the sign bits flipped.
                let sign = self.q_slot(1 << 63);
                for &r in &YMM[d..d + 4] {
                    self.a.vpxor(r, r, sign)?;
                }
            }
            // a > b is gt(a, b); a < b is gt(b, a); the others negate these or equality.
            let (gt, swap, negate) = match op {
                BinOp::Eq => (false, false, false),
                BinOp::Ne => (false, false, true),
                BinOp::Gt => (true, false, false),
                BinOp::Lt => (true, true, false),
                BinOp::Le => (true, false, true),
                _ => (true, true, true),
            };
            for h in 0..2 {
                let (p, q) = (YMM[d + h], YMM[d + 2 + h]);
                let (s, t) = if swap { (q, p) } else { (p, q) };
                if gt {
                    self.a.vpcmpgtq(p, s, t)?;
                } else {
                    self.a.vpcmpeqq(p, s, t)?;
                }
            }
            self.pack_masks(d)?;
            if negate {
                let ones = self.imm_slot(u32::MAX);
                self.a.vpxor(YMM[d], YMM[d], ymmword_ptr(r15 + ones))?;
            }
            return Ok(());
        }
        let pred = super::float_pred(op);
        for h in 0..2 {
            self.a.vcmppd(YMM[d + h], YMM[d + h], YMM[d + 2 + h], pred)?;
        }
        self.pack_masks(d)
    }

    fn intrinsic64(&mut self, op: Intrinsic, args: &[Expr], d: usize) -> R<()> {
        let arity = match op {
            Intrinsic::Fma => 3,
            Intrinsic::Min | Intrinsic::Max => 2,
            Intrinsic::Abs
            | Intrinsic::Sqrt
            | Intrinsic::Floor
            | Intrinsic::Ceil
            | Intrinsic::Trunc
            | Intrinsic::Exp
            | Intrinsic::Log
            | Intrinsic::Sin
            | Intrinsic::Cos => 1,
            _ => return no(format!("`{}` on f64", op.name())),
        };
        if args.len() != arity {
            return no(format!("`{}` with {} arguments", op.name(), args.len()));
        }
        for (k, x) in args.iter().enumerate() {
            self.expr64(x, d + 2 * k)?;
        }
        match op {
            Intrinsic::Exp => return self.exp64(d),
            Intrinsic::Log => return self.log64(d),
            Intrinsic::Sin => return self.sin_cos64(d, 0),
            Intrinsic::Cos => return self.sin_cos64(d, 1),
            _ => {}
        }
        for h in 0..2 {
            let x = YMM[d + h];
            match op {
                Intrinsic::Abs => {
                    let m = self.q_slot(!(1 << 63));
                    self.a.vandpd(x, x, m)?;
                }
                Intrinsic::Sqrt => self.a.vsqrtpd(x, x)?,
                // Rounding with the precision exception suppressed (bit 3).
                Intrinsic::Floor => self.a.vroundpd(x, x, 9)?,
                Intrinsic::Ceil => self.a.vroundpd(x, x, 10)?,
                Intrinsic::Trunc => self.a.vroundpd(x, x, 11)?,
                Intrinsic::Fma => {
                    if !super::has_fma() {
                        return no("`fma` without FMA3");
                    }
                    self.fma = true;
                    self.a.vfmadd213pd(x, YMM[d + 2 + h], YMM[d + 4 + h])?;
                }
                _ => self.min_max64(op == Intrinsic::Max, d + h, d + 2 + h, d + 4, d + 5)?,
            }
        }
        Ok(())
    }

    /// `ops.rs`'s f32 `min`/`max` fix-ups on f64 lanes: `x` (result) and `y` operands,
    /// `r`, `e` temporaries.
    fn min_max64(&mut self, max: bool, xi: usize, yi: usize, ri: usize, ei: usize) -> R<()> {
        let (x, y, r, e) = (YMM[xi], YMM[yi], YMM[ri], YMM[ei]);
        if max {
            self.a.vmaxpd(r, y, x)?;
            self.a.vcmppd(e, x, y, CMP_NEQ_UQ)?;
            self.a.vorpd(e, e, y)?;
            self.a.vandpd(r, r, e)?;
        } else {
            self.a.vminpd(r, y, x)?;
            self.a.vcmppd(e, x, y, CMP_EQ_OQ)?;
            self.a.vandpd(e, e, y)?;
            self.a.vorpd(r, r, e)?;
        }
        let one = self.q_slot(F64_ONE);
        self.a.vmulpd(e, y, one)?;
        self.a.vcmppd(x, x, x, CMP_UNORD_Q)?;
        self.a.vblendvpd(x, r, e, x)?;
        Ok(())
    }

    /// `a as to` where `a` is a blocked row load (`blocked.rs`) of `u32`, `i32` or `f32` and
    /// `to` an integer of 64 bits or `f64` (a row sum in 64 bits): each half widened from its
    /// 16 bytes of the frame, without the vector load and extraction. False otherwise.
    fn blocked_widen(&mut self, to: Type, a: &Expr, d: usize) -> R<bool> {
        let ExprNode::Load { buf, index } = a.node() else { return Ok(false) };
        let Some(off) = self.blocked_slot(buf, index, false) else { return Ok(false) };
        for (h, r) in [(0, YMM[d]), (16, YMM[d + 1])] {
            let m = xmmword_ptr(r15 + (off + h));
            match (a.ty().scalar(), is_int64(to)) {
                (Some(Scalar::U32), true) => self.a.vpmovzxdq(r, m)?,
                (Some(Scalar::I32), true) => self.a.vpmovsxdq(r, m)?,
                (Some(Scalar::F32), false) => self.a.vcvtps2pd(r, m)?,
                _ => return Ok(false),
            }
        }
        Ok(true)
    }

    /// A load of f64 `buf[index]` into `ymm{d}`, `ymm{d+1}`: at exactly `global_id(0)` two
    /// vector loads, at `global_id(0)` plus a uniform value `contig64.rs`'s, else a checked
    /// gather per half.
    fn load64(&mut self, buf: &Var, index: &Expr, ty: Type, d: usize) -> R<()> {
        if let Some(off) = self.blocked_load64(buf, index) {
            // One iteration of a blocked loop's chunk (`blocked.rs`).
            self.a.vmovupd(YMM[d], ymmword_ptr(r15 + off))?;
            self.a.vmovupd(YMM[d + 1], ymmword_ptr(r15 + (off + 32)))?;
            return Ok(());
        }
        let t = self.buf_of(buf, ty)?;
        if self.kind(index) == Kind::Gid0 {
            let b = self.element_base(t)?;
            self.a.vmovupd(YMM[d], ymmword_ptr(b + rbx * 8))?;
            self.a.vmovupd(YMM[d + 1], ymmword_ptr(b + rbx * 8 + 32))?;
            return Ok(());
        }
        if self.kind(index) == Kind::Contig {
            return self.contig_load64(t, index, d);
        }
        let signed = Self::index_type(index)?;
        let mut done = None;
        if self.kind(index) == Kind::Uniform && self.gpr_ok(index) {
            // One element for every lane (as `mem.rs`'s 32-bit loads): with the index below
            // the length, one scalar compare and a broadcast, whichever lanes are active;
            // otherwise the lanes' check below, which reports the lowest active lane.
            self.gpr(index)?;
            let base = self.base(t)?;
            if !self.needs_check(index, t) {
                self.a.vbroadcastsd(YMM[d], qword_ptr(base + rax * 8))?;
                self.a.vmovapd(YMM[d + 1], YMM[d])?;
                return Ok(());
            }
            let (mut slow, end) = (self.a.create_label(), self.a.create_label());
            self.a.cmp(rax, qword_ptr(r14 + (t as i32 * 16 + 8)))?;
            self.a.jae(slow)?;
            self.a.vbroadcastsd(YMM[d], qword_ptr(base + rax * 8))?;
            self.a.vmovapd(YMM[d + 1], YMM[d])?;
            self.a.jmp(end)?;
            self.bind(&mut slow)?;
            self.a.vmovd(XMM[d], eax)?;
            self.a.vpbroadcastd(YMM[d], XMM[d])?;
            done = Some(end);
        } else {
            self.expr(index, d)?;
        }
        self.active(d + 1)?;
        self.check(index, d, d + 1, d + 2, t, "load", signed)?;
        let base = self.base(t)?;
        self.gather64(base, 0, d)?;
        if let Some(mut end) = done {
            self.bind(&mut end)?;
        }
        Ok(())
    }

    /// Gathers the qwords at `base + off + 8 * ymm{d}` (dword element offsets) in the lanes
    /// of mask `ymm{d+1}` into `ymm{d}`, `ymm{d+1}` (`ymm{d+2..=d+4}` temporaries).
    pub(super) fn gather64(&mut self, base: AsmRegister64, off: i32, d: usize) -> R<()> {
        // Lanes 0..3: indices in xmm{d}, the mask widened.
        self.a.vpmovsxdq(YMM[d + 3], XMM[d + 1])?;
        self.a.vxorpd(YMM[d + 2], YMM[d + 2], YMM[d + 2])?;
        self.a.vgatherdpd_3(YMM[d + 2], qword_ptr(base + XMM[d] * 8 + off), YMM[d + 3])?;
        // Lanes 4..7.
        self.a.vextracti128(XMM[d + 3], YMM[d], 1)?;
        self.a.vextracti128(XMM[d + 4], YMM[d + 1], 1)?;
        self.a.vpmovsxdq(YMM[d + 4], XMM[d + 4])?;
        self.a.vxorpd(YMM[d + 1], YMM[d + 1], YMM[d + 1])?;
        self.a.vgatherdpd_3(YMM[d + 1], qword_ptr(base + XMM[d + 3] * 8 + off), YMM[d + 4])?;
        self.a.vmovapd(YMM[d], YMM[d + 2])?;
        Ok(())
    }

    /// `buf[index] = value` of f64 in the active lanes.
    pub(super) fn store64(&mut self, buf: &Var, index: &Expr, value: &Expr) -> R<()> {
        let t = self.buf_of(buf, value.ty())?;
        let indexed = self.store_operands(index, value, 2)?;
        if self.kind(index) == Kind::Gid0 {
            let whole = self.mask.is_none() && !self.may_fault;
            if !whole {
                self.active(2)?;
                self.a.vpmovsxdq(ymm3, xmm2)?;
                self.a.vextracti128(xmm2, ymm2, 1)?;
                self.a.vpmovsxdq(ymm2, xmm2)?;
            }
            let b = self.element_base(t)?;
            if whole {
                self.a.vmovupd(ymmword_ptr(b + rbx * 8), ymm0)?;
                self.a.vmovupd(ymmword_ptr(b + rbx * 8 + 32), ymm1)?;
            } else {
                self.a.vmaskmovpd(ymmword_ptr(b + rbx * 8), ymm3, ymm0)?;
                self.a.vmaskmovpd(ymmword_ptr(b + rbx * 8 + 32), ymm2, ymm1)?;
            }
            return Ok(());
        }
        if !indexed {
            self.expr_top(index, 2)?;
        }
        if self.kind(index) == Kind::Contig {
            return self.contig_store64(t, index);
        }
        let signed = Self::index_type(index)?;
        self.active(3)?;
        self.check(index, 2, 3, 4, t, "store", signed)?;
        let base = self.base(t)?;
        self.store_lanes64(base, 0)
    }

    /// Stores the qword lanes of `ymm0`, `ymm1` at `base + off + 8 * ymm2` (dword element
    /// offsets) in the lanes of mask `ymm3`, one store per lane in lane order (the last
    /// work-item wins where lanes collide).
    pub(super) fn store_lanes64(&mut self, base: AsmRegister64, off: i32) -> R<()> {
        let tmp = self.scratch64();
        self.a.vmovupd(ymmword_ptr(r15 + tmp), ymm0)?;
        self.a.vmovupd(ymmword_ptr(r15 + (tmp + 32)), ymm1)?;
        self.a.vmovups(ymmword_ptr(r15 + self.tmp_i), ymm2)?;
        self.a.vmovmskps(eax, ymm3)?;
        for lane in 0..8 {
            let mut skip = self.a.create_label();
            self.a.test(eax, 1 << lane)?;
            self.a.je(skip)?;
            self.a.movsxd(r10, dword_ptr(r15 + (self.tmp_i + 4 * lane)))?;
            self.a.mov(r11, qword_ptr(r15 + (tmp + 8 * lane)))?;
            self.a.mov(qword_ptr(base + r10 * 8 + off), r11)?;
            self.bind(&mut skip)?;
        }
        Ok(())
    }

    /// A fresh 64-byte slot of the vector frame.
    pub(super) fn slot64(&mut self) -> i32 {
        let off = self.slot();
        self.slot();
        if let Some(r) = self.regions.as_mut() {
            r.wide.insert(off);
        }
        off
    }

    /// The code's 64-byte scratch slot (for per-lane stores).
    pub(super) fn scratch64(&mut self) -> i32 {
        match self.scratch64 {
            Some(off) => off,
            None => {
                let off = self.slot64();
                self.scratch64 = Some(off);
                off
            }
        }
    }

    /// A `let` of a 64-bit type: computed into two free `let` registers (`Loc::Reg(r)`:
    /// lanes 0-3 in `ymm{r}`, 4-7 in `ymm{r+1}`) while a pair is left, else a 64-byte slot.
    pub(super) fn bind_let64(&mut self, var: &Var, value: &Expr, kind: Kind) -> R<Loc> {
        self.expr64_top(value, 0)?;
        let loc = if self.let_reg_free(self.next_reg + 1) {
            let r = self.next_reg;
            self.next_reg += 2;
            self.a.vmovapd(YMM[r], ymm0)?;
            self.a.vmovapd(YMM[r + 1], ymm1)?;
            Loc::Reg(r)
        } else {
            let off = self.slot64();
            self.a.vmovupd(ymmword_ptr(r15 + off), ymm0)?;
            self.a.vmovupd(ymmword_ptr(r15 + (off + 32)), ymm1)?;
            Loc::Slot(off)
        };
        let name = var.name().to_string();
        self.lets.push(Bound::new(name, loc, kind));
        Ok(loc)
    }

    /// A `var` of a 64-bit type: as a `let` (two registers or a 64-byte slot).
    pub(super) fn decl64(&mut self, var: &Var, init: &Expr, kind: Kind) -> R<()> {
        self.bind_let64(var, init, kind)?;
        if let Some(b) = self.lets.last_mut() {
            b.decl = Some(self.dctl);
        }
        Ok(())
    }

    /// `var = value` of a 64-bit type at `loc`, blended into the active lanes under
    /// divergent control.
    pub(super) fn assign64(&mut self, loc: Loc, kind: Kind, value: &Expr) -> R<()> {
        self.expr64_top(value, 0)?;
        let masked = self.mask.is_some() && kind != Kind::Uniform;
        if masked {
            // The lane masks widened to qwords: lanes 0-3 in ymm2, 4-7 in ymm3.
            let m = self.mask.expect("a mask");
            match self.vhome(m) {
                Some(x) => {
                    self.a.vextracti128(xmm3, YMM[x], 1)?;
                    self.a.vpmovsxdq(ymm2, XMM[x])?;
                    self.a.vpmovsxdq(ymm3, xmm3)?;
                }
                None => {
                    self.a.vpmovsxdq(ymm2, xmmword_ptr(r15 + m))?;
                    self.a.vpmovsxdq(ymm3, xmmword_ptr(r15 + (m + 16)))?;
                }
            }
        }
        let off = match loc {
            Loc::Reg(r) => {
                let (x, y) = (YMM[r], YMM[r + 1]);
                if masked {
                    self.a.vblendvpd(x, x, ymm0, ymm2)?;
                    self.a.vblendvpd(y, y, ymm1, ymm3)?;
                } else {
                    self.a.vmovapd(x, ymm0)?;
                    self.a.vmovapd(y, ymm1)?;
                }
                return Ok(());
            }
            Loc::Slot(off) => off,
            Loc::Scalar(_) => return no("internal: a 64-bit value in a GPR"),
        };
        match self.mask {
            Some(_) if masked => {
                self.a.vmovupd(ymm4, ymmword_ptr(r15 + off))?;
                self.a.vblendvpd(ymm0, ymm4, ymm0, ymm2)?;
                self.a.vmovupd(ymm4, ymmword_ptr(r15 + (off + 32)))?;
                self.a.vblendvpd(ymm1, ymm4, ymm1, ymm3)?;
            }
            _ => {}
        }
        self.a.vmovupd(ymmword_ptr(r15 + off), ymm0)?;
        self.a.vmovupd(ymmword_ptr(r15 + (off + 32)), ymm1)?;
        Ok(())
    }
}
