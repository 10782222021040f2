//! Affine forms of integer expressions over a work-item's ids and the iteration numbers of
//! the counted loops around an access, guards (conjunctions of affine inequalities taken from
//! the conditions that dominate an access), and a sound prover of `f >= 0` under a guard.

use hashbrown::HashMap;
use kiln_ir::launch::NdRange;
use kiln_ir::{BinOp, Builtin, Expr, ExprNode, Imm, UnOp};

use super::super::ndrange::EntryPlan;

/// Id atoms: `grp(0..3)` then `lid(0..3)`.
pub(super) const IDS: usize = 6;
/// Counted loops an index may depend on: the `LOOPS` outermost counted loops around it.
pub(super) const LOOPS: usize = 4;
const ATOMS: usize = IDS + LOOPS;

/// `c + Σ k[i] * atom[i]`. The atoms are `grp(0..3)`, `lid(0..3)` and then, by nesting depth,
/// the iteration number `t` of each enclosing counted loop (`var = lo + step * t`,
/// `0 <= t < trips`); all are zero-based. Two forms are equal exactly when they denote the
/// same function of the ids and the same *set* of elements over the loop iterations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Aff {
    pub c: i128,
    pub k: [i128; ATOMS],
    /// The trip count of each loop atom the form uses (0 where unused).
    pub trips: [u32; LOOPS],
}

impl Aff {
    pub fn konst(c: i128) -> Aff {
        Aff { c, k: [0; ATOMS], trips: [0; LOOPS] }
    }

    fn atom(i: usize) -> Aff {
        let mut a = Aff::konst(0);
        a.k[i] = 1;
        a
    }

    /// Loop atom `depth` with `trips` iterations.
    fn loop_atom(depth: usize, trips: u32) -> Aff {
        let mut a = Aff::atom(IDS + depth);
        a.trips[depth] = trips;
        a
    }

    pub fn is_const(&self) -> bool {
        self.k.iter().all(|&k| k == 0)
    }

    /// Whether the form depends on a loop iteration.
    pub fn has_loops(&self) -> bool {
        self.k[IDS..].iter().any(|&k| k != 0)
    }

    fn zip(self, o: Aff, f: impl Fn(i128, i128) -> Option<i128>) -> Option<Aff> {
        let mut r = Aff::konst(f(self.c, o.c)?);
        for i in 0..ATOMS {
            r.k[i] = f(self.k[i], o.k[i])?;
        }
        for l in 0..LOOPS {
            if r.k[IDS + l] != 0 {
                r.trips[l] = self.trips[l].max(o.trips[l]);
            }
        }
        Some(r)
    }

    pub fn add(self, o: Aff) -> Option<Aff> {
        self.zip(o, i128::checked_add)
    }

    pub fn sub(self, o: Aff) -> Option<Aff> {
        self.zip(o, i128::checked_sub)
    }

    pub fn scale(self, m: i128) -> Option<Aff> {
        self.zip(Aff::konst(0), |a, _| a.checked_mul(m))
    }

    /// The form without its group-id part.
    pub fn without_groups(mut self) -> Aff {
        self.k[..3].fill(0);
        self
    }

    /// The form without its id parts: what one work-item adds to its id-dependent base.
    pub fn without_ids(mut self) -> Aff {
        self.k[..IDS].fill(0);
        self
    }

    /// The values of a form that depends only on loop atoms, over every iteration, sorted;
    /// `None` when it depends on an id or takes more than `limit` values.
    pub fn loop_values(&self, limit: usize) -> Option<Vec<i128>> {
        if self.k[..IDS].iter().any(|&k| k != 0) {
            return None;
        }
        let mut vals = vec![self.c];
        for l in 0..LOOPS {
            let k = self.k[IDS + l];
            if k == 0 {
                continue;
            }
            let n = self.trips[l] as usize;
            if vals.len().checked_mul(n)? > limit {
                return None;
            }
            vals = vals.iter().flat_map(|&v| (0..n as i128).map(move |t| v + k * t)).collect();
        }
        vals.sort_unstable();
        vals.dedup();
        Some(vals)
    }
}

/// The fused range seen as groups and local ids.
pub(super) struct Domain {
    /// Work-group size per dimension (the global size when no local size is known).
    pub ls: [u32; 3],
    /// Work-group count per dimension (1 when no local size is known).
    pub ng: [u32; 3],
    pub local_known: bool,
}

impl Domain {
    /// The fused range's groups and local ids (one group when no local size is known).
    pub fn of(fused: &NdRange) -> Domain {
        let ls = fused.local.unwrap_or(fused.global);
        Domain {
            ls,
            ng: [0, 1, 2].map(|d| fused.global[d] / ls[d]),
            local_known: fused.local.is_some(),
        }
    }

