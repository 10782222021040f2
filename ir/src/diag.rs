//! Source locations and located error messages.

use std::fmt;

use hashbrown::HashMap;

use crate::expr::Expr;
use crate::stmt::Stmt;

/// A byte range in a source text.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Span {
    /// Offset of the first byte.
    pub start: usize,
    /// Offset one past the last byte.
    pub end: usize,
}

impl Span {
    /// The range `start..end`.
    pub fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }
}

/// An error located in a source text: `file:line:col`, the message, the source line and a
/// caret under the offending column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// What is wrong.
    pub message: String,
    /// The file name (or `<input>`).
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub col: usize,
    /// The text of the offending line (without its newline).
    pub source_line: String,
    /// Width of the underline, in characters (at least 1).
    pub width: usize,
}

impl Diagnostic {
    /// A diagnostic for `span` in `src`.
    ///
    /// Lines end at `\n`, `\r\n` or a lone `\r` (old Mac files), so line numbers are right
    /// for every convention and the quoted line never carries a raw `\r`.
    pub fn new(file: &str, src: &str, span: Span, message: impl Into<String>) -> Diagnostic {
        let is_break = |c: char| c == '\n' || c == '\r';
        let start = floor_char_boundary(src, span.start.min(src.len()));
        let line_start = src[..start].rfind(is_break).map_or(0, |i| i + 1);
        let line_end = src[start..].find(is_break).map_or(src.len(), |i| start + i);
        // `\r\n` is one break: count every `\n`, and each `\r` not followed by one.
        let before = &src.as_bytes()[..start];
        let lone_cr = before
            .iter()
            .enumerate()
            .filter(|&(i, &b)| b == b'\r' && src.as_bytes().get(i + 1) != Some(&b'\n'))
            .count();
        let line = before.iter().filter(|&&b| b == b'\n').count() + lone_cr + 1;
        let col = src[line_start..start].chars().count() + 1;
        let end = floor_char_boundary(src, span.end.clamp(start, line_end));
        let width = src[start..end].chars().count().max(1);
        Diagnostic {
            message: message.into(),
            file: file.to_string(),
            line,
            col,
            source_line: src[line_start..line_end].to_string(),
            width,
        }
    }

    /// Decodes a source file's bytes as UTF-8. Bytes that are not UTF-8 are an error located
    /// at the first bad byte (line and column counted over the valid text before it).
    pub fn decode_source(file: &str, bytes: Vec<u8>) -> Result<String, Diagnostic> {
        String::from_utf8(bytes).map_err(|e| {
            let good = e.utf8_error().valid_up_to();
            let bytes = e.as_bytes();
            let shown: Vec<String> = bytes[good..]
                .iter()
                .take(e.utf8_error().error_len().unwrap_or(bytes.len() - good))
                .map(|b| format!("0x{b:02x}"))
                .collect();
            let valid = String::from_utf8_lossy(&bytes[..good]);
            let end = valid.len();
            Diagnostic::new(
                file,
                &valid,
                Span::new(end, end),
                format!("the file is not valid UTF-8 (byte {} here)", shown.join(" ")),
            )
        })
    }

    /// A diagnostic with no source position (e.g. for IR built through the API).
    pub fn unlocated(file: &str, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            message: message.into(),
            file: file.to_string(),
            line: 0,
            col: 0,
            source_line: String::new(),
            width: 0,
        }
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "error: {}", self.message)?;
        if self.line == 0 {
            return write!(f, " --> {}", self.file);
        }
        let num = self.line.to_string();
        let pad = " ".repeat(num.len());
        writeln!(f, "{pad}--> {}:{}:{}", self.file, self.line, self.col)?;
        writeln!(f, "{pad} |")?;
        writeln!(f, "{num} | {}", self.source_line)?;
        let lead: String = self
            .source_line
            .chars()
            .take(self.col - 1)
            .map(|c| if c == '\t' { '\t' } else { ' ' })
            .collect();
        write!(f, "{pad} | {lead}{}", "^".repeat(self.width))
    }
}

impl std::error::Error for Diagnostic {}

