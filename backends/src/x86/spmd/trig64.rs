//! `sin` and `cos` of f64 lanes: the operation sequence of `kiln_ir::eval::math64`'s
//! `sin_f64` and `cos_f64`, instruction for instruction, four lanes at a time (each half
//! of the eight in turn), so that every lane gets the interpreter's bits.
//!
//! * The reduction by pi/2 (`reduce`): k rounded ties to even (`vroundpd` mode 8), the
//!   definition's `mul_add`s as single FMA3 instructions (`vfnmadd231pd` for
//!   `(-k).mul_add(p, x)`, `vfmsub231pd` for `k.mul_add(p, -h)`: the same exact product and
//!   one rounding), its `two_sum`s as the same six operations.
//! * A half with a lane of |x| >= 2^28 (or ±inf) also runs the huge-argument reduction
//!   (`reduce_huge`) in every lane, its table row clamped into the table (as the definition
//!   clamps it above; other lanes' rows below too, so that their gathers stay inside), the
//!   four parts gathered (`vgatherqpd`) from the table whose address is in the launch
//!   context (the code stays position-independent), the 53-bit significand converted
//!   exactly through the bits of 2^52; its results are blended in for those lanes, negated
//!   by the argument's sign bit (exactly `x < 0` for such lanes).
//! * The kernels `kernel_sin`/`kernel_cos` in the definition's order of operations; n + shift
//!   picks cos (q & 1) and the sign (q & 2) per lane; special values blended in at the end.
//!
//! Registers: the argument in `ymm{d}`, `ymm{d+1}` (the result left there), `ymm{d+2}..
//! ymm{d+5}` clobbered ([`super::math64::EXP64_NEED`] in all); scratch values in fresh
//! vector frame slots; `rax` and `eax` scratch.

use iced_x86::code_asm::*;
use kiln_ir::eval::math::{SINCOS_PIO2, TWO_OVER_PI};
use kiln_ir::eval::math64 as m;

use super::{has_fma, no, CMP_EQ_OQ, CMP_GE_OQ, CMP_UNORD_Q, R, V, XMM, YMM};
use crate::x86::rt;

/// `vroundpd` modes: to nearest even, and toward -inf (no precision exception).
const NEAREST: i32 = 0x08;
const FLOOR: i32 = 0x09;
/// The bits of 2^52: a 53-bit integer's low 52 bits ORed into them give it as an f64.
const TWO52: u64 = 0x4330_0000_0000_0000;
const SIGN: u64 = 1 << 63;

impl V {
    /// kiln's f64 `sin` (`shift` 0) or `cos` (`shift` 1) of the lanes in `ymm{d}`,
    /// `ymm{d+1}`, in place.
    pub(super) fn sin_cos64(&mut self, d: usize, shift: u32) -> R<()> {
        if !has_fma() {
            return no("`sin`/`cos` on f64 (this CPU has no FMA)");
        }
        self.fma = true;
        for h in 0..2 {
            self.sin_cos64_half(d, d + h, shift)?;
        }
        Ok(())
    }

    /// A 32-byte slot holding f64 `v` in its four qwords.
    fn cq(&mut self, v: f64) -> AsmMemoryOperand {
        self.q_slot(v.to_bits())
    }

    /// `two_sum(a, b)` of the definition: `s = a + b`, `e` its error (registers, all
    /// distinct; `tmp` clobbered).
    fn two_sum64(&mut self, a: usize, b: usize, s: usize, e: usize, tmp: usize) -> R<()> {
        let (a, b, s, e, t) = (YMM[a], YMM[b], YMM[s], YMM[e], YMM[tmp]);
        self.a.vaddpd(s, a, b)?;
        self.a.vsubpd(t, s, a)?;
        self.a.vsubpd(e, s, t)?;
        self.a.vsubpd(e, a, e)?;
        self.a.vsubpd(t, b, t)?;
        self.a.vaddpd(e, e, t)?;
        Ok(())
    }

