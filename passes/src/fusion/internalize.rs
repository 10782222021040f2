//! Internalization: promoting a buffer parameter to a private or local array.
//!
//! A buffer can be promoted only if every use of its pointer is a plain element access
//! (`p[i]` or `p[i] = v`). Any other use makes the pointer escape: it is named as a value
//! (bound by `let`, passed to an atomic or other call, cast, compared). kiln has no pointer
//! arithmetic, so "offset with a different element type" cannot occur; a parameter whose
//! group mixes element types is rejected earlier as an identical-parameter type mismatch.
//! Rewritten accesses use `index % size` (index 0 when `size` is 1), with the index taken
//! as `u32` (wrapping) when it has another type.

use kiln_ir::{Expr, ExprNode, Scalar, Stmt, StmtNode, Type, Visitor};

/// Finds uses of a pointer that are not plain element accesses.
pub(crate) struct Escapes<'a> {
    /// The parameter names to watch.
    pub names: &'a [String],
    /// True once one of them escapes.
    pub escaped: bool,
}

impl Visitor for Escapes<'_> {
    fn visit_expr(&mut self, e: &Expr) {
        if let ExprNode::Var(v) = e.node() {
            if v.ty().is_ptr() && self.names.iter().any(|n| n == v.name()) {
                self.escaped = true;
            }
        }
        kiln_ir::walk_expr(self, e)
    }

    fn visit_stmt(&mut self, s: &Stmt) {
        kiln_ir::walk_stmt(self, s)
    }
}

/// `index % size` (or `0` for size 1), in `u32`.
pub(crate) fn wrap_index(index: Expr, size: u32) -> Expr {
    if size == 1 {
        return Expr::u32(0);
    }
    let i = if index.ty() == Type::U32 { index } else { index.cast(Scalar::U32) };
    i % Expr::u32(size)
}

/// True if `s` contains a barrier or a local array (the entry synchronizes its work-group).
pub fn uses_work_group(s: &Stmt) -> bool {
    struct Find(bool);
    impl Visitor for Find {
        fn visit_stmt(&mut self, s: &Stmt) {
            match s.node() {
                StmtNode::Call { .. } if s.barrier_fence().is_some() => self.0 = true,
                StmtNode::Alloc { var, .. }
                    if matches!(var.ty(), Type::Ptr(kiln_ir::AddrSpace::Local, _)) =>
                {
                    self.0 = true
                }
                _ => {}
            }
            kiln_ir::walk_stmt(self, s)
        }
    }
    let mut f = Find(false);
    f.visit_stmt(s);
    f.0
}
