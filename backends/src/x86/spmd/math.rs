//! `exp`, `log`, `sin` and `cos` of f32 lanes: the operation sequences of
//! `kiln_ir::eval::math`, instruction for instruction, so that every lane gets the
//! interpreter's bits. (The comments name the step of the scalar definition each group
//! of instructions is.)
//!
//! * The same IEEE operations in the same order, with the same roundings: `fma` only where
//!   the definition calls `mul_add` (`vfmadd*`/`vfnmadd*`, one rounding), rounding to
//!   integral ties to even (`vroundps`/`vroundpd` with mode 8), conversions of values that
//!   are integral already. `max`/`min` of the definition are the instructions' own rule
//!   (`maxps`/`minps` pick their second operand on a NaN), and additions and products are
//!   commutative bit for bit on the non-NaN values they see here.
//! * `sin`/`cos` work in f64, four lanes at a time (two halves of the eight); a half with a
//!   lane of |x| >= 2^28 (or ±inf) also runs the huge-argument reduction, whose table rows
//!   are gathered (the table's address is in the launch context, so the code stays
//!   position-independent), and blends it in for those lanes.
//! * Special values are blended in at the end, as the definition's `if`s pick them.
//!
//! Registers: the argument arrives in `ymm{d}`, the result is left there, and
//! `ymm{d+1}..ymm{d+need-1}` are clobbered ([`need`]); scratch values live in fresh vector
//! frame slots. Only `rax` and `r11` of the general registers are used (scratch).

use iced_x86::code_asm::*;
use kiln_ir::eval::math as m;
use kiln_ir::{Expr, ExprNode, Intrinsic, Scalar, Type};

use super::{has_fma, no, CMP_EQ_OQ, CMP_GE_OQ, CMP_LT_OQ, CMP_UNORD_Q, R, V, XMM, YMM};
use crate::x86::rt;

/// Registers (the result's included) the 8-lane code of `op` needs.
pub(super) fn need(op: Intrinsic) -> usize {
    if op == Intrinsic::Exp {
        4
    } else {
        5
    }
}

/// `vroundps`/`vroundpd` modes: to nearest even, and toward -inf (no precision exception).
const NEAREST: i32 = 0x08;
const FLOOR: i32 = 0x09;

/// The argument of `e` if it is one of the functions this module vectorizes, on f32.
pub(super) fn lanes_math(e: &Expr) -> Option<(Intrinsic, &Expr)> {
    let ExprNode::Intrinsic { op, args } = e.node() else { return None };
    let ok = matches!(op, Intrinsic::Exp | Intrinsic::Log | Intrinsic::Sin | Intrinsic::Cos)
        && e.ty() == Type::Scalar(Scalar::F32)
        && args.len() == 1;
    ok.then(|| (*op, &args[0]))
}

impl V {
    /// `e`, which is `op(a)`, into `ymm{d}` (see the module docs for the registers it uses).
    /// A `sin` and a `cos` of one argument that `near.rs` pairs share everything but the
    /// last steps: the first computes both, the second reads its value from a slot.
    pub(super) fn math(&mut self, e: &Expr, op: Intrinsic, a: &Expr, d: usize) -> R<()> {
        if !has_fma() {
            return no(format!("`{}` (this CPU has no FMA)", op.name()));
        }
        self.fma = true;
        if matches!(op, Intrinsic::Sin | Intrinsic::Cos) && self.shared_value(e, d)? {
            return Ok(());
        }
        self.expr(a, d)?;
        match op {
            Intrinsic::Exp => self.exp(d),
            Intrinsic::Log => self.log(d),
            Intrinsic::Sin => {
                let other = self.share_slot(e);
                self.sin_cos(d, 0, other)
            }
            _ => {
                let other = self.share_slot(e);
                self.sin_cos(d, 1, other)
            }
        }
    }

    /// An f32 constant in every lane, as a memory operand.
    fn cf(&mut self, v: f32) -> AsmMemoryOperand {
        self.ci(v.to_bits())
    }

    /// A 32-bit pattern in every lane.
    fn ci(&mut self, bits: u32) -> AsmMemoryOperand {
        ymmword_ptr(r15 + self.imm_slot(bits))
    }

