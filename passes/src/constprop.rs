//! Constant propagation: `let`s bound to constants, and `var`s initialized with a constant and
//! never assigned, are replaced by the constant in their scope; operators on constants are
//! folded with the interpreter's semantics; `if`s on constant conditions are resolved.
//!
//! One walk in program order with a scoped map of the constants in scope: a `let` whose value
//! folds to a constant is known to every later statement of its block at once, so one walk
//! reaches what rounds of "substitute, fold, repeat" reached (each of them walked the rest of
//! the block for every constant, quadratic on the long blocks of unrolled kernels).

use hashbrown::{HashMap, HashSet};
use kiln_ir::expr::name_bit;
use kiln_ir::{
    walk_mutate_expr, walk_mutate_stmt, Expr, ExprNode, Imm, Kernel, Mutator, Stmt, Var,
};
use kiln_ir::{StmtNode, Visitor};

use crate::util::fold_node;

struct ConstProp<'a> {
    /// The constants in scope, by name.
    env: HashMap<String, Imm>,
    /// The [`name_bit`]s of every name ever bound to a constant in this walk: most
    /// references (an unrolled kernel's accumulators and vector lanes) are to names never in
    /// `env`, and a subtree whose [`Expr::name_bits`] share none refers to no constant.
    ever_bits: u64,
    /// What each binding replaced, undone when its scope ends.
    undo: Vec<(String, Option<Imm>)>,
    /// Names assigned anywhere in the kernel: a `var` of such a name is never a constant.
    assigned: &'a HashSet<String>,
    /// Whether an `if` on a constant condition was resolved (only that removes statements,
    /// and with them perhaps the last assignment of some `var`).
    resolved: bool,
}

impl ConstProp<'_> {
    /// Binds `name` to `value` (a constant, or `None`: no longer a known constant) for the
    /// rest of the current scope.
    fn bind(&mut self, name: &str, value: Option<Imm>) {
        let old = match value {
            Some(v) => {
                self.ever_bits |= name_bit(name);
                self.env.insert(name.to_string(), v)
            }
            None if self.ever_bits & name_bit(name) != 0 && self.env.contains_key(name) => {
                self.env.remove(name)
            }
            None => return,
        };
        self.undo.push((name.to_string(), old));
    }

    /// Ends the scopes opened since `mark`.
    fn restore(&mut self, mark: usize) {
        while self.undo.len() > mark {
            let Some((name, old)) = self.undo.pop() else { break };
            match old {
                Some(v) => self.env.insert(name, v),
                None => self.env.remove(&name),
            };
        }
    }

    /// `s` in a scope of its own.
    fn scoped(&mut self, s: &Stmt) -> Stmt {
        let mark = self.undo.len();
        let r = self.mutate_stmt(s);
        self.restore(mark);
        r
    }
}

impl Mutator for ConstProp<'_> {
    fn mutate_expr_changed(&mut self, e: &Expr) -> Option<Expr> {
        if e.name_bits() & self.ever_bits == 0 && !e.has_constant_operands() {
            return None;
        }
        let n = self.mutate_expr(e);
        (!n.ptr_eq(e)).then_some(n)
    }

    fn mutate_var_changed(&mut self, _: &Var) -> Option<Var> {
        None
    }

    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        // Nothing to substitute and nothing to fold: the walk below would give `e` back
        // (an unrolled kernel's `fma`s, most of it, are such trees).
        if e.name_bits() & self.ever_bits == 0 && !e.has_constant_operands() {
            return e.clone();
        }
        if let ExprNode::Var(v) = e.node() {
            return match self.env.get(v.name()) {
                Some(k) => Expr::imm(*k),
                None => e.clone(),
            };
        }
        let e2 = walk_mutate_expr(self, e);
        match fold_node(&e2) {
            Some(imm) if e2.ty().scalar() == Some(imm.scalar()) => Expr::imm(imm),
            _ => e2,
        }
    }

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        match s.node() {
            StmtNode::Block(stmts) => {
                let mark = self.undo.len();
                let out: Vec<Stmt> = stmts.iter().map(|t| self.mutate_stmt(t)).collect();
                self.restore(mark);
                if out.iter().zip(stmts).all(|(a, b)| a.ptr_eq(b)) {
                    s.clone()
                } else {
                    Stmt::block(out)
                }
            }
            StmtNode::Let { var, value } => {
                let v2 = self.mutate_expr(value);
                self.bind(var.name(), v2.as_imm().copied());
                if v2.ptr_eq(value) {
                    s.clone()
                } else {
                    Stmt::let_(var, v2)
                }
            }
            StmtNode::Decl { var, init } => {
                let i2 = self.mutate_expr(init);
                let k = i2.as_imm().copied().filter(|_| !self.assigned.contains(var.name()));
                self.bind(var.name(), k);
                if i2.ptr_eq(init) {
                    s.clone()
                } else {
                    Stmt::decl(var, i2)
                }
            }
            StmtNode::If { cond, then, otherwise } => {
                let c2 = self.mutate_expr(cond);
                match c2.as_imm() {
                    Some(Imm::Bool(true)) => {
                        self.resolved = true;
                        return self.mutate_stmt(then);
                    }
                    Some(Imm::Bool(false)) => {
                        self.resolved = true;
                        return match otherwise {
                            Some(o) => self.mutate_stmt(o),
                            None => Stmt::block([]),
                        };
                    }
                    _ => {}
                }
                let t2 = self.scoped(then);
                let o2 = otherwise.as_ref().map(|o| self.scoped(o));
                let same_o = match (&o2, otherwise) {
                    (Some(a), Some(b)) => a.ptr_eq(b),
                    _ => true,
                };
                if c2.ptr_eq(cond) && t2.ptr_eq(then) && same_o {
                    s.clone()
                } else {
                    Stmt::new(StmtNode::If { cond: c2, then: t2, otherwise: o2 })
                }
            }
            StmtNode::For { var, lo, hi, step, body } => {
                let (lo2, hi2, st2) =
                    (self.mutate_expr(lo), self.mutate_expr(hi), self.mutate_expr(step));
                let mark = self.undo.len();
                self.bind(var.name(), None);
                let b2 = self.mutate_stmt(body);
                self.restore(mark);
                if lo2.ptr_eq(lo) && hi2.ptr_eq(hi) && st2.ptr_eq(step) && b2.ptr_eq(body) {
                    s.clone()
                } else {
                    Stmt::for_(var, lo2, hi2, st2, b2)
                }
            }
            StmtNode::While { .. } => {
                let mark = self.undo.len();
                let r = walk_mutate_stmt(self, s);
                self.restore(mark);
                r
            }
            StmtNode::Alloc { var, .. } => {
                self.bind(var.name(), None);
                s.clone()
            }
            StmtNode::Call { result: Some(var), .. } => {
                let r = walk_mutate_stmt(self, s);
                self.bind(var.name(), None);
                r
            }
            _ => walk_mutate_stmt(self, s),
        }
    }
}

