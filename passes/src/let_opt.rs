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

use hashbrown::HashMap;
use hashbrown::HashSet;
use kiln_ir::depth::MAX_EXPR_DEPTH;
use kiln_ir::expr::name_bit;
use kiln_ir::{
    walk_expr, walk_mutate_expr, walk_mutate_nested, walk_mutate_stmt_changed, walk_stmt, Expr,
    ExprNode, Kernel, Mutator, Stmt, Var,
};
use kiln_ir::{StmtNode, Visitor};
use smallvec::SmallVec;

use crate::util::{expr_ref, is_stable, stmt_ref, Mutable, Subst};

/// Deepest value inlined into its uses.
const MAX_INLINE_DEPTH: usize = MAX_EXPR_DEPTH / 2;

struct LetOpt {
    mutable: Mutable,
    /// A number for each name a `let` binds anywhere in the kernel: only their uses are ever
    /// asked for, so only they are counted (accumulators and buffers, most of a GEMM's
    /// references, not), and counted by number, so that adding up the uses of a block's
    /// statements hashes no names. The pass removes lets and never makes one, so this stays
    /// a superset.
    ids: LetIds,
    /// [`LetOpt::uses_of`] by statement (its address, with the statement kept alive so the
    /// address is not reused): each block's sweeps ask for the uses of every statement in
    /// it, and without this each nesting level walked its whole subtree again.
    cache: HashMap<usize, (Stmt, Rc<Uses>)>,
    /// The uses in the rest of the block a sweep is in. Blocks are swept one at a time
    /// (nested blocks first, to the end), so one table serves them all; it is all zeros
    /// between sweeps.
    rest: Counts,
    /// Where [`LetOpt::uses_of`] adds up a statement's uses (never during another such sum:
    /// the nested statements' uses are found first).
    scratch: Counts,
}

/// References by let number (as a value, a load/store buffer or an assignment target, as
/// [`crate::util::count_uses`] counts them): `(id, all of them, those inside loop bodies)`,
/// each number at most once and never with no reference.
#[derive(Default)]
struct Uses(SmallVec<[(u32, u32, u32); 4]>);

/// Use counts by let number, all of them and those inside loops, with the numbers that may
/// be non-zero (so that clearing touches only those).
#[derive(Default)]
struct Counts {
    all: Vec<u32>,
    in_loops: Vec<u32>,
    touched: Vec<u32>,
}

impl Counts {
    fn new(n: usize) -> Counts {
        Counts { all: vec![0; n], in_loops: vec![0; n], touched: Vec::new() }
    }

    /// Adds `all` and `in_loops` references to `id`.
    fn add(&mut self, id: u32, all: u32, in_loops: u32) {
        let i = id as usize;
        if self.all[i] == 0 && self.in_loops[i] == 0 {
            self.touched.push(id);
        }
        self.all[i] += all;
        self.in_loops[i] += in_loops;
    }

    fn add_uses(&mut self, u: &Uses) {
        for &(id, a, l) in &u.0 {
            self.add(id, a, l);
        }
    }

    /// Subtracts `u`'s counts (saturating at 0).
    fn sub_uses(&mut self, u: &Uses) {
        for &(id, a, l) in &u.0 {
            let i = id as usize;
            self.all[i] = self.all[i].saturating_sub(a);
            self.in_loops[i] = self.in_loops[i].saturating_sub(l);
        }
    }

    fn count(&self, id: u32) -> usize {
        self.all[id as usize] as usize
    }

    fn count_in_loops(&self, id: u32) -> usize {
        self.in_loops[id as usize] as usize
    }

    /// Forgets the counts of `id`.
    fn remove(&mut self, id: u32) {
        self.all[id as usize] = 0;
        self.in_loops[id as usize] = 0;
    }

    /// The non-zero counts as [`Uses`], leaving every count zero.
    fn take(&mut self) -> Uses {
        let mut u = Uses::default();
        for id in self.touched.drain(..) {
            let i = id as usize;
            let (a, l) = (self.all[i], self.in_loops[i]);
            if a != 0 || l != 0 {
                u.0.push((id, a, l));
                self.all[i] = 0;
                self.in_loops[i] = 0;
            }
        }
        u
    }

