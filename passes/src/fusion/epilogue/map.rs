//! What an epilogue fusion proves about one producer/consumer pair, by walking both over
//! their nd-ranges ([`super::prove`]): the producer stores each element of the buffer at
//! most once, unconditionally where it stores it; each consumer work-item that touches the
//! buffer touches one element, `c + Σ k[d] * global_id(d)`, which the producer stores; the
//! consumer's other writes are its work-items' own; and the index map inverts on the
//! consumer's range ([`IndexMap`]).

use hashbrown::{HashMap, HashSet};
use kiln_ir::launch::NdRange;
use kiln_ir::{Stmt, Var, Visitor};

use super::prove::{Access, Walk};

/// The consumer's element of the buffer as a function of its global ids, and its inverse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct IndexMap {
    /// The constant term.
    pub c: i128,
    /// The coefficient of each dimension's global id (0: the element does not depend on it).
    pub k: [i128; 3],
    /// The id of each dimension whose coefficient is 0 (every work-item that touches the
    /// buffer has it).
    pub fixed: [u32; 3],
    /// The consumer's range.
    pub range: NdRange,
}

impl IndexMap {
    /// The dimensions that vary, by decreasing coefficient: the order the inverse divides.
    pub fn order(&self) -> Vec<usize> {
        let mut o: Vec<usize> = (0..3).filter(|&d| self.k[d] != 0).collect();
        o.sort_by_key(|&d| std::cmp::Reverse(self.k[d]));
        o
    }

    /// The element of work-item `g`.
    pub fn at(&self, g: [u32; 3]) -> i128 {
        self.c + (0..3).map(|d| self.k[d] * g[d] as i128).sum::<i128>()
    }

    /// The work-item of the range whose element is `s`, computed as the fused kernel does
    /// (division by decreasing coefficient), or `None`.
    pub fn inverse(&self, s: i128) -> Option<[u32; 3]> {
        let mut r = s - self.c;
        if r < 0 {
            return None;
        }
        let mut g = self.fixed;
        for d in self.order() {
            g[d] = u32::try_from(r / self.k[d]).ok()?;
            r %= self.k[d];
        }
        let inside = (0..3).all(|d| {
            g[d] >= self.range.offset[d] && g[d] - self.range.offset[d] < self.range.global[d]
        });
        (r == 0 && inside).then_some(g)
    }

    /// `c + k0 * global_id(0) + ...` for reports.
    pub fn describe(&self) -> String {
        let mut s = format!("{}", self.c);
        for d in 0..3 {
            if self.k[d] != 0 {
                s.push_str(&format!(" + {} * global_id({d})", self.k[d]));
            }
        }
        s
    }
}

/// The elements of `x` the producer body stores, each once; `Err` names what is not proven.
pub(super) fn producer_stores(
    body: &Stmt,
    range: &NdRange,
    x: &Var,
    steps: &mut u64,
) -> Result<HashSet<i128>, String> {
    let watched: HashSet<String> = [x.name().to_string()].into_iter().collect();
    let mut walk = Walk::new(body, range, &watched);
    walk.steps = *steps;
    let mut stored: HashSet<i128> = HashSet::new();
    for g in Walk::items(range) {
        let mut on = |a: Access| -> Result<(), String> {
            // Formatting the index is slow: only on a refusal.
            let text = || format!("`{}[{}]`", a.buf.name(), a.index);
            if !a.write {
                return Err(format!("it reads {} back", text()));
            }
            let Some(at) = a.at else {
                return Err(format!("it stores {} at an index that depends on memory", text()));
            };
            if !a.definite {
                return Err(format!(
                    "it stores {} under a condition that depends on memory (whether the \
                     element is written is not known)",
                    text()
                ));
            }
            if !stored.insert(at) {
                return Err(format!(
                    "it stores element {at} of `{}` twice ({}, work-item {g:?})",
                    a.buf.name(),
                    text()
                ));
            }
            Ok(())
        };
        walk.run(body, g, &mut on)?;
    }
    *steps = walk.steps;
    Ok(stored)
}

