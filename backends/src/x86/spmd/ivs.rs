//! Induction variables of short loops as affine values of the counter, for the lanes.
//!
//! `-O`'s strength reduction (`kiln_passes::strength::iv`) turns `m[4 * r + e]` and
//! `c[16 * i + 4 * r + col]` inside constant loops into `var`s stepped once per iteration
//! (`var r_iv0 = 0; for r in 0 .. 4 { ... m[r_iv0 + e] ...; r_iv0 = r_iv0 + 4; }`). On
//! scalar code that saves a multiply; on the lanes it hides what the index is: a loop that
//! `short.rs` unrolls substitutes its counter, but a `var` read stays a `var` read, so a
//! private array's index is no constant (a gather and eight per-lane stores instead of one
//! row of the frame) and a buffer's is no longer `s * i + e`. Here, before the lanes' code
//! is generated, a read of such a variable inside a loop that `short.rs` would unroll is
//! replaced by `init + (counter - lo) * c`, which each copy folds (`m[8u32 + e]`, then
//! `m[9u32]` in the inner loop's copy).
//!
//! Why the value is the variable's: the variable `v` is declared `var v = init` earlier in
//! the loop's own block, nothing between the declaration and the loop assigns or binds
//! it again, and the loop body assigns it exactly once, `v = v + c` at its top level (`c` a
//! constant of `v`'s type), with no read of it after that statement in the body. `init` is
//! stable (no loads, nothing that can fail, only names never assigned anywhere in the
//! kernel), and none of its names is bound again between the declaration and the reads,
//! so it has its value at the declaration wherever it is read. The loop's step is 1, so in
//! iteration `k` the counter is `lo + k` (exactly: it never wraps) and `v`, read before
//! the increment, is `init + k * c` in the ring of `v`'s type, the counter's type too.
//! The increments stay, so `v` has its value after the loop as before, unless nothing
//! after the loop names `v`: then nothing reads it any more, and its declaration and
//! increment go.

use std::collections::HashMap;

use kiln_ir::{
    walk_mutate_stmt, walk_stmt, BinOp, Expr, ExprNode, Kernel, Mutator, Stmt, StmtNode, Var,
    Visitor,
};
use kiln_passes::util::{bound_names, free_names, is_stable, mutable_names};

/// The deepest start value copied into the reads.
const MAX_INIT_DEPTH: usize = 8;

/// The kernel with the induction variables of short loops read as affine values of their
/// counters (see the module docs); the same kernel where none qualifies.
pub(crate) fn affine_ivs(k: &Kernel) -> Kernel {
    let mutable = mutable_names(k.body());
    let mut r = Rewrite { mutable: &mutable, changed: false };
    let body = r.mutate_stmt(k.body());
    if r.changed {
        k.with_body(body)
    } else {
        k.clone()
    }
}

/// Rewrites every block's loops, outer ones first.
struct Rewrite<'a> {
    mutable: &'a hashbrown::HashSet<String>,
    changed: bool,
}

impl Mutator for Rewrite<'_> {
    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        let StmtNode::Block(list) = s.node() else { return walk_mutate_stmt(self, s) };
        let mut out = list.clone();
        let mut dead = Vec::new();
        for f in 0..out.len() {
            if let Some((new, gone)) = self.rewrite_loop(&out, f) {
                out[f] = new;
                dead.extend(gone);
                self.changed = true;
            }
        }
        let out: Vec<Stmt> = (out.iter().enumerate())
            .filter(|(d, _)| !dead.contains(d))
            .map(|(_, s)| self.mutate_stmt(s))
            .collect();
        if out.len() == list.len() && out.iter().zip(list).all(|(a, b)| a.ptr_eq(b)) {
            return s.clone();
        }
        Stmt::block(out)
    }
}