    /// The four lanes in `ymm{xi}` (`ymm{d+2}..ymm{d+5}` temporaries).
    fn sin_cos64_half(&mut self, d: usize, xi: usize, shift: u32) -> R<()> {
        let slot = |off: i32| ymmword_ptr(r15 + off);
        let (sx, sk, sr, st, shuge) =
            (self.slot(), self.slot(), self.slot(), self.slot(), self.slot());
        let (xr, t0, t1, t2, t3) = (xi, d + 2, d + 3, d + 4, d + 5);
        let [x, a, b, c, e] = [xr, t0, t1, t2, t3].map(|r| YMM[r]);
        self.a.vmovupd(slot(sx), x)?;
        // Huge lanes: |x| >= 2^28 (±inf included, NaN not).
        let abs = self.q_slot(!SIGN);
        self.a.vandpd(a, x, abs)?;
        let huge = self.cq(m::SINCOS_HUGE);
        self.a.vcmppd(a, a, huge, CMP_GE_OQ)?;
        self.a.vmovupd(slot(shuge), a)?;
        // (`eax` is kept until the test below: the main path uses no general register.)
        self.a.vmovmskpd(eax, a)?;
        // reduce: k = round(x 2/pi); a = fma(-k, P0, x)
        let two_pi = self.cq(TWO_OVER_PI);
        self.a.vmulpd(b, x, two_pi)?;
        self.a.vroundpd(b, b, NEAREST)?;
        self.a.vmovupd(slot(sk), b)?;
        let p = SINCOS_PIO2.map(|v| self.cq(v));
        self.a.vmovapd(a, x)?;
        self.a.vfnmadd231pd(a, b, p[0])?;
        // bh = k P1; bl = fma(k, P1, -bh)
        self.a.vmulpd(c, b, p[1])?;
        self.a.vmovapd(e, c)?;
        self.a.vfmsub231pd(e, b, p[1])?;
        let sbl = self.slot();
        self.a.vmovupd(slot(sbl), e)?;
        // (rh, e) = two_sum(a, -bh)
        let sign = self.q_slot(SIGN);
        self.a.vxorpd(c, c, sign)?;
        self.two_sum64(t0, t2, xr, t1, t3)?;
        // rl = (e - bl) - k P2
        self.a.vsubpd(b, b, slot(sbl))?;
        self.a.vmovupd(c, slot(sk))?;
        self.a.vmulpd(c, c, p[2])?;
        self.a.vsubpd(b, b, c)?;
        // r = rh + rl; t = (rh - r) + rl
        self.a.vaddpd(a, x, b)?;
        self.a.vsubpd(c, x, a)?;
        self.a.vaddpd(c, c, b)?;
        self.a.vmovupd(slot(sr), a)?;
        self.a.vmovupd(slot(st), c)?;
        let mut kernels = self.a.create_label();
        self.a.test(eax, eax)?;
        self.a.jz(kernels)?;
        self.reduce_huge64(d, xi, [sx, sk, sr, st, shuge])?;
        self.bind(&mut kernels)?;
        self.kernels64(d, xi, shift, [sx, sk, sr, st])
    }

