//! Promotion legality: a buffer is promoted only when its access patterns, in every entry that
//! touches it, prove that the promoted array gives exactly the sequential results. The same
//! check, without the rule that reads see earlier writes, says whether a buffer left in global
//! memory keeps the sequential results ([`super::fusion_keeps_result`]).
//!
//! Every index of the buffer must be an *affine function* of the work-item's ids and of the
//! iteration numbers of the counted loops around the access: built from integer constants,
//! `let`-bound names, scalar parameters replaced by constants, the work-item built-ins and
//! the variables of `for` loops whose bounds and step are constants, with `+`, `-`, unary
//! `-`, `*` by a constant, `<<` by a constant and integer casts, where no intermediate value
//! leaves its type's range for any work-item that evaluates it (so wrapping never happens
//! and exact arithmetic is the IR's arithmetic). Anything else (a load, a mutable variable, a
//! non-constant scalar, `/`, `%`, `select`, ...) is not provable and refuses. Ids are written
//! as `grp(d)` (group id) and `lid(d)` (local id); without a known local size the whole
//! range is one group.
//!
//! **Guards.** Each access runs under the conditions that dominate it: the `if`s around it
//! (their negation in `else` branches) whose conditions are comparisons of affine
//! expressions joined by `&&` (or, negated, `||`), `bool` lets of such conditions, and the
//! fused kernel's own `glid < N` guard of an entry with a smaller range. Work-items (and
//! loop iterations) outside an access's guard never run it and need no proof. Facts are
//! proved under the guard by a sound prover (`Domain::proves` in `affine.rs`); what it cannot
//! prove is refused, never assumed.
//!
//! * **private**: with `L` the fused global linear id and `N` the work-item count, every
//!   access is `s * L + c(t)` with one stride `s != 0` for all accesses (any `s` when
//!   `N = 1`), where `c(t)` depends only on loop iterations: a work-item owns the elements
//!   `s * L + c(t)`; the values of every `c(t)` lie within a window narrower than `|s|` (so
//!   no two work-items touch the same element) and narrower than the array size (so
//!   `index % size` gives one work-item's elements distinct slots);
//! * **local**: every access is `a * G + l`, with `G` the linear work-group id, one stride
//!   `a != 0` for all accesses (any `a` with one work-group) and `l` a function of the local
//!   ids and loop iterations; the `l` of all accesses span fewer than `|a|` elements (no two
//!   work-groups touch the same element) and fewer than the array size; with
//!   `barriers = "none"` all accesses must moreover be the same index.
//!
//! In both, every index lies, under its guard, in `[0, 2^32)` and, when the buffer length is
//! given, inside the buffer. When the array starts empty, every read must read an element
//! written before it in program order by a store that surely runs wherever the read runs
//! (its guard is implied by the read's, and every condition on the store's way is captured):
//! for private, by the same work-item (the same index form, or writes whose elements include
//! the read's); for local, the same, or a store of an earlier entry, run by every work-item,
//! whose local part maps the work-group's local ids (and loop iterations) one-to-one onto a
//! run of elements covering the read (the identity, a reversal, a transpose of a square
//! group, `lid * 4 + j` over `j < 4`, ...), with the work-group barrier between the entries.
//! The user-facing statement of this rule is docs/fusion.md. Entries whose ids are remapped
//! never qualify.

mod affine;
mod collect;

use hashbrown::HashMap;
use kiln_ir::launch::NdRange;
use kiln_ir::{Imm, Stmt};

use self::affine::{Aff, Ctx, Domain, Env, Path};
use self::collect::{Access, Collect};
use super::ndrange::EntryPlan;
use super::spec::{BarrierPolicy, PromoteTo};

/// One entry that touches the buffer: its plan, the buffer's names in it, its constants.
pub(crate) struct Toucher<'a> {
    /// The entry index.
    pub entry: usize,
    /// The entry's kernel name.
    pub kernel: &'a str,
    /// The entry's body.
    pub body: &'a Stmt,
    /// The entry's placement.
    pub plan: &'a EntryPlan,
    /// The parameter names the buffer has in this entry.
    pub names: Vec<String>,
    /// Scalar parameters of this entry replaced by constants.
    pub consts: HashMap<String, Imm>,
}

