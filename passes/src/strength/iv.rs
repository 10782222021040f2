//! Induction-variable strength reduction: in `for i in lo .. hi step s { body }`, each
//! distinct `i * c` (or `c * i`), and `i * c + d` (or `d + i * c`), with `c` and `d`
//! loop-invariant, becomes a new mutable variable `v`:
//!
//! ```text
//! { let inc = s * c;            // a constant when s and c are
//!   var v = lo * c + d;
//!   for i in lo .. hi step s { body[i * c + d := v]; v = v + inc; } }
//! ```
//!
//! Why this is exact (the IR's loop semantics, `kiln_ir` crate docs and the interpreter's
//! `ForInit`/`ForNext`): `lo`, `hi` and `s` are evaluated once, before the first iteration;
//! the counter is immutable in the body (the verifier rejects assignments to it) and takes
//! the values `lo + k*s` exactly, without wrapping; there is no `break` or `continue`, so
//! the increment appended to the body runs after every iteration's uses. Integer `+` and
//! `*` wrap modulo 2^n, a ring, so `lo*c + d + k*(s*c) == (lo + k*s)*c + d` bit for bit, for
//! signed and unsigned types alike, even where the products wrap.
//!
//! What is evaluated before the loop must not change behaviour: `c`, `d`, `s` and `lo` are
//! required to be stable (no loads, cannot fail, no mutable variables), and `c`, `d` must
//! not use anything bound inside the loop. A `lo` that is not stable is bound by a `let`
//! right before the loop (evaluated once, first, as the loop itself would). The initial
//! value and the increment are computed even when the loop runs zero times, which is
//! harmless: they cannot fail.

use hashbrown::{HashMap, HashSet};
use kiln_ir::expr::name_bit;
use kiln_ir::{
    walk_mutate_expr, walk_mutate_stmt, walk_mutate_stmt_changed, BinOp, Expr, ExprMap, ExprNode,
    Kernel, Mutator, Stmt, StmtNode, Type, Var,
};

use crate::simplify::simplify_expr;
use crate::util::{bound_names, free_names, is_stable, mutable_names, names_where};

/// One reduced form `i * c + d` (`d` absent for plain `i * c`) and its variable.
struct Induction {
    c: Expr,
    d: Option<Expr>,
    var: Var,
}

/// Replaces the reducible forms in one loop body, collecting them.
struct Replace<'a> {
    counter: &'a Var,
    /// The counter's [`name_bit`].
    counter_bit: u64,
    inner: &'a HashMap<String, usize>,
    mutable: &'a HashSet<String>,
    names: &'a mut HashSet<String>,
    found: Vec<Induction>,
    index: ExprMap<usize>,
}

impl Replace<'_> {
    fn invariant(&self, e: &Expr) -> bool {
        let mut names = HashSet::new();
        free_names(e, &mut names);
        is_stable(e, self.mutable)
            && !names.contains(self.counter.name())
            && names.iter().all(|n| !self.inner.contains_key(n))
    }

    /// `c` if `e` is `i * c` or `c * i` with `c` invariant and not a trivial factor.
    fn factor(&self, e: &Expr) -> Option<Expr> {
        let ExprNode::Binary { op: BinOp::Mul, a, b } = e.node() else { return None };
        let is_counter = |x: &Expr| x.as_var().is_some_and(|v| v == self.counter);
        let c = if is_counter(a) {
            b
        } else if is_counter(b) {
            a
        } else {
            return None;
        };
        // Multiplying by 0 or 1 is the simplifier's job, not a new variable's.
        let trivial = c.as_imm().and_then(|k| k.as_i128()).is_some_and(|v| v == 0 || v == 1);
        (!trivial && self.invariant(c)).then(|| c.clone())
    }

    fn reduce(&mut self, c: Expr, d: Option<Expr>) -> Expr {
        // One variable per (c, d), however the product and sum are written.
        let key = Expr::binary(BinOp::Mul, self.counter.expr(), c.clone());
        let key = d.as_ref().map_or(key.clone(), |d| Expr::binary(BinOp::Add, key, d.clone()));
        if let Some(&n) = self.index.get(&key) {
            return self.found[n].var.expr();
        }
        let mut k = 0;
        let name = loop {
            let n = format!("{}_iv{k}", self.counter.name());
            if !self.names.contains(&n) {
                break n;
            }
            k += 1;
        };
        self.names.insert(name.clone());
        let var = Var::new(&name, self.counter.ty());
        self.index.insert(key, self.found.len());
        self.found.push(Induction { c, d, var: var.clone() });
        var.expr()
    }
}

