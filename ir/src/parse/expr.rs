//! Expressions: parsing to an untyped tree, then elaboration into typed IR.

use super::lexer::Tok;
use super::{atomic_op, float_from_bits, Ast, AstKind, Link, PResult, Parser, KEYWORDS, MAX_DEPTH};
use crate::diag::Span;
use crate::expr::{BinOp, Builtin, Expr, Imm, Intrinsic, UnOp};
use crate::types::{Scalar, Type};

impl Parser<'_> {
    // ---- expressions ---------------------------------------------------------------------

    fn node(&self, kind: AstKind, start: usize, depth: usize) -> PResult<Ast> {
        let span = Span::new(start, self.prev_end());
        if depth > MAX_DEPTH {
            return self.error(
                span,
                format!("expression nested too deeply (the limit is {MAX_DEPTH} levels)"),
            );
        }
        Ok(Ast { kind, span, depth })
    }

    pub(super) fn expr(&mut self) -> PResult<Ast> {
        let start = self.span();
        self.enter(start)?;
        let cond = self.binary(2)?;
        let r = if self.eat_punct("?") {
            let a = self.expr()?;
            self.expect_punct(":")?;
            let b = self.expr()?;
            let depth = 1 + cond.depth.max(a.depth).max(b.depth);
            self.node(AstKind::Select(Box::new(cond), Box::new(a), Box::new(b)), start.start, depth)
        } else {
            Ok(cond)
        };
        self.leave();
        r
    }

    fn binop(&self) -> Option<BinOp> {
        let Tok::Punct(p) = self.peek() else {
            return None;
        };
        BinOp::ALL.into_iter().find(|op| op.symbol() == *p)
    }

    /// Operators of precedence `min_prec` or higher, left-associative. The operators of one
    /// precedence level and up at this position form one flat chain: the loop, not
    /// recursion, takes each next operand, so a flat sum of any length nests one level.
    fn binary(&mut self, min_prec: u8) -> PResult<Ast> {
        let start = self.span().start;
        let first = self.cast()?;
        let mut links = Vec::new();
        let mut depth = first.depth;
        while let Some(op) = self.binop().filter(|op| op.precedence() >= min_prec) {
            self.bump();
            self.enter(self.span())?;
            let rhs = self.binary(op.precedence() + 1);
            self.leave();
            let rhs = rhs?;
            depth = depth.max(rhs.depth);
            links.push(Link { op, rhs, end: self.prev_end() });
        }
        if links.is_empty() {
            return Ok(first);
        }
        self.node(AstKind::Chain(Box::new(first), links), start, depth + 1)
    }

    fn cast(&mut self) -> PResult<Ast> {
        let start = self.span().start;
        let mut e = self.unary()?;
        while self.eat_word("as") {
            let to = self.scalar_type()?;
            let depth = e.depth + 1;
            e = self.node(AstKind::Cast(Box::new(e), to), start, depth)?;
        }
        Ok(e)
    }

    fn unary(&mut self) -> PResult<Ast> {
        let start = self.span();
        let op = match self.peek() {
            Tok::Punct("-") => UnOp::Neg,
            Tok::Punct("!") => UnOp::Not,
            Tok::Punct("~") => UnOp::BitNot,
            _ => return self.primary(),
        };
        self.bump();
        if op == UnOp::Neg
            && matches!(self.peek(), Tok::Int { .. } | Tok::Float { .. } | Tok::SpecialFloat { .. })
        {
            return self.literal(true, start.start);
        }
        self.enter(start)?;
        let a = self.unary();
        self.leave();
        let a = a?;
        let depth = a.depth + 1;
        self.node(AstKind::Unary(op, Box::new(a)), start.start, depth)
    }

    fn literal(&mut self, neg: bool, start: usize) -> PResult<Ast> {
        let tok = self.bump().tok;
        let mut payload = None;
        if matches!(tok, Tok::SpecialFloat { nan: true, .. }) && self.eat_punct("(") {
            let span = self.span();
            match self.peek().clone() {
                Tok::Int { text, radix: 16, suffix: None } => {
                    match u64::from_str_radix(&text, 16) {
                        Ok(v) => payload = Some(v),
                        Err(_) => {
                            return self.error(span, "NaN bit pattern does not fit in 64 bits")
                        }
                    }
                }
                t => {
                    return self.error(
                        span,
                        format!("expected a hexadecimal NaN bit pattern, found {}", t.describe()),
                    )
                }
            }
            self.bump();
            self.expect_punct(")")?;
        }
        self.node(AstKind::Lit { tok, neg, payload }, start, 1)
    }

    fn primary(&mut self) -> PResult<Ast> {
        let start = self.span();
        match self.peek().clone() {
            Tok::Int { .. } | Tok::Float { .. } | Tok::SpecialFloat { .. } => {
                self.literal(false, start.start)
            }
            Tok::Punct("(") => {
                self.bump();
                let e = self.expr()?;
                self.expect_punct(")")?;
                Ok(e)
            }
            Tok::Ident(w) if w == "true" || w == "false" => {
                self.bump();
                self.node(AstKind::Bool(w == "true"), start.start, 1)
            }
            Tok::Ident(w) if KEYWORDS.contains(&w.as_str()) => {
                self.error(start, format!("expected an expression, found keyword `{w}`"))
            }
            Tok::Ident(name) => {
                self.bump();
                if self.is_punct("(") {
                    self.bump();
                    let args = self.call_args()?;
                    let depth = 1 + args.iter().map(|a| a.depth).max().unwrap_or(0);
                    self.node(AstKind::Call(name, args), start.start, depth)
                } else if self.eat_punct("[") {
                    let index = self.expr()?;
                    self.expect_punct("]")?;
                    let depth = index.depth + 1;
                    self.node(AstKind::Index(name, Box::new(index)), start.start, depth)
                } else {
                    self.node(AstKind::Name(name), start.start, 1)
                }
            }
            t => self.error(start, format!("expected an expression, found {}", t.describe())),
        }
    }

    /// Arguments after the `(`, through the `)`.
    pub(super) fn call_args(&mut self) -> PResult<Vec<Ast>> {
        let mut args = Vec::new();
        while !self.is_punct(")") {
            args.push(self.expr()?);
            if !self.eat_punct(",") {
                break;
            }
        }
        self.expect_punct(")")?;
        Ok(args)
    }

    // ---- elaboration ---------------------------------------------------------------------

    /// The type of `a` if it does not depend on context (`None` for flexible expressions).
    pub(super) fn synth(&self, a: &Ast) -> Option<Scalar> {
        match &a.kind {
            AstKind::Lit { tok, .. } => match tok {
                Tok::Int { suffix, .. }
                | Tok::Float { suffix, .. }
                | Tok::SpecialFloat { suffix, .. } => *suffix,
                _ => None,
            },
            AstKind::Bool(_) => Some(Scalar::Bool),
            AstKind::Name(n) => self.lookup(n).and_then(|v| v.ty().scalar()),
            AstKind::Unary(UnOp::Not, _) => Some(Scalar::Bool),
            AstKind::Unary(_, x) => self.synth(x),
            AstKind::Chain(first, links) => {
                let mut t = self.synth(first);
                for l in links {
                    t = if l.op.is_comparison() || l.op.is_logical() {
                        Some(Scalar::Bool)
                    } else {
                        t.or_else(|| self.synth(&l.rhs))
                    };
                }
                t
            }
            AstKind::Select(_, x, y) => self.synth(x).or_else(|| self.synth(y)),
            AstKind::Cast(_, t) => Some(*t),
            AstKind::Index(n, _) => self.lookup(n).map(|v| v.ty().elem().unwrap_or(Scalar::I32)),
            AstKind::Call(name, args) if name == "extract" => self.vector_elem(args.first()?),
            AstKind::Call(name, _) if vector_call(name) => None,
            AstKind::Call(name, args) => {
                if Builtin::from_name(name).is_some() {
                    Some(Scalar::U32)
                } else if name == "select" {
                    args.iter().skip(1).find_map(|x| self.synth(x))
                } else {
                    args.iter().find_map(|x| self.synth(x))
                }
            }
        }
    }

    /// The lane type of `a` if it is a vector expression whose type is known from its form
    /// (vector variables, loads, constructors and lane-wise operations on them).
    fn vector_elem(&self, a: &Ast) -> Option<Scalar> {
        match &a.kind {
            AstKind::Name(n) => match self.lookup(n)?.ty() {
                Type::Vector(s, _) => Some(s),
                _ => None,
            },
            AstKind::Unary(_, x) => self.vector_elem(x),
            AstKind::Chain(first, links) => std::iter::once(&**first)
                .chain(links.iter().map(|l| &l.rhs))
                .find_map(|x| self.vector_elem(x)),
            AstKind::Select(_, x, y) => self.vector_elem(x).or_else(|| self.vector_elem(y)),
            AstKind::Call(name, args) => {
                if let Some(Type::Vector(s, _)) = Type::vector_from_name(name) {
                    Some(s)
                } else if vload_lanes(name).is_some() {
                    match &args.first()?.kind {
                        AstKind::Name(n) => self.lookup(n)?.ty().elem(),
                        _ => None,
                    }
                } else if name == "insert" {
                    self.vector_elem(args.first()?)
                } else {
                    args.iter().find_map(|x| self.vector_elem(x))
                }
            }
            _ => None,
        }
    }

    /// `vload2/4/8(buf, index)`, `extract(v, lane)`, `insert(v, lane, x)` and vector
    /// constructors `f32x4(...)`; `None` if `name` is none of them.
    fn vector_call(&mut self, name: &str, args: &[Ast], span: Span) -> PResult<Option<Expr>> {
        let lane = |p: &Self, a: &Ast| -> PResult<u8> {
            match &a.kind {
                AstKind::Lit { tok: Tok::Int { text, radix, suffix: _ }, neg: false, .. } => {
                    match u8::from_str_radix(text, *radix) {
                        Ok(v) => Ok(v),
                        Err(_) => p.error(a.span, "a lane number is an integer literal below 8"),
                    }
                }
                _ => p.error(a.span, format!("`{name}` takes a lane number, an integer literal")),
            }
        };
        if let Some(lanes) = vload_lanes(name) {
            let [buf, index] = args else {
                return self.error(
                    span,
                    format!("`{name}` takes 2 arguments (pointer, index), found {}", args.len()),
                );
            };
            let AstKind::Name(b) = &buf.kind else {
                return self.error(
                    buf.span,
                    format!("the first operand of `{name}` must be a pointer variable"),
                );
            };
            let buf = self.resolve(b, buf.span)?;
            let index = self.elab(index, None)?;
            return Ok(Some(Expr::vload(&buf, index, lanes)));
        }
        if name == "extract" {
            let [v, k] = args else {
                return self.error(
                    span,
                    format!("`extract` takes 2 arguments (vector, lane), found {}", args.len()),
                );
            };
            let k = lane(self, k)?;
            return Ok(Some(self.elab(v, None)?.extract(k)));
        }
        if name == "insert" {
            let [v, k, x] = args else {
                return self.error(
                    span,
                    format!(
                        "`insert` takes 3 arguments (vector, lane, value), found {}",
                        args.len()
                    ),
                );
            };
            let k = lane(self, k)?;
            let v = self.elab(v, None)?;
            let x = self.elab(x, v.ty().lane_scalar())?;
            return Ok(Some(v.insert(k, x)));
        }
        if let Some(ty @ Type::Vector(elem, _)) = Type::vector_from_name(name) {
            let elems =
                args.iter().map(|x| self.elab(x, Some(elem))).collect::<PResult<Vec<_>>>()?;
            return Ok(Some(Expr::new(crate::expr::ExprNode::Vector { ty, elems: elems.into() })));
        }
        Ok(None)
    }

    pub(super) fn record_expr(&mut self, e: Expr, span: Span) -> Expr {
        if self.record {
            self.spans.add_expr(&e, span);
        }
        e
    }

    /// Builds typed IR from `a`, giving flexible literals the type `ctx`.
    pub(super) fn elab(&mut self, a: &Ast, ctx: Option<Scalar>) -> PResult<Expr> {
        let e = match &a.kind {
            AstKind::Lit { tok, neg, payload } => {
                Expr::imm(self.literal_value(tok, *neg, *payload, ctx, a.span)?)
            }
            AstKind::Bool(b) => Expr::bool(*b),
            AstKind::Name(n) => Expr::var(&self.resolve(n, a.span)?),
            AstKind::Unary(op, x) => {
                let ctx = if *op == UnOp::Not { Some(Scalar::Bool) } else { ctx };
                Expr::unary(*op, self.elab(x, ctx)?)
            }
            AstKind::Chain(first, links) => return self.chain(a.span.start, first, links, ctx),
            AstKind::Select(c, x, y) => self.select(c, x, y, ctx)?,
            AstKind::Cast(x, to) => self.elab(x, None)?.cast(*to),
            AstKind::Index(n, i) => {
                let buf = self.resolve(n, a.span)?;
                Expr::load(&buf, self.elab(i, None)?)
            }
            AstKind::Call(name, args) => self.call_expr(name, args, ctx, a.span)?,
        };
        Ok(self.record_expr(e, a.span))
    }

    /// Elaborates a flat chain without recursing along it. Each `prefix op rhs` is typed as a
    /// binary node would be: its operands take the type of the first one whose type does not
    /// depend on context, else the context the enclosing prefix gives it.
    fn chain(
        &mut self,
        start: usize,
        first: &Ast,
        links: &[Link],
        ctx: Option<Scalar>,
    ) -> PResult<Expr> {
        // prefix[k]: the synthesized type of the chain through link k - 1 (prefix[0]: `first`).
        let mut prefix = Vec::with_capacity(links.len() + 1);
        prefix.push(self.synth(first));
        let mut rhs = Vec::with_capacity(links.len());
        for l in links {
            let r = self.synth(&l.rhs);
            let last = prefix[prefix.len() - 1];
            rhs.push(r);
            prefix.push(if l.op.is_comparison() || l.op.is_logical() {
                Some(Scalar::Bool)
            } else {
                last.or(r)
            });
        }
        // The operand type of each link, from the outside in: the outermost link gets `ctx`,
        // and each link hands its operand type to the prefix on its left.
        let mut operand = vec![None; links.len()];
        let mut outer = ctx;
        for k in (0..links.len()).rev() {
            let op = links[k].op;
            let t = if op.is_logical() {
                Some(Scalar::Bool)
            } else if op.is_comparison() {
                prefix[k].or(rhs[k])
            } else {
                prefix[k].or(rhs[k]).or(outer)
            };
            operand[k] = t;
            outer = t;
        }
        let mut e = self.elab(first, operand[0])?;
        for (l, t) in links.iter().zip(operand) {
            let r = self.elab(&l.rhs, t)?;
            e = Expr::binary(l.op, e, r);
            e = self.record_expr(e, Span::new(start, l.end));
        }
        Ok(e)
    }

    fn select(&mut self, c: &Ast, x: &Ast, y: &Ast, ctx: Option<Scalar>) -> PResult<Expr> {
        let t = self.synth(x).or_else(|| self.synth(y)).or(ctx);
        let c = self.elab(c, Some(Scalar::Bool))?;
        let (x, y) = (self.elab(x, t)?, self.elab(y, t)?);
        Ok(Expr::select(c, x, y))
    }

    fn call_expr(
        &mut self,
        name: &str,
        args: &[Ast],
        ctx: Option<Scalar>,
        span: Span,
    ) -> PResult<Expr> {
        if let Some(kind) = Builtin::from_name(name) {
            let dim = match args {
                [Ast {
                    kind: AstKind::Lit { tok: Tok::Int { text, radix, suffix: _ }, neg: false, .. },
                    ..
                }] => u8::from_str_radix(text, *radix).ok(),
                _ => None,
            };
            let at = match args {
                [a] => a.span,
                _ => span,
            };
            return match dim {
                Some(d) => Ok(Expr::builtin(kind, d)),
                None => self.error(
                    at,
                    format!("`{name}` takes one dimension, an integer literal 0, 1 or 2"),
                ),
            };
        }
        if let Some(e) = self.vector_call(name, args, span)? {
            return Ok(e);
        }
        if name == "select" {
            return match args {
                [c, x, y] => self.select(c, x, y, ctx),
                _ => self.error(span, format!("`select` takes 3 arguments, found {}", args.len())),
            };
        }
        if let Some(op) = Intrinsic::from_name(name) {
            let t = args.iter().find_map(|x| self.synth(x)).or(ctx);
            let args = args.iter().map(|x| self.elab(x, t)).collect::<PResult<Vec<_>>>()?;
            return Ok(Expr::intrinsic(op, args));
        }
        if atomic_op(name).is_some() || name == "barrier" || name == "fence" {
            return self.error(
                span,
                format!("`{name}` has side effects and cannot be part of an expression; call it as a statement (`{name}(...);`, or `let old = {name}(...);` for an atomic)"),
            );
        }
        self.error(span, format!("unknown function `{name}`"))
    }

    fn literal_value(
        &self,
        tok: &Tok,
        neg: bool,
        payload: Option<u64>,
        ctx: Option<Scalar>,
        span: Span,
    ) -> PResult<Imm> {
        let float_ctx = ctx.filter(|t| t.is_float());
        match tok {
            Tok::Int { text, radix, suffix } => {
                let ty =
                    suffix.or(ctx.filter(|t| t.is_int() || t.is_float())).unwrap_or(Scalar::I32);
                let Some(mag) =
                    u128::from_str_radix(text, *radix).ok().filter(|m| *m <= i128::MAX as u128)
                else {
                    return self.error(span, "integer literal is too large");
                };
                if ty.is_float() {
                    // `70000` where an f16 is wanted overflows as `70000.0` does.
                    let v = crate::expr::round_float(ty, mag as f64);
                    if v.is_infinite() {
                        return self.error(span, format!("literal out of range for {ty}"));
                    }
                    return Ok(Imm::float(ty, if neg { -v } else { v }));
                }
                let v = if neg { -(mag as i128) } else { mag as i128 };
                let (min, max) = (ty.int_min().unwrap_or(0), ty.int_max().unwrap_or(0));
                // A hexadecimal literal may spell any bit pattern of the type's width.
                let bits_max = (1i128 << ty.bits()) - 1;
                if (min..=max).contains(&v) || (*radix == 16 && !neg && v <= bits_max) {
                    Ok(Imm::int(ty, v))
                } else {
                    self.error(
                        span,
                        format!(
                            "literal `{}` out of range for {ty} ({min}..={max})",
                            &self.src[span.start..span.end]
                        ),
                    )
                }
            }
            Tok::Float { text, suffix } => {
                let ty = suffix.or(float_ctx).unwrap_or(Scalar::F32);
                match super::float_literal(ty, text) {
                    Ok(v) => Ok(Imm::float(ty, if neg { -v } else { v })),
                    Err(super::FloatLiteralError::Malformed) => {
                        self.error(span, "malformed float literal")
                    }
                    Err(super::FloatLiteralError::OutOfRange) => {
                        self.error(span, format!("literal out of range for {ty}"))
                    }
                }
            }
            Tok::SpecialFloat { nan, suffix } => {
                let ty = suffix.or(float_ctx).unwrap_or(Scalar::F32);
                let v = match (nan, payload) {
                    (false, _) => f64::INFINITY,
                    (true, None) => f64::NAN,
                    (true, Some(bits)) => match float_from_bits(ty, bits) {
                        Some(v) if v.is_nan() => v,
                        _ => {
                            return self.error(
                                span,
                                format!("`0x{bits:x}` is not a NaN bit pattern of {ty}"),
                            )
                        }
                    },
                };
                Ok(Imm::Float(ty, if neg { -v } else { v }))
            }
            _ => self.error(span, "expected a literal"),
        }
    }
}

/// The lane count of `vload2`, `vload4` or `vload8`.
fn vload_lanes(name: &str) -> Option<u8> {
    match name {
        "vload2" => Some(2),
        "vload4" => Some(4),
        "vload8" => Some(8),
        _ => None,
    }
}

/// True for the names of calls that build or load vectors (their type is not a scalar).
fn vector_call(name: &str) -> bool {
    vload_lanes(name).is_some() || name == "insert" || Type::vector_from_name(name).is_some()
}
