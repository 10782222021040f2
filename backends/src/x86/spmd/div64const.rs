//! i64/u64 `/` and `%` of lanes by a nonzero constant: per lane a 64x64-bit `mul` by a
//! magic number and shifts instead of a `div`/`idiv` (AVX2 has no 64-bit multiply-high, so
//! the lanes go through scalar registers, as `int64.rs`'s division does, but each costs a
//! multiply instead of a 40-to-90-cycle division, and no lane can fault).
//!
//! Why it is exact: Granlund and Montgomery's figure 4.1 for N = 64, as `divuniform.rs` uses
//! it for N = 32 (see its docs): for `1 <= c < 2^64`, `l = ceil(log2 c)`,
//! `m' = floor(2^64 (2^l - c) / c) + 1 < 2^64`, `t = hi(n m')` and
//! `q = (t + ((n - t) >> sh1)) >> sh2` (`sh1 = min(l, 1)`, `sh2 = max(l - 1, 0)`) is
//! `floor(n / c)` for every `n < 2^64`. i64 divides the magnitudes (`|i64::MIN|` is 2^63 as a
//! u64) and negates where the signs differ: truncation, `i64::MIN / -1` wrapping to
//! `i64::MIN` as the interpreter's `wrapping_div`; the remainder is `n - q c`, wrapping.

use iced_x86::code_asm::*;
use kiln_ir::{Expr, ExprNode, Imm, Scalar};

use super::{R, V, YMM};

/// The magic multiplier and shifts of a nonzero divisor magnitude `c` (figure 4.1, N = 64).
pub(crate) fn magic64(c: u64) -> (u64, u32, u32) {
    let l = 64 - (c - 1).leading_zeros();
    let m = ((((1u128 << l) - c as u128) << 64) / c as u128 + 1) as u64;
    let sh1 = (l != 0) as u32;
    (m, sh1, l - sh1)
}

/// What the code computes for the unsigned quotient of `n` under [`magic64`]'s triple.
#[cfg(test)]
pub(crate) fn model64(n: u64, (m, sh1, sh2): (u64, u32, u32)) -> u64 {
    let t = ((n as u128 * m as u128) >> 64) as u64;
    (t + ((n - t) >> sh1)) >> sh2
}

/// What the code computes for the i64 quotient of `n` by `c` (not 0).
#[cfg(test)]
pub(crate) fn model64_signed(n: i64, c: i64) -> i64 {
    let q = model64(n.unsigned_abs(), magic64(c.unsigned_abs())) as i64;
    let sign = (n >> 63) ^ (c >> 63);
    (q ^ sign).wrapping_sub(sign)
}

/// The divisor's bits if `b` is a nonzero i64/u64 constant.
pub(super) fn const_divisor64(b: &Expr) -> Option<u64> {
    match b.node() {
        ExprNode::Imm(Imm::Int(Scalar::I64 | Scalar::U64, bits)) if *bits != 0 => Some(*bits),
        _ => None,
    }
}

