//! Constant propagation: `let`s bound to constants, and `var`s initialized with a constant and
//! never assigned, are replaced by the constant in their scope; operators on constants are
//! folded with the interpreter's semantics; `if`s on constant conditions are resolved.

use hashbrown::HashMap;
use kiln_ir::{walk_mutate_stmt, Expr, Imm, Kernel, Mutator, Stmt, StmtNode};

use crate::util::{count_uses, Folder, Subst};

struct ConstProp;

fn assigned_in(stmts: &[Stmt], name: &str) -> bool {
    struct A<'a>(&'a str, bool);
    impl kiln_ir::Visitor for A<'_> {
        // Assignments are statements: expressions need no walk.
        fn visit_expr(&mut self, _: &kiln_ir::Expr) {}
        fn visit_stmt(&mut self, s: &Stmt) {
            if let StmtNode::Assign { var, .. } = s.node() {
                self.1 |= var.name() == self.0;
            }
            kiln_ir::walk_stmt(self, s)
        }
    }
    let mut a = A(name, false);
    stmts.iter().for_each(|s| kiln_ir::Visitor::visit_stmt(&mut a, s));
    a.1
}

/// Replaces `if`s on constant conditions by the branch taken.
struct ResolveIfs;

impl Mutator for ResolveIfs {
    // Statements only: expressions are left as they are, so they are not walked.
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        e.clone()
    }

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        let s = walk_mutate_stmt(self, s);
        match s.node() {
            StmtNode::If { cond, then, otherwise } => match cond.as_imm() {
                Some(Imm::Bool(true)) => then.clone(),
                Some(Imm::Bool(false)) => otherwise.clone().unwrap_or_else(|| Stmt::block([])),
                _ => s,
            },
            _ => s,
        }
    }
}

impl Mutator for ConstProp {
    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        let s = ResolveIfs.mutate_stmt(&Folder.mutate_stmt(&walk_mutate_stmt(self, s)));
        let StmtNode::Block(stmts) = s.node() else { return s };
        let mut out = stmts.clone();
        let mut changed = false;
        for i in 0..out.len() {
            let (var, value) = match out[i].node() {
                StmtNode::Let { var, value } => (var.clone(), value.clone()),
                StmtNode::Decl { var, init } if !assigned_in(&out[i + 1..], var.name()) => {
                    (var.clone(), init.clone())
                }
                _ => continue,
            };
            if value.as_imm().is_none() || count_uses(&out[i + 1..], var.name()) == 0 {
                continue;
            }
            let mut sub = Subst(HashMap::from([(var.name().to_string(), value)]));
            for t in &mut out[i + 1..] {
                *t = ResolveIfs.mutate_stmt(&Folder.mutate_stmt(&sub.mutate_stmt(t)));
            }
            changed = true;
        }
        if changed {
            Stmt::block(out)
        } else {
            s
        }
    }
}

/// Runs constant propagation until nothing more folds: a value that folds to a constant
/// only after propagation (`let b = 1 < 2;`) makes its uses foldable in the next round.
pub fn constprop(k: &Kernel) -> Kernel {
    let k = &kiln_ir::depth::bound_kernel(k);
    let mut k = k.clone();
    // Every changing round replaces a variable use or an operation by a constant, so this
    // ends; the bound only guards against a bug.
    for _ in 0..1000 {
        let next = ConstProp.mutate_kernel(&k);
        if next.ptr_eq(&k) {
            break;
        }
        k = next;
    }
    k
}