impl Replace<'_> {
    /// Every reducible form has a multiplication by the counter: a subtree without a
    /// multiplication, or without the counter's name, stays, unwalked.
    fn stays(&self, e: &Expr) -> bool {
        !e.has_binary(BinOp::Mul) || e.name_bits() & self.counter_bit == 0
    }
}

impl Mutator for Replace<'_> {
    fn mutate_stmt_changed(&mut self, s: &Stmt) -> Option<Stmt> {
        walk_mutate_stmt_changed(self, s)
    }

    fn mutate_expr_changed(&mut self, e: &Expr) -> Option<Expr> {
        if self.stays(e) {
            return None;
        }
        let n = self.mutate_expr(e);
        (!n.ptr_eq(e)).then_some(n)
    }

    fn mutate_var_changed(&mut self, _: &Var) -> Option<Var> {
        None
    }

    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        if self.stays(e) {
            return e.clone();
        }
        // Top-down, so `i * c + d` is seen whole before its `i * c`.
        if let ExprNode::Binary { op: BinOp::Add, a, b } = e.node() {
            for (m, d) in [(a, b), (b, a)] {
                if let Some(c) = self.factor(m) {
                    if self.invariant(d) {
                        return self.reduce(c, Some(d.clone()));
                    }
                }
            }
        }
        if let Some(c) = self.factor(e) {
            return self.reduce(c, None);
        }
        walk_mutate_expr(self, e)
    }
}

struct IvReduce {
    mutable: HashSet<String>,
    /// The kernel's names a fresh one could collide with ([`FRESH_PARTS`]), and those
    /// handed out.
    names: HashSet<String>,
    /// The blocks this pass made from loops (spliced into their parent block).
    made: Vec<Stmt>,
}

impl IvReduce {
    fn fresh(&mut self, base: &str) -> String {
        let mut k = 0;
        loop {
            let n = format!("{base}{k}");
            if self.names.insert(n.clone()) {
                return n;
            }
            k += 1;
        }
    }
}

