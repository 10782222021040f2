//! The repeats half's occurrence counts: the stable bindable nodes of every statement, by
//! statement, composed from those of nested statements and kept up to date as bindings
//! rewrite a block (see [`Counter`]).

use std::rc::Rc;

use hashbrown::HashMap;
use kiln_ir::{Expr, ExprMap, ExprNode, Stmt};
use smallvec::SmallVec;

use super::super::inert::{Leaf, Leaves};
use super::{bindable, contains, is_leaf, may_have_candidate, own_exprs, stable_node};
use crate::util::Mutable;

/// The stable occurrences of every statement (as [`count_stmt`] counts them), by statement
/// address, with the statement kept alive so that the address is not reused: each nesting
/// level counts the statements of its block, and without this a statement nested `d` deep
/// was walked `2d` times (counted in, then out, at every level above it).
#[derive(Default)]
pub(super) struct Counter {
    /// With, for a statement without nested statements ([`is_leaf`]), whether it may have a
    /// candidate ([`may_have_candidate`]), found on the same walk.
    pub(super) by_stmt: HashMap<usize, (Stmt, Rc<ExprMap<usize>>, bool)>,
    /// The occurrence counts [`super::Repeats::candidate`] fills, kept for its next call.
    pub(super) scratch: ExprMap<usize>,
    /// The counts of every statement without stable occurrences (most of unrolled code's
    /// `acc = fma(a, b, acc)`), shared rather than allocated once per statement.
    pub(super) empty: Rc<ExprMap<usize>>,
    /// The classes of the leaves the let-based half walked (see [`Leaves`]).
    pub(super) leaves: Leaves,
}

