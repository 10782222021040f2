//! Integer products of 32-bit lanes by a constant `2^k + 1` or `2^k - 1` (`3 * v + 1`,
//! `x * 5`, `x * 7`): one shift and one add or subtract instead of `vpmulld`, whose latency
//! (10 cycles) sits on the loop-carried chain of an iteration such as a Collatz step (its
//! `v = 3 * v + 1` under a lane-varying `while`). The low 32 bits of `x * c` are those of
//! `(x << k) + x` (or `- x`) for every `x`, signed or not, wrapping included, so the lanes
//! keep the interpreter's values; narrow types' lanes are re-extended after `*` by the
//! caller as before. A constant operand cannot fault, so computing only the other one keeps
//! the order of faults.

use kiln_ir::{Expr, Imm, Scalar, Type};

use super::{R, V, YMM};

/// `c` as `2^k + 1` (`true`) or `2^k - 1` (`false`), `k` in 1..=31, for `c` of at least 3.
pub(super) fn shift_form(c: u32) -> Option<(u32, bool)> {
    if c < 3 {
        return None;
    }
    if (c - 1).is_power_of_two() {
        return Some(((c - 1).trailing_zeros(), true));
    }
    match c.checked_add(1) {
        Some(p) if p.is_power_of_two() => Some((p.trailing_zeros(), false)),
        _ => None,
    }
}

/// The operand and the shift form of a product of integer lanes by such a constant (either
/// side), or `None`.
fn shift_product<'e>(a: &'e Expr, b: &'e Expr) -> Option<(&'e Expr, u32, bool)> {
    let lanes = matches!(
        a.ty(),
        Type::Scalar(
            Scalar::I32 | Scalar::U32 | Scalar::I16 | Scalar::U16 | Scalar::I8 | Scalar::U8
        )
    );
    if !lanes {
        return None;
    }
    let c = |e: &Expr| match e.as_imm() {
        Some(Imm::Int(_, bits)) => shift_form(*bits as u32),
        _ => None,
    };
    if let Some((k, plus)) = c(b) {
        return Some((a, k, plus));
    }
    c(a).map(|(k, plus)| (b, k, plus))
}

impl V {
    /// `a * b` into `ymm{d}` by a shift and an add or subtract where one side is a constant
    /// `2^k ± 1` and the other is in a register or fits `ymm{d}` with `ymm{d + 1}` free as
    /// a temporary; false (nothing emitted) otherwise.
    pub(super) fn mul_by_shift(&mut self, a: &Expr, b: &Expr, d: usize) -> R<bool> {
        let Some((x, k, plus)) = shift_product(a, b) else {
            return Ok(false);
        };
        let src = match self.src_if_reg(x) {
            Some(r) => r,
            // (The eight temporaries: `ymm{d + 1}` must be one of them.)
            None if d + 1 < 8 => {
                self.expr(x, d)?;
                d
            }
            None => return Ok(false),
        };
        let t = if src == d { YMM[d + 1] } else { YMM[d] };
        self.a.vpslld(t, YMM[src], k)?;
        if plus {
            self.a.vpaddd(YMM[d], t, YMM[src])?;
        } else {
            self.a.vpsubd(YMM[d], t, YMM[src])?;
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::shift_form;

    #[test]
    fn shift_forms_are_exact_products() {
        for c in 0u32..=70_000 {
            if let Some((k, plus)) = shift_form(c) {
                for x in [0u32, 1, 7, 0x8000_0001, u32::MAX, 0x1234_5678] {
                    let s = x.wrapping_shl(k);
                    let v = if plus { s.wrapping_add(x) } else { s.wrapping_sub(x) };
                    assert_eq!(v, x.wrapping_mul(c), "{x} * {c}");
                }
            }
        }
        assert_eq!(shift_form(3), Some((1, true)));
        assert_eq!(shift_form(7), Some((3, false)));
        assert_eq!(shift_form(2), None);
        assert_eq!(shift_form(u32::MAX), None);
        assert_eq!(shift_form(0x8000_0001), Some((31, true)));
    }
}
