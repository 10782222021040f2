//! `exp` and `log` of f64 lanes: the operation sequences of `kiln_ir::eval::math64`'s
//! `exp_f64` and `log_f64`, instruction for instruction, four lanes at a time (each half of
//! the eight in turn), so that every lane gets the interpreter's bits: the same IEEE
//! operations in the same order (products and sums are commutative bit for bit),
//! `maxpd`/`minpd` for `exp`'s clamps, rounding to integral ties to even (`vroundpd` mode
//! 8), integral values converted exactly (`exp`'s k by `vcvtpd2dq`; `log`'s exponent, a
//! small integer, through the bits of 2^52 + k, where `k - 1023 + kadj` is as exact in f64
//! as in integers), `exp`'s 2^k as two exact powers of two built from their bits, and the
//! special values blended in at the end, the definition's later cases first. (`sin` and
//! `cos` of f64 are `trig64.rs`'s.)
//!
//! Registers: the argument in `ymm{d}`, `ymm{d+1}` (the result left there), `ymm{d+2}..
//! ymm{d+5}` clobbered ([`EXP64_NEED`]); scratch values in fresh vector frame slots.

use iced_x86::code_asm::*;
use kiln_ir::eval::math64 as m;

use super::{CMP_EQ_OQ, CMP_LT_OQ, CMP_UNORD_Q, R, V, XMM, YMM};

/// Registers (the result's two included) the lane code of f64 `exp` and `log` needs.
pub(super) const EXP64_NEED: usize = 6;

/// The bits of 2^52, whose low bits an integer below 2^52 is ORed into to convert it.
const TWO52: u64 = 0x4330_0000_0000_0000;

/// `vroundpd` mode: to nearest even, no precision exception.
const NEAREST: i32 = 0x08;

impl V {
    /// kiln's f64 `exp` of the lanes in `ymm{d}`, `ymm{d+1}`, in place.
    pub(super) fn exp64(&mut self, d: usize) -> R<()> {
        let c = |s: &mut V, v: f64| s.q_slot(v.to_bits());
        let (hi_slot, lo_slot) = (self.slot(), self.slot());
        let (t0, t1, t2, t3) = (YMM[d + 2], YMM[d + 3], YMM[d + 4], YMM[d + 5]);
        for h in 0..2 {
            let x = YMM[d + h];
            // xc = min(max(x, LO), HI)
            let lo = c(self, m::EXP_LO);
            self.a.vmaxpd(t0, x, lo)?;
            let hi = c(self, m::EXP_HI);
            self.a.vminpd(t0, t0, hi)?;
            // k = round(xc / ln 2)
            let inv = c(self, m::INV_LN2);
            self.a.vmulpd(t1, t0, inv)?;
            self.a.vroundpd(t1, t1, NEAREST)?;
            // hi = xc - k LN2_HI; lo = k LN2_LO; r = hi - lo
            let l2h = c(self, m::LN2_HI);
            self.a.vmulpd(t2, t1, l2h)?;
            self.a.vsubpd(t2, t0, t2)?;
            self.a.vmovupd(ymmword_ptr(r15 + hi_slot), t2)?;
            let l2l = c(self, m::LN2_LO);
            self.a.vmulpd(t3, t1, l2l)?;
            self.a.vmovupd(ymmword_ptr(r15 + lo_slot), t3)?;
            self.a.vsubpd(t0, t2, t3)?;
            // rr = r r; p = P0 + rr (P1 + rr (P2 + rr (P3 + rr P4)))
            self.a.vmulpd(t2, t0, t0)?;
            let p4 = c(self, m::EXP_P[4]);
            self.a.vmulpd(t3, t2, p4)?;
            for k in (0..4).rev() {
                let pk = c(self, m::EXP_P[k]);
                self.a.vaddpd(t3, t3, pk)?;
                if k > 0 {
                    self.a.vmulpd(t3, t3, t2)?;
                }
            }
            // c = r - rr p
            self.a.vmulpd(t3, t2, t3)?;
            self.a.vsubpd(t3, t0, t3)?;
            // y = 1 + ((r c / (2 - c) - lo) + hi)
            self.a.vmulpd(t2, t0, t3)?;
            let two = c(self, 2.0);
            self.a.vmovupd(t0, two)?;
            self.a.vsubpd(t0, t0, t3)?;
            self.a.vdivpd(t2, t2, t0)?;
            self.a.vsubpd(t2, t2, ymmword_ptr(r15 + lo_slot))?;
            self.a.vaddpd(t2, t2, ymmword_ptr(r15 + hi_slot))?;
            let one = c(self, 1.0);
            self.a.vaddpd(t2, t2, one)?;
            // 2^k1 2^(k - k1), k1 = k >> 1, from their bits.
            let bias = self.imm_slot(1023);
            self.a.vcvtpd2dq(XMM[d + 5], t1)?;
            self.a.vpsrad(XMM[d + 2], XMM[d + 5], 1)?;
            self.a.vpsubd(XMM[d + 5], XMM[d + 5], XMM[d + 2])?;
            self.a.vpaddd(XMM[d + 2], XMM[d + 2], xmmword_ptr(r15 + bias))?;
            self.a.vpaddd(XMM[d + 5], XMM[d + 5], xmmword_ptr(r15 + bias))?;
            self.a.vpmovsxdq(t0, XMM[d + 2])?;
            self.a.vpmovsxdq(t3, XMM[d + 5])?;
            self.a.vpsllq(t0, t0, 52)?;
            self.a.vpsllq(t3, t3, 52)?;
            self.a.vmulpd(t2, t2, t0)?;
            self.a.vmulpd(t2, t2, t3)?;
            // A NaN argument: that NaN, quieted.
            let quiet = self.q_slot(0x0008_0000_0000_0000);
            self.a.vcmppd(t0, x, x, CMP_UNORD_Q)?;
            self.a.vorpd(t1, x, quiet)?;
            self.a.vblendvpd(x, t2, t1, t0)?;
        }
        Ok(())
    }

