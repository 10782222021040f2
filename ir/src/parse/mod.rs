//! The parser for the text format (`.kir`); the grammar is in `docs/ir-syntax.md`.
//!
//! Parsing is two steps per expression: the tokens become a small untyped tree, which is then
//! *elaborated* into typed IR, because an unsuffixed literal takes its type from its context
//! (see [`crate::print`] for the rule). Names are resolved to the variables in scope, so every
//! reference carries its type. Type errors are left to the verifier; the parser reports only
//! what it cannot build: bad tokens, bad syntax, unknown names, literals that do not fit.
//! Every error is a [`Diagnostic`] with `file:line:col`; the parser never panics.

mod attrs;
mod expr;
mod lexer;
mod literal;

use hashbrown::HashMap;

use crate::diag::{Diagnostic, Span, Spans};
use crate::expr::{BinOp, Builtin, Expr, Intrinsic, UnOp, Var};
use crate::kernel::{Attrs, Kernel, Module};
use crate::matrix::{Frag, FragRole, Layout, MatShape, MatrixOp};
use crate::stmt::{AtomicOp, Func, MemFence, Stmt, StmtNode};
use crate::types::{AddrSpace, Scalar, Type};
use crate::warpgroup::{Swizzle, TmaBox, WgLayout};
use lexer::{Tok, Token};
pub use literal::{float_literal, FloatLiteralError};

/// Deepest nesting of expressions or statements the parser accepts; deeper input is an error
/// rather than a stack overflow. Nesting is what the parser recurses on: parentheses, operands
/// of prefix operators and of higher-precedence operators, blocks. A left-associative chain
/// written flat (`a + b + c + ...`, any length) is one level. The limit is above
/// [`crate::depth::MAX_EXPR_DEPTH`], the deepest expression kiln prints, so everything kiln
/// prints parses back.
pub const MAX_DEPTH: usize = 256;

/// Words that cannot name a variable, parameter or kernel.
pub const KEYWORDS: [&str; 17] = [
    "kernel", "let", "var", "if", "else", "for", "in", "step", "while", "local", "private", "true",
    "false", "as", "inf", "nan", "ptr",
];

/// True if `name` can name a kernel, parameter or variable in the text format: an identifier
/// that is neither a reserved word nor a type name.
pub fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !KEYWORDS.contains(&name)
        && Scalar::from_name(name).is_none()
        && Type::vector_from_name(name).is_none()
}

/// A parsed module together with the source span of each of its nodes.
pub struct Parsed {
    /// The module.
    pub module: Module,
    /// Where each expression, statement and kernel came from.
    pub spans: Spans,
}

/// Parses a module from text, naming the source `file` in errors.
pub fn parse_file(file: &str, src: &str) -> Result<Parsed, Diagnostic> {
    parse(Parser::new(file, src))
}

/// Parses a module from text (errors name the source `<input>`). Unlike [`parse_file`], it
/// records no spans for later errors, which makes it faster.
pub fn parse_module(src: &str) -> Result<Module, Diagnostic> {
    let mut p = Parser::new("<input>", src);
    p.record = false;
    parse(p).map(|p| p.module)
}

fn parse(mut p: Parser<'_>) -> Result<Parsed, Diagnostic> {
    let mut kernels = Vec::new();
    while p.peek() != &Tok::Eof {
        kernels.push(p.kernel()?);
    }
    p.finish()?;
    Ok(Parsed { module: Module::new(kernels), spans: p.spans })
}

/// Parses one expression over the given variables (handy in tests and tools).
///
/// ```
/// use kiln_ir::{parse::parse_expr, Type, Var};
/// let x = Var::new("x", Type::U32);
/// let e = parse_expr("x * 4 + 1", &[x]).unwrap();
/// assert_eq!(e.ty(), Type::U32);
/// assert_eq!(e.to_string(), "x * 4 + 1");
/// ```
pub fn parse_expr(src: &str, vars: &[Var]) -> Result<Expr, Diagnostic> {
    let mut p = Parser::new("<input>", src);
    p.scopes.push(vars.iter().map(|v| (v.name().to_string(), v.clone())).collect());
    let ast = p.expr()?;
    p.expect_tok(&Tok::Eof, "end of input")?;
    p.finish()?;
    p.elab(&ast, None)
}

