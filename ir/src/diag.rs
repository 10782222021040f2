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
    pub fn new(file: &str, src: &str, span: Span, message: impl Into<String>) -> Diagnostic {
        let start = floor_char_boundary(src, span.start.min(src.len()));
        let line_start = src[..start].rfind('\n').map_or(0, |i| i + 1);
        let line_end = src[start..].find('\n').map_or(src.len(), |i| start + i);
        let line = src[..start].matches('\n').count() + 1;
        let col = src[line_start..start].chars().count() + 1;
        let end = floor_char_boundary(src, span.end.clamp(start, line_end));
        let width = src[start..end].chars().count().max(1);
        Diagnostic {
            message: message.into(),
            file: file.to_string(),
            line,
            col,
            source_line: src[line_start..line_end].trim_end_matches('\r').to_string(),
            width,
        }
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

    #[test]
    fn spans_past_the_end_do_not_panic() {
        let d = Diagnostic::new("x", "ab\u{e9}", Span::new(3, 99), "m");
        assert_eq!(d.line, 1);
        let d = Diagnostic::new("x", "", Span::new(5, 9), "m");
        assert_eq!((d.line, d.col), (1, 1));
    }
}
