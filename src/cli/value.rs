//! Parsing the values given on the command line: scalar literals typed by the parameter they
//! are for, nd-range size lists, and buffer initializers (`@FILE.npy`, `zeros:N`, `iota:N`).

use std::path::PathBuf;

use kiln::ir::parse::{float_literal, FloatLiteralError};
use kiln::ir::{Imm, Scalar};

/// The largest buffer `zeros:N` / `iota:N` may ask for, in bytes (4 GiB).
const MAX_BUFFER_BYTES: usize = 1 << 32;

/// Parses a size list `X[,Y[,Z]]` of 1 to 3 unsigned 32-bit numbers.
pub fn parse_sizes(text: &str) -> Result<Vec<u32>, String> {
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    if parts.len() > 3 {
        return Err(format!("expected 1 to 3 comma-separated sizes, got {}", parts.len()));
    }
    parts
        .iter()
        .map(|p| {
            if p.is_empty() {
                return Err("empty size (expected X[,Y[,Z]], e.g. 64 or 8,8)".to_string());
            }
            parse_int_text(p)
                .ok()
                .and_then(|(v, _)| u32::try_from(v).ok())
                .ok_or_else(|| format!("`{p}` is not a size (an integer in 0..=4294967295)"))
        })
        .collect()
}

/// `NAME=VALUE`, split at the first `=`.
pub fn parse_binding(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.trim().is_empty() => {
            Ok((name.trim().to_string(), value.to_string()))
        }
        _ => Err(format!("expected NAME=VALUE, got `{text}`")),
    }
}

/// Where a buffer argument's initial contents come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BufferInit {
    /// `@PATH`: a NumPy `.npy` file.
    Npy(PathBuf),
    /// `zeros:N`: N zero elements.
    Zeros(usize),
    /// `iota:N`: the elements 0, 1, ..., N-1.
    Iota(usize),
}

/// Recognizes a buffer initializer; `None` means the text is meant as a scalar literal.
pub fn parse_buffer_init(text: &str) -> Option<Result<BufferInit, String>> {
    if let Some(path) = text.strip_prefix('@') {
        if path.is_empty() {
            return Some(Err("`@` must be followed by the path of a .npy file".to_string()));
        }
        return Some(Ok(BufferInit::Npy(PathBuf::from(path))));
    }
    for (prefix, make) in [
        ("zeros:", BufferInit::Zeros as fn(usize) -> BufferInit),
        ("iota:", BufferInit::Iota as fn(usize) -> BufferInit),
    ] {
        if let Some(count) = text.strip_prefix(prefix) {
            let n = parse_int_text(count.trim()).ok().and_then(|(v, _)| usize::try_from(v).ok());
            return Some(match n {
                Some(n) => Ok(make(n)),
                None => Err(format!(
                    "`{text}`: `{count}` is not an element count (a non-negative integer)"
                )),
            });
        }
    }
    None
}

/// The little-endian bytes of `init` for a buffer of `elem` elements. (Npy files are read by
/// the caller.)
pub fn generated_bytes(init: &BufferInit, elem: Scalar) -> Result<Vec<u8>, String> {
    let n = match *init {
        BufferInit::Zeros(n) => return filled_bytes(n, zero(elem)),
        BufferInit::Iota(n) => n,
        BufferInit::Npy(_) => unreachable!("npy files are read elsewhere"),
    };
    buffer_size(n, elem)?;
    if elem == Scalar::Bool {
        return Err("iota:N needs a numeric element type, not bool".to_string());
    }
    if let Some(max) = elem.int_max() {
        if n > 0 && (n - 1) as i128 > max {
            return Err(format!(
                "iota:{n} does not fit in {elem}: its largest element would be {}, above {max}",
                n - 1
            ));
        }
    }
    let mut out = reserve_bytes(n, elem)?;
    for i in 0..n {
        let imm =
            if elem.is_float() { Imm::float(elem, i as f64) } else { Imm::int(elem, i as i128) };
        push_le(&mut out, imm);
    }
    Ok(out)
}

/// The zero of `elem` (`false`, `0`, `+0.0`).
fn zero(elem: Scalar) -> Imm {
    if elem.is_float() {
        Imm::float(elem, 0.0)
    } else if elem == Scalar::Bool {
        Imm::Bool(false)
    } else {
        Imm::int(elem, 0)
    }
}