/// Where each parsed node came from: maps expression and statement handles (by identity) to
/// their source spans, so errors found later (by the verifier, a pass) can point at the text.
/// Keeps the handles alive, so an address is never reused while the map exists.
#[derive(Clone, Default)]
pub struct Spans {
    map: HashMap<usize, Span>,
    kernels: HashMap<String, Span>,
    keep_exprs: Vec<Expr>,
    keep_stmts: Vec<Stmt>,
    comments: Vec<Span>,
}

impl Spans {
    /// Records the span of an expression.
    pub fn add_expr(&mut self, e: &Expr, span: Span) {
        self.map.insert(e.addr(), span);
        self.keep_exprs.push(e.clone());
    }

    /// Records the span of a statement.
    pub fn add_stmt(&mut self, s: &Stmt, span: Span) {
        self.map.insert(s.addr(), span);
        self.keep_stmts.push(s.clone());
    }

    /// Records the span of a kernel's header (its name).
    pub fn add_kernel(&mut self, name: &str, span: Span) {
        self.kernels.insert(name.to_string(), span);
    }

    /// Records a comment (`// ...` or `/* ... */`), in source order.
    pub fn add_comment(&mut self, span: Span) {
        self.comments.push(span);
    }

    /// The comments of the source, in order.
    pub fn comments(&self) -> &[Span] {
        &self.comments
    }

    /// The span of an expression parsed from source, if it was.
    pub fn expr(&self, e: &Expr) -> Option<Span> {
        self.map.get(&e.addr()).copied()
    }

    /// The span of a statement parsed from source, if it was.
    pub fn stmt(&self, s: &Stmt) -> Option<Span> {
        self.map.get(&s.addr()).copied()
    }

    /// The span of a kernel's name.
    pub fn kernel(&self, name: &str) -> Option<Span> {
        self.kernels.get(name).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caret_points_at_column() {
        let src = "kernel k() {\n  let x = ;\n}\n";
        let at = src.find(';').unwrap();
        let d = Diagnostic::new("a.kir", src, Span::new(at, at + 1), "expected an expression");
        assert_eq!((d.line, d.col), (2, 11));
        let text = d.to_string();
        assert!(text.contains("a.kir:2:11"), "{text}");
        assert!(text.ends_with("  |           ^"), "{text:?}");
    }

    /// Issue 12, item 5: CR-only and CRLF files count lines, and no raw `\r` is echoed.
    #[test]
    fn cr_only_and_crlf_line_endings_count_lines_without_echoing_cr() {
        for nl in ["\r", "\r\n", "\n"] {
            let src = format!("kernel k() {{{nl}  let x = 1;{nl}  let y = ;{nl}}}{nl}");
            let at = src.find(" ;").unwrap() + 1;
            let d = Diagnostic::new("a.kir", &src, Span::new(at, at + 1), "m");
            assert_eq!((d.line, d.col), (3, 11), "{nl:?}");
            assert_eq!(d.source_line, "  let y = ;", "{nl:?}");
            assert!(!d.to_string().contains('\r'), "{nl:?}: {d}");
        }
    }

    /// Issue 12, item 5: a non-UTF-8 file is an error at the line and column of the first
    /// bad byte.
    #[test]
    fn non_utf8_file_gives_line_and_column_of_first_bad_byte() {
        let mut bytes = b"kernel k() {\n  let x\xc3\xa9 = 1; // \xff\xfe\n}\n".to_vec();
        assert!(Diagnostic::decode_source("a.kir", bytes.clone()).is_err());
        let d = Diagnostic::decode_source("a.kir", bytes.clone()).unwrap_err();
        assert_eq!((d.line, d.col), (2, 18), "{d}");
        assert!(d.message.contains("not valid UTF-8") && d.message.contains("0xff"), "{d}");
        bytes.truncate(22);
        assert_eq!(
            Diagnostic::decode_source("a.kir", bytes).unwrap(),
            "kernel k() {\n  let x\u{e9}"
        );
    }

    #[test]
    fn spans_past_the_end_do_not_panic() {
        let d = Diagnostic::new("x", "ab\u{e9}", Span::new(3, 99), "m");
        assert_eq!(d.line, 1);
        let d = Diagnostic::new("x", "", Span::new(5, 9), "m");
        assert_eq!((d.line, d.col), (1, 1));
    }
}