    /// `reduce_huge` of the lanes of `ymm{xi}` (its argument in slot `sx`), blended into
    /// the k, r, t slots for the lanes of the mask in `shuge`.
    fn reduce_huge64(&mut self, d: usize, xi: usize, slots: [i32; 5]) -> R<()> {
        let [sx, sk, sr, st, shuge] = slots;
        let slot = |off: i32| ymmword_ptr(r15 + off);
        let (xr, t0, t1, t2, t3) = (xi, d + 2, d + 3, d + 4, d + 5);
        let [x, a, b, c, e] = [xr, t0, t1, t2, t3].map(|r| YMM[r]);
        // row = min((bits >> 52 & 0x7ff) - 1075 - E0, ROWS - 1), at least 0.
        self.a.vmovupd(a, slot(sx))?;
        self.a.vpsrlq(b, a, 52)?;
        let exp = self.q_slot(0x7ff);
        self.a.vpand(b, b, exp)?;
        let sub = self.q_slot((1075 + m::SINCOS_E0) as u64);
        self.a.vpsubq(b, b, sub)?;
        let last = self.q_slot(m::SINCOS_ROWS as u64 - 1);
        self.a.vpcmpgtq(c, b, last)?;
        self.a.vblendvpd(b, b, last, c)?;
        self.a.vpxor(e, e, e)?;
        self.a.vpcmpgtq(c, e, b)?;
        self.a.vblendvpd(b, b, e, c)?;
        // m = the significand as an integer, exactly.
        let mant = self.q_slot(0x000f_ffff_ffff_ffff);
        self.a.vandpd(a, a, mant)?;
        let two52 = self.q_slot(TWO52);
        self.a.vorpd(a, a, two52)?;
        self.a.mov(rax, qword_ptr(r12 + rt::OFF_MATH64_TABLE))?;
        let rows = 8 * m::SINCOS_ROWS as i32;
        // Part j: h = m part; l = fma(m, part, -h) (slots), the first h reduced mod 4.
        let (sh, sl) = ([0; 4].map(|_| self.slot()), [0; 3].map(|_| self.slot()));
        for j in 0..4 {
            self.a.vpcmpeqd(c, c, c)?;
            self.a.vgatherqpd_3(x, ymmword_ptr(rax + b * 8 + rows * j as i32), c)?;
            self.a.vmulpd(e, a, x)?;
            if j < 3 {
                self.a.vmovapd(c, e)?;
                self.a.vfmsub231pd(c, a, x)?;
                self.a.vmovupd(slot(sl[j]), c)?;
            }
            if j == 0 {
                // h0 = fma(floor(h0 / 4), -4, h0)
                let quarter = self.cq(0.25);
                self.a.vmulpd(c, e, quarter)?;
                self.a.vroundpd(c, c, FLOOR)?;
                let four = self.cq(4.0);
                self.a.vfnmadd231pd(e, c, four)?;
            }
            self.a.vmovupd(slot(sh[j]), e)?;
        }
        let (sea, seb, se1, se2, se3, sk2) =
            (self.slot(), self.slot(), self.slot(), self.slot(), self.slot(), self.slot());
        // (a, ea) = two_sum(h0, l0); (b, eb) = two_sum(a, h1)
        self.a.vmovupd(a, slot(sh[0]))?;
        self.a.vmovupd(b, slot(sl[0]))?;
        self.two_sum64(t0, t1, t2, t3, xr)?;
        self.a.vmovupd(slot(sea), e)?;
        self.a.vmovupd(a, slot(sh[1]))?;
        self.two_sum64(t2, t0, t1, t3, xr)?;
        self.a.vmovupd(slot(seb), e)?;
        // k = round(b); f = b - k
        self.a.vroundpd(a, b, NEAREST)?;
        self.a.vmovupd(slot(sk2), a)?;
        self.a.vsubpd(b, b, a)?;
        // s with e1..e4: two_sum(f, ea), (s, eb), (s, l1), (s, h2)
        self.a.vmovupd(a, slot(sea))?;
        self.two_sum64(t1, t0, t2, t3, xr)?;
        self.a.vmovupd(slot(se1), e)?;
        self.a.vmovupd(a, slot(seb))?;
        self.two_sum64(t2, t0, t1, t3, xr)?;
        self.a.vmovupd(slot(se2), e)?;
        self.a.vmovupd(a, slot(sl[1]))?;
        self.two_sum64(t1, t0, t2, t3, xr)?;
        self.a.vmovupd(slot(se3), e)?;
        self.a.vmovupd(a, slot(sh[2]))?;
        self.two_sum64(t2, t0, t1, t3, xr)?;
        // lo = ((((e1 + e2) + e3) + e4) + l2) + h3
        self.a.vmovupd(a, slot(se1))?;
        self.a.vaddpd(a, a, slot(se2))?;
        self.a.vaddpd(a, a, slot(se3))?;
        self.a.vaddpd(a, a, e)?;
        self.a.vaddpd(a, a, slot(sl[2]))?;
        self.a.vaddpd(a, a, slot(sh[3]))?;
        // (s, lo) = two_sum(s, lo)
        self.two_sum64(t1, t0, t2, t3, xr)?;
        // rh = s P0; rl = fma(s, P0, -rh) + (lo P0 + s P1)
        let p = SINCOS_PIO2.map(|v| self.cq(v));
        self.a.vmulpd(a, c, p[0])?;
        self.a.vmovapd(b, a)?;
        self.a.vfmsub231pd(b, c, p[0])?;
        self.a.vmulpd(x, e, p[0])?;
        self.a.vmulpd(c, c, p[1])?;
        self.a.vaddpd(x, x, c)?;
        self.a.vaddpd(b, b, x)?;
        // r = rh + rl; t = (rh - r) + rl
        self.a.vaddpd(c, a, b)?;
        self.a.vsubpd(e, a, c)?;
        self.a.vaddpd(e, e, b)?;
        // x < 0 (the sign bit, for these lanes): -r, -t, -k.
        let sign = self.q_slot(SIGN);
        self.a.vmovupd(b, slot(sx))?;
        self.a.vandpd(b, b, sign)?;
        self.a.vxorpd(c, c, b)?;
        self.a.vxorpd(e, e, b)?;
        self.a.vxorpd(a, b, slot(sk2))?;
        // Into the huge lanes of r, t, k.
        self.a.vmovupd(x, slot(shuge))?;
        for (v, s) in [(c, sr), (e, st), (a, sk)] {
            self.a.vmovupd(b, slot(s))?;
            self.a.vblendvpd(b, b, v, x)?;
            self.a.vmovupd(slot(s), b)?;
        }
        Ok(())
    }

