//! Printing in the text format (`.kir`): `Display` for every IR object.
//!
//! The printer is the parser's inverse: for every well-formed object `x`,
//! `parse(print(x))` is structurally equal to `x`, and printing a parsed file is a fixed
//! point. Two rules make that hold while keeping the text short:
//!
//! * Parentheses are printed only where C precedence needs them.
//! * A literal drops its type suffix exactly when the parser would give it that type back
//!   from context (see [`literal_context`](self#literal-typing) below): the other operand of
//!   a binary operator, the declared type of a binding, the element type of a store, and
//!   otherwise `i32` for integers and `f32` for floats.
//!
//! # Literal typing
//!
//! A *flexible* expression is one whose type the parser takes from context: an unsuffixed
//! numeric literal, or an arithmetic/bitwise operator, negation, `select` arm pair or
//! intrinsic call all of whose operands are flexible. The parser types a flexible expression
//! with the type its context expects; an operator whose operands are not all flexible gives
//! its flexible operands the type of the first operand that is not. The printer prints a
//! maximal flexible tree without suffixes if all its literals have the type the context would
//! give them, and otherwise with a suffix on every literal.

use std::fmt::{self, Write};

use crate::diag::{Span, Spans};
use crate::expr::{float_to_bits, Expr, ExprNode, Imm, UnOp};
use crate::kernel::{Kernel, Module};
use crate::matrix::MatrixOp;
use crate::parse::Parsed;
use crate::stmt::{Func, FuncKind, Stmt, StmtNode};
use crate::types::{AddrSpace, Scalar, Type};

/// Precedence of `?:`.
const PREC_TERNARY: u8 = 1;
/// Precedence of `e as T`.
const PREC_CAST: u8 = 12;
/// Precedence of prefix operators (and negative literals).
const PREC_UNARY: u8 = 13;
/// Precedence of atoms: names, literals, loads, calls, parenthesized expressions.
const PREC_ATOM: u8 = 14;

/// True if `e`'s type comes from its context when parsed (see the module docs).
pub(crate) fn is_flexible(e: &Expr) -> bool {
    match e.node() {
        ExprNode::Imm(Imm::Int(..) | Imm::Float(..)) => true,
        ExprNode::Unary { op: UnOp::Neg | UnOp::BitNot, a } => is_flexible(a),
        ExprNode::Binary { op, a, b } => {
            !op.is_comparison() && !op.is_logical() && is_flexible(a) && is_flexible(b)
        }
        ExprNode::Select { a, b, .. } => is_flexible(a) && is_flexible(b),
        ExprNode::Intrinsic { args, .. } => !args.is_empty() && args.iter().all(is_flexible),
        _ => false,
    }
}

/// The type an unsuffixed literal of this kind gets without context.
fn default_type(imm: &Imm) -> Scalar {
    match imm {
        Imm::Float(..) => Scalar::F32,
        _ => Scalar::I32,
    }
}

/// True if every literal of the flexible tree `e` would get its own type back from `ctx`.
fn literals_fit(e: &Expr, ctx: Option<Scalar>) -> bool {
    match e.node() {
        ExprNode::Imm(imm) => match ctx {
            Some(t) => imm.scalar() == t,
            None => imm.scalar() == default_type(imm),
        },
        _ => e.children().into_iter().all(|c| {
            // A select's condition is not part of the flexible tree.
            !is_flexible(c) || literals_fit(c, ctx)
        }),
    }
}

/// The context type the parser gives to the flexible operands of an operator whose operands
/// are `ops`: the type of the first operand that is not flexible, else `outer`.
fn operand_context(ops: &[&Expr], outer: Option<Scalar>) -> Option<Scalar> {
    ops.iter().find(|e| !is_flexible(e)).map_or(outer, |e| e.ty().scalar())
}

/// The context type and forced-suffix flag for the operands `ops` of `e`. Inside a flexible
/// tree both pass through. At any other operator, the flexible operands take the type of the
/// first operand that is not flexible; if one of them would not read back as its own type,
/// all of them get suffixes, since the parser types them from the first typed operand.
fn operand_mode(
    e: &Expr,
    ops: &[&Expr],
    outer: Option<Scalar>,
    suffix: bool,
) -> (Option<Scalar>, bool) {
    if is_flexible(e) {
        return (outer, suffix);
    }
    let t = operand_context(ops, outer);
    (t, ops.iter().any(|o| is_flexible(o) && !literals_fit(o, t)))
}

