//! Tokens of the text format.

use crate::diag::Span;
use crate::types::Scalar;

/// A token kind. Literals keep their text so that they can be converted once their type is
/// known (parsing "0.1" straight to f32 avoids double rounding through f64).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Tok {
    Ident(String),
    Int {
        text: String,
        radix: u32,
        suffix: Option<Scalar>,
    },
    Float {
        text: String,
        suffix: Option<Scalar>,
    },
    /// `inf` or `nan`, optionally suffixed (`inff64`).
    SpecialFloat {
        nan: bool,
        suffix: Option<Scalar>,
    },
    Punct(&'static str),
    Eof,
}

impl Tok {
    /// How the token reads in an error message.
    pub(crate) fn describe(&self) -> String {
        match self {
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Int { text, .. } | Tok::Float { text, .. } => format!("literal `{text}`"),
            Tok::SpecialFloat { nan, .. } => format!("`{}`", if *nan { "nan" } else { "inf" }),
            Tok::Punct(p) => format!("`{p}`"),
            Tok::Eof => "end of input".to_string(),
        }
    }
}

/// A token and where it is.
#[derive(Clone, Debug)]
pub(crate) struct Token {
    pub tok: Tok,
    pub span: Span,
}

/// Longest first, so that `<=` is not read as `<` `=`.
const PUNCT: [&str; 34] = [
    "..", "==", "!=", "<=", ">=", "<<", ">>", "&&", "||", "->", "(", ")", "{", "}", "[", "]", "<",
    ">", ",", ";", ":", "?", "=", "+", "-", "*", "/", "%", "&", "|", "^", "!", "~", "#",
];

/// A lexical error: its message and the span of the offending text.
pub(crate) type LexError = (String, Span);

/// Splits `src` into tokens, ending with `Eof`. On a lexical error, the tokens before it are
/// returned with the error, so that the parser can report a syntax error that comes first.
/// Comments are returned apart, as spans, for the formatter.
pub(crate) fn lex(src: &str) -> (Vec<Token>, Vec<Span>, Option<LexError>) {
    let mut out = Vec::new();
    let mut comments = Vec::new();
    let err = lex_into(src, &mut out, &mut comments).err();
    let end = err.as_ref().map_or(src.len(), |(_, span)| span.start);
    out.push(Token { tok: Tok::Eof, span: Span::new(end, end) });
    (out, comments, err)
}

fn lex_into(src: &str, out: &mut Vec<Token>, comments: &mut Vec<Span>) -> Result<(), LexError> {
    let bytes = src.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        if src[i..].starts_with("//") {
            let start = i;
            // A line comment ends at any line break, a lone `\r` included.
            i = src[i..].find(['\n', '\r']).map_or(bytes.len(), |n| i + n);
            comments.push(Span::new(start, i));
            continue;
        }
        if src[i..].starts_with("/*") {
            let end = src[i + 2..]
                .find("*/")
                .ok_or_else(|| ("unterminated block comment".to_string(), Span::new(i, i + 2)))?;
            comments.push(Span::new(i, i + end + 4));
            i += end + 4;
            continue;
        }
        let start = i;
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let word = &src[start..i];
            let tok = special_float(word).unwrap_or_else(|| Tok::Ident(word.to_string()));
            out.push(Token { tok, span: Span::new(start, i) });
            continue;
        }
        if c.is_ascii_digit() {
            let tok = number(src, &mut i)?;
            out.push(Token { tok, span: Span::new(start, i) });
            continue;
        }
        if let Some(p) = PUNCT.iter().find(|p| src[i..].starts_with(**p)) {
            i += p.len();
            out.push(Token { tok: Tok::Punct(p), span: Span::new(start, i) });
            continue;
        }
        let ch = src[i..].chars().next().unwrap_or('?');
        let shown = if ch.is_control() { ch.escape_default().to_string() } else { ch.to_string() };
        return Err((format!("unexpected character `{shown}`"), Span::new(i, i + ch.len_utf8())));
    }
    Ok(())
}

/// `inf`, `nan`, `inff32`, `nanf64`, ...
fn special_float(word: &str) -> Option<Tok> {
    for (name, nan) in [("inf", false), ("nan", true)] {
        if let Some(rest) = word.strip_prefix(name) {
            if rest.is_empty() {
                return Some(Tok::SpecialFloat { nan, suffix: None });
            }
            if let Some(s) = Scalar::from_name(rest).filter(|s| s.is_float()) {
                return Some(Tok::SpecialFloat { nan, suffix: Some(s) });
            }
        }
    }
    None
}