    /// The same, 16 bytes (for 4-lane integer steps).
    fn ci4(&mut self, bits: u32) -> AsmMemoryOperand {
        xmmword_ptr(r15 + self.imm_slot(bits))
    }

    /// An f64 constant (or 64-bit pattern) in every lane.
    fn cd(&mut self, bits: u64) -> AsmMemoryOperand {
        ymmword_ptr(r15 + self.const_slot((bits, 4)))
    }

    fn exp(&mut self, d: usize) -> R<()> {
        let (x, k, p, t) = (YMM[d], YMM[d + 1], YMM[d + 2], YMM[d + 3]);
        // xc = min(max(x, LO), HI); k = round(xc * log2 e). With the constant first,
        // `vmaxps`/`vminps` give the second operand, x, where it is NaN (and the
        // interpreter's `maxps`/`minps` values otherwise, as neither bound is a zero):
        // a NaN argument then flows through every step below as the first NaN operand
        // (all of them are x, quieted, or x itself), the integer steps turn its `k` into
        // the factors 2^0, and the result is x quieted, the interpreter's `exp` of a NaN,
        // with no blend at the end.
        let (lo, hi, l2e) = (self.cf(m::EXP_LO), self.cf(m::EXP_HI), self.cf(m::LOG2E));
        self.a.vmovups(t, lo)?;
        self.a.vmaxps(x, t, x)?;
        self.a.vmovups(t, hi)?;
        self.a.vminps(x, t, x)?;
        self.a.vmulps(k, x, l2e)?;
        self.a.vroundps(k, k, NEAREST)?;
        // r = fma(-k, ln2_hi, xc); r = fma(-k, ln2_lo, r)
        let (l2h, l2l) = (self.cf(m::EXP_LN2_HI), self.cf(m::EXP_LN2_LO));
        self.a.vfnmadd231ps(x, k, l2h)?;
        self.a.vfnmadd231ps(x, k, l2l)?;
        // p = P(r) by Horner with fma; y = fma(p, r*r, r) + 1
        let p0 = self.cf(m::EXP_P[0]);
        self.a.vmovups(p, p0)?;
        for &c in &m::EXP_P[1..] {
            let c = self.cf(c);
            self.a.vfmadd213ps(p, x, c)?;
        }
        self.a.vmulps(t, x, x)?;
        self.a.vfmadd213ps(p, t, x)?;
        let one = self.cf(1.0);
        self.a.vaddps(p, p, one)?;
        // y * 2^k1 * 2^(k - k1), k1 = k >> 1, both exponents biased at once: with
        // u = k + 2 * 127, u >> 1 is k1 + 127 and u - (u >> 1) is k - k1 + 127. (A NaN's k
        // converts to 0x8000_0000, whose u gives the bits of 1.0 twice below.)
        let bias2 = self.ci(254);
        self.a.vcvtps2dq(k, k)?;
        self.a.vpaddd(k, k, bias2)?;
        self.a.vpsrad(t, k, 1)?;
        self.a.vpsubd(k, k, t)?;
        self.a.vpslld(t, t, 23)?;
        self.a.vpslld(k, k, 23)?;
        self.a.vmulps(p, p, t)?;
        self.a.vmulps(x, p, k)?;
        Ok(())
    }

    /// `ymm{d}` = `ymm{d}` (the argument) quieted where it is NaN, else `ymm{res}`;
    /// clobbers `ymm{t}`.
    fn quiet_nan_blend(&mut self, d: usize, res: usize, t: usize) -> R<()> {
        let (x, t) = (YMM[d], YMM[t]);
        let qbit = self.ci(0x0040_0000);
        self.a.vcmpps(t, x, x, CMP_UNORD_Q)?;
        self.a.vorps(x, x, qbit)?;
        self.a.vblendvps(x, YMM[res], x, t)?;
        Ok(())
    }