    /// How many values atom `i` of `a` takes.
    pub fn extent(&self, a: &Aff, i: usize) -> i128 {
        match i {
            0..3 => self.ng[i] as i128,
            3..IDS => self.ls[i - 3] as i128,
            _ => a.trips[i - IDS] as i128,
        }
    }

    /// `global_id(d) - global_offset(d)` of the fused range, as a form.
    pub fn global_rel(&self, d: usize) -> Aff {
        let mut a = Aff::konst(0);
        a.k[d] = self.ls[d] as i128;
        a.k[3 + d] = 1;
        a
    }

    /// The least and greatest value of `a` over every work-item and iteration.
    pub fn range(&self, a: &Aff) -> (i128, i128) {
        let (mut lo, mut hi) = (a.c, a.c);
        for (i, &k) in a.k.iter().enumerate() {
            if k == 0 {
                continue;
            }
            let top = k.saturating_mul(self.extent(a, i) - 1);
            lo = lo.saturating_add(top.min(0));
            hi = hi.saturating_add(top.max(0));
        }
        (lo, hi)
    }

    /// A lower bound of `f` over every work-item and iteration that satisfies every
    /// constraint `g >= 0` of `guard`. Sound, not tight: `f = Σ λ_j g_j + h` with `λ_j >= 0`
    /// gives `f >= min h` over the whole box, and the multipliers are found greedily
    /// (cancelling one atom at a time), which is exact for the guards users write (`i < n`,
    /// `i >= k`, `x < w && y < h`, the fused entry guard `glid < N`).
    pub fn lower_bound(&self, f: &Aff, guard: &[Aff]) -> i128 {
        let mut h = *f;
        let mut best = self.range(&h).0;
        for _ in 0..2 * guard.len() + 1 {
            let mut improved = None;
            for g in guard {
                for i in 0..ATOMS {
                    let (hk, gk) = (h.k[i], g.k[i]);
                    if gk == 0 || hk == 0 || (hk > 0) != (gk > 0) || hk % gk != 0 {
                        continue;
                    }
                    let Some(cand) = g.scale(hk / gk).and_then(|s| h.sub(s)) else { continue };
                    let lo = self.range(&cand).0;
                    if lo > best {
                        best = lo;
                        improved = Some(cand);
                    }
                }
            }
            match improved {
                Some(c) => h = c,
                None => break,
            }
        }
        best
    }

    /// An upper bound of `f` wherever `guard` holds.
    pub fn upper_bound(&self, f: &Aff, guard: &[Aff]) -> i128 {
        f.scale(-1).map_or(self.range(f).1, |m| -self.lower_bound(&m, guard))
    }

    /// Whether `f >= 0` for every work-item and iteration that satisfies `guard` (a `false`
    /// answer means "not proven", and the caller refuses).
    pub fn proves(&self, f: &Aff, guard: &[Aff]) -> bool {
        self.range(f).0 >= 0 || self.lower_bound(f, guard) >= 0
    }

    /// Whether every constraint of `then` holds wherever `given` holds.
    pub fn implies(&self, given: &[Aff], then: &[Aff]) -> bool {
        then.iter().all(|g| self.proves(g, given))
    }

    /// Whether `lo <= f <= hi` wherever `guard` holds.
    pub fn within(&self, f: &Aff, lo: i128, hi: i128, guard: &[Aff]) -> bool {
        let (flo, fhi) = self.range(f);
        let low = flo >= lo || f.sub(Aff::konst(lo)).is_some_and(|d| self.proves(&d, guard));
        let high = fhi <= hi || Aff::konst(hi).sub(*f).is_some_and(|d| self.proves(&d, guard));
        low && high
    }
}

/// Constraints `g >= 0` that hold where a condition is true (or false), and whether they say
/// exactly that (`false`: they hold there, but may hold elsewhere too).
#[derive(Clone, Debug, Default)]
pub(super) struct Cond {
    pub constraints: Vec<Aff>,
    pub exact: bool,
}

impl Cond {
    fn unknown() -> Cond {
        Cond { constraints: Vec::new(), exact: false }
    }

    fn of(constraints: Vec<Aff>) -> Cond {
        Cond { constraints, exact: true }
    }

    fn and(mut self, o: Cond) -> Cond {
        self.constraints.extend(o.constraints);
        self.exact &= o.exact;
        self
    }
}

/// What a name in scope stands for.
#[derive(Clone, Default)]
pub(super) struct Env {
    /// Integer names: their affine form, or why they have none.
    pub ints: HashMap<String, Result<Aff, String>>,
    /// `bool` lets: the constraints where they are true, and where they are false.
    pub bools: HashMap<String, (Cond, Cond)>,
    /// How many counted loops enclose this point.
    pub depth: usize,
}

