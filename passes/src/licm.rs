//! Loop-invariant code hoisting: a `let` in a `for` body whose value is stable (no loads,
//! cannot fail, no mutable variables) and uses nothing bound inside the loop moves in front
//! of the loop; the hoisted lets and the loop are wrapped in a block of their own so the
//! names stay scoped as before.

use hashbrown::HashMap;
use kiln_ir::{walk_mutate_nested, Expr, Kernel, Mutator, Stmt, StmtNode};

use crate::util::{bound_names, expr_ref, is_stable, Mutable};

/// True if `e` refers to a name in `names` (as [`crate::util::free_names`] lists them),
/// found without making a set of its names for every `let` of every loop.
fn refers_to(e: &Expr, names: &HashMap<String, usize>) -> bool {
    expr_ref(e).is_some_and(|v| names.contains_key(v.name()))
        || e.children().iter().any(|c| refers_to(c, names))
}

struct Licm {
    mutable: Mutable,
}

impl Mutator for Licm {
    crate::util::statements_only!();

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        let s = walk_mutate_nested(self, s);
        let StmtNode::For { var, lo, hi, step, body } = s.node() else { return s };
        // Only a stable `let` of the body moves: without one, the names the body binds (a
        // walk of all of it, for every loop) are not needed.
        let movable = |t: &Stmt| matches!(t.node(), StmtNode::Let { value, .. } if is_stable(value, &self.mutable));
        if !body.stmts().iter().any(movable) {
            return s;
        }
        let mut inner = bound_names(body);
        inner.insert(var.name().to_string(), 1);
        let mut hoisted = Vec::new();
        let mut kept = Vec::new();
        for t in body.stmts() {
            if let StmtNode::Let { var: v, value } = t.node() {
                if inner.get(v.name()) == Some(&1)
                    && is_stable(value, &self.mutable)
                    && !refers_to(value, &inner)
                {
                    inner.remove(v.name());
                    hoisted.push(t.clone());
                    continue;
                }
            }
            kept.push(t.clone());
        }
        if hoisted.is_empty() {
            return s;
        }
        let looped = Stmt::for_(var, lo.clone(), hi.clone(), step.clone(), Stmt::block(kept));
        hoisted.push(looped);
        Stmt::block(hoisted)
    }
}

/// Runs loop-invariant code hoisting.
pub fn licm(k: &Kernel) -> Kernel {
    let k = &kiln_ir::depth::bound_kernel(k);
    Licm { mutable: Mutable::of(k.body()) }.mutate_kernel(k)
}
