//! Full unrolling of constant-trip `for` loops: `for i: T in lo .. hi step s { body }` with
//! constant `lo`, `hi` and positive constant `s` becomes one block per iteration,
//! `{ let i: T = lo + n*s; body }`. Loops are unrolled innermost first, so a loop whose
//! inner loops were unrolled may be unrolled in turn.
//!
//! Exact: the interpreter evaluates `lo`, `hi` and `s` once and binds `i` to the same values
//! in the same order; each copy of the body is its own block, so its bindings end with it
//! as they did with the iteration. A loop is left alone when its trip count exceeds
//! [`MAX_TRIP`], when the unrolled code would exceed [`MAX_STATEMENTS`], and when its body
//! holds a barrier (the interpreter matches barriers by statement; copies are distinct
//! statements, which changes which work-items it considers to meet). Whether a loop is
//! unrolled depends only on the loop after its inner loops are processed, so a second run
//! changes nothing.

use kiln_ir::{walk_mutate_nested, walk_stmt, Expr, Kernel, Mutator, Stmt, StmtNode, Visitor};

/// Loops with more iterations than this are not unrolled.
pub const MAX_TRIP: i128 = 64;
/// Loops whose unrolled code would have more statements than this are not unrolled.
pub const MAX_STATEMENTS: usize = 1024;

/// Unrolls every qualifying loop of `k`; the same handle when there is none.
pub fn unroll(k: &Kernel) -> Kernel {
    let k = &kiln_ir::depth::bound_kernel(k);
    Unroll.mutate_kernel(k)
}

#[derive(Default)]
struct Size {
    stmts: usize,
    barrier: bool,
}

impl Visitor for Size {
    // Statements are counted: expressions need no walk.
    fn visit_expr(&mut self, _: &Expr) {}

    fn visit_stmt(&mut self, s: &Stmt) {
        self.stmts += 1;
        if s.barrier_fence().is_some() {
            self.barrier = true;
        }
        walk_stmt(self, s)
    }
}

fn constant(e: &Expr) -> Option<i128> {
    e.as_imm()?.as_i128()
}

struct Unroll;

impl Mutator for Unroll {
    crate::util::statements_only!();

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        let s = walk_mutate_nested(self, s);
        let StmtNode::For { var, lo, hi, step, body } = s.node() else { return s };
        let (Some(lo), Some(hi), Some(step)) = (constant(lo), constant(hi), constant(step)) else {
            return s;
        };
        let Some(ty) = var.ty().scalar() else { return s };
        if step <= 0 {
            // The interpreter reports a bad step even for an empty loop: keep it.
            return s;
        }
        let trip = if hi > lo { (hi - lo + step - 1) / step } else { 0 };
        if trip > MAX_TRIP {
            return s;
        }
        let mut size = Size::default();
        size.visit_stmt(body);
        if size.barrier || size.stmts.saturating_mul(trip as usize) > MAX_STATEMENTS {
            return s;
        }
        let copies = (0..trip).map(|n| {
            let mut stmts = vec![Stmt::let_(var, Expr::int(ty, lo + n * step))];
            stmts.extend(body.stmts().iter().cloned());
            Stmt::block(stmts)
        });
        Stmt::block(copies)
    }
}
