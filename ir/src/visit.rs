//! The visitor and mutator every pass builds on.
//!
//! Both traits have a default method per object kind that walks every child; override the
//! methods for the nodes you care about and call the `walk_*` function to keep descending.
//!
//! A [`Visitor`] that counts loops:
//!
//! ```
//! use kiln_ir::{parse_module, Stmt, StmtNode, Visitor, walk_stmt};
//!
//! struct CountLoops(usize);
//! impl Visitor for CountLoops {
//!     fn visit_stmt(&mut self, s: &Stmt) {
//!         if matches!(s.node(), StmtNode::For { .. } | StmtNode::While { .. }) {
//!             self.0 += 1;
//!         }
//!         walk_stmt(self, s);
//!     }
//! }
//!
//! let m = parse_module("kernel k(x: ptr<global, f32>) {
//!     for i: u32 in 0 .. 4 { for j: u32 in 0 .. 4 { x[i * 4u32 + j] = 0.0; } }
//! }").unwrap();
//! let mut v = CountLoops(0);
//! v.visit_stmt(m.kernels[0].body());
//! assert_eq!(v.0, 2);
//! ```
//!
//! A [`Mutator`] that renames a variable everywhere it is bound or used; subtrees it does not
//! change come back pointer-equal, so an unchanged kernel costs no allocation:
//!
//! ```
//! use kiln_ir::{parse_module, Mutator, Var};
//!
//! struct Rename;
//! impl Mutator for Rename {
//!     fn mutate_var(&mut self, v: &Var) -> Var {
//!         if v.name() == "i" { Var::new("gid", v.ty()) } else { v.clone() }
//!     }
//! }
//!
//! let m = parse_module("kernel k(x: ptr<global, u32>) { let i: u32 = global_id(0); x[i] = i; }")
//!     .unwrap();
//! let k = Rename.mutate_kernel(&m.kernels[0]);
//! assert!(k.to_string().contains("x[gid] = gid;"));
//!
//! struct Nothing;
//! impl Mutator for Nothing {}
//! let same = Nothing.mutate_stmt(m.kernels[0].body());
//! assert!(same.ptr_eq(m.kernels[0].body()));
//! ```

use smallvec::SmallVec;

use crate::expr::{Expr, ExprNode, Var};
use crate::kernel::Kernel;
use crate::stmt::{Stmt, StmtNode};

/// Read-only traversal. The defaults visit every child.
pub trait Visitor {
    /// Visits an expression; the default visits its children.
    fn visit_expr(&mut self, e: &Expr) {
        walk_expr(self, e)
    }

    /// Visits a statement; the default visits its expressions and sub-statements.
    fn visit_stmt(&mut self, s: &Stmt) {
        walk_stmt(self, s)
    }

    /// Visits a kernel; the default visits its body.
    fn visit_kernel(&mut self, k: &Kernel) {
        self.visit_stmt(k.body())
    }
}

/// Visits each direct sub-expression of `e`.
pub fn walk_expr<V: Visitor + ?Sized>(v: &mut V, e: &Expr) {
    // Matched here rather than through `Expr::children`: every pass's walks come through
    // this, and listing the operands first cost as much as visiting them.
    match e.node() {
        ExprNode::Var(_) | ExprNode::Imm(_) | ExprNode::Builtin { .. } => {}
        ExprNode::Unary { a, .. } | ExprNode::Cast { a, .. } | ExprNode::Extract { a, .. } => {
            v.visit_expr(a)
        }
        ExprNode::Binary { a, b, .. } | ExprNode::Insert { a, b, .. } => {
            v.visit_expr(a);
            v.visit_expr(b);
        }
        ExprNode::Select { cond, a, b } => {
            v.visit_expr(cond);
            v.visit_expr(a);
            v.visit_expr(b);
        }
        ExprNode::Load { index, .. } | ExprNode::VecLoad { index, .. } => v.visit_expr(index),
        ExprNode::Intrinsic { args, .. } => args.iter().for_each(|a| v.visit_expr(a)),
        ExprNode::Vector { elems, .. } => elems.iter().for_each(|a| v.visit_expr(a)),
    }
}