    /// Sets every count to zero.
    fn clear(&mut self) {
        for id in self.touched.drain(..) {
            self.all[id as usize] = 0;
            self.in_loops[id as usize] = 0;
        }
    }

    /// Counts the references of `s` (everything nested in it: no [`LetOpt::uses_of`] cache),
    /// those inside a loop body of `s` also as in loops.
    fn count_stmt(&mut self, s: &Stmt, ids: &LetIds) {
        Count(self, 0, ids).visit_stmt(s);
    }

    /// Counts the references inside expressions `es` (none inside a loop).
    fn count_exprs<'a>(&mut self, es: impl IntoIterator<Item = &'a Expr>, ids: &LetIds) {
        let mut c = Count(self, 0, ids);
        es.into_iter().for_each(|e| c.visit_expr(e));
    }
}

/// The number of each let name, with a filter in front: most references of an unrolled
/// kernel (its accumulators) are to names no `let` binds, ruled out without hashing them.
#[derive(Default)]
struct LetIds {
    map: HashMap<Arc<str>, u32>,
    /// The [`name_bit`]s of the names in `map`.
    bits: u64,
}

impl LetIds {
    fn get(&self, name: &str) -> Option<u32> {
        if self.bits & name_bit(name) == 0 {
            return None;
        }
        self.map.get(name).copied()
    }
}

/// The walk of [`Counts::count_stmt`]: the counts, the number of loops around the node
/// visited, and the let numbers.
struct Count<'a>(&'a mut Counts, u32, &'a LetIds);

impl Count<'_> {
    fn add(&mut self, name: &Arc<str>) {
        if let Some(id) = self.2.get(name) {
            self.0.add(id, 1, u32::from(self.1 > 0));
        }
    }
}

