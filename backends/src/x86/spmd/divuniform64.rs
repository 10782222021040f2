//! i64/u64 `/` and `%` of lanes by a divisor fixed for the call (found as for i32/u32 by
//! [`V::hoist_magic`], `divuniform.rs`): the magic number and shifts computed once per call in
//! scalar code ([`V::magic64_code`]), then per batch a 64x64-bit multiply-high built from
//! `vpmuludq` partial products and four integer operations, instead of one `div`/`idiv` per
//! lane (`int64.rs`'s general path, 40 to 90 cycles each).
//!
//! Why it is exact: Granlund and Montgomery's figure 4.1 for N = 64, as `div64const.rs` uses
//! it for constants (its [`magic64`] and `model64` are this code's model): for
//! `1 <= d < 2^64`, `l = ceil(log2 d)`, `m' = floor(2^64 (2^l - d) / d) + 1 < 2^64`,
//! `t = hi(n m')` and `q = (t + ((n - t) >> sh1)) >> sh2` (`sh1 = min(l, 1)`,
//! `sh2 = max(l - 1, 0)`) is `floor(n / d)` for every `n < 2^64` (`divuniform.rs` gives the
//! argument for N = 32; it holds word for word for N = 64).
//!
//! The scalar code computes that triple without a 128-bit shift: `b = bsr((d - 1) | 1)` is
//! `l - 1` for `d >= 2` (the `| 1` changes no highest bit there) and 0 for `d = 1`;
//! `2^l - d` is `2^b + 2^b - d` wrapping (exact: the true value is below `d < 2^64`, also for
//! `l = 64`), forced to 0 for `d = 1` (`2^0 - 1`); one `div` of `(2^l - d) * 2^64` by `d`
//! (no overflow: `2^l - d < d`) gives `m' - 1`; `sh1 = (d != 1)`, `sh2 = b`
//! (`scalar_magic` models it; the tests compare it with [`magic64`]).
//!
//! Per lane pair of dwords `n = nh 2^32 + nl`, `m' = mh 2^32 + ml`: with `p0 = nl ml`,
//! `p1 = nl mh`, `p2 = nh ml`, `p3 = nh mh` (each `vpmuludq`, at most `(2^32 - 1)^2`),
//! `s = p1 + (p0 >> 32)` and `w = p2 + (s & (2^32 - 1))` cannot wrap (each at most
//! `(2^32 - 1)^2 + 2^32 - 1 < 2^64`), and `hi(n m') = p3 + (s >> 32) + (w >> 32)`: the
//! exact high word (`mulhi` models it; the tests compare it with the 128-bit product).
//!
//! i64 divides the magnitudes (`|i64::MIN|` is 2^63 as a u64): the quotient is negated where
//! the signs differ (truncation; `i64::MIN / -1` gives 2^63, i.e. `i64::MIN`, the
//! interpreter's `wrapping_div`), the remainder is `|n| - q |d|` with the dividend's sign
//! (`i64::MIN % -1` is 0, as `wrapping_rem`). The remainder's product `q |d| <= |n|` needs
//! the low word alone (three `vpmuludq`).
//!
//! A zero divisor: the magic is that of 1 (no scalar `div` by 0 where it is computed); the
//! batch tests the divisor (its slot) once and, where it is 0, reports the fault in the
//! lowest active lane before any quotient is used, as the general path does.
//!
//! [`magic64`]: super::div64const::magic64

use iced_x86::code_asm::*;
use kiln_ir::Expr;

use super::{R, V, YMM};

/// The 32-byte slots of one divisor's numbers, from the first (see [`V::magic64_code`]).
const M_HI: i32 = 32;
const DIV: i32 = 64;
const DIV_HI: i32 = 96;
const SIGN: i32 = 128;
const SHIFTS: i32 = 160;
/// How many 32-byte slots one divisor takes.
pub(super) const SLOTS: usize = 6;

/// What the scalar code computes for the nonzero divisor magnitude `d` (see the module docs).
#[cfg(test)]
fn scalar_magic(d: u64) -> (u64, u32, u32) {
    let b = 63 - ((d - 1) | 1).leading_zeros();
    let high = (1u64 << b).wrapping_add(1 << b).wrapping_sub(d);
    let high = if d == 1 { 0 } else { high };
    let m = ((high as u128) << 64) / d as u128 + 1;
    (m as u64, (d != 1) as u32, b)
}

/// The high word of `n m` as the lanes compute it from 32-bit partial products.
#[cfg(test)]
fn mulhi(n: u64, m: u64) -> u64 {
    let (nl, nh, ml, mh) = (n & 0xffff_ffff, n >> 32, m & 0xffff_ffff, m >> 32);
    let s = nl * mh + ((nl * ml) >> 32);
    let w = nh * ml + (s & 0xffff_ffff);
    nh * mh + (s >> 32) + (w >> 32)
}

