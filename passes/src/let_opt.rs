//! Let optimization: removes unused `let`s whose value cannot fail, and inlines `let`s used
//! once (not inside a loop) or bound to a variable or constant, when the value is stable (no loads, cannot fail,
//! reads no mutable variable) so that evaluating it at the use gives the same value.
//!
//! Each block is handled in two linear sweeps instead of "find a change, start over" (which
//! was quadratic in the number of lets): a backward sweep drops dead lets, keeping counts of
//! the uses that follow each statement so that a let whose last user was dropped goes too;
//! then a forward sweep inlines, with substitutions applied lazily to later statements and
//! the use counts of the rest of the block kept up to date as values move into it. Inlining
//! never makes a let dead or a kept let inlinable (it only adds uses), so one sweep of each
//! reaches the same fixed point.
//!
//! Inlining stops where a value reaches half of [`MAX_EXPR_DEPTH`]: a chain of ten thousand
//! single-use lets becomes lets of bounded depth, not one expression ten thousand levels deep.

use std::rc::Rc;
use std::sync::Arc;

use hashbrown::{HashMap, HashSet};
use kiln_ir::depth::MAX_EXPR_DEPTH;
use kiln_ir::{walk_expr, walk_mutate_nested, walk_stmt, Expr, ExprNode, Kernel, Mutator, Stmt};
use kiln_ir::{StmtNode, Visitor};

use crate::simplify::may_fail;
use crate::util::{is_stable, mutable_names, Subst};

/// Deepest value inlined into its uses.
const MAX_INLINE_DEPTH: usize = MAX_EXPR_DEPTH / 2;

struct LetOpt {
    mutable: HashSet<String>,
    /// The names `let`s bind anywhere in the kernel: only their uses are ever asked for, so
    /// only they are counted (accumulators and buffers, most of a GEMM's references, not).
    /// The pass removes lets and never makes one, so this stays a superset.
    lets: HashSet<Arc<str>>,
    /// [`LetOpt::uses_of`] by statement (its address, with the statement kept alive so the
    /// address is not reused): each block's sweeps ask for the uses of every statement in
    /// it, and without this each nesting level walked its whole subtree again.
    cache: HashMap<usize, (Stmt, Rc<Uses>)>,
}

/// References by name (as a value, a load/store buffer or an assignment target, as
/// [`crate::util::count_uses`] counts them), all of them and those inside loop bodies, of
/// the names in [`LetOpt::lets`].
#[derive(Default)]
struct Uses {
    all: HashMap<Arc<str>, usize>,
    in_loops: HashMap<Arc<str>, usize>,
}

/// Adds `c` to `name`'s count in `m`; the key is the variable's own shared name, so a new
/// entry allocates nothing.
fn bump(m: &mut HashMap<Arc<str>, usize>, name: &Arc<str>, c: usize) {
    match m.get_mut(&**name) {
        Some(x) => *x += c,
        None => {
            m.insert(name.clone(), c);
        }
    }
}