/// Visits each expression and sub-statement directly inside `s`, in execution order.
pub fn walk_stmt<V: Visitor + ?Sized>(v: &mut V, s: &Stmt) {
    match s.node() {
        StmtNode::Let { value, .. } | StmtNode::Assign { value, .. } => v.visit_expr(value),
        StmtNode::Decl { init, .. } => v.visit_expr(init),
        StmtNode::Store { index, value, .. } | StmtNode::VecStore { index, value, .. } => {
            v.visit_expr(index);
            v.visit_expr(value);
        }
        StmtNode::Alloc { .. } => {}
        StmtNode::If { cond, then, otherwise } => {
            v.visit_expr(cond);
            v.visit_stmt(then);
            if let Some(o) = otherwise {
                v.visit_stmt(o);
            }
        }
        StmtNode::For { lo, hi, step, body, .. } => {
            v.visit_expr(lo);
            v.visit_expr(hi);
            v.visit_expr(step);
            v.visit_stmt(body);
        }
        StmtNode::While { cond, body } => {
            v.visit_expr(cond);
            v.visit_stmt(body);
        }
        StmtNode::Block(stmts) => stmts.iter().for_each(|s| v.visit_stmt(s)),
        StmtNode::Call { args, .. } => args.iter().for_each(|a| v.visit_expr(a)),
    }
}

/// Rebuilding traversal. The defaults rebuild a node only if a child changed, and otherwise
/// return the original handle (pointer-equal).
pub trait Mutator {
    /// Rewrites an expression; the default rewrites its children.
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        walk_mutate_expr(self, e)
    }

    /// Rewrites a statement; the default rewrites its expressions, variables and
    /// sub-statements.
    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        walk_mutate_stmt(self, s)
    }

    /// Rewrites a variable at every place it is bound or used (parameters, bindings, loop
    /// counters, references, load/store buffers, assignment targets). Default: unchanged.
    fn mutate_var(&mut self, v: &Var) -> Var {
        v.clone()
    }

    /// Rewrites a kernel; the default rewrites its parameters and body.
    fn mutate_kernel(&mut self, k: &Kernel) -> Kernel {
        walk_mutate_kernel(self, k)
    }
}

/// Rewrites `k`'s parameters and body, returning `k` itself if nothing changed.
pub fn walk_mutate_kernel<M: Mutator + ?Sized>(m: &mut M, k: &Kernel) -> Kernel {
    let params: Vec<Var> = k.params().iter().map(|p| m.mutate_var(p)).collect();
    let body = m.mutate_stmt(k.body());
    if params.as_slice() == k.params() && body.ptr_eq(k.body()) {
        return k.clone();
    }
    Kernel::with_attrs(k.name(), params, k.attrs().clone(), body)
}

/// Rewrites the children of `e`, returning `e` itself if none changed.
pub fn walk_mutate_expr<M: Mutator + ?Sized>(m: &mut M, e: &Expr) -> Expr {
    let node = match e.node() {
        ExprNode::Imm(_) | ExprNode::Builtin { .. } => return e.clone(),
        ExprNode::Var(v) => {
            let nv = m.mutate_var(v);
            if nv == *v {
                return e.clone();
            }
            ExprNode::Var(nv)
        }
        ExprNode::Unary { op, a } => {
            let na = m.mutate_expr(a);
            if na.ptr_eq(a) {
                return e.clone();
            }
            ExprNode::Unary { op: *op, a: na }
        }
        ExprNode::Binary { op, a, b } => {
            let (na, nb) = (m.mutate_expr(a), m.mutate_expr(b));
            if na.ptr_eq(a) && nb.ptr_eq(b) {
                return e.clone();
            }
            ExprNode::Binary { op: *op, a: na, b: nb }
        }
        ExprNode::Select { cond, a, b } => {
            let (nc, na, nb) = (m.mutate_expr(cond), m.mutate_expr(a), m.mutate_expr(b));
            if nc.ptr_eq(cond) && na.ptr_eq(a) && nb.ptr_eq(b) {
                return e.clone();
            }
            ExprNode::Select { cond: nc, a: na, b: nb }
        }
        ExprNode::Cast { to, a } => {
            let na = m.mutate_expr(a);
            if na.ptr_eq(a) {
                return e.clone();
            }
            ExprNode::Cast { to: *to, a: na }
        }
        ExprNode::Load { buf, index } => {
            let (nbuf, ni) = (m.mutate_var(buf), m.mutate_expr(index));
            if nbuf == *buf && ni.ptr_eq(index) {
                return e.clone();
            }
            ExprNode::Load { buf: nbuf, index: ni }
        }
        ExprNode::VecLoad { buf, index, lanes } => {
            let (nbuf, ni) = (m.mutate_var(buf), m.mutate_expr(index));
            if nbuf == *buf && ni.ptr_eq(index) {
                return e.clone();
            }
            ExprNode::VecLoad { buf: nbuf, index: ni, lanes: *lanes }
        }
        ExprNode::Extract { a, lane } => {
            let na = m.mutate_expr(a);
            if na.ptr_eq(a) {
                return e.clone();
            }
            ExprNode::Extract { a: na, lane: *lane }
        }
        ExprNode::Insert { a, lane, b } => {
            let (na, nb) = (m.mutate_expr(a), m.mutate_expr(b));
            if na.ptr_eq(a) && nb.ptr_eq(b) {
                return e.clone();
            }
            ExprNode::Insert { a: na, lane: *lane, b: nb }
        }
        ExprNode::Vector { ty, elems } => {
            let nelems: SmallVec<[Expr; 4]> = elems.iter().map(|a| m.mutate_expr(a)).collect();
            if nelems.iter().zip(elems).all(|(n, o)| n.ptr_eq(o)) {
                return e.clone();
            }
            ExprNode::Vector { ty: *ty, elems: nelems }
        }
        ExprNode::Intrinsic { op, args } => {
            let nargs: SmallVec<[Expr; 3]> = args.iter().map(|a| m.mutate_expr(a)).collect();
            if nargs.iter().zip(args).all(|(n, o)| n.ptr_eq(o)) {
                return e.clone();
            }
            ExprNode::Intrinsic { op: *op, args: nargs }
        }
    };
    // Same kind, new operands: the node still stands for its source.
    e.rebuild(node)
}

