//! Casts among all scalar types with the interpreter's exact semantics: integer casts wrap,
//! float to integer truncates and saturates with NaN giving 0, conversions to float round to
//! nearest even once, `bool` is `!= 0`. Where one gfx9 instruction does not do exactly that,
//! a fix-up sequence follows it.

use kiln_ir::{Expr, Scalar};

use super::{hi, is_wide, lo, Isel, Val};
use crate::amdgpu::mir::Opnd;
use crate::amdgpu::Error;

/// The class a value of a type is computed in, for casts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum K {
    Bool,
    /// 8/16/32-bit integer in one register.
    I32 {
        signed: bool,
    },
    /// 64-bit integer in a pair.
    I64 {
        signed: bool,
    },
    /// f32, or f16 once widened to f32 (an f16 is held as its 16 bits).
    F32,
    F64,
}

fn kind(t: Scalar) -> K {
    match t {
        Scalar::Bool => K::Bool,
        Scalar::I64 => K::I64 { signed: true },
        Scalar::U64 => K::I64 { signed: false },
        Scalar::F16 | Scalar::F32 => K::F32,
        Scalar::F64 => K::F64,
        t => K::I32 { signed: t.is_signed() },
    }
}

impl Isel<'_> {
    pub(super) fn cast(&mut self, to: Scalar, a: &Expr, s: bool) -> Result<Val, Error> {
        let from = Self::ty(a)?;
        let x = self.expr(a)?;
        let r = self.convert(from, to, x, s)?;
        Ok(self.to(r, s && !is_wide(to)))
    }

    fn cvt(&mut self, op: &'static str, x: Val) -> Val {
        let x = self.vgpr(x);
        Val { o: self.vv(op, vec![x]), s: false }
    }

    fn cvt64(&mut self, op: &'static str, x: Opnd) -> Opnd {
        self.ww(op, vec![x])
    }

    /// Converts `x` of type `from` to `to`.
    pub(super) fn convert(
        &mut self,
        from: Scalar,
        to: Scalar,
        x: Val,
        s: bool,
    ) -> Result<Val, Error> {
        if from == to {
            return Ok(x);
        }
        // An f16 is held as its bits, so that moving it keeps every bit (a signalling NaN
        // included); a conversion starts by widening it to f32 (exact, NaNs made quiet).
        let (from, x) = if from == Scalar::F16 {
            (Scalar::F32, self.cvt("v_cvt_f32_f16", x))
        } else {
            (from, x)
        };
        // Conversions of 64-bit values are VALU sequences.
        let x = if is_wide(from) { Val { o: self.w(x), s: false } } else { x };
        let v = |o: Opnd| Val { o, s: false };
        Ok(match (kind(from), kind(to)) {
            // To bool: != 0 (NaN is true: `neq` is unordered).
            (K::F32, K::Bool) => {
                let x = self.vgpr(x);
                let m = self.mm("v_cmp_neq_f32_e64", vec![Opnd::Imm(0), x]);
                self.bool_from_mask(m)
            }
            (K::F64, K::Bool) => {
                let m = self.mm("v_cmp_neq_f64_e64", vec![Opnd::Imm(0), x.o]);
                self.bool_from_mask(m)
            }
            (K::I64 { .. }, K::Bool) => {
                let m = self.mm("v_cmp_ne_u64_e64", vec![Opnd::Imm(0), x.o]);
                self.bool_from_mask(m)
            }
            (_, K::Bool) => {
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
            // Among 32-bit-class integers (and from bool): same bits, re-extended.
            (K::Bool | K::I32 { .. }, K::I32 { .. }) => self.norm(to, x),
            (K::Bool, K::I64 { .. }) | (K::I32 { signed: false }, K::I64 { .. }) => {
                let x = self.vgpr(x);
                v(self.pair(x, Opnd::Imm(0)))
            }
            (K::I32 { signed: true }, K::I64 { .. }) => {
                let x = self.vgpr(x);
                let h = self.vv("v_ashrrev_i32", vec![Opnd::Imm(31), x.clone()]);
                v(self.pair(x, h))
            }
            (K::I64 { .. }, K::I64 { .. }) => x,
            (K::I64 { .. }, K::I32 { .. }) => {
                let l = self.vv("v_mov_b32", vec![lo(&x.o)]);
                self.norm(to, v(l))
            }
            // Integers to f32 (f16 rounds again below, see `round_f16`).
            (K::Bool, K::F32) | (K::I32 { signed: false }, K::F32) => {
                let r = self.cvt("v_cvt_f32_u32", x);
                self.round_f16(to, r)
            }
            (K::I32 { signed: true }, K::F32) => {
                let r = self.cvt("v_cvt_f32_i32", x);
                self.round_f16(to, r)
            }
            (K::I64 { signed }, K::F32) => {
                let r = v(self.i64_to_f32(signed, &x.o));
                self.round_f16(to, r)
            }
            (K::Bool, K::F64) | (K::I32 { signed: false }, K::F64) => {
                let x = self.vgpr(x);
                v(self.cvt64("v_cvt_f64_u32", x))
            }
            (K::I32 { signed: true }, K::F64) => {
                let x = self.vgpr(x);
                v(self.cvt64("v_cvt_f64_i32", x))
            }
            (K::I64 { signed }, K::F64) => v(self.i64_to_f64(signed, &x.o)),
            // Floats to floats.
            (K::F32, K::F32) => self.round_f16(to, x),
            (K::F32, K::F64) => {
                let x = self.vgpr(x);
                v(self.cvt64("v_cvt_f64_f32", x))
            }
            (K::F64, K::F32) if to == Scalar::F16 => {
                let r = v(self.f64_to_f32_odd(&x.o));
                self.round_f16(to, r)
            }
            (K::F64, K::F32) => v(self.vv("v_cvt_f32_f64", vec![x.o])),
            // Floats to integers: truncate, saturate, NaN -> 0.
            (K::F32, K::I32 { signed }) => {
                let r = self.cvt(if signed { "v_cvt_i32_f32" } else { "v_cvt_u32_f32" }, x);
                self.clamp_narrow(to, r)
            }
            (K::F64, K::I32 { signed }) => {
                let op = if signed { "v_cvt_i32_f64" } else { "v_cvt_u32_f64" };
                let r = v(self.vv(op, vec![x.o]));
                self.clamp_narrow(to, r)
            }
            (K::F32, K::I64 { signed }) => {
                let x = self.vgpr(x);
                let d = self.cvt64("v_cvt_f64_f32", x);
                v(self.f64_to_i64(signed, &d))
            }
            (K::F64, K::I64 { signed }) => v(self.f64_to_i64(signed, &x.o)),
            (K::F64, K::F64) => x,
        })
    }

    /// For an f16 destination: rounds the f32 `x` to f16, giving its bits. Int-to-f16 through
    /// f32 is exact: where the int-to-f32 step rounds (magnitude above 2^24) the f16 result
    /// is infinite either way.
    fn round_f16(&mut self, to: Scalar, x: Val) -> Val {
        if to != Scalar::F16 {
            return x;
        }
        self.cvt("v_cvt_f16_f32", x)
    }

    /// f64 to f32 rounded to odd (truncate, then set the last bit when inexact): a second
    /// rounding to f16 then equals a single rounding from f64.
    fn f64_to_f32_odd(&mut self, x: &Opnd) -> Opnd {
        let t = self.vv("v_cvt_f32_f64", vec![x.clone()]);
        let back = self.cvt64("v_cvt_f64_f32", t.clone());
        let ax = self.abs_f64(x);
        let ab = self.abs_f64(&back);
        // Rounded away from zero: step the magnitude down by one ulp (bits - 1).
        let away = self.mm("v_cmp_gt_f64_e64", vec![ab, ax]);
        let dec = self.vv("v_subrev_u32", vec![Opnd::Imm(1), t.clone()]);
        let t = self.vv("v_cndmask_b32_e64", vec![t, dec, away]);
        let inexact = self.mm("v_cmp_neq_f64_e64", vec![back, x.clone()]);
        let odd = self.vv("v_or_b32", vec![Opnd::Imm(1), t.clone()]);
        self.vv("v_cndmask_b32_e64", vec![t, odd, inexact])
    }

    /// `|x|` of an f64.
    pub(super) fn abs_f64(&mut self, x: &Opnd) -> Opnd {
        let h = self.vv("v_and_b32", vec![Opnd::Imm(0x7fff_ffff), hi(x)]);
        self.pair(lo(x), h)
    }

    /// Saturates a 32-bit conversion result to an 8/16-bit type's range.
    fn clamp_narrow(&mut self, to: Scalar, x: Val) -> Val {
        let (lo_, hi_) = match to {
            Scalar::I8 => (-128i32, 127i32),
            Scalar::I16 => (-32768, 32767),
            Scalar::U8 => (0, 255),
            Scalar::U16 => (0, 65535),
            _ => return x,
        };
        let x = self.vgpr(x);
        let op = if to.is_signed() { "v_med3_i32" } else { "v_med3_u32" };
        let (l, h) = (self.vv("v_mov_b32", vec![Opnd::Imm(lo_ as u32)]), Opnd::Imm(hi_ as u32));
        let h = self.vv("v_mov_b32", vec![h]);
        Val { o: self.vv(op, vec![x, l, h]), s: false }
    }

    /// i64/u64 to f64: `hi * 2^32 + lo` with one rounding (both terms are exact).
    fn i64_to_f64(&mut self, signed: bool, x: &Opnd) -> Opnd {
        let h = self.cvt64(if signed { "v_cvt_f64_i32" } else { "v_cvt_f64_u32" }, hi(x));
        let h = self.ww("v_ldexp_f64", vec![h, Opnd::Imm(32)]);
        let l = self.cvt64("v_cvt_f64_u32", lo(x));
        self.ww("v_add_f64", vec![h, l])
    }

    /// i64/u64 to f32 with one rounding: normalize the magnitude to the top bit, keep 32 bits
    /// with a sticky bit for the rest (so the u32-to-f32 rounding is the right one), convert
    /// and scale back by a power of two (exact).
    fn i64_to_f32(&mut self, signed: bool, x: &Opnd) -> Opnd {
        let (mag, neg) = if signed {
            let neg = self.mm("v_cmp_gt_i32_e64", vec![Opnd::Imm(0), hi(x)]);
            let z = self.const64(0);
            let n = self.sub64(&z, x);
            (self.sel64(neg.clone(), x.clone(), n), Some(neg))
        } else {
            (x.clone(), None)
        };
        let zh = self.mm("v_cmp_eq_u32_e64", vec![Opnd::Imm(0), hi(&mag)]);
        let ch = self.vv("v_ffbh_u32", vec![hi(&mag)]);
        let cl = self.vv("v_ffbh_u32", vec![lo(&mag)]);
        let cl = self.vv("v_add_u32", vec![Opnd::Imm(32), cl]);
        // All zero: ffbh gives -1, so the shift is 31 and the result 0 anyway.
        let sh = self.vv("v_cndmask_b32_e64", vec![ch, cl, zh]);
        let n = self.ww("v_lshlrev_b64", vec![sh.clone(), mag]);
        let sticky = self.mm("v_cmp_ne_u32_e64", vec![Opnd::Imm(0), lo(&n)]);
        let bit = self.vv("v_cndmask_b32_e64", vec![Opnd::Imm(0), Opnd::Imm(1), sticky]);
        let top = self.vv("v_or_b32", vec![bit, hi(&n)]);
        let f = self.vv("v_cvt_f32_u32", vec![top]);
        let e = self.vv("v_sub_u32", vec![Opnd::Imm(32), sh]);
        let f = self.vv("v_ldexp_f32", vec![f, e]);
        match neg {
            Some(neg) => {
                let nf = self.vv("v_xor_b32", vec![Opnd::Imm(0x8000_0000), f.clone()]);
                self.vv("v_cndmask_b32_e64", vec![f, nf, neg])
            }
            None => f,
        }
    }

    /// f64 to i64/u64: truncate, split into `hi * 2^32 + lo` with exact f64 steps, convert
    /// the halves; then saturate and map NaN to 0 explicitly.
    fn f64_to_i64(&mut self, signed: bool, x: &Opnd) -> Opnd {
        let t = self.ww("v_trunc_f64", vec![x.clone()]);
        let m = if signed { self.abs_f64(&t) } else { t.clone() };
        // Negative (unsigned) or NaN magnitudes become 0 here; the overrides below fix the rest.
        let pos = self.mm("v_cmp_gt_f64_e64", vec![m.clone(), Opnd::Imm(0)]);
        let z = self.const64(0);
        let m = self.sel64(pos, z.clone(), m);
        let k = self.const64((2f64).powi(-32).to_bits());
        let h = self.ww("v_mul_f64", vec![m.clone(), k]);
        let h = self.ww("v_floor_f64", vec![h]);
        let k = self.const64((-(2f64).powi(32)).to_bits());
        let l = self.ww("v_fma_f64", vec![h.clone(), k, m.clone()]);
        let hv = self.vv("v_cvt_u32_f64", vec![h]);
        let lv = self.vv("v_cvt_u32_f64", vec![l]);
        let r = self.pair(lv, hv);
        let limit = if signed { 63 } else { 64 };
        let lim = self.const64((2f64).powi(limit).to_bits());
        let big = self.mm("v_cmp_ge_f64_e64", vec![m, lim]);
        if !signed {
            let ones = self.const64(u64::MAX);
            return self.sel64(big, r, ones);
        }
        let neg = self.mm("v_cmp_lt_f64_e64", vec![t.clone(), Opnd::Imm(0)]);
        let nr = self.sub64(&z, &r);
        let r = self.sel64(neg.clone(), r, nr);
        let (mx, mn) = (self.const64(i64::MAX as u64), self.const64(i64::MIN as u64));
        let sat = self.sel64(neg, mx, mn);
        let r = self.sel64(big, r, sat);
        let nan = self.mm("v_cmp_u_f64_e64", vec![t.clone(), t]);
        self.sel64(nan, r, z)
    }
}
