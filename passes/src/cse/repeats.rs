//! CSE of repeated subexpressions that no `let` binds: a subexpression computed more than
//! once gets a `let` of its own, placed right before the statement that first evaluates it.
//!
//! Where a value may be evaluated (the IR's rules, `kiln_ir` crate docs): expressions are
//! pure and evaluate every operand — `&&`, `||` and `select` do not short-circuit — so every
//! subexpression of a statement's own expressions (a `let`/`var`/assignment value, a store's
//! index and value, an `if` condition, a `for` loop's bounds and step, a call's operands) is
//! evaluated each time the statement runs, before its effect. A `while` condition is
//! evaluated again on every iteration, so it is never a source. Two kinds of repeats are
//! bound:
//!
//! * **Within one statement**: any subexpression occurring twice among the statement's own
//!   expressions, loads and divisions included. The `let` right before the statement
//!   evaluates it at the same moment the statement would (no store or assignment runs in
//!   between), and only the statement's own expressions are rewritten.
//! * **Across statements**: a *stable* subexpression (no loads, cannot fail, reads no
//!   variable that is ever assigned: see [`crate::util::is_stable`]) that a statement
//!   evaluates and that occurs again later in the block (also inside nested branches and
//!   loops). It is bound before that first evaluating statement, where it would have been
//!   evaluated anyway, and every later occurrence in the block reads the binding. Nothing
//!   is ever hoisted out of a branch or loop body into code that would not have run it.
//!
//! A repeat that may fail (a load, a division) keeps the interpreter's first error: its
//! `let` goes right before the statement that first evaluates it, and the operands that
//! statement evaluates before it and that may fail get `let`s first, in order. So the
//! failing loads and divisions of a work-item are reached in the same order, and the
//! optimized kernel reports the one the source reports (binding `a[i]` of
//! `b[i] + a[i] * a[i]` alone would name `a` where the source names `b`).
//!
//! Names are unique per scope (no shadowing), so a variable in scope at the binding means
//! the same thing at every later occurrence in the block.

use std::borrow::Cow;
use std::rc::Rc;
use std::sync::Arc;

use hashbrown::HashSet;
use kiln_ir::{
    walk_mutate_expr, walk_mutate_nested, walk_mutate_stmt_changed, Expr, ExprMap, ExprNode,
    ExprSet, Kernel, Mutator, Scalar, Stmt, StmtNode, Type, Var,
};

use smallvec::{smallvec, SmallVec};

use super::inert::{Leaf, Leaves};
use super::names::cse_names;
use crate::util::{is_stable, Mutable};
use counter::{count_expr, count_node, count_stmt, merge, sum, Counter};

/// The expressions statement `s` evaluates itself (not those of nested statements), each
/// exactly once per execution of `s`.
pub(super) fn own_exprs(s: &Stmt) -> SmallVec<[&Expr; 3]> {
    // Asked for every statement of every candidate search: no allocation for the usual one
    // to three expressions.
    match s.node() {
        StmtNode::Let { value, .. }
        | StmtNode::Decl { init: value, .. }
        | StmtNode::Assign { value, .. } => smallvec![value],
        StmtNode::Store { index, value, .. } | StmtNode::VecStore { index, value, .. } => {
            smallvec![index, value]
        }
        StmtNode::If { cond, .. } => smallvec![cond],
        StmtNode::For { lo, hi, step, .. } => smallvec![lo, hi, step],
        StmtNode::Call { args, .. } => args.iter().collect(),
        StmtNode::While { .. } | StmtNode::Alloc { .. } | StmtNode::Block(_) => SmallVec::new(),
    }
}

/// Whether node `e` alone (its operands aside) is stable, as [`is_stable`] decides it: a
/// variable never assigned, not a load, not a division that may fail. Asked of every node of
/// every walk: [`Expr::may_fail`] (kept per node) answers for most nodes, which have no load
/// or failing division below them, without looking at the node's operator.
fn stable_node(e: &Expr, mutable: &Mutable) -> bool {
    match e.node() {
        ExprNode::Var(v) => mutable.stable_var(v),
        ExprNode::Load { .. } | ExprNode::VecLoad { .. } => false,
        _ => !e.may_fail() || !e.is_fault_division(),
    }
}

