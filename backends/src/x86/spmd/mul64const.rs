//! 64-bit integer products by a constant (`h * 1099511628211`, FNV-1a's prime; `i as u64 *
//! 4096`; `c * 0x0101010101010101`, a popcount's byte sum): AVX2 has no 64-bit `vpmullq`,
//! and the general product takes three `vpmuludq` per four lanes (`lo*lo + ((hi_a*lo_b +
//! lo_a*hi_b) << 32)`). With one factor a constant `c`, its form is known, and the cheapest
//! of these is taken (the constant read in place from its frame slot):
//!
//! * `x` a `u32` widened (its high half 0) and `c` below 2^32: `lo_x*c` alone, which
//!   nothing wraps;
//! * `c = 2^s * (1 + 2^k1) * .. * (1 + 2^kn)`, n at most 3, exactly as integers (a power
//!   of two, the sum of two powers, `0x0101010101010101 = (1 + 2^8)(1 + 2^16)(1 + 2^32)`):
//!   `x = x + (x << k)` per factor, then `x << s`, no multiply;
//! * `c`'s low half 0: `(lo_x*hi_c) << 32`;
//! * `c`'s high half 0: `lo_x*c + ((hi_x*c) << 32)`;
//! * `c`'s high half a power of two `2^s` (FNV-1a's 64-bit prime is `2^40 + 0x1b3`):
//!   `lo_x*lo_c + ((hi_x*lo_c + (x << s)) << 32)` (only the sum's low 32 bits survive the
//!   shift, and those of `x << s` are `lo_x * 2^s`'s).
//!
//! Each is the product's low 64 bits exactly, for every `x`, signed or not (wrapping
//! included: multiplying by `2^s` and by each factor modulo 2^64 multiplies by their
//! product modulo 2^64), so the lanes keep the interpreter's values. The constant cannot
//! fault, so computing the other factor alone keeps the order of faults.

use iced_x86::code_asm::*;
use kiln_ir::{Expr, ExprNode, Type};

use super::{R, V};

/// How a product by a constant is computed (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Form {
    /// The exact product of a widened `u32` and a constant below 2^32.
    Narrow,
    /// Shifts and adds: `x = x + (x << k)` for each nonzero `k` (at most three), then
    /// `x << s` (`s` the first).
    Chain(u32, [u32; 3]),
    /// A constant whose low half is 0.
    LoZero,
    /// A constant below 2^32.
    HiZero,
    /// A constant whose high half is `2^s` (`s` here).
    HiPow2(u32),
}

impl Form {
    /// Instructions per four lanes, a multiply counting twice (its latency and its ports).
    fn cost(self) -> u32 {
        match self {
            Form::Narrow => 2,
            Form::Chain(s, ks) => {
                u32::from(s > 0) + 2 * ks.iter().filter(|&&k| k > 0).count() as u32
            }
            Form::LoZero => 4,
            Form::HiZero => 7,
            Form::HiPow2(0) => 8,
            Form::HiPow2(_) => 9,
        }
    }
}

/// The bits of the 64-bit integer constant `e`, if it is one.
pub(super) fn constant64(e: &Expr) -> Option<u64> {
    match e.node() {
        ExprNode::Imm(i @ kiln_ir::Imm::Int(..)) => Some(crate::x86::rt::bits_of(*i)),
        _ => None,
    }
}

/// A `u32` value widened (its high half 0).
fn widened(e: &Expr) -> bool {
    matches!(e.node(), ExprNode::Cast { a, .. } if a.ty() == Type::U32)
}

/// `m` as a product of at most `n` factors `1 + 2^k` (k ≥ 1) into `ks[..n]`: exact integer
/// division, so the product is `m` itself.
fn factors(m: u64, ks: &mut [u32]) -> bool {
    if m == 1 {
        return true;
    }
    let Some((first, rest)) = ks.split_first_mut() else { return false };
    for k in 1..64 {
        let f = (1u64 << k) + 1;
        if f > m {
            break;
        }
        if m.is_multiple_of(f) && factors(m / f, rest) {
            *first = k;
            return true;
        }
    }
    false
}

