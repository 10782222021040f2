//! `/` and `%` of 32-bit lanes by a nonzero constant, the way compilers divide: the high
//! half of a 32x32-bit product with a magic number (`vpmuludq`/`vpmuldq` on the even and the
//! odd lanes), a shift, and `a - q * c` for the remainder. [`V::lane_div`]'s general path
//! costs two `vdivpd` per batch and `divuniform.rs` nine for a divisor fixed for the call; this
//! is six to ten integer instructions with no conversion. u32, i32 and the 8/16-bit types
//! (whose lanes hold their values extended to 32 bits, divided as i32 and re-extended by
//! `narrow.rs`) take it; a zero constant keeps the general path and its fault.
//!
//! Why the magic numbers are exact (Granlund and Montgomery; Hacker's Delight 10). With
//! `K = 32 + s`, `m = ceil(2^K / c)` and `e = m c - 2^K` (`0 <= e < c`), and `a = q c + r`:
//! `a m / 2^K = q + (r + a e / 2^K) / c`.
//! * Unsigned, `a < 2^32`: where `e <= 2^s`, `a e / 2^K < 1`, so `r + a e / 2^K < c` and
//!   `floor(a m / 2^K)` is `q`. The smallest such `s` is taken; `s = ceil(log2 c)` always
//!   qualifies (`e < c <= 2^s`), with `m < 2^33`. Where `m` needs 33 bits, `m = 2^32 + m'`
//!   and with `t = floor(a m' / 2^32) <= a`, `floor(a m / 2^K) = floor((a + t) / 2^s)`,
//!   computed without overflow as `(((a - t) >> 1) + t) >> (s - 1)`.
//! * Signed, `c > 0` not a power of two, `|a| <= 2^31`: where `e < 2^(s+1)`, `|a| e < 2^K`.
//!   For `a >= 0` that is the unsigned argument. For `a = -y < 0`, `floor(-y m / 2^K) + 1 =
//!   1 - ceil(y m / 2^K)`, and `y m / 2^K = y / c + y e / (c 2^K)` lies strictly between the
//!   integers around `y / c` where `c` does not divide `y` (as above), and in `(y / c,
//!   y / c + 1)` where it does, since `e > 0` (`c` is no power of two): the ceiling is
//!   `floor(y / c) + 1` either way, so the result is `-floor(y / c)`, the truncated quotient.
//!   `m < 2^32` always exists (`s = ceil(log2 c) - 1`); where `m >= 2^31` the signed product
//!   with `m - 2^32` is `a m - a 2^32`, so adding `a` to its high half gives `floor(a m /
//!   2^32)`, which fits an i32 (`|a m / 2^32| < |a|`). A negative constant negates the
//!   quotient of its magnitude; a power of two rounds a negative dividend up by adding
//!   `2^k - 1` before the arithmetic shift; `-1` negates (wrapping: `i32::MIN / -1` is
//!   `i32::MIN`, the interpreter's `wrapping_div`).
//!
//! The remainder `a - q c` wraps as the interpreter's does (`i32::MIN % -1` is 0). A `/` and
//! `%` pair that `near.rs` plans shares the quotient.

use iced_x86::code_asm::*;
use kiln_ir::{Expr, ExprNode, Imm, Scalar};

use super::{R, V, YMM};

/// How to divide 32-bit lanes by a constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Unsigned: `a >> k` (`c = 2^k`, `c = 1` included).
    UShift(u32),
    /// Unsigned: the high half of `a * m`, shifted right by `s`.
    UMul { m: u32, s: u32 },
    /// Unsigned, a 33-bit magic `2^32 + m`: `t = hi(a * m)`, then
    /// `(((a - t) >> 1) + t) >> (s - 1)`, `s >= 1`.
    UAdd { m: u32, s: u32 },
    /// Signed, `c = ±2^k` with `k >= 1`: the dividend rounded toward 0 and shifted, negated
    /// for a negative constant.
    SShift { k: u32, neg: bool },
    /// Signed, `c = ±1`: the dividend, or its wrapping negation.
    SOne { neg: bool },
    /// Signed, `|c|` no power of two: the signed high half of `a * m` (plus `a` where `m`
    /// does not fit an i32: it is used as `m - 2^32`), shifted arithmetically by `s`, plus
    /// one for a negative dividend; negated for a negative constant.
    SMul { m: u32, s: u32, neg: bool },
}