impl Counter {
    /// The occurrences in `s`, composed from the (cached) occurrences of its nested
    /// statements; those of its nested statements without nested statements are counted in
    /// place, unless cached already.
    pub(super) fn of(&mut self, s: &Stmt, mutable: &Mutable) -> Rc<ExprMap<usize>> {
        if matches!(self.leaves.known(s), Some(Leaf::Inert | Leaf::Idle)) {
            return self.empty.clone();
        }
        if let Some((_, m, _)) = self.by_stmt.get(&s.addr()) {
            return m.clone();
        }
        if is_leaf(s) {
            return self.leaf(s, mutable).0;
        }
        struct Own<'a> {
            counter: &'a mut Counter,
            mutable: &'a Mutable,
            map: ExprMap<usize>,
            nested: SmallVec<[Rc<ExprMap<usize>>; 8]>,
            top: bool,
        }
        impl kiln_ir::Visitor for Own<'_> {
            fn visit_expr(&mut self, e: &Expr) {
                count_expr(e, &mut self.map, true, self.mutable);
            }
            fn visit_stmt(&mut self, s: &Stmt) {
                if std::mem::replace(&mut self.top, false) {
                    kiln_ir::walk_stmt(self, s);
                } else {
                    self.counter.add_to_block(s, &mut self.map, &mut self.nested, self.mutable);
                }
            }
        }
        let mut own =
            Own { counter: self, mutable, map: ExprMap::new(), nested: SmallVec::new(), top: true };
        kiln_ir::Visitor::visit_stmt(&mut own, s);
        let Own { map, mut nested, .. } = own;
        if !map.is_empty() {
            nested.push(Rc::new(map));
        }
        let m = sum(nested).unwrap_or_else(|| self.empty.clone());
        self.by_stmt.insert(s.addr(), (s.clone(), m.clone(), true));
        m
    }

    /// Adds the occurrences in `s`, a statement of a block whose counts are being summed, to
    /// the sum: those of a statement without nested statements that is not cached are
    /// counted into `own`, the block's own map, in place; otherwise `s`'s (cached) counts
    /// go to `nested`. Most leaves are counted for their block's sum alone (the steps and
    /// searches that ask about one later walk it instead: [`Counter::take_out`],
    /// [`Counter::occurs`], [`Counter::may_have_candidate`]), and a map made, cached and
    /// merged per leaf was most of what counting a block cost.
    pub(super) fn add_to_block(
        &mut self,
        s: &Stmt,
        own: &mut ExprMap<usize>,
        nested: &mut SmallVec<[Rc<ExprMap<usize>>; 8]>,
        mutable: &Mutable,
    ) {
        if matches!(self.leaves.known(s), Some(Leaf::Inert | Leaf::Idle)) {
            // Nothing to count, known without a walk.
        } else if is_leaf(s) && !self.by_stmt.contains_key(&s.addr()) {
            for e in own_exprs(s) {
                count_expr(e, own, true, mutable);
            }
        } else {
            nested.push(self.of(s, mutable));
        }
    }

    /// [`Counter::of`] for a statement without nested statements ([`is_leaf`]), and whether
    /// it may have a candidate ([`may_have_candidate`]), both from one walk of its
    /// expressions (most statements of unrolled code are such, and were walked once for
    /// each).
    pub(super) fn leaf(&mut self, s: &Stmt, mutable: &Mutable) -> (Rc<ExprMap<usize>>, bool) {
        if let Some((_, m, may)) = self.by_stmt.get(&s.addr()) {
            return (m.clone(), *may);
        }
        /// [`count_expr`], listing the bindable nodes that are not stable in `unstable` (up
        /// to its inline size; `full` once more did not fit).
        fn walk<'a>(
            e: &'a Expr,
            stable_nodes: &mut SmallVec<[&'a Expr; 16]>,
            unstable: &mut SmallVec<[&'a Expr; 8]>,
            full: &mut bool,
            mutable: &Mutable,
        ) -> bool {
            let mut stable = stable_node(e, mutable);
            for c in e.operands() {
                stable &= walk(c, stable_nodes, unstable, full, mutable);
            }
            if stable {
                if bindable(e) {
                    stable_nodes.push(e);
                }
            } else if bindable(e) {
                if unstable.len() == unstable.inline_size() {
                    *full = true;
                } else {
                    unstable.push(e);
                }
            }
            stable
        }
        // The stable nodes are listed first and counted into a map made once at its size
        // (a map grown insert by insert was allocated up to three times per statement).
        let mut stable_nodes: SmallVec<[&Expr; 16]> = SmallVec::new();
        let mut unstable: SmallVec<[&Expr; 8]> = SmallVec::new();
        let mut full = false;
        for e in own_exprs(s) {
            walk(e, &mut stable_nodes, &mut unstable, &mut full, mutable);
        }
        let mut map = ExprMap::with_capacity(stable_nodes.len());
        for e in stable_nodes {
            count_node(e, &mut map, true);
        }
        // As `may_have_candidate` decides it: a stable bindable node, or a bindable node
        // twice (or too many nodes to tell cheaply).
        let may = !map.is_empty()
            || full
            || unstable.iter().enumerate().any(|(i, a)| unstable[i + 1..].iter().any(|b| a == b));
        let m = if map.is_empty() { self.empty.clone() } else { Rc::new(map) };
        self.by_stmt.insert(s.addr(), (s.clone(), m.clone(), may));
        (m, may)
    }

    /// Whether the stable bindable `e` occurs in `s` (its count in [`Counter::of`] is not
    /// zero). A statement without nested statements that is not cached yet is searched
    /// instead of counted: most are statements a binding just rewrote, and counting each
    /// (a map of its own) for every later binding's walk over the block was most of the
    /// cost of a block with many bindings (a kernel's epilogue of stores).
    pub(super) fn occurs(&mut self, s: &Stmt, e: &Expr, mutable: &Mutable) -> bool {
        if matches!(self.leaves.known(s), Some(Leaf::Inert | Leaf::Idle)) {
            return false;
        }
        if let Some((_, m, _)) = self.by_stmt.get(&s.addr()) {
            return m.get(e).is_some_and(|&n| n > 0);
        }
        if is_leaf(s) {
            // Every occurrence of a stable node is stable, and counted.
            return own_exprs(s).iter().any(|x| contains(x, e));
        }
        self.of(s, mutable).get(e).is_some_and(|&n| n > 0)
    }

    /// [`may_have_candidate`], from the cache for a statement without nested statements.
    pub(super) fn may_have_candidate(&mut self, s: &Stmt, mutable: &Mutable) -> bool {
        match self.leaves.known(s) {
            Some(Leaf::Inert) => return true,
            Some(Leaf::Idle) => return false,
            _ => {}
        }
        // A leaf not counted yet is mostly one an earlier binding just rewrote: its counts
        // would serve nothing else (the search counts it on its own, and the step past it
        // takes it out of `later` with a walk: [`Counter::take_out`]), so it is not counted
        // for this answer.
        match self.by_stmt.get(&s.addr()) {
            Some((_, _, may)) if is_leaf(s) => *may,
            _ => may_have_candidate(s, mutable),
        }
    }

    /// Takes the occurrences in `s` out of `counts`, as merging its counts ([`Counter::of`])
    /// out would: a leaf not counted yet (the statement as the bindings before and at it
    /// left it, or one of the lets they made) is walked instead, its own map neither made
    /// nor kept (no later step or search asks for it again).
    pub(super) fn take_out(&mut self, s: &Stmt, counts: &mut ExprMap<usize>, mutable: &Mutable) {
        if matches!(self.leaves.known(s), Some(Leaf::Inert | Leaf::Idle)) {
            return;
        }
        if is_leaf(s) && !self.by_stmt.contains_key(&s.addr()) {
            count_stmt(s, counts, false, mutable);
            return;
        }
        merge(counts, &self.of(s, mutable), false);
    }
}