impl V {
    /// The quotient (or with `rem` the remainder) of the i64/u64 lanes in `ymm{d}`,
    /// `ymm{d+1}` (computed already) by the nonzero constant `c` (its bits), into the same
    /// registers. `rax`, `r10`, `r11` are clobbered; `rdx` (a buffer base) is saved.
    pub(super) fn const_div64(&mut self, rem: bool, signed: bool, c: u64, d: usize) -> R<()> {
        let mag = if signed { (c as i64).unsigned_abs() } else { c };
        let (m, sh1, sh2) = magic64(mag);
        let c_slot = self.const_slot((c, 4));
        let sa = self.scratch64();
        let a = &mut self.a;
        a.vmovupd(ymmword_ptr(r15 + sa), YMM[d])?;
        a.vmovupd(ymmword_ptr(r15 + (sa + 32)), YMM[d + 1])?;
        a.push(rdx)?;
        a.mov(r10, m)?;
        for lane in 0..8 {
            let at = qword_ptr(r15 + (sa + 8 * lane));
            // The dividend in r11, its magnitude in rax.
            a.mov(r11, at)?;
            a.mov(rax, r11)?;
            if signed {
                a.neg(rax)?;
                a.cmovs(rax, r11)?;
            }
            if sh1 == 0 {
                // c = ±1: the quotient is the magnitude itself.
            } else {
                a.mul(r10)?;
                // t in rdx; the magnitude again in rax.
                a.mov(rax, r11)?;
                if signed {
                    a.neg(rax)?;
                    a.cmovs(rax, r11)?;
                }
                a.sub(rax, rdx)?;
                a.shr(rax, 1)?;
                a.add(rax, rdx)?;
                if sh2 > 0 {
                    a.shr(rax, sh2)?;
                }
            }
            if signed {
                // Negated where the signs differ: (q ^ s) - s with s all ones there.
                a.mov(rdx, r11)?;
                a.sar(rdx, 63)?;
                if (c as i64) < 0 {
                    a.not(rdx)?;
                }
                a.xor(rax, rdx)?;
                a.sub(rax, rdx)?;
            }
            if rem {
                a.imul_2(rax, qword_ptr(r15 + c_slot))?;
                a.neg(rax)?;
                a.add(rax, r11)?;
            }
            a.mov(at, rax)?;
        }
        a.pop(rdx)?;
        a.vmovupd(YMM[d], ymmword_ptr(r15 + sa))?;
        a.vmovupd(YMM[d + 1], ymmword_ptr(r15 + (sa + 32)))?;
        Ok(())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A pseudo-random sequence (an LCG with its high bits folded down).
    pub(in crate::x86::spmd) fn lcg(s: &mut u64) -> u64 {
        *s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *s ^ (*s >> 29)
    }

    /// Divisors of every magnitude: `1..=small`, powers of two and their neighbours, the top
    /// of the range, `random` random ones shifted to every width.
    pub(in crate::x86::spmd) fn divisors(s: &mut u64, small: u64, random: usize) -> Vec<u64> {
        let mut v: Vec<u64> = (1..=small).collect();
        v.extend((0..64).flat_map(|k| [1u64 << k, (1u64 << k) + 1, (1u64 << k).wrapping_sub(1)]));
        v.extend((0..100).map(|i| u64::MAX - i));
        let odd = [0x8000_0000_0000_0001, 0x5555_5555_5555_5555, 1_000_000_007, 10_000_000_000];
        v.extend(odd.into_iter().chain([u32::MAX as u64]));
        for _ in 0..random {
            let r = lcg(s);
            v.push(r >> (r % 64));
        }
        v.retain(|&c| c != 0);
        v
    }

    #[test]
    fn u64_magic_numbers_are_right_around_every_multiple_sampled() {
        let mut s = 17u64;
        for c in divisors(&mut s, 1000, 5000) {
            let mg = magic64(c);
            let top = u64::MAX / c * c;
            let mut ns = vec![0, 1, c - 1, c, c.wrapping_add(1), u64::MAX, u64::MAX - 1, top];
            ns.extend([top.wrapping_sub(1), top.wrapping_add(c - 1), 1 << 63, (1 << 63) - 1]);
            for _ in 0..60 {
                let r = lcg(&mut s);
                let q = (r / c) * c;
                ns.extend([r, q, q.wrapping_sub(1), q.wrapping_add(c - 1)]);
            }
            for n in ns {
                assert_eq!(model64(n, mg), n / c, "{n} / {c} ({mg:?})");
            }
        }
        assert_eq!(magic64(1), (1, 0, 0));
    }

    #[test]
    fn i64_quotients_truncate_and_wrap_like_the_interpreter() {
        let mut s = 29u64;
        let mut cvals: Vec<i64> =
            divisors(&mut s, 1000, 5000).into_iter().map(|c| c as i64).collect();
        cvals.extend([i64::MIN, i64::MIN + 1, i64::MAX, -1, -2, -3, -7, -10]);
        for c in cvals {
            let mut ns = vec![0, 1, -1, i64::MIN, i64::MIN + 1, i64::MAX, i64::MAX - 1, c];
            ns.push(c.wrapping_neg());
            for _ in 0..30 {
                let r = lcg(&mut s) as i64;
                let q = r.wrapping_div(c).wrapping_mul(c);
                ns.extend([r, q, q.wrapping_sub(1), q.wrapping_add(1)]);
            }
            for n in ns {
                assert_eq!(model64_signed(n, c), n.wrapping_div(c), "{n} / {c}");
            }
        }
    }
}