#[derive(Default)]
struct Printer<'a> {
    out: String,
    /// The source being reformatted, whose comments and blank lines are kept.
    source: Option<Source<'a>>,
}

/// The text a module was parsed from, and how far its comments have been printed.
struct Source<'a> {
    text: &'a str,
    spans: &'a Spans,
    /// Index of the first comment not yet printed.
    next: usize,
    /// End of the last piece of source text accounted for.
    last_end: usize,
}

impl Printer<'_> {
    /// Prints `e` given the parser's context type `ctx`; `suffix` forces literal suffixes.
    /// Returns the precedence of what was printed.
    fn expr(&mut self, e: &Expr, ctx: Option<Scalar>, suffix: bool) -> u8 {
        if is_flexible(e) && !suffix && !literals_fit(e, ctx) {
            return self.expr(e, ctx, true);
        }
        // Inside a flexible tree the context passes through unchanged; `suffix` stays as the
        // tree's root decided.
        match e.node() {
            ExprNode::Var(v) => {
                self.out.push_str(v.name());
                PREC_ATOM
            }
            ExprNode::Imm(imm) => self.imm(imm, suffix),
            ExprNode::Unary { op, a } => {
                self.out.push_str(op.symbol());
                let ctx = if *op == UnOp::Not { Some(Scalar::Bool) } else { ctx };
                // `-5` would read back as a negative literal, so a literal operand gets parens.
                let paren_literal = matches!(a.node(), ExprNode::Imm(_)) && *op == UnOp::Neg;
                self.operand(a, ctx, suffix, PREC_UNARY, paren_literal);
                PREC_UNARY
            }
            ExprNode::Binary { op, a, b } => {
                let prec = op.precedence();
                let (ctx, suffix) = if op.is_logical() {
                    (Some(Scalar::Bool), false)
                } else if op.is_comparison() {
                    operand_mode(e, &[a, b], None, suffix)
                } else {
                    operand_mode(e, &[a, b], ctx, suffix)
                };
                self.operand(a, ctx, suffix && is_flexible(a), prec, false);
                write!(self.out, " {} ", op.symbol()).ok();
                self.operand(b, ctx, suffix && is_flexible(b), prec + 1, false);
                prec
            }
            ExprNode::Select { cond, a, b } => {
                let (arms, suffix) = operand_mode(e, &[a, b], ctx, suffix);
                self.operand(cond, Some(Scalar::Bool), false, PREC_TERNARY + 1, false);
                self.out.push_str(" ? ");
                self.operand(a, arms, suffix && is_flexible(a), PREC_TERNARY + 1, false);
                self.out.push_str(" : ");
                self.operand(b, arms, suffix && is_flexible(b), PREC_TERNARY, false);
                PREC_TERNARY
            }
            ExprNode::Cast { to, a } => {
                self.operand(a, None, false, PREC_CAST, false);
                write!(self.out, " as {to}").ok();
                PREC_CAST
            }
            ExprNode::Load { buf, index } => {
                write!(self.out, "{}[", buf.name()).ok();
                self.expr(index, None, false);
                self.out.push(']');
                PREC_ATOM
            }
            ExprNode::Builtin { kind, dim } => {
                write!(self.out, "{}({dim})", kind.name()).ok();
                PREC_ATOM
            }
            ExprNode::VecLoad { buf, index, lanes } => {
                write!(self.out, "vload{lanes}({}, ", buf.name()).ok();
                self.expr(index, None, false);
                self.out.push(')');
                PREC_ATOM
            }
            ExprNode::Extract { a, lane } => {
                self.out.push_str("extract(");
                self.expr(a, None, false);
                write!(self.out, ", {lane})").ok();
                PREC_ATOM
            }
            ExprNode::Insert { a, lane, b } => {
                self.out.push_str("insert(");
                self.expr(a, None, false);
                write!(self.out, ", {lane}, ").ok();
                self.expr(b, a.ty().lane_scalar(), false);
                self.out.push(')');
                PREC_ATOM
            }
            ExprNode::Vector { ty, elems } => {
                write!(self.out, "{ty}(").ok();
                for (i, a) in elems.iter().enumerate() {
                    if i > 0 {
                        self.out.push_str(", ");
                    }
                    self.expr(a, ty.lane_scalar(), false);
                }
                self.out.push(')');
                PREC_ATOM
            }
            ExprNode::Intrinsic { op, args } => {
                let refs: Vec<&Expr> = args.iter().collect();
                let (ctx, suffix) = operand_mode(e, &refs, ctx, suffix);
                write!(self.out, "{}(", op.name()).ok();
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        self.out.push_str(", ");
                    }
                    self.expr(a, ctx, suffix && is_flexible(a));
                }
                self.out.push(')');
                PREC_ATOM
            }
        }
    }

    /// Prints an operand that needs at least precedence `min`, parenthesizing otherwise.
    fn operand(&mut self, e: &Expr, ctx: Option<Scalar>, suffix: bool, min: u8, force: bool) {
        let mut sub = Printer::default();
        let prec = sub.expr(e, ctx, suffix);
        if prec < min || force {
            write!(self.out, "({})", sub.out).ok();
        } else {
            self.out.push_str(&sub.out);
        }
    }

    fn imm(&mut self, imm: &Imm, suffix: bool) -> u8 {
        let negative = match *imm {
            Imm::Bool(b) => {
                self.out.push_str(if b { "true" } else { "false" });
                return PREC_ATOM;
            }
            Imm::Int(..) => {
                let v = imm.as_i128().unwrap_or_default();
                write!(self.out, "{v}").ok();
                v < 0
            }
            Imm::Float(ty, v) => {
                write_float(&mut self.out, ty, v);
                v.is_sign_negative() && !v.is_nan()
            }
        };
        if suffix {
            let ty = imm.scalar();
            // `nan(0x..)` carries its suffix on the keyword.
            if !matches!(imm, Imm::Float(_, v) if v.is_nan() && !is_canonical_nan(ty, *v)) {
                self.out.push_str(ty.name());
            }
        }
        if negative {
            PREC_UNARY
        } else {
            PREC_ATOM
        }
    }
}