/// True for expressions worth a binding: operators, casts, loads and calls of a scalar type
/// a `let` can hold (f16 is storage only).
pub(super) fn bindable(e: &Expr) -> bool {
    // Asked of every node of every search: the operands are not listed just to see whether
    // there are any.
    let has_operands = match e.node() {
        ExprNode::Var(_) | ExprNode::Imm(_) | ExprNode::Builtin { .. } => false,
        ExprNode::Intrinsic { args, .. } => !args.is_empty(),
        ExprNode::Vector { elems, .. } => !elems.is_empty(),
        _ => true,
    };
    has_operands && matches!(e.ty(), Type::Scalar(t) if t != Scalar::F16)
}

/// The bindable subexpressions a search met, each with its size and stability, in the
/// order met: on the stack for the usual few (one allocation per search was a good part of
/// its cost).
type Order<'a> = SmallVec<[(&'a Expr, usize, bool); 16]>;

/// Counts the bindable subexpressions of `e` into `counts`, listing each new one in `order`
/// with its size (nodes) and whether it is stable ([`is_stable`]), both found on the same
/// walk (computing them again for every candidate was quadratic in an expression's depth).
/// Returns `e`'s size and stability.
fn count_into<'a>(
    e: &'a Expr,
    counts: &mut ExprMap<usize>,
    order: &mut Order<'a>,
    mutable: &Mutable,
) -> (usize, bool) {
    let mut stable = stable_node(e, mutable);
    // Listed before its operands, as the candidates are searched (largest first wins ties
    // by coming first).
    let slot = if bindable(e) {
        let n = counts.entry(e.clone()).or_insert(0);
        *n += 1;
        (*n == 1).then(|| {
            order.push((e, 0, false));
            order.len() - 1
        })
    } else {
        None
    };
    let mut size = 1;
    for c in e.operands() {
        // A variable, a constant or a built-in is one node, never bindable: answered here
        // (half the nodes of an index expression), without a call.
        let (cs, cst) = match c.node() {
            ExprNode::Var(v) => (1, mutable.stable_var(v)),
            ExprNode::Imm(_) | ExprNode::Builtin { .. } => (1, true),
            _ => count_into(c, counts, order, mutable),
        };
        size += cs;
        stable &= cst;
    }
    if let Some(i) = slot {
        order[i].1 = size;
        order[i].2 = stable;
    }
    (size, stable)
}

/// False only if statement `s` alone has no candidate for [`Repeats::candidate`]: its own
/// expressions have no stable bindable node (which later statements could repeat) and no
/// bindable node twice. Decided on a few nodes only; `true` for anything bigger.
pub(super) fn may_have_candidate(s: &Stmt, mutable: &Mutable) -> bool {
    /// Collects the bindable nodes of `e` and returns whether `e` is stable (as
    /// [`count_into`] decides it); `None` at a stable bindable node or once there are more
    /// nodes than fit.
    fn collect<'a>(
        e: &'a Expr,
        out: &mut SmallVec<[&'a Expr; 8]>,
        mutable: &Mutable,
    ) -> Option<bool> {
        let mut stable = stable_node(e, mutable);
        for c in e.operands() {
            // A variable, a constant or a built-in is never bindable: answered here.
            stable &= match c.node() {
                ExprNode::Var(v) => mutable.stable_var(v),
                ExprNode::Imm(_) | ExprNode::Builtin { .. } => true,
                _ => collect(c, out, mutable)?,
            };
        }
        if bindable(e) {
            if stable || out.len() == out.inline_size() {
                return None;
            }
            out.push(e);
        }
        Some(stable)
    }
    let mut nodes: SmallVec<[&Expr; 8]> = SmallVec::new();
    for e in own_exprs(s) {
        if collect(e, &mut nodes, mutable).is_none() {
            return true;
        }
    }
    nodes.iter().enumerate().any(|(i, a)| nodes[i + 1..].iter().any(|b| a == b))
}

