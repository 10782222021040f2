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

use kiln_ir::{walk_stmt, AtomicOp, Expr, FuncKind, Kernel, Scalar, Stmt, StmtNode, Type, Visitor};
use kiln_passes::util::count_uses;

/// The parameters of `k` (by position) reached only through `atomic_add`/`atomic_sub` of
/// `i32`/`u32` values whose results are unused, at least once.
pub(crate) fn summed_params(k: &Kernel) -> Vec<usize> {
    let body = std::slice::from_ref(k.body());
    k.params()
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            matches!(p.ty(), Type::Ptr(kiln_ir::AddrSpace::Global, Scalar::I32 | Scalar::U32))
        })
        .filter(|(_, p)| {
            let name = p.name();
            let int = |a: &[Expr]| matches!(a[2].ty(), Type::Scalar(Scalar::I32 | Scalar::U32));
            let sums = count_stmts(k.body(), &|s| sum_on(s, name).is_some_and(int));
            // Every reference, a binding of the name (shadowing, which the analysis does not
            // follow) included, must be one of the sums.
            let all = count_uses(body, name) + count_stmts(k.body(), &|s| binds(s, name));
            sums > 0 && all == sums
        })
        .map(|(i, _)| i)
        .collect()
}

/// True if every parameter that an atomic of `k` names is in `summed` (the threads'
/// atomics on buffers then touch only their own copies).
pub(crate) fn atomics_only_on(k: &Kernel, summed: &[usize]) -> bool {
    k.params().iter().enumerate().all(|(i, p)| {
        summed.contains(&i) || count_stmts(k.body(), &|s| atomic_on(s, p.name())) == 0
    })
}

/// True if `s` is an atomic whose target is `name`.
fn atomic_on(s: &Stmt, name: &str) -> bool {
    matches!(s.node(), StmtNode::Call { func, args, .. }
        if matches!(func.kind(), FuncKind::Atomic(_))
            && args.first().and_then(Expr::as_var).is_some_and(|v| v.name() == name))
}

/// The operands of `s` if it is an `atomic_add`/`atomic_sub` on `name` whose result is
/// unused.
pub(crate) fn sum_on<'s>(s: &'s Stmt, name: &str) -> Option<&'s [Expr]> {
    let StmtNode::Call { result: None, func, args } = s.node() else { return None };
    (matches!(func.kind(), FuncKind::Atomic(AtomicOp::Add | AtomicOp::Sub))
        && args.len() == 3
        && args[0].as_var().is_some_and(|v| v.name() == name))
    .then_some(&args[..])
}

/// The name `s` binds (a `let`, a `var`, a local array, a loop counter or a call's result),
/// if any.
pub(crate) fn bound_name(s: &Stmt) -> Option<&str> {
    match s.node() {
        StmtNode::Let { var, .. }
        | StmtNode::Decl { var, .. }
        | StmtNode::Alloc { var, .. }
        | StmtNode::For { var, .. } => Some(var.name()),
        StmtNode::Call { result: Some(r), .. } => Some(r.name()),
        _ => None,
    }
}

/// True if `s` binds `name` rather than merely using it ([`bound_name`]).
pub(crate) fn binds(s: &Stmt, name: &str) -> bool {
    bound_name(s) == Some(name)
}

/// The statements of `s` (itself included, at any depth) for which `f` holds.
pub(crate) fn count_stmts(s: &Stmt, f: &dyn Fn(&Stmt) -> bool) -> usize {
    struct C<'a>(&'a dyn Fn(&Stmt) -> bool, usize);
    impl Visitor for C<'_> {
        fn visit_stmt(&mut self, s: &Stmt) {
            self.1 += usize::from((self.0)(s));
            walk_stmt(self, s)
        }
    }
    let mut c = C(f, 0);
    c.visit_stmt(s);
    c.1
}