/// The promotion request being checked.
pub(crate) struct Request {
    /// Private or local.
    pub to: PromoteTo,
    /// The array's element count.
    pub size: u32,
    /// The buffer's length, when given.
    pub buffer_len: Option<u32>,
    /// What goes between entries.
    pub barriers: BarrierPolicy,
    /// Whether the array starts empty (promotion): then every read must read what was
    /// written before. A buffer left in global memory keeps its earlier contents, so that
    /// rule does not apply ([`super::fusion_keeps_result`]).
    pub fresh: bool,
}

/// Checks that promoting the buffer is exact; the error names the entry, kernel and access.
pub(crate) fn check(fused: &NdRange, req: &Request, touchers: &[Toucher]) -> Result<(), String> {
    let local = fused.local;
    if req.to == PromoteTo::Local && local.is_none() {
        return Err("local promotion needs an explicit local size".into());
    }
    let dom = Domain::of(fused);
    let mut accesses = Vec::new();
    // Loops are numbered across entries: no loop of one entry encloses another's access.
    let mut loops = 0;
    for t in touchers {
        if t.plan.remap_ids {
            return Err(format!(
                "entry {} (`{}`) has its work-item ids remapped, so its accesses cannot be proven",
                t.entry, t.kernel
            ));
        }
        let ctx = Ctx { dom: &dom, fused, entry: t.plan, consts: &t.consts };
        let path = entry_path(&ctx, t.plan);
        let mut c = Collect { ctx, names: &t.names, entry: t.entry, out: Vec::new(), loops };
        c.stmts(t.body.stmts(), &mut Env::default(), &path);
        loops = c.loops;
        accesses.extend(c.out);
    }
    if accesses.is_empty() {
        // Never read or written: an unused array is exact.
        return Ok(());
    }
    let kernel_of = |e: usize| touchers.iter().find(|t| t.entry == e).map_or("?", |t| t.kernel);
    let name = |a: &Access| {
        let under = if a.path.conds.is_empty() {
            String::new()
        } else {
            format!(" under `{}`", a.path.conds.join("` and `"))
        };
        format!(
            "entry {} (`{}`) {} `{}`{under}",
            a.entry,
            kernel_of(a.entry),
            if a.write { "writes" } else { "reads" },
            a.text
        )
    };
    let mut forms = Vec::with_capacity(accesses.len());
    for a in &accesses {
        match &a.aff {
            Ok(f) => forms.push(*f),
            Err(why) => {
                return Err(format!(
                    "{}: the index is not provably a function of the work-item's own id ({why})",
                    name(a)
                ))
            }
        }
    }
    let len_limit = req.buffer_len.map_or(1i128 << 32, |l| l as i128);
    for (a, f) in accesses.iter().zip(&forms) {
        if !dom.within(f, 0, len_limit - 1, &a.path.guard) {
            let (lo, hi) = dom.range(f);
            let guard =
                if a.path.conds.is_empty() { "" } else { " and its guard does not bound it" };
            return Err(format!(
                "{}: the index ranges over [{lo}, {hi}]{guard}, outside the buffer{}",
                name(a),
                req.buffer_len.map_or(String::new(), |l| format!(" of {l} elements"))
            ));
        }
    }
    let checks = Checks { dom: &dom, req, accesses: &accesses, forms: &forms, name: &name };
    match req.to {
        PromoteTo::Local => checks.local(),
        _ => checks.private(fused),
    }
}

/// How many values of a loop-dependent index part the coverage check enumerates.
const ENUMERATE_LIMIT: usize = 4096;

/// The accesses of one buffer, with their forms, under the rules of one request.
struct Checks<'a> {
    dom: &'a Domain,
    req: &'a Request,
    accesses: &'a [Access],
    forms: &'a [Aff],
    name: &'a dyn Fn(&Access) -> String,
}

