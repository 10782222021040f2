//! The value rule for float literals, shared by the `.kir` parser and every place that reads
//! a number typed by a parameter (`kiln run --arg`, `kiln graph`, fusion specs): a literal
//! that names a finite number is that number rounded to nearest in its type, and one too
//! large for the type is an error rather than infinity (`inf` must be written as `inf`).

use crate::expr::round_float;
use crate::types::Scalar;

/// Why a float literal has no value of its type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloatLiteralError {
    /// Not a decimal number (digits, an optional `.` and fraction, an optional exponent).
    Malformed,
    /// A finite number beyond the type's largest finite value: it would round to infinity.
    OutOfRange,
}

/// The value of the unsigned decimal literal `text` (`1.5`, `3`, `1e-3`, `1e40`) as a `ty`
/// (a float type), rounded to nearest; [`FloatLiteralError::OutOfRange`] when it rounds to
/// infinity. Words (`inf`, `nan`) and signs are the caller's: this is the digits' rule only.
pub fn float_literal(ty: Scalar, text: &str) -> Result<f64, FloatLiteralError> {
    let digits = text.bytes().any(|b| b.is_ascii_digit());
    if !digits || !text.bytes().all(|b| b.is_ascii_digit() || b".eE+-".contains(&b)) {
        return Err(FloatLiteralError::Malformed);
    }
    // f32 parses directly: through f64 a literal could round twice.
    let v = match ty {
        Scalar::F32 => text.parse::<f32>().map(f64::from),
        _ => text.parse::<f64>(),
    }
    .map_err(|_| FloatLiteralError::Malformed)?;
    let v = round_float(ty, v);
    if v.is_finite() {
        Ok(v)
    } else {
        Err(FloatLiteralError::OutOfRange)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finite_literals_round_and_overflow_is_an_error() {
        assert_eq!(float_literal(Scalar::F32, "1.5"), Ok(1.5));
        assert_eq!(float_literal(Scalar::F32, "0.1"), Ok(f64::from(0.1f32)));
        assert_eq!(float_literal(Scalar::F32, "3.4028235e38"), Ok(f64::from(f32::MAX)));
        assert_eq!(float_literal(Scalar::F32, "1e-50"), Ok(0.0));
        assert_eq!(float_literal(Scalar::F16, "65504"), Ok(65504.0));
        assert_eq!(float_literal(Scalar::F64, "1e308"), Ok(1e308));
        for (ty, text) in [(Scalar::F32, "1e40"), (Scalar::F16, "70000"), (Scalar::F64, "1e400")] {
            assert_eq!(float_literal(ty, text), Err(FloatLiteralError::OutOfRange), "{text}");
        }
        for text in ["", ".", "inf", "nan", "1x", "e5"] {
            assert_eq!(float_literal(Scalar::F32, text), Err(FloatLiteralError::Malformed));
        }
    }
}
