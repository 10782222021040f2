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

use kiln_ir::{walk_mutate_expr, BinOp, Expr, ExprNode, Kernel, Mutator};

/// `k` with every fault site that has no [`Expr::origin`] yet given its own text as origin
/// (its [`Expr::fault_site`]). The kernel means and prints the same; running it twice
/// changes nothing.
pub fn record_origins(k: &Kernel) -> Kernel {
    struct Record;
    impl Mutator for Record {
        fn mutate_expr(&mut self, e: &Expr) -> Expr {
            let r = walk_mutate_expr(self, e);
            if r.origin().is_none() && is_fault_division(&r) {
                // The text of `e`, the source node (its children's origins print nothing).
                return r.with_origin(e.fault_site().into());
            }
            r
        }
    }
    Record.mutate_kernel(k)
}

/// True for an integer (or integer-vector) `/` or `%` whose divisor is not a non-zero
/// constant: a node that may fail with a division by zero.
pub fn is_fault_division(e: &Expr) -> bool {
    match e.node() {
        ExprNode::Binary { op: BinOp::Div | BinOp::Rem, b, .. } => {
            e.ty().lane_scalar().is_some_and(|s| s.is_int())
                && b.as_imm().is_none_or(|k| k.is_zero())
        }
        _ => false,
    }
}
