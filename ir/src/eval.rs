//! Scalar semantics: what every operator, cast, intrinsic and atomic does to [`Imm`] values.
//!
//! This is the one definition of kiln's scalar arithmetic: the interpreter evaluates with it,
//! and constant folding in the passes (the simplifier, constant propagation) uses it, so a
//! folded constant is always exactly what the kernel would have computed.
//!
//! ```
//! use kiln_ir::{eval, BinOp, Imm, Scalar};
//! let r = eval::binary(BinOp::Div, Imm::Int(Scalar::I32, -7i64 as u64), Imm::Int(Scalar::I32, 2));
//! assert_eq!(r, Ok(Imm::Int(Scalar::I32, -3i64 as u64)));
//! assert!(eval::binary(BinOp::Rem, Imm::Int(Scalar::I32, 1), Imm::Int(Scalar::I32, 0)).is_err());
//! ```
//!
//! These functions never panic: an operand of a type an operator is not defined on (which a
//! verified kernel never has) is an `Err` with a message.

pub mod math;
pub mod math64;

use crate::expr::{canonical_int, round_float, BinOp, Imm, Intrinsic, UnOp};
use crate::stmt::AtomicOp;
use crate::types::Scalar;

fn undefined(what: &str, ty: Scalar) -> String {
    format!("`{what}` is not defined on {ty}")
}

fn mismatch(what: &str, a: Scalar, b: Scalar) -> String {
    format!("`{what}` on mismatched operand types {a} and {b}")
}

/// The shift amount `y` taken modulo the bit width of `ty`.
fn shift_amount(ty: Scalar, y: u64) -> u32 {
    (y as u32) & (ty.bits() - 1)
}

/// `op a`.
pub fn unary(op: UnOp, a: Imm) -> Result<Imm, String> {
    match (op, a) {
        (UnOp::Neg, Imm::Int(t, x)) => Ok(Imm::Int(t, canonical_int(t, x.wrapping_neg()))),
        (UnOp::Neg, Imm::Float(t, v)) if !t.is_storage_float() => Ok(Imm::Float(t, -v)),
        (UnOp::Not, Imm::Bool(b)) => Ok(Imm::Bool(!b)),
        (UnOp::BitNot, Imm::Int(t, x)) => Ok(Imm::Int(t, canonical_int(t, !x))),
        _ => Err(undefined(op.symbol(), a.scalar())),
    }
}

/// `a op b`. Division and remainder by zero are an error without context (a caller that
/// knows the expression names it).
pub fn binary(op: BinOp, a: Imm, b: Imm) -> Result<Imm, String> {
    match (a, b) {
        (Imm::Int(t, x), Imm::Int(u, y)) if t == u => int_binary(op, t, x, y),
        (Imm::Float(t, x), Imm::Float(u, y)) if t == u => float_binary(op, t, x, y),
        (Imm::Bool(x), Imm::Bool(y)) => bool_binary(op, x, y),
        _ => Err(mismatch(op.symbol(), a.scalar(), b.scalar())),
    }
}