impl Visitor for Count<'_> {
    fn visit_expr(&mut self, e: &Expr) {
        // A subtree that names no let (by its name filter) adds nothing: not walked.
        if e.name_bits() & self.2.bits == 0 {
            return;
        }
        if let Some(v) = expr_ref(e) {
            self.add(v.name_arc())
        }
        walk_expr(self, e)
    }
    fn visit_stmt(&mut self, s: &Stmt) {
        if let Some(v) = stmt_ref(s) {
            self.add(v.name_arc())
        }
        match s.node() {
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

impl LetOpt {
    /// The pass's state for kernel `k`: a number for each let name, no counts yet.
    fn new(k: &Kernel) -> LetOpt {
        struct Lets(LetIds, usize);
        impl Visitor for Lets {
            fn visit_expr(&mut self, _: &Expr) {}
            fn visit_stmt(&mut self, s: &Stmt) {
                self.1 += 1;
                if let StmtNode::Let { var, .. } = s.node() {
                    if !self.0.map.contains_key(&**var.name_arc()) {
                        let id = self.0.map.len() as u32;
                        self.0.map.insert(var.name_arc().clone(), id);
                        self.0.bits |= name_bit(var.name());
                    }
                }
                walk_stmt(self, s)
            }
        }
        let mut lets = Lets(LetIds::default(), 0);
        lets.visit_stmt(k.body());
        let n = lets.0.map.len();
        LetOpt {
            mutable: Mutable::of(k.body()),
            ids: lets.0,
            // Sized for every statement once: growing it rehashed it a dozen times.
            cache: HashMap::with_capacity(lets.1),
            rest: Counts::new(n),
            scratch: Counts::new(n),
        }
    }

    /// The references of `s`, composed from the (cached) uses of its nested statements.
    fn uses_of(&mut self, s: &Stmt) -> Rc<Uses> {
        if let Some((_, u)) = self.cache.get(&s.addr()) {
            return u.clone();
        }
        let u = match s.node() {
            StmtNode::Block(v) => {
                // The nested statements' uses first: finding them may sum in `scratch` too.
                let parts: Vec<Rc<Uses>> = v.iter().map(|t| self.uses_of(t)).collect();
                parts.iter().for_each(|p| self.scratch.add_uses(p));
                self.scratch.take()
            }
            StmtNode::If { cond, then, otherwise } => {
                let t = self.uses_of(then);
                let o = otherwise.as_ref().map(|o| self.uses_of(o));
                self.scratch.count_exprs([cond], &self.ids);
                self.scratch.add_uses(&t);
                if let Some(o) = o {
                    self.scratch.add_uses(&o);
                }
                self.scratch.take()
            }
            StmtNode::For { lo, hi, step, body, .. } => {
                // The bounds are evaluated once, before the loop; the body in it.
                let b = self.uses_of(body);
                self.scratch.count_exprs([lo, hi, step], &self.ids);
                for &(id, a, _) in &b.0 {
                    self.scratch.add(id, a, a);
                }
                self.scratch.take()
            }
            // Statements without nested blocks (and any other kind): walked.
            _ => {
                self.scratch.count_stmt(s, &self.ids);
                self.scratch.take()
            }
        };
        let u = Rc::new(u);
        self.cache.insert(s.addr(), (s.clone(), u.clone()));
        u
    }

    /// The number of the let `name`.
    fn id(&self, name: &str) -> Option<u32> {
        self.ids.get(name)
    }

    /// Backward sweep: drops lets with no later use whose value cannot fail. Each statement
    /// kept comes with its uses (the forward sweep reads them too), a dropped one with
    /// `None`. No handle is cloned: most blocks keep every statement.
    fn drop_dead(&mut self, stmts: &[Stmt]) -> Vec<Option<Rc<Uses>>> {
        let mut uses = Vec::with_capacity(stmts.len());
        for s in stmts.iter().rev() {
            if let StmtNode::Let { var, value } = s.node() {
                let used = self.id(var.name()).is_some_and(|id| self.rest.count(id) > 0);
                if !used && !value.may_fail() {
                    uses.push(None);
                    continue;
                }
            }
            let u = self.uses_of(s);
            self.rest.add_uses(&u);
            uses.push(Some(u));
        }
        self.rest.clear();
        uses.reverse();
        uses
    }

    /// Forward sweep: inlines single-use (outside loops) and trivial stable lets into the
    /// statements of `stmts` that [`LetOpt::drop_dead`] kept, whose `uses` it gave (`None`:
    /// dropped). The block's new statements, or `None` where they are `stmts` themselves
    /// (nothing dropped, inlined or changed): only then is a statement list built.
    fn inline(&mut self, stmts: &[Stmt], mut uses: Vec<Option<Rc<Uses>>>) -> Option<Vec<Stmt>> {
        // Uses in the statements after the current one, as they will be after substitution
        // (only those of this block's lets are read: a value refers only to names bound
        // before it, so what an inlined value moves never reaches a later let either).
        uses.iter().flatten().for_each(|u| self.rest.add_uses(u));
        let mut sub = Subst(HashMap::new());
        // The numbers of the names in `sub`, and their `name_bit`s.
        let mut substituted: HashSet<u32> = HashSet::new();
        let mut bits = 0u64;
        // Built from the first change on (a dropped let is one, from the start).
        let mut out: Option<Vec<Stmt>> =
            uses.iter().any(Option::is_none).then(|| Vec::with_capacity(stmts.len()));
        for (i, (s, u)) in stmts.iter().zip(uses.iter_mut()).enumerate() {
            let Some(u) = u else { continue };
            // Only a statement that refers to a substituted name changes (a walk of every
            // later statement's expressions was much of this pass's time).
            let refers = !substituted.is_empty() && u.0.iter().any(|r| substituted.contains(&r.0));
            let s2 = if refers {
                SubstIn { opt: self, sub: &mut sub, ids: &substituted, bits }.mutate_stmt_changed(s)
            } else {
                None
            };
            if let Some(s2) = &s2 {
                *u = self.uses_of(s2);
            }
            self.rest.sub_uses(u);
            let s2 = s2.as_ref().unwrap_or(s);
            if let StmtNode::Let { var, value } = s2.node() {
                let id = self.id(var.name());
                let n = id.map_or(0, |id| self.rest.count(id));
                let loops = id.map_or(0, |id| self.rest.count_in_loops(id));
                let trivial = value.as_var().is_some() || value.as_imm().is_some();
                // A single use inside a loop is not inlined: that would undo hoisting.
                let single = n == 1 && loops == 0;
                if let Some(id) = id.filter(|_| {
                    (trivial || single && value.depth() < MAX_INLINE_DEPTH)
                        && is_stable(value, &self.mutable)
                }) {
                    // The value's references move to the uses of `var`.
                    self.scratch.count_exprs([value], &self.ids);
                    let moved = self.scratch.take();
                    let (n, loops) = (n as u32, loops as u32);
                    for &(m, c, _) in &moved.0 {
                        self.rest.add(m, c * n, c * loops);
                    }
                    self.rest.remove(id);
                    sub.0.insert(var.name().to_string(), value.clone());
                    substituted.insert(id);
                    bits |= name_bit(var.name());
                    // Nothing dropped or changed before it: those statements stay.
                    out.get_or_insert_with(|| stmts[..i].to_vec());
                    continue;
                }
            }
            match &mut out {
                Some(v) => v.push(s2.clone()),
                None if !s2.ptr_eq(s) => {
                    let mut v = Vec::with_capacity(stmts.len());
                    v.extend(stmts[..i].iter().cloned());
                    v.push(s2.clone());
                    out = Some(v);
                }
                None => {}
            }
        }
        self.rest.clear();
        out
    }
}

/// [`Subst`] applied to the nested statements that refer to a substituted name (`ids`, their
/// let numbers) only, as their uses tell: a `for` whose body refers to one in a single
/// statement was walked whole, every expression of it, once for each name inlined into it.
struct SubstIn<'a> {
    opt: &'a mut LetOpt,
    sub: &'a mut Subst,
    ids: &'a HashSet<u32>,
    /// The [`name_bit`]s of the names in `sub`: a subtree whose [`Expr::name_bits`] share
    /// none comes back as it is, unwalked (what [`Subst`] would give).
    bits: u64,
}

impl Mutator for SubstIn<'_> {
    fn mutate_expr_changed(&mut self, e: &Expr) -> Option<Expr> {
        if e.name_bits() & self.bits == 0 {
            return None;
        }
        let n = self.mutate_expr(e);
        (!n.ptr_eq(e)).then_some(n)
    }

    fn mutate_var_changed(&mut self, _: &Var) -> Option<Var> {
        None
    }

    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        if e.name_bits() & self.bits == 0 {
            return e.clone();
        }
        if let ExprNode::Var(v) = e.node() {
            if let Some(r) = self.sub.0.get(v.name()) {
                return r.clone();
            }
        }
        walk_mutate_expr(self, e)
    }

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        self.mutate_stmt_changed(s).unwrap_or_else(|| s.clone())
    }

    fn mutate_stmt_changed(&mut self, s: &Stmt) -> Option<Stmt> {
        if !self.opt.uses_of(s).0.iter().any(|r| self.ids.contains(&r.0)) {
            return None;
        }
        walk_mutate_stmt_changed(self, s)
    }
}