    fn log(&mut self, d: usize) -> R<()> {
        let (x, b, c, e, f) = (YMM[d], YMM[d + 1], YMM[d + 2], YMM[d + 3], YMM[d + 4]);
        let (sx, sk) = (self.slot(), self.slot());
        self.a.vmovups(ymmword_ptr(r15 + sx), x)?;
        // Below the normal range: x * 2^25, k adjusted by -25.
        let (tiny, scale, m25) =
            (self.cf(m::LOG_TINY), self.cf(33_554_432.0), self.ci(-25i32 as u32));
        self.a.vcmpps(b, x, tiny, CMP_LT_OQ)?;
        self.a.vmulps(c, x, scale)?;
        self.a.vblendvps(x, x, c, b)?;
        self.a.vandps(c, b, m25)?;
        // ix = bits + (1.0 - sqrt(1/2)); k = (ix >> 23) - 127 + adj; m = low bits + sqrt(1/2)
        let off = self.ci(0x3f80_0000 - m::LOG_SQRT_HALF_BITS);
        let (bias, mant, half) =
            (self.ci(0x7f), self.ci(0x007f_ffff), self.ci(m::LOG_SQRT_HALF_BITS));
        self.a.vpaddd(x, x, off)?;
        self.a.vpsrad(e, x, 23)?;
        self.a.vpsubd(e, e, bias)?;
        self.a.vpaddd(e, e, c)?;
        self.a.vcvtdq2ps(e, e)?;
        self.a.vmovups(ymmword_ptr(r15 + sk), e)?;
        self.a.vpand(x, x, mant)?;
        self.a.vpaddd(x, x, half)?;
        // f = m - 1; s = f / (2 + f); z = s*s; w = z*z
        let (one, two) = (self.cf(1.0), self.cf(2.0));
        self.a.vsubps(x, x, one)?;
        self.a.vaddps(b, x, two)?;
        self.a.vdivps(b, x, b)?;
        self.a.vmulps(c, b, b)?;
        self.a.vmulps(f, c, c)?;
        // t1 = w * (LG1 + w*LG3); t2 = z * (LG0 + w*LG2); R = t2 + t1
        let lg = m::LOG_LG.map(|v| v.to_bits());
        let (lg0, lg1, lg2, lg3) = (self.ci(lg[0]), self.ci(lg[1]), self.ci(lg[2]), self.ci(lg[3]));
        self.a.vmulps(e, f, lg3)?;
        self.a.vaddps(e, e, lg1)?;
        self.a.vmulps(e, f, e)?;
        self.a.vmulps(f, f, lg2)?;
        self.a.vaddps(f, f, lg0)?;
        self.a.vmulps(f, c, f)?;
        self.a.vaddps(f, f, e)?;
        // hfsq = 0.5*f*f; s*(hfsq+R) + dk*ln2_lo - hfsq + f + dk*ln2_hi
        let h = self.cf(0.5);
        self.a.vmulps(c, x, h)?;
        self.a.vmulps(c, c, x)?;
        self.a.vaddps(e, c, f)?;
        self.a.vmulps(e, b, e)?;
        let (l2l, l2h) = (self.cf(m::LOG_LN2_LO), self.cf(m::LOG_LN2_HI));
        self.a.vmovups(b, ymmword_ptr(r15 + sk))?;
        self.a.vmulps(f, b, l2l)?;
        self.a.vaddps(e, e, f)?;
        self.a.vsubps(e, e, c)?;
        self.a.vaddps(e, e, x)?;
        self.a.vmulps(f, b, l2h)?;
        self.a.vaddps(e, e, f)?;
        // +inf: +inf; ±0: -inf; below 0: the default NaN; NaN: itself, quieted.
        let (inf, ninf, zero) = (self.cf(f32::INFINITY), self.cf(f32::NEG_INFINITY), self.cf(0.0));
        let dnan = self.ci(m::DEFAULT_NAN_BITS);
        self.a.vmovups(x, ymmword_ptr(r15 + sx))?;
        self.a.vcmpps(b, x, inf, CMP_EQ_OQ)?;
        self.a.vblendvps(e, e, inf, b)?;
        self.a.vcmpps(b, x, zero, CMP_EQ_OQ)?;
        self.a.vblendvps(e, e, ninf, b)?;
        self.a.vcmpps(b, x, zero, CMP_LT_OQ)?;
        self.a.vblendvps(e, e, dnan, b)?;
        self.quiet_nan_blend(d, d + 3, d + 1)
    }