/// The plan for unsigned lanes divided by `c` (not 0).
pub(crate) fn unsigned_plan(c: u32) -> Option<Plan> {
    unsigned_plan_in(c, 32, 32)
}

/// The plan for unsigned dividends below `2^n` divided by `c` (not 0) with products' high
/// halves of `h` bits (`n <= h <= 32`): the argument above with `2^n` for `2^32` and
/// `K = h + s`, `e 2^n <= 2^K` (for `n = h = 32`, `e <= 2^s`) giving `a e < 2^K`. `m`
/// (or `m'`) is below `2^h`.
pub(crate) fn unsigned_plan_in(c: u32, n: u32, h: u32) -> Option<Plan> {
    if c == 0 {
        return None;
    }
    if c.is_power_of_two() {
        return Some(Plan::UShift(c.trailing_zeros()));
    }
    let c128 = c as u128;
    for s in 0..=h {
        let k = h + s;
        let m = (1u128 << k).div_ceil(c128);
        let e = m * c128 - (1u128 << k);
        if e << n > 1u128 << k {
            continue;
        }
        return if m < 1 << h {
            Some(Plan::UMul { m: m as u32, s })
        } else if m < 1 << (h + 1) && s >= 1 {
            Some(Plan::UAdd { m: (m - (1 << h)) as u32, s })
        } else {
            None
        };
    }
    None
}

/// The plan for signed lanes (i32 values) divided by `c` (not 0).
pub(crate) fn signed_plan(c: i32) -> Option<Plan> {
    let neg = c < 0;
    let abs = c.unsigned_abs();
    match abs {
        0 => None,
        1 => Some(Plan::SOne { neg }),
        _ if abs.is_power_of_two() => Some(Plan::SShift { k: abs.trailing_zeros(), neg }),
        _ => {
            let c128 = abs as u128;
            for s in 0..32u32 {
                let k = 32 + s;
                let m = (1u128 << k).div_ceil(c128);
                let e = m * c128 - (1u128 << k);
                if e >= 2u128 << s {
                    continue;
                }
                return (m < 1 << 32).then_some(Plan::SMul { m: m as u32, s, neg });
            }
            None
        }
    }
}

/// What the emitted code computes, in plain Rust, for the tests: the quotient of `a` (the
/// lane's 32 bits) under `p`.
#[cfg(test)]
pub(crate) fn model(p: Plan, a: u32) -> u32 {
    match p {
        Plan::UShift(k) => a >> k,
        Plan::UMul { m, s } => ((a as u64 * m as u64) >> 32 >> s) as u32,
        Plan::UAdd { m, s } => {
            let t = ((a as u64 * m as u64) >> 32) as u32;
            ((a.wrapping_sub(t) >> 1).wrapping_add(t)) >> (s - 1)
        }
        Plan::SShift { k, neg } => {
            let x = a as i32;
            let bias = ((x >> 31) as u32) >> (32 - k);
            let q = (x.wrapping_add(bias as i32)) >> k;
            if neg {
                q.wrapping_neg() as u32
            } else {
                q as u32
            }
        }
        Plan::SOne { neg } => {
            if neg {
                a.wrapping_neg()
            } else {
                a
            }
        }
        Plan::SMul { m, s, neg } => {
            let x = a as i32;
            let mut hi = ((x as i64 * m as i32 as i64) >> 32) as i32;
            if m >= 1 << 31 {
                hi = hi.wrapping_add(x);
            }
            let sign = x >> 31;
            let q = if neg { sign.wrapping_sub(hi >> s) } else { (hi >> s).wrapping_sub(sign) };
            q as u32
        }
    }
}

