//! Common subexpression elimination: once `let v = e;` has run, later occurrences of `e` in
//! its scope (as a whole expression or a subexpression) read `v` instead. Only stable values
//! (no loads, cannot fail, no mutable variables) are reused. Then repeated subexpressions
//! that no `let` binds get one ([`repeats`]).

mod inert;
mod names;
pub mod repeats;

use std::sync::Arc;

use kiln_ir::{
    walk_mutate_expr, walk_mutate_stmt_changed, Expr, ExprMap, ExprNode, Kernel, Mutator, Stmt,
    StmtNode, Var,
};

use crate::util::{is_stable, Mutable};
use inert::{Leaf, Leaves};

/// Variables and constants: nothing to gain by naming them again. Built-ins (leaves too)
/// are reused, so `let j = global_id(0)` after `let i = global_id(0)` becomes `i`.
fn is_plain_leaf(e: &Expr) -> bool {
    matches!(e.node(), ExprNode::Var(_) | ExprNode::Imm(_))
}

/// A value's binding: the variable and the depth of the block that bound it.
type Binding = (Expr, usize);

struct Cse {
    mutable: Mutable,
    /// The innermost binding of each value in scope, with the depth of the block that made
    /// it: one lookup per subexpression, where a map per block cost one per open block.
    bound: ExprMap<Binding>,
    /// Per open block, what its bindings replaced (to restore when it closes).
    undo: Vec<Vec<(Expr, Option<Binding>)>>,
    /// The class of every statement without nested statements walked, for the repeats half.
    leaves: Leaves,
    /// The class of the last statement [`Cse::mutate_stmt_changed`] was given, if a leaf.
    last: Option<Leaf>,
    /// The names starting with `cse` that the kernel binds ([`names::cse_names`], maybe
    /// more than once each), found on the walk that made `leaves`: the bindings this half
    /// makes read names but bind none, so they are the repeats half's too.
    taken: Vec<Arc<str>>,
}

impl Cse {
    /// The pass's state for kernel `k` (after `bound_kernel`).
    fn new(k: &Kernel) -> Cse {
        let (leaves, mutable, mut taken) = Leaves::for_body(k.body());
        let params = k.params().iter().filter(|p| p.name().starts_with("cse"));
        taken.extend(params.map(|p| p.name_arc().clone()));
        Cse { mutable, bound: ExprMap::new(), undo: Vec::new(), leaves, last: None, taken }
    }

    /// The binding of `e` in scope, if any: every bound value is stable, so it cannot fail,
    /// and a node that may is never looked up.
    fn lookup_node(&self, e: &Expr) -> Option<Expr> {
        if e.may_fail() {
            return None;
        }
        self.bound.get(e).map(|(v, _)| v.clone())
    }

    /// Binds `value` to `var` in the innermost block, unless that block bound it already.
    fn bind(&mut self, value: &Expr, var: Expr) {
        let depth = self.undo.len();
        if self.bound.get(value).is_some_and(|b| b.1 == depth) {
            return;
        }
        let old = self.bound.insert(value.clone(), (var, depth));
        if let Some(u) = self.undo.last_mut() {
            u.push((value.clone(), old));
        }
    }
}

impl Mutator for Cse {
    // The walks ask through the `*_changed` methods: a leaf, an inert statement or an
    // unchanged operand answers `None` without a handle cloned, compared and dropped (most
    // of an unrolled kernel's operands and statements).
    fn mutate_expr_changed(&mut self, e: &Expr) -> Option<Expr> {
        if is_plain_leaf(e) {
            return None;
        }
        // A binding is a variable, never the non-leaf `e` itself.
        if let Some(v) = self.lookup_node(e) {
            return Some(v);
        }
        let n = walk_mutate_expr(self, e);
        (!n.ptr_eq(e)).then_some(n)
    }

    fn mutate_var_changed(&mut self, _: &Var) -> Option<Var> {
        None
    }

    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        self.mutate_expr_changed(e).unwrap_or_else(|| e.clone())
    }

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        self.mutate_stmt_changed(s).unwrap_or_else(|| s.clone())
    }

    fn mutate_stmt_changed(&mut self, s: &Stmt) -> Option<Stmt> {
        let StmtNode::Block(stmts) = s.node() else {
            // `s` outlives the pass (the input kernel holds it): its class may be recorded.
            self.last = self.leaves.record(s, &self.mutable);
            if matches!(self.last, Some(Leaf::Inert | Leaf::Idle)) {
                // Nothing a binding could replace (see [`inert`]); most of unrolled code.
                return None;
            }
            return walk_mutate_stmt_changed(self, s);
        };
        self.undo.push(Vec::new());
        // Made only once a statement changes: most blocks keep every one.
        let mut out: Option<Vec<Stmt>> = None;
        for (i, t) in stmts.iter().enumerate() {
            let n = self.mutate_stmt_changed(t);
            if out.is_none() && n.is_some() {
                out = Some(stmts[..i].to_vec());
            }
            let same = n.is_none();
            let t2 = n.as_ref().unwrap_or(t);
            // An inert statement has no stable value but a variable or a constant.
            let inert = same && matches!(self.last, Some(Leaf::Inert | Leaf::Idle));
            if let StmtNode::Let { var, value } = t2.node() {
                if !inert && !is_plain_leaf(value) && is_stable(value, &self.mutable) {
                    self.bind(value, var.expr());
                }
            }
            if let Some(o) = &mut out {
                o.push(n.unwrap_or_else(|| t.clone()));
            }
        }
        for (value, old) in self.undo.pop().unwrap_or_default().into_iter().rev() {
            match old {
                Some(b) => self.bound.insert(value, b),
                None => self.bound.remove(&value),
            };
        }
        self.last = None;
        out.map(Stmt::block)
    }
}