fn int_binary(op: BinOp, t: Scalar, x: u64, y: u64) -> Result<Imm, String> {
    let signed = t.is_signed();
    let int = |bits: u64| Ok(Imm::Int(t, canonical_int(t, bits)));
    let (sx, sy) = (x as i64, y as i64);
    match op {
        BinOp::Add => int(x.wrapping_add(y)),
        BinOp::Sub => int(x.wrapping_sub(y)),
        BinOp::Mul => int(x.wrapping_mul(y)),
        BinOp::Div | BinOp::Rem if y == 0 => Err(format!("integer {} by zero", op_word(op))),
        BinOp::Div if signed => int(sx.wrapping_div(sy) as u64),
        BinOp::Div => int(x / y),
        BinOp::Rem if signed => int(sx.wrapping_rem(sy) as u64),
        BinOp::Rem => int(x % y),
        BinOp::And => int(x & y),
        BinOp::Or => int(x | y),
        BinOp::Xor => int(x ^ y),
        BinOp::Shl => int(x << shift_amount(t, y)),
        BinOp::Shr if signed => int((sx >> shift_amount(t, y)) as u64),
        BinOp::Shr => int(x >> shift_amount(t, y)),
        BinOp::Eq => Ok(Imm::Bool(x == y)),
        BinOp::Ne => Ok(Imm::Bool(x != y)),
        BinOp::Lt => Ok(Imm::Bool(if signed { sx < sy } else { x < y })),
        BinOp::Le => Ok(Imm::Bool(if signed { sx <= sy } else { x <= y })),
        BinOp::Gt => Ok(Imm::Bool(if signed { sx > sy } else { x > y })),
        BinOp::Ge => Ok(Imm::Bool(if signed { sx >= sy } else { x >= y })),
        BinOp::LogicAnd | BinOp::LogicOr => Err(undefined(op.symbol(), t)),
    }
}

/// "division" or "remainder".
pub fn op_word(op: BinOp) -> &'static str {
    if op == BinOp::Rem {
        "remainder"
    } else {
        "division"
    }
}

fn float_binary(op: BinOp, t: Scalar, x: f64, y: f64) -> Result<Imm, String> {
    // Comparisons are exact in f64 for every float type (values are exactly representable).
    let cmp = match op {
        BinOp::Eq => Some(x == y),
        BinOp::Ne => Some(x != y),
        BinOp::Lt => Some(x < y),
        BinOp::Le => Some(x <= y),
        BinOp::Gt => Some(x > y),
        BinOp::Ge => Some(x >= y),
        _ => None,
    };
    if let Some(c) = cmp {
        return Ok(Imm::Bool(c));
    }
    let v = match t {
        Scalar::F32 => {
            let (a, b) = (x as f32, y as f32);
            (match op {
                BinOp::Add => a + b,
                BinOp::Sub => a - b,
                BinOp::Mul => a * b,
                BinOp::Div => a / b,
                _ => return Err(undefined(op.symbol(), t)),
            }) as f64
        }
        Scalar::F64 => match op {
            BinOp::Add => x + y,
            BinOp::Sub => x - y,
            BinOp::Mul => x * y,
            BinOp::Div => x / y,
            _ => return Err(undefined(op.symbol(), t)),
        },
        _ => return Err(undefined(op.symbol(), t)),
    };
    Ok(Imm::Float(t, v))
}

fn bool_binary(op: BinOp, x: bool, y: bool) -> Result<Imm, String> {
    Ok(Imm::Bool(match op {
        BinOp::And | BinOp::LogicAnd => x & y,
        BinOp::Or | BinOp::LogicOr => x | y,
        BinOp::Xor | BinOp::Ne => x ^ y,
        BinOp::Eq => x == y,
        _ => return Err(undefined(op.symbol(), Scalar::Bool)),
    }))
}

/// `a as to`: integer casts wrap; float to integer truncates toward zero and saturates, NaN
/// giving 0; integer or float to float rounds to nearest even; to `bool` is `!= 0` (NaN is
/// true); `bool` to a number is 0 or 1.
pub fn cast(to: Scalar, a: Imm) -> Imm {
    match a {
        Imm::Bool(b) => match to {
            Scalar::Bool => Imm::Bool(b),
            t if t.is_float() => Imm::Float(t, b as u8 as f64),
            t => Imm::Int(t, b as u64),
        },
        Imm::Int(from, bits) => match to {
            Scalar::Bool => Imm::Bool(bits != 0),
            Scalar::F32 => {
                let v = if from.is_signed() { bits as i64 as f32 } else { bits as f32 };
                Imm::Float(Scalar::F32, v as f64)
            }
            // i64 -> f64 rounds only above 2^53, where every f16 is infinite anyway, so the
            // double rounding through f64 is exact for f16.
            t if t.is_float() => {
                let v = if from.is_signed() { bits as i64 as f64 } else { bits as f64 };
                Imm::Float(t, round_float(t, v))
            }
            t => Imm::Int(t, canonical_int(t, bits)),
        },
        Imm::Float(from, v) => match to {
            Scalar::Bool => Imm::Bool(v != 0.0),
            // A cast to its own type is no conversion: every bit stays.
            t if t == from => a,
            // A conversion quiets a signalling NaN (IEEE 754 convertFormat), keeping the
            // sign and the top payload bits.
            t if t.is_float() => Imm::Float(t, round_float(t, quiet(v))),
            t => Imm::Int(t, float_to_int(t, v)),
        },
    }
}

