//! Statements that CSE leaves alone, told apart without hashing anything.
//!
//! Both halves of CSE only ever act on *stable* nodes other than variables and constants:
//! the let-based half looks up values that `let`s bound, every one of them stable (so only
//! an equal, hence stable, node can match), and [`super::repeats`] counts stable bindable
//! nodes (those it binds across statements). A statement without such a node (most of
//! unrolled code: `acc = fma(extract(a_v, 0), extract(b_v, 1), acc)` reads a vector and an
//! accumulator) is therefore never rewritten and counts nothing; finding that out with one
//! walk that neither hashes nor allocates was most of what these statements cost the pass
//! (map lookups by node and by statement, a cache entry per statement).

use std::sync::Arc;

use kiln_ir::{Expr, ExprNode, Stmt, StmtNode};

use hashbrown::{HashMap, HashSet};
use smallvec::SmallVec;

use super::repeats::{bindable, is_leaf, own_exprs};
use crate::util::Mutable;

/// The bindable nodes ([`bindable`]) a walk met, up to 8 (`full` once more did not fit).
#[derive(Default)]
struct Nodes<'a> {
    list: SmallVec<[&'a Expr; 8]>,
    full: bool,
}

/// `None` if `e` has a stable node ([`crate::util::is_stable`]) other than a variable or a
/// constant; else whether `e` (then a variable, a constant or an unstable node) is stable.
/// With `nodes`, lists the bindable nodes met (all unstable when the answer is not `None`).
fn scan<'a>(e: &'a Expr, mutable: &Mutable, nodes: &mut Option<Nodes<'a>>) -> Option<bool> {
    match e.node() {
        ExprNode::Var(v) => Some(mutable.stable_var(v)),
        ExprNode::Imm(_) => Some(true),
        // A built-in is stable, and the let-based half reuses its bindings.
        ExprNode::Builtin { .. } => None,
        node => {
            let mut stable = !matches!(node, ExprNode::Load { .. } | ExprNode::VecLoad { .. })
                && (!e.may_fail() || !e.is_fault_division());
            let mut vars = false;
            let operands = || e.operands();
            for c in operands() {
                match c.node() {
                    // Asked last, and only if they decide: a variable's answer may hash its
                    // name (an accumulator is mutable), and most nodes here are unstable
                    // already because of another operand.
                    ExprNode::Var(_) => vars = true,
                    // Stable, and nothing to list: no call.
                    ExprNode::Imm(_) => {}
                    _ => stable &= scan(c, mutable, nodes)?,
                }
            }
            if stable && vars {
                stable = operands().all(|c| match c.node() {
                    ExprNode::Var(v) => mutable.stable_var(v),
                    _ => true,
                });
            }
            // A stable node that is neither a variable nor a constant.
            if stable {
                return None;
            }
            if let Some(n) = nodes.as_mut().filter(|_| bindable(e)) {
                if n.list.len() == n.list.inline_size() {
                    n.full = true;
                } else {
                    n.list.push(e);
                }
            }
            Some(false)
        }
    }
}

/// True if no expression of statement `s` itself ([`own_exprs`]; nested statements aside)
/// has a stable node other than a variable or a constant: CSE neither rewrites nor counts
/// anything in them.
#[cfg(test)]
pub(crate) fn is_inert(s: &Stmt, mutable: &Mutable) -> bool {
    own_exprs(s).iter().all(|e| scan(e, mutable, &mut None).is_some())
}

/// What CSE may do with a statement without nested statements ([`is_leaf`]).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Leaf {
    /// It has a stable node other than a variable or a constant: the general path.
    Active,
    /// No such node ([`is_inert`]: nothing to count or replace), but a bindable node twice
    /// (a candidate of its own, bound within the statement).
    Inert,
    /// Inert, and no bindable node twice: no candidate either.
    Idle,
}

/// [`Leaf`] for `s`, found with one walk of its expressions; `None` if `s` has nested
/// statements.
pub(crate) fn classify(s: &Stmt, mutable: &Mutable) -> Option<Leaf> {
    if !is_leaf(s) {
        return None;
    }
    let mut nodes = Some(Nodes::default());
    for e in own_exprs(s) {
        if scan(e, mutable, &mut nodes).is_none() {
            return Some(Leaf::Active);
        }
    }
    let n = nodes?;
    let twice = n.list.iter().enumerate().any(|(i, a)| n.list[i + 1..].iter().any(|b| a == b));
    Some(if n.full || twice { Leaf::Inert } else { Leaf::Idle })
}