    /// `sin` (`shift` 0) or `cos` (`shift` 1): see `kiln_ir::eval::math::sin_cos`; with
    /// `other`, the other one of the same argument into that slot too.
    fn sin_cos(&mut self, d: usize, shift: u32, other: Option<i32>) -> R<()> {
        let x = YMM[d];
        // Slots: the argument, the result, the huge-lane mask, the main path's r (f64) and
        // n (i32), the huge path's k (i32).
        let (sx, sres, smask, sr, sn, sk) =
            (self.slot(), self.slot(), self.slot(), self.slot(), self.slot(), self.slot());
        self.a.vmovups(ymmword_ptr(r15 + sx), x)?;
        let (abs, huge) = (self.ci(0x7fff_ffff), self.cf(m::SINCOS_HUGE));
        self.a.vandps(YMM[d + 1], x, abs)?;
        self.a.vcmpps(YMM[d + 1], YMM[d + 1], huge, CMP_GE_OQ)?;
        self.a.vmovups(ymmword_ptr(r15 + smask), YMM[d + 1])?;
        self.a.vmovmskps(r11d, YMM[d + 1])?;
        for h in 0..2 {
            self.sin_cos_half(d, shift, h, [sx, sres, smask, sr, sn, sk], other)?;
        }
        if let Some(o) = other {
            self.sin_cos_special(d, shift ^ 1, o, sx)?;
            self.a.vmovups(ymmword_ptr(r15 + o), x)?;
        }
        self.sin_cos_special(d, shift, sres, sx)
    }

    /// `ymm{d}` = the result of `sin` (`shift` 0) or `cos` in slot `res` with the special
    /// values of the argument (in slot `sx`) blended in; clobbers `ymm{d+1}..ymm{d+3}`.
    fn sin_cos_special(&mut self, d: usize, shift: u32, res: i32, sx: i32) -> R<()> {
        let x = YMM[d];
        self.a.vmovups(x, ymmword_ptr(r15 + res))?;
        // sin(±0) = ±0; ±inf: the default NaN; NaN: itself, quieted.
        let t = YMM[d + 2];
        self.a.vmovups(YMM[d + 1], ymmword_ptr(r15 + sx))?;
        if shift == 0 {
            let zero = self.cf(0.0);
            self.a.vcmpps(t, YMM[d + 1], zero, CMP_EQ_OQ)?;
            self.a.vblendvps(x, x, YMM[d + 1], t)?;
        }
        let (abs, inf, dnan) =
            (self.ci(0x7fff_ffff), self.cf(f32::INFINITY), self.ci(m::DEFAULT_NAN_BITS));
        self.a.vandps(t, YMM[d + 1], abs)?;
        self.a.vcmpps(t, t, inf, CMP_EQ_OQ)?;
        self.a.vblendvps(x, x, dnan, t)?;
        self.a.vmovaps(YMM[d + 3], x)?;
        self.a.vmovaps(x, YMM[d + 1])?;
        self.quiet_nan_blend(d, d + 3, d + 2)
    }