/// An untyped expression, as written.
#[derive(Debug)]
struct Ast {
    kind: AstKind,
    span: Span,
    depth: usize,
}

#[derive(Debug)]
enum AstKind {
    /// A literal token, with a folded leading minus and a NaN payload.
    Lit {
        tok: Tok,
        neg: bool,
        payload: Option<u64>,
    },
    Bool(bool),
    Name(String),
    Unary(UnOp, Box<Ast>),
    /// A left-associative chain `first op1 r1 op2 r2 ...`, meaning `((first op1 r1) op2 r2)`,
    /// with the end offset of each prefix. Kept flat so that a long sum written flat costs no
    /// recursion to parse, type or drop.
    Chain(Box<Ast>, Vec<Link>),
    Select(Box<Ast>, Box<Ast>, Box<Ast>),
    Cast(Box<Ast>, Scalar),
    Index(String, Box<Ast>),
    Call(String, Vec<Ast>),
}

/// One `op rhs` step of a [`AstKind::Chain`], and where the prefix it completes ends.
#[derive(Debug)]
struct Link {
    op: BinOp,
    rhs: Ast,
    end: usize,
}

struct Parser<'s> {
    file: &'s str,
    src: &'s str,
    toks: Vec<Token>,
    /// A lexical error after the last token, reported when the parser gets there.
    lex_error: Option<lexer::LexError>,
    pos: usize,
    scopes: Vec<HashMap<String, Var>>,
    spans: Spans,
    /// Whether to record the span of every node (only callers that report later errors need
    /// them).
    record: bool,
    depth: usize,
}

type PResult<T> = Result<T, Diagnostic>;