/// True if `e` occurs in `x` (or is `x`), passing over the subtrees too shallow to hold it
/// (equal expressions are equally deep).
fn contains(x: &Expr, e: &Expr) -> bool {
    let d = e.depth();
    x.depth() > d && x.operands().any(|c| contains(c, e)) || x.depth() == d && x == e
}

/// Whether `s` is a `let` whose variable `e` reads.
fn reads_binding(s: &Stmt, e: &Expr) -> bool {
    matches!(s.node(), StmtNode::Let { var, .. } if contains(e, &var.expr()))
}

/// The operands that may fail and that statement `s` evaluates before its first occurrence
/// of `e` (each whole, in evaluation order: operands left to right, each before its
/// operator), or `None` if `s` does not evaluate `e`.
fn failing_before(s: &Stmt, e: &Expr) -> Option<Vec<Expr>> {
    let mut out = Vec::new();
    let mut level: SmallVec<[&Expr; 3]> = own_exprs(s);
    loop {
        let at = level.iter().position(|x| contains(x, e))?;
        out.extend(level[..at].iter().filter(|x| x.may_fail()).map(|x| (*x).clone()));
        if level[at] == e {
            return Some(out);
        }
        level = level[at].children();
    }
}

/// Replaces every occurrence of `from` by `to`; with `own_only`, only in the expressions of
/// the outermost statement it is applied to (see [`own_exprs`]).
struct Replace<'a> {
    from: &'a Expr,
    to: &'a Expr,
    own_only: bool,
    depth: usize,
    /// The occurrences of `from` not yet replaced, when known: the walk stops once none is
    /// left (a binding made early in a long block would otherwise walk all the rest of it).
    left: Option<usize>,
    /// Occurrence counts kept up to date with each change as it is made (the replaced
    /// subtree and the nodes rebuilt above it), instead of counting whole statements again.
    counts: Option<&'a mut ExprMap<usize>>,
    /// The kernel's mutable variables (what [`count_stmt`] needs to know what it counts).
    mutable: &'a Mutable,
    /// For a stable `from`: the occurrences by statement, so that a statement without one
    /// is not walked (a value bound at the top of a kernel and used at its end would
    /// otherwise walk everything in between, once per binding).
    counter: Option<&'a mut Counter>,
    /// With `counts`: whether each expression walked and its replacement are stable
    /// (`(before, after)`), one entry per operand, read by the operator above it.
    stable: Vec<(bool, bool)>,
    /// Whether `to` is stable.
    to_stable: bool,
    /// Whether `from` is stable (as [`count_expr`] decides it).
    from_stable: bool,
    /// The occurrences of `from` replaced so far: their counts in `counts` are taken away
    /// once, after the walk ([`Replace::uncount`]), instead of walking `from` again for each.
    hits: usize,
}

impl Replace<'_> {
    /// Whether node `e` alone is stable, as [`count_expr`] decides it (`e` is stable when it
    /// and every operand are).
    fn stable_node(&self, e: &Expr) -> bool {
        stable_node(e, self.mutable)
    }
}

impl Replace<'_> {
    /// Whether `e` is neither `from` nor can hold it (or no more replacements are left): it
    /// stays as it is. With `counts`, its stability is pushed for the operator above it.
    fn passes_over(&mut self, e: &Expr) -> bool {
        // A subexpression is shallower than the whole: only as deep a node can be `from`,
        // and a shallower one cannot contain it.
        let hit = self.left != Some(0) && e.depth() == self.from.depth() && e == self.from;
        if hit || (self.left != Some(0) && e.depth() > self.from.depth()) {
            return false;
        }
        if self.counts.is_some() {
            let st = is_stable(e, self.mutable);
            self.stable.push((st, st));
        }
        true
    }

    /// Whether statement `s` stays as it is, unwalked.
    fn skips(&mut self, s: &Stmt) -> bool {
        if self.left == Some(0)
            || self.own_only && (self.depth > 0 || matches!(s.node(), StmtNode::While { .. }))
        {
            return true;
        }
        // Counted as `count_expr` counts: every occurrence of a stable node.
        self.counter.as_deref_mut().is_some_and(|c| !c.occurs(s, self.from, self.mutable))
    }
}