    /// `kernel_sin`/`kernel_cos` of the reduced lanes, picked and signed by n + `shift`,
    /// and the special values: the result into `ymm{xi}`.
    fn kernels64(&mut self, d: usize, xi: usize, shift: u32, slots: [i32; 4]) -> R<()> {
        let [sx, sk, sr, st] = slots;
        let slot = |off: i32| ymmword_ptr(r15 + off);
        let [x, a, b, c, e] = [xi, d + 2, d + 3, d + 4, d + 5].map(|r| YMM[r]);
        let s = m::SIN_S.map(|v| self.cq(v));
        let k = m::COS_C.map(|v| self.cq(v));
        let (half, one) = (self.cq(0.5), self.cq(1.0));
        // sin: z = r r; w = z z; p = (S1 + z (S2 + z S3)) + (z w) (S4 + z S5)
        self.a.vmovupd(a, slot(sr))?;
        self.a.vmulpd(b, a, a)?;
        self.a.vmulpd(c, b, b)?;
        self.a.vmulpd(e, b, s[3])?;
        self.a.vaddpd(e, e, s[2])?;
        self.a.vmulpd(e, b, e)?;
        self.a.vaddpd(e, e, s[1])?;
        self.a.vmulpd(x, b, s[5])?;
        self.a.vaddpd(x, x, s[4])?;
        self.a.vmulpd(c, b, c)?;
        self.a.vmulpd(c, c, x)?;
        self.a.vaddpd(e, e, c)?;
        // v = z r; r - ((z (0.5 t - v p) - t) - v S0)
        self.a.vmulpd(c, b, a)?;
        self.a.vmovupd(x, slot(st))?;
        self.a.vmulpd(x, x, half)?;
        self.a.vmulpd(e, c, e)?;
        self.a.vsubpd(x, x, e)?;
        self.a.vmulpd(x, b, x)?;
        self.a.vsubpd(x, x, slot(st))?;
        self.a.vmulpd(e, c, s[0])?;
        self.a.vsubpd(x, x, e)?;
        self.a.vsubpd(a, a, x)?;
        let ssin = self.slot();
        self.a.vmovupd(slot(ssin), a)?;
        // cos: p = z (C0 + z (C1 + z C2)) + (w w) (C3 + z (C4 + z C5))
        self.a.vmovupd(a, slot(sr))?;
        self.a.vmulpd(b, a, a)?;
        self.a.vmulpd(c, b, b)?;
        self.a.vmulpd(e, b, k[2])?;
        self.a.vaddpd(e, e, k[1])?;
        self.a.vmulpd(e, b, e)?;
        self.a.vaddpd(e, e, k[0])?;
        self.a.vmulpd(e, b, e)?;
        self.a.vmulpd(x, b, k[5])?;
        self.a.vaddpd(x, x, k[4])?;
        self.a.vmulpd(x, b, x)?;
        self.a.vaddpd(x, x, k[3])?;
        self.a.vmulpd(c, c, c)?;
        self.a.vmulpd(c, c, x)?;
        self.a.vaddpd(e, e, c)?;
        // hz = 0.5 z; w = 1 - hz; w + (((1 - w) - hz) + (z p - r t))
        self.a.vmulpd(c, b, half)?;
        self.a.vmovupd(x, one)?;
        self.a.vsubpd(x, x, c)?;
        self.a.vmulpd(e, b, e)?;
        self.a.vmulpd(b, a, slot(st))?;
        self.a.vsubpd(e, e, b)?;
        self.a.vmovupd(a, one)?;
        self.a.vsubpd(a, a, x)?;
        self.a.vsubpd(a, a, c)?;
        self.a.vaddpd(a, a, e)?;
        self.a.vaddpd(x, x, a)?;
        // q = n + shift: cos where q & 1, negated where q & 2.
        let xb = XMM[d + 3];
        self.a.vcvtpd2dq(xb, slot(sk))?;
        if shift != 0 {
            let sh = self.imm_slot(shift);
            self.a.vpaddd(xb, xb, xmmword_ptr(r15 + sh))?;
        }
        self.a.vpmovsxdq(b, xb)?;
        self.a.vpsllq(c, b, 63)?;
        self.a.vmovupd(a, slot(ssin))?;
        self.a.vblendvpd(a, a, x, c)?;
        self.a.vpsllq(b, b, 62)?;
        let sign = self.q_slot(SIGN);
        self.a.vandpd(b, b, sign)?;
        self.a.vxorpd(a, a, b)?;
        // Special values, the definition's later cases first: sin(±0) = ±0; ±inf: the
        // default NaN; NaN: itself, quieted.
        self.a.vmovupd(x, slot(sx))?;
        if shift == 0 {
            let zero = self.cq(0.0);
            self.a.vcmppd(c, x, zero, CMP_EQ_OQ)?;
            self.a.vblendvpd(a, a, x, c)?;
        }
        let abs = self.q_slot(!SIGN);
        self.a.vandpd(c, x, abs)?;
        let inf = self.cq(f64::INFINITY);
        self.a.vcmppd(c, c, inf, CMP_EQ_OQ)?;
        let dnan = self.q_slot(m::DEFAULT_NAN_BITS);
        self.a.vblendvpd(a, a, dnan, c)?;
        let quiet = self.q_slot(0x0008_0000_0000_0000);
        self.a.vcmppd(c, x, x, CMP_UNORD_Q)?;
        self.a.vorpd(e, x, quiet)?;
        self.a.vblendvpd(x, a, e, c)?;
        Ok(())
    }
}
