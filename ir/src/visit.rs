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

    /// [`Mutator::mutate_expr`], or `None` where it gives `e` itself: what the walks call for
    /// each operand. The default calls `mutate_expr`; a mutator that can tell at a glance
    /// that an expression stays overrides this to answer `None` without a handle: cloning
    /// and dropping one (atomic reference counts) was most of a walk's time over an
    /// unrolled kernel's thousand statements, in every pass.
    fn mutate_expr_changed(&mut self, e: &Expr) -> Option<Expr> {
        let n = self.mutate_expr(e);
        (!n.ptr_eq(e)).then_some(n)
    }

    /// [`Mutator::mutate_var`], or `None` where it gives a variable equal to `v`: what the
    /// walks call. A mutator that renames nothing overrides this to answer `None` (see
    /// [`Mutator::mutate_expr_changed`]).
    fn mutate_var_changed(&mut self, v: &Var) -> Option<Var> {
        let n = self.mutate_var(v);
        (n != *v).then_some(n)
    }

    /// [`Mutator::mutate_stmt`], or `None` where it gives `s` itself: what the walks call
    /// for each nested statement. A mutator that can tell a statement stays (one without
    /// nested statements, for a mutator of blocks and loops) overrides this to answer `None`
    /// without a handle (see [`Mutator::mutate_expr_changed`]); one that keeps the default
    /// `mutate_stmt` can answer [`walk_mutate_stmt_changed`].
    fn mutate_stmt_changed(&mut self, s: &Stmt) -> Option<Stmt> {
        let n = self.mutate_stmt(s);
        (!n.ptr_eq(s)).then_some(n)
    }
}

/// `new`, or `old` itself where `new` is `None` (a walk's unchanged operand).
fn or_same<T: Clone>(new: Option<T>, old: &T) -> T {
    new.unwrap_or_else(|| old.clone())
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
        ExprNode::Var(v) => match m.mutate_var_changed(v) {
            Some(nv) => ExprNode::Var(nv),
            None => return e.clone(),
        },
        ExprNode::Unary { op, a } => match m.mutate_expr_changed(a) {
            Some(na) => ExprNode::Unary { op: *op, a: na },
            None => return e.clone(),
        },
        ExprNode::Binary { op, a, b } => {
            let (na, nb) = (m.mutate_expr_changed(a), m.mutate_expr_changed(b));
            if na.is_none() && nb.is_none() {
                return e.clone();
            }
            ExprNode::Binary { op: *op, a: or_same(na, a), b: or_same(nb, b) }
        }
        ExprNode::Select { cond, a, b } => {
            let (nc, na, nb) =
                (m.mutate_expr_changed(cond), m.mutate_expr_changed(a), m.mutate_expr_changed(b));
            if nc.is_none() && na.is_none() && nb.is_none() {
                return e.clone();
            }
            ExprNode::Select { cond: or_same(nc, cond), a: or_same(na, a), b: or_same(nb, b) }
        }
        ExprNode::Cast { to, a } => match m.mutate_expr_changed(a) {
            Some(na) => ExprNode::Cast { to: *to, a: na },
            None => return e.clone(),
        },
        ExprNode::Load { buf, index } => {
            let (nbuf, ni) = (m.mutate_var_changed(buf), m.mutate_expr_changed(index));
            if nbuf.is_none() && ni.is_none() {
                return e.clone();
            }
            ExprNode::Load { buf: or_same(nbuf, buf), index: or_same(ni, index) }
        }
        ExprNode::VecLoad { buf, index, lanes } => {
            let (nbuf, ni) = (m.mutate_var_changed(buf), m.mutate_expr_changed(index));
            if nbuf.is_none() && ni.is_none() {
                return e.clone();
            }
            ExprNode::VecLoad { buf: or_same(nbuf, buf), index: or_same(ni, index), lanes: *lanes }
        }
        ExprNode::Extract { a, lane } => match m.mutate_expr_changed(a) {
            Some(na) => ExprNode::Extract { a: na, lane: *lane },
            None => return e.clone(),
        },
        ExprNode::Insert { a, lane, b } => {
            let (na, nb) = (m.mutate_expr_changed(a), m.mutate_expr_changed(b));
            if na.is_none() && nb.is_none() {
                return e.clone();
            }
            ExprNode::Insert { a: or_same(na, a), lane: *lane, b: or_same(nb, b) }
        }
        ExprNode::Vector { ty, elems } => {
            let new: SmallVec<[Option<Expr>; 4]> =
                elems.iter().map(|a| m.mutate_expr_changed(a)).collect();
            if new.iter().all(Option::is_none) {
                return e.clone();
            }
            let elems = new.into_iter().zip(elems).map(|(n, o)| or_same(n, o)).collect();
            ExprNode::Vector { ty: *ty, elems }
        }
        ExprNode::Intrinsic { op, args } => {
            let new: SmallVec<[Option<Expr>; 3]> =
                args.iter().map(|a| m.mutate_expr_changed(a)).collect();
            if new.iter().all(Option::is_none) {
                return e.clone();
            }
            let args = new.into_iter().zip(args).map(|(n, o)| or_same(n, o)).collect();
            ExprNode::Intrinsic { op: *op, args }
        }
    };
    // Same kind, new operands: the node still stands for its source.
    e.rebuild(node)
}

