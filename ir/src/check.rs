//! Parse and verify a source text, with every error located in it.
//!
//! [`check_source`] is what `kiln check FILE` runs: a parse error is one [`Diagnostic`]; a
//! module that parses is verified ([`crate::verify`]), and each [`VerifyError`] becomes a
//! diagnostic pointing at the offending expression or statement (through the [`Spans`] the
//! parser recorded), or at the kernel's name for errors about its header. Diagnostics come
//! sorted by position, so the first one is the earliest in the file.
//!
//! ```
//! use kiln_ir::check::check_module;
//! use kiln_ir::{Kernel, Module, Stmt, Type, Var};
//!
//! let n = Var::new("n", Type::U32);
//! let k = Kernel::new("k", vec![n.clone()], Stmt::block([Stmt::assign(&n, 0u32)]));
//! let errs = check_module("<api>", &Module::new(vec![k])).unwrap_err();
//! assert!(errs[0].message.starts_with("in kernel `k`: cannot assign to `n`"));
//! ```

use crate::diag::{Diagnostic, Span, Spans};
use crate::kernel::{Kernel, Module};
use crate::parse::parse_file;
use crate::stmt::{Stmt, StmtNode};
use crate::verify::{verify_module, Node, Verified, VerifyError};

/// Parses `src` (named `file` in messages) and verifies the result, once: the [`Verified`]
/// module needs no further check. Every error is a
/// [`Diagnostic`] pointing into the text, and the messages read ``in kernel `k`: ...``.
pub fn check_source(file: &str, src: &str) -> Result<Verified, Vec<Diagnostic>> {
    let mut parsed = parse_file(file, src).map_err(|d| vec![d])?;
    // A flat chain in the source can be any depth: split it into lets before anything walks
    // it (split-off sub-expressions keep their spans).
    parsed.module = crate::depth::bound_module(&parsed.module);
    match verify_module(&parsed.module) {
        Ok(()) => Ok(Verified(parsed.module)),
        Err(errs) => {
            let mut diags: Vec<Diagnostic> = errs
                .iter()
                .map(|e| match locate(&parsed.module, &parsed.spans, e) {
                    Some(span) => Diagnostic::new(file, src, span, e.to_string()),
                    None => Diagnostic::unlocated(file, e.to_string()),
                })
                .collect();
            // Stable: errors at the same place keep the verifier's order; unlocated ones last.
            diags.sort_by_key(|d| (d.line == 0, d.line, d.col));
            Err(diags)
        }
    }
}

/// Verifies a module that was not parsed (built through the API or by a pass); the
/// diagnostics name `file` but have no position.
pub fn check_module(file: &str, m: &Module) -> Result<(), Vec<Diagnostic>> {
    verify_module(m)
        .map_err(|errs| errs.iter().map(|e| Diagnostic::unlocated(file, e.to_string())).collect())
}

/// The span of an error's node; failing that (a node built after parsing), of its innermost
/// ancestor that has one; failing that, of its kernel's name.
fn locate(m: &Module, spans: &Spans, e: &VerifyError) -> Option<Span> {
    if let Some(node) = &e.node {
        if let Some(span) = span_of(spans, node) {
            return Some(span);
        }
        for k in m.kernels.iter().filter(|k| k.name() == e.kernel) {
            if let Some(path) = path_to(k, node) {
                if let Some(span) = path.iter().rev().find_map(|n| span_of(spans, n)) {
                    return Some(span);
                }
            }
        }
    }
    spans.kernel(&e.kernel)
}

fn span_of(spans: &Spans, n: &Node) -> Option<Span> {
    match n {
        Node::Expr(e) => spans.expr(e),
        Node::Stmt(s) => spans.stmt(s),
    }
}

fn same(a: &Node, b: &Node) -> bool {
    match (a, b) {
        (Node::Expr(x), Node::Expr(y)) => x.ptr_eq(y),
        (Node::Stmt(x), Node::Stmt(y)) => x.ptr_eq(y),
        _ => false,
    }
}