/// The constant divisor of a lane `/` or `%` of `ty` and its plan (not for 0). 8/16-bit
/// values are divided as i32 (their lanes are extended), u32 as unsigned, i32 as signed.
pub(super) fn const_plan(ty: Scalar, b: &Expr) -> Option<(u32, Plan)> {
    let ExprNode::Imm(Imm::Int(t, bits)) = b.node() else { return None };
    if *t != ty {
        return None;
    }
    // Canonical bits: the value, sign-extended for signed types.
    let v = *bits as i64;
    match ty {
        Scalar::U32 => unsigned_plan(v as u32).map(|p| (v as u32, p)),
        Scalar::I32 | Scalar::I16 | Scalar::U16 | Scalar::I8 | Scalar::U8 => {
            signed_plan(v as i32).map(|p| (v as u32, p))
        }
        _ => None,
    }
}

impl V {
    /// The quotient (or with `rem` the remainder) of the lanes of `ymm{d}` (computed
    /// already) by the constant `c` under `plan` into `ymm{d}`; with `both`, the other one
    /// into that slot (`near.rs`'s pairs). `ymm{d+1}` to `ymm{d+4}` are clobbered.
    pub(super) fn const_div(
        &mut self,
        rem: bool,
        (c, plan): (u32, Plan),
        d: usize,
        both: Option<i32>,
    ) -> R<()> {
        let (x, t, u, v) = (YMM[d], YMM[d + 2], YMM[d + 3], YMM[d + 4]);
        // Quotient into t.
        match plan {
            Plan::UShift(k) => self.a.vpsrld(t, x, k)?,
            Plan::UMul { m, s } => self.mul_high(false, m, s, d)?,
            Plan::UAdd { m, s } => {
                self.mul_high(false, m, 0, d)?;
                self.a.vpsubd(u, x, t)?;
                self.a.vpsrld(u, u, 1)?;
                self.a.vpaddd(t, u, t)?;
                if s > 1 {
                    self.a.vpsrld(t, t, s - 1)?;
                }
            }
            Plan::SShift { k, neg } => {
                self.a.vpsrad(t, x, 31)?;
                self.a.vpsrld(t, t, 32 - k)?;
                self.a.vpaddd(t, t, x)?;
                self.a.vpsrad(t, t, k)?;
                if neg {
                    self.a.vpxor(u, u, u)?;
                    self.a.vpsubd(t, u, t)?;
                }
            }
            Plan::SOne { neg } => {
                if neg {
                    self.a.vpxor(t, t, t)?;
                    self.a.vpsubd(t, t, x)?;
                } else {
                    self.a.vmovdqa(t, x)?;
                }
            }
            Plan::SMul { m, s, neg } => {
                // The dividend's sign (-1 or 0) first: it does not wait for the product.
                self.a.vpsrad(v, x, 31)?;
                self.mul_high(true, m, 0, d)?;
                if m >= 1 << 31 {
                    self.a.vpaddd(t, t, x)?;
                }
                if s > 0 {
                    self.a.vpsrad(t, t, s)?;
                }
                // q - sign, or for a negative constant -(q - sign).
                if neg {
                    self.a.vpsubd(t, v, t)?;
                } else {
                    self.a.vpsubd(t, t, v)?;
                }
            }
        }
        if !rem && both.is_none() {
            self.a.vmovdqa(x, t)?;
            return Ok(());
        }
        // The remainder a - q * c into u.
        self.mul_const(u, t, c, v)?;
        if let Some(other) = both {
            self.a.vpsubd(u, x, u)?;
            self.a.vmovdqa(x, t)?;
            return self.both_out(rem, other, d);
        }
        self.a.vpsubd(x, x, u)?;
        Ok(())
    }

