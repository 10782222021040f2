//! Source names of fault sites: before the optimizer rewrites a kernel, every node that can
//! fault and whose error quotes it (an integer `/` or `%` by a divisor that is not a
//! non-zero constant) records how the interpreter names it ([`Expr::origin`]). Passes keep
//! the origin when they rebuild such a node (the mutator's default walk does; the
//! simplifier keeps a named division whole and simplifies its operands alone, since almost
//! no algebra holds across a division by an unknown value), and backends quote it, so
//! optimized code reports `` integer division by zero in `x[i] / a[(i + 1) % 8]` `` as the
//! interpreter does on the source, not `` `cse0 / a[i + 1 & 7]` ``.
//!
//! Out-of-bounds accesses name a buffer (a parameter, never renamed) and an index value,
//! and a `for` loop's step error its variable, which the passes keep; they need no origin.
//!
//! Which error comes first matters as much: where several loads or divisions of a
//! work-item fail, the interpreter reports the first in evaluation order. A rewrite may
//! drop repeats (an equal load fails with the first) but must reach the distinct ones in
//! the same order ([`same_fault_order`]); CSE, `mad` fusion and the simplifier keep it.

use kiln_ir::{
    walk_expr, walk_mutate_expr, walk_stmt, BinOp, Expr, ExprNode, Kernel, Mutator, Stmt, Visitor,
};

/// `k` with every fault site that has no [`Expr::origin`] yet given its own text as origin
/// (its [`Expr::fault_site`]). The kernel means the same; running it twice changes nothing.
/// Expressions deeper than [`kiln_ir::depth::MAX_EXPR_DEPTH`] are split into `let`s first
/// (as every pass does), so a division inside one is named by its split text.
pub fn record_origins(k: &Kernel) -> Kernel {
    struct Record;
    impl Mutator for Record {
        fn mutate_expr(&mut self, e: &Expr) -> Expr {
            let r = walk_mutate_expr(self, e);
            if r.origin().is_none() && r.is_fault_division() {
                // The text of `e`, the source node (its children's origins print nothing).
                return r.with_origin(e.fault_site().into());
            }
            r
        }
    }
    let k = kiln_ir::depth::bound_kernel(k);
    // Most kernels have no such division (generated index arithmetic divides by constants),
    // or have theirs named already (the pipeline records them, then the backend's vector
    // lowering asks again): a read-only search is a fraction of a rebuilding walk.
    if !has_unnamed_fault(&k) {
        return k;
    }
    Record.mutate_kernel(&k)
}

/// True if some fault site of `k` has no [`Expr::origin`] yet.
fn has_unnamed_fault(k: &Kernel) -> bool {
    struct Find(bool);
    impl Visitor for Find {
        fn visit_expr(&mut self, e: &Expr) {
            // A fault site is a division or remainder: a tree without one (O(1), most of a
            // kernel) is not walked.
            if self.0 || !(e.has_binary(BinOp::Div) || e.has_binary(BinOp::Rem)) {
                return;
            }
            if e.origin().is_none() && e.is_fault_division() {
                self.0 = true;
                return;
            }
            walk_expr(self, e)
        }
        fn visit_stmt(&mut self, s: &Stmt) {
            if !self.0 {
                walk_stmt(self, s)
            }
        }
    }
    let mut f = Find(false);
    f.visit_kernel(k);
    f.0
}

/// The nodes of `e` that may fail (loads and [`Expr::is_fault_division`]s), in the order their
/// checks run (operands left to right, each before its operator), with repeats: the first
/// of them that fails is the error `e` reports.
fn fault_points(e: &Expr, out: &mut Vec<Expr>) {
    // Every fault point may fail, and so does every tree holding one (O(1)).
    if !e.may_fail() {
        return;
    }
    for c in e.children() {
        fault_points(c, out);
    }
    if is_fault_point(e) {
        out.push(e.clone());
    }
}

fn is_fault_point(e: &Expr) -> bool {
    matches!(e.node(), ExprNode::Load { .. } | ExprNode::VecLoad { .. }) || e.is_fault_division()
}

/// True if `a` and `b` (structurally equal) carry the same origins at every node: two
/// equal expressions derived from different source text must not share one's rewrite.
pub fn same_origins(a: &Expr, b: &Expr) -> bool {
    if a.ptr_eq(b) {
        return true;
    }
    if a.origin() != b.origin() {
        return false;
    }
    // The usual nodes read directly: the simplifier asks this at every hit of its memo,
    // and building both operand lists at every node was most of the answer's cost.
    match (a.node(), b.node()) {
        (ExprNode::Var(_) | ExprNode::Imm(_) | ExprNode::Builtin { .. }, _) => true,
        (ExprNode::Binary { a: x, b: y, .. }, ExprNode::Binary { a: z, b: w, .. }) => {
            same_origins(x, z) && same_origins(y, w)
        }
        _ => a.children().iter().zip(b.children()).all(|(x, y)| same_origins(x, y)),
    }
}

/// True if `b`, a rewrite of `a`, reaches the loads and divisions of `a` that may fail in
/// the same order, repeats aside (a repeat fails only where the first did), so that on any
/// input it fails with the same error. `b` may lack some that the rewrite proved cannot fail
/// (`local_id(1) % local_size(1)` is `local_id(1)`), never have others. `norm` brings a node
/// that may fail to a canonical form (its operands simplified), since a rewrite may simplify
/// those too.
pub fn same_fault_order(a: &Expr, b: &Expr, mut norm: impl FnMut(&Expr) -> Expr) -> bool {
    let (mut fa, mut fb) = (Vec::new(), Vec::new());
    fault_points(a, &mut fa);
    fault_points(b, &mut fb);
    let distinct = |v: Vec<Expr>, norm: &mut dyn FnMut(&Expr) -> Expr| {
        let mut out: Vec<Expr> = Vec::new();
        for x in v.iter().map(&mut *norm).filter(is_fault_point) {
            if !out.contains(&x) {
                out.push(x);
            }
        }
        out
    };
    // One that may fail (the common case: an index with one load) has no order.
    let mut plain = |x: &Expr| x.clone();
    let (da, db) = (distinct(fa.clone(), &mut plain), distinct(fb.clone(), &mut plain));
    if da.len() <= 1 && db.len() <= da.len() {
        return true;
    }
    let (da, db) = (distinct(fa, &mut norm), distinct(fb, &mut norm));
    // `db` must be a subsequence of `da`.
    let mut rest = da.iter();
    db.iter().all(|x| rest.any(|y| y == x))
}