/// An optional part's new value (an `if`'s `else` branch, a call's result): `new` is `Some`
/// exactly where `old` is (its rewrite, `None` where unchanged).
fn or_same_opt<T: Clone>(new: Option<Option<T>>, old: &Option<T>) -> Option<T> {
    match (new, old) {
        (Some(n), Some(o)) => Some(or_same(n, o)),
        _ => None,
    }
}

/// Rewrites the children of `s`, returning `s` itself if none changed.
pub fn walk_mutate_stmt<M: Mutator + ?Sized>(m: &mut M, s: &Stmt) -> Stmt {
    walk_mutate_stmt_changed(m, s).unwrap_or_else(|| s.clone())
}

/// [`walk_mutate_stmt`], or `None` where it gives `s` itself.
pub fn walk_mutate_stmt_changed<M: Mutator + ?Sized>(m: &mut M, s: &Stmt) -> Option<Stmt> {
    let node = match s.node() {
        StmtNode::Let { var, value } => {
            let (nv, nval) = (m.mutate_var_changed(var), m.mutate_expr_changed(value));
            if nv.is_none() && nval.is_none() {
                return None;
            }
            StmtNode::Let { var: or_same(nv, var), value: or_same(nval, value) }
        }
        StmtNode::Decl { var, init } => {
            let (nv, ninit) = (m.mutate_var_changed(var), m.mutate_expr_changed(init));
            if nv.is_none() && ninit.is_none() {
                return None;
            }
            StmtNode::Decl { var: or_same(nv, var), init: or_same(ninit, init) }
        }
        StmtNode::Assign { var, value } => {
            let (nv, nval) = (m.mutate_var_changed(var), m.mutate_expr_changed(value));
            if nv.is_none() && nval.is_none() {
                return None;
            }
            StmtNode::Assign { var: or_same(nv, var), value: or_same(nval, value) }
        }
        StmtNode::Store { buf, index, value } => {
            let (nb, ni, nval) = (
                m.mutate_var_changed(buf),
                m.mutate_expr_changed(index),
                m.mutate_expr_changed(value),
            );
            if nb.is_none() && ni.is_none() && nval.is_none() {
                return None;
            }
            StmtNode::Store {
                buf: or_same(nb, buf),
                index: or_same(ni, index),
                value: or_same(nval, value),
            }
        }
        StmtNode::VecStore { buf, index, value } => {
            let (nb, ni, nval) = (
                m.mutate_var_changed(buf),
                m.mutate_expr_changed(index),
                m.mutate_expr_changed(value),
            );
            if nb.is_none() && ni.is_none() && nval.is_none() {
                return None;
            }
            StmtNode::VecStore {
                buf: or_same(nb, buf),
                index: or_same(ni, index),
                value: or_same(nval, value),
            }
        }
        StmtNode::Alloc { var, count } => match m.mutate_var_changed(var) {
            Some(nv) => StmtNode::Alloc { var: nv, count: *count },
            None => return None,
        },
        StmtNode::If { cond, then, otherwise } => {
            let nc = m.mutate_expr_changed(cond);
            let nt = m.mutate_stmt_changed(then);
            let no = otherwise.as_ref().map(|o| m.mutate_stmt_changed(o));
            if nc.is_none() && nt.is_none() && no.as_ref().is_none_or(Option::is_none) {
                return None;
            }
            StmtNode::If {
                cond: or_same(nc, cond),
                then: or_same(nt, then),
                otherwise: or_same_opt(no, otherwise),
            }
        }
        StmtNode::For { var, lo, hi, step, body } => {
            let nv = m.mutate_var_changed(var);
            let (nlo, nhi, nstep) =
                (m.mutate_expr_changed(lo), m.mutate_expr_changed(hi), m.mutate_expr_changed(step));
            let nbody = m.mutate_stmt_changed(body);
            if nv.is_none() && nlo.is_none() && nhi.is_none() && nstep.is_none() && nbody.is_none()
            {
                return None;
            }
            StmtNode::For {
                var: or_same(nv, var),
                lo: or_same(nlo, lo),
                hi: or_same(nhi, hi),
                step: or_same(nstep, step),
                body: or_same(nbody, body),
            }
        }
        StmtNode::While { cond, body } => {
            let (nc, nbody) = (m.mutate_expr_changed(cond), m.mutate_stmt_changed(body));
            if nc.is_none() && nbody.is_none() {
                return None;
            }
            StmtNode::While { cond: or_same(nc, cond), body: or_same(nbody, body) }
        }
        StmtNode::Block(stmts) => match changed_stmts(m, stmts) {
            Some(v) => StmtNode::Block(v),
            None => return None,
        },
        StmtNode::Call { result, func, args } => {
            let nr = result.as_ref().map(|r| m.mutate_var_changed(r));
            let nargs: Vec<Option<Expr>> = args.iter().map(|a| m.mutate_expr_changed(a)).collect();
            if nr.as_ref().is_none_or(Option::is_none) && nargs.iter().all(Option::is_none) {
                return None;
            }
            let result = or_same_opt(nr, result);
            let args = nargs.into_iter().zip(args).map(|(n, o)| or_same(n, o)).collect();
            StmtNode::Call { result, func: func.clone(), args }
        }
    };
    Some(Stmt::new(node))
}