    /// The high 32 bits of each lane of `ymm{d}` times `m` (signed or not), shifted right
    /// (logically) by `s` more, into `ymm{d+2}`; `ymm{d+3}` is clobbered. Even lanes and
    /// odd lanes (shifted down) are multiplied separately into 64-bit products and blended.
    fn mul_high(&mut self, signed: bool, m: u32, s: u32, d: usize) -> R<()> {
        let (x, t, u) = (YMM[d], YMM[d + 2], YMM[d + 3]);
        let mm = ymmword_ptr(r15 + self.imm_slot(m));
        let mul = |a: &mut CodeAssembler, dst, src| -> R<()> {
            if signed {
                a.vpmuldq(dst, src, mm)?;
            } else {
                a.vpmuludq(dst, src, mm)?;
            }
            Ok(())
        };
        mul(&mut self.a, t, x)?;
        self.a.vpsrlq(u, x, 32)?;
        mul(&mut self.a, u, u)?;
        // Even lanes: the high dword moved down (and shifted); odd lanes: the high dword is
        // in place, and shifting the whole product by `s` leaves the quotient there (it is
        // below 2^32).
        self.a.vpsrlq(t, t, 32 + s)?;
        if s > 0 {
            self.a.vpsrlq(u, u, s)?;
        }
        self.a.vpblendd(t, t, u, 0xaa)?;
        Ok(())
    }