/// The form of the 64-bit product `x * c` by the constant `c`, or `None`: a general
/// product (cheaper than every form that applies, or none does).
pub(super) fn form(x: &Expr, c: u64) -> Option<Form> {
    let mut ks = [0; 3];
    let chain = (c != 0 && factors(c >> c.trailing_zeros(), &mut ks))
        .then(|| Form::Chain(c.trailing_zeros(), ks));
    let (hi, lo) = (c >> 32, c as u32);
    let narrow = (hi == 0 && widened(x)).then_some(Form::Narrow);
    let lo_zero = (lo == 0).then_some(Form::LoZero);
    let hi_zero = (hi == 0).then_some(Form::HiZero);
    let hi_pow2 = hi.is_power_of_two().then(|| Form::HiPow2(hi.trailing_zeros()));
    // (The first of equal cost: no multiply before some.)
    [chain, narrow, lo_zero, hi_zero, hi_pow2].into_iter().flatten().min_by_key(|f| f.cost())
}

impl V {
    /// `p = p * c` (four lanes of 64 bits) by the constant `c` of form `f`, whose four
    /// qwords are at `k`, with `t` and `u` free temporaries.
    pub(super) fn mul64_const(
        &mut self,
        f: Form,
        c: u64,
        p: AsmRegisterYmm,
        k: AsmMemoryOperand,
        t: AsmRegisterYmm,
        u: AsmRegisterYmm,
    ) -> R<()> {
        match f {
            Form::Narrow => self.a.vpmuludq(p, p, k)?,
            Form::Chain(s, ks) => {
                for k in ks.into_iter().filter(|&k| k > 0) {
                    self.a.vpsllq(t, p, k)?;
                    self.a.vpaddq(p, p, t)?;
                }
                if s > 0 {
                    self.a.vpsllq(p, p, s)?;
                }
            }
            Form::HiZero | Form::HiPow2(_) => {
                self.a.vpsrlq(t, p, 32)?;
                self.a.vpmuludq(t, t, k)?;
                match f {
                    Form::HiPow2(0) => self.a.vpaddq(t, t, p)?,
                    Form::HiPow2(s) => {
                        self.a.vpsllq(u, p, s)?;
                        self.a.vpaddq(t, t, u)?;
                    }
                    _ => {}
                }
                self.a.vpsllq(t, t, 32)?;
                self.a.vpmuludq(p, p, k)?;
                self.a.vpaddq(p, p, t)?;
            }
            Form::LoZero => {
                let hi = self.q_slot(c >> 32);
                self.a.vpmuludq(p, p, hi)?;
                self.a.vpsllq(p, p, 32)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chain's steps on one value, as the code computes them.
    fn run_chain(x: u64, s: u32, ks: [u32; 3]) -> u64 {
        let mut p = x;
        for k in ks.into_iter().filter(|&k| k > 0) {
            p = p.wrapping_add(p << k);
        }
        p << s
    }

    #[test]
    fn chains_are_the_product() {
        let xs = [0, 1, 3, 0x8000_0000_0000_0001, u64::MAX, 0x0123_4567_89ab_cdef, 0xdead_beef];
        let consts = [
            1,
            2,
            3,
            5,
            0x0101_0101_0101_0101,
            0x8000_0000_0000_0000,
            0x8000_0000_0000_0001,
            0x0001_0001_0001_0001,
            0x1_0000_0001,
            (1 << 63) + (1 << 62),
            45,
            4096 * 9,
        ];
        let u = Expr::var(&kiln_ir::Var::new("x", Type::U64));
        for c in consts {
            let Some(Form::Chain(s, ks)) = form(&u, c) else { panic!("{c:#x}: not a chain") };
            for x in xs {
                assert_eq!(run_chain(x, s, ks), x.wrapping_mul(c), "{x:#x} * {c:#x}");
            }
        }
        // Not chains: 7 = 1 + 2 + 4 has no (1 + 2^k) factorization; FNV's prime.
        assert!(!matches!(form(&u, 7), Some(Form::Chain(..))));
        assert_eq!(form(&u, 0x100_0000_01b3), Some(Form::HiPow2(8)));
        assert_eq!(form(&u, 0x1234_5678_0000_0000), Some(Form::LoZero));
    }
}