/// The nodes from `k`'s body down to `target` (identified by handle), outermost first.
/// Iterative, so deep trees cannot overflow the stack.
fn path_to(k: &Kernel, target: &Node) -> Option<Vec<Node>> {
    let mut todo: Vec<(Node, usize)> = vec![(Node::Stmt(k.body().clone()), 0)];
    let mut path: Vec<Node> = Vec::new();
    while let Some((n, depth)) = todo.pop() {
        path.truncate(depth);
        let found = same(&n, target);
        let kids: Vec<Node> = match &n {
            Node::Expr(e) => e.children().into_iter().map(|c| Node::Expr(c.clone())).collect(),
            Node::Stmt(s) => stmt_children(s),
        };
        path.push(n);
        if found {
            return Some(path);
        }
        todo.extend(kids.into_iter().rev().map(|c| (c, depth + 1)));
    }
    None
}

fn stmt_children(s: &Stmt) -> Vec<Node> {
    let e = |x: &crate::expr::Expr| Node::Expr(x.clone());
    let st = |x: &Stmt| Node::Stmt(x.clone());
    match s.node() {
        StmtNode::Let { value, .. } | StmtNode::Assign { value, .. } => vec![e(value)],
        StmtNode::Decl { init, .. } => vec![e(init)],
        StmtNode::Store { index, value, .. } | StmtNode::VecStore { index, value, .. } => {
            vec![e(index), e(value)]
        }
        StmtNode::Alloc { .. } => vec![],
        StmtNode::If { cond, then, otherwise } => {
            let mut v = vec![e(cond), st(then)];
            v.extend(otherwise.iter().map(st));
            v
        }
        StmtNode::For { lo, hi, step, body, .. } => vec![e(lo), e(hi), e(step), st(body)],
        StmtNode::While { cond, body } => vec![e(cond), st(body)],
        StmtNode::Block(stmts) => stmts.iter().map(st).collect(),
        StmtNode::Call { args, .. } => args.iter().map(e).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::Var;
    use crate::types::Type;

    #[test]
    fn unparsed_nodes_fall_back_to_their_ancestors() {
        let x = Var::new("x", Type::F32);
        let n = Var::new("n", Type::U32);
        let bad = &x + n.expr();
        let sum = bad.clone() * 2.0;
        let s = Stmt::let_(&Var::new("y", Type::F32), sum.clone());
        let k = Kernel::new("k", vec![x, n], Stmt::block([s.clone()]));
        let m = Module::new(vec![k]);
        let src = "kernel k(x: f32, n: u32) {\n  let y = (x + n) * 2.0;\n}\n";
        let mut spans = Spans::default();
        spans.add_kernel("k", Span::new(7, 8));
        spans.add_stmt(&s, Span::new(29, 51));
        let errs = verify_module(&m).unwrap_err();
        assert_eq!(errs.len(), 1);
        // `bad` has no span of its own: its statement's is used.
        assert_eq!(locate(&m, &spans, &errs[0]), Some(Span::new(29, 51)));
        spans.add_expr(&sum, Span::new(37, 50));
        assert_eq!(locate(&m, &spans, &errs[0]), Some(Span::new(37, 50)));
        spans.add_expr(&bad, Span::new(38, 43));
        assert_eq!(locate(&m, &spans, &errs[0]), Some(Span::new(38, 43)));
        let d = Diagnostic::new("a.kir", src, Span::new(38, 43), errs[0].to_string());
        assert_eq!((d.line, d.col), (2, 12));
    }

    #[test]
    fn header_errors_point_at_the_kernel_name() {
        let x = Var::new("x", Type::F32);
        let k = Kernel::new("k", vec![x.clone(), x], Stmt::block([]));
        let m = Module::new(vec![k]);
        let mut spans = Spans::default();
        spans.add_kernel("k", Span::new(7, 8));
        let errs = verify_module(&m).unwrap_err();
        assert_eq!(locate(&m, &spans, &errs[0]), Some(Span::new(7, 8)));
        let diags = check_module("f.kir", &m).unwrap_err();
        assert_eq!(diags[0].message, "in kernel `k`: parameter `x` is declared twice");
        assert!(diags[0].to_string().contains("f.kir"));
    }
}
