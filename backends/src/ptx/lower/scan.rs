//! The scan before lowering: which built-ins a kernel reads (in the order lowering numbers
//! them) and its local arrays.

use kiln_ir::{
    walk_expr, walk_stmt, AddrSpace, Builtin, Expr, ExprNode, Kernel, Scalar, Stmt, StmtNode, Type,
    Visitor,
};
use kiln_passes::vectors::{stmt_in_memory_form, StmtLanes};

/// Which built-ins a kernel reads, and its local arrays.
#[derive(Default)]
pub(super) struct Scan<'k> {
    pub(super) builtins: Vec<(Builtin, u8)>,
    pub(super) locals: Vec<(String, Scalar, u32)>,
    /// Local arrays only: the expressions (most of a kernel) are not walked.
    pub(super) locals_only: bool,
    /// The kernel scanned, for `vlanes`.
    pub(super) kernel: Option<&'k Kernel>,
    /// The vector lowering of statements not in the memory form that read a built-in for
    /// the first time: they are walked as they are lowered, since built-ins are numbered
    /// in the order they are first read (lowering may bind a lane's operand first). Its
    /// own, so that the lowering in `Lower` names its lanes as if it alone ran.
    pub(super) vlanes: Option<StmtLanes<'k>>,
}

impl Visitor for Scan<'_> {
    fn visit_expr(&mut self, e: &Expr) {
        // A tree without a built-in (most of a kernel) has nothing to list: not walked.
        if self.locals_only || !e.has_builtin() {
            return;
        }
        if let ExprNode::Builtin { kind, dim } = e.node() {
            if !self.builtins.contains(&(*kind, *dim)) {
                self.builtins.push((*kind, *dim));
            }
        }
        walk_expr(self, e)
    }

    fn visit_stmt(&mut self, s: &Stmt) {
        if let StmtNode::Alloc { var, count } = s.node() {
            if let Type::Ptr(AddrSpace::Local, elem) = var.ty() {
                self.locals.push((var.name().to_string(), elem, *count));
            }
        }
        let simple = !matches!(
            s.node(),
            StmtNode::If { .. }
                | StmtNode::For { .. }
                | StmtNode::While { .. }
                | StmtNode::Block(_)
        );
        if self.locals_only || !simple {
            return walk_stmt(self, s);
        }
        // Only the order in which built-ins are first read matters: a statement that reads
        // none for the first time adds nothing, and one in the memory form adds them in the
        // order it reads them.
        let mut first = Scan::default();
        walk_stmt(&mut first, s);
        if first.builtins.iter().all(|b| self.builtins.contains(b)) {
            return;
        }
        if stmt_in_memory_form(s) {
            for b in first.builtins {
                if !self.builtins.contains(&b) {
                    self.builtins.push(b);
                }
            }
            return;
        }
        let kernel = self.kernel.expect("a kernel to scan");
        let l = self.vlanes.get_or_insert_with(|| StmtLanes::new(kernel));
        for t in l.lower(s) {
            walk_stmt(self, &t);
        }
    }
}