/// `stmts` rewritten by `m`, or `None` if every one came back as itself: no vector is built
/// for an unchanged block (most blocks, in most passes).
fn changed_stmts<M: Mutator + ?Sized>(m: &mut M, stmts: &[Stmt]) -> Option<Vec<Stmt>> {
    let mut new: Option<Vec<Stmt>> = None;
    for (i, x) in stmts.iter().enumerate() {
        let n = m.mutate_stmt_changed(x);
        match (&mut new, n) {
            (Some(v), n) => v.push(or_same(n, x)),
            (None, Some(n)) => {
                let mut v = Vec::with_capacity(stmts.len());
                v.extend(stmts[..i].iter().cloned());
                v.push(n);
                new = Some(v);
            }
            (None, None) => {}
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
            let nt = m.mutate_stmt_changed(then);
            let no = otherwise.as_ref().map(|o| m.mutate_stmt_changed(o));
            if nt.is_none() && no.as_ref().is_none_or(Option::is_none) {
                return s.clone();
            }
            StmtNode::If {
                cond: cond.clone(),
                then: or_same(nt, then),
                otherwise: or_same_opt(no, otherwise),
            }
        }
        StmtNode::For { var, lo, hi, step, body } => {
            let Some(nbody) = m.mutate_stmt_changed(body) else { return s.clone() };
            StmtNode::For {
                var: var.clone(),
                lo: lo.clone(),
                hi: hi.clone(),
                step: step.clone(),
                body: nbody,
            }
        }
        StmtNode::While { cond, body } => {
            let Some(nbody) = m.mutate_stmt_changed(body) else { return s.clone() };
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
    use crate::Imm;

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

    /// Renames `n` to `m` and turns the constant 7 into 8, through `mutate_var` and
    /// `mutate_expr` only (the walks reach both through the default `*_changed` methods),
    /// or, with `fast`, answering unchanged operands and statements through the `*_changed`
    /// methods as a pass that knows its work does.
    struct Rename {
        fast: bool,
    }

    impl Rename {
        fn touches(e: &Expr) -> bool {
            e.to_string().contains('n') || e.to_string().contains('7')
        }
    }

    impl Mutator for Rename {
        fn mutate_var(&mut self, v: &Var) -> Var {
            if v.name() == "n" {
                Var::new("m", v.ty())
            } else {
                v.clone()
            }
        }
        fn mutate_expr(&mut self, e: &Expr) -> Expr {
            match e.as_imm().and_then(Imm::as_i128) {
                Some(7) => Expr::from(8u32),
                _ => walk_mutate_expr(self, e),
            }
        }
        fn mutate_expr_changed(&mut self, e: &Expr) -> Option<Expr> {
            if self.fast && !Self::touches(e) {
                return None;
            }
            let n = self.mutate_expr(e);
            (!n.ptr_eq(e)).then_some(n)
        }
        fn mutate_var_changed(&mut self, v: &Var) -> Option<Var> {
            if self.fast && v.name() != "n" {
                return None;
            }
            let n = self.mutate_var(v);
            (n != *v).then_some(n)
        }
        fn mutate_stmt_changed(&mut self, s: &Stmt) -> Option<Stmt> {
            if self.fast {
                return walk_mutate_stmt_changed(self, s);
            }
            let n = self.mutate_stmt(s);
            (!n.ptr_eq(s)).then_some(n)
        }
    }

    /// The walks rebuild exactly what changed, whether a mutator answers through the
    /// `*_changed` methods or through `mutate_expr` / `mutate_var` alone: every statement
    /// and expression kind, each with and without something to rewrite; an unchanged
    /// statement comes back as the very same handle.
    #[test]
    fn changed_operands_rebuild_what_full_rewrites_rebuild() {
        let src = "kernel k(x: ptr<global, u32>, n: u32, v: ptr<global, u32>) {
            local s: u32[4];
            let a: u32 = n + 1u32;
            let b: u32 = 7u32;
            let c: u32 = select(a < 3u32, x[a], min(a, 2u32));
            var w: u32 = n;
            var q: u32 = 0u32;
            w = w * 7u32;
            q = a as u32;
            x[n] = a;
            x[a] = 7u32;
            x[a] = c;
            s[a & 3u32] = b;
            vstore(v, a * 4u32, vload4(v, n) + vload4(v, a));
            vstore(v, a * 4u32, vload4(v, a));
            for i: u32 in 0u32 .. n { x[i] = -i; }
            for i: u32 in 0u32 .. 4u32 step 2u32 { if i < a { x[i] = 1u32; } else { x[i] = n; } }
            if a > 2u32 { x[0] = 1u32; }
            while q < 7u32 { q = q + 1u32; }
            while q < 9u32 { q = q + 1u32; }
            { let d: u32 = extract(vload4(v, a), 1); x[d] = d; }
        }";
        let k = parse_module(src).unwrap().kernels.remove(0);
        let mut all = Vec::new();
        struct All<'a>(&'a mut Vec<Stmt>);
        impl Visitor for All<'_> {
            fn visit_stmt(&mut self, s: &Stmt) {
                self.0.push(s.clone());
                walk_stmt(self, s)
            }
        }
        All(&mut all).visit_stmt(k.body());
        let (mut changed, mut unchanged) = (0, 0);
        for s in &all {
            let full = Rename { fast: false }.mutate_stmt(s);
            let fast = Rename { fast: true }.mutate_stmt(s);
            assert_eq!(full.to_string(), fast.to_string(), "at `{s}`");
            assert_eq!(full.ptr_eq(s), fast.ptr_eq(s), "at `{s}`");
            if full.ptr_eq(s) {
                unchanged += 1;
            } else {
                changed += 1;
                assert_ne!(full.to_string(), s.to_string(), "a rebuilt copy of `{s}`");
            }
        }
        assert!(changed > 10 && unchanged > 10, "{changed} changed, {unchanged} unchanged");
        let full = Rename { fast: false }.mutate_kernel(&k);
        let fast = Rename { fast: true }.mutate_kernel(&k);
        assert_eq!(full.to_string(), fast.to_string());
    }
}