impl Mutator for Replace<'_> {
    // The walks ask through the `*_changed` methods: what stays answers `None` without a
    // handle cloned, compared and dropped.
    fn mutate_expr_changed(&mut self, e: &Expr) -> Option<Expr> {
        if self.passes_over(e) {
            return None;
        }
        let n = self.mutate_replaced(e);
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
        if self.skips(s) {
            return None;
        }
        self.depth += 1;
        let base = self.stable.len();
        let r = walk_mutate_stmt_changed(self, s);
        // The answers for the statement's own expressions have no operator to go to.
        self.stable.truncate(base);
        self.depth -= 1;
        r
    }
}

impl Replace<'_> {
    /// Takes the replaced occurrences of `from` out of `counts`, as [`count_expr`] removing
    /// each one would: the counts of `from`'s subexpressions are found once and taken away
    /// times the occurrences (nothing reads `counts` during the walk, and removals never
    /// add or drop a key, so the map ends as it would have).
    fn uncount(&mut self) {
        let Some(c) = self.counts.as_deref_mut().filter(|_| self.hits > 0) else { return };
        let mut own = ExprMap::new();
        count_expr(self.from, &mut own, true, self.mutable);
        for (e, n) in own {
            if let Some(x) = c.get_mut(&e) {
                *x = x.saturating_sub(n * self.hits);
            }
        }
        self.hits = 0;
    }

    /// [`Mutator::mutate_expr`] for an `e` that [`Replace::passes_over`] did not pass over:
    /// `from` itself, or a deeper node that may hold it.
    fn mutate_replaced(&mut self, e: &Expr) -> Expr {
        let track = self.counts.is_some();
        // Not passed over and as deep as `from`: `passes_over` found it equal (asking again
        // compared the two trees whole a second time).
        if e.depth() == self.from.depth() {
            self.left = self.left.map(|n| n.saturating_sub(1));
            if self.counts.is_some() {
                self.hits += 1;
                self.stable.push((self.from_stable, self.to_stable));
            }
            return self.to.clone();
        }
        let base = self.stable.len();
        let r = walk_mutate_expr(self, e);
        if track {
            // Stable when the node and its operands are: the operands' answers (one entry
            // each, as walked) instead of a walk of both whole trees at every level.
            let (mut was, mut is) = (self.stable_node(e), self.stable_node(&r));
            for &(w, i) in &self.stable[base..] {
                was &= w;
                is &= i;
            }
            self.stable.truncate(base);
            if let Some(c) = self.counts.as_deref_mut().filter(|_| !r.ptr_eq(e)) {
                if was {
                    count_node(e, c, false);
                }
                if is {
                    count_node(&r, c, true);
                }
            }
            self.stable.push((was, is));
        }
        r
    }
}

struct Repeats {
    mutable: Mutable,
    /// The names of [`Repeats::kernel`] that start with `cse` ([`cse_names`]: the only ones
    /// a fresh name can collide with) and those handed out, found when the first binding
    /// is made (most runs of the pass on an already optimized kernel make none).
    names: Option<HashSet<String>>,
    /// The kernel the pass runs on.
    kernel: Kernel,
    /// The names of `kernel` that start with `cse`, if the caller listed them (maybe more
    /// than once each): then `names` is made from them, without a walk of the kernel.
    taken: Option<Vec<Arc<str>>>,
    /// Where the search for an unused `cseN` resumes: names are never freed, so the smallest
    /// unused one never lies below the last one handed out (searching from 0 each time was
    /// quadratic in the number of bindings).
    next: usize,
    /// [`Counter::of`]'s results by statement (see there).
    counter: Counter,
}

