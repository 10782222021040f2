//! Arithmetic selection: operators, shifts, constant division and casts.

use kiln_ir::{BinOp, Expr, Scalar};

use super::{is_wide, unsupported, Isel, Val};
use crate::amdgpu::mir::Opnd;
use crate::amdgpu::Error;

impl Isel<'_> {
    pub(super) fn binary(&mut self, op: BinOp, a: &Expr, b: &Expr, s: bool) -> Result<Val, Error> {
        let at = Self::ty(a)?;
        let (av, bv) = (self.expr(a)?, self.expr(b)?);
        let r = self.binop(at, op, av, bv, s, b.as_imm().and_then(|i| i.as_i128()))?;
        Ok(self.to(r, s))
    }

    /// `a op b` on values of type `at`; `konst` is `b`'s value when it is a constant.
    pub(super) fn binop(
        &mut self,
        at: Scalar,
        op: BinOp,
        av: Val,
        bv: Val,
        s: bool,
        konst: Option<i128>,
    ) -> Result<Val, Error> {
        let signed = at.is_signed();
        if is_wide(at) {
            if s && at != Scalar::F64 {
                if op == BinOp::Shr {
                    return Ok(self.salu64_shr(signed, av, bv));
                }
                if let Some(r) = self.salu64(op, av.clone(), bv.clone()) {
                    return Ok(r);
                }
            }
            let (a, b) = (self.w(av), self.w(bv));
            if op.is_comparison() {
                let m = self.cmp64(at, op, &a, &b);
                return Ok(self.bool_from_mask(m));
            }
            return Ok(Val { o: self.bin64(at, op, a, b)?, s: false });
        }
        if op.is_comparison() {
            let idx = [BinOp::Eq, BinOp::Ne, BinOp::Lt, BinOp::Le, BinOp::Gt, BinOp::Ge]
                .iter()
                .position(|&o| o == op)
                .expect("every comparison operator is listed");
            // Float compares need VALU even for a uniform result (SALU compares are integer).
            if s && !at.is_float() {
                const U: [&str; 6] = [
                    "s_cmp_eq_u32",
                    "s_cmp_lg_u32",
                    "s_cmp_lt_u32",
                    "s_cmp_le_u32",
                    "s_cmp_gt_u32",
                    "s_cmp_ge_u32",
                ];
                const I: [&str; 6] = [
                    "s_cmp_eq_u32",
                    "s_cmp_lg_u32",
                    "s_cmp_lt_i32",
                    "s_cmp_le_i32",
                    "s_cmp_gt_i32",
                    "s_cmp_ge_i32",
                ];
                let (a, b) = self.salu_pair(av, bv);
                self.emit(if signed { I[idx] } else { U[idx] }, vec![], vec![a, b]);
                let d = self.s();
                self.emit("s_cselect_b32", vec![d.clone()], vec![Opnd::Imm(1), Opnd::Imm(0)]);
                return Ok(Val { o: d, s: true });
            }
            const U: [&str; 6] = [
                "v_cmp_eq_u32_e64",
                "v_cmp_ne_u32_e64",
                "v_cmp_lt_u32_e64",
                "v_cmp_le_u32_e64",
                "v_cmp_gt_u32_e64",
                "v_cmp_ge_u32_e64",
            ];
            const I: [&str; 6] = [
                "v_cmp_eq_u32_e64",
                "v_cmp_ne_u32_e64",
                "v_cmp_lt_i32_e64",
                "v_cmp_le_i32_e64",
                "v_cmp_gt_i32_e64",
                "v_cmp_ge_i32_e64",
            ];
            const F: [&str; 6] = [
                "v_cmp_eq_f32_e64",
                "v_cmp_neq_f32_e64",
                "v_cmp_lt_f32_e64",
                "v_cmp_le_f32_e64",
                "v_cmp_gt_f32_e64",
                "v_cmp_ge_f32_e64",
            ];
            let o = if at.is_float() {
                F[idx]
            } else if signed {
                I[idx]
            } else {
                U[idx]
            };
            let (a, b) = (self.vgpr(av), self.vgpr(bv));
            let m = self.s2();
            self.emit(o, vec![m.clone()], vec![a, b]);
            let r = self.bool_from_mask(m);
            return Ok(self.to(r, s));
        }
        if at.is_float() {
            let vo = match op {
                BinOp::Add => "v_add_f32",
                BinOp::Sub => "v_sub_f32",
                BinOp::Mul => "v_mul_f32",
                BinOp::Div => return Ok(self.fdiv32(av, bv)),
                _ => return unsupported(format!("f32 operator `{}`", op.symbol())),
            };
            return self.bin(false, "", vo, av, bv);
        }
        // Integers (and bools for the logical operators). 8/16-bit shifts take the amount
        // modulo their width explicitly (the 32-bit instructions take it modulo 32).
        let bits = at.bits();
        let bv = if matches!(op, BinOp::Shl | BinOp::Shr) && bits < 32 {
            let m = Val { o: Opnd::Imm(bits - 1), s: true };
            self.bin(s && bv.s, "s_and_b32", "v_and_b32", bv, m)?
        } else {
            bv
        };
        let (so, vo, rev) = match op {
            BinOp::Add => ("s_add_i32", "v_add_u32", false),
            BinOp::Sub => ("s_sub_i32", "v_sub_u32", false),
            BinOp::Mul => ("s_mul_i32", "v_mul_lo_u32", false),
            BinOp::And | BinOp::LogicAnd => ("s_and_b32", "v_and_b32", false),
            BinOp::Or | BinOp::LogicOr => ("s_or_b32", "v_or_b32", false),
            BinOp::Xor => ("s_xor_b32", "v_xor_b32", false),
            BinOp::Shl => ("s_lshl_b32", "v_lshlrev_b32", true),
            BinOp::Shr if signed => ("s_ashr_i32", "v_ashrrev_i32", true),
            BinOp::Shr => ("s_lshr_b32", "v_lshrrev_b32", true),
            BinOp::Div | BinOp::Rem => {
                let q = match (konst, signed) {
                    (Some(k), false) if k > 0 => self.udivrem_const(s, op, av, k as u32)?,
                    (Some(k), true) if k != 0 => self.sdivrem_const(s, op, av, k as i32)?,
                    _ => {
                        let (a, b) = (self.vgpr(av), self.vgpr(bv));
                        Val { o: self.divrem32(signed, op == BinOp::Rem, a, b), s: false }
                    }
                };
                return Ok(self.norm(at, q));
            }
            _ => unreachable!(),
        };
        let r = if rev { self.shift(s, so, vo, av, bv)? } else { self.bin(s, so, vo, av, bv)? };
        Ok(self.norm(at, r))
    }

    /// Unsigned `x / d` or `x % d` for a constant `d > 0`.
    fn udivrem_const(&mut self, s: bool, op: BinOp, av: Val, d: u32) -> Result<Val, Error> {
        if d.is_power_of_two() {
            return if op == BinOp::Div {
                let sh = Val { o: Opnd::Imm(d.trailing_zeros()), s: true };
                self.shift(s, "s_lshr_b32", "v_lshrrev_b32", av, sh)
            } else {
                let m = Val { o: Opnd::Imm(d - 1), s: true };
                self.bin(s, "s_and_b32", "v_and_b32", av, m)
            };
        }
        let q = self.udiv_const(s, av.clone(), d)?;
        if op == BinOp::Div {
            return Ok(q);
        }
        let dv = Val { o: Opnd::Imm(d), s: true };
        let qd = self.bin(s, "s_mul_i32", "v_mul_lo_u32", q, dv)?;
        self.bin(s, "s_sub_i32", "v_sub_u32", av, qd)
    }

    /// Signed `x / d` or `x % d` for a constant `d != 0` (the remainder takes the
    /// dividend's sign).
    fn sdivrem_const(&mut self, s: bool, op: BinOp, av: Val, d: i32) -> Result<Val, Error> {
        let q = self.sdiv_const(s, av.clone(), d)?;
        if op == BinOp::Div {
            return Ok(q);
        }
        let dv = Val { o: Opnd::Imm(d as u32), s: true };
        let qd = self.bin(s, "s_mul_i32", "v_mul_lo_u32", q, dv)?;
        self.bin(s, "s_sub_i32", "v_sub_u32", av, qd)
    }

    /// `x / d` for a u32 constant `d >= 2` that is not a power of two, by multiplication
    /// with a magic number (Granlund-Montgomery, round-up variant; exact for every `x`):
    /// `t = mulhi(x, m); q = (t + ((x - t) >> 1)) >> (l - 1)` with `l = ceil(log2 d)` and
    /// `m = floor(2^32 (2^l - d) / d) + 1`.
    pub(super) fn udiv_const(&mut self, s: bool, x: Val, d: u32) -> Result<Val, Error> {
        let l = 32 - (d - 1).leading_zeros();
        let m = ((1u128 << 32) * ((1u128 << l) - d as u128) / d as u128 + 1) as u32;
        let mv = Val { o: Opnd::Imm(m), s: true };
        let t = self.bin(s, "s_mul_hi_u32", "v_mul_hi_u32", x.clone(), mv)?;
        let diff = self.bin(s, "s_sub_i32", "v_sub_u32", x, t.clone())?;
        let one = Val { o: Opnd::Imm(1), s: true };
        let half = self.shift(s, "s_lshr_b32", "v_lshrrev_b32", diff, one)?;
        let sum = self.bin(s, "s_add_i32", "v_add_u32", t, half)?;
        let sh = Val { o: Opnd::Imm(l - 1), s: true };
        self.shift(s, "s_lshr_b32", "v_lshrrev_b32", sum, sh)
    }

    /// `x / d` for i32, truncating toward zero, for a nonzero constant `d`: the unsigned
    /// quotient of the magnitudes, negated when the signs differ (`MIN / -1` wraps to `MIN`).
    fn sdiv_const(&mut self, s: bool, x: Val, d: i32) -> Result<Val, Error> {
        let zero = Val { o: Opnd::Imm(0), s: true };
        let neg_x = self.bin(s, "s_sub_i32", "v_sub_u32", zero, x.clone())?;
        let mag = self.bin(s, "s_max_i32", "v_max_i32", x.clone(), neg_x)?;
        let ad = d.unsigned_abs();
        let q = if ad == 1 {
            mag
        } else if ad.is_power_of_two() {
            let sh = Val { o: Opnd::Imm(ad.trailing_zeros()), s: true };
            self.shift(s, "s_lshr_b32", "v_lshrrev_b32", mag, sh)?
        } else {
            self.udiv_const(s, mag, ad)?
        };
        // sign = x >> 31 (0 or -1), flipped when d < 0; q = (q ^ sign) - sign.
        let k31 = Val { o: Opnd::Imm(31), s: true };
        let mut sign = self.shift(s, "s_ashr_i32", "v_ashrrev_i32", x, k31)?;
        if d < 0 {
            let ones = Val { o: Opnd::Imm(u32::MAX), s: true };
            sign = self.bin(s, "s_xor_b32", "v_xor_b32", sign, ones)?;
        }
        let t = self.bin(s, "s_xor_b32", "v_xor_b32", q, sign.clone())?;
        self.bin(s, "s_sub_i32", "v_sub_u32", t, sign)
    }

    /// Shifts: SALU `so d, a, b`; VALU `vo d, b, a` (reversed operands).
    pub(super) fn shift(
        &mut self,
        s: bool,
        so: &'static str,
        vo: &'static str,
        a: Val,
        b: Val,
    ) -> Result<Val, Error> {
        if s {
            self.bin(true, so, "", a, b)
        } else {
            self.bin(false, "", vo, b, a)
        }
    }
}
