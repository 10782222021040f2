//! Rewriting one entry's body into the fused kernel: parameter substitution (fused
//! parameters, constants, promoted arrays), renaming of every local binding to a name unique
//! in the fused kernel, and built-in remapping.

use hashbrown::{HashMap, HashSet};
use kiln_ir::{Expr, ExprNode, Imm, Mutator, Stmt, StmtNode, Var};

use super::internalize::wrap_index;
use super::remap::Remap;

/// What one parameter of an entry becomes.
#[derive(Clone, Debug)]
pub(crate) enum ParamSubst {
    /// A fused kernel parameter.
    Param(Var),
    /// A constant.
    Const(Imm),
    /// A promoted array of the given size.
    Array(Var, u32),
}

/// Hands out names unique within the fused kernel.
#[derive(Default)]
pub(crate) struct Names {
    used: HashSet<String>,
    /// Per base, the suffix to try next: every entry of a long chain asks for the same
    /// bases (`i`, `scale_x`), and trying `_1`, `_2`, ... from the start each time made a
    /// fusion of n entries take n^2 steps.
    next: HashMap<String, usize>,
}

impl Names {
    /// `base` if unused, else `base_1`, `base_2`, ...
    pub fn fresh(&mut self, base: &str) -> String {
        // The candidates are `base`, `base_1`, `base_2`, ...: start after the last one taken
        // (names are never released, so the ones before stay taken).
        let mut k = self.next.get(base).copied().unwrap_or(0);
        loop {
            let name = if k == 0 { base.to_string() } else { format!("{base}_{k}") };
            k += 1;
            // Every generated name must parse back: skip reserved words (a base taken from
            // the input is an identifier, so only the bare base can be one).
            if !self.used.contains(&name) && kiln_ir::parse::is_identifier(&name) {
                self.next.insert(base.to_string(), k);
                self.used.insert(name.clone());
                return name;
            }
        }
    }
}

/// The rewriter for one entry.
pub(crate) struct Rewriter<'a> {
    pub params: HashMap<String, ParamSubst>,
    /// The current binding of each original name: the renamed variable (kept whole, so each
    /// reference clones a handle instead of allocating a name).
    pub renames: HashMap<String, Var>,
    pub names: &'a mut Names,
    /// Built-in remapping; `None` keeps every built-in.
    pub remap: Option<Remap<'a>>,
}

impl Rewriter<'_> {
    fn rename(&mut self, v: &Var) -> Var {
        if let Some(n) = self.renames.get(v.name()) {
            if n.ty() == v.ty() {
                return n.clone();
            }
            return Var::new(n.name(), v.ty());
        }
        self.binder(v)
    }

    /// A new binding of a name: a re-bound name (after its scope ended) gets a fresh name
    /// too, which keeps every binding unique.
    fn binder(&mut self, v: &Var) -> Var {
        let n = self.names.fresh(v.name());
        let nv = if n == v.name() { v.clone() } else { Var::new(n, v.ty()) };
        self.renames.insert(v.name().to_string(), nv.clone());
        nv
    }
}

impl Mutator for Rewriter<'_> {
    fn mutate_var(&mut self, v: &Var) -> Var {
        match self.params.get(v.name()) {
            Some(ParamSubst::Param(p)) | Some(ParamSubst::Array(p, _)) => p.clone(),
            Some(ParamSubst::Const(_)) => v.clone(),
            None => self.rename(v),
        }
    }

    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        match e.node() {
            ExprNode::Var(v) => match self.params.get(v.name()) {
                Some(ParamSubst::Const(i)) => Expr::imm(*i),
                _ => kiln_ir::walk_mutate_expr(self, e),
            },
            ExprNode::Builtin { kind, dim } => self
                .remap
                .as_ref()
                .and_then(|r| r.builtin(*kind, *dim))
                .unwrap_or_else(|| e.clone()),
            ExprNode::Load { buf, index } => {
                if let Some(ParamSubst::Array(a, size)) = self.params.get(buf.name()).cloned() {
                    let i = self.mutate_expr(index);
                    Expr::load(&a, wrap_index(i, size))
                } else {
                    kiln_ir::walk_mutate_expr(self, e)
                }
            }
            _ => kiln_ir::walk_mutate_expr(self, e),
        }
    }

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        match s.node() {
            StmtNode::Store { buf, index, value } => {
                if let Some(ParamSubst::Array(a, size)) = self.params.get(buf.name()).cloned() {
                    let i = self.mutate_expr(index);
                    let v = self.mutate_expr(value);
                    return Stmt::store(&a, wrap_index(i, size), v);
                }
            }
            // Binders: the value is rewritten before the name is (re)bound.
            StmtNode::Let { var, value } => {
                let v = self.mutate_expr(value);
                let nv = self.binder(var);
                return Stmt::let_(&nv, v);
            }
            StmtNode::Decl { var, init } => {
                let v = self.mutate_expr(init);
                let nv = self.binder(var);
                return Stmt::decl(&nv, v);
            }
            StmtNode::Alloc { var, count } => {
                let nv = self.binder(var);
                return Stmt::alloc(&nv, *count);
            }
            StmtNode::For { var, lo, hi, step, body } => {
                let (lo, hi, step) =
                    (self.mutate_expr(lo), self.mutate_expr(hi), self.mutate_expr(step));
                let saved = self.renames.get(var.name()).cloned();
                let nv = self.binder(var);
                let body = self.mutate_stmt(body);
                if let Some(old) = saved {
                    self.renames.insert(var.name().to_string(), old);
                }
                return Stmt::for_(&nv, lo, hi, step, body);
            }
            StmtNode::Block(stmts) => {
                // Names bound in a block end with it: restore the outer mapping afterwards.
                let saved = self.renames.clone();
                let out: Vec<Stmt> = stmts.iter().map(|x| self.mutate_stmt(x)).collect();
                self.renames = saved;
                return Stmt::block(out);
            }
            StmtNode::Call { result: Some(r), func, args } => {
                let args: Vec<Expr> = args.iter().map(|a| self.mutate_expr(a)).collect();
                let nr = self.binder(r);
                return Stmt::call_into(&nr, func.clone(), args);
            }
            _ => {}
        }
        kiln_ir::walk_mutate_stmt(self, s)
    }
}