/// The size in bytes of `n` elements of `elem`, or an error when it is over the limit of a
/// buffer made on the command line (4 GiB).
fn buffer_size(n: usize, elem: Scalar) -> Result<usize, String> {
    match n.checked_mul(elem.size_bytes()) {
        Some(bytes) if bytes <= MAX_BUFFER_BYTES => Ok(bytes),
        _ => Err(format!("{n} elements of {elem} is too large a buffer (limit 4 GiB)")),
    }
}

/// The error for a buffer of `bytes` bytes that the allocator refused.
fn no_memory(bytes: usize) -> String {
    format!("not enough memory for a buffer of {bytes} bytes")
}

/// An empty vector with room for `n` elements of `elem` (within the 4 GiB limit); an error,
/// never an abort, when the memory cannot be had.
pub fn reserve_bytes(n: usize, elem: Scalar) -> Result<Vec<u8>, String> {
    let bytes = buffer_size(n, elem)?;
    let mut out = Vec::new();
    out.try_reserve_exact(bytes).map_err(|_| no_memory(bytes))?;
    Ok(out)
}

/// `n` elements of `value` (of `value`'s type) as little-endian bytes, within the 4 GiB
/// limit; an error, never an abort, when the memory cannot be had.
pub fn filled_bytes(n: usize, value: Imm) -> Result<Vec<u8>, String> {
    let mut one = Vec::new();
    push_le(&mut one, value);
    let bytes = buffer_size(n, value.scalar())?;
    if one.iter().all(|&b| b == 0) {
        // Zeroed memory from the allocator is not touched until used: a large zero buffer
        // costs nothing until a kernel writes it.
        return zeroed_bytes(bytes);
    }
    let mut out = reserve_bytes(n, value.scalar())?;
    for _ in 0..n {
        out.extend_from_slice(&one);
    }
    Ok(out)
}