impl Mutator for IvReduce {
    crate::util::statements_only!();

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        if let StmtNode::Block(stmts) = s.node() {
            // A reduced loop comes back as a block of its set-up and the loop: splice it into
            // the enclosing block (its names are fresh in the whole kernel, so they clash with
            // nothing there).
            let mut out = Vec::with_capacity(stmts.len());
            let mut changed = false;
            for t in stmts {
                let t2 = self.mutate_stmt(t);
                if t2.ptr_eq(t) {
                    out.push(t2);
                    continue;
                }
                changed = true;
                if self.made.iter().any(|m| m.ptr_eq(&t2)) {
                    out.extend(t2.stmts().iter().cloned());
                } else {
                    out.push(t2);
                }
            }
            return if changed { Stmt::block(out) } else { s.clone() };
        }
        // Inner loops first: their forms in the outer counter are then rewritten too.
        let s = walk_mutate_stmt(self, s);
        let StmtNode::For { var: i, lo, hi, step, body } = s.node() else { return s };
        let Type::Scalar(t) = i.ty() else { return s };
        if !t.is_int() || !is_stable(step, &self.mutable) {
            return s;
        }
        let inner = bound_names(body);
        let mut rep = Replace {
            counter: i,
            counter_bit: name_bit(i.name()),
            inner: &inner,
            mutable: &self.mutable,
            names: &mut self.names,
            found: Vec::new(),
            index: ExprMap::new(),
        };
        let new_body = rep.mutate_stmt(body);
        let found = std::mem::take(&mut rep.found);
        if found.is_empty() {
            return s;
        }
        // The new variables are assigned: no later (outer) loop may treat them as invariant.
        self.mutable.extend(found.iter().map(|f| f.var.name().to_string()));
        let mut pre = Vec::new();
        let lo = if is_stable(lo, &self.mutable) {
            lo.clone()
        } else {
            let v = Var::new(self.fresh(&format!("{}_lo", i.name())), i.ty());
            pre.push(Stmt::let_(&v, lo.clone()));
            v.expr()
        };
        let mut incs = Vec::new();
        for ind in &found {
            let init = Expr::binary(BinOp::Mul, lo.clone(), ind.c.clone());
            let init = match &ind.d {
                Some(d) => Expr::binary(BinOp::Add, init, d.clone()),
                None => init,
            };
            pre.push(Stmt::decl(&ind.var, simplify_expr(&init)));
            let inc = simplify_expr(&Expr::binary(BinOp::Mul, step.clone(), ind.c.clone()));
            let inc = if inc.as_imm().is_some() || inc.as_var().is_some() {
                inc
            } else {
                let v = Var::new(self.fresh(&format!("{}_inc", ind.var.name())), i.ty());
                pre.push(Stmt::let_(&v, inc));
                v.expr()
            };
            incs.push(Stmt::assign(&ind.var, Expr::binary(BinOp::Add, ind.var.expr(), inc)));
        }
        let mut stmts = new_body.stmts().to_vec();
        stmts.extend(incs);
        pre.push(Stmt::for_(i, lo, hi.clone(), step.clone(), Stmt::block(stmts)));
        let made = Stmt::block(pre);
        self.made.push(made.clone());
        made
    }
}

/// Text every fresh name of this pass contains: `{counter}_iv{k}`, `{counter}_lo{k}`,
/// `{var}_inc{k}`. Only the kernel's names that contain one can be one of them.
const FRESH_PARTS: [&str; 3] = ["_iv", "_lo", "_inc"];

/// Runs induction-variable strength reduction on every `for` loop of `k`.
pub fn reduce_induction(k: &Kernel) -> Kernel {
    reduce_with(k, names_where(k, |n| FRESH_PARTS.iter().any(|p| n.contains(p))))
}

/// [`reduce_induction`], avoiding `names` (at least the kernel's names that contain one of
/// [`FRESH_PARTS`]) for fresh ones.
fn reduce_with(k: &Kernel, names: HashSet<String>) -> Kernel {
    IvReduce { mutable: mutable_names(k.body()), names, made: Vec::new() }.mutate_kernel(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Avoiding only the names that contain a fresh name's text gives what avoiding every
    /// name gives: on every repository kernel, and on one whose names already take the
    /// first fresh names of each kind (so that the searches step past them).
    #[test]
    fn avoiding_the_names_with_fresh_text_is_avoiding_all() {
        let src = "kernel k(x: ptr<global, i32>, n: i32, i_iv0: i32) {
  let i_lo0: i32 = n * 2;
  var i_iv1_inc0: i32 = i_iv0;
  for i: i32 in x[0] + i_lo0 .. n * 64 step n {
    x[i * n + i_iv1_inc0] = i * 3;
    i_iv1_inc0 = i_iv1_inc0 + 1;
  }
}";
        let mut kernels = crate::util::repository_kernels();
        let clash = kiln_ir::parse_module(src).expect("parses").kernels.remove(0);
        kernels.push(("clash".into(), clash.clone()));
        let mut reduced = 0;
        for (path, k) in &kernels {
            let filtered = reduce_induction(k);
            let all = reduce_with(k, crate::util::all_names(k));
            assert_eq!(filtered.to_string(), all.to_string(), "{}", path.display());
            reduced += usize::from(!filtered.ptr_eq(k));
        }
        assert!(reduced > 1, "{reduced} kernels reduced");
        let out = reduce_induction(&clash).to_string();
        for name in ["i_lo1", "i_iv1", "i_iv1_inc1"] {
            assert!(out.contains(name), "`{name}` in\n{out}");
        }
    }
}