/// `v` with the quiet bit set if it is a NaN (the same bit for every float type's NaN as an
/// [`Imm`] holds it): what arithmetic makes of a signalling NaN.
fn quiet(v: f64) -> f64 {
    if v.is_nan() {
        f64::from_bits(v.to_bits() | 1 << 51)
    } else {
        v
    }
}

/// Rust's `as` from float to integer truncates, saturates and maps NaN to 0: exactly kiln's
/// rule.
fn float_to_int(t: Scalar, v: f64) -> u64 {
    match t {
        Scalar::I8 => v as i8 as i64 as u64,
        Scalar::I16 => v as i16 as i64 as u64,
        Scalar::I32 => v as i32 as i64 as u64,
        Scalar::I64 => v as i64 as u64,
        Scalar::U8 => v as u8 as u64,
        Scalar::U16 => v as u16 as u64,
        Scalar::U32 => v as u32 as u64,
        _ => v as u64,
    }
}

/// IEEE 754-2019 minimumNumber / maximumNumber: a NaN operand yields the other operand (two
/// NaNs give a quiet NaN) and -0.0 < +0.0.
fn float_min_max(max: bool, x: f64, y: f64) -> f64 {
    if x.is_nan() {
        return quiet(y);
    }
    if y.is_nan() {
        return x;
    }
    if x == y {
        // Equal values differ at most in the sign of zero.
        let x_neg = x.is_sign_negative();
        return if x_neg != max { x } else { y };
    }
    if (x < y) != max {
        x
    } else {
        y
    }
}