/// Where an access is: the constraints its work-item satisfies, and the text of the
/// conditions they come from, for messages.
#[derive(Clone, Debug, Default)]
pub(super) struct Path {
    pub guard: Vec<Aff>,
    /// Whether `guard` is exactly the set of work-items and iterations that reach this point
    /// (every condition on the way captured, only counted loops around it).
    pub exact: bool,
    pub conds: Vec<String>,
    /// The loops around it, innermost last, each numbered once per walk.
    pub loops: Vec<u32>,
}

pub(super) struct Ctx<'a> {
    pub dom: &'a Domain,
    pub fused: &'a NdRange,
    pub entry: &'a EntryPlan,
    /// Scalar parameters replaced by constants, by name in this entry.
    pub consts: &'a HashMap<String, Imm>,
}

impl Ctx<'_> {
    fn builtin(&self, kind: Builtin, d: usize) -> Result<Aff, String> {
        if d >= 3 {
            return Ok(Aff::konst(0));
        }
        let dom = self.dom;
        let need_local = || {
            if dom.local_known {
                Ok(())
            } else {
                Err(format!("`{}({d})` is not known without an explicit local size", kind.name()))
            }
        };
        Ok(match kind {
            Builtin::GlobalId => {
                let mut a = Aff::konst(self.fused.offset[d] as i128);
                a.k[d] = dom.ls[d] as i128;
                a.k[3 + d] = 1;
                a
            }
            Builtin::GlobalSize => Aff::konst(self.entry.range.global[d] as i128),
            Builtin::GlobalOffset => Aff::konst(self.entry.offset[d] as i128),
            Builtin::LocalSize => {
                need_local()?;
                Aff::konst(dom.ls[d] as i128)
            }
            Builtin::NumGroups => {
                need_local()?;
                Aff::konst((self.entry.range.global[d] / dom.ls[d]) as i128)
            }
            Builtin::LocalId => {
                need_local()?;
                Aff::atom(3 + d)
            }
            Builtin::GroupId => {
                need_local()?;
                Aff::atom(d)
            }
        })
    }

    /// The fused global linear id (what the fused kernel's entry guards compare), as a form.
    pub fn linear_id(&self) -> Aff {
        let (dom, f) = (self.dom, self.fused);
        let mut a = Aff::konst(0);
        let mut stride = 1i128;
        for d in 0..f.dims.clamp(1, 3) {
            a.k[d] = stride * dom.ls[d] as i128;
            a.k[3 + d] = stride;
            stride *= f.global[d] as i128;
        }
        a
    }

    /// The affine form of integer expression `e` where `guard` holds, or why it has none.
    /// Every intermediate value must stay inside its type there, so the form's exact
    /// arithmetic is the IR's wrapping arithmetic.
    pub fn affine(&self, e: &Expr, env: &Env, guard: &[Aff]) -> Result<Aff, String> {
        let a = self.affine_node(e, env, guard)?;
        let Some(s) = e.ty().scalar().filter(|s| s.is_int()) else {
            return Err(format!("`{e}` is not an integer"));
        };
        let (min, max) = (s.int_min().unwrap_or(0), s.int_max().unwrap_or(0));
        if !self.dom.within(&a, min, max, guard) {
            return Err(format!("`{e}` can wrap around its type `{}`", s.name()));
        }
        Ok(a)
    }

    fn affine_node(&self, e: &Expr, env: &Env, guard: &[Aff]) -> Result<Aff, String> {
        let overflow = || format!("`{e}` is too large to analyse");
        match e.node() {
            ExprNode::Imm(Imm::Int(..)) => {
                Ok(Aff::konst(e_imm(e).ok_or_else(|| format!("`{e}` is not an integer"))?))
            }
            ExprNode::Var(v) => {
                if let Some(imm) = self.consts.get(v.name()) {
                    return imm
                        .as_i128()
                        .map(Aff::konst)
                        .ok_or_else(|| format!("`{}` is not an integer constant", v.name()));
                }
                match env.ints.get(v.name()) {
                    Some(Ok(a)) => Ok(*a),
                    Some(Err(why)) => Err(why.clone()),
                    None => Err(format!(
                        "`{}` is a run-time value (a parameter that is not a constant)",
                        v.name()
                    )),
                }
            }
            ExprNode::Builtin { kind, dim } => self.builtin(*kind, *dim as usize),
            ExprNode::Unary { op: UnOp::Neg, a } => {
                self.affine(a, env, guard)?.scale(-1).ok_or_else(overflow)
            }
            ExprNode::Cast { to, a } if to.is_int() => self.affine(a, env, guard),
            ExprNode::Binary { op, a, b } => {
                let bits = e.ty().scalar().map_or(0, |s| s.bits() as i128);
                let (x, y) = (self.affine(a, env, guard)?, self.affine(b, env, guard)?);
                let r = match op {
                    BinOp::Add => x.add(y),
                    BinOp::Sub => x.sub(y),
                    BinOp::Mul if y.is_const() => x.scale(y.c),
                    BinOp::Mul if x.is_const() => y.scale(x.c),
                    BinOp::Shl if y.is_const() && (0..bits).contains(&y.c) => x.scale(1i128 << y.c),
                    _ => return Err(format!("`{e}` is not an affine function of the ids")),
                };
                r.ok_or_else(overflow)
            }
            ExprNode::Load { .. } => Err(format!("`{e}` reads memory (a data-dependent index)")),
            _ => Err(format!("`{e}` is not an affine function of the ids")),
        }
    }

    /// The form of a counted loop's variable, `lo + step * t` with `t` a new loop atom, when
    /// its bounds are constants and it runs at least once; else why not.
    pub fn loop_var(
        &self,
        (lo, hi, step): (&Expr, &Expr, &Expr),
        env: &Env,
        guard: &[Aff],
    ) -> Result<Aff, String> {
        let konst = |e: &Expr| -> Result<i128, String> {
            let a = self.affine(e, env, guard)?;
            if a.is_const() {
                Ok(a.c)
            } else {
                Err(format!("`{e}` is not a constant"))
            }
        };
        let (lo, hi, step) = (konst(lo)?, konst(hi)?, konst(step)?);
        if step <= 0 || hi <= lo {
            return Err("the loop has no iterations to analyse".into());
        }
        let trips = u32::try_from((hi - lo + step - 1) / step)
            .map_err(|_| "the loop runs too many iterations to analyse".to_string())?;
        if env.depth >= LOOPS {
            return Err(format!("more than {LOOPS} counted loops are nested"));
        }
        Aff::loop_atom(env.depth, trips)
            .scale(step)
            .and_then(|t| t.add(Aff::konst(lo)))
            .ok_or_else(|| "the loop's values are too large to analyse".into())
    }

    /// The constraints under which `e` is true (`positive`) or false.
    pub fn cond(&self, e: &Expr, env: &Env, guard: &[Aff], positive: bool) -> Cond {
        match e.node() {
            ExprNode::Imm(Imm::Bool(b)) => {
                if *b == positive {
                    Cond::of(Vec::new())
                } else {
                    // Nothing satisfies `-1 >= 0`.
                    Cond::of(vec![Aff::konst(-1)])
                }
            }
            ExprNode::Var(v) => match env.bools.get(v.name()) {
                Some((t, f)) => if positive { t } else { f }.clone(),
                None => Cond::unknown(),
            },
            ExprNode::Unary { op: UnOp::Not, a } => self.cond(a, env, guard, !positive),
            ExprNode::Binary { op, a, b } => {
                let both = matches!(op, BinOp::LogicAnd | BinOp::And if e.ty().is_bool());
                let either = matches!(op, BinOp::LogicOr | BinOp::Or if e.ty().is_bool());
                if (both && positive) || (either && !positive) {
                    let x = self.cond(a, env, guard, positive);
                    // The second operand is only evaluated (and only matters) where the first
                    // gave its part of the answer.
                    let inner: Vec<Aff> = guard.iter().chain(&x.constraints).copied().collect();
                    return x.and(self.cond(b, env, &inner, positive));
                }
                if both || either {
                    return Cond::unknown();
                }
                self.compare(*op, a, b, env, guard, positive).unwrap_or_else(Cond::unknown)
            }
            _ => Cond::unknown(),
        }
    }

    fn compare(
        &self,
        op: BinOp,
        a: &Expr,
        b: &Expr,
        env: &Env,
        guard: &[Aff],
        positive: bool,
    ) -> Option<Cond> {
        if !a.ty().is_int() {
            return None;
        }
        let (x, y) = (self.affine(a, env, guard).ok()?, self.affine(b, env, guard).ok()?);
        let op = if positive {
            op
        } else {
            match op {
                BinOp::Lt => BinOp::Ge,
                BinOp::Le => BinOp::Gt,
                BinOp::Gt => BinOp::Le,
                BinOp::Ge => BinOp::Lt,
                BinOp::Eq => BinOp::Ne,
                BinOp::Ne => BinOp::Eq,
                _ => return None,
            }
        };
        let one = Aff::konst(1);
        let constraints = match op {
            BinOp::Lt => vec![y.sub(x)?.sub(one)?],
            BinOp::Le => vec![y.sub(x)?],
            BinOp::Gt => vec![x.sub(y)?.sub(one)?],
            BinOp::Ge => vec![x.sub(y)?],
            BinOp::Eq => vec![x.sub(y)?, y.sub(x)?],
            _ => return None,
        };
        Some(Cond::of(constraints))
    }
}

fn e_imm(e: &Expr) -> Option<i128> {
    match e.node() {
        ExprNode::Imm(i) => i.as_i128(),
        _ => None,
    }
}