impl V {
    /// The scalar code run once per call for the divisor in `xmm0`'s low qword (i64 where
    /// `signed`), filling the six slots from `m`: `m'` broadcast (`m`), `m' >> 32`
    /// (`m + 32`), the divisor's magnitude `|d|` (`m + 64`), `|d| >> 32` (`m + 96`), the
    /// divisor's sign mask (`m + 128`, i64 only) and the counts `sh1`, `sh2` as the qwords
    /// at `m + 160` and `m + 176` (what `vpsrlq` reads). `rax`, `r10`, `r11` are clobbered;
    /// `rdx` (a buffer base) is saved around the `div`.
    pub(super) fn magic64_code(&mut self, signed: bool, m: i32) -> R<()> {
        let a = &mut self.a;
        a.vmovq(rax, xmm0)?;
        if signed {
            a.mov(r11, rax)?;
            a.sar(r11, 63)?;
            bcast(a, r11, m + SIGN)?;
            // |d| as a u64 (i64::MIN stays 2^63).
            a.mov(r11, rax)?;
            a.neg(rax)?;
            a.cmovs(rax, r11)?;
        }
        bcast(a, rax, m + DIV)?;
        a.mov(r11, rax)?;
        a.shr(r11, 32)?;
        bcast(a, r11, m + DIV_HI)?;
        // 0 becomes 1: the carry of `d < 1`.
        a.cmp(rax, 1)?;
        a.adc(rax, 0)?;
        a.mov(r10, rax)?;
        // b = l - 1 (0 for d = 1), which is sh2.
        a.dec(rax)?;
        a.or(rax, 1)?;
        a.bsr(r11, rax)?;
        a.mov(qword_ptr(r15 + (m + SHIFTS + 16)), r11)?;
        a.push(rdx)?;
        // 2^l - d, wrapping, then 0 where d = 1 (where sh1 is 0).
        a.xor(edx, edx)?;
        a.bts(rdx, r11)?;
        a.add(rdx, rdx)?;
        a.sub(rdx, r10)?;
        a.xor(eax, eax)?;
        a.cmp(r10, 1)?;
        a.setne(al)?;
        a.mov(qword_ptr(r15 + (m + SHIFTS)), rax)?;
        a.neg(rax)?;
        a.and(rdx, rax)?;
        a.xor(eax, eax)?;
        a.div(r10)?;
        a.pop(rdx)?;
        a.inc(rax)?;
        bcast(a, rax, m)?;
        a.shr(rax, 32)?;
        bcast(a, rax, m + M_HI)?;
        Ok(())
    }

    /// The quotient (or with `rem` the remainder) of the i64/u64 lanes in `ymm{d}`,
    /// `ymm{d+1}` (computed already) by the divisor whose numbers [`V::magic64_code`] left
    /// from slot `m`, into the same registers; first, where that divisor is 0, the fault of
    /// the lowest active lane. `ymm{d+2}` to `ymm{d+5}` are clobbered.
    pub(super) fn magic_div64(
        &mut self,
        e: &Expr,
        rem: bool,
        signed: bool,
        m: i32,
        d: usize,
    ) -> R<()> {
        let mut ok = self.a.create_label();
        self.a.cmp(qword_ptr(r15 + (m + DIV)), 0)?;
        self.a.jne(ok)?;
        // Every lane divides by 0: every active one faults.
        self.active(d + 3)?;
        let site = crate::x86::gen::Site::Div { rem, expr: e.fault_site() };
        self.fault_stub(d + 3, d + 3, d + 3, crate::x86::rt::ERR_DIV_ZERO, site, false, None)?;
        self.bind(&mut ok)?;
        let low = self.q_slot(0xffff_ffff);
        let signs = if signed { Some(self.scratch64()) } else { None };
        let (p, q, r, s) = (YMM[d + 2], YMM[d + 3], YMM[d + 4], YMM[d + 5]);
        let at = |off: i32| ymmword_ptr(r15 + off);
        for h in 0..2 {
            let x = YMM[d + h];
            let a = &mut self.a;
            if let Some(sc) = signs {
                // The dividend's sign mask (kept in the scratch slot), its magnitude in x.
                a.vpxor(s, s, s)?;
                a.vpcmpgtq(s, s, x)?;
                a.vmovdqu(at(sc + 32 * h as i32), s)?;
                a.vpxor(x, x, s)?;
                a.vpsubq(x, x, s)?;
            }
            // t = hi(x m') from the partial products (module docs), into p.
            a.vpmuludq(p, x, at(m))?;
            a.vpmuludq(q, x, at(m + M_HI))?;
            a.vpsrlq(p, p, 32)?;
            a.vpaddq(q, q, p)?;
            a.vpsrlq(p, x, 32)?;
            a.vpmuludq(r, p, at(m))?;
            a.vpmuludq(p, p, at(m + M_HI))?;
            a.vpand(s, q, low)?;
            a.vpaddq(r, r, s)?;
            a.vpsrlq(q, q, 32)?;
            a.vpsrlq(r, r, 32)?;
            a.vpaddq(p, p, q)?;
            a.vpaddq(p, p, r)?;
            // q = (t + ((x - t) >> sh1)) >> sh2, into p.
            a.vpsubq(q, x, p)?;
            a.vpsrlq(q, q, xmmword_ptr(r15 + (m + SHIFTS)))?;
            a.vpaddq(p, p, q)?;
            a.vpsrlq(p, p, xmmword_ptr(r15 + (m + SHIFTS + 16)))?;
            if rem {
                // x - q |d|, the low word of the product: (qh dl + ql dh) << 32 + ql dl.
                a.vpsrlq(q, p, 32)?;
                a.vpmuludq(q, q, at(m + DIV))?;
                a.vpmuludq(r, p, at(m + DIV_HI))?;
                a.vpaddq(q, q, r)?;
                a.vpsllq(q, q, 32)?;
                a.vpmuludq(r, p, at(m + DIV))?;
                a.vpaddq(q, q, r)?;
                a.vpsubq(x, x, q)?;
                if let Some(sc) = signs {
                    // With the dividend's sign.
                    a.vpxor(x, x, at(sc + 32 * h as i32))?;
                    a.vpsubq(x, x, at(sc + 32 * h as i32))?;
                }
            } else if let Some(sc) = signs {
                // Negated where the signs differ.
                a.vmovdqu(s, at(sc + 32 * h as i32))?;
                a.vpxor(s, s, at(m + SIGN))?;
                a.vpxor(p, p, s)?;
                a.vpsubq(x, p, s)?;
            } else {
                a.vmovdqa(x, p)?;
            }
        }
        Ok(())
    }
}