impl Mutator for LetOpt {
    crate::util::statements_only!();

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        let s = walk_mutate_nested(self, s);
        let StmtNode::Block(stmts) = s.node() else { return s };
        if !stmts.iter().any(|t| matches!(t.node(), StmtNode::Let { .. })) {
            return s;
        }
        let uses = self.drop_dead(stmts);
        match self.inline(stmts, uses) {
            Some(out) => Stmt::block(out),
            None => s,
        }
    }
}

/// Runs let optimization.
pub fn let_opt(k: &Kernel) -> Kernel {
    let k = &kiln_ir::depth::bound_kernel(k);
    LetOpt::new(k).mutate_kernel(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel with lets used at every nesting level: in loop bounds, `for` and `while`
    /// bodies, branches, stores, assignments and nested blocks.
    const NESTED: &str = "kernel k(x: ptr<global, u32>, n: u32) {
        let a: u32 = n * 3;
        let b: u32 = a + 1;
        let c: u32 = global_id(0);
        var s: u32 = a;
        for i: u32 in a .. b + n {
            let d: u32 = i * b;
            if d > c {
                x[d] = a + d;
                let e: u32 = d + c;
                s = s + e * e;
            } else {
                var w: u32 = b;
                while w < d + a {
                    w = w + c;
                }
                x[c] = w;
            }
        }
        {
            let f: u32 = b * b;
            x[f] = s + a;
        }
        x[a] = c + b;
    }";

    /// Every statement of `k`, nested ones included.
    fn all_stmts(k: &Kernel) -> Vec<Stmt> {
        struct All(Vec<Stmt>);
        impl Visitor for All {
            fn visit_stmt(&mut self, s: &Stmt) {
                self.0.push(s.clone());
                walk_stmt(self, s)
            }
        }
        let mut all = All(Vec::new());
        all.visit_stmt(k.body());
        all.0
    }

    /// The uses of a statement composed from its parts' (cached) uses are those a walk of
    /// the whole statement counts, at every statement of the kernel.
    #[test]
    fn composed_uses_match_a_recount() {
        let k = kiln_ir::parse_module(NESTED).expect("parses").kernels.remove(0);
        let mut opt = LetOpt::new(&k);
        let all = all_stmts(&k);
        assert!(all.len() > 20, "{}", all.len());
        for s in &all {
            let composed = opt.uses_of(s);
            opt.scratch.count_stmt(s, &opt.ids);
            let recount = opt.scratch.take();
            let sorted = |u: &Uses| {
                let mut v = u.0.to_vec();
                v.sort();
                v
            };
            assert_eq!(sorted(&composed), sorted(&recount), "at `{s}`");
        }
        // `a`: in `b`, `s`, the loop's bounds (not in the loop), its body's store and the
        // `while` condition (in the loop), and the last two stores.
        let body = opt.uses_of(k.body());
        let a = opt.ids.map["a"];
        let (_, all_a, loops_a) = *body.0.iter().find(|r| r.0 == a).expect("a is used");
        assert_eq!((all_a, loops_a), (7, 2));
    }

    /// Substituting only in the nested statements whose uses name a substituted let gives
    /// what substituting everywhere gives, at every statement of the kernel, for each let
    /// and for all of them at once.
    #[test]
    fn substitution_by_uses_matches_a_full_substitution() {
        let k = kiln_ir::parse_module(NESTED).expect("parses").kernels.remove(0);
        let mut opt = LetOpt::new(&k);
        let stmts = all_stmts(&k);
        let mut sets: Vec<Vec<&str>> = ["a", "b", "c", "d", "e", "f"].map(|n| vec![n]).to_vec();
        sets.push(vec!["a", "b", "c", "d", "e", "f"]);
        for names in sets {
            let mut sub = Subst(HashMap::new());
            let mut ids = HashSet::new();
            let mut bits = 0;
            for (i, n) in names.iter().enumerate() {
                sub.0.insert(n.to_string(), Expr::from(100 + i as u32));
                ids.insert(opt.ids.map[*n]);
                bits |= name_bit(n);
            }
            for s in &stmts {
                let full = sub.mutate_stmt(s);
                let by_uses =
                    SubstIn { opt: &mut opt, sub: &mut sub, ids: &ids, bits }.mutate_stmt(s);
                assert_eq!(full.to_string(), by_uses.to_string(), "{names:?} in `{s}`");
                assert_eq!(full.ptr_eq(s), by_uses.ptr_eq(s), "{names:?} in `{s}`");
            }
        }
    }

    /// Each block's sweeps leave the shared tables all zero for the next block.
    #[test]
    fn sweeps_leave_the_tables_clear() {
        let k = kiln_ir::parse_module(NESTED).expect("parses").kernels.remove(0);
        let mut opt = LetOpt::new(&k);
        let out = opt.mutate_kernel(&k);
        assert!(!out.ptr_eq(&k), "something was inlined:\n{out}");
        for t in [&opt.rest, &opt.scratch] {
            assert!(t.all.iter().chain(&t.in_loops).all(|&c| c == 0));
            assert!(t.touched.is_empty());
        }
    }
}
