//! Peephole fusion: on `#fast_math` kernels only (the kernel allows contraction), float
//! `a * b + c` and `c + a * b` become `fma(a, b, c)`. Without fast-math nothing changes:
//! contraction changes rounding.
//!
//! Integer `add3` / `mad` fusion is not done: the IR has no such operations.

use kiln_ir::{walk_mutate_expr, BinOp, Expr, ExprNode, Intrinsic, Kernel, Mutator};

struct Peephole;

impl Mutator for Peephole {
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        let e = walk_mutate_expr(self, e);
        let ExprNode::Binary { op: BinOp::Add, a, b } = e.node() else { return e };
        if !e.ty().scalar().is_some_and(|s| s.is_arith() && !s.is_int()) {
            return e;
        }
        let mul = |x: &Expr| match x.node() {
            ExprNode::Binary { op: BinOp::Mul, a, b } => Some((a.clone(), b.clone())),
            _ => None,
        };
        if let Some((x, y)) = mul(a) {
            return Expr::intrinsic(Intrinsic::Fma, [x, y, b.clone()]);
        }
        if let Some((x, y)) = mul(b) {
            return Expr::intrinsic(Intrinsic::Fma, [x, y, a.clone()]);
        }
        e
    }
}

/// Runs peephole fusion (a no-op unless the kernel is `#fast_math`).
pub fn peephole(k: &Kernel) -> Kernel {
    if !k.attrs().fast_math {
        return k.clone();
    }
    Peephole.mutate_kernel(k)
}