impl Checks<'_> {
    /// Whether the read `r` (its part of the index beside the shared id part: `parts[r]`)
    /// is covered by the surely-run writes `written` before it: one of the same form whose
    /// guard the read's implies, or writes that ran to completion (no loop shared with the
    /// read) whose element sets together include the read's.
    fn covered_by_own_writes(&self, r: usize, parts: &[Aff], written: &[usize]) -> bool {
        let (dom, acc) = (self.dom, &self.accesses[r]);
        let implied = |w: usize| dom.implies(&acc.path.guard, &self.accesses[w].path.guard);
        if written.iter().any(|&w| parts[w] == parts[r] && implied(w)) {
            return true;
        }
        // Only id-free parts can be enumerated (private accesses).
        let Some(want) = parts[r].loop_values(ENUMERATE_LIMIT) else { return false };
        let mut have: Vec<i128> = Vec::new();
        for &w in written {
            let wa = &self.accesses[w];
            let done = wa.path.loops.iter().all(|l| !acc.path.loops.contains(l));
            let plain = wa.path.guard.iter().all(|g| !g.has_loops());
            if done && plain && implied(w) {
                have.extend(parts[w].loop_values(ENUMERATE_LIMIT).unwrap_or_default());
            }
        }
        want.iter().all(|v| have.contains(v))
    }

    fn private(&self, fused: &NdRange) -> Result<(), String> {
        let (dom, req, accesses, forms, name) =
            (self.dom, self.req, self.accesses, self.forms, self.name);
        // Each access as `Σ K[d] * gid(d) + c(t)`: one function of the global ids for all.
        let mut coefs: Option<[i128; 3]> = None;
        for (a, f) in accesses.iter().zip(forms) {
            let mut k = [0i128; 3];
            for (d, kd) in k.iter_mut().enumerate() {
                let (g, l) = (f.k[d], f.k[3 + d]);
                *kd = if dom.ls[d] > 1 { l } else { g };
                if dom.ls[d] > 1 && dom.ng[d] > 1 && g != l.saturating_mul(dom.ls[d] as i128) {
                    return Err(format!(
                        "{}: the index is not a function of the work-item's global id, so it may be another work-item's element",
                        name(a)
                    ));
                }
                if fused.global[d] <= 1 {
                    *kd = 0;
                }
            }
            match coefs {
                Some(k0) if k0 != k => {
                    return Err(format!(
                        "{} and {}: their indices are different functions of the work-item's id, so work-items meet at each other's elements",
                        name(&accesses[0]),
                        name(a)
                    ))
                }
                _ => coefs = Some(k),
            }
        }
        let coefs = coefs.unwrap_or_default();
        // The work-items that access the buffer: per dimension, the ids up to the largest
        // any access's guard admits.
        let extent = |d: usize| -> i128 {
            let g = dom.global_rel(d);
            let hi = accesses.iter().map(|a| dom.upper_bound(&g, &a.path.guard)).max();
            hi.map_or(1, |h| (h + 1).clamp(1, fused.global[d] as i128))
        };
        let parts: Vec<Aff> = forms.iter().map(|f| f.without_ids()).collect();
        let ranges: Vec<(i128, i128)> = parts.iter().map(|c| dom.range(c)).collect();
        let cmin = ranges.iter().map(|r| r.0).min().unwrap_or(0);
        let cmax = ranges.iter().map(|r| r.1).max().unwrap_or(0);
        let width = cmax.saturating_sub(cmin);
        // No two work-items touch one element: ordered by `|K|`, each dimension's step
        // clears the span of everything below it (mixed radix, with guarded extents).
        let mut dims: Vec<(i128, i128)> =
            (0..3).map(|d| (coefs[d].abs(), extent(d))).filter(|&(_, e)| e > 1).collect();
        dims.sort_unstable();
        let mut span = width + 1;
        for &(k, e) in &dims {
            if k == 0 {
                return Err(format!(
                    "{}: the index does not depend on every id that varies, so it is also another work-item's element",
                    name(&accesses[0])
                ));
            }
            if k < span {
                let (i, j) = (
                    ranges.iter().position(|r| r.0 == cmin).unwrap_or(0),
                    ranges.iter().position(|r| r.1 == cmax).unwrap_or(0),
                );
                return Err(format!(
                    "{} and {}: neighbouring work-items access the same element",
                    name(&accesses[i]),
                    name(&accesses[j])
                ));
            }
            span = span.saturating_add(k.saturating_mul(e - 1));
        }
        if width >= req.size as i128 {
            return Err(format!(
                "one work-item accesses {} elements apart, more than the private array's size {}",
                width, req.size
            ));
        }
        if !req.fresh {
            return Ok(());
        }
        // Every read reads what the same work-item wrote before.
        let mut written: Vec<usize> = Vec::new();
        for (i, a) in accesses.iter().enumerate() {
            if a.write {
                if a.definite() {
                    written.push(i);
                }
            } else if !self.covered_by_own_writes(i, &parts, &written) {
                return Err(format!(
                    "{}: this work-item has not surely written that element before (unfused, it holds another work-item's or the buffer's earlier value)",
                    name(a)
                ));
            }
        }
        Ok(())
    }

    fn local(&self) -> Result<(), String> {
        let (dom, req, accesses, forms, name) =
            (self.dom, self.req, self.accesses, self.forms, self.name);
        let groups: i128 = dom.ng.iter().map(|&g| g as i128).product();
        let mut gstride = [1i128; 3];
        for d in 1..3 {
            gstride[d] = gstride[d - 1] * dom.ng[d - 1] as i128;
        }
        // Each access as `a * G + l(lid, t)`, G the linear group id, with one stride `a`.
        let mut a0: Option<i128> = None;
        let mut parts = Vec::with_capacity(forms.len());
        for (acc, f) in accesses.iter().zip(forms) {
            let a = (0..3).find(|&d| dom.ng[d] > 1).map_or(0, |d| f.k[d] / gstride[d]);
            let whole = (0..3).all(|d| dom.ng[d] <= 1 || f.k[d] == a.saturating_mul(gstride[d]));
            if !whole || (groups > 1 && a == 0) {
                return Err(format!(
                    "{}: the index is not (stride) x the work-group's linear id + a function of the local ids, so it may be another work-group's element",
                    name(acc)
                ));
            }
            if groups > 1 && a0.is_some_and(|x| x != a) {
                return Err(format!(
                    "{}: its work-group stride {a} differs from another access's {}",
                    name(acc),
                    a0.unwrap_or(0)
                ));
            }
            a0 = Some(a);
            parts.push(f.without_groups());
        }
        let ranges: Vec<(i128, i128)> = parts.iter().map(|p| dom.range(p)).collect();
        let lo = ranges.iter().map(|r| r.0).min().unwrap_or(0);
        let hi = ranges.iter().map(|r| r.1).max().unwrap_or(0);
        let width = hi - lo;
        let lowest = ranges.iter().position(|r| r.0 == lo).unwrap_or(0);
        let highest = ranges.iter().position(|r| r.1 == hi).unwrap_or(0);
        if groups > 1 && width >= a0.unwrap_or(0).abs() {
            return Err(format!(
                "{} and {}: the accesses of one work-group span {} elements, so they meet another work-group's (work-group stride {})",
                name(&accesses[lowest]),
                name(&accesses[highest]),
                width + 1,
                a0.unwrap_or(0)
            ));
        }
        if width >= req.size as i128 {
            return Err(format!(
                "the accesses of one work-group span {} elements, more than the local array's size {}",
                width + 1,
                req.size
            ));
        }
        if req.barriers == BarrierPolicy::None {
            if let Some(i) = forms.iter().position(|f| f != &forms[0]) {
                return Err(format!(
                    "{} and {}: with `barriers = \"none\"` no barrier orders one work-item's access after another's",
                    name(&accesses[0]),
                    name(&accesses[i])
                ));
            }
        }
        if !req.fresh {
            return Ok(());
        }
        let mut written: Vec<usize> = Vec::new();
        for (i, acc) in accesses.iter().enumerate() {
            if acc.write {
                if acc.definite() {
                    written.push(i);
                }
                continue;
            }
            let (rlo, rhi) = ranges[i];
            // Or an earlier entry, behind the work-group barrier, whose every work-item wrote
            // its share of a run of elements that covers the read.
            let by_group = || {
                written.iter().any(|&w| {
                    let wa = &accesses[w];
                    wa.entry < acc.entry
                        && req.barriers == BarrierPolicy::WorkGroup
                        && dom.implies(&[], &wa.path.guard)
                        && one_to_one_run(dom, &parts[w]).is_some_and(|(start, count)| {
                            start <= rlo && rhi < start.saturating_add(count)
                        })
                })
            };
            if !self.covered_by_own_writes(i, &parts, &written) && !by_group() {
                return Err(format!(
                    "{}: the element is not surely written before (by this work-item at the same index, or by an earlier kernel whose work-items write every element of a run covering it, with a barrier between)",
                    name(acc)
                ));
            }
        }
        Ok(())
    }
}