/// The names assigned anywhere in `s`.
fn assigned_names(s: &Stmt) -> HashSet<String> {
    struct A(HashSet<String>);
    impl Visitor for A {
        // Assignments are statements: expressions need no walk.
        fn visit_expr(&mut self, _: &Expr) {}
        fn visit_stmt(&mut self, s: &Stmt) {
            // Accumulators are assigned many times: no `String` for a name already in.
            if let StmtNode::Assign { var, .. } = s.node() {
                if !self.0.contains(var.name()) {
                    self.0.insert(var.name().to_string());
                }
            }
            kiln_ir::walk_stmt(self, s)
        }
    }
    let mut a = A(HashSet::new());
    a.visit_stmt(s);
    a.0
}

/// Runs constant propagation: afterwards nothing more folds.
pub fn constprop(k: &Kernel) -> Kernel {
    let k = &kiln_ir::depth::bound_kernel(k);
    let walk = |k: &Kernel, assigned: &HashSet<String>| {
        let mut c = ConstProp {
            env: HashMap::new(),
            ever_bits: 0,
            undo: Vec::new(),
            assigned,
            resolved: false,
        };
        (c.mutate_kernel(k), c.resolved)
    };
    let mut k = k.clone();
    let mut assigned = assigned_names(k.body());
    // One walk reaches the fixed point (see the module docs) unless it removed the last
    // assignment of some `var` (in a branch it resolved): that `var` is a constant for the
    // next walk. Otherwise no second walk is needed to confirm it (that walk was half of
    // this pass's time on an unrolled GEMM); debug builds, and with them every test, still
    // check that it would change nothing. The bound only guards against a bug.
    for _ in 0..100 {
        let (next, resolved) = walk(&k, &assigned);
        if next.ptr_eq(&k) {
            break;
        }
        k = next;
        // Without a resolved `if` every assignment is still there: the same names, not
        // collected again.
        debug_assert!(resolved || assigned_names(k.body()) == assigned);
        let now = resolved.then(|| assigned_names(k.body())).filter(|now| *now != assigned);
        let Some(now) = now else {
            if cfg!(debug_assertions) {
                let (again, _) = walk(&k, &assigned);
                debug_assert!(
                    again.ptr_eq(&k),
                    "constprop: a second walk changed the result of the first:\n{k}\n=>\n{again}"
                );
            }
            break;
        };
        assigned = now;
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Subtrees are skipped only where nothing substitutes or folds: an operator on
    /// constants with no constant's name around it still folds, and a constant's name deep
    /// in a tree of other names is still replaced.
    #[test]
    fn skipping_subtrees_keeps_every_fold_and_substitution() {
        let src = "kernel k(x: ptr<global, i32>, y: i32) {
            var acc: i32 = 0;
            acc = acc + y * (2 + 3);
            let kk: i32 = 4;
            x[acc * y + (y - kk)] = acc;
        }";
        let k = kiln_ir::parse_module(src).expect("parses").kernels.remove(0);
        let out = constprop(&k).to_string();
        assert!(out.contains("acc + y * 5"), "`2 + 3` should fold:\n{out}");
        assert!(out.contains("(y - 4)"), "`kk` should be replaced:\n{out}");
    }

    #[test]
    fn a_var_whose_only_assignment_a_resolved_branch_removed_becomes_a_constant() {
        // The first walk drops `v = 2.0` (its `if` is false) after `v` was taken for
        // assigned: the pass must walk again, so that `v` is propagated too.
        let src = "kernel k(x: ptr<global, f32>) {
            let c: bool = 1 > 2;
            var v: f32 = 1.0;
            if c { v = 2.0; }
            x[0] = v;
        }";
        let k = kiln_ir::parse_module(src).expect("parses").kernels.remove(0);
        let out = constprop(&k).to_string();
        assert!(out.contains("x[0] = 1.0;"), "`v` should be propagated:\n{out}");
        let once = constprop(&k);
        assert!(constprop(&once).ptr_eq(&once), "a fixed point:\n{once}");
    }
}
