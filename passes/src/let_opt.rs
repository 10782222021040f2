//! Let optimization: removes unused `let`s whose value cannot fail, and inlines `let`s used
//! once (not inside a loop) or bound to a variable or constant, when the value is stable (no loads, cannot fail,
//! reads no mutable variable) so that evaluating it at the use gives the same value.

use hashbrown::{HashMap, HashSet};
use kiln_ir::{walk_mutate_stmt, Kernel, Mutator, Stmt, StmtNode};

use crate::simplify::may_fail;
use crate::util::{count_uses, count_uses_in_loops, is_stable, mutable_names, Subst};

struct LetOpt {
    mutable: HashSet<String>,
}

impl Mutator for LetOpt {
    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        let s = walk_mutate_stmt(self, s);
        let StmtNode::Block(stmts) = s.node() else { return s };
        let mut out: Vec<Stmt> = stmts.clone();
        let mut changed = false;
        let mut i = 0;
        while i < out.len() {
            if let StmtNode::Let { var, value } = out[i].node() {
                let (var, value) = (var.clone(), value.clone());
                let uses = count_uses(&out[i + 1..], var.name());
                if uses == 0 && !may_fail(&value) {
                    out.remove(i);
                    changed = true;
                    // An earlier let may have been used only here: look again from the start
                    // (every change removes a statement, so this ends).
                    i = 0;
                    continue;
                }
                let trivial = value.as_var().is_some() || value.as_imm().is_some();
                // A single use inside a loop is not inlined: that would undo hoisting.
                let single = uses == 1 && count_uses_in_loops(&out[i + 1..], var.name()) == 0;
                if (single || trivial) && is_stable(&value, &self.mutable) {
                    let mut sub = Subst(HashMap::from([(var.name().to_string(), value)]));
                    let rest: Vec<Stmt> = out[i + 1..].iter().map(|t| sub.mutate_stmt(t)).collect();
                    out.truncate(i);
                    out.extend(rest);
                    changed = true;
                    i = 0;
                    continue;
                }
            }
            i += 1;
        }
        if changed {
            Stmt::block(out)
        } else {
            s
        }
    }
}

/// Runs let optimization.
pub fn let_opt(k: &Kernel) -> Kernel {
    LetOpt { mutable: mutable_names(k.body()) }.mutate_kernel(k)
}