    /// kiln's f64 `log` of the lanes in `ymm{d}`, `ymm{d+1}`, in place.
    pub(super) fn log64(&mut self, d: usize) -> R<()> {
        let c = |s: &mut V, v: f64| s.q_slot(v.to_bits());
        let (s_f, s_hf, s_s, s_dk) = (self.slot(), self.slot(), self.slot(), self.slot());
        let slot = |off: i32| ymmword_ptr(r15 + off);
        let (t0, t1, t2, t3) = (YMM[d + 2], YMM[d + 3], YMM[d + 4], YMM[d + 5]);
        for h in 0..2 {
            let x = YMM[d + h];
            // Subnormals (and 0, negatives) scaled by 2^54, kadj = -54 there.
            let minp = c(self, f64::MIN_POSITIVE);
            self.a.vcmppd(t0, x, minp, CMP_LT_OQ)?;
            let s54 = c(self, 18_014_398_509_481_984.0);
            self.a.vmulpd(t1, x, s54)?;
            self.a.vblendvpd(t1, x, t1, t0)?;
            // ix = bits + ((0x3ff00000 - sqrt(1/2)'s high word) << 32)
            let add = self.q_slot((0x3ff0_0000 - m::LOG_SQRT_HALF_HI) << 32);
            self.a.vpaddq(t1, t1, add)?;
            // k = (ix >> 52) - 0x3ff + kadj, as f64.
            self.a.vpsrlq(t2, t1, 52)?;
            let two52 = self.q_slot(TWO52);
            self.a.vpor(t2, t2, two52)?;
            self.a.vsubpd(t2, t2, two52)?;
            let bias = c(self, 1023.0);
            self.a.vsubpd(t2, t2, bias)?;
            let m54 = c(self, -54.0);
            self.a.vandpd(t0, t0, m54)?;
            self.a.vaddpd(t2, t2, t0)?;
            self.a.vmovupd(slot(s_dk), t2)?;
            // m = (ix & mantissa) + sqrt(1/2)'s high word; f = m - 1
            let mant = self.q_slot(0x000f_ffff_ffff_ffff);
            self.a.vpand(t1, t1, mant)?;
            let hw = self.q_slot(m::LOG_SQRT_HALF_HI << 32);
            self.a.vpaddq(t1, t1, hw)?;
            let one = c(self, 1.0);
            self.a.vsubpd(t1, t1, one)?;
            self.a.vmovupd(slot(s_f), t1)?;
            // hfsq = 0.5 f f; s = f / (2 + f)
            let half = c(self, 0.5);
            self.a.vmulpd(t0, t1, half)?;
            self.a.vmulpd(t0, t0, t1)?;
            self.a.vmovupd(slot(s_hf), t0)?;
            let two = c(self, 2.0);
            self.a.vaddpd(t2, t1, two)?;
            self.a.vdivpd(t2, t1, t2)?;
            self.a.vmovupd(slot(s_s), t2)?;
            // z = s s; w = z z
            self.a.vmulpd(t1, t2, t2)?;
            self.a.vmulpd(t0, t1, t1)?;
            // t1 = w (Lg2 + w (Lg4 + w Lg6))
            let lg = m::LOG_LG;
            let c5 = c(self, lg[5]);
            self.a.vmulpd(t3, t0, c5)?;
            let c3 = c(self, lg[3]);
            self.a.vaddpd(t3, t3, c3)?;
            self.a.vmulpd(t3, t3, t0)?;
            let c1 = c(self, lg[1]);
            self.a.vaddpd(t3, t3, c1)?;
            self.a.vmulpd(t3, t3, t0)?;
            // t2 = z (Lg1 + w (Lg3 + w (Lg5 + w Lg7)))
            let c6 = c(self, lg[6]);
            self.a.vmulpd(t2, t0, c6)?;
            for k in [4usize, 2, 0] {
                let ck = c(self, lg[k]);
                self.a.vaddpd(t2, t2, ck)?;
                if k > 0 {
                    self.a.vmulpd(t2, t2, t0)?;
                }
            }
            self.a.vmulpd(t2, t2, t1)?;
            // r = t2 + t1; s (hfsq + r) + dk LN2_LO - hfsq + f + dk LN2_HI
            self.a.vaddpd(t2, t2, t3)?;
            self.a.vaddpd(t2, t2, slot(s_hf))?;
            self.a.vmulpd(t2, t2, slot(s_s))?;
            self.a.vmovupd(t3, slot(s_dk))?;
            let l2l = c(self, m::LN2_LO);
            self.a.vmulpd(t3, t3, l2l)?;
            self.a.vaddpd(t2, t2, t3)?;
            self.a.vsubpd(t2, t2, slot(s_hf))?;
            self.a.vaddpd(t2, t2, slot(s_f))?;
            self.a.vmovupd(t3, slot(s_dk))?;
            let l2h = c(self, m::LN2_HI);
            self.a.vmulpd(t3, t3, l2h)?;
            self.a.vaddpd(t2, t2, t3)?;
            // Special values, the definition's later cases first: +inf, ±0, < 0, NaN.
            let inf = c(self, f64::INFINITY);
            self.a.vcmppd(t0, x, inf, CMP_EQ_OQ)?;
            self.a.vblendvpd(t2, t2, x, t0)?;
            let zero = c(self, 0.0);
            self.a.vcmppd(t0, x, zero, CMP_EQ_OQ)?;
            let ninf = c(self, f64::NEG_INFINITY);
            self.a.vmovupd(t3, ninf)?;
            self.a.vblendvpd(t2, t2, t3, t0)?;
            self.a.vcmppd(t0, x, zero, CMP_LT_OQ)?;
            let dnan = self.q_slot(m::DEFAULT_NAN_BITS);
            self.a.vmovupd(t3, dnan)?;
            self.a.vblendvpd(t2, t2, t3, t0)?;
            let quiet = self.q_slot(0x0008_0000_0000_0000);
            self.a.vcmppd(t0, x, x, CMP_UNORD_Q)?;
            self.a.vorpd(t3, x, quiet)?;
            self.a.vblendvpd(x, t2, t3, t0)?;
        }
        Ok(())
    }
}