/// `bytes` zero bytes, or an error when the allocator refuses them.
fn zeroed_bytes(bytes: usize) -> Result<Vec<u8>, String> {
    if bytes == 0 {
        return Ok(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u8>(bytes).map_err(|_| no_memory(bytes))?;
    // SAFETY: the layout's size is not zero.
    let p = unsafe { std::alloc::alloc_zeroed(layout) };
    if p.is_null() {
        return Err(no_memory(bytes));
    }
    // SAFETY: `p` comes from the global allocator with the layout of `bytes` u8s (size
    // `bytes`, alignment 1), and all `bytes` of them are initialized (to zero).
    Ok(unsafe { Vec::from_raw_parts(p, bytes, bytes) })
}

/// Appends the little-endian encoding of `imm` (of its own type) to `out`.
pub fn push_le(out: &mut Vec<u8>, imm: Imm) {
    out.extend_from_slice(&imm.to_bits().to_le_bytes()[..imm.scalar().size_bytes()]);
}

/// Decodes element `i` of a little-endian buffer of `elem`s.
pub fn element(bytes: &[u8], elem: Scalar, i: usize) -> Imm {
    let size = elem.size_bytes();
    let raw = &bytes[i * size..(i + 1) * size];
    let mut word = [0u8; 8];
    word[..size].copy_from_slice(raw);
    Imm::from_bits(elem, u64::from_le_bytes(word))
}

/// Formats an immediate the way `kiln run` prints buffer elements: integers in decimal,
/// floats with Rust's shortest round-trip form (always with a `.` or exponent, `NaN`, `inf`);
/// a NaN other than the default one as its bits, `nanf32(0x7f800001)`, as `.kir` writes it
/// and [`parse_scalar`] reads it.
pub fn format_imm(imm: Imm) -> String {
    match imm {
        Imm::Bool(b) => b.to_string(),
        Imm::Int(..) => imm.as_i128().unwrap_or_default().to_string(),
        Imm::Float(t, v) if v.is_nan() && imm != Imm::float(t, f64::NAN) => {
            format!("nan{t}(0x{:x})", imm.to_bits())
        }
        Imm::Float(Scalar::F16 | Scalar::F32, v) => format!("{:?}", v as f32),
        Imm::Float(_, v) => format!("{v:?}"),
    }
}

/// Parses a scalar literal as a value of type `ty`.
///
/// * `bool`: `true` or `false`.
/// * integers: decimal, or `0x` / `0o` / `0b` with an optional sign; `_` separators; an
///   optional type suffix that must name `ty` (`5u32`). Decimal values must lie in the type's
///   range; a non-negative hex/octal/binary value may also be any bit pattern of the type's
///   width (`0xffffffff` is -1 as an `i32`).
/// * floats: a decimal number with an optional sign (`1.5`, `-2`, `1e-3`), `inf` or `NaN`,
///   `_` separators, an optional `f16`/`f32`/`f64` suffix that must name `ty`; rounded to
///   nearest, and an error when a finite number is too large for `ty` (as in `.kir`). A NaN
///   with a payload is written by its bits, as in `.kir`: `nanf32(0x7f800001)` (`nan(0x...)`
///   takes the parameter's type), and keeps every bit.
pub fn parse_scalar(text: &str, ty: Scalar) -> Result<Imm, String> {
    let bad = |why: &str| format!("`{text}` is not a valid {ty} value{why}");
    if text.trim() != text || text.is_empty() {
        return Err(bad(""));
    }
    if ty == Scalar::Bool {
        return match text {
            "true" => Ok(Imm::Bool(true)),
            "false" => Ok(Imm::Bool(false)),
            _ => Err(bad(" (expected `true` or `false`)")),
        };
    }
    let (body, suffix) = split_suffix(text);
    if let Some(s) = suffix {
        if s != ty {
            return Err(format!("`{text}` has the suffix `{s}` but the parameter is {ty}"));
        }
    }
    if ty.is_float() {
        if let Some(nan) = parse_nan_bits(text, ty) {
            return nan.map_err(|why| bad(&why));
        }
        let clean: String = body.chars().filter(|&c| c != '_').collect();
        let (neg, digits) = match clean.as_bytes().first() {
            Some(b'-') => (true, &clean[1..]),
            Some(b'+') => (false, &clean[1..]),
            _ => (false, &clean[..]),
        };
        let sign = |v: f64| Imm::float(ty, if neg { -v } else { v });
        return match digits.to_ascii_lowercase().as_str() {
            "inf" | "infinity" => Ok(sign(f64::INFINITY)),
            "nan" => Ok(sign(f64::NAN)),
            // The `.kir` parser's rule: a finite literal never becomes `inf`.
            _ => match float_literal(ty, digits) {
                Ok(v) => Ok(sign(v)),
                Err(FloatLiteralError::Malformed) => Err(bad("")),
                Err(FloatLiteralError::OutOfRange) => Err(format!(
                    "`{text}` is out of range for {ty} (it would round to infinity; write \
                     `inf` for infinity)"
                )),
            },
        };
    }
    let (value, decimal) = parse_int_text(body).map_err(|()| bad(""))?;
    let (min, max) = (ty.int_min().unwrap_or(0), ty.int_max().unwrap_or(0));
    let bit_pattern_max = (1i128 << ty.bits()) - 1;
    let ok = (min..=max).contains(&value) || (!decimal && (0..=bit_pattern_max).contains(&value));
    if !ok {
        return Err(bad(&format!(" (out of range {min}..={max})")));
    }
    Ok(Imm::int(ty, value))
}

/// `nan(0xBITS)` or `nanTY(0xBITS)` (TY must be `ty`) as the NaN of type `ty` with those
/// bits; None if `text` is not of that form.
fn parse_nan_bits(text: &str, ty: Scalar) -> Option<Result<Imm, String>> {
    let inner = text.strip_prefix("nan")?.strip_suffix(')')?;
    let (suffix, hex) = inner.split_once("(0x")?;
    if !suffix.is_empty() && suffix != ty.name() {
        return Some(Err(format!(" (the NaN is `{suffix}`, the parameter {ty})")));
    }
    let digits: String = hex.chars().filter(|&c| c != '_').collect();
    let bits = match u64::from_str_radix(&digits, 16) {
        Ok(b) if ty.bits() >= 64 || b >> ty.bits() == 0 => b,
        _ => return Some(Err(format!(" (`0x{hex}` is not a {ty} bit pattern)"))),
    };
    let imm = Imm::from_bits(ty, bits);
    Some(if imm.as_f64().is_some_and(f64::is_nan) {
        Ok(imm)
    } else {
        Err(format!(" (`0x{hex}` is not a NaN bit pattern of {ty})"))
    })
}

/// Splits a type suffix off a literal: `5u32` -> (`5`, u32). Hex literals only lose integer
/// suffixes (`0x1f32` is a number).
fn split_suffix(text: &str) -> (&str, Option<Scalar>) {
    let lower = text.to_ascii_lowercase();
    let hex = lower.trim_start_matches(['-', '+']).starts_with("0x");
    for s in Scalar::ALL {
        if s == Scalar::Bool || (hex && s.is_float()) {
            continue;
        }
        if let Some(body) = text.strip_suffix(s.name()) {
            let body = body.strip_suffix('_').unwrap_or(body);
            if !body.is_empty() && body != "-" && body != "+" {
                return (body, Some(s));
            }
        }
    }
    (text, None)
}

/// Parses an integer literal (sign, radix prefix, `_` separators) to its mathematical value;
/// the bool says whether it was written in decimal.
fn parse_int_text(text: &str) -> Result<(i128, bool), ()> {
    let (neg, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = rest.to_ascii_lowercase();
    let (radix, digits) = match lower.get(..2) {
        Some("0x") => (16, &lower[2..]),
        Some("0o") => (8, &lower[2..]),
        Some("0b") => (2, &lower[2..]),
        _ => (10, &lower[..]),
    };
    let digits: String = digits.chars().filter(|&c| c != '_').collect();
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(());
    }
    let magnitude = u128::from_str_radix(&digits, radix).map_err(|_| ())?;
    let magnitude = i128::try_from(magnitude).map_err(|_| ())?;
    Ok((if neg { -magnitude } else { magnitude }, radix == 10))
}

/// A `--timeout` value: a positive, finite number of seconds (`2`, `0.5`).
pub fn parse_timeout(text: &str) -> Result<std::time::Duration, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds (e.g. 2 or 0.5)"))?;
    if secs.is_nan() || secs <= 0.0 {
        return Err(format!("`{text}`: the timeout must be positive"));
    }
    std::time::Duration::try_from_secs_f64(secs)
        .map_err(|_| format!("`{text}`: too many seconds for a timeout"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(ty: Scalar, text: &str) -> Result<i128, String> {
        parse_scalar(text, ty).map(|i| i.as_i128().unwrap())
    }

    #[test]
    fn integers() {
        assert_eq!(int(Scalar::U32, "8"), Ok(8));
        assert_eq!(int(Scalar::I32, "-5"), Ok(-5));
        assert_eq!(int(Scalar::I32, "+5"), Ok(5));
        assert_eq!(int(Scalar::U8, "0xff"), Ok(255));
        assert_eq!(int(Scalar::I32, "0xffff_ffff"), Ok(-1));
        assert_eq!(int(Scalar::I8, "-0x80"), Ok(-128));
        assert_eq!(int(Scalar::U64, "18446744073709551615"), Ok(u64::MAX as i128));
        assert_eq!(int(Scalar::I64, "-9223372036854775808"), Ok(i64::MIN as i128));
        assert_eq!(int(Scalar::U32, "5u32"), Ok(5));
        assert_eq!(int(Scalar::U16, "0b1010"), Ok(10));
        assert_eq!(int(Scalar::U16, "0o17"), Ok(15));
        assert_eq!(int(Scalar::U8, "0xffu8"), Ok(255));
        assert_eq!(int(Scalar::I32, "1_000"), Ok(1000));
    }

    #[test]
    fn integer_errors() {
        for (ty, text) in [
            (Scalar::U8, "256"),
            (Scalar::U32, "-1"),
            (Scalar::I8, "128"),
            (Scalar::I8, "-0x81"),
            (Scalar::I32, "0x1_0000_0000"),
            (Scalar::I32, "1.5"),
            (Scalar::I32, "abc"),
            (Scalar::I32, ""),
            (Scalar::I32, " 1"),
            (Scalar::I32, "0x"),
            (Scalar::I32, "-"),
            (Scalar::U32, "5i32"),
            (Scalar::U64, "99999999999999999999999999999999999999999999"),
        ] {
            assert!(int(ty, text).is_err(), "{ty} {text:?} parsed");
        }
        let e = parse_scalar("5i32", Scalar::U32).unwrap_err();
        assert!(e.contains("suffix `i32`") && e.contains("u32"), "{e}");
        let e = parse_scalar("256", Scalar::U8).unwrap_err();
        assert!(e.contains("out of range 0..=255"), "{e}");
    }

    #[test]
    fn floats_and_bools() {
        assert_eq!(parse_scalar("2.0", Scalar::F32), Ok(Imm::float(Scalar::F32, 2.0)));
        assert_eq!(parse_scalar("-1e-3", Scalar::F64), Ok(Imm::float(Scalar::F64, -1e-3)));
        assert_eq!(parse_scalar("3", Scalar::F32), Ok(Imm::float(Scalar::F32, 3.0)));
        assert_eq!(parse_scalar("1.5f32", Scalar::F32), Ok(Imm::float(Scalar::F32, 1.5)));
        assert_eq!(parse_scalar("0.1", Scalar::F32), Ok(Imm::float(Scalar::F32, 0.1f32 as f64)));
        assert_eq!(parse_scalar("0.5", Scalar::F16), Ok(Imm::float(Scalar::F16, 0.5)));
        assert_eq!(
            parse_scalar("-inf", Scalar::F32),
            Ok(Imm::float(Scalar::F32, f64::NEG_INFINITY))
        );
        assert!(parse_scalar("NaN", Scalar::F64).unwrap().as_f64().unwrap().is_nan());
        assert!(parse_scalar("1.5f64", Scalar::F32).is_err());
        assert!(parse_scalar("x", Scalar::F32).is_err());
        assert!(parse_scalar("0x10", Scalar::F32).is_err());
        assert_eq!(parse_scalar("true", Scalar::Bool), Ok(Imm::Bool(true)));
        assert_eq!(parse_scalar("false", Scalar::Bool), Ok(Imm::Bool(false)));
        assert!(parse_scalar("1", Scalar::Bool).is_err());
        // A finite literal that would round to infinity is refused, as in .kir (issue 29).
        for (text, ty) in [("1e40", Scalar::F32), ("-1e40", Scalar::F32), ("70000", Scalar::F16)] {
            let e = parse_scalar(text, ty).unwrap_err();
            assert!(e.contains(&format!("out of range for {ty}")), "{e}");
        }
        assert!(parse_scalar("1e400", Scalar::F64).is_err());
        assert_eq!(
            parse_scalar("+Infinity", Scalar::F32),
            Ok(Imm::float(Scalar::F32, f64::INFINITY))
        );
        assert_eq!(parse_scalar("1_000.5f64", Scalar::F64), Ok(Imm::float(Scalar::F64, 1000.5)));
    }

    /// Issue 29 (W1): a NaN's payload, signalling or quiet, goes in and comes out bit for
    /// bit, in the `.kir` spelling.
    #[test]
    fn nan_payloads_parse_and_print_by_their_bits() {
        for (ty, text, bits) in [
            (Scalar::F32, "nanf32(0x7f800001)", 0x7f80_0001u64),
            (Scalar::F32, "nan(0x7fbfffff)", 0x7fbf_ffff),
            (Scalar::F16, "nanf16(0x7c01)", 0x7c01),
            (Scalar::F64, "nanf64(0xfff0000000000001)", 0xfff0_0000_0000_0001),
        ] {
            let imm = parse_scalar(text, ty).unwrap();
            assert_eq!(imm.to_bits(), bits, "{text}");
            let shown = format_imm(imm);
            assert_eq!(parse_scalar(&shown, ty).map(|i| i.to_bits()), Ok(bits), "{shown}");
            let mut le = Vec::new();
            push_le(&mut le, imm);
            assert_eq!(element(&le, ty, 0).to_bits(), bits, "{text} through bytes");
        }
        assert_eq!(format_imm(Imm::from_bits(Scalar::F32, 0x7f80_0001)), "nanf32(0x7f800001)");
        assert_eq!(format_imm(Imm::float(Scalar::F32, f64::NAN)), "NaN");
        for bad in
            ["nanf32(0x3f800000)", "nanf64(0x7f800001)", "nanf32(0x1ffffffff)", "nanf32(0xzz)"]
        {
            let e = parse_scalar(bad, Scalar::F32).unwrap_err();
            assert!(e.contains("not a valid f32 value ("), "{bad}: {e}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_sizes("8"), Ok(vec![8]));
        assert_eq!(parse_sizes("8,4"), Ok(vec![8, 4]));
        assert_eq!(parse_sizes("8, 4, 2"), Ok(vec![8, 4, 2]));
        assert!(parse_sizes("").is_err());
        assert!(parse_sizes("8,,4").is_err());
        assert!(parse_sizes("1,2,3,4").is_err());
        assert!(parse_sizes("-1").is_err());
        assert!(parse_sizes("4294967296").is_err());
        assert!(parse_sizes("x").is_err());
    }

    #[test]
    fn bindings_and_buffer_inits() {
        assert_eq!(parse_binding("a=2.0"), Ok(("a".into(), "2.0".into())));
        assert_eq!(parse_binding("x=@a=b.npy"), Ok(("x".into(), "@a=b.npy".into())));
        assert!(parse_binding("a").is_err());
        assert!(parse_binding("=1").is_err());
        assert_eq!(parse_buffer_init("zeros:8"), Some(Ok(BufferInit::Zeros(8))));
        assert_eq!(parse_buffer_init("iota:0"), Some(Ok(BufferInit::Iota(0))));
        assert_eq!(parse_buffer_init("@x.npy"), Some(Ok(BufferInit::Npy("x.npy".into()))));
        assert!(matches!(parse_buffer_init("zeros:-1"), Some(Err(_))));
        assert!(matches!(parse_buffer_init("iota:abc"), Some(Err(_))));
        assert!(matches!(parse_buffer_init("@"), Some(Err(_))));
        assert_eq!(parse_buffer_init("2.0"), None);
    }

    #[test]
    fn generated_contents() {
        let b = generated_bytes(&BufferInit::Iota(3), Scalar::F32).unwrap();
        let vals: Vec<String> = (0..3).map(|i| format_imm(element(&b, Scalar::F32, i))).collect();
        assert_eq!(vals, ["0.0", "1.0", "2.0"]);
        let b = generated_bytes(&BufferInit::Iota(3), Scalar::I16).unwrap();
        assert_eq!(b, [0, 0, 1, 0, 2, 0]);
        assert_eq!(generated_bytes(&BufferInit::Zeros(2), Scalar::F64).unwrap(), [0; 16]);
        assert!(generated_bytes(&BufferInit::Iota(256), Scalar::U8).is_ok());
        assert!(generated_bytes(&BufferInit::Iota(257), Scalar::U8).is_err());
        assert!(generated_bytes(&BufferInit::Iota(2), Scalar::Bool).is_err());
        assert!(generated_bytes(&BufferInit::Zeros(usize::MAX), Scalar::F32).is_err());
        let b = generated_bytes(&BufferInit::Iota(2), Scalar::F16).unwrap();
        assert_eq!(format_imm(element(&b, Scalar::F16, 1)), "1.0");
        // A fill is at the element's size: -0.0 is not zero bytes, 7u8 is one byte each.
        let b = filled_bytes(2, Imm::float(Scalar::F32, -0.0)).unwrap();
        assert_eq!(b, [0, 0, 0, 0x80, 0, 0, 0, 0x80]);
        assert_eq!(filled_bytes(3, Imm::int(Scalar::U8, 7)).unwrap(), [7, 7, 7]);
        assert_eq!(filled_bytes(0, Imm::Bool(true)).unwrap(), Vec::<u8>::new());
        let e = filled_bytes((1 << 30) + 1, Imm::float(Scalar::F32, 0.0)).unwrap_err();
        assert!(e.contains("too large a buffer (limit 4 GiB)"), "{e}");
        assert!(reserve_bytes(usize::MAX, Scalar::U8).is_err());
    }

    #[test]
    fn elements_round_trip() {
        for (ty, v) in [(Scalar::I8, -3i128), (Scalar::I64, i64::MIN as i128), (Scalar::U16, 65535)]
        {
            let mut b = Vec::new();
            push_le(&mut b, Imm::int(ty, v));
            assert_eq!(element(&b, ty, 0).as_i128(), Some(v));
        }
    }
}