/// True for a statement with expressions and no nested statements, whose expressions are
/// [`own_exprs`] (all that [`count_stmt`] counts in it).
pub(super) fn is_leaf(s: &Stmt) -> bool {
    matches!(
        s.node(),
        StmtNode::Let { .. }
            | StmtNode::Decl { .. }
            | StmtNode::Assign { .. }
            | StmtNode::Store { .. }
            | StmtNode::VecStore { .. }
            | StmtNode::Call { .. }
    )
}

impl Repeats {
    fn fresh(&mut self) -> String {
        loop {
            let n = format!("cse{}", self.next);
            self.next += 1;
            let names = self.names.get_or_insert_with(|| match &self.taken {
                Some(t) => t.iter().map(|n| n.to_string()).collect(),
                None => cse_names(&self.kernel),
            });
            if names.insert(n.clone()) {
                return n;
            }
        }
    }

    /// Binds `e` to a fresh `let` inserted at `at`, replacing it in `out[from..]` (the whole
    /// block when `stable`, else the own expressions of `out[from..=k]`). `later`, the
    /// occurrences in `out[start..]` for some `start <= at`, is brought up to date from the
    /// statements that changed (counting the rest of the block again after every binding
    /// was quadratic in the block's length). `idle` flags `out`'s idle statements
    /// ([`Leaf::Idle`]), which no stable binding occurs in; the new `let` is not one.
    #[allow(clippy::too_many_arguments)]
    fn bind(
        &mut self,
        out: &mut Vec<Stmt>,
        at: usize,
        from: usize,
        k: usize,
        e: &Expr,
        stable: bool,
        later: &mut Option<ExprMap<usize>>,
        idle: &mut Vec<bool>,
    ) {
        let var = Var::new(self.fresh(), e.ty());
        let to = var.expr();
        let end = if stable { out.len() } else { k + 1 };
        // `later` counts the occurrences in `out[start..]` with `start <= at == from`: for a
        // stable binding, every one of them is in `out[from..]` and is replaced.
        let left =
            if stable { later.as_ref().map(|l| l.get(e).copied().unwrap_or(0)) } else { None };
        let mut r = Replace {
            from: e,
            to: &to,
            own_only: !stable,
            depth: 0,
            left,
            counts: later.as_mut(),
            mutable: &self.mutable,
            counter: stable.then_some(&mut self.counter),
            stable: Vec::new(),
            to_stable: is_stable(&to, &self.mutable),
            from_stable: is_stable(e, &self.mutable),
            hits: 0,
        };
        for (t, &idle) in out[from..end].iter_mut().zip(&idle[from..end]) {
            if r.left == Some(0) {
                break;
            }
            // A stable value never occurs in an idle statement ([`Leaf::Idle`]).
            if stable && idle {
                continue;
            }
            r.depth = 0;
            *t = r.mutate_stmt(t);
        }
        r.uncount();
        let binding = Stmt::let_(&var, e.clone());
        if let Some(l) = later.as_mut() {
            count_stmt(&binding, l, true, &self.mutable);
        }
        out.insert(at, binding);
        idle.insert(at, false);
    }