fn same_opt(new: &Option<Stmt>, old: &Option<Stmt>) -> bool {
    match (new, old) {
        (Some(n), Some(o)) => n.ptr_eq(o),
        (None, None) => true,
        _ => false,
    }
}

/// Rewrites the children of `s`, returning `s` itself if none changed.
pub fn walk_mutate_stmt<M: Mutator + ?Sized>(m: &mut M, s: &Stmt) -> Stmt {
    let node = match s.node() {
        StmtNode::Let { var, value } => {
            let (nv, nval) = (m.mutate_var(var), m.mutate_expr(value));
            if nv == *var && nval.ptr_eq(value) {
                return s.clone();
            }
            StmtNode::Let { var: nv, value: nval }
        }
        StmtNode::Decl { var, init } => {
            let (nv, ninit) = (m.mutate_var(var), m.mutate_expr(init));
            if nv == *var && ninit.ptr_eq(init) {
                return s.clone();
            }
            StmtNode::Decl { var: nv, init: ninit }
        }
        StmtNode::Assign { var, value } => {
            let (nv, nval) = (m.mutate_var(var), m.mutate_expr(value));
            if nv == *var && nval.ptr_eq(value) {
                return s.clone();
            }
            StmtNode::Assign { var: nv, value: nval }
        }
        StmtNode::Store { buf, index, value } => {
            let (nb, ni, nval) = (m.mutate_var(buf), m.mutate_expr(index), m.mutate_expr(value));
            if nb == *buf && ni.ptr_eq(index) && nval.ptr_eq(value) {
                return s.clone();
            }
            StmtNode::Store { buf: nb, index: ni, value: nval }
        }
        StmtNode::VecStore { buf, index, value } => {
            let (nb, ni, nval) = (m.mutate_var(buf), m.mutate_expr(index), m.mutate_expr(value));
            if nb == *buf && ni.ptr_eq(index) && nval.ptr_eq(value) {
                return s.clone();
            }
            StmtNode::VecStore { buf: nb, index: ni, value: nval }
        }
        StmtNode::Alloc { var, count } => {
            let nv = m.mutate_var(var);
            if nv == *var {
                return s.clone();
            }
            StmtNode::Alloc { var: nv, count: *count }
        }
        StmtNode::If { cond, then, otherwise } => {
            let nc = m.mutate_expr(cond);
            let nt = m.mutate_stmt(then);
            let no = otherwise.as_ref().map(|o| m.mutate_stmt(o));
            if nc.ptr_eq(cond) && nt.ptr_eq(then) && same_opt(&no, otherwise) {
                return s.clone();
            }
            StmtNode::If { cond: nc, then: nt, otherwise: no }
        }
        StmtNode::For { var, lo, hi, step, body } => {
            let nv = m.mutate_var(var);
            let (nlo, nhi, nstep) = (m.mutate_expr(lo), m.mutate_expr(hi), m.mutate_expr(step));
            let nbody = m.mutate_stmt(body);
            if nv == *var
                && nlo.ptr_eq(lo)
                && nhi.ptr_eq(hi)
                && nstep.ptr_eq(step)
                && nbody.ptr_eq(body)
            {
                return s.clone();
            }
            StmtNode::For { var: nv, lo: nlo, hi: nhi, step: nstep, body: nbody }
        }
        StmtNode::While { cond, body } => {
            let (nc, nbody) = (m.mutate_expr(cond), m.mutate_stmt(body));
            if nc.ptr_eq(cond) && nbody.ptr_eq(body) {
                return s.clone();
            }
            StmtNode::While { cond: nc, body: nbody }
        }
        StmtNode::Block(stmts) => match changed_stmts(m, stmts) {
            Some(v) => StmtNode::Block(v),
            None => return s.clone(),
        },
        StmtNode::Call { result, func, args } => {
            let nr = result.as_ref().map(|r| m.mutate_var(r));
            let nargs: Vec<Expr> = args.iter().map(|a| m.mutate_expr(a)).collect();
            if nr == *result && nargs.iter().zip(args).all(|(n, o)| n.ptr_eq(o)) {
                return s.clone();
            }
            StmtNode::Call { result: nr, func: func.clone(), args: nargs }
        }
    };
    Stmt::new(node)
}