/// The sum of the count maps `maps` (what merging each into an empty map gives), `None` if
/// all are empty: the largest is copied whole (or shared, if it is the only one), and only
/// the others are merged into it entry by entry. A block's counts are mostly those of one
/// nested statement (a loop's body, a branch), and inserting them one by one at every level
/// of nesting was much of what building them cost.
pub(super) fn sum(mut maps: SmallVec<[Rc<ExprMap<usize>>; 8]>) -> Option<Rc<ExprMap<usize>>> {
    maps.retain(|m| !m.is_empty());
    let big = (0..maps.len()).max_by_key(|&i| maps[i].len())?;
    let first = maps.swap_remove(big);
    if maps.is_empty() {
        return Some(first);
    }
    let mut m = Rc::unwrap_or_clone(first);
    for o in &maps {
        merge(&mut m, o, true);
    }
    Some(Rc::new(m))
}

/// Adds (`add`) or removes the counts of `m` to or from `counts`, as counting each
/// occurrence one by one would ([`count_node`]).
pub(super) fn merge(counts: &mut ExprMap<usize>, m: &ExprMap<usize>, add: bool) {
    for (e, &c) in m {
        match counts.get_mut(e) {
            Some(x) if add => *x += c,
            Some(x) => *x = x.saturating_sub(c),
            None if add => {
                counts.insert(e.clone(), c);
            }
            None => {}
        }
    }
}

/// Adds (`add`) or removes the occurrences of every bindable expression in `s` to `counts`,
/// those that are stable ([`crate::util::is_stable`] under `mutable`): only a stable expression's count
/// is ever read (bound across statements, its occurrences replaced), and leaving out the rest
/// (the loads, anything reading an accumulator) saves most of the map's work.
pub(super) fn count_stmt(s: &Stmt, counts: &mut ExprMap<usize>, add: bool, mutable: &Mutable) {
    struct C<'a>(&'a mut ExprMap<usize>, bool, &'a Mutable);
    impl kiln_ir::Visitor for C<'_> {
        fn visit_expr(&mut self, e: &Expr) {
            count_expr(e, self.0, self.1, self.2);
        }
    }
    kiln_ir::Visitor::visit_stmt(&mut C(counts, add, mutable), s);
}

/// [`count_stmt`] for the nodes of one expression; returns whether `e` is stable (decided
/// bottom-up as [`crate::util::is_stable`] decides it, so that no node is walked twice).
pub(super) fn count_expr(
    e: &Expr,
    counts: &mut ExprMap<usize>,
    add: bool,
    mutable: &Mutable,
) -> bool {
    let mut stable = stable_node(e, mutable);
    for c in e.operands() {
        // A variable, a constant or a built-in counts nothing ([`bindable`]): answered here
        // (half the nodes of an index expression), without a call and an operand list.
        stable &= match c.node() {
            ExprNode::Var(v) => mutable.stable_var(v),
            ExprNode::Imm(_) | ExprNode::Builtin { .. } => true,
            _ => count_expr(c, counts, add, mutable),
        };
    }
    if stable {
        count_node(e, counts, add);
    }
    stable
}

/// [`count_stmt`] for the node `e` alone (not its operands).
pub(super) fn count_node(e: &Expr, counts: &mut ExprMap<usize>, add: bool) {
    if !bindable(e) {
        return;
    }
    // Looked up before inserting: most occurrences are of known expressions, and a key's
    // clone is only made for a new one.
    match counts.get_mut(e) {
        Some(c) if add => *c += 1,
        Some(c) => *c = c.saturating_sub(1),
        None if add => {
            counts.insert(e.clone(), 1);
        }
        None => {}
    }
}
