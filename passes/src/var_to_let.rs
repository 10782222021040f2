//! Single-assignment `var`s become `let`s: `var x: T = init; ...; x = v;` where the
//! assignment is the only one, sits in the declaration's own block, nothing between reads
//! `x`, and `init` cannot fail, becomes `...; let x: T = v;`. From then on every pass treats
//! `x` as an immutable value (CSE, let inlining, hoisting). Scalarized private arrays
//! (`scalarize`) are the typical source.
//!
//! Exact: no read sees `init`, and after the assignment `x` never changes, which is what a
//! `let` in the rest of the same block means. The name and its scope stay the same.

use hashbrown::HashMap;
use kiln_ir::{walk_mutate_stmt, walk_stmt, Kernel, Mutator, Stmt, StmtNode, Visitor};

use crate::simplify::may_fail;
use crate::util::count_uses;

/// Rewrites every qualifying `var` into a `let`.
pub fn var_to_let(k: &Kernel) -> Kernel {
    let k = &kiln_ir::depth::bound_kernel(k);
    let mut count = AssignCount::default();
    count.visit_stmt(k.body());
    if count.0.values().all(|&n| n != 1) {
        return k.clone();
    }
    VarToLet { assigns: count.0 }.mutate_kernel(k)
}

/// Assignments per variable name.
#[derive(Default)]
struct AssignCount(HashMap<String, usize>);

impl Visitor for AssignCount {
    fn visit_stmt(&mut self, s: &Stmt) {
        if let StmtNode::Assign { var, .. } = s.node() {
            *self.0.entry(var.name().to_string()).or_default() += 1;
        }
        walk_stmt(self, s)
    }
}

struct VarToLet {
    assigns: HashMap<String, usize>,
}

impl VarToLet {
    /// For the declaration at `d`, the index of the assignment that can become its `let`.
    fn single_assignment(&self, stmts: &[Stmt], d: usize) -> Option<usize> {
        let StmtNode::Decl { var, init } = stmts[d].node() else { return None };
        if self.assigns.get(var.name()) != Some(&1) || may_fail(init) {
            return None;
        }
        let a = d
            + 1
            + stmts[d + 1..].iter().position(
                |s| matches!(s.node(), StmtNode::Assign { var: v, .. } if v.name() == var.name()),
            )?;
        // Nothing in between reads it, nor does the assigned value (`x = x + 1`).
        (count_uses(&stmts[d + 1..=a], var.name()) == 1).then_some(a)
    }
}

impl Mutator for VarToLet {
    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        let s = walk_mutate_stmt(self, s);
        let StmtNode::Block(stmts) = s.node() else { return s };
        let mut out = stmts.clone();
        let mut changed = false;
        let mut d = 0;
        while d < out.len() {
            if let Some(a) = self.single_assignment(&out, d) {
                if let StmtNode::Assign { var, value } = out[a].node() {
                    out[a] = Stmt::let_(var, value.clone());
                    out.remove(d);
                    changed = true;
                    continue;
                }
            }
            d += 1;
        }
        if changed {
            Stmt::block(out)
        } else {
            s
        }
    }
}