impl Rewrite<'_> {
    /// `list[f]` with the reads of the induction variables declared before it replaced, if
    /// it is a loop `short.rs` unrolls and has any, and the positions of the declarations
    /// that are then dead: a variable named nowhere after the loop, whose increment is then
    /// its only use, goes with its increment (its start is stable, so evaluating it did
    /// nothing but give the value).
    fn rewrite_loop(&self, list: &[Stmt], f: usize) -> Option<(Stmt, Vec<usize>)> {
        let s = &list[f];
        let StmtNode::For { var: counter, lo, step, body, .. } = s.node() else { return None };
        let lo = lo.as_imm()?.as_i128()?;
        if step.as_imm()?.as_i128()? != 1 || super::short::copies_of(s).is_none() {
            return None;
        }
        let ty = counter.ty().scalar().filter(|t| t.is_int())?;
        let mut stmts = body.stmts().to_vec();
        let (mut any, mut dead) = (false, Vec::new());
        for d in (0..f).rev() {
            let StmtNode::Decl { var, init } = list[d].node() else { continue };
            if var.ty() != counter.ty() || !self.stable_over(init, &list[d + 1..=f]) {
                continue;
            }
            if list[d + 1..f].iter().any(|x| mentions(x, var.name())) {
                continue;
            }
            if bound_names(s).contains_key(var.name()) {
                continue;
            }
            let Some((j, c)) = increment(&stmts, var) else { continue };
            let mut k = Expr::var(counter);
            if lo != 0 {
                k = Expr::binary(BinOp::Sub, k, Expr::int(ty, lo));
            }
            let value = Expr::binary(BinOp::Add, init.clone(), Expr::binary(BinOp::Mul, k, c));
            let mut sub =
                kiln_passes::util::Subst([(var.name().to_string(), value)].into_iter().collect());
            for x in &mut stmts[..j] {
                *x = sub.mutate_stmt(x);
            }
            if !list[f + 1..].iter().any(|x| mentions(x, var.name())) {
                stmts.remove(j);
                dead.push(d);
            }
            any = true;
        }
        let StmtNode::For { var, lo, hi, step, .. } = s.node() else { return None };
        let new = Stmt::for_(var, lo.clone(), hi.clone(), step.clone(), Stmt::block(stmts));
        any.then_some((new, dead))
    }

    /// True if `init` is stable and none of its names is bound again in `after` (the
    /// statements from its declaration's next to the loop, the loop included).
    fn stable_over(&self, init: &Expr, after: &[Stmt]) -> bool {
        // (A shallow one: it is copied into every read, deeper in each expression than the
        // name was, and `kiln_ir::depth` bounded the kernel's depths before.)
        if init.depth() > MAX_INIT_DEPTH || !is_stable(init, self.mutable) {
            return false;
        }
        let mut names = hashbrown::HashSet::new();
        free_names(init, &mut names);
        let bound: HashMap<String, usize> =
            after.iter().flat_map(|x| bound_names(x).into_iter()).collect();
        names.iter().all(|n| !bound.contains_key(n))
    }
}

/// The position of the body's one assignment to `v`, `v = v + c` at its top level with
/// `c` a constant of `v`'s type, and `c`, if that is the only one and nothing after it
/// names `v`.
fn increment(body: &[Stmt], v: &Var) -> Option<(usize, Expr)> {
    let name = v.name();
    let j = body
        .iter()
        .position(|x| matches!(x.node(), StmtNode::Assign { var, .. } if var.name() == name))?;
    let StmtNode::Assign { value, .. } = body[j].node() else { return None };
    let ExprNode::Binary { op: BinOp::Add, a, b } = value.node() else { return None };
    let is_v = |e: &Expr| matches!(e.node(), ExprNode::Var(x) if x.name() == name);
    let c = match (is_v(a), is_v(b)) {
        (true, false) => b,
        (false, true) => a,
        _ => return None,
    };
    if c.as_imm().and_then(|i| i.as_i128()).is_none() || c.ty() != v.ty() {
        return None;
    }
    if body[..j].iter().any(|x| assigns(x, name)) || body[j + 1..].iter().any(|x| mentions(x, name))
    {
        return None;
    }
    Some((j, c.clone()))
}

/// True if `s` assigns or binds `name` anywhere.
fn assigns(s: &Stmt, name: &str) -> bool {
    let mut f = Finder { name, reads: false, found: false };
    f.visit_stmt(s);
    f.found
}

/// True if `s` reads, assigns or binds `name` anywhere.
fn mentions(s: &Stmt, name: &str) -> bool {
    let mut f = Finder { name, reads: true, found: false };
    f.visit_stmt(s);
    f.found
}

/// Looks for a name's assignments and bindings (and, with `reads`, its reads).
struct Finder<'a> {
    name: &'a str,
    reads: bool,
    found: bool,
}

impl Visitor for Finder<'_> {
    fn visit_expr(&mut self, e: &Expr) {
        if !self.reads || self.found {
            return;
        }
        let mut names = hashbrown::HashSet::new();
        free_names(e, &mut names);
        self.found = names.contains(self.name);
    }

    fn visit_stmt(&mut self, s: &Stmt) {
        match s.node() {
            StmtNode::Let { var, .. }
            | StmtNode::Decl { var, .. }
            | StmtNode::Assign { var, .. }
            | StmtNode::Alloc { var, .. }
            | StmtNode::For { var, .. }
            | StmtNode::Call { result: Some(var), .. }
                if var.name() == self.name =>
            {
                self.found = true
            }
            _ => {}
        }
        if !self.found {
            walk_stmt(self, s)
        }
    }
}
