//! 64-bit values (i64, u64, f64) in VGPR pairs, and the re-extension of 8/16-bit integers.
//!
//! Uniform i64/u64 values live in SGPR pairs and use the SALU where gfx9 has the operation
//! (`s_add_u32`/`s_addc_u32`, `s_sub_u32`/`s_subb_u32`, multiplication from 32-bit pieces,
//! 64-bit logic and shifts, `s_cmp_eq_u64`/`s_cmp_lg_u64`); the rest (ordered compares,
//! division, conversions) and every divergent or f64 value use VGPR pairs and the VALU.

use kiln_ir::{BinOp, Scalar, UnOp};

use super::{Isel, Val};
use crate::amdgpu::mir::{Opnd, RegClass};
use crate::amdgpu::Error;

/// True for the types kept in a register pair.
pub fn is_wide(t: Scalar) -> bool {
    matches!(t, Scalar::I64 | Scalar::U64 | Scalar::F64)
}

/// The low half of a 64-bit virtual register.
pub fn lo(o: &Opnd) -> Opnd {
    half(o, 0)
}

/// The high half of a 64-bit virtual register.
pub fn hi(o: &Opnd) -> Opnd {
    half(o, 1)
}

fn half(o: &Opnd, k: u8) -> Opnd {
    match o {
        Opnd::R(v) => Opnd::Half(*v, k),
        // A 64-bit immediate is only ever 0 here (inline constant): both halves are 0.
        Opnd::Imm(_) => Opnd::Imm(0),
        other => other.clone(),
    }
}