    /// Lanes `4h..4h+4` of `sin_cos`, in f64, into the result slot (and the other
    /// function's into `other`).
    fn sin_cos_half(
        &mut self,
        d: usize,
        shift: u32,
        h: i32,
        slots: [i32; 6],
        other: Option<i32>,
    ) -> R<()> {
        let [sx, sres, smask, sr, sn, sk] = slots;
        let (sx, sres, smask) = (sx + 16 * h, sres + 16 * h, smask + 16 * h);
        let (r0, r1, r2, r3, r4) = (YMM[d], YMM[d + 1], YMM[d + 2], YMM[d + 3], YMM[d + 4]);
        let (x0, x1, x2, x4) = (XMM[d], XMM[d + 1], XMM[d + 2], XMM[d + 4]);
        let sign = self.cd(1 << 63);
        // Main path: k = round(x * 2/pi); r = x - k pi/2 by three fma.
        let two_pi = self.cd(m::TWO_OVER_PI.to_bits());
        let pio2 = m::SINCOS_PIO2.map(|v| self.cd(v.to_bits()));
        self.a.vcvtps2pd(r0, xmmword_ptr(r15 + sx))?;
        self.a.vmulpd(r1, r0, two_pi)?;
        self.a.vroundpd(r1, r1, NEAREST)?;
        for p in pio2 {
            self.a.vfnmadd231pd(r0, r1, p)?;
        }
        self.a.vcvtpd2dq(x2, r1)?;
        // Huge lanes in this half?
        let mut poly = self.a.create_label();
        self.a.test(r11d, 0xf << (4 * h))?;
        self.a.jz(poly)?;
        self.a.vmovupd(ymmword_ptr(r15 + sr), r0)?;
        self.a.vmovdqu(xmmword_ptr(r15 + sn), x2)?;
        // row = clamp((bits >> 23 & 0xff) - 150 - E0, 0, ROWS - 1) (clamped below too, so
        // that the other lanes gather inside the table); m = the significand as an integer.
        let (ff, sub, zero, last) = (
            self.ci4(0xff),
            self.ci4((150 + m::SINCOS_E0) as u32),
            self.ci4(0),
            self.ci4(m::SINCOS_ROWS as u32 - 1),
        );
        let (mant, implicit) = (self.ci4(0x007f_ffff), self.ci4(0x0080_0000));
        self.a.vmovdqu(x0, xmmword_ptr(r15 + sx))?;
        self.a.vpsrld(x1, x0, 23)?;
        self.a.vpand(x1, x1, ff)?;
        self.a.vpsubd(x1, x1, sub)?;
        self.a.vpmaxsd(x1, x1, zero)?;
        self.a.vpminsd(x1, x1, last)?;
        self.a.vpand(x0, x0, mant)?;
        self.a.vpor(x0, x0, implicit)?;
        self.a.vcvtdq2pd(r0, x0)?;
        self.a.mov(rax, qword_ptr(r12 + rt::OFF_MATH_TABLE))?;
        let rows = 8 * m::SINCOS_ROWS as i32;
        // p = m * hi; p = p - 4 floor(p / 4)
        self.a.vpcmpeqd(r2, r2, r2)?;
        self.a.vgatherdpd_3(r3, ymmword_ptr(rax + x1 * 8), r2)?;
        self.a.vmulpd(r3, r3, r0)?;
        let (quarter, four) = (self.cd(0.25f64.to_bits()), self.cd(4.0f64.to_bits()));
        self.a.vmulpd(r4, r3, quarter)?;
        self.a.vroundpd(r4, r4, FLOOR)?;
        self.a.vfnmadd231pd(r3, r4, four)?;
        // s = fma(m, mid, p); k = round(s); f = (s - k) + m * lo
        self.a.vpcmpeqd(r2, r2, r2)?;
        self.a.vgatherdpd_3(r4, ymmword_ptr(rax + x1 * 8 + rows), r2)?;
        self.a.vfmadd231pd(r3, r0, r4)?;
        self.a.vroundpd(r4, r3, NEAREST)?;
        self.a.vsubpd(r3, r3, r4)?;
        self.a.vcvtpd2dq(x4, r4)?;
        self.a.vmovdqu(xmmword_ptr(r15 + sk), x4)?;
        self.a.vpcmpeqd(r2, r2, r2)?;
        self.a.vgatherdpd_3(r4, ymmword_ptr(rax + x1 * 8 + 2 * rows), r2)?;
        self.a.vmulpd(r4, r4, r0)?;
        self.a.vaddpd(r3, r3, r4)?;
        // r = fma(f, pio2[0], f * pio2[1])
        let (p0, p1) = (self.cd(m::SINCOS_PIO2[0].to_bits()), self.cd(m::SINCOS_PIO2[1].to_bits()));
        self.a.vmulpd(r4, r3, p1)?;
        self.a.vfmadd132pd(r3, r4, p0)?;
        // x < 0: -r and -k.
        self.a.vmovdqu(x0, xmmword_ptr(r15 + sx))?;
        self.a.vpmovsxdq(r1, x0)?;
        self.a.vandpd(r1, r1, sign)?;
        self.a.vxorpd(r3, r3, r1)?;
        self.a.vmovdqu(x4, xmmword_ptr(r15 + sk))?;
        self.a.vpsignd(x4, x4, x0)?;
        // The huge lanes take these.
        self.a.vmovdqu(x1, xmmword_ptr(r15 + smask))?;
        self.a.vmovdqu(x2, xmmword_ptr(r15 + sn))?;
        self.a.vblendvps(x2, x2, x4, x1)?;
        self.a.vpmovsxdq(r1, x1)?;
        self.a.vmovupd(r0, ymmword_ptr(r15 + sr))?;
        self.a.vblendvpd(r0, r0, r3, r1)?;
        self.bind(&mut poly)?;
        // z = r*r; w = z*z; s = z*r
        self.a.vmovdqu(xmmword_ptr(r15 + sn), x2)?;
        self.a.vmulpd(r1, r0, r0)?;
        self.a.vmulpd(r3, r1, r1)?;
        self.a.vmulpd(r4, r1, r0)?;
        // sin = (r + s*(S0 + z*S1)) + s*w*(S2 + z*S3)
        let s = m::SIN_S.map(|v| self.cd(v.to_bits()));
        self.a.vmulpd(r2, r1, s[1])?;
        self.a.vaddpd(r2, r2, s[0])?;
        self.a.vmulpd(r2, r4, r2)?;
        self.a.vaddpd(r2, r0, r2)?;
        self.a.vmulpd(r0, r4, r3)?;
        self.a.vmulpd(r4, r1, s[3])?;
        self.a.vaddpd(r4, r4, s[2])?;
        self.a.vmulpd(r0, r0, r4)?;
        self.a.vaddpd(r2, r2, r0)?;
        // cos = ((1 + z*C0) + w*C1) + (w*z)*(C2 + z*C3)
        let c = m::COS_C.map(|v| self.cd(v.to_bits()));
        let one = self.cd(1.0f64.to_bits());
        self.a.vmulpd(r0, r1, c[0])?;
        self.a.vaddpd(r0, r0, one)?;
        self.a.vmulpd(r4, r3, c[1])?;
        self.a.vaddpd(r0, r0, r4)?;
        self.a.vmulpd(r4, r1, c[3])?;
        self.a.vaddpd(r4, r4, c[2])?;
        self.a.vmulpd(r3, r3, r1)?;
        self.a.vmulpd(r3, r3, r4)?;
        self.a.vaddpd(r0, r0, r3)?;
        // Alone, the pick may take the sine's register; with the other function to pick
        // after it, it must leave both.
        let dst = if other.is_some() { d + 4 } else { d + 2 };
        self.sin_cos_pick(d, shift, dst, sres, sn)?;
        if let Some(o) = other {
            self.sin_cos_pick(d, shift ^ 1, d + 2, o + 16 * h, sn)?;
        }
        Ok(())
    }