/// True for the positive quiet NaN with no payload, which prints as `nan`.
pub(crate) fn is_canonical_nan(ty: Scalar, v: f64) -> bool {
    float_to_bits(ty, v) == float_to_bits(ty, f64::NAN)
}

fn write_float(out: &mut String, ty: Scalar, v: f64) {
    if v.is_nan() {
        if is_canonical_nan(ty, v) {
            out.push_str("nan");
        } else {
            write!(out, "nan{}(0x{:x})", ty.name(), float_to_bits(ty, v)).ok();
        }
    } else if v.is_infinite() {
        out.push_str(if v < 0.0 { "-inf" } else { "inf" });
    } else {
        // `{:?}` is the shortest text that reads back to the same value, and always has a
        // `.` or an exponent, so it lexes as a float.
        let text = match ty {
            Scalar::F64 => format!("{v:?}"),
            _ => format!("{:?}", v as f32),
        };
        out.push_str(&text);
    }
}

fn indent(out: &mut String, level: usize) {
    for _ in 0..level {
        out.push_str("  ");
    }
}

/// True if `between`, the text separating two items, is whitespace holding an empty line.
fn has_blank_line(between: &str) -> bool {
    between.trim().is_empty() && between.matches('\n').count() >= 2
}

impl Printer<'_> {
    fn span_of(&self, s: &Stmt) -> Option<Span> {
        self.source.as_ref().and_then(|src| src.spans.stmt(s))
    }

    /// When reformatting source: prints the comments that come before source offset `pos`,
    /// each on its own line, keeping (at most) one empty line wherever the source had some.
    /// `closing` means `pos` ends a block, where an empty line would only be trailing space.
    fn leading(&mut self, pos: usize, level: usize, closing: bool) {
        let Printer { out, source: Some(src) } = self else { return };
        loop {
            let next = src.spans.comments().get(src.next).filter(|c| c.start < pos).copied();
            let item = next.map_or(pos, |c| c.start);
            let between = src.text.get(src.last_end.min(item)..item).unwrap_or("");
            let room = !out.is_empty() && !out.ends_with("{\n") && !out.ends_with("\n\n");
            if room && has_blank_line(between) && (next.is_some() || !closing) {
                out.push('\n');
            }
            let Some(c) = next else { return };
            indent(out, level);
            out.push_str(src.text.get(c.start..c.end).unwrap_or("").trim_end());
            out.push('\n');
            src.next += 1;
            src.last_end = c.end;
        }
    }

    /// When reformatting source: prints a comment that follows source offset `end` on the
    /// same line, after what was just printed.
    fn trailing(&mut self, end: usize) {
        let Printer { out, source: Some(src) } = self else { return };
        src.last_end = src.last_end.max(end);
        let Some(c) = src.spans.comments().get(src.next).copied() else { return };
        if c.start >= end && src.text.get(end..c.start).is_some_and(|t| !t.contains('\n')) {
            out.push(' ');
            out.push_str(src.text.get(c.start..c.end).unwrap_or("").trim_end());
            src.next += 1;
            src.last_end = c.end;
        }
    }

    fn block_body(&mut self, s: &Stmt, level: usize) {
        let stmts = match s.node() {
            StmtNode::Block(v) => v.as_slice(),
            _ => std::slice::from_ref(s),
        };
        let span = self.span_of(s);
        let inner_comments = span.is_some_and(|sp| {
            self.source.as_ref().is_some_and(|src| {
                src.spans.comments().get(src.next).is_some_and(|c| c.end < sp.end)
            })
        });
        if stmts.is_empty() && !inner_comments {
            self.out.push_str("{}");
            return;
        }
        self.out.push('{');
        if let Some(sp) = span {
            // A comment right after the `{` stays on its line.
            self.trailing(sp.start + 1);
        }
        self.out.push('\n');
        for st in stmts {
            self.stmt(st, level + 1);
        }
        if let Some(sp) = span {
            self.leading(sp.end.saturating_sub(1), level + 1, true);
        }
        indent(&mut self.out, level);
        self.out.push('}');
    }

    fn stmt(&mut self, s: &Stmt, level: usize) {
        let span = self.span_of(s);
        if let Some(sp) = span {
            self.leading(sp.start, level, false);
        }
        indent(&mut self.out, level);
        self.stmt_inline(s, level);
        if let Some(sp) = span {
            self.trailing(sp.end);
        }
        self.out.push('\n');
    }

    /// Prints a statement without leading indentation or trailing newline.
    fn stmt_inline(&mut self, s: &Stmt, level: usize) {
        match s.node() {
            StmtNode::Let { var, value } => {
                write!(self.out, "let {}: {} = ", var.name(), var.ty()).ok();
                self.expr(value, var.ty().scalar(), false);
                self.out.push(';');
            }
            StmtNode::Decl { var, init } => {
                write!(self.out, "var {}: {} = ", var.name(), var.ty()).ok();
                self.expr(init, var.ty().scalar(), false);
                self.out.push(';');
            }
            StmtNode::Assign { var, value } => {
                write!(self.out, "{} = ", var.name()).ok();
                self.expr(value, var.ty().scalar(), false);
                self.out.push(';');
            }
            StmtNode::Store { buf, index, value } => {
                write!(self.out, "{}[", buf.name()).ok();
                self.expr(index, None, false);
                self.out.push_str("] = ");
                self.expr(value, buf.ty().elem(), false);
                self.out.push(';');
            }
            StmtNode::VecStore { buf, index, value } => {
                write!(self.out, "vstore({}, ", buf.name()).ok();
                self.expr(index, None, false);
                self.out.push_str(", ");
                self.expr(value, None, false);
                self.out.push_str(");");
            }
            StmtNode::Alloc { var, count } => {
                let (space, elem) = match var.ty() {
                    Type::Ptr(space, elem) => (space, elem.name()),
                    Type::Scalar(s) | Type::Vector(s, _) => (AddrSpace::Private, s.name()),
                    Type::Frag(f) => (AddrSpace::Private, f.elem.name()),
                };
                write!(self.out, "{space} {}: {elem}[{count}];", var.name()).ok();
            }
            StmtNode::If { cond, then, otherwise } => {
                self.out.push_str("if ");
                self.expr(cond, Some(Scalar::Bool), false);
                self.out.push(' ');
                self.block_body(then, level);
                match otherwise {
                    None => {}
                    Some(o) if matches!(o.node(), StmtNode::If { .. }) => {
                        self.out.push_str(" else ");
                        self.stmt_inline(o, level);
                    }
                    Some(o) => {
                        self.out.push_str(" else ");
                        self.block_body(o, level);
                    }
                }
            }
            StmtNode::For { var, lo, hi, step, body } => {
                let t = var.ty().scalar();
                write!(self.out, "for {}: {} in ", var.name(), var.ty()).ok();
                self.expr(lo, t, false);
                self.out.push_str(" .. ");
                self.expr(hi, t, false);
                let unit_step =
                    step.as_imm().is_some_and(|i| i.as_i128() == Some(1) && Some(i.scalar()) == t);
                if !unit_step {
                    self.out.push_str(" step ");
                    self.expr(step, t, false);
                }
                self.out.push(' ');
                self.block_body(body, level);
            }
            StmtNode::While { cond, body } => {
                self.out.push_str("while ");
                self.expr(cond, Some(Scalar::Bool), false);
                self.out.push(' ');
                self.block_body(body, level);
            }
            StmtNode::Block(_) => self.block_body(s, level),
            StmtNode::Call { result, func, args } => {
                if let Some(r) = result {
                    write!(self.out, "let {}: {} = ", r.name(), r.ty()).ok();
                }
                self.call(func, args);
                self.out.push(';');
            }
        }
    }

    fn call(&mut self, func: &Func, args: &[Expr]) {
        if let FuncKind::Matrix(op) = func.kind() {
            return self.matrix_call(op, args);
        }
        write!(self.out, "{}(", func.name()).ok();
        let mut first = true;
        if let FuncKind::Barrier(fence) | FuncKind::Fence(fence) = func.kind() {
            write!(self.out, "{fence}").ok();
            first = fence == crate::stmt::MemFence { local: false, global: false };
        }
        let elem = args.first().and_then(|p| p.ty().elem());
        for (i, a) in args.iter().enumerate() {
            if !first {
                self.out.push_str(", ");
            }
            first = false;
            let ctx = if i >= 2 { elem } else { None };
            self.expr(a, ctx, false);
        }
        self.out.push(')');
    }

    /// A matrix call: the operands, with the layout after `p, offset, stride` and the copy's
    /// element count or the wait's group count last.
    fn matrix_call(&mut self, op: MatrixOp, args: &[Expr]) {
        write!(self.out, "{}(", op.name()).ok();
        for (i, a) in args.iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            if let (MatrixOp::Store(l), 3) = (op, i) {
                write!(self.out, "{}, ", l.name()).ok();
            }
            // No context: literals print with their suffix, so they parse back as they are.
            self.expr(a, None, false);
        }
        for (i, w) in op.words().iter().enumerate() {
            if i > 0 || !args.is_empty() {
                self.out.push_str(", ");
            }
            self.out.push_str(w);
        }
        self.out.push(')');
    }

    fn kernel(&mut self, k: &Kernel) {
        // The parser accepts nesting up to parse::MAX_DEPTH only, and printing recurses:
        // print expressions deeper than depth::MAX_EXPR_DEPTH through lets, so that the text
        // parses back (to a kernel with the same meaning).
        let k = &crate::depth::bound_kernel(k);
        write!(self.out, "kernel {}(", k.name()).ok();
        for (i, p) in k.params().iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            write!(self.out, "{}: {}", p.name(), p.ty()).ok();
        }
        self.out.push(')');
        let attrs = k.attrs();
        if let Some([x, y, z]) = attrs.reqd_work_group_size {
            write!(self.out, " #reqd_work_group_size({x}, {y}, {z})").ok();
        }
        if attrs.fast_math {
            self.out.push_str(" #fast_math");
        }
        if let Some(r) = &attrs.nd_range {
            write!(self.out, " {r}").ok();
        }
        if let Some(fa) = &attrs.fused {
            write!(self.out, " {fa}").ok();
        }
        self.out.push(' ');
        self.block_body(k.body(), 0);
    }
}