/// The [`Leaf`] class of the statements without nested statements met so far, by address:
/// the let-based half walks each one once and classifies it on that walk; the repeats half
/// (which sees the same statements wherever the first left one unchanged) then reads the
/// class instead of walking the expressions again, several times, as it did. Only the
/// addresses of statements in trees that stay alive while the table is used may go in (the
/// let-based half's input and output kernels outlive the whole pass), so that no address
/// is reused by another statement.
#[derive(Default)]
pub(crate) struct Leaves(HashMap<usize, Leaf>);

impl Leaves {
    /// An empty table with room for the statements without nested statements of `s`, and
    /// `s`'s mutable variables ([`crate::util::mutable_names`]), both from one walk of the
    /// statements alone: growing the table one doubling at a time over a kernel's thousand
    /// statements was a good part of what recording cost, and the set's own walk kept a
    /// table of every name allocation it met (an unrolled kernel's accumulators are
    /// assigned through a thousand of them), which cost more than asking the set of names.
    /// The same walk lists the names starting with `cse` that `s`'s statements bind (as
    /// [`super::names::cse_names`] finds them, parameters aside), which a fresh binding must
    /// not take: a walk of its own over the whole kernel was most of what the repeats half
    /// cost a kernel it binds one repeat in.
    pub(crate) fn for_body(s: &Stmt) -> (Leaves, Mutable, Vec<Arc<str>>) {
        /// Slots of the filter in front of the names: a few hundred variables fit.
        const RECENT: usize = 256;
        struct Walk<'a> {
            /// Each declared or assigned name, once per name allocation the filter missed.
            names: Vec<&'a str>,
            /// The last name allocation listed in each slot (by a hash of its address): an
            /// accumulator's thousandth assignment is passed over without hashing its text.
            recent: [usize; RECENT],
            cse: Vec<Arc<str>>,
        }
        fn walk<'a>(s: &'a Stmt, w: &mut Walk<'a>) -> usize {
            if let Some(v) = crate::util::named_var(s).filter(|v| v.name().starts_with("cse")) {
                w.cse.push(v.name_arc().clone());
            }
            match s.node() {
                StmtNode::Block(stmts) => stmts.iter().map(|t| walk(t, w)).sum(),
                StmtNode::If { then, otherwise, .. } => {
                    walk(then, w) + otherwise.as_ref().map_or(0, |o| walk(o, w))
                }
                StmtNode::For { body, .. } | StmtNode::While { body, .. } => walk(body, w),
                StmtNode::Decl { var, .. } | StmtNode::Assign { var, .. } => {
                    let addr = Arc::as_ptr(var.name_arc()) as *const u8 as usize;
                    // Fibonacci hashing: the address's low bits are the allocator's alignment.
                    let slot = ((addr as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as usize;
                    let slot = &mut w.recent[slot % RECENT];
                    if *slot != addr {
                        *slot = addr;
                        w.names.push(var.name());
                    }
                    1
                }
                _ => usize::from(is_leaf(s)),
            }
        }
        let mut w = Walk { names: Vec::new(), recent: [0; RECENT], cse: Vec::new() };
        let n = walk(s, &mut w);
        // Made at its size: grown one doubling at a time, it hashed every name again each time.
        let mut names = HashSet::with_capacity(w.names.len());
        for name in w.names {
            names.get_or_insert_with(name, str::to_string);
        }
        (Leaves(HashMap::with_capacity(n)), Mutable::new(names), w.cse)
    }

    /// The class of leaf `s`, from the table or found now ([`classify`]; not recorded, as
    /// `s` may be a statement made by the pass and soon dropped). `None` if `s` has nested
    /// statements.
    pub(crate) fn get(&self, s: &Stmt, mutable: &Mutable) -> Option<Leaf> {
        match self.0.get(&s.addr()) {
            Some(&c) => Some(c),
            None => classify(s, mutable),
        }
    }

    /// The class of `s` as recorded, if it was.
    pub(crate) fn known(&self, s: &Stmt) -> Option<Leaf> {
        self.0.get(&s.addr()).copied()
    }