/// Proves that the consumer body, over `range`, can run at the producer's stores of `x`
/// (`stored`): returns the index map and the number of its work-items that touch `x`.
/// `written` names the other buffers the consumer writes.
pub(super) fn consumer_map<'a>(
    body: &'a Stmt,
    range: &NdRange,
    x: &Var,
    written: &HashSet<String>,
    stored: &HashSet<i128>,
    steps: &mut u64,
) -> Result<(IndexMap, usize), String> {
    // Every buffer the consumer accesses is watched: a work-item that touches no element of
    // `x` runs nowhere in the fused kernel, so it must be shown to do nothing that can fault.
    let mut watched = written.clone();
    watched.insert(x.name().to_string());
    watched.extend(loaded_buffers(body));
    let mut walk = Walk::new(body, range, &watched);
    walk.steps = *steps;
    let xname = x.name();
    // Each written element's first toucher and whether one of them wrote it.
    let mut owners: HashMap<(&'a str, i128), ([u32; 3], bool)> = HashMap::new();
    let mut touch: Vec<([u32; 3], i128)> = Vec::new();
    // Formatting an index is slow: accesses are kept by reference and named on a refusal.
    let show = |b: &Var, i: &kiln_ir::Expr| format!("`{}[{}]`", b.name(), i);
    for g in Walk::items(range) {
        let mut mine: Option<(i128, &'a Var, &'a kiln_ir::Expr)> = None;
        let mut first_write: Option<(&'a Var, &'a kiln_ir::Expr)> = None;
        let mut first_read: Option<(&'a Var, &'a kiln_ir::Expr)> = None;
        let mut err: Option<String> = None;
        let mut on = |a: Access<'a>| -> Result<(), String> {
            let Some(at) = a.at else {
                return Err(format!(
                    "work-item {g:?} accesses {} at an index that depends on memory",
                    show(a.buf, a.index)
                ));
            };
            if a.write && first_write.is_none() {
                first_write = Some((a.buf, a.index));
            }
            if !a.write && first_read.is_none() {
                first_read = Some((a.buf, a.index));
            }
            if !a.write && a.buf.name() != xname && !written.contains(a.buf.name()) {
                // A read of a buffer nobody writes: no order to keep.
                return Ok(());
            }
            if a.buf.name() == xname {
                match mine {
                    Some((m, b, i)) if m != at => {
                        return Err(format!(
                            "work-item {g:?} accesses two elements of `{xname}` ({} at {m}, \
                             {} at {at}): it is not element-wise",
                            show(b, i),
                            show(a.buf, a.index)
                        ))
                    }
                    Some(_) => {}
                    None => mine = Some((at, a.buf, a.index)),
                }
                return Ok(());
            }
            match owners.entry((a.buf.name(), at)) {
                hashbrown::hash_map::Entry::Occupied(mut o) => {
                    let (who, wrote) = *o.get();
                    if who != g && (wrote || a.write) {
                        err = Some(format!(
                            "work-items {who:?} and {g:?} access element {at} of `{}` and one \
                             writes it: the order of the consumer's work-items would matter",
                            a.buf.name()
                        ));
                    }
                    o.get_mut().1 |= a.write;
                }
                hashbrown::hash_map::Entry::Vacant(v) => {
                    v.insert((g, a.write));
                }
            }
            Ok(())
        };
        walk.run(body, g, &mut on)?;
        if let Some(e) = err {
            return Err(e);
        }
        match (mine, first_write) {
            (Some((at, b, i)), _) => {
                if !stored.contains(&at) {
                    return Err(format!(
                        "work-item {g:?} accesses {} (element {at}), which the kernels \
                         before it do not store: the nd-ranges do not cover the same elements",
                        show(b, i)
                    ));
                }
                touch.push((g, at));
            }
            (None, Some((b, i))) => {
                return Err(format!(
                    "work-item {g:?} writes {} without touching `{xname}`: there is no store \
                     to run it at",
                    show(b, i)
                ))
            }
            (None, None) => {
                // Unfused, this work-item would run; fused, it runs nowhere. That is exact
                // only if it can raise no fault: no memory access, no division that may be
                // by zero.
                if let Some((b, i)) = first_read {
                    return Err(format!(
                        "work-item {g:?} touches no element of `{xname}` but reads {}: it \
                         runs nowhere in the fused kernel, where its fault (out of bounds) \
                         would be lost; guard the read as the access to `{xname}` is guarded",
                        show(b, i)
                    ));
                }
                if let Some(e) = walk.may_fault {
                    return Err(format!(
                        "work-item {g:?} touches no element of `{xname}` but divides (`{e}`) \
                         by a value that may be zero: it runs nowhere in the fused kernel, \
                         where its fault would be lost"
                    ));
                }
            }
        }
    }
    *steps = walk.steps;
    let map = fit(&touch, range, xname)?;
    Ok((map, touch.len()))
}