/// `stmts` rewritten by `m`, or `None` if every one came back as itself: no vector is built
/// for an unchanged block (most blocks, in most passes).
fn changed_stmts<M: Mutator + ?Sized>(m: &mut M, stmts: &[Stmt]) -> Option<Vec<Stmt>> {
    let mut new: Option<Vec<Stmt>> = None;
    for (i, x) in stmts.iter().enumerate() {
        let n = m.mutate_stmt(x);
        match &mut new {
            Some(v) => v.push(n),
            None if !n.ptr_eq(x) => {
                let mut v = Vec::with_capacity(stmts.len());
                v.extend(stmts[..i].iter().cloned());
                v.push(n);
                new = Some(v);
            }
            None => {}
        }
    }
    new
}

/// Rewrites the statements nested in `s` (a block's statements, an `if`'s branches, a loop's
/// body) with `m`, leaving its expressions and variables as they are; returns `s` itself if
/// none changed. For mutators that rewrite statements only: a statement without nested
/// statements comes back at once, with no walk of its expressions (which such a mutator
/// would have returned unchanged, one handle at a time).
pub fn walk_mutate_nested<M: Mutator + ?Sized>(m: &mut M, s: &Stmt) -> Stmt {
    let node = match s.node() {
        StmtNode::If { cond, then, otherwise } => {
            let nt = m.mutate_stmt(then);
            let no = otherwise.as_ref().map(|o| m.mutate_stmt(o));
            if nt.ptr_eq(then) && same_opt(&no, otherwise) {
                return s.clone();
            }
            StmtNode::If { cond: cond.clone(), then: nt, otherwise: no }
        }
        StmtNode::For { var, lo, hi, step, body } => {
            let nbody = m.mutate_stmt(body);
            if nbody.ptr_eq(body) {
                return s.clone();
            }
            StmtNode::For {
                var: var.clone(),
                lo: lo.clone(),
                hi: hi.clone(),
                step: step.clone(),
                body: nbody,
            }
        }
        StmtNode::While { cond, body } => {
            let nbody = m.mutate_stmt(body);
            if nbody.ptr_eq(body) {
                return s.clone();
            }
            StmtNode::While { cond: cond.clone(), body: nbody }
        }
        StmtNode::Block(stmts) => match changed_stmts(m, stmts) {
            Some(v) => StmtNode::Block(v),
            None => return s.clone(),
        },
        StmtNode::Let { .. }
        | StmtNode::Decl { .. }
        | StmtNode::Assign { .. }
        | StmtNode::Store { .. }
        | StmtNode::VecStore { .. }
        | StmtNode::Alloc { .. }
        | StmtNode::Call { .. } => return s.clone(),
    };
    Stmt::new(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_module;

    /// Drops every `let` named `dead`, statements only.
    struct DropDead(usize);
    impl Mutator for DropDead {
        fn mutate_expr(&mut self, _: &Expr) -> Expr {
            panic!("walk_mutate_nested must not walk expressions")
        }
        fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
            self.0 += 1;
            match s.node() {
                StmtNode::Let { var, .. } if var.name() == "dead" => Stmt::block([]),
                _ => walk_mutate_nested(self, s),
            }
        }
    }

    #[test]
    fn nested_statements_are_rewritten_and_expressions_left_alone() {
        let src = "kernel k(x: ptr<global, u32>) {
            for i: u32 in 0 .. 4 {
                if i < 2u32 { let dead: u32 = i; x[i] = 1; } else { x[i] = 2; }
            }
            var w: u32 = 0;
            while w < 3u32 { let dead: u32 = w; w = w + 1; }
            x[0] = 3;
        }";
        let k = parse_module(src).unwrap().kernels.remove(0);
        let mut m = DropDead(0);
        let out = m.mutate_stmt(k.body());
        let text = out.to_string();
        assert!(!text.contains("dead"), "{text}");
        assert!(text.contains("x[i] = 1;") && text.contains("w = w + 1;"), "{text}");
        // Every statement was reached (block, for, body, if, branches, ...).
        assert_eq!(m.0, 15);
        // Nothing to change: the same handle back, at every level.
        let again = DropDead(0).mutate_stmt(&out);
        assert!(again.ptr_eq(&out));
    }
}