impl Uses {
    fn of(s: &Stmt, lets: &HashSet<Arc<str>>) -> Uses {
        struct Count<'a>(&'a mut Uses, usize, &'a HashSet<Arc<str>>);
        impl Count<'_> {
            fn add(&mut self, name: &Arc<str>) {
                if !self.2.contains(&**name) {
                    return;
                }
                bump(&mut self.0.all, name, 1);
                if self.1 > 0 {
                    bump(&mut self.0.in_loops, name, 1);
                }
            }
        }
        impl Visitor for Count<'_> {
            fn visit_expr(&mut self, e: &Expr) {
                match e.node() {
                    ExprNode::Var(v)
                    | ExprNode::Load { buf: v, .. }
                    | ExprNode::VecLoad { buf: v, .. } => self.add(v.name_arc()),
                    _ => {}
                }
                walk_expr(self, e)
            }
            fn visit_stmt(&mut self, s: &Stmt) {
                match s.node() {
                    StmtNode::Store { buf: v, .. }
                    | StmtNode::VecStore { buf: v, .. }
                    | StmtNode::Assign { var: v, .. } => self.add(v.name_arc()),
                    StmtNode::For { lo, hi, step, body, .. } => {
                        // The bounds are evaluated once, before the loop.
                        [lo, hi, step].into_iter().for_each(|e| self.visit_expr(e));
                        self.1 += 1;
                        self.visit_stmt(body);
                        self.1 -= 1;
                        return;
                    }
                    StmtNode::While { .. } => {
                        // The condition is evaluated on every iteration: it is in the loop.
                        self.1 += 1;
                        walk_stmt(self, s);
                        self.1 -= 1;
                        return;
                    }
                    _ => {}
                }
                walk_stmt(self, s)
            }
        }
        let mut u = Uses::default();
        Count(&mut u, 0, lets).visit_stmt(s);
        u
    }

    fn add(&mut self, other: &Uses) {
        for (n, c) in &other.all {
            bump(&mut self.all, n, *c);
        }
        for (n, c) in &other.in_loops {
            bump(&mut self.in_loops, n, *c);
        }
    }

    /// [`Uses::add`] of `other`'s counts of `names` only.
    fn add_of(&mut self, other: &Uses, names: &HashSet<Arc<str>>) {
        self.merge_of(other, names, true);
    }

    /// Subtracts `other`'s counts of `names` (saturating at 0).
    fn sub_of(&mut self, other: &Uses, names: &HashSet<Arc<str>>) {
        self.merge_of(other, names, false);
    }

    /// Adds or subtracts `other`'s counts of `names`, walking the smaller of the two.
    fn merge_of(&mut self, other: &Uses, names: &HashSet<Arc<str>>, add: bool) {
        fn one(
            to: &mut HashMap<Arc<str>, usize>,
            from: &HashMap<Arc<str>, usize>,
            names: &HashSet<Arc<str>>,
            add: bool,
        ) {
            let mut apply = |n: &Arc<str>, c: usize| {
                if add {
                    bump(to, n, c);
                } else if let Some(x) = to.get_mut(&**n) {
                    *x = x.saturating_sub(c);
                }
            };
            if names.len() < from.len() {
                for n in names {
                    if let Some(&c) = from.get(&**n) {
                        apply(n, c);
                    }
                }
            } else {
                for (n, &c) in from {
                    if names.contains(&**n) {
                        apply(n, c);
                    }
                }
            }
        }
        one(&mut self.all, &other.all, names, add);
        one(&mut self.in_loops, &other.in_loops, names, add);
    }

    fn count(&self, name: &str) -> usize {
        self.all.get(name).copied().unwrap_or(0)
    }

    fn count_in_loops(&self, name: &str) -> usize {
        self.in_loops.get(name).copied().unwrap_or(0)
    }
}

/// The references inside an expression, by name.
fn expr_names(e: &Expr, lets: &HashSet<Arc<str>>) -> HashMap<Arc<str>, usize> {
    let mut u = Uses::of(&Stmt::let_(&kiln_ir::Var::new("_", e.ty()), e.clone()), lets);
    std::mem::take(&mut u.all)
}

/// The references in expressions `es` (none inside a loop).
fn exprs_uses<'a>(es: impl IntoIterator<Item = &'a Expr>, lets: &HashSet<Arc<str>>) -> Uses {
    let mut u = Uses::default();
    for e in es {
        for (n, c) in expr_names(e, lets) {
            bump(&mut u.all, &n, c);
        }
    }
    u
}

/// The names the `let`s of a block bind.
fn let_names(stmts: &[Stmt]) -> HashSet<Arc<str>> {
    let mut names = HashSet::new();
    for s in stmts {
        if let StmtNode::Let { var, .. } = s.node() {
            names.insert(var.name_arc().clone());
        }
    }
    names
}

impl LetOpt {
    /// [`Uses::of`] `s`, composed from the (cached) uses of its nested statements.
    fn uses_of(&mut self, s: &Stmt) -> Rc<Uses> {
        if let Some((_, u)) = self.cache.get(&s.addr()) {
            return u.clone();
        }
        let u = match s.node() {
            StmtNode::Block(v) => {
                let mut u = Uses::default();
                for t in v {
                    let c = self.uses_of(t);
                    u.add(&c);
                }
                u
            }
            StmtNode::If { cond, then, otherwise } => {
                let mut u = exprs_uses([cond], &self.lets);
                let t = self.uses_of(then);
                u.add(&t);
                if let Some(o) = otherwise {
                    let o = self.uses_of(o);
                    u.add(&o);
                }
                u
            }
            StmtNode::For { lo, hi, step, body, .. } => {
                // The bounds are evaluated once, before the loop; the body in it.
                let mut u = exprs_uses([lo, hi, step], &self.lets);
                let b = self.uses_of(body);
                for (n, c) in &b.all {
                    bump(&mut u.all, n, *c);
                    bump(&mut u.in_loops, n, *c);
                }
                u
            }
            // Statements without nested blocks (and any other kind): walked.
            _ => Uses::of(s, &self.lets),
        };
        let u = Rc::new(u);
        self.cache.insert(s.addr(), (s.clone(), u.clone()));
        u
    }

