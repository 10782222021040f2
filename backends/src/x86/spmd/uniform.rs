//! Which `var`s hold the same value in all eight lanes of a batch ("batch-uniform").
//!
//! A batch is eight consecutive work-items of one row, so everything but `global_id(0)`,
//! `local_id(0)` and what depends on them is the same in its lanes: scalar parameters,
//! constants, ids and sizes of the other dimensions, `group_id`, and values computed from
//! those (loads at a batch-uniform index included: all lanes read the same element at the
//! same time). This is finer than `kiln_passes::divergence`, which asks about a whole
//! work-group: `global_id(1)` is divergent there but uniform in a batch, which is what
//! makes a 2-D stencil's row accesses contiguous.
//!
//! A `var` is batch-uniform when its initial value and every assigned value are, and every
//! assignment sits under the same divergent control as the declaration (no divergent `if`
//! or `while` in between): then every lane that can observe the variable performs the same
//! assignments, so the code may assign all lanes at once, without a blend. The analysis
//! is by name (a divergent variable makes every variable of that name divergent), iterated
//! to a fixed point because a loop's later assignments can make its earlier values
//! divergent.

use std::collections::HashSet;

use kiln_ir::{Builtin, Expr, ExprNode, Kernel, Stmt, StmtNode};

/// One name in scope during the walk.
struct Entry {
    name: String,
    uniform: bool,
    /// For `var`s, the divergent-control depth of the declaration.
    decl: Option<usize>,
}

struct Walk<'a> {
    params: Vec<String>,
    div: &'a mut HashSet<String>,
    changed: bool,
    scope: Vec<Entry>,
}

/// The names of the `var`s that are not batch-uniform (see the module docs).
pub(super) fn divergent_vars(k: &Kernel) -> HashSet<String> {
    let mut div = HashSet::new();
    let params = k.params().iter().map(|p| p.name().to_string()).collect::<Vec<_>>();
    // Each round can only add names, so this ends; the bound is a safety net.
    for _ in 0..64 {
        let mut w = Walk { params: params.clone(), div: &mut div, changed: false, scope: vec![] };
        w.block(k.body().stmts(), 0);
        if !w.changed {
            break;
        }
    }
    div
}

/// True if `e`'s lanes are equal given the names in scope (see the module docs); mirrors
/// the code generator's `Kind::Uniform`.
pub(super) fn uniform(e: &Expr, is_uniform: &dyn Fn(&str) -> bool) -> bool {
    match e.node() {
        ExprNode::Imm(_) => true,
        ExprNode::Var(v) => is_uniform(v.name()),
        ExprNode::Builtin { kind: Builtin::GlobalId | Builtin::LocalId, dim: 0 } => false,
        ExprNode::Builtin { .. } => true,
        // The same element of the same memory: not of a private array (one per lane), and
        // as the code generator's `Kind` has it, of 32-bit elements only (narrower and
        // 64-bit loads fill the active lanes alone).
        ExprNode::Load { buf, index } => {
            is_uniform(buf.name())
                && uniform(index, is_uniform)
                && e.ty().scalar().is_some_and(|s| s.bits() == 32)
        }
        // Operations of uniform operands (comparisons, casts, intrinsics, selects
        // included): computed the same in every lane.
        ExprNode::Binary { .. }
        | ExprNode::Unary { .. }
        | ExprNode::Cast { .. }
        | ExprNode::Select { .. }
        | ExprNode::Intrinsic { .. } => operands(e).iter().all(|x| uniform(x, is_uniform)),
        _ => false,
    }
}

/// The operands of a unary, binary, cast, select or intrinsic node (none for others).
pub(super) fn operands(e: &Expr) -> Vec<&Expr> {
    match e.node() {
        ExprNode::Binary { a, b, .. } => vec![a, b],
        ExprNode::Unary { a, .. } | ExprNode::Cast { a, .. } => vec![a],
        ExprNode::Select { cond, a, b } => vec![cond, a, b],
        ExprNode::Intrinsic { args, .. } => args.iter().collect(),
        _ => vec![],
    }
}