    /// `dst = src * c` (low 32 bits), by shifts and an add or subtract where `c` is
    /// `(2^k ± 1) 2^j` or `2^j`, else `vpmulld` with the constant; `tmp` may be clobbered.
    fn mul_const(
        &mut self,
        dst: AsmRegisterYmm,
        src: AsmRegisterYmm,
        c: u32,
        tmp: AsmRegisterYmm,
    ) -> R<()> {
        if c.is_power_of_two() {
            self.a.vpslld(dst, src, c.trailing_zeros())?;
            return Ok(());
        }
        let j = c.trailing_zeros();
        if let Some((k, plus)) = super::mulconst::shift_form(c >> j) {
            self.a.vpslld(tmp, src, k)?;
            if plus {
                self.a.vpaddd(dst, tmp, src)?;
            } else {
                self.a.vpsubd(dst, tmp, src)?;
            }
            if j > 0 {
                self.a.vpslld(dst, dst, j)?;
            }
            return Ok(());
        }
        let cc = ymmword_ptr(r15 + self.imm_slot(c));
        self.a.vpmulld(dst, src, cc)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every quotient by `c` is right, checked at both ends of every run of dividends
    /// with one quotient (`k c` and `k c + c - 1`): the computation is nondecreasing in
    /// the dividend in each plan, so that covers every u32.
    fn unsigned_all(c: u32) {
        let p = unsigned_plan(c).unwrap();
        let mut k = 0u64;
        while k * c as u64 <= u32::MAX as u64 {
            let lo = (k * c as u64) as u32;
            let hi = (k * c as u64 + c as u64 - 1).min(u32::MAX as u64) as u32;
            assert_eq!(model(p, lo), k as u32, "{lo} / {c} ({p:?})");
            assert_eq!(model(p, hi), k as u32, "{hi} / {c} ({p:?})");
            k += 1;
        }
    }

    /// Dividends around multiples of `c`, the ends of the range and random ones.
    fn samples(c: u32, seed: u64) -> Vec<u32> {
        let mut s = seed ^ c as u64;
        let mut v = vec![0, 1, 2, c - 1, c, c.wrapping_add(1), u32::MAX, u32::MAX - 1];
        v.extend([0x7fff_ffff, 0x8000_0000, 0x8000_0001]);
        let top = u32::MAX / c * c;
        v.extend([top, top.wrapping_sub(1), top.wrapping_add(c - 1)]);
        for _ in 0..400 {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let r = (s >> 32) as u32;
            let q = r / c;
            v.extend([r, q * c, (q * c).wrapping_sub(1), (q * c).wrapping_add(c - 1)]);
        }
        v
    }

    #[test]
    fn unsigned_magic_numbers_are_exact_for_every_dividend() {
        let mut divisors: Vec<u32> = vec![641, 1000, 10007, 65535, 65537, 1_000_000, 0x00ff_ffff];
        divisors.extend([0x7fff_ffff, 0x8000_0001, 0xb504_f333, 0xffff_fffe, 0xffff_ffff]);
        // The small ones take ~2^33 / c checks each: release builds only.
        if !cfg!(debug_assertions) {
            divisors.extend([7, 10, 25]);
        }
        let mut s = 7u64;
        for _ in 0..200 {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            divisors.push(((s >> 32) as u32 >> (s % 12)).max(1 << 20));
        }
        for c in divisors {
            unsigned_all(c);
        }
    }

    #[test]
    fn unsigned_magic_numbers_are_right_on_samples_for_all_small_divisors() {
        let mut s = 99u64;
        let mut large: Vec<u32> = (0..2000)
            .map(|_| {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((s >> 32) as u32 >> (s % 32)).max(1)
            })
            .collect();
        large.extend((1..=1000).map(|i| u32::MAX - i));
        for c in (1..=1000).chain(large) {
            let p = unsigned_plan(c).unwrap();
            for a in samples(c, 5) {
                assert_eq!(model(p, a), a / c, "{a} / {c} ({p:?})");
            }
        }
        // The two forms both occur.
        assert_eq!(unsigned_plan(10), Some(Plan::UMul { m: 0xcccc_cccd, s: 3 }));
        assert!(matches!(unsigned_plan(7), Some(Plan::UAdd { .. })));
        assert_eq!(unsigned_plan(1), Some(Plan::UShift(0)));
        assert_eq!(unsigned_plan(0), None);
    }

    fn signed_check(c: i32, a: i32) {
        let p = signed_plan(c).unwrap();
        assert_eq!(model(p, a as u32) as i32, a.wrapping_div(c), "{a} / {c} ({p:?})");
    }

    #[test]
    fn signed_magic_numbers_truncate_like_the_interpreter() {
        let mut s = 3u64;
        let mut divisors: Vec<i32> = (1..=1000).flat_map(|c| [c, -c]).collect();
        divisors.extend([i32::MIN, i32::MIN + 1, i32::MAX, i32::MAX - 1, 1 << 30, -(1 << 30)]);
        for _ in 0..2000 {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let c = ((s >> 32) as i32) >> (s % 31);
            if c != 0 {
                divisors.push(c);
            }
        }
        for c in divisors {
            let mut v = vec![0, 1, -1, 2, -2, i32::MIN, i32::MIN + 1, i32::MAX, i32::MAX - 1];
            let ca = c.unsigned_abs() as i64;
            for k in [1i64, 2, 3, 1000, (i32::MAX as i64) / ca, (i32::MAX as i64) / ca - 1] {
                for off in [-1i64, 0, 1, ca - 1] {
                    for sign in [1i64, -1] {
                        let a = sign * (k * ca + off);
                        if let Ok(a) = i32::try_from(a) {
                            v.push(a);
                        }
                    }
                }
            }
            for _ in 0..200 {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                v.push((s >> 32) as i32);
            }
            for a in v {
                signed_check(c, a);
            }
        }
    }

    /// Every i32 dividend of `c`, checked at both ends of each run with one quotient (as
    /// [`unsigned_all`]; the signed computation is nondecreasing in the dividend too, the
    /// `+1` of negative dividends included, and negated for a negative `c`).
    fn signed_all(c: i32) {
        let p = signed_plan(c).unwrap();
        let ca = c.unsigned_abs() as i64;
        let mut k = 0i64;
        while k * ca <= 1 << 31 {
            let ends = [k * ca, k * ca + ca - 1, -(k * ca), -(k * ca + ca - 1)];
            for a in ends {
                let a = a.clamp(i32::MIN as i64, i32::MAX as i64) as i32;
                assert_eq!(model(p, a as u32) as i32, a.wrapping_div(c), "{a} / {c} ({p:?})");
            }
            k += 1;
        }
    }

    #[test]
    fn signed_magic_numbers_are_exact_for_every_dividend_of_some_divisors() {
        let mut divisors = vec![641, -641, 1000, 65537, -1_000_003, i32::MAX, -i32::MAX, i32::MIN];
        divisors.extend([1 << 20, -(1 << 20), 0x5555_5555, -0x3333_3333]);
        if !cfg!(debug_assertions) {
            divisors.extend([-7, 10, 100]);
        }
        for c in divisors {
            signed_all(c);
        }
    }
}