    /// Backward sweep: drops lets with no later use whose value cannot fail. Only the counts
    /// of `lets`, this block's lets, are ever read (the uses of other names, most of a big
    /// block's, need no counting).
    fn drop_dead(&mut self, stmts: &[Stmt], lets: &HashSet<Arc<str>>) -> (Vec<Stmt>, bool) {
        let mut rest = Uses::default();
        let mut kept = Vec::with_capacity(stmts.len());
        let mut changed = false;
        for s in stmts.iter().rev() {
            if let StmtNode::Let { var, value } = s.node() {
                if rest.count(var.name()) == 0 && !may_fail(value) {
                    changed = true;
                    continue;
                }
            }
            let u = self.uses_of(s);
            rest.add_of(&u, lets);
            kept.push(s.clone());
        }
        kept.reverse();
        (kept, changed)
    }

    /// Forward sweep: inlines single-use (outside loops) and trivial stable lets. `lets`
    /// holds (at least) the names the lets of `stmts` bind.
    fn inline(&mut self, stmts: Vec<Stmt>, lets: &HashSet<Arc<str>>) -> (Vec<Stmt>, bool) {
        let mut uses: Vec<Rc<Uses>> = stmts.iter().map(|s| self.uses_of(s)).collect();
        // Uses in the statements after the current one, as they will be after substitution:
        // those of this block's lets, the only ones read (a value refers only to names bound
        // before it, so what an inlined value moves never reaches a later let either).
        let mut rest = Uses::default();
        uses.iter().for_each(|u| rest.add_of(u, lets));
        let mut sub = Subst(HashMap::new());
        let mut out = Vec::with_capacity(stmts.len());
        let mut changed = false;
        for (s, u) in stmts.into_iter().zip(uses.iter_mut()) {
            // Only a statement that refers to a substituted name changes (a walk of every
            // later statement's expressions was much of this pass's time).
            let refers = || u.all.keys().any(|n| sub.0.contains_key(&**n));
            let s2 = if sub.0.is_empty() || !refers() { s.clone() } else { sub.mutate_stmt(&s) };
            if !s2.ptr_eq(&s) {
                *u = self.uses_of(&s2);
            }
            rest.sub_of(u, lets);
            if let StmtNode::Let { var, value } = s2.node() {
                let n = rest.count(var.name());
                let trivial = value.as_var().is_some() || value.as_imm().is_some();
                // A single use inside a loop is not inlined: that would undo hoisting.
                let single = n == 1 && rest.count_in_loops(var.name()) == 0;
                if (trivial || single && value.depth() < MAX_INLINE_DEPTH)
                    && is_stable(value, &self.mutable)
                {
                    // The value's references move to the uses of `var`.
                    let mut moved = Uses::default();
                    let loops = rest.count_in_loops(var.name());
                    for (name, c) in expr_names(value, &self.lets) {
                        moved.in_loops.insert(name.clone(), c * loops);
                        moved.all.insert(name, c * n);
                    }
                    rest.add_of(&moved, lets);
                    rest.all.remove(var.name());
                    rest.in_loops.remove(var.name());
                    sub.0.insert(var.name().to_string(), value.clone());
                    changed = true;
                    continue;
                }
            }
            changed |= !s2.ptr_eq(&s);
            out.push(s2);
        }
        (out, changed)
    }
}

impl Mutator for LetOpt {
    // Statements only: expressions hold no statements, and walking every one of them to
    // rebuild nothing was much of this pass's time.
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        e.clone()
    }

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        let s = walk_mutate_nested(self, s);
        let StmtNode::Block(stmts) = s.node() else { return s };
        if !stmts.iter().any(|t| matches!(t.node(), StmtNode::Let { .. })) {
            return s;
        }
        // One set for both sweeps: the inlining sweep sees a subset of these lets, and the
        // counts of the names of those dropped are never read there (no let of theirs is left).
        let lets = let_names(stmts);
        let (kept, dropped) = self.drop_dead(stmts, &lets);
        let (out, inlined) = self.inline(kept, &lets);
        if dropped || inlined {
            Stmt::block(out)
        } else {
            s
        }
    }
}

/// Runs let optimization.
pub fn let_opt(k: &Kernel) -> Kernel {
    let k = &kiln_ir::depth::bound_kernel(k);
    struct Lets(HashSet<Arc<str>>);
    impl Visitor for Lets {
        fn visit_expr(&mut self, _: &Expr) {}
        fn visit_stmt(&mut self, s: &Stmt) {
            if let StmtNode::Let { var, .. } = s.node() {
                self.0.insert(var.name_arc().clone());
            }
            walk_stmt(self, s)
        }
    }
    let mut lets = Lets(HashSet::new());
    lets.visit_stmt(k.body());
    LetOpt { mutable: mutable_names(k.body()), lets: lets.0, cache: HashMap::new() }
        .mutate_kernel(k)
}