    /// The best repeated subexpression of the statement `stmts[k]` together with the lets
    /// already bound for it (`stmts[start..k]`, evaluated right before it), and whether it
    /// is stable (bound across statements) or not (bound within the statement only): the
    /// largest one.
    ///
    /// `later` caches the stable occurrences in `stmts[start..]`; the caller keeps it up to date
    /// (recomputing it for every statement made this pass quadratic on long blocks). `idle`
    /// flags the statements of `stmts` that count nothing ([`Leaf::Idle`]).
    #[allow(clippy::too_many_arguments)]
    fn candidate(
        mutable: &Mutable,
        counter: &mut Counter,
        stmts: &[Stmt],
        start: usize,
        k: usize,
        skip: &ExprSet,
        later: &mut Option<ExprMap<usize>>,
        idle: &[bool],
        whole: Option<&ExprMap<usize>>,
    ) -> Option<(Expr, bool)> {
        // Most statements of unrolled code (`acc = fma(x, y, acc)`) have a few bindable
        // nodes, none stable and none repeated: no candidate, found without the maps.
        if start == k && !counter.may_have_candidate(&stmts[k], mutable) {
            return None;
        }
        // One map for every search, cleared (a new one per statement was mostly allocation).
        let mut counts = std::mem::take(&mut counter.scratch);
        counts.clear();
        let mut order = Order::new();
        for t in &stmts[start..=k] {
            for e in own_exprs(t) {
                count_into(e, &mut counts, &mut order, mutable);
            }
        }
        // A `let` of the whole value already binds it (the let-based CSE reuses it).
        let bound = match stmts[k].node() {
            StmtNode::Let { value, .. } => Some(value),
            _ => None,
        };
        let mut best: Option<(Expr, bool, usize)> = None;
        for (e, size, stable) in order {
            if best.as_ref().is_some_and(|b| b.2 >= size) || bound == Some(e) || skip.contains(e) {
                continue;
            }
            let own = counts.get(e).copied().unwrap_or(0);
            let across = stable && {
                let later = later.get_or_insert_with(|| {
                    // An idle statement counts nothing.
                    let counted = |r: std::ops::Range<usize>| {
                        stmts[r.clone()].iter().zip(&idle[r]).filter(|x| !x.1).map(|x| x.0)
                    };
                    match whole {
                        // The block's counts (each statement's, summed) less those before
                        // `start`: a copy of one map and a few removals, where adding up the
                        // statements' counts again at every level of nesting was most of
                        // what these counts cost.
                        Some(whole) => {
                            let mut m = whole.clone();
                            for t in counted(0..start) {
                                merge(&mut m, &counter.of(t, mutable), false);
                            }
                            m
                        }
                        // The sum of the statements' counts, as a block's are summed
                        // ([`Counter::add_to_block`]): the largest copied whole, only the
                        // others merged entry by entry (merged one by one into an empty map,
                        // the top block's copy of the kernel's counts was inserted and
                        // rehashed entry by entry).
                        None => {
                            let (mut own, mut nested) = (ExprMap::new(), SmallVec::new());
                            for t in counted(start..stmts.len()) {
                                counter.add_to_block(t, &mut own, &mut nested, mutable);
                            }
                            if !own.is_empty() {
                                nested.push(Rc::new(own));
                            }
                            sum(nested).map(Rc::unwrap_or_clone).unwrap_or_default()
                        }
                    }
                });
                // Occurrences from here to the end of the block beyond the own expressions.
                later.get(e).copied().unwrap_or(0) > own
            };
            if own >= 2 || across {
                best = Some((e.clone(), stable, size));
            }
        }
        counter.scratch = counts;
        best.map(|(e, stable, _)| (e, stable))
    }
}