/// Reformats parsed source into canonical form (what `kiln fmt` prints), keeping its comments
/// (on their own lines, or at the end of a statement's line) and single empty lines between
/// statements. Without comments this is the module's `Display`.
///
/// ```
/// let src = "kernel k(x: ptr<global, u32>) {  // doubles\n  x[0] = x[0]*2u32; // in place\n}\n";
/// let parsed = kiln_ir::parse_file("k.kir", src).unwrap();
/// assert_eq!(
///     kiln_ir::print::format_source(&parsed, src),
///     "kernel k(x: ptr<global, u32>) { // doubles\n  x[0] = x[0] * 2; // in place\n}\n"
/// );
/// ```
pub fn format_source(parsed: &Parsed, src: &str) -> String {
    let mut p = Printer {
        out: String::new(),
        source: Some(Source { text: src, spans: &parsed.spans, next: 0, last_end: 0 }),
    };
    for (i, k) in parsed.module.kernels.iter().enumerate() {
        if i > 0 {
            p.out.push('\n');
        }
        if let Some(sp) = parsed.spans.kernel(k.name()) {
            // The span is the kernel's name; its header starts at the keyword before it.
            let start = src.get(..sp.start).and_then(|s| s.rfind("kernel")).unwrap_or(sp.start);
            p.leading(start, 0, false);
        }
        p.kernel(k);
        if let Some(sp) = p.span_of(k.body()) {
            p.trailing(sp.end);
        }
        p.out.push('\n');
    }
    p.leading(src.len(), 0, true);
    p.out
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut p = Printer::default();
        p.expr(self, None, false);
        f.write_str(&p.out)
    }
}