/// The affine map through every (work-item, element) pair, checked to hold and to invert
/// on the range.
fn fit(touch: &[([u32; 3], i128)], range: &NdRange, x: &str) -> Result<IndexMap, String> {
    let Some(&(g0, s0)) = touch.first() else {
        return Err(format!("no work-item touches `{x}`"));
    };
    let mut k = [0i128; 3];
    let mut fixed = [0u32; 3];
    for d in 0..3 {
        let other = touch.iter().find(|(g, _)| g[d] != g0[d]);
        match other {
            None => fixed[d] = g0[d],
            Some(&(g, s)) => {
                // Along d alone if there is such a pair (the common case), else from any.
                let along = touch
                    .iter()
                    .find(|(h, _)| h[d] != g0[d] && (0..3).all(|e| e == d || h[e] == g0[e]));
                let (h, t) = along.copied().unwrap_or((g, s));
                let dg = h[d] as i128 - g0[d] as i128;
                if (0..3).any(|e| e != d && h[e] != g0[e]) || (t - s0) % dg != 0 {
                    return Err(format!(
                        "the element of `{x}` a work-item touches is not an affine function of \
                         its ids that kiln can find"
                    ));
                }
                k[d] = (t - s0) / dg;
                if k[d] <= 0 {
                    return Err(format!(
                        "the element of `{x}` a work-item touches does not grow with \
                         global_id({d}) (coefficient {})",
                        k[d]
                    ));
                }
            }
        }
    }
    let c = s0 - (0..3).map(|d| k[d] * g0[d] as i128).sum::<i128>();
    let map = IndexMap { c, k, fixed, range: *range };
    for &(g, s) in touch {
        if map.at(g) != s {
            return Err(format!(
                "work-item {g:?} touches element {s} of `{x}`, not {} ({}): the element is \
                 not an affine function of the ids",
                map.at(g),
                map.describe()
            ));
        }
        if map.inverse(s) != Some(g) {
            return Err(format!(
                "element {s} of `{x}` does not tell which work-item touches it ({} is not \
                 one-to-one on the consumer's range)",
                map.describe()
            ));
        }
    }
    Ok(map)
}

/// The buffers `body` loads from.
fn loaded_buffers(body: &Stmt) -> HashSet<String> {
    struct Loads(HashSet<String>);
    impl Visitor for Loads {
        fn visit_expr(&mut self, e: &kiln_ir::Expr) {
            if let kiln_ir::ExprNode::Load { buf, .. } | kiln_ir::ExprNode::VecLoad { buf, .. } =
                e.node()
            {
                self.0.insert(buf.name().to_string());
            }
            kiln_ir::walk_expr(self, e)
        }
    }
    let mut l = Loads(HashSet::new());
    l.visit_stmt(body);
    l.0
}
