//! `/` and `%` of unsigned packed lanes by a constant that is no power of two (those are
//! shifts and masks, in `gen.rs`), the way `divconst.rs` divides 32-bit lanes, in 16-bit
//! halves: `vpmulhuw` is the high half of each word's product with a 16-bit magic number.
//!
//! ## Why this is exact
//!
//! `divconst.rs`'s argument (Granlund and Montgomery) with dividends below `2^n` and
//! products of `h = 16` bits ([`unsigned_plan_in`]): with `K = 16 + s`, `m = ceil(2^K / c)`
//! and `e = m c - 2^K < c`, the smallest `s` with `e 2^n <= 2^K` makes `floor(a m / 2^K)`
//! the quotient for every `a < 2^n`.
//! * 8-bit dividends (`n = 8`; byte lanes, or bytes zero-extended in word lanes): `s = 0`
//!   always qualifies (`e < c < 2^8`), and `m <= 2^15` for `c >= 2`, so the quotient is
//!   `vpmulhuw` alone. Byte lanes are divided as two word vectors, the even bytes (masked)
//!   and the odd ones (shifted down), each zero-extended, and the quotients (below `2^8`)
//!   joined again.
//! * 16-bit dividends (`n = 16`): `vpmulhuw` and a shift where `m < 2^16`, else (a 17-bit
//!   magic `2^16 + m'`) `t = hi(a m')` and `(((a - t) >> 1) + t) >> (s - 1)`, which neither
//!   wraps nor loses a bit in 16 bits (`t <= a`, the sum is at most `a`).
//!
//! The remainder is `a - q c`: in word lanes with `vpmullw`; in byte lanes `q c` is one
//! `vpmullw` of the joined quotients by the word `c`, as each byte's product `q c <= a` fits
//! its byte (the even byte's carries nothing into the odd one), then a byte subtraction.

use iced_x86::code_asm::*;

use super::gen::Gen;
use super::Op;
use crate::x86::spmd::divconst::{unsigned_plan_in, Plan};
use crate::x86::spmd::{R, YMM};

/// The plan for unsigned dividends of `bits` bits by `c`, if it is one of this module's
/// (`c` neither 0 nor a power of two).
pub(super) fn plan(c: u32, bits: u32) -> Option<Plan> {
    match unsigned_plan_in(c, bits, 16)? {
        p @ (Plan::UMul { .. } | Plan::UAdd { .. }) => Some(p),
        _ => None,
    }
}

impl Gen<'_> {
    /// `x / c` or (`div` false) `x % c` of unsigned lanes whose values have `bits` bits
    /// (8 or 16), `c` neither 0 nor a power of two.
    pub(super) fn udiv(&mut self, div: bool, x: Op, c: u32, bits: u32) -> R<Op> {
        let p = plan(c, bits).expect("a constant of the class");
        let (rx, x) = self.reg(x)?;
        let q = self.alloc()?;
        if self.w.w16 {
            self.word_quot(q, rx, p)?;
        } else {
            // Even bytes and odd bytes as words, each divided, joined again.
            let o = self.alloc()?;
            let low = self.konst(0x00ff_00ff);
            self.v.a.vpand(YMM[q], YMM[rx], ymmword_ptr(r15 + super::gen::slot(low)))?;
            self.v.a.vpsrlw(YMM[o], YMM[rx], 8)?;
            self.word_quot(q, q, p)?;
            self.word_quot(o, o, p)?;
            self.v.a.vpsllw(YMM[o], YMM[o], 8)?;
            self.v.a.vpor(YMM[q], YMM[q], YMM[o])?;
            self.free |= 1 << o;
        }
        if !div {
            let cw = self.konst(c * 0x0001_0001);
            self.v.a.vpmullw(YMM[q], YMM[q], ymmword_ptr(r15 + super::gen::slot(cw)))?;
            if self.w.w16 {
                self.v.a.vpsubw(YMM[q], YMM[rx], YMM[q])?;
            } else {
                self.v.a.vpsubb(YMM[q], YMM[rx], YMM[q])?;
            }
        }
        self.release(x);
        Ok(Op::Reg(q, true))
    }

    /// The quotients of the words of `ymm{src}` (zero-extended dividends) under `p` into
    /// `ymm{d}` (which may be `src`).
    fn word_quot(&mut self, d: usize, src: usize, p: Plan) -> R<()> {
        match p {
            Plan::UMul { m, s } => {
                let mm = self.konst(m * 0x0001_0001);
                self.v.a.vpmulhuw(YMM[d], YMM[src], ymmword_ptr(r15 + super::gen::slot(mm)))?;
                if s > 0 {
                    self.v.a.vpsrlw(YMM[d], YMM[d], s)?;
                }
            }
            Plan::UAdd { m, s } => {
                let mm = self.konst(m * 0x0001_0001);
                let u = self.alloc()?;
                self.v.a.vpmulhuw(YMM[u], YMM[src], ymmword_ptr(r15 + super::gen::slot(mm)))?;
                self.v.a.vpsubw(YMM[d], YMM[src], YMM[u])?;
                self.v.a.vpsrlw(YMM[d], YMM[d], 1)?;
                self.v.a.vpaddw(YMM[d], YMM[d], YMM[u])?;
                if s > 1 {
                    self.v.a.vpsrlw(YMM[d], YMM[d], s - 1)?;
                }
                self.free |= 1 << u;
            }
            _ => unreachable!("a plan of this module"),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What [`Gen::word_quot`] computes for one word.
    fn word_model(p: Plan, a: u16) -> u16 {
        match p {
            Plan::UMul { m, s } => (((a as u32 * m) >> 16) >> s) as u16,
            Plan::UAdd { m, s } => {
                let t = ((a as u32 * m) >> 16) as u16;
                let u = a.wrapping_sub(t) >> 1;
                u.wrapping_add(t) >> (s - 1)
            }
            _ => unreachable!(),
        }
    }

    #[test]
    fn every_byte_quotient_and_remainder_is_exact() {
        for c in 3..=255u32 {
            let Some(p) = plan(c, 8) else {
                assert!(c.is_power_of_two());
                continue;
            };
            assert!(matches!(p, Plan::UMul { s: 0, .. }), "{c}: {p:?}");
            for a in 0..=255u16 {
                let q = word_model(p, a);
                assert_eq!(q, a / c as u16, "{a} / {c}");
                // The remainder as the byte lanes compute it: the word product's low byte.
                let qc = (q as u32 * c) as u16 as u8;
                assert_eq!((a as u8).wrapping_sub(qc), (a % c as u16) as u8, "{a} % {c}");
            }
        }
    }

    #[test]
    fn word_quotients_are_exact() {
        let mut r = 0x1234_5678_9abc_def1u64;
        for c in 3..=u16::MAX as u32 {
            let Some(p) = plan(c, 16) else {
                assert!(c.is_power_of_two());
                continue;
            };
            // Both ends of runs of one quotient near the ends, the largest dividends, and
            // a few random ones (every dividend for small divisors).
            let mut a: Vec<u32> = vec![0, 1, c - 1, c, c + 1, 65535, 65534];
            let top = 65535 / c * c;
            a.extend([top, top.saturating_sub(1), top.saturating_sub(c)]);
            if c < 40 {
                a.extend(0..=65535);
            }
            for _ in 0..8 {
                r ^= r << 13;
                r ^= r >> 7;
                r ^= r << 17;
                a.push((r % 65536) as u32);
            }
            for a in a.into_iter().filter(|&a| a <= 65535) {
                assert_eq!(word_model(p, a as u16) as u32, a / c, "{a} / {c} by {p:?}");
            }
        }
    }
}
