//! Peephole fusion, bottom-up over every expression:
//!
//! * Integers (every kernel): `a * b + c` and `c + a * b` become `mad(a, b, c)`, and
//!   `(a + b) + c` and `a + (b + c)` become `add3(a, b, c)`. Both are exact: integer `+`
//!   and `*` wrap modulo 2^n, so the fused forms compute the very same bits. A multiply is
//!   preferred over an add as the fused operand (`a * b + (c + d)` becomes
//!   `mad(a, b, c + d)`), since a multiply-add saves more than a three-input add.
//! * Floats, on `#fast_math` kernels only (the kernel allows contraction): `a * b + c` and
//!   `c + a * b` become `fma(a, b, c)`. Without fast-math floats are left alone:
//!   contraction changes rounding.
//!
//! Expressions are pure and evaluate every operand, so reordering `c + a * b` into
//! `mad(a, b, c)` changes nothing observable, except which error comes first when `c` and
//! `a * b` may both fail (loads, divisions): that sum is left alone, so the optimized
//! kernel reports the error the source reports. The pass runs late in the default pipeline
//! (after `simplify`, `cse` and `strength`): the simplifier sees `mad`/`add3` as opaque
//! calls, so fusing earlier would hide `+`/`*` from its rules.

use kiln_ir::{walk_mutate_expr, BinOp, Expr, ExprNode, Intrinsic, Kernel, Mutator, Var};

struct Peephole {
    fast_math: bool,
}

/// The operands of `x` if it is the binary operation `op`.
fn operands(x: &Expr, op: BinOp) -> Option<(Expr, Expr)> {
    match x.node() {
        ExprNode::Binary { op: o, a, b } if *o == op => Some((a.clone(), b.clone())),
        _ => None,
    }
}

/// `e` (an addition `a + b`) fused, if one of its operands is a multiplication (into `fused`)
/// or, when `add3` is given, an addition.
fn fuse(a: &Expr, b: &Expr, fused: Intrinsic, add3: bool) -> Option<Expr> {
    if let Some((x, y)) = operands(a, BinOp::Mul) {
        return Some(Expr::intrinsic(fused, [x, y, b.clone()]));
    }
    // `a` is evaluated first: it must not move behind another operand that may fail.
    if let Some((x, y)) = operands(b, BinOp::Mul).filter(|_| !(a.may_fail() && b.may_fail())) {
        return Some(Expr::intrinsic(fused, [x, y, a.clone()]));
    }
    if !add3 {
        return None;
    }
    if let Some((x, y)) = operands(a, BinOp::Add) {
        return Some(Expr::intrinsic(Intrinsic::Add3, [x, y, b.clone()]));
    }
    if let Some((x, y)) = operands(b, BinOp::Add) {
        return Some(Expr::intrinsic(Intrinsic::Add3, [a.clone(), x, y]));
    }
    None
}

impl Mutator for Peephole {
    fn mutate_stmt_changed(&mut self, s: &kiln_ir::Stmt) -> Option<kiln_ir::Stmt> {
        kiln_ir::walk_mutate_stmt_changed(self, s)
    }

    fn mutate_expr_changed(&mut self, e: &Expr) -> Option<Expr> {
        if !e.has_binary(BinOp::Add) {
            return None;
        }
        let n = self.mutate_expr(e);
        (!n.ptr_eq(e)).then_some(n)
    }

    fn mutate_var_changed(&mut self, _: &Var) -> Option<Var> {
        None
    }

    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        // Every fused form is a sum: a subtree without one stays, unwalked.
        if !e.has_binary(BinOp::Add) {
            return e.clone();
        }
        let e = walk_mutate_expr(self, e);
        let ExprNode::Binary { op: BinOp::Add, a, b } = e.node() else { return e };
        let Some(ty) = e.ty().scalar() else { return e };
        let fused = if ty.is_int() {
            fuse(a, b, Intrinsic::Mad, true)
        } else if self.fast_math && ty.is_arith() {
            // f16 is storage only (no arithmetic), so `is_arith` leaves f32 and f64.
            fuse(a, b, Intrinsic::Fma, false)
        } else {
            None
        };
        fused.unwrap_or(e)
    }
}

/// Runs peephole fusion: integer `mad`/`add3` always, float `fma` on `#fast_math` kernels.
pub fn peephole(k: &Kernel) -> Kernel {
    let k = &kiln_ir::depth::bound_kernel(k);
    Peephole { fast_math: k.attrs().fast_math }.mutate_kernel(k)
}