/// When the local part `p` of an index maps the work-group's local ids and loop iterations
/// one-to-one onto a run of consecutive elements: the run's first element and length. That
/// holds when the coefficients, ordered by magnitude, are `±1, ±e1, ±e1*e2, ...` for the
/// extents `e` of the atoms they multiply (mixed radix: the identity, reversals, transposes
/// of square groups, `4 * lid + j` over `j < 4`).
fn one_to_one_run(dom: &Domain, p: &Aff) -> Option<(i128, i128)> {
    let mut digits: Vec<(i128, i128)> = Vec::new();
    for i in 3..p.k.len() {
        let extent = dom.extent(p, i);
        if extent > 1 {
            if p.k[i] == 0 {
                // Several work-items (or iterations) write one element.
                return None;
            }
            digits.push((p.k[i].abs(), extent));
        }
    }
    digits.sort_unstable();
    let mut count = 1i128;
    for (k, extent) in digits {
        if k != count {
            return None;
        }
        count = count.checked_mul(extent)?;
    }
    Some((dom.range(p).0, count))
}

/// One access of a buffer as the legality check sees it, for `--explain`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessVerdict {
    /// The entry.
    pub entry: usize,
    /// Whether it is a store.
    pub write: bool,
    /// The access as written, e.g. `t[i + 1]`.
    pub text: String,
    /// The conditions it runs under (empty: every work-item runs it).
    pub guard: Vec<String>,
    /// Whether its guard is exactly the set of work-items that run it (a store that surely
    /// runs there).
    pub exact_guard: bool,
    /// Its index is an affine function of the ids (and counted loops), or why not.
    pub affine: Result<(), String>,
    /// Whether its index is proven inside `[0, len)` under its guard (`len`: the buffer
    /// length when known, else 2^32).
    pub in_bounds: bool,
}