/// True if condition `e` is the same in all lanes: comparisons of uniform values and
/// logic of such conditions.
pub(super) fn uniform_cond(e: &Expr, is_uniform: &dyn Fn(&str) -> bool) -> bool {
    match e.node() {
        ExprNode::Binary { op, a, b } if op.is_comparison() => {
            uniform(a, is_uniform) && uniform(b, is_uniform)
        }
        ExprNode::Binary { a, b, .. } => uniform_cond(a, is_uniform) && uniform_cond(b, is_uniform),
        ExprNode::Unary { a, .. } => uniform_cond(a, is_uniform),
        // `bool` names, constants, selects and casts.
        _ => uniform(e, is_uniform),
    }
}

impl Walk<'_> {
    fn is_uniform(&self, name: &str) -> bool {
        match self.scope.iter().rev().find(|e| e.name == name) {
            Some(e) => e.uniform && (e.decl.is_none() || !self.div.contains(name)),
            None => self.params.iter().any(|p| p == name),
        }
    }

    fn expr(&self, e: &Expr) -> bool {
        uniform(e, &|n| self.is_uniform(n))
    }

    fn cond(&self, e: &Expr) -> bool {
        uniform_cond(e, &|n| self.is_uniform(n))
    }

    fn mark(&mut self, name: &str) {
        if self.div.insert(name.to_string()) {
            self.changed = true;
        }
    }

    fn block(&mut self, stmts: &[Stmt], dctl: usize) {
        let mark = self.scope.len();
        for s in stmts {
            self.stmt(s, dctl);
        }
        self.scope.truncate(mark);
    }

    fn stmt(&mut self, s: &Stmt, dctl: usize) {
        match s.node() {
            StmtNode::Let { var, value } => {
                let u = self.expr(value);
                self.scope.push(Entry { name: var.name().to_string(), uniform: u, decl: None });
            }
            StmtNode::Decl { var, init } => {
                let u = self.expr(init);
                if !u {
                    self.mark(var.name());
                }
                let name = var.name().to_string();
                self.scope.push(Entry { name, uniform: u, decl: Some(dctl) });
            }
            StmtNode::Assign { var, value } => {
                let decl =
                    self.scope.iter().rev().find(|e| e.name == var.name()).and_then(|e| e.decl);
                if !self.expr(value) || decl != Some(dctl) {
                    self.mark(var.name());
                }
            }
            StmtNode::If { cond, then, otherwise } => {
                let d = dctl + usize::from(!self.cond(cond));
                self.block(then.stmts(), d);
                if let Some(o) = otherwise {
                    self.block(o.stmts(), d);
                }
            }
            StmtNode::While { cond, body } => {
                let d = dctl + usize::from(!self.cond(cond));
                self.block(body.stmts(), d);
            }
            StmtNode::For { var, lo, hi, step, body } => {
                let u = self.expr(lo) && self.expr(hi) && self.expr(step);
                let mark = self.scope.len();
                self.scope.push(Entry { name: var.name().to_string(), uniform: u, decl: None });
                self.block(body.stmts(), dctl + usize::from(!u));
                self.scope.truncate(mark);
            }
            StmtNode::Block(v) => self.block(v, dctl),
            StmtNode::Call { result: Some(r), .. } => {
                self.scope.push(Entry { name: r.name().to_string(), uniform: false, decl: None });
            }
            // A local array is the same memory in every lane, a private one is not.
            StmtNode::Alloc { var, .. } => {
                let uniform = matches!(var.ty(), kiln_ir::Type::Ptr(kiln_ir::AddrSpace::Local, _));
                self.scope.push(Entry { name: var.name().to_string(), uniform, decl: None });
            }
            _ => {}
        }
    }
}