impl<'s> Parser<'s> {
    fn new(file: &'s str, src: &'s str) -> Parser<'s> {
        let (toks, comments, lex_error) = lexer::lex(src);
        let mut spans = Spans::default();
        for c in comments {
            spans.add_comment(c);
        }
        Parser {
            file,
            src,
            toks,
            lex_error,
            pos: 0,
            scopes: Vec::new(),
            spans,
            record: true,
            depth: 0,
        }
    }

    /// Reports a lexical error the parse did not run into.
    fn finish(&self) -> PResult<()> {
        match &self.lex_error {
            Some((msg, span)) => Err(Diagnostic::new(self.file, self.src, *span, msg.clone())),
            None => Ok(()),
        }
    }

    // ---- token helpers -------------------------------------------------------------------

    fn peek(&self) -> &Tok {
        &self.toks[self.pos].tok
    }

    fn peek_at(&self, n: usize) -> &Tok {
        &self.toks[(self.pos + n).min(self.toks.len() - 1)].tok
    }

    fn span(&self) -> Span {
        self.toks[self.pos].span
    }

    fn prev_end(&self) -> usize {
        if self.pos == 0 {
            0
        } else {
            self.toks[self.pos - 1].span.end
        }
    }

    fn bump(&mut self) -> Token {
        let t = self.toks[self.pos].clone();
        if self.pos + 1 < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    /// An error at `span`; if the parser has reached a bad character, that is the error.
    fn error<T>(&self, span: Span, msg: impl Into<String>) -> PResult<T> {
        if self.pos + 1 == self.toks.len() {
            self.finish()?;
        }
        Err(Diagnostic::new(self.file, self.src, span, msg))
    }

    fn is_punct(&self, p: &str) -> bool {
        matches!(self.peek(), Tok::Punct(q) if *q == p)
    }

    fn is_word(&self, w: &str) -> bool {
        matches!(self.peek(), Tok::Ident(s) if s == w)
    }

    fn eat_punct(&mut self, p: &str) -> bool {
        let yes = self.is_punct(p);
        if yes {
            self.bump();
        }
        yes
    }

    fn eat_word(&mut self, w: &str) -> bool {
        let yes = self.is_word(w);
        if yes {
            self.bump();
        }
        yes
    }

    fn expect_tok(&mut self, t: &Tok, what: &str) -> PResult<Span> {
        if self.peek() == t {
            return Ok(self.bump().span);
        }
        self.error(self.span(), format!("expected {what}, found {}", self.peek().describe()))
    }

    fn expect_punct(&mut self, p: &'static str) -> PResult<Span> {
        self.expect_tok(&Tok::Punct(p), &format!("`{p}`"))
    }

    fn expect_word(&mut self, w: &str) -> PResult<Span> {
        if self.is_word(w) {
            return Ok(self.bump().span);
        }
        self.error(self.span(), format!("expected `{w}`, found {}", self.peek().describe()))
    }

    /// An identifier that names something new (a kernel, parameter or binding).
    fn binder(&mut self, what: &str) -> PResult<(String, Span)> {
        match self.peek().clone() {
            Tok::Ident(name) if !is_identifier(&name) => self.error(
                self.span(),
                format!("`{name}` is a reserved word and cannot name a {what}"),
            ),
            Tok::Ident(name) => Ok((name, self.bump().span)),
            t => self.error(self.span(), format!("expected a {what} name, found {}", t.describe())),
        }
    }

    fn enter(&mut self, span: Span) -> PResult<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.error(span, format!("nesting too deep (the limit is {MAX_DEPTH} levels)"));
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    // ---- scopes --------------------------------------------------------------------------

    fn lookup(&self, name: &str) -> Option<&Var> {
        self.scopes.iter().rev().find_map(|s| s.get(name))
    }

    fn bind(&mut self, var: &Var) {
        if let Some(s) = self.scopes.last_mut() {
            s.insert(var.name().to_string(), var.clone());
        }
    }

    fn resolve(&self, name: &str, span: Span) -> PResult<Var> {
        match self.lookup(name) {
            Some(v) => Ok(v.clone()),
            None => self.error(span, format!("unknown variable `{name}`")),
        }
    }

    // ---- types ---------------------------------------------------------------------------

    fn scalar_type(&mut self) -> PResult<Scalar> {
        match self.peek().clone() {
            Tok::Ident(name) => match Scalar::from_name(&name) {
                Some(s) => {
                    self.bump();
                    Ok(s)
                }
                None => self.error(self.span(), format!("unknown type `{name}`")),
            },
            t => self.error(self.span(), format!("expected a type, found {}", t.describe())),
        }
    }

    fn ty(&mut self) -> PResult<Type> {
        if let Tok::Ident(name) = self.peek() {
            if let Some(t) = Type::vector_from_name(name) {
                self.bump();
                return Ok(t);
            }
        }
        if self.is_word("frag") && self.peek_at(1) == &Tok::Punct("<") {
            return self.frag_type();
        }
        if !self.eat_word("ptr") {
            return Ok(Type::Scalar(self.scalar_type()?));
        }
        self.expect_punct("<")?;
        let space = match self.peek().clone() {
            Tok::Ident(name) => match AddrSpace::from_name(&name) {
                Some(s) => s,
                None => {
                    return self.error(
                        self.span(),
                        format!("unknown address space `{name}` (expected global, local, private, constant or generic)"),
                    )
                }
            },
            t => return self.error(self.span(), format!("expected an address space, found {}", t.describe())),
        };
        self.bump();
        self.expect_punct(",")?;
        let elem = self.scalar_type()?;
        self.expect_punct(">")?;
        Ok(Type::Ptr(space, elem))
    }

    /// `frag<role, shape, elem>`.
    fn frag_type(&mut self) -> PResult<Type> {
        self.bump();
        self.expect_punct("<")?;
        let role = self.word_of("a fragment role (a, b or acc)", FragRole::from_name)?;
        self.expect_punct(",")?;
        let shape =
            self.word_of("a matrix shape (m16n8k16, m16n16k16 or m64nNk16)", MatShape::from_name)?;
        self.expect_punct(",")?;
        let elem = self.scalar_type()?;
        self.expect_punct(">")?;
        Ok(Type::Frag(Frag::new(role, shape, elem)))
    }

    /// An identifier that `parse` accepts, as what it parses to; `what` names what is expected.
    fn word_of<T>(&mut self, what: &str, parse: impl Fn(&str) -> Option<T>) -> PResult<T> {
        if let Tok::Ident(w) = self.peek() {
            if let Some(v) = parse(w) {
                self.bump();
                return Ok(v);
            }
        }
        self.error(self.span(), format!("expected {what}, found {}", self.peek().describe()))
    }

    // ---- kernels -------------------------------------------------------------------------

    fn kernel(&mut self) -> PResult<Kernel> {
        self.expect_word("kernel")?;
        let (name, name_span) = self.binder("kernel")?;
        self.spans.add_kernel(&name, name_span);
        self.expect_punct("(")?;
        let mut params = Vec::new();
        while !self.is_punct(")") {
            let (pname, _) = self.binder("parameter")?;
            self.expect_punct(":")?;
            let ty = self.ty()?;
            params.push(Var::new(pname, ty));
            if !self.eat_punct(",") {
                break;
            }
        }
        self.expect_punct(")")?;
        let attrs = self.attrs()?;
        self.scopes.push(params.iter().map(|p| (p.name().to_string(), p.clone())).collect());
        let body = self.block()?;
        self.scopes.pop();
        Ok(Kernel::with_attrs(name, params, attrs, body))
    }

    fn attrs(&mut self) -> PResult<Attrs> {
        let mut attrs = Attrs::default();
        while self.is_punct("#") {
            let start = self.bump().span;
            let name = match self.peek().clone() {
                Tok::Ident(n) => n,
                t => {
                    return self.error(
                        self.span(),
                        format!("expected an attribute name, found {}", t.describe()),
                    )
                }
            };
            let name_span = self.bump().span;
            match name.as_str() {
                "fast_math" => attrs.fast_math = true,
                "reqd_work_group_size" => {
                    self.expect_punct("(")?;
                    let mut size = [1u32; 3];
                    let mut n = 0;
                    loop {
                        if n == 3 {
                            return self.error(self.span(), "`#reqd_work_group_size` takes at most 3 sizes");
                        }
                        size[n] = self.u32_literal("a work-group size")?;
                        n += 1;
                        if !self.eat_punct(",") {
                            break;
                        }
                    }
                    self.expect_punct(")")?;
                    attrs.reqd_work_group_size = Some(size);
                }
                "nd_range" => attrs.nd_range = Some(self.nd_range_attr()?),
                "fused" => attrs.fused = Some(self.fused_attr()?),
                _ => {
                    return self.error(
                        Span::new(start.start, name_span.end),
                        format!("unknown attribute `#{name}` (expected `#reqd_work_group_size(x, y, z)`, `#fast_math`, `#nd_range(...)` or `#fused(...)`)"),
                    )
                }
            }
        }
        Ok(attrs)
    }

    fn u32_literal(&mut self, what: &str) -> PResult<u32> {
        let span = self.span();
        if let Tok::Int { text, radix, suffix: None | Some(Scalar::U32) } = self.peek().clone() {
            if let Ok(v) = u32::from_str_radix(&text, radix) {
                self.bump();
                return Ok(v);
            }
            return self.error(span, format!("{what} must fit in u32"));
        }
        self.error(
            span,
            format!("expected {what} (an integer literal), found {}", self.peek().describe()),
        )
    }

    // ---- statements ----------------------------------------------------------------------

    fn block(&mut self) -> PResult<Stmt> {
        let start = self.expect_punct("{")?;
        self.enter(start)?;
        self.scopes.push(HashMap::new());
        let mut stmts = Vec::new();
        while !self.is_punct("}") {
            if self.peek() == &Tok::Eof {
                return self.error(start, "unexpected end of input: this `{` is never closed");
            }
            stmts.push(self.stmt()?);
        }
        self.bump();
        self.scopes.pop();
        self.leave();
        Ok(self.record_stmt(StmtNode::Block(stmts), start.start))
    }

    fn record_stmt(&mut self, node: StmtNode, start: usize) -> Stmt {
        let s = Stmt::new(node);
        if self.record {
            self.spans.add_stmt(&s, Span::new(start, self.prev_end()));
        }
        s
    }

    fn stmt(&mut self) -> PResult<Stmt> {
        let start = self.span();
        let word = match self.peek() {
            Tok::Ident(w) => w.clone(),
            Tok::Punct("{") => return self.block(),
            t => return self.error(start, format!("expected a statement, found {}", t.describe())),
        };
        match word.as_str() {
            "let" => self.let_stmt(),
            "var" => {
                self.bump();
                let (name, _) = self.binder("variable")?;
                let ann = if self.eat_punct(":") { Some(self.ty()?) } else { None };
                self.expect_punct("=")?;
                let ast = self.expr()?;
                self.expect_punct(";")?;
                let init = self.elab(&ast, ann.and_then(Type::scalar))?;
                let var = Var::new(name, ann.unwrap_or(init.ty()));
                let s = self.record_stmt(StmtNode::Decl { var: var.clone(), init }, start.start);
                self.bind(&var);
                Ok(s)
            }
            "local" | "private" => {
                self.bump();
                let space = if word == "local" { AddrSpace::Local } else { AddrSpace::Private };
                let (name, _) = self.binder("array")?;
                self.expect_punct(":")?;
                let elem = self.scalar_type()?;
                self.expect_punct("[")?;
                let count = self.u32_literal("an array length")?;
                self.expect_punct("]")?;
                self.expect_punct(";")?;
                let var = Var::new(name, Type::Ptr(space, elem));
                let s = self.record_stmt(StmtNode::Alloc { var: var.clone(), count }, start.start);
                self.bind(&var);
                Ok(s)
            }
            "if" => self.if_stmt(),
            "for" => self.for_stmt(),
            "while" => {
                self.bump();
                let cond = self.expr()?;
                let cond = self.elab(&cond, Some(Scalar::Bool))?;
                let body = self.block()?;
                Ok(self.record_stmt(StmtNode::While { cond, body }, start.start))
            }
            "else" => self.error(start, "`else` without a preceding `if`"),
            _ if KEYWORDS.contains(&word.as_str()) => {
                self.error(start, format!("expected a statement, found keyword `{word}`"))
            }
            _ => match self.peek_at(1) {
                Tok::Punct("=") => {
                    self.bump();
                    self.bump();
                    let var = self.resolve(&word, start)?;
                    let ast = self.expr()?;
                    self.expect_punct(";")?;
                    let value = self.elab(&ast, var.ty().scalar())?;
                    Ok(self.record_stmt(StmtNode::Assign { var, value }, start.start))
                }
                Tok::Punct("[") => {
                    self.bump();
                    self.bump();
                    let buf = self.resolve(&word, start)?;
                    let index = self.expr()?;
                    self.expect_punct("]")?;
                    self.expect_punct("=")?;
                    let value = self.expr()?;
                    self.expect_punct(";")?;
                    let index = self.elab(&index, None)?;
                    let value = self.elab(&value, buf.ty().elem())?;
                    Ok(self.record_stmt(StmtNode::Store { buf, index, value }, start.start))
                }
                Tok::Punct("(") => {
                    let node = self.call_stmt(None)?;
                    self.expect_punct(";")?;
                    Ok(self.record_stmt(node, start.start))
                }
                t => self.error(
                    self.toks[self.pos + 1].span,
                    format!(
                        "expected `=`, `[` or `(` after `{word}` to make a statement, found {}",
                        t.describe()
                    ),
                ),
            },
        }
    }

    fn let_stmt(&mut self) -> PResult<Stmt> {
        let start = self.bump().span;
        let (name, _) = self.binder("variable")?;
        let ann = if self.eat_punct(":") { Some(self.ty()?) } else { None };
        self.expect_punct("=")?;
        let is_atomic_call = matches!(self.peek(), Tok::Ident(w) if atomic_op(w).is_some() || MatrixOp::is_name(w))
            && self.peek_at(1) == &Tok::Punct("(");
        let node = if is_atomic_call {
            let node = self.call_stmt(Some((name, ann)))?;
            self.expect_punct(";")?;
            node
        } else {
            let ast = self.expr()?;
            self.expect_punct(";")?;
            let value = self.elab(&ast, ann.and_then(Type::scalar))?;
            StmtNode::Let { var: Var::new(name, ann.unwrap_or(value.ty())), value }
        };
        let bound = match &node {
            StmtNode::Let { var, .. } => Some(var.clone()),
            StmtNode::Call { result, .. } => result.clone(),
            _ => None,
        };
        let s = self.record_stmt(node, start.start);
        if let Some(v) = bound {
            self.bind(&v);
        }
        Ok(s)
    }

    /// `barrier(..)`, `fence(..)` or an atomic; `result` is the `let` that binds an atomic's
    /// old value. Stops before the `;`.
    fn call_stmt(&mut self, result: Option<(String, Option<Type>)>) -> PResult<StmtNode> {
        let name_tok = self.bump();
        let Tok::Ident(name) = name_tok.tok else {
            return self.error(name_tok.span, "expected a call");
        };
        self.expect_punct("(")?;
        if MatrixOp::is_name(&name) {
            return self.matrix_call(&name, name_tok.span, result);
        }
        if name == "vstore" {
            if result.is_some() {
                return self.error(name_tok.span, "`vstore` yields no value to bind");
            }
            let args = self.call_args()?;
            let [buf_ast, index, value] = args.as_slice() else {
                return self.error(
                    name_tok.span,
                    format!(
                        "`vstore` takes 3 operands (pointer, index, vector), found {}",
                        args.len()
                    ),
                );
            };
            let AstKind::Name(buf_name) = &buf_ast.kind else {
                return self.error(
                    buf_ast.span,
                    "the first operand of `vstore` must be a pointer variable",
                );
            };
            let buf = self.resolve(buf_name, buf_ast.span)?;
            let index = self.elab(index, None)?;
            let value = self.elab(value, None)?;
            return Ok(StmtNode::VecStore { buf, index, value });
        }
        if name == "barrier" || name == "fence" {
            let mut fence = MemFence { local: false, global: false };
            while !self.is_punct(")") {
                if self.eat_word("local") {
                    fence.local = true;
                } else if self.eat_word("global") {
                    fence.global = true;
                } else {
                    return self.error(
                        self.span(),
                        format!(
                            "expected `local` or `global` in `{name}(...)`, found {}",
                            self.peek().describe()
                        ),
                    );
                }
                if !self.eat_punct(",") && !self.eat_punct("|") {
                    break;
                }
            }
            self.expect_punct(")")?;
            if result.is_some() {
                return self.error(name_tok.span, format!("`{name}` yields no value to bind"));
            }
            let func = if name == "barrier" { Func::barrier(fence) } else { Func::fence(fence) };
            return Ok(StmtNode::Call { result: None, func, args: Vec::new() });
        }
        let Some(op) = atomic_op(&name) else {
            let msg = if Intrinsic::from_name(&name).is_some()
                || Builtin::from_name(&name).is_some()
                || name == "select"
            {
                format!("the value of `{name}(...)` is unused; bind it with `let`")
            } else {
                format!("unknown function `{name}`")
            };
            return self.error(name_tok.span, msg);
        };
        let args = self.call_args()?;
        let (buf_ast, rest) = match args.split_first() {
            Some((b, rest)) if matches!(b.kind, AstKind::Name(_)) => (b, rest),
            _ => {
                return self.error(
                    name_tok.span,
                    format!("the first operand of `{name}` must be a pointer variable"),
                )
            }
        };
        let AstKind::Name(buf_name) = &buf_ast.kind else {
            return self.error(buf_ast.span, "expected a pointer");
        };
        let buf = self.resolve(buf_name, buf_ast.span)?;
        let mut exprs = vec![self.record_expr(Expr::var(&buf), buf_ast.span)];
        for (i, a) in rest.iter().enumerate() {
            let ctx = if i == 0 { None } else { buf.ty().elem() };
            exprs.push(self.elab(a, ctx)?);
        }
        let result = match result {
            None => None,
            Some((rname, ann)) => {
                let ty = match (ann, buf.ty().elem()) {
                    (Some(t), _) => t,
                    (None, Some(e)) => Type::Scalar(e),
                    (None, None) => {
                        return self.error(buf_ast.span, format!("`{buf_name}` is not a pointer"))
                    }
                };
                Some(Var::new(rname, ty))
            }
        };
        Ok(StmtNode::Call { result, func: Func::atomic(op), args: exprs })
    }

    /// A matrix call after its `(`: operands, the layout word of `frag_load`/`frag_store`, and
    /// the literal count of `copy_async`/`async_wait`. Stops before the `;`.
    fn matrix_call(
        &mut self,
        name: &str,
        span: Span,
        result: Option<(String, Option<Type>)>,
    ) -> PResult<StmtNode> {
        let mut args = self.call_args()?;
        let want = match name {
            "frag_load" => 4,
            "frag_store" => 5,
            "frag_fill" => 1,
            "mma" => 3,
            "copy_async" => 5,
            "async_commit" | "wgmma_fence" | "wgmma_commit" => 0,
            "wgmma" => 7,
            "frag_elem" => 2,
            "tma_load" => 13,
            "mbar_init" | "mbar_expect_tx" | "mbar_wait" => 3,
            "mbar_arrive" => 2,
            _ => 1,
        };
        if args.len() != want {
            return self.error(
                span,
                format!("`{name}` takes {want} operand{}, found {}", plural(want), args.len()),
            );
        }
        // An operand that is one word of a fixed set (`from_name`), else an error saying
        // which words were expected.
        fn named<T>(
            p: &Parser,
            a: &Ast,
            from_name: impl Fn(&str) -> Option<T>,
            expected: &str,
            name: &str,
        ) -> PResult<T> {
            match &a.kind {
                AstKind::Name(n) => from_name(n),
                _ => None,
            }
            .map_or_else(|| p.error(a.span, format!("expected {expected} in `{name}`")), Ok)
        }
        let word =
            |p: &Self, a: &Ast| named(p, a, Layout::from_name, "the layout `row` or `col`", name);
        let swizzle = |p: &Self, a: &Ast| {
            let expected = "a swizzle (`sw128`, `sw64`, `sw32` or `noswizzle`)";
            named(p, a, Swizzle::from_name, expected, name)
        };
        let wg_layout = |p: &Self, a: &Ast| {
            let expected =
                "a factor layout (`sw128`, `sw64`, `sw32`, or one of them with `_mn<bytes>` for \
                 MN-major)";
            named(p, a, WgLayout::from_name, expected, name)
        };
        let number = |p: &Self, a: &Ast, max: u32| -> PResult<u32> {
            match &a.kind {
                AstKind::Lit {
                    tok: Tok::Int { text, radix, suffix: None }, neg: false, ..
                } => match u32::from_str_radix(text, *radix) {
                    Ok(v) if v <= max => Ok(v),
                    _ => p.error(a.span, format!("the count of `{name}` must be at most {max}")),
                },
                _ => p.error(
                    a.span,
                    format!("expected a count (an unsuffixed integer literal) in `{name}`"),
                ),
            }
        };
        let count = |p: &Self, a: &Ast| -> PResult<u8> { number(p, a, 255).map(|v| v as u8) };
        let op = match name {
            "frag_load" => MatrixOp::Load(word(self, &args.remove(3))?),
            "frag_store" => MatrixOp::Store(word(self, &args.remove(3))?),
            "frag_fill" => MatrixOp::Fill,
            "mma" => MatrixOp::Mma,
            "copy_async" => MatrixOp::CopyAsync(count(self, &args.remove(4))?),
            "async_commit" => MatrixOp::Commit,
            "wgmma" => {
                let b = wg_layout(self, &args.remove(6))?;
                let a = wg_layout(self, &args.remove(5))?;
                MatrixOp::Wgmma(a, b)
            }
            "wgmma_fence" => MatrixOp::WgFence,
            "wgmma_commit" => MatrixOp::WgCommit,
            "wgmma_wait" => MatrixOp::WgWait(count(self, &args.remove(0))?),
            "frag_elem" => MatrixOp::FragElem(count(self, &args.remove(1))?),
            "tma_load" => {
                let sw = swizzle(self, &args.remove(12))?;
                let h = number(self, &args.remove(11), 256)? as u16;
                let w = number(self, &args.remove(10), 256)? as u16;
                MatrixOp::TmaLoad(TmaBox { w, h, swizzle: sw })
            }
            "mbar_init" => MatrixOp::MbarInit,
            "mbar_arrive" => MatrixOp::MbarArrive,
            "mbar_expect_tx" => MatrixOp::MbarExpectTx,
            "mbar_wait" => MatrixOp::MbarWait,
            "setmaxnreg_inc" | "setmaxnreg_dec" => MatrixOp::SetMaxNReg {
                inc: name == "setmaxnreg_inc",
                count: number(self, &args.remove(0), u16::MAX as u32)? as u16,
            },
            _ => MatrixOp::Wait(count(self, &args.remove(0))?),
        };
        let ann = result.as_ref().and_then(|(_, t)| *t);
        let mut exprs = Vec::with_capacity(args.len());
        for (i, a) in args.iter().enumerate() {
            // Indices and strides are u32 unless written otherwise; a fill's literal is of the
            // fragment's element type.
            let ctx = match op {
                MatrixOp::Fill => ann.and_then(Type::frag).map(|f| f.elem),
                MatrixOp::Mma => None,
                MatrixOp::Load(_) | MatrixOp::Store(_) if i == 0 || i == 3 => None,
                MatrixOp::CopyAsync(_) if i % 2 == 0 => None,
                MatrixOp::Wgmma(..) if i % 2 == 1 || i == 0 => None,
                MatrixOp::FragElem(_) => None,
                MatrixOp::TmaLoad(_) if i == 0 || i == 2 || i == 8 => None,
                MatrixOp::MbarInit
                | MatrixOp::MbarArrive
                | MatrixOp::MbarExpectTx
                | MatrixOp::MbarWait
                    if i == 0 =>
                {
                    None
                }
                _ => Some(Scalar::U32),
            };
            exprs.push(self.elab(a, ctx)?);
        }
        let result = match result {
            None => None,
            Some(_) if !op.has_result() => {
                return self.error(span, format!("`{name}` yields no value to bind"));
            }
            Some((rname, ann)) => {
                let ty = match (ann, op) {
                    (Some(t), _) => t,
                    (None, MatrixOp::Mma) => exprs[2].ty(),
                    (None, MatrixOp::FragElem(_)) => Type::F32,
                    (None, _) => {
                        return self.error(
                            span,
                            format!("the fragment `{name}` makes needs a type: `let {rname}: frag<..> = {name}(..)`"),
                        )
                    }
                };
                Some(Var::new(rname, ty))
            }
        };
        Ok(StmtNode::Call { result, func: Func::matrix(op), args: exprs })
    }

    fn if_stmt(&mut self) -> PResult<Stmt> {
        let start = self.bump().span;
        self.enter(start)?;
        let cond = self.expr()?;
        let cond = self.elab(&cond, Some(Scalar::Bool))?;
        let then = self.block()?;
        let otherwise = if self.eat_word("else") {
            if self.is_word("if") {
                Some(self.if_stmt()?)
            } else {
                Some(self.block()?)
            }
        } else {
            None
        };
        self.leave();
        Ok(self.record_stmt(StmtNode::If { cond, then, otherwise }, start.start))
    }

    fn for_stmt(&mut self) -> PResult<Stmt> {
        let start = self.bump().span;
        let (name, _) = self.binder("loop counter")?;
        let ann = if self.eat_punct(":") { Some(self.ty()?) } else { None };
        self.expect_word("in")?;
        let lo = self.expr()?;
        self.expect_punct("..")?;
        let hi = self.expr()?;
        let step = if self.eat_word("step") { Some(self.expr()?) } else { None };
        let ty = match ann {
            Some(t) => t.scalar(),
            None => self.synth(&lo).or(self.synth(&hi)).or(Some(Scalar::I32)),
        };
        let var = Var::new(name, ann.unwrap_or(Type::Scalar(ty.unwrap_or(Scalar::I32))));
        let lo = self.elab(&lo, ty)?;
        let hi = self.elab(&hi, ty)?;
        let step = match step {
            Some(s) => self.elab(&s, ty)?,
            None => match ty {
                Some(t) if t.is_int() => Expr::int(t, 1),
                _ => return self.error(start, "a `for` counter must have an integer type"),
            },
        };
        self.scopes.push(HashMap::from([(var.name().to_string(), var.clone())]));
        let body = self.block();
        self.scopes.pop();
        let body = body?;
        Ok(self.record_stmt(StmtNode::For { var, lo, hi, step, body }, start.start))
    }
}

/// The float of type `ty` with exactly these bits; None if `bits` is wider than the type.
fn float_from_bits(ty: Scalar, bits: u64) -> Option<f64> {
    (ty.bits() >= 64 || bits >> ty.bits() == 0).then(|| crate::expr::float_from_bits(ty, bits))
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn atomic_op(name: &str) -> Option<AtomicOp> {
    AtomicOp::ALL.into_iter().find(|op| op.name() == name)
}

#[cfg(test)]
mod tests;
