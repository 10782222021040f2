//! Strength reduction on integers: first `i32` divisions and remainders by constants of
//! dividends proven non-negative and bounded become shifts, masks or a multiplication and a
//! shift ([`div`]); then induction-variable multiplications in `for` loops become additions
//! ([`iv`]: `i * c` and `i * c + d` with loop-invariant `c`, `d`); then `x * 2^k -> x << k`
//! (any integer type: exact modulo 2^n), and on unsigned types `x / 2^k -> x >> k` and
//! `x % 2^k -> x & (2^k - 1)`.

pub mod div;
pub mod iv;

use kiln_ir::{walk_mutate_expr, BinOp, Expr, ExprNode, Kernel, Mutator, Var};

fn log2_const(e: &Expr) -> Option<u32> {
    let v = e.as_imm()?.as_i128()?;
    (v > 0 && v & (v - 1) == 0).then(|| v.trailing_zeros())
}

struct Strength;

/// Only these operators are rewritten: a subtree without one (most of an unrolled kernel's
/// float arithmetic) comes back as it is, unwalked.
fn stays(e: &Expr) -> bool {
    ![BinOp::Mul, BinOp::Div, BinOp::Rem].iter().any(|&op| e.has_binary(op))
}

impl Mutator for Strength {
    fn mutate_stmt_changed(&mut self, s: &kiln_ir::Stmt) -> Option<kiln_ir::Stmt> {
        kiln_ir::walk_mutate_stmt_changed(self, s)
    }

    fn mutate_expr_changed(&mut self, e: &Expr) -> Option<Expr> {
        if stays(e) {
            return None;
        }
        let n = self.mutate_expr(e);
        (!n.ptr_eq(e)).then_some(n)
    }

    fn mutate_var_changed(&mut self, _: &Var) -> Option<Var> {
        None
    }

    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        if stays(e) {
            return e.clone();
        }
        let e = walk_mutate_expr(self, e);
        let ExprNode::Binary { op, a, b } = e.node() else { return e };
        let Some(ty) = e.ty().scalar().filter(|s| s.is_int()) else { return e };
        let k = |v: i128| Expr::int(ty, v);
        match (op, log2_const(b), log2_const(a)) {
            (BinOp::Mul, Some(s), _) if s > 0 => Expr::binary(BinOp::Shl, a.clone(), k(s as i128)),
            (BinOp::Mul, _, Some(s)) if s > 0 => Expr::binary(BinOp::Shl, b.clone(), k(s as i128)),
            (BinOp::Div, Some(s), _) if ty.is_unsigned() => {
                Expr::binary(BinOp::Shr, a.clone(), k(s as i128))
            }
            (BinOp::Rem, Some(s), _) if ty.is_unsigned() => {
                Expr::binary(BinOp::And, a.clone(), k((1i128 << s) - 1))
            }
            _ => e,
        }
    }
}

/// Runs strength reduction: divisions of bounded dividends, induction variables, then
/// multiplications and unsigned divisions by powers of two.
pub fn strength(k: &Kernel) -> Kernel {
    let k = &kiln_ir::depth::bound_kernel(k);
    // Divisions first: the induction variables turn `let`s and counters, whose ranges the
    // division rule reads, into mutable variables, which have none.
    let k = div::lower_divisions(k);
    Strength.mutate_kernel(&iv::reduce_induction(&k))
}