    /// Classifies `s` (kept alive by the caller's tree for the table's life) and records it.
    pub(crate) fn record(&mut self, s: &Stmt, mutable: &Mutable) -> Option<Leaf> {
        // An unrolled loop's copies hold the same statement handles (a generated GEMM's
        // thousand accumulator updates are eight copies of 128): the class of a handle met
        // before is the one recorded (the kernel's mutable variables do not change during
        // the pass, and an address recorded is never reused while the table lives).
        match self.0.entry(s.addr()) {
            hashbrown::hash_map::Entry::Occupied(o) => Some(*o.get()),
            hashbrown::hash_map::Entry::Vacant(v) => {
                let c = classify(s, mutable)?;
                v.insert(c);
                Some(c)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::is_stable;

    /// All of `e`'s nodes.
    fn nodes(e: &Expr, out: &mut Vec<Expr>) {
        out.push(e.clone());
        for c in e.children() {
            nodes(c, out);
        }
    }

    /// [`Expr::operands`] lists what [`Expr::children`] does, in the same order, on every node.
    #[test]
    fn operands_are_the_children() {
        let src = "kernel k(a: ptr<global, f32>, v: ptr<global, f32>, n: i32, x: f32) {
  let i: i32 = global_id(0) as i32;
  let w: f32x4 = vload4(v, i * 4);
  let y: f32 = -x + (i < n ? a[i] : fma(x, x, x)) + extract(insert(w, 1, x), 2);
  let z: f32x4 = f32x4(y, x, 1.0, 2.0) + f32x4(x);
  a[i] = y + extract(z, 0);
}";
        let m = kiln_ir::parse_module(src).expect("parses");
        let mut all = Vec::new();
        struct E<'a>(&'a mut Vec<Expr>);
        impl kiln_ir::Visitor for E<'_> {
            fn visit_expr(&mut self, e: &Expr) {
                self.0.push(e.clone());
                kiln_ir::walk_expr(self, e);
            }
        }
        kiln_ir::Visitor::visit_stmt(&mut E(&mut all), m.kernels[0].body());
        assert!(all.len() > 30);
        for e in &all {
            let got: Vec<&Expr> = e.operands().collect();
            let want: Vec<&Expr> = e.children().into_iter().collect();
            assert_eq!(got.len(), want.len(), "{e}");
            assert!(got.iter().zip(&want).all(|(a, b)| a.ptr_eq(b)), "{e}");
        }
    }

    /// On every kernel of the examples and the pass filetests, the mutable variables found
    /// on the walk that sizes the table are [`Mutable::of`]'s.
    #[test]
    fn body_walk_finds_the_mutable_variables() {
        let mut some = 0;
        for (path, k) in crate::util::repository_kernels() {
            let (_, mutable, _) = Leaves::for_body(k.body());
            assert_eq!(mutable.names(), Mutable::of(k.body()).names(), "{}", path.display());
            some += usize::from(!mutable.names().is_empty());
        }
        assert!(some > 10, "{some} kernels with mutable variables");
    }

    /// On every expression of the examples and the pass filetests, [`scan`] says what a
    /// plain walk with [`is_stable`] says.
    #[test]
    fn scan_agrees_with_is_stable() {
        let (mut inert, mut not) = (0, 0);
        for (_, k) in crate::util::repository_kernels() {
            let mutable = Mutable::of(k.body());
            for s in &crate::util::all_stmts(k.body()) {
                let mut all = Vec::new();
                for e in own_exprs(s) {
                    nodes(e, &mut all);
                    let found = all.iter().any(|n| {
                        !matches!(n.node(), ExprNode::Var(_) | ExprNode::Imm(_))
                            && is_stable(n, &mutable)
                    });
                    let want = if found { None } else { Some(is_stable(e, &mutable)) };
                    assert_eq!(scan(e, &mutable, &mut None), want, "{e}");
                    all.clear();
                }
                let may = super::super::repeats::may_have_candidate(s, &mutable);
                let want = match (is_leaf(s), is_inert(s, &mutable), may) {
                    (false, _, _) => None,
                    (true, false, _) => Some(Leaf::Active),
                    (true, true, true) => Some(Leaf::Inert),
                    (true, true, false) => Some(Leaf::Idle),
                };
                assert_eq!(classify(s, &mutable), want, "{s}");
                if is_inert(s, &mutable) {
                    inert += 1;
                } else {
                    not += 1;
                }
            }
        }
        assert!(inert > 50 && not > 50, "{inert} inert, {not} not");
    }
}