impl Mutator for Repeats {
    crate::util::statements_only!();

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        let StmtNode::Block(stmts) = s.node() else { return walk_mutate_nested(self, s) };
        // Idle statements (most of unrolled code) have no candidate, count nothing and take
        // no replacement: told apart once, with one walk each, they are passed over below
        // (each otherwise cost several lookups and a cache entry).
        let leaves = &self.counter.leaves;
        let mut idle: Vec<bool> = stmts
            .iter()
            .map(|t| is_leaf(t) && leaves.get(t, &self.mutable) == Some(Leaf::Idle))
            .collect();
        if idle.iter().all(|&i| i) {
            return s.clone();
        }
        // Copied only once something changes: a copy of a long block (an unrolled loop's
        // body) and its drop were a reference count taken and given back per statement.
        let mut out: Cow<'_, [Stmt]> = Cow::Borrowed(stmts);
        let mut changed = false;
        // The counts of the whole block, if already made (while it was counted as a statement
        // of the enclosing block): the first search's `later` while `out` is still `stmts`.
        let whole = self.counter.by_stmt.get(&s.addr()).map(|x| x.1.clone());
        let mut k = 0;
        // Occurrences in `out[start..]` once needed, kept up to date as statements change.
        let mut later: Option<ExprMap<usize>> = None;
        while k < out.len() {
            if idle[k] {
                // What the steps below do for it, as they would find it.
                if k + 1 == out.len() {
                    later = None;
                }
                k += 1;
                continue;
            }
            // Bind the largest repeat first, then look again: its parts may still repeat,
            // also in the lets just made (they run right before the statement).
            let start = k;
            let mut skip = ExprSet::default();
            while let Some((e, stable)) = Repeats::candidate(
                &self.mutable,
                &mut self.counter,
                &out[..],
                start,
                k,
                &skip,
                &mut later,
                &idle,
                whole.as_deref().filter(|_| !changed),
            ) {
                if stable || !e.may_fail() {
                    // After the lets made for this statement that it reads: a failing
                    // repeat's operands bound first may make a repeat of their own (`0.5 *
                    // cse2` once `x[i]` is `cse2`), which a `let` at `start` would read
                    // before `cse2` is bound.
                    let at = (start..k)
                        .rev()
                        .find(|&i| reads_binding(&out[i], &e))
                        .map_or(start, |i| i + 1);
                    let o = out.to_mut();
                    self.bind(o, at, at, k, &e, stable, &mut later, &mut idle);
                    k += 1;
                    changed = true;
                    continue;
                }
                // Keep the first error: bind it where it is first evaluated, after what
                // may fail before it there (see the module docs).
                let Some(j) =
                    (start..=k).find(|&j| own_exprs(&out[j]).iter().any(|x| contains(x, &e)))
                else {
                    skip.insert(e);
                    continue;
                };
                let before = failing_before(&out[j], &e).unwrap_or_default();
                if !before.iter().all(bindable) {
                    skip.insert(e);
                    continue;
                }
                // `e` first, so that its occurrences are still found whole; then each operand
                // before it, last first, each `let` going ahead of those made so far (a later
                // one may contain an earlier one, which its binding then reads).
                for x in [&e].into_iter().chain(before.iter().rev()) {
                    self.bind(out.to_mut(), j, j, k, x, false, &mut later, &mut idle);
                    k += 1;
                }
                changed = true;
            }
            // Then the statement's nested blocks, on their own.
            let t = match out[k].node() {
                StmtNode::Block(_) => self.mutate_stmt(&out[k]),
                _ => walk_mutate_nested(self, &out[k]),
            };
            // The statement as it was counted, if its nested blocks changed it.
            let counted = (!t.ptr_eq(&out[k])).then(|| std::mem::replace(&mut out.to_mut()[k], t));
            changed |= counted.is_some();
            if k + 1 == out.len() {
                // Nothing follows: no search needs the counts any more.
                later = None;
            }
            if let Some(l) = &mut later {
                // Step past `out[start..=k]`, which the next statement's search excludes.
                // The statement as it was counted goes: what its nested blocks bound stays
                // inside it, and counting it twice more (rebuilt, then gone) was most of
                // this pass's time on deep kernels.
                for t in out[start..k].iter().chain([counted.as_ref().unwrap_or(&out[k])]) {
                    self.counter.take_out(t, l, &self.mutable);
                }
            }
            k += 1;
        }
        if changed {
            Stmt::block(out.into_owned())
        } else {
            s.clone()
        }
    }
}

/// Binds repeated subexpressions that no `let` binds (see the module docs).
pub fn bind_repeats(k: &Kernel) -> Kernel {
    bind_repeats_with(k, Mutable::of(k.body()), Leaves::default(), None)
}

/// [`bind_repeats`], given `k`'s mutable variables ([`crate::util::mutable_names`]).
///
/// `leaves` classifies statements of `k` (or of trees alive while this runs: see [`Leaves`]);
/// `taken`, if given, lists the names of `k` that start with `cse` ([`cse_names`]).
pub(crate) fn bind_repeats_with(
    k: &Kernel,
    mutable: Mutable,
    leaves: Leaves,
    taken: Option<Vec<Arc<str>>>,
) -> Kernel {
    let counter = Counter { leaves, ..Counter::default() };
    let kernel = k.clone();
    Repeats { mutable, names: None, kernel, taken, next: 0, counter }.mutate_kernel(k)
}

mod counter;
#[cfg(test)]
mod tests;