    /// From the sine (`ymm{d+2}`) and cosine (`ymm{d}`) polynomials of four lanes and their
    /// `n` (slot `sn`): with `q = n + shift`, the cosine if `q & 1`, negated if `q & 2`,
    /// through `ymm{dst}`, rounded to f32 into the 16 bytes at slot offset `res`.
    /// `ymm{d+1}`, `ymm{d+3}` and `ymm{dst}` are clobbered.
    fn sin_cos_pick(&mut self, d: usize, shift: u32, dst: usize, res: i32, sn: i32) -> R<()> {
        let (r0, r1, r2, r3) = (YMM[d], YMM[d + 1], YMM[d + 2], YMM[d + 3]);
        let x1 = XMM[d + 1];
        let sign = self.cd(1 << 63);
        self.a.vmovdqu(x1, xmmword_ptr(r15 + sn))?;
        if shift != 0 {
            let sh = self.ci4(shift);
            self.a.vpaddd(x1, x1, sh)?;
        }
        self.a.vpmovsxdq(r1, x1)?;
        self.a.vpsllq(r3, r1, 63)?;
        self.a.vblendvpd(YMM[dst], r2, r0, r3)?;
        self.a.vpsllq(r1, r1, 62)?;
        self.a.vandpd(r1, r1, sign)?;
        self.a.vxorpd(YMM[dst], YMM[dst], r1)?;
        self.a.vcvtpd2ps(XMM[dst], YMM[dst])?;
        self.a.vmovups(xmmword_ptr(r15 + res), XMM[dst])?;
        Ok(())
    }
}