/// Stores `r` broadcast to the four qwords of the slot at `off` (through `ymm0`).
fn bcast(a: &mut CodeAssembler, r: AsmRegister64, off: i32) -> R<()> {
    a.vmovq(xmm0, r)?;
    a.vpbroadcastq(ymm0, xmm0)?;
    a.vmovdqu(ymmword_ptr(r15 + off), ymm0)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::div64const::tests::{divisors, lcg};
    use super::super::div64const::{magic64, model64};
    use super::*;

    #[test]
    fn the_scalar_code_computes_figure_4_1s_magic_numbers() {
        let mut s = 7u64;
        for d in divisors(&mut s, 2000, 20000) {
            assert_eq!(scalar_magic(d), magic64(d), "d = {d}");
        }
    }

    #[test]
    fn the_partial_products_give_the_exact_high_word() {
        let mut s = 13u64;
        let mut edge: Vec<u64> = vec![0, 1, 2, u64::MAX, u64::MAX - 1, 1 << 63, (1 << 63) - 1];
        edge.extend([0xffff_ffff, 0x1_0000_0000, 0xffff_ffff_0000_0000, 0x0000_0001_ffff_ffff]);
        for &n in &edge {
            for &m in &edge {
                assert_eq!(mulhi(n, m), ((n as u128 * m as u128) >> 64) as u64, "{n} {m}");
            }
        }
        for _ in 0..200_000 {
            let (n, m) = (lcg(&mut s), lcg(&mut s));
            let (n, m) = (n >> (m % 40), m >> (n % 40));
            assert_eq!(mulhi(n, m), ((n as u128 * m as u128) >> 64) as u64, "{n} {m}");
        }
    }

    /// The lanes' quotients (partial products, then the shifts) at both ends of runs of one
    /// quotient, the ends of the range and random dividends.
    #[test]
    fn the_lanes_quotients_are_exact_around_multiples() {
        let mut s = 23u64;
        for d in divisors(&mut s, 2000, 20000) {
            let (m, sh1, sh2) = scalar_magic(d);
            let lanes = |n: u64| {
                let t = mulhi(n, m);
                (t + ((n - t) >> sh1)) >> sh2
            };
            let top = u64::MAX / d * d;
            let mut ns = vec![0, 1, d - 1, d, d.wrapping_add(1), u64::MAX, u64::MAX - 1, top];
            ns.extend([top.wrapping_sub(1), top.wrapping_add(d - 1), 1 << 63, (1 << 63) - 1]);
            for _ in 0..20 {
                let q = (lcg(&mut s) / d) * d;
                ns.extend([q, q.wrapping_sub(1), q.wrapping_add(d - 1), lcg(&mut s)]);
            }
            for n in ns {
                assert_eq!(lanes(n), n / d, "{n} / {d}");
                assert_eq!(lanes(n), model64(n, magic64(d)), "{n} / {d}");
            }
        }
    }
}
