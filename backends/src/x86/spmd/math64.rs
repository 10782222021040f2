//! `exp` of f64 lanes: the operation sequence of `kiln_ir::eval::math64::exp_f64`,
//! instruction for instruction, four lanes at a time (each half of the eight in turn), so
//! that every lane gets the interpreter's bits: the same IEEE operations in the same order
//! (products and sums are commutative bit for bit), `maxpd`/`minpd` for the definition's
//! clamps, rounding to integral ties to even (`vroundpd` mode 8), the integral k converted
//! exactly, 2^k as two exact powers of two built from their bits, and the NaN case blended
//! in at the end. (`log`, `sin` and `cos` of f64 have no lane code yet.)
//!
//! Registers: the argument in `ymm{d}`, `ymm{d+1}` (the result left there), `ymm{d+2}..
//! ymm{d+5}` clobbered ([`EXP64_NEED`]); two scratch values in fresh vector frame slots.

use iced_x86::code_asm::*;
use kiln_ir::eval::math64 as m;

use super::{CMP_UNORD_Q, R, V, XMM, YMM};

/// Registers (the result's two included) the lane code of f64 `exp` needs.
pub(super) const EXP64_NEED: usize = 6;

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
}
