//! Intrinsics: min/max/abs on every type, fma, sqrt, floor/ceil/trunc.
//!
//! Float min/max follow IEEE minimumNumber/maximumNumber exactly (a NaN operand yields the
//! other, -0 < +0) with compares and selects rather than `v_min_f32`, whose zero-sign and
//! NaN behaviour depends on the mode.

use kiln_ir::{BinOp, Intrinsic, Scalar};

use super::{hi, is_wide, lo, two, unsupported, Isel, Val};
use crate::amdgpu::mir::Opnd;
use crate::amdgpu::Error;

impl Isel<'_> {
    pub(super) fn intrinsic(
        &mut self,
        op: Intrinsic,
        ty: Scalar,
        vals: Vec<Val>,
        s: bool,
    ) -> Result<Val, Error> {
        let v = |o: Opnd| Val { o, s: false };
        match (op, ty) {
            (Intrinsic::Min | Intrinsic::Max, Scalar::F32 | Scalar::F64) => {
                let [a, b] = two(vals);
                Ok(v(self.fminmax(ty, op == Intrinsic::Max, a, b)))
            }
            (Intrinsic::Min | Intrinsic::Max, _) if is_wide(ty) => {
                let [a, b] = two(vals);
                let cmp = if op == Intrinsic::Max { BinOp::Gt } else { BinOp::Lt };
                let m = self.cmp64(ty, cmp, &a.o, &b.o);
                Ok(v(self.sel64(m, b.o, a.o)))
            }
            (Intrinsic::Min | Intrinsic::Max, _) => {
                let [a, b] = two(vals);
                let signed = ty.is_signed();
                let (so, vo) = match (op, signed) {
                    (Intrinsic::Min, true) => ("s_min_i32", "v_min_i32"),
                    (Intrinsic::Min, false) => ("s_min_u32", "v_min_u32"),
                    (_, true) => ("s_max_i32", "v_max_i32"),
                    (_, false) => ("s_max_u32", "v_max_u32"),
                };
                self.bin(s, so, vo, a, b)
            }
            (Intrinsic::Abs, Scalar::F32) => {
                let [a] = one(vals);
                self.bin(false, "", "v_and_b32", Val { o: Opnd::Imm(0x7fff_ffff), s: true }, a)
            }
            (Intrinsic::Abs, Scalar::F64) => {
                let [a] = one(vals);
                Ok(v(self.abs_f64(&a.o)))
            }
            (Intrinsic::Abs, Scalar::I64) => {
                let [a] = one(vals);
                let neg = self.mm("v_cmp_gt_i32_e64", vec![Opnd::Imm(0), hi(&a.o)]);
                let z = self.const64(0);
                let n = self.sub64(&z, &a.o);
                Ok(v(self.sel64(neg, a.o, n)))
            }
            (Intrinsic::Abs, t) if t.is_signed() => {
                let [a] = one(vals);
                let n = self.bin(
                    s,
                    "s_sub_i32",
                    "v_sub_u32",
                    Val { o: Opnd::Imm(0), s: true },
                    a.clone(),
                )?;
                let r = self.bin(s, "s_max_i32", "v_max_i32", a, n)?;
                Ok(self.norm(ty, r))
            }
            (Intrinsic::Abs, _) => {
                let [a] = one(vals);
                Ok(a)
            }
            (Intrinsic::Fma, Scalar::F32) => {
                let ops: Vec<Opnd> = vals.into_iter().map(|x| self.vgpr(x)).collect();
                Ok(v(self.vv("v_fma_f32", ops)))
            }
            (Intrinsic::Fma, Scalar::F64) => {
                let ops: Vec<Opnd> = vals.into_iter().map(|x| x.o).collect();
                Ok(v(self.ww("v_fma_f64", ops)))
            }
            (Intrinsic::Sqrt, Scalar::F32) => {
                let [a] = one(vals);
                Ok(self.sqrt32(a))
            }
            (Intrinsic::Sqrt, Scalar::F64) => {
                let [a] = one(vals);
                Ok(v(self.sqrt64(&a.o)))
            }
            (Intrinsic::Floor | Intrinsic::Ceil | Intrinsic::Trunc, Scalar::F32 | Scalar::F64) => {
                let [a] = one(vals);
                let wide = ty == Scalar::F64;
                let name = match (op, wide) {
                    (Intrinsic::Floor, false) => "v_floor_f32",
                    (Intrinsic::Ceil, false) => "v_ceil_f32",
                    (_, false) => "v_trunc_f32",
                    (Intrinsic::Floor, true) => "v_floor_f64",
                    (Intrinsic::Ceil, true) => "v_ceil_f64",
                    (_, true) => "v_trunc_f64",
                };
                if wide {
                    Ok(v(self.ww(name, vec![a.o])))
                } else {
                    let a = self.vgpr(a);
                    Ok(v(self.vv(name, vec![a])))
                }
            }
            (Intrinsic::Exp | Intrinsic::Log | Intrinsic::Sin | Intrinsic::Cos, _) => {
                let [a] = one(vals);
                let x = if ty == Scalar::F64 {
                    self.vv("v_cvt_f32_f64", vec![a.o])
                } else {
                    self.vgpr(a)
                };
                let r = self.transcendental(op, x);
                Ok(v(if ty == Scalar::F64 { self.ww("v_cvt_f64_f32", vec![r]) } else { r }))
            }
            _ => unsupported(format!("intrinsic {} on {ty}", op.name())),
        }
    }

    /// `exp`, `log`, `sin`, `cos` of an f32 (approximate, as the IR allows): the hardware
    /// computes 2^x, log2 x, and sin/cos of x turns, so scale the argument or result; sin
    /// and cos reduce the turns to [0, 1) first, the range where `v_sin_f32` is accurate.
    /// f64 goes through f32.
    fn transcendental(&mut self, op: Intrinsic, x: Opnd) -> Opnd {
        const LOG2_E: u32 = 0x3fb8_aa3b;
        const LN_2: u32 = 0x3f31_7218;
        const INV_2PI: u32 = 0x3e22_f983;
        match op {
            Intrinsic::Exp => {
                let t = self.vv("v_mul_f32", vec![Opnd::Imm(LOG2_E), x]);
                self.vv("v_exp_f32", vec![t])
            }
            Intrinsic::Log => {
                let t = self.vv("v_log_f32", vec![x]);
                self.vv("v_mul_f32", vec![Opnd::Imm(LN_2), t])
            }
            _ => {
                let t = self.vv("v_mul_f32", vec![Opnd::Imm(INV_2PI), x]);
                let t = self.vv("v_fract_f32", vec![t]);
                self.vv(if op == Intrinsic::Sin { "v_sin_f32" } else { "v_cos_f32" }, vec![t])
            }
        }
    }

    /// IEEE minimumNumber / maximumNumber by compares and selects.
    fn fminmax(&mut self, ty: Scalar, max: bool, a: Val, b: Val) -> Opnd {
        if ty == Scalar::F64 {
            let (a, b) = (a.o, b.o);
            let pick = self.cmp64(ty, if max { BinOp::Gt } else { BinOp::Lt }, &a, &b);
            let r = self.sel64(pick, b.clone(), a.clone());
            let bnan = self.mm("v_cmp_u_f64_e64", vec![b.clone(), b.clone()]);
            let r = self.sel64(bnan, r, a.clone());
            // Equal: at most the zero signs differ; or/and of the high words picks -0 / +0.
            let eq = self.mm("v_cmp_eq_f64_e64", vec![a.clone(), b.clone()]);
            let h = self.vv(if max { "v_and_b32" } else { "v_or_b32" }, vec![hi(&a), hi(&b)]);
            let z = self.pair(lo(&a), h);
            return self.sel64(eq, r, z);
        }
        let (a, b) = (self.vgpr(a), self.vgpr(b));
        let cmp = if max { "v_cmp_gt_f32_e64" } else { "v_cmp_lt_f32_e64" };
        let pick = self.mm(cmp, vec![a.clone(), b.clone()]);
        let r = self.vv("v_cndmask_b32_e64", vec![b.clone(), a.clone(), pick]);
        let bnan = self.mm("v_cmp_u_f32_e64", vec![b.clone(), b.clone()]);
        let r = self.vv("v_cndmask_b32_e64", vec![r, a.clone(), bnan]);
        let eq = self.mm("v_cmp_eq_f32_e64", vec![a.clone(), b.clone()]);
        let z = self.vv(if max { "v_and_b32" } else { "v_or_b32" }, vec![a, b]);
        self.vv("v_cndmask_b32_e64", vec![r, z, eq])
    }
}

fn one(v: Vec<Val>) -> [Val; 1] {
    let mut it = v.into_iter();
    // Callers pass the operands of verified one-operand nodes.
    [it.next().expect("a one-operand node (checked by the verifier)")]
}