/// An intrinsic call.
pub fn intrinsic(op: Intrinsic, args: &[Imm]) -> Result<Imm, String> {
    let name = op.name();
    let first = args.first().ok_or_else(|| format!("`{name}` without arguments"))?;
    let ty = first.scalar();
    if let Some(other) = args.iter().find(|a| a.scalar() != ty) {
        return Err(mismatch(name, ty, other.scalar()));
    }
    match (op, args) {
        (Intrinsic::Min | Intrinsic::Max, &[Imm::Int(t, x), Imm::Int(_, y)]) => {
            let max = op == Intrinsic::Max;
            let x_less = if t.is_signed() { (x as i64) < (y as i64) } else { x < y };
            Ok(Imm::Int(t, if x_less != max { x } else { y }))
        }
        (Intrinsic::Min | Intrinsic::Max, &[Imm::Float(t, x), Imm::Float(_, y)])
            if !t.is_storage_float() =>
        {
            Ok(Imm::Float(t, float_min_max(op == Intrinsic::Max, x, y)))
        }
        (Intrinsic::Mad, &[Imm::Int(t, a), Imm::Int(_, b), Imm::Int(_, c)]) => {
            // Canonical bits wrap correctly at 64 bits; canonicalizing gives the type's width.
            Ok(Imm::Int(t, canonical_int(t, a.wrapping_mul(b).wrapping_add(c))))
        }
        (Intrinsic::Add3, &[Imm::Int(t, a), Imm::Int(_, b), Imm::Int(_, c)]) => {
            Ok(Imm::Int(t, canonical_int(t, a.wrapping_add(b).wrapping_add(c))))
        }
        (Intrinsic::Abs, &[Imm::Int(t, x)]) => {
            let v = if t.is_signed() { (x as i64).wrapping_abs() as u64 } else { x };
            Ok(Imm::Int(t, canonical_int(t, v)))
        }
        (Intrinsic::Fma, &[Imm::Float(Scalar::F32, a), Imm::Float(_, b), Imm::Float(_, c)]) => {
            Ok(Imm::Float(Scalar::F32, (a as f32).mul_add(b as f32, c as f32) as f64))
        }
        (Intrinsic::Fma, &[Imm::Float(Scalar::F64, a), Imm::Float(_, b), Imm::Float(_, c)]) => {
            Ok(Imm::Float(Scalar::F64, a.mul_add(b, c)))
        }
        // `abs` only clears the sign bit, so a NaN keeps its payload, signalling or not.
        (Intrinsic::Abs, &[Imm::Float(t, x)]) if !t.is_storage_float() => {
            Ok(Imm::Float(t, x.abs()))
        }
        // Rounding to an integral value is arithmetic: a signalling NaN comes back quiet (as
        // IEEE 754 says and the hardware does; Rust's software `floor` of an unoptimized
        // build would return it unchanged).
        (Intrinsic::Floor | Intrinsic::Ceil | Intrinsic::Trunc, &[Imm::Float(t, x)])
            if x.is_nan() && !t.is_storage_float() =>
        {
            Ok(Imm::Float(t, quiet(x)))
        }
        (_, &[Imm::Float(Scalar::F32, x)]) => {
            let x = x as f32;
            let v = match op {
                Intrinsic::Abs => x.abs(),
                Intrinsic::Sqrt => x.sqrt(),
                Intrinsic::Floor => x.floor(),
                Intrinsic::Ceil => x.ceil(),
                Intrinsic::Trunc => x.trunc(),
                Intrinsic::Exp => math::exp_f32(x),
                Intrinsic::Log => math::log_f32(x),
                Intrinsic::Sin => math::sin_f32(x),
                Intrinsic::Cos => math::cos_f32(x),
                _ => return Err(format!("`{name}` takes {} arguments", op.arity())),
            };
            Ok(Imm::Float(Scalar::F32, v as f64))
        }
        (_, &[Imm::Float(Scalar::F64, x)]) => {
            let v = match op {
                Intrinsic::Abs => x.abs(),
                Intrinsic::Sqrt => x.sqrt(),
                Intrinsic::Floor => x.floor(),
                Intrinsic::Ceil => x.ceil(),
                Intrinsic::Trunc => x.trunc(),
                Intrinsic::Exp => math64::exp_f64(x),
                Intrinsic::Log => math64::log_f64(x),
                Intrinsic::Sin => math64::sin_f64(x),
                Intrinsic::Cos => math64::cos_f64(x),
                _ => return Err(format!("`{name}` takes {} arguments", op.arity())),
            };
            Ok(Imm::Float(Scalar::F64, v))
        }
        _ if args.len() != op.arity() => Err(format!("`{name}` takes {} arguments", op.arity())),
        _ => Err(undefined(name, ty)),
    }
}

/// True if atomics `op` are defined on elements of type `t`: i32, u32, i64 and u64 for every
/// operation, f32 for `atomic_add` only.
pub fn atomic_defined(op: AtomicOp, t: Scalar) -> bool {
    matches!(t, Scalar::I32 | Scalar::U32 | Scalar::I64 | Scalar::U64)
        || (t == Scalar::F32 && op == AtomicOp::Add)
}

