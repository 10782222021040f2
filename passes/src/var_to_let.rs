//! Single-assignment `var`s become `let`s: `var x: T = init; ...; x = v;` where the
//! assignment is the only one, sits in the declaration's own block, nothing between reads
//! `x`, and `init` cannot fail, becomes `...; let x: T = v;`. From then on every pass treats
//! `x` as an immutable value (CSE, let inlining, hoisting). Scalarized private arrays
//! (`scalarize`) are the typical source.
//!
//! Exact: no read sees `init`, and after the assignment `x` never changes, which is what a
//! `let` in the rest of the same block means. The name and its scope stay the same.

use hashbrown::{HashMap, HashSet};
use kiln_ir::{walk_mutate_stmt, walk_stmt, Expr, Kernel, Mutator, Stmt, StmtNode, Visitor};

#[cfg(doc)]
use crate::util::count_uses;
use crate::util::for_each_reference;

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
    // Assignments are statements: expressions need no walk (it was most of this pass).
    fn visit_expr(&mut self, _: &Expr) {}
    fn visit_stmt(&mut self, s: &Stmt) {
        if let StmtNode::Assign { var, .. } = s.node() {
            // An accumulator is assigned many times: no `String` for a name already in.
            match self.0.get_mut(var.name()) {
                Some(n) => *n += 1,
                None => {
                    self.0.insert(var.name().to_string(), 1);
                }
            }
        }
        walk_stmt(self, s)
    }
}

struct VarToLet {
    assigns: HashMap<String, usize>,
}

impl VarToLet {
    /// For each declaration in `stmts` that can become a `let`, by index, the index of its
    /// assignment: the kernel's only assignment to it, later in the same block, with nothing
    /// in between reading it, nor the assigned value (`x = x + 1`). One walk of the block: a
    /// fused chain declares its promoted elements at the top and assigns each far below, so
    /// a walk per declaration took n^2 steps for n entries.
    fn single_assignments(&self, stmts: &[Stmt]) -> HashMap<usize, usize> {
        let mut decls: Vec<(usize, &str)> = Vec::new();
        let mut names: HashMap<&str, Uses> = HashMap::new();
        for (d, s) in stmts.iter().enumerate() {
            if let StmtNode::Decl { var, init } = s.node() {
                if self.assigns.get(var.name()) == Some(&1) && !init.may_fail() {
                    decls.push((d, var.name()));
                    names.entry(var.name()).or_default();
                }
            }
        }
        if decls.is_empty() {
            return HashMap::new();
        }
        // A declaration qualifies only with its assignment later in this block: when no
        // candidate has one, the walk of every reference in the block (the whole kernel, for
        // its top-level block) would find nothing.
        let assigned_here = stmts.iter().enumerate().any(|(i, s)| {
            matches!(s.node(), StmtNode::Assign { var, .. }
                if decls.iter().any(|&(d, n)| d < i && n == var.name()))
        });
        if !assigned_here {
            return HashMap::new();
        }
        for (i, s) in stmts.iter().enumerate() {
            if let StmtNode::Assign { var, .. } = s.node() {
                if let Some(u) = names.get_mut(var.name()) {
                    u.assigned_at.push(i);
                }
            }
            for_each_reference(s, &mut |name| {
                if let Some(u) = names.get_mut(name) {
                    match u.uses.last_mut() {
                        Some((at, n)) if *at == i => *n += 1,
                        _ => u.uses.push((i, 1)),
                    }
                }
            });
        }
        let mut out = HashMap::new();
        let mut taken = HashSet::new();
        for (d, name) in decls {
            let u = &names[name];
            let Some(&a) = u.assigned_at.iter().find(|&&a| a > d) else { continue };
            let between: usize =
                u.uses.iter().filter(|(i, _)| *i > d && *i <= a).map(|(_, n)| n).sum();
            // A second declaration of the name finds the assignment already a `let`.
            if between == 1 && taken.insert(a) {
                out.insert(d, a);
            }
        }
        out
    }
}

/// Where one name is assigned at the top level of a block, and used, per statement.
#[derive(Default)]
struct Uses {
    assigned_at: Vec<usize>,
    /// (statement, references to the name in it), as [`count_uses`] counts them.
    uses: Vec<(usize, usize)>,
}

impl Mutator for VarToLet {
    crate::util::statements_only!();

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        let s = walk_mutate_stmt(self, s);
        let StmtNode::Block(stmts) = s.node() else { return s };
        let lets = self.single_assignments(stmts);
        if lets.is_empty() {
            return s;
        }
        let assigns: HashSet<usize> = lets.values().copied().collect();
        let mut out = Vec::with_capacity(stmts.len() - lets.len());
        for (i, st) in stmts.iter().enumerate() {
            if lets.contains_key(&i) {
                continue;
            }
            match st.node() {
                StmtNode::Assign { var, value } if assigns.contains(&i) => {
                    out.push(Stmt::let_(var, value.clone()))
                }
                _ => out.push(st.clone()),
            }
        }
        Stmt::block(out)
    }
}