/// The accesses of one buffer in the entries that touch it, in program order.
pub(crate) fn describe(
    fused: &NdRange,
    buffer_len: Option<u32>,
    touchers: &[Toucher],
) -> Vec<AccessVerdict> {
    let dom = Domain::of(fused);
    let len_limit = buffer_len.map_or(1i128 << 32, |l| l as i128);
    let mut out = Vec::new();
    let mut loops = 0;
    for t in touchers {
        let ctx = Ctx { dom: &dom, fused, entry: t.plan, consts: &t.consts };
        let path = entry_path(&ctx, t.plan);
        let mut c = Collect { ctx, names: &t.names, entry: t.entry, out: Vec::new(), loops };
        c.stmts(t.body.stmts(), &mut Env::default(), &path);
        loops = c.loops;
        for a in c.out {
            let in_bounds =
                a.aff.as_ref().is_ok_and(|f| dom.within(f, 0, len_limit - 1, &a.path.guard));
            out.push(AccessVerdict {
                entry: a.entry,
                write: a.write,
                text: a.text,
                guard: a.path.conds,
                exact_guard: a.path.exact,
                affine: a.aff.map(|_| ()),
                in_bounds,
            });
        }
    }
    out
}

/// Where an entry's statements run: under the fused kernel's `glid < N` when it is guarded.
fn entry_path(ctx: &Ctx, plan: &EntryPlan) -> Path {
    let mut path = Path { exact: true, ..Path::default() };
    if plan.guard {
        let n = plan.range.linear() as i128;
        let below = Aff::konst(n - 1).sub(ctx.linear_id());
        path.guard.extend(below);
        path.exact &= below.is_some();
        path.conds.push(format!("the fused kernel's `glid < {n}`"));
    }
    path
}