/// The new value of an element holding `old` after atomic `op` with operand `v` (and `cmp`
/// for `atomic_cmpxchg`).
pub fn atomic(op: AtomicOp, old: Imm, cmp: Option<Imm>, v: Imm) -> Result<Imm, String> {
    let t = old.scalar();
    if v.scalar() != t || cmp.is_some_and(|c| c.scalar() != t) {
        return Err(format!("`{}` of a {} value on {t} memory", op.name(), v.scalar()));
    }
    if !atomic_defined(op, t) {
        return Err(undefined(op.name(), t));
    }
    let bin = |b: BinOp| binary(b, old, v);
    match op {
        AtomicOp::Add => bin(BinOp::Add),
        AtomicOp::Sub => bin(BinOp::Sub),
        AtomicOp::And => bin(BinOp::And),
        AtomicOp::Or => bin(BinOp::Or),
        AtomicOp::Xor => bin(BinOp::Xor),
        AtomicOp::Min => intrinsic(Intrinsic::Min, &[old, v]),
        AtomicOp::Max => intrinsic(Intrinsic::Max, &[old, v]),
        AtomicOp::Xchg => Ok(v),
        AtomicOp::CmpXchg => Ok(if cmp == Some(old) { v } else { old }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn i(t: Scalar, v: i128) -> Imm {
        Imm::int(t, v)
    }

    fn f(t: Scalar, v: f64) -> Imm {
        Imm::float(t, v)
    }

    #[test]
    fn integer_edges() {
        use Scalar::*;
        let min = i32::MIN as i128;
        assert_eq!(binary(BinOp::Div, i(I32, min), i(I32, -1)), Ok(i(I32, min)));
        assert_eq!(binary(BinOp::Rem, i(I32, min), i(I32, -1)), Ok(i(I32, 0)));
        assert_eq!(binary(BinOp::Div, i(I8, -128), i(I8, -1)), Ok(i(I8, -128)));
        assert_eq!(binary(BinOp::Rem, i(I64, -7), i(I64, 2)), Ok(i(I64, -1)));
        assert_eq!(binary(BinOp::Div, i(I32, -7), i(I32, 2)), Ok(i(I32, -3)));
        assert_eq!(
            binary(BinOp::Div, i(U32, 7), i(U32, 0)),
            Err("integer division by zero".into())
        );
        assert_eq!(binary(BinOp::Shl, i(I32, 1), i(I32, 33)), Ok(i(I32, 2)));
        assert_eq!(binary(BinOp::Shl, i(U8, 1), i(U8, 8)), Ok(i(U8, 1)));
        assert_eq!(binary(BinOp::Shr, i(I8, -128), i(I8, 7)), Ok(i(I8, -1)));
        assert_eq!(binary(BinOp::Shr, i(U8, 128), i(U8, 7)), Ok(i(U8, 1)));
        assert_eq!(binary(BinOp::Shr, i(I32, -8), i(I32, -1)), Ok(i(I32, -1)));
        assert_eq!(binary(BinOp::Add, i(U8, 250), i(U8, 10)), Ok(i(U8, 4)));
        assert_eq!(binary(BinOp::Mul, i(I16, 300), i(I16, 300)), Ok(i(I16, 90000 - 65536)));
        assert_eq!(binary(BinOp::Lt, i(I32, -1), i(I32, 0)), Ok(Imm::Bool(true)));
        assert_eq!(binary(BinOp::Lt, i(U32, u32::MAX as i128), i(U32, 0)), Ok(Imm::Bool(false)));
        assert_eq!(unary(UnOp::Neg, i(I32, min)), Ok(i(I32, min)));
        assert_eq!(unary(UnOp::Neg, i(U8, 1)), Ok(i(U8, 255)));
        assert_eq!(unary(UnOp::BitNot, i(U16, 0)), Ok(i(U16, 65535)));
        assert_eq!(intrinsic(Intrinsic::Abs, &[i(I8, -128)]), Ok(i(I8, -128)));
        assert_eq!(intrinsic(Intrinsic::Min, &[i(I64, -5), i(I64, 3)]), Ok(i(I64, -5)));
        assert_eq!(intrinsic(Intrinsic::Max, &[i(U64, 1 << 63), i(U64, 3)]), Ok(i(U64, 1 << 63)));
        // mad and add3 wrap at the type's width, signed and unsigned alike.
        assert_eq!(intrinsic(Intrinsic::Mad, &[i(I8, 100), i(I8, 3), i(I8, 1)]), Ok(i(I8, 45)));
        assert_eq!(
            intrinsic(Intrinsic::Mad, &[i(U16, 300), i(U16, 300), i(U16, 7)]),
            Ok(i(U16, 24471))
        );
        let umax = u64::MAX as i128;
        assert_eq!(
            intrinsic(Intrinsic::Mad, &[i(U64, umax), i(U64, umax), i(U64, 1)]),
            Ok(i(U64, 2))
        );
        assert_eq!(
            intrinsic(Intrinsic::Add3, &[i(I32, min), i(I32, -1), i(I32, 5)]),
            Ok(i(I32, min + 4))
        );
        assert_eq!(intrinsic(Intrinsic::Add3, &[i(U8, 200), i(U8, 100), i(U8, 1)]), Ok(i(U8, 45)));
        assert!(intrinsic(Intrinsic::Mad, &[f(F32, 1.0), f(F32, 1.0), f(F32, 1.0)]).is_err());
        assert!(intrinsic(Intrinsic::Add3, &[i(I32, 1), i(I32, 1)]).is_err());
        assert!(binary(BinOp::Add, i(I32, 1), i(U32, 1)).is_err());
        assert!(binary(BinOp::Rem, f(F32, 1.0), f(F32, 1.0)).is_err());
        assert!(unary(UnOp::Not, i(I32, 1)).is_err());
    }

    #[test]
    fn float_edges() {
        use Scalar::*;
        // 16777216 + 1 is not representable in f32: rounds to even.
        assert_eq!(binary(BinOp::Add, f(F32, 16777216.0), f(F32, 1.0)), Ok(f(F32, 16777216.0)));
        assert_eq!(binary(BinOp::Add, f(F64, 16777216.0), f(F64, 1.0)), Ok(f(F64, 16777217.0)));
        let third = binary(BinOp::Div, f(F32, 1.0), f(F32, 3.0)).unwrap();
        assert_eq!(third, f(F32, (1.0f32 / 3.0) as f64));
        let min = |a: f64, b: f64| intrinsic(Intrinsic::Min, &[f(F32, a), f(F32, b)]).unwrap();
        let max = |a: f64, b: f64| intrinsic(Intrinsic::Max, &[f(F64, a), f(F64, b)]).unwrap();
        assert_eq!(min(0.0, -0.0), f(F32, -0.0));
        assert_eq!(min(-0.0, 0.0), f(F32, -0.0));
        assert_eq!(max(-0.0, 0.0), f(F64, 0.0));
        assert_eq!(max(0.0, -0.0), f(F64, 0.0));
        assert_eq!(min(f64::NAN, 2.0), f(F32, 2.0));
        assert_eq!(max(3.0, f64::NAN), f(F64, 3.0));
        assert!(min(f64::NAN, f64::NAN).as_f64().unwrap().is_nan());
        let fma = intrinsic(Intrinsic::Fma, &[f(F32, 0.1), f(F32, 10.0), f(F32, -1.0)]).unwrap();
        let want = (0.1f32).mul_add(10.0, -1.0) as f64;
        assert_eq!(fma, f(F32, want));
        assert_ne!(want, ((0.1f32 * 10.0) - 1.0) as f64);
        assert_eq!(intrinsic(Intrinsic::Floor, &[f(F64, -1.5)]), Ok(f(F64, -2.0)));
        assert_eq!(intrinsic(Intrinsic::Ceil, &[f(F32, -1.5)]), Ok(f(F32, -1.0)));
        assert_eq!(intrinsic(Intrinsic::Trunc, &[f(F32, -1.5)]), Ok(f(F32, -1.0)));
        assert_eq!(intrinsic(Intrinsic::Abs, &[f(F32, -0.0)]), Ok(f(F32, 0.0)));
        assert_eq!(intrinsic(Intrinsic::Sqrt, &[f(F64, 2.0)]), Ok(f(F64, 2f64.sqrt())));
        assert!(intrinsic(Intrinsic::Sqrt, &[i(I32, 4)]).is_err());
        assert!(intrinsic(Intrinsic::Fma, &[f(F32, 1.0)]).is_err());
        assert!(binary(BinOp::Add, f(F16, 1.0), f(F16, 1.0)).is_err());
    }

    #[test]
    fn casts() {
        use Scalar::*;
        assert_eq!(cast(I32, f(F32, f64::NAN)), i(I32, 0));
        assert_eq!(cast(I32, f(F64, 1e20)), i(I32, i32::MAX as i128));
        assert_eq!(cast(I8, f(F64, -1e20)), i(I8, -128));
        assert_eq!(cast(U8, f(F32, -3.7)), i(U8, 0));
        assert_eq!(cast(I32, f(F32, -3.7)), i(I32, -3));
        assert_eq!(cast(U64, f(F64, f64::INFINITY)), i(U64, u64::MAX as i128));
        assert_eq!(cast(U32, i(I32, -1)), i(U32, u32::MAX as i128));
        assert_eq!(cast(I64, i(U32, u32::MAX as i128)), i(I64, u32::MAX as i128));
        assert_eq!(cast(I8, i(I32, 200)), i(I8, -56));
        assert_eq!(cast(F32, i(I32, 16777217)), f(F32, 16777216.0));
        assert_eq!(cast(F32, i(U64, u64::MAX as i128)), f(F32, 18446744073709551616.0));
        assert_eq!(cast(F16, i(I32, 70000)), f(F16, f64::INFINITY));
        assert_eq!(cast(F16, i(I32, 2049)), f(F16, 2048.0));
        assert_eq!(cast(F16, f(F32, 65519.0)), f(F16, 65504.0));
        assert_eq!(cast(F32, f(F64, 0.1)), f(F32, 0.1f32 as f64));
        assert_eq!(cast(Bool, f(F32, f64::NAN)), Imm::Bool(true));
        assert_eq!(cast(Bool, f(F32, -0.0)), Imm::Bool(false));
        assert_eq!(cast(Bool, i(U8, 2)), Imm::Bool(true));
        assert_eq!(cast(F64, Imm::Bool(true)), f(F64, 1.0));
        assert_eq!(cast(I16, Imm::Bool(true)), i(I16, 1));
    }

    #[test]
    fn atomics() {
        use Scalar::*;
        let old = i(U32, 5);
        assert_eq!(atomic(AtomicOp::Sub, old, None, i(U32, 6)), Ok(i(U32, u32::MAX as i128)));
        assert_eq!(atomic(AtomicOp::Min, i(I32, -1), None, i(I32, 3)), Ok(i(I32, -1)));
        assert_eq!(atomic(AtomicOp::CmpXchg, old, Some(i(U32, 5)), i(U32, 9)), Ok(i(U32, 9)));
        assert_eq!(atomic(AtomicOp::CmpXchg, old, Some(i(U32, 4)), i(U32, 9)), Ok(old));
        assert_eq!(atomic(AtomicOp::Add, f(F32, 0.5), None, f(F32, 0.25)), Ok(f(F32, 0.75)));
        assert!(atomic(AtomicOp::Max, f(F32, 0.5), None, f(F32, 0.25)).is_err());
        assert!(atomic(AtomicOp::Add, i(I16, 1), None, i(I16, 1)).is_err());
        assert!(atomic(AtomicOp::Add, i(I32, 1), None, i(U32, 1)).is_err());
    }
}
