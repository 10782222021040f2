//! Buffers summed per thread: a buffer parameter that the kernel reaches only through
//! `atomic_add`/`atomic_sub` of 32-bit integers whose results no one reads (a histogram's
//! bins) is, on a launch split over several threads, given to each thread but the first
//! as a zeroed copy of its own, and the copies are added into the buffer, in thread order,
//! when every thread has finished.
//!
//! Why this is exact: nothing in the launch reads the buffer (no load, no atomic result,
//! no other use of the name), so no work-item can see a partial sum; the buffer's final
//! value is its initial value plus every work-item's additions (minus subtractions), and
//! 32-bit wrapping addition is associative and commutative, so the grouping of the
//! additions per thread gives the same bits as any order (the interpreter's included). A
//! buffer that another parameter of the launch also names (aliasing) keeps the shared path,
//! as do copies that would cost more than the launch (the executor's rule). With every
//! buffer that atomics reach summed per thread, each thread's atomics on them are its own
//! and run unlocked.

use kiln_ir::{
    walk_expr, walk_stmt, AtomicOp, Expr, ExprNode, FuncKind, Kernel, Scalar, Stmt, StmtNode, Type,
    Visitor,
};

/// The parameters of `k` (by position) reached only through `atomic_add`/`atomic_sub` of
/// `i32`/`u32` values whose results are unused, at least once.
pub(crate) fn summed_params(k: &Kernel) -> Vec<usize> {
    k.params()
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            matches!(p.ty(), Type::Ptr(kiln_ir::AddrSpace::Global, Scalar::I32 | Scalar::U32))
        })
        .filter(|(_, p)| {
            let mut c = Uses { name: p.name(), all: 0, sums: 0 };
            c.visit_stmt(k.body());
            c.sums > 0 && c.all == c.sums
        })
        .map(|(i, _)| i)
        .collect()
}

/// True if every parameter that an atomic of `k` names is in `summed` (the threads'
/// atomics on buffers then touch only their own copies).
pub(crate) fn atomics_only_on(k: &Kernel, summed: &[usize]) -> bool {
    k.params()
        .iter()
        .enumerate()
        .all(|(i, p)| summed.contains(&i) || !atomic_target(k.body(), p.name()))
}

/// True if an atomic in `s` names `name`.
fn atomic_target(s: &Stmt, name: &str) -> bool {
    struct Find<'a>(&'a str, bool);
    impl Visitor for Find<'_> {
        fn visit_stmt(&mut self, s: &Stmt) {
            if let StmtNode::Call { func, args, .. } = s.node() {
                if matches!(func.kind(), FuncKind::Atomic(_))
                    && args.first().and_then(Expr::as_var).is_some_and(|v| v.name() == self.0)
                {
                    self.1 = true;
                }
            }
            walk_stmt(self, s)
        }
    }
    let mut f = Find(name, false);
    f.visit_stmt(s);
    f.1
}

/// Counts the references to one name: all of them, and the atomic sums among them.
struct Uses<'a> {
    name: &'a str,
    all: usize,
    sums: usize,
}

impl Visitor for Uses<'_> {
    fn visit_expr(&mut self, e: &Expr) {
        match e.node() {
            ExprNode::Var(v) if v.name() == self.name => self.all += 1,
            ExprNode::Load { buf, .. } | ExprNode::VecLoad { buf, .. }
                if buf.name() == self.name =>
            {
                self.all += 1
            }
            _ => {}
        }
        walk_expr(self, e)
    }

    fn visit_stmt(&mut self, s: &Stmt) {
        match s.node() {
            StmtNode::Store { buf, .. } | StmtNode::VecStore { buf, .. }
                if buf.name() == self.name =>
            {
                self.all += 1
            }
            // A binding of the name (shadowing) is a use the analysis does not follow.
            StmtNode::Let { var, .. }
            | StmtNode::Decl { var, .. }
            | StmtNode::Assign { var, .. }
            | StmtNode::Alloc { var, .. }
            | StmtNode::For { var, .. }
                if var.name() == self.name =>
            {
                self.all += 1
            }
            StmtNode::Call { result, func, args } => {
                if result.as_ref().is_some_and(|r| r.name() == self.name) {
                    self.all += 1;
                }
                let sum = matches!(func.kind(), FuncKind::Atomic(AtomicOp::Add | AtomicOp::Sub))
                    && result.is_none()
                    && args.len() == 3
                    && args[0].as_var().is_some_and(|v| v.name() == self.name)
                    && matches!(args[2].ty(), Type::Scalar(Scalar::I32 | Scalar::U32));
                if sum {
                    self.sums += 1;
                }
            }
            _ => {}
        }
        walk_stmt(self, s)
    }
}