impl fmt::Display for Stmt {
    /// Prints the statement at indentation level 0, without a trailing newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut p = Printer::default();
        p.stmt_inline(self, 0);
        f.write_str(&p.out)
    }
}

impl fmt::Display for Func {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind() {
            FuncKind::Barrier(fence) | FuncKind::Fence(fence) => {
                write!(f, "{}({fence})", self.name())
            }
            FuncKind::Atomic(op) => f.write_str(op.name()),
            FuncKind::Matrix(op) => f.write_str(op.name()),
        }
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut p = Printer::default();
        p.kernel(self);
        f.write_str(&p.out)
    }
}

impl fmt::Display for Module {
    /// Kernels separated by a blank line, the whole ending in a newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, k) in self.kernels.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            writeln!(f, "{k}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::Var;

    #[test]
    fn minimal_parentheses() {
        let a = Var::new("a", Type::I32);
        let b = Var::new("b", Type::I32);
        assert_eq!((2 * (&a + &b) - a.expr()).to_string(), "2 * (a + b) - a");
        assert_eq!((&a - (&a - &b)).to_string(), "a - (a - b)");
        assert_eq!((&a - &a - &b).to_string(), "a - a - b");
        assert_eq!((-Expr::i32(5)).to_string(), "-(5)");
        assert_eq!(Expr::i32(-5).to_string(), "-5");
        assert_eq!((&a + 1).cast(Scalar::U8).to_string(), "(a + 1) as u8");
    }

    #[test]
    fn suffixes_only_where_context_does_not_give_the_type() {
        let x = Var::new("x", Type::U32);
        assert_eq!((&x + 1u32).to_string(), "x + 1");
        assert_eq!(Expr::u32(3).to_string(), "3u32");
        assert_eq!((Expr::u32(3) + Expr::u32(4)).to_string(), "3u32 + 4u32");
        assert_eq!((Expr::i32(3) + Expr::i32(4)).to_string(), "3 + 4");
        assert_eq!(Expr::f64(0.25).to_string(), "0.25f64");
        assert_eq!(Expr::f32(1.0).to_string(), "1.0");
        assert_eq!(Expr::f32(f32::NAN).to_string(), "nan");
        assert_eq!(Expr::f32(f32::NEG_INFINITY).to_string(), "-inf");
    }
}