fn number(src: &str, i: &mut usize) -> Result<Tok, (String, Span)> {
    let bytes = src.as_bytes();
    let start = *i;
    let digits = |i: &mut usize, hex: bool| {
        while *i < bytes.len()
            && (bytes[*i].is_ascii_digit()
                || bytes[*i] == b'_'
                || (hex && bytes[*i].is_ascii_hexdigit()))
        {
            *i += 1;
        }
    };
    if src[start..].starts_with("0x") || src[start..].starts_with("0X") {
        *i += 2;
        let body = *i;
        // Hex digits include `f`, so a hex literal's suffix can only be an integer type,
        // which starts with `i` or `u`.
        digits(i, true);
        let text: String = src[body..*i].chars().filter(|&c| c != '_').collect();
        if text.is_empty() {
            return Err(("hexadecimal literal has no digits".into(), Span::new(start, *i)));
        }
        let suffix = suffix(src, i, start)?;
        if suffix.is_some_and(|s| s.is_float()) {
            return Err((
                "a hexadecimal literal cannot have a float suffix".into(),
                Span::new(start, *i),
            ));
        }
        return Ok(Tok::Int { text, radix: 16, suffix });
    }
    digits(i, false);
    let mut is_float = false;
    // A `.` makes a float only when a digit follows: `0..4` is a range.
    if *i + 1 < bytes.len() && bytes[*i] == b'.' && bytes[*i + 1].is_ascii_digit() {
        is_float = true;
        *i += 1;
        digits(i, false);
    }
    if *i < bytes.len() && (bytes[*i] == b'e' || bytes[*i] == b'E') {
        let mut j = *i + 1;
        if j < bytes.len() && (bytes[j] == b'+' || bytes[j] == b'-') {
            j += 1;
        }
        if j < bytes.len() && bytes[j].is_ascii_digit() {
            is_float = true;
            *i = j;
            digits(i, false);
        }
    }
    let text: String = src[start..*i].chars().filter(|&c| c != '_').collect();
    let suffix = suffix(src, i, start)?;
    if is_float {
        if suffix.is_some_and(|s| !s.is_float()) {
            return Err((
                format!(
                    "a float literal cannot have the integer suffix `{}`",
                    suffix.map_or("", |s| s.name())
                ),
                Span::new(start, *i),
            ));
        }
        Ok(Tok::Float { text, suffix })
    } else if suffix.is_some_and(|s| s.is_float()) {
        Ok(Tok::Float { text, suffix })
    } else {
        Ok(Tok::Int { text, radix: 10, suffix })
    }
}

/// Reads a type suffix directly after a number (`5u32`), rejecting other trailing letters.
fn suffix(src: &str, i: &mut usize, start: usize) -> Result<Option<Scalar>, (String, Span)> {
    let bytes = src.as_bytes();
    let s = *i;
    while *i < bytes.len() && (bytes[*i].is_ascii_alphanumeric() || bytes[*i] == b'_') {
        *i += 1;
    }
    if s == *i {
        return Ok(None);
    }
    let word = &src[s..*i];
    match Scalar::from_name(word) {
        Some(t) if t != Scalar::Bool => Ok(Some(t)),
        _ => Err((
            format!("invalid literal suffix `{word}` (expected a type such as `u32` or `f64`)"),
            Span::new(start, *i),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(src: &str) -> Vec<Tok> {
        let (toks, _, err) = lex(src);
        assert_eq!(err, None);
        toks.into_iter().map(|t| t.tok).collect()
    }

    fn lex_err(src: &str) -> bool {
        lex(src).2.is_some()
    }

    #[test]
    fn ranges_are_not_floats() {
        assert_eq!(
            toks("0..4"),
            vec![
                Tok::Int { text: "0".into(), radix: 10, suffix: None },
                Tok::Punct(".."),
                Tok::Int { text: "4".into(), radix: 10, suffix: None },
                Tok::Eof
            ]
        );
    }

    #[test]
    fn literals_and_suffixes() {
        assert_eq!(toks("1e-7")[0], Tok::Float { text: "1e-7".into(), suffix: None });
        assert_eq!(toks("2f64")[0], Tok::Float { text: "2".into(), suffix: Some(Scalar::F64) });
        assert_eq!(
            toks("0xffu8")[0],
            Tok::Int { text: "ff".into(), radix: 16, suffix: Some(Scalar::U8) }
        );
        assert_eq!(toks("nanf64")[0], Tok::SpecialFloat { nan: true, suffix: Some(Scalar::F64) });
        assert!(lex_err("5abc"));
        assert!(lex_err("1.5u32"));
        assert!(lex_err("a @ b"));
        assert!(lex_err("/* open"));
    }
}