impl Isel<'_> {
    /// True if `x` is a 64-bit value (in an SGPR or VGPR pair).
    pub(super) fn is_wide_val(&self, x: &Val) -> bool {
        matches!(x.o, Opnd::R(v) if matches!(self.f.vregs[v], RegClass::V2 | RegClass::S2))
    }

    /// A 64-bit value as a VGPR pair operand (an SGPR pair is copied).
    pub(super) fn w(&mut self, x: Val) -> Opnd {
        if !x.s {
            return x.o;
        }
        let d = self.v2();
        self.copy64(&d, &x.o);
        d
    }

    /// A 64-bit value in an SGPR pair (a uniform VGPR pair is read from the first lane).
    pub(super) fn sgpr64(&mut self, x: Val) -> Opnd {
        if x.s {
            return x.o;
        }
        let d = self.s2();
        self.emit("v_readfirstlane_b32", vec![lo(&d)], vec![lo(&x.o)]);
        self.emit("v_readfirstlane_b32", vec![hi(&d)], vec![hi(&x.o)]);
        d
    }

    /// `op d, uses` with a fresh SGPR.
    fn ss(&mut self, op: &'static str, uses: Vec<Opnd>) -> Opnd {
        let d = self.s();
        self.emit(op, vec![d.clone()], uses);
        d
    }

    /// A uniform 64-bit integer operator on the SALU, if gfx9 has it (`None`: use VALU).
    pub(super) fn salu64(&mut self, op: BinOp, a: Val, b: Val) -> Option<Val> {
        if !matches!(
            op,
            BinOp::Add
                | BinOp::Sub
                | BinOp::Mul
                | BinOp::And
                | BinOp::Or
                | BinOp::Xor
                | BinOp::Shl
                | BinOp::Shr
                | BinOp::Eq
                | BinOp::Ne
        ) {
            return None;
        }
        let (a, b) = (self.sgpr64(a), self.sgpr64(b));
        let d = self.s2();
        let pair = |me: &mut Self, lo_op: &'static str, hi_op: &'static str| {
            me.emit(lo_op, vec![lo(&d)], vec![lo(&a), lo(&b)]);
            me.emit(hi_op, vec![hi(&d)], vec![hi(&a), hi(&b)]);
        };
        match op {
            // The carry travels in SCC.
            BinOp::Add => pair(self, "s_add_u32", "s_addc_u32"),
            BinOp::Sub => pair(self, "s_sub_u32", "s_subb_u32"),
            BinOp::Mul => {
                let h = self.ss("s_mul_hi_u32", vec![lo(&a), lo(&b)]);
                let c1 = self.ss("s_mul_i32", vec![lo(&a), hi(&b)]);
                let c2 = self.ss("s_mul_i32", vec![hi(&a), lo(&b)]);
                let h = self.ss("s_add_i32", vec![h, c1]);
                self.emit("s_mul_i32", vec![lo(&d)], vec![lo(&a), lo(&b)]);
                self.emit("s_add_i32", vec![hi(&d)], vec![h, c2]);
            }
            BinOp::And => self.emit("s_and_b64", vec![d.clone()], vec![a, b]),
            BinOp::Or => self.emit("s_or_b64", vec![d.clone()], vec![a, b]),
            BinOp::Xor => self.emit("s_xor_b64", vec![d.clone()], vec![a, b]),
            // The amount's low 6 bits: the width modulo rule.
            BinOp::Shl => self.emit("s_lshl_b64", vec![d.clone()], vec![a, lo(&b)]),
            BinOp::Shr => return None,
            _ => {
                let o = if op == BinOp::Eq { "s_cmp_eq_u64" } else { "s_cmp_lg_u64" };
                self.emit(o, vec![], vec![a, b]);
                let r = self.ss("s_cselect_b32", vec![Opnd::Imm(1), Opnd::Imm(0)]);
                return Some(Val { o: r, s: true });
            }
        }
        Some(Val { o: d, s: true })
    }

    /// Uniform 64-bit right shift (arithmetic for i64).
    pub(super) fn salu64_shr(&mut self, signed: bool, a: Val, b: Val) -> Val {
        let (a, b) = (self.sgpr64(a), self.sgpr64(b));
        let d = self.s2();
        let o = if signed { "s_ashr_i64" } else { "s_lshr_b64" };
        self.emit(o, vec![d.clone()], vec![a, lo(&b)]);
        Val { o: d, s: true }
    }

    pub(super) fn v2(&mut self) -> Opnd {
        self.vreg(RegClass::V2)
    }

    /// `op d, uses` with a fresh VGPR `d`.
    pub(super) fn vv(&mut self, op: &'static str, uses: Vec<Opnd>) -> Opnd {
        let d = self.v();
        self.emit(op, vec![d.clone()], uses);
        d
    }

    /// `op d, uses` with a fresh VGPR pair `d`.
    pub(super) fn ww(&mut self, op: &'static str, uses: Vec<Opnd>) -> Opnd {
        let d = self.v2();
        self.emit(op, vec![d.clone()], uses);
        d
    }

    /// `op m, uses` with a fresh lane mask `m` (VOP3 compares).
    pub(super) fn mm(&mut self, op: &'static str, uses: Vec<Opnd>) -> Opnd {
        let m = self.s2();
        self.emit(op, vec![m.clone()], uses);
        m
    }

    /// A 64-bit constant in a fresh VGPR pair.
    pub(super) fn const64(&mut self, bits: u64) -> Opnd {
        self.pair(Opnd::Imm(bits as u32), Opnd::Imm((bits >> 32) as u32))
    }

    /// A fresh VGPR pair from two 32-bit operands.
    pub(super) fn pair(&mut self, l: Opnd, h: Opnd) -> Opnd {
        let d = self.v2();
        self.emit("v_mov_b32", vec![lo(&d)], vec![l]);
        self.emit("v_mov_b32", vec![hi(&d)], vec![h]);
        d
    }

    /// Copies a 64-bit value into the pair `d`.
    pub(super) fn copy64(&mut self, d: &Opnd, x: &Opnd) {
        self.emit("v_mov_b32", vec![lo(d)], vec![lo(x)]);
        self.emit("v_mov_b32", vec![hi(d)], vec![hi(x)]);
    }

    /// `m ? t : f` per lane on 64-bit values.
    pub(super) fn sel64(&mut self, m: Opnd, f: Opnd, t: Opnd) -> Opnd {
        let d = self.v2();
        self.emit("v_cndmask_b32_e64", vec![lo(&d)], vec![lo(&f), lo(&t), m.clone()]);
        self.emit("v_cndmask_b32_e64", vec![hi(&d)], vec![hi(&f), hi(&t), m]);
        d
    }

    pub(super) fn add64(&mut self, a: &Opnd, b: &Opnd) -> Opnd {
        let d = self.v2();
        self.emit("v_add_co_u32", vec![lo(&d), Opnd::Vcc], vec![lo(a), lo(b)]);
        self.emit("v_addc_co_u32", vec![hi(&d), Opnd::Vcc], vec![hi(a), hi(b), Opnd::Vcc]);
        d
    }

    pub(super) fn sub64(&mut self, a: &Opnd, b: &Opnd) -> Opnd {
        let d = self.v2();
        self.emit("v_sub_co_u32", vec![lo(&d), Opnd::Vcc], vec![lo(a), lo(b)]);
        self.emit("v_subb_co_u32", vec![hi(&d), Opnd::Vcc], vec![hi(a), hi(b), Opnd::Vcc]);
        d
    }

    /// Wrapping 64-bit product from 32-bit pieces: `lo*lo` (both halves) plus the two
    /// cross products in the high half.
    fn mul64(&mut self, a: &Opnd, b: &Opnd) -> Opnd {
        let l = self.vv("v_mul_lo_u32", vec![lo(a), lo(b)]);
        let h = self.vv("v_mul_hi_u32", vec![lo(a), lo(b)]);
        let c1 = self.vv("v_mul_lo_u32", vec![lo(a), hi(b)]);
        let c2 = self.vv("v_mul_lo_u32", vec![hi(a), lo(b)]);
        let h = self.vv("v_add_u32", vec![h, c1]);
        let h = self.vv("v_add_u32", vec![h, c2]);
        self.pair(l, h)
    }

    fn halves(&mut self, op: &'static str, a: &Opnd, b: &Opnd) -> Opnd {
        let l = self.vv(op, vec![lo(a), lo(b)]);
        let h = self.vv(op, vec![hi(a), hi(b)]);
        self.pair(l, h)
    }

    /// A 64-bit compare to a lane mask; `op` is one of eq ne lt le gt ge.
    pub(super) fn cmp64(&mut self, ty: Scalar, op: BinOp, a: &Opnd, b: &Opnd) -> Opnd {
        let idx = [BinOp::Eq, BinOp::Ne, BinOp::Lt, BinOp::Le, BinOp::Gt, BinOp::Ge]
            .iter()
            .position(|&o| o == op)
            .unwrap_or(0);
        const I: [&str; 6] = [
            "v_cmp_eq_u64_e64",
            "v_cmp_ne_u64_e64",
            "v_cmp_lt_i64_e64",
            "v_cmp_le_i64_e64",
            "v_cmp_gt_i64_e64",
            "v_cmp_ge_i64_e64",
        ];
        const U: [&str; 6] = [
            "v_cmp_eq_u64_e64",
            "v_cmp_ne_u64_e64",
            "v_cmp_lt_u64_e64",
            "v_cmp_le_u64_e64",
            "v_cmp_gt_u64_e64",
            "v_cmp_ge_u64_e64",
        ];
        // `neq` is the unordered not-equal: NaN != x holds, as in the interpreter.
        const F: [&str; 6] = [
            "v_cmp_eq_f64_e64",
            "v_cmp_neq_f64_e64",
            "v_cmp_lt_f64_e64",
            "v_cmp_le_f64_e64",
            "v_cmp_gt_f64_e64",
            "v_cmp_ge_f64_e64",
        ];
        let o = match ty {
            Scalar::F64 => F[idx],
            Scalar::I64 => I[idx],
            _ => U[idx],
        };
        self.mm(o, vec![a.clone(), b.clone()])
    }

    /// A binary operator on i64/u64/f64 values (comparisons excluded).
    pub(super) fn bin64(&mut self, ty: Scalar, op: BinOp, a: Opnd, b: Opnd) -> Result<Opnd, Error> {
        if ty == Scalar::F64 {
            return Ok(match op {
                BinOp::Add => self.ww("v_add_f64", vec![a, b]),
                BinOp::Sub => {
                    let nb = self.neg_f64(&b);
                    self.ww("v_add_f64", vec![a, nb])
                }
                BinOp::Mul => self.ww("v_mul_f64", vec![a, b]),
                BinOp::Div => self.fdiv64(&a, &b),
                _ => return super::unsupported(format!("f64 operator `{}`", op.symbol())),
            });
        }
        let signed = ty == Scalar::I64;
        Ok(match op {
            BinOp::Add => self.add64(&a, &b),
            BinOp::Sub => self.sub64(&a, &b),
            BinOp::Mul => self.mul64(&a, &b),
            BinOp::And => self.halves("v_and_b32", &a, &b),
            BinOp::Or => self.halves("v_or_b32", &a, &b),
            BinOp::Xor => self.halves("v_xor_b32", &a, &b),
            // The 64-bit shifts use the low 6 bits of the amount: the width modulo rule.
            BinOp::Shl => self.ww("v_lshlrev_b64", vec![lo(&b), a]),
            BinOp::Shr if signed => self.ww("v_ashrrev_i64", vec![lo(&b), a]),
            BinOp::Shr => self.ww("v_lshrrev_b64", vec![lo(&b), a]),
            BinOp::Div | BinOp::Rem => self.divrem64(signed, op == BinOp::Rem, &a, &b),
            _ => return super::unsupported(format!("{ty} operator `{}`", op.symbol())),
        })
    }

    /// `-x` of an f64: flip the sign bit.
    pub(super) fn neg_f64(&mut self, x: &Opnd) -> Opnd {
        let h = self.vv("v_xor_b32", vec![Opnd::Imm(0x8000_0000), hi(x)]);
        self.pair(lo(x), h)
    }

    pub(super) fn unary64(&mut self, ty: Scalar, op: UnOp, a: Val, s: bool) -> Val {
        if s && ty != Scalar::F64 {
            let a = self.sgpr64(a);
            let d = self.s2();
            if op == UnOp::BitNot {
                self.emit("s_not_b64", vec![d.clone()], vec![a]);
            } else {
                self.emit("s_sub_u32", vec![lo(&d)], vec![Opnd::Imm(0), lo(&a)]);
                self.emit("s_subb_u32", vec![hi(&d)], vec![Opnd::Imm(0), hi(&a)]);
            }
            return Val { o: d, s: true };
        }
        let a = self.w(a);
        Val { o: self.vunary64(ty, op, a), s: false }
    }

    fn vunary64(&mut self, ty: Scalar, op: UnOp, a: Opnd) -> Opnd {
        match (op, ty) {
            (UnOp::Neg, Scalar::F64) => self.neg_f64(&a),
            (UnOp::Neg, _) => {
                let z = self.const64(0);
                self.sub64(&z, &a)
            }
            _ => {
                let l = self.vv("v_not_b32", vec![lo(&a)]);
                let h = self.vv("v_not_b32", vec![hi(&a)]);
                self.pair(l, h)
            }
        }
    }

    /// Re-extends an 8/16-bit integer result held in 32 bits (sign for i8/i16, zero for
    /// u8/u16), so that it equals the interpreter's wrapped value; other types unchanged.
    pub(super) fn norm(&mut self, ty: Scalar, x: Val) -> Val {
        let (so, vo, arg): (&'static str, &'static str, Option<u32>) = match ty {
            Scalar::I8 => ("s_sext_i32_i8", "v_bfe_i32", Some(8)),
            Scalar::I16 => ("s_sext_i32_i16", "v_bfe_i32", Some(16)),
            Scalar::U8 => ("s_and_b32", "v_and_b32", Some(0xff)),
            Scalar::U16 => ("s_and_b32", "v_and_b32", Some(0xffff)),
            _ => return x,
        };
        let Some(arg) = arg else { return x };
        if x.s {
            let a = self.sgpr(x);
            let d = self.s();
            if so == "s_and_b32" {
                self.emit(so, vec![d.clone()], vec![a, Opnd::Imm(arg)]);
            } else {
                self.emit(so, vec![d.clone()], vec![a]);
            }
            Val { o: d, s: true }
        } else {
            let a = self.vgpr(x);
            let d = if vo == "v_bfe_i32" {
                self.vv(vo, vec![a, Opnd::Imm(0), Opnd::Imm(arg)])
            } else {
                self.vv(vo, vec![Opnd::Imm(arg), a])
            };
            Val { o: d, s: false }
        }
    }
}
