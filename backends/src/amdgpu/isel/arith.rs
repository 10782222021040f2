//! Arithmetic selection: operators, shifts, constant division and casts.

use kiln_ir::{BinOp, Expr, Scalar};

use super::{check_scalar, unsupported, Isel, Val};
use crate::amdgpu::mir::Opnd;
use crate::amdgpu::Error;

impl Isel<'_> {
    pub(super) fn binary(&mut self, op: BinOp, a: &Expr, b: &Expr, s: bool) -> Result<Val, Error> {
        let at = Self::ty(a)?;
        let (av, bv) = (self.expr(a)?, self.expr(b)?);
        let signed = at == Scalar::I32;
        if op.is_comparison() {
            let idx = [BinOp::Eq, BinOp::Ne, BinOp::Lt, BinOp::Le, BinOp::Gt, BinOp::Ge]
                .iter()
                .position(|&o| o == op)
                .expect("every comparison operator is listed");
            if s {
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
                _ => return unsupported(format!("f32 operator `{}`", op.symbol())),
            };
            return self.bin(false, "", vo, av, bv);
        }
        // Integers (and bools for the logical operators).
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
                // Unsigned division by a power of two only.
                let p =
                    b.as_imm().and_then(|i| i.as_i128()).filter(|&v| v > 0 && (v & (v - 1)) == 0);
                match (p, at) {
                    (Some(p), Scalar::U32) if op == BinOp::Div => {
                        let sh = Val { o: Opnd::Imm(p.trailing_zeros()), s: true };
                        return self.shift(s, "s_lshr_b32", "v_lshrrev_b32", av, sh);
                    }
                    (Some(p), Scalar::U32) => {
                        let m = Val { o: Opnd::Imm((p - 1) as u32), s: true };
                        return self.bin(s, "s_and_b32", "v_and_b32", av, m);
                    }
                    (None, Scalar::U32) => {
                        if let Some(d) = b.as_imm().and_then(|i| i.as_i128()).filter(|&v| v > 1) {
                            let d = d as u32;
                            let q = self.udiv_const(s, av.clone(), d)?;
                            if op == BinOp::Div {
                                return Ok(q);
                            }
                            let dv = Val { o: Opnd::Imm(d), s: true };
                            let qd = if s {
                                self.bin(true, "s_mul_i32", "", q, dv)?
                            } else {
                                self.bin(false, "", "v_mul_lo_u32", q, dv)?
                            };
                            return self.bin(s, "s_sub_i32", "v_sub_u32", av, qd);
                        }
                        return unsupported("integer division by a non-constant");
                    }
                    (_, Scalar::I32) => {
                        let Some(d) = b.as_imm().and_then(|i| i.as_i128()).filter(|&v| v != 0)
                        else {
                            return unsupported("integer division by a non-constant");
                        };
                        let d = d as i32;
                        let q = self.sdiv_const(s, av.clone(), d)?;
                        if op == BinOp::Div {
                            return Ok(q);
                        }
                        let dv = Val { o: Opnd::Imm(d as u32), s: true };
                        let qd = if s {
                            self.bin(true, "s_mul_i32", "", q, dv)?
                        } else {
                            self.bin(false, "", "v_mul_lo_u32", q, dv)?
                        };
                        return self.bin(s, "s_sub_i32", "v_sub_u32", av, qd);
                    }
                    _ => return unsupported("integer division by a non-constant"),
                }
            }
            _ => unreachable!(),
        };
        if rev {
            self.shift(s, so, vo, av, bv)
        } else {
            self.bin(s, so, vo, av, bv)
        }
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

    pub(super) fn cast(&mut self, to: Scalar, a: &Expr, s: bool) -> Result<Val, Error> {
        check_scalar(to)?;
        let from = Self::ty(a)?;
        let x = self.expr(a)?;
        let cvt = |me: &mut Self, op: &'static str, x: Val| {
            let x = me.vgpr(x);
            let d = me.v();
            me.emit(op, vec![d.clone()], vec![x]);
            Val { o: d, s: false }
        };
        let r = match (from, to) {
            (f, t) if f == t => x,
            (Scalar::F32, Scalar::Bool) => {
                let x = self.vgpr(x);
                let m = self.s2();
                self.emit("v_cmp_neq_f32_e64", vec![m.clone()], vec![Opnd::Imm(0), x]);
                self.bool_from_mask(m)
            }
            (_, Scalar::Bool) => {
                if s {
                    let x = self.sgpr(x);
                    self.emit("s_cmp_lg_u32", vec![], vec![x, Opnd::Imm(0)]);
                    let d = self.s();
                    self.emit("s_cselect_b32", vec![d.clone()], vec![Opnd::Imm(1), Opnd::Imm(0)]);
                    Val { o: d, s: true }
                } else {
                    let m = self.mask(x)?;
                    self.bool_from_mask(m)
                }
            }
            (Scalar::F32, Scalar::I32) => cvt(self, "v_cvt_i32_f32", x),
            (Scalar::F32, _) => cvt(self, "v_cvt_u32_f32", x),
            (Scalar::I32, Scalar::F32) => cvt(self, "v_cvt_f32_i32", x),
            (_, Scalar::F32) => cvt(self, "v_cvt_f32_u32", x),
            _ => x, // bool/i32/u32 to i32/u32: same bits
        };
        Ok(self.to(r, s))
    }
}