/// Runs common subexpression elimination.
pub fn cse(k: &Kernel) -> Kernel {
    let k = &kiln_ir::depth::bound_kernel(k);
    let mut cse = Cse::new(k);
    let k2 = cse.mutate_kernel(k);
    // Reading a binding instead of an expression assigns nothing: the same mutable names.
    // Both `k` and `k2` hold every statement `leaves` names until this returns.
    repeats::bind_repeats_with(&k2, cse.mutable, cse.leaves, Some(cse.taken))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On every kernel of the examples and the pass filetests, the repeats half gives the
    /// same kernel reading the classes the let-based half recorded ([`Leaves`]) and the
    /// `cse` names it listed as finding every class and name itself (an empty table, a walk
    /// of the kernel), and the names listed are those [`names::cse_names`] finds. (That the pass's output is what it was before the
    /// table existed is checked by the pass filetests and on generated kernels.)
    #[test]
    fn recorded_leaf_classes_change_nothing() {
        let kernels = crate::util::repository_kernels();
        for (path, k) in &kernels {
            let k = &kiln_ir::depth::bound_kernel(k);
            let mut cse = Cse::new(k);
            let k2 = cse.mutate_kernel(k);
            let mutable = cse.mutable.clone();
            let names = names::cse_names(&k2);
            let taken: hashbrown::HashSet<String> =
                cse.taken.iter().map(|n| n.to_string()).collect();
            assert_eq!(taken, names, "{}", path.display());
            let with = repeats::bind_repeats_with(&k2, cse.mutable, cse.leaves, Some(cse.taken));
            let without = repeats::bind_repeats_with(&k2, mutable, Leaves::default(), None);
            assert_eq!(with.to_string(), without.to_string(), "{}", path.display());
        }
        assert!(kernels.len() > 50, "{} kernels", kernels.len());
    }

    /// A statement handle met again (an unrolled loop's copies share them) gets the class
    /// recorded for it the first time: CSE of a kernel whose copies share their statements
    /// is CSE of the same kernel with a copy of its own in each block.
    #[test]
    fn shared_statements_get_the_rewrite_copies_get() {
        let src = "kernel k(a: ptr<global, i32>, v: ptr<global, f32>, n: i32) {
  let i: i32 = global_id(0) as i32;
  var acc: i32 = 0;
  var s: f32 = 0.0;
  let w: f32x4 = vload4(v, i * 4);
  {
    let t: i32 = 0;
    acc = acc + (n * 4 + i);
    s = fma(extract(w, 0), extract(w, 1), s);
    a[i * 2 + 1] = acc + (n * 4 + i) + t;
  }
  {
    let t: i32 = 1;
    acc = acc + (n * 4 + i);
    s = fma(extract(w, 0), extract(w, 1), s);
    a[i * 2 + 1] = acc + (n * 4 + i) + t;
  }
  v[i] = s;
}";
        let k = kiln_ir::parse_module(src).expect("parses").kernels.remove(0);
        let StmtNode::Block(top) = k.body().node() else { panic!("a block") };
        let (StmtNode::Block(first), StmtNode::Block(second)) = (top[4].node(), top[5].node())
        else {
            panic!("two blocks")
        };
        // The second block keeps its own `let t` and takes the first block's other handles.
        let shared: Vec<Stmt> =
            [second[0].clone()].into_iter().chain(first[1..].to_vec()).collect();
        let mut body = top.to_vec();
        body[5] = Stmt::block(shared);
        let k2 = Kernel::new(k.name(), k.params().to_vec(), Stmt::block(body));
        assert_eq!(k2.to_string(), k.to_string());
        assert_eq!(cse(&k2).to_string(), cse(&k).to_string());
        assert_ne!(cse(&k).to_string(), k.to_string(), "CSE rewrites something");
    }

    /// On every repository kernel, the walks' question (`mutate_stmt_changed`) and the
    /// rebuilding entry (`mutate_stmt`) agree: `None` exactly where the body comes back as
    /// itself, and otherwise the same body. An answer of `None` for a statement that does
    /// change would drop a rewrite.
    #[test]
    fn changed_answers_agree_with_the_rebuilt_body() {
        let kernels = crate::util::repository_kernels();
        let mut changed = 0;
        for (path, k) in &kernels {
            let k = &kiln_ir::depth::bound_kernel(k);
            let rebuilt = Cse::new(k).mutate_stmt(k.body());
            let answer = Cse::new(k).mutate_stmt_changed(k.body());
            assert_eq!(answer.is_none(), rebuilt.ptr_eq(k.body()), "{}", path.display());
            if let Some(a) = answer {
                assert_eq!(a.to_string(), rebuilt.to_string(), "{}", path.display());
                changed += 1;
            }
        }
        assert!(changed > 0, "{changed} kernels changed");
    }
}
