//! 64-bit integer products by a constant (`h * 1099511628211`, FNV-1a's prime; `i as u64 *
//! 4096`): AVX2 has no 64-bit `vpmullq`, and the general product takes three `vpmuludq` per
//! four lanes (`lo*lo + ((hi_a*lo_b + lo_a*hi_b) << 32)`). With one factor a constant `c`,
//! its halves are known, and the partial products that are zero or the other factor itself
//! need no multiply:
//!
//! * `c`'s high half 0: `lo_x*c + ((hi_x*c) << 32)`; and where `x` is a `u32` widened (its
//!   high half 0 too) `lo_x*c` alone, which nothing wraps;
//! * `c`'s high half a power of two `2^s` (FNV-1a's 64-bit prime is `2^40 + 0x1b3`):
//!   `lo_x*lo_c + ((hi_x*lo_c + (x << s)) << 32)` (only the sum's low 32 bits survive the
//!   shift, and those of `x << s` are `lo_x * 2^s`'s);
//! * `c`'s low half 0: `(lo_x*hi_c) << 32`.
//!
//! Each is the product's low 64 bits exactly, for every `x`, signed or not (wrapping
//! included), so the lanes keep the interpreter's values. Both factors are computed as
//! before (the constant cannot fault), so the order of faults is the same.

use iced_x86::code_asm::*;
use kiln_ir::{Expr, ExprNode, Imm, Type};

use super::{R, V};

/// How a product by a constant is computed (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Form {
    /// The exact product of a widened `u32` and a constant below 2^32.
    Narrow,
    /// A constant below 2^32.
    HiZero,
    /// A constant whose high half is `2^s` (`s` here).
    HiPow2(u32),
    /// A constant whose low half is 0.
    LoZero,
}

fn constant(e: &Expr) -> Option<u64> {
    match e.node() {
        ExprNode::Imm(Imm::Int(_, bits)) => Some(*bits),
        _ => None,
    }
}

/// A `u32` value widened (its high half 0).
fn widened(e: &Expr) -> bool {
    matches!(e.node(), ExprNode::Cast { a, .. } if a.ty() == Type::U32)
}

/// The form of the 64-bit product `a * b` with a constant factor, and whether the constant
/// is `a` (then the other factor is `b`'s register), or `None`: a general product.
pub(super) fn form(a: &Expr, b: &Expr) -> Option<(Form, bool)> {
    let (c, x, c_is_a) = match (constant(a), constant(b)) {
        (_, Some(c)) => (c, a, false),
        (Some(c), None) => (c, b, true),
        (None, None) => return None,
    };
    let f = match (c >> 32, c as u32) {
        (0, _) if widened(x) => Form::Narrow,
        (0, _) => Form::HiZero,
        (h, _) if h.is_power_of_two() => Form::HiPow2(h.trailing_zeros()),
        (_, 0) => Form::LoZero,
        _ => return None,
    };
    Some((f, c_is_a))
}

impl V {
    /// `p = p * q` (four lanes of 64 bits) where one of them is the constant of `form`
    /// (`q`, or `p` when `c_is_a`), with `t` and `u` free temporaries.
    pub(super) fn mul64_const(
        &mut self,
        (f, c_is_a): (Form, bool),
        p: AsmRegisterYmm,
        q: AsmRegisterYmm,
        t: AsmRegisterYmm,
        u: AsmRegisterYmm,
    ) -> R<()> {
        let (x, k) = if c_is_a { (q, p) } else { (p, q) };
        match f {
            Form::Narrow => self.a.vpmuludq(p, p, q)?,
            Form::HiZero | Form::HiPow2(_) => {
                self.a.vpsrlq(t, x, 32)?;
                self.a.vpmuludq(t, t, k)?;
                match f {
                    Form::HiPow2(0) => self.a.vpaddq(t, t, x)?,
                    Form::HiPow2(s) => {
                        self.a.vpsllq(u, x, s)?;
                        self.a.vpaddq(t, t, u)?;
                    }
                    _ => {}
                }
                self.a.vpsllq(t, t, 32)?;
                self.a.vpmuludq(p, p, q)?;
                self.a.vpaddq(p, p, t)?;
            }
            Form::LoZero => {
                self.a.vpsrlq(t, k, 32)?;
                self.a.vpmuludq(p, x, t)?;
                self.a.vpsllq(p, p, 32)?;
            }
        }
        Ok(())
    }
}
