//! Promotion legality: a buffer is promoted only when its access patterns, in every entry that
//! touches it, prove that the promoted array gives exactly the sequential results.
//!
//! Every index of the buffer must be an *affine function of the work-item's id*: built from
//! integer constants, `let`-bound names, scalar parameters replaced by constants and the
//! work-item built-ins, with `+`, `-`, unary `-`, `*` by a constant, `<<` by a constant and
//! integer casts, where no intermediate value leaves its type's range for any work-item (so
//! wrapping never happens and exact arithmetic is the IR's arithmetic). Anything else (a
//! load, a loop variable, a mutable variable, a non-constant scalar, `/`, `%`, `select`, ...)
//! is not provable and refuses the promotion. Ids are written as `grp(d)` (group id) and
//! `lid(d)` (local id); without a known local size the whole range is one group.
//!
//! * **private**: with `L` the fused global linear id and `N` the work-item count, every
//!   access is `s * L + c` with one stride `s != 0` for all accesses (any `s` when `N = 1`), the
//!   constants `c` of all accesses within a window narrower than `|s|` (so no two work-items
//!   touch the same element) and narrower than the array size (so `index % size` gives one
//!   work-item's elements distinct slots);
//! * **local**: every access is `a * G + l`, with `G` the linear work-group id, one stride
//!   `a != 0` for all accesses (any `a` with one work-group) and `l` a function of the local
//!   ids; the `l` of all accesses span fewer than `|a|` elements (no two work-groups touch the
//!   same element) and fewer than the array size; with `barriers = "none"` all accesses must
//!   moreover be the same index.
//!
//! In both, every index lies in `[0, 2^32)` and, when the buffer length is given, inside the
//! buffer; and every read must read an element written before it in program order by a store
//! that surely runs (at the top level of an entry without a guard): for private, by the same
//! work-item at the same index; for local, the same, or a store of an earlier entry that
//! writes one element per work-item over a run covering the read, with the work-group
//! barrier between entries. The user-facing statement of this rule is docs/fusion.md.
//! Entries whose ids are remapped never qualify.

use hashbrown::HashMap;
use kiln_ir::launch::NdRange;
use kiln_ir::{BinOp, Builtin, Expr, ExprNode, Imm, Stmt, StmtNode, UnOp};

use super::ndrange::EntryPlan;
use super::spec::{BarrierPolicy, PromoteTo};

/// `c + Σ k[i] * atom[i]`, atoms `grp(0..3)` then `lid(0..3)`, all zero-based.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Aff {
    c: i128,
    k: [i128; 6],
}

impl Aff {
    fn konst(c: i128) -> Aff {
        Aff { c, k: [0; 6] }
    }
    fn is_const(&self) -> bool {
        self.k.iter().all(|&k| k == 0)
    }
    fn zip(self, o: Aff, f: impl Fn(i128, i128) -> Option<i128>) -> Option<Aff> {
        let mut k = [0; 6];
        for (x, (a, b)) in k.iter_mut().zip(self.k.iter().zip(&o.k)) {
            *x = f(*a, *b)?;
        }
        Some(Aff { c: f(self.c, o.c)?, k })
    }
    fn scale(self, m: i128) -> Option<Aff> {
        self.zip(Aff::konst(0), |a, _| a.checked_mul(m))
    }
}

/// The fused range seen as groups and local ids.
struct Domain {
    /// Work-group size per dimension (the global size when no local size is known).
    ls: [u32; 3],
    /// Work-group count per dimension (1 when no local size is known).
    ng: [u32; 3],
    local_known: bool,
}

impl Domain {
    fn extent(&self, atom: usize) -> i128 {
        if atom < 3 {
            self.ng[atom] as i128
        } else {
            self.ls[atom - 3] as i128
        }
    }
    /// The least and greatest value of `a` over every work-item.
    fn range(&self, a: &Aff) -> (i128, i128) {
        let (mut lo, mut hi) = (a.c, a.c);
        for (i, &k) in a.k.iter().enumerate() {
            let top = k.saturating_mul(self.extent(i) - 1);
            lo = lo.saturating_add(top.min(0));
            hi = hi.saturating_add(top.max(0));
        }
        (lo, hi)
    }
}

/// What a name in scope stands for.
type Env = HashMap<String, Result<Aff, String>>;

struct Ctx<'a> {
    dom: &'a Domain,
    fused: &'a NdRange,
    entry: &'a EntryPlan,
    /// Scalar parameters replaced by constants, by name in this entry.
    consts: &'a HashMap<String, Imm>,
}

impl Ctx<'_> {
    fn builtin(&self, kind: Builtin, d: usize) -> Result<Aff, String> {
        if d >= 3 {
            return Ok(Aff::konst(0));
        }
        let dom = self.dom;
        let atom = |i: usize| {
            let mut k = [0; 6];
            k[i] = 1;
            Aff { c: 0, k }
        };
        let need_local = || {
            if dom.local_known {
                Ok(())
            } else {
                Err(format!("`{}({d})` is not known without an explicit local size", kind.name()))
            }
        };
        Ok(match kind {
            Builtin::GlobalId => Aff {
                c: self.fused.offset[d] as i128,
                k: {
                    let mut k = [0; 6];
                    k[d] = dom.ls[d] as i128;
                    k[3 + d] = 1;
                    k
                },
            },
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
                atom(3 + d)
            }
            Builtin::GroupId => {
                need_local()?;
                atom(d)
            }
        })
    }

    /// The affine form of integer expression `e`, or why it has none.
    fn affine(&self, e: &Expr, env: &Env) -> Result<Aff, String> {
        let a = self.affine_node(e, env)?;
        let Some(s) = e.ty().scalar().filter(|s| s.is_int()) else {
            return Err(format!("`{e}` is not an integer"));
        };
        let (lo, hi) = self.dom.range(&a);
        let (min, max) = (s.int_min().unwrap_or(0), s.int_max().unwrap_or(0));
        if lo < min || hi > max {
            return Err(format!("`{e}` can wrap around its type `{}`", s.name()));
        }
        Ok(a)
    }

    fn affine_node(&self, e: &Expr, env: &Env) -> Result<Aff, String> {
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
                match env.get(v.name()) {
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
                self.affine(a, env)?.scale(-1).ok_or_else(overflow)
            }
            ExprNode::Cast { to, a } if to.is_int() => self.affine(a, env),
            ExprNode::Binary { op, a, b } => {
                let bits = e.ty().scalar().map_or(0, |s| s.bits() as i128);
                let (x, y) = (self.affine(a, env)?, self.affine(b, env)?);
                let r = match op {
                    BinOp::Add => x.zip(y, i128::checked_add),
                    BinOp::Sub => x.zip(y, i128::checked_sub),
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
}

fn e_imm(e: &Expr) -> Option<i128> {
    match e.node() {
        ExprNode::Imm(i) => i.as_i128(),
        _ => None,
    }
}

/// One access of the promoted buffer.
#[derive(Clone, Debug)]
struct Access {
    entry: usize,
    write: bool,
    /// The access as written in its kernel, e.g. `t[i + 1]`.
    text: String,
    aff: Result<Aff, String>,
    /// A store that runs for every work-item (top level of an unguarded entry).
    definite: bool,
}

/// Collects the accesses of `names` in one entry, in program order.
struct Collect<'a> {
    ctx: Ctx<'a>,
    names: &'a [String],
    entry: usize,
    out: Vec<Access>,
}

impl Collect<'_> {
    fn access(&mut self, env: &Env, index: &Expr, write: bool, text: String, top: bool) {
        let aff = self.ctx.affine(index, env);
        let definite = write && top && !self.ctx.entry.guard;
        self.out.push(Access { entry: self.entry, write, text, aff, definite });
    }

    fn reads(&mut self, e: &Expr, env: &Env) {
        if let ExprNode::Load { buf, index } = e.node() {
            self.reads(index, env);
            if self.names.iter().any(|n| n == buf.name()) {
                self.access(env, index, false, format!("{e}"), false);
            }
            return;
        }
        if let ExprNode::VecLoad { buf, index, .. } = e.node() {
            self.reads(index, env);
            if self.names.iter().any(|n| n == buf.name()) {
                // A promoted buffer is indexed one element at a time: a vector access
                // keeps the buffer in memory.
                let why = format!("`{e}` is a vector access");
                self.out.push(Access {
                    entry: self.entry,
                    write: false,
                    text: format!("{e}"),
                    aff: Err(why),
                    definite: false,
                });
            }
            return;
        }
        for c in e.children() {
            self.reads(c, env);
        }
    }

    fn stmts(&mut self, ss: &[Stmt], env: &mut Env, top: bool) {
        for s in ss {
            self.stmt(s, env, top);
        }
    }

    /// Walks `s`; bindings it makes stay in `env` (blocks restore their own).
    fn stmt(&mut self, s: &Stmt, env: &mut Env, top: bool) {
        let opaque = |what: &str, name: &str| Err(format!("`{name}` is a {what}"));
        match s.node() {
            StmtNode::Let { var, value } => {
                self.reads(value, env);
                let a = if var.ty().is_int() {
                    self.ctx.affine(value, env).map_err(|why| format!("`{}`: {why}", var.name()))
                } else {
                    opaque("non-integer value", var.name())
                };
                env.insert(var.name().to_string(), a);
            }
            StmtNode::Decl { var, init } => {
                self.reads(init, env);
                env.insert(var.name().to_string(), opaque("mutable variable", var.name()));
            }
            StmtNode::Assign { value, .. } => self.reads(value, env),
            StmtNode::Store { buf, index, value } => {
                self.reads(index, env);
                self.reads(value, env);
                if self.names.iter().any(|n| n == buf.name()) {
                    let text = format!("{}[{index}]", buf.name());
                    self.access(env, index, true, text, top);
                }
            }
            StmtNode::VecStore { buf, index, value } => {
                self.reads(index, env);
                self.reads(value, env);
                if self.names.iter().any(|n| n == buf.name()) {
                    let text = format!("vstore({}, {index}, ..)", buf.name());
                    self.out.push(Access {
                        entry: self.entry,
                        write: true,
                        aff: Err(format!("`{text}` is a vector access")),
                        text,
                        definite: false,
                    });
                }
            }
            StmtNode::Alloc { var, .. } => {
                env.insert(var.name().to_string(), opaque("array", var.name()));
            }
            StmtNode::If { cond, then, otherwise } => {
                self.reads(cond, env);
                self.stmt(then, &mut env.clone(), false);
                if let Some(o) = otherwise {
                    self.stmt(o, &mut env.clone(), false);
                }
            }
            StmtNode::For { var, lo, hi, step, body } => {
                for x in [lo, hi, step] {
                    self.reads(x, env);
                }
                let mut inner = env.clone();
                inner.insert(var.name().to_string(), opaque("loop variable", var.name()));
                self.stmt(body, &mut inner, false);
            }
            StmtNode::While { cond, body } => {
                let mut inner = env.clone();
                self.reads(cond, &inner);
                self.stmt(body, &mut inner, false);
            }
            StmtNode::Block(ss) => self.stmts(ss, &mut env.clone(), false),
            StmtNode::Call { result, args, .. } => {
                args.iter().for_each(|a| self.reads(a, env));
                if let Some(r) = result {
                    env.insert(r.name().to_string(), opaque("call result", r.name()));
                }
            }
        }
    }
}

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
    let ls = local.unwrap_or(fused.global);
    let dom =
        Domain { ls, ng: [0, 1, 2].map(|d| fused.global[d] / ls[d]), local_known: local.is_some() };
    let mut accesses = Vec::new();
    for t in touchers {
        if t.plan.remap_ids {
            return Err(format!(
                "entry {} (`{}`) has its work-item ids remapped, so its accesses cannot be proven",
                t.entry, t.kernel
            ));
        }
        let ctx = Ctx { dom: &dom, fused, entry: t.plan, consts: &t.consts };
        let mut c = Collect { ctx, names: &t.names, entry: t.entry, out: Vec::new() };
        c.stmts(t.body.stmts(), &mut Env::new(), true);
        accesses.extend(c.out);
    }
    if accesses.is_empty() {
        // Never read or written: an unused array is exact.
        return Ok(());
    }
    let kernel_of = |e: usize| touchers.iter().find(|t| t.entry == e).map_or("?", |t| t.kernel);
    let name = |a: &Access| {
        format!(
            "entry {} (`{}`) {} `{}`",
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
        let (lo, hi) = dom.range(f);
        if lo < 0 || hi >= len_limit {
            return Err(format!(
                "{}: the index ranges over [{lo}, {hi}], outside the buffer{}",
                name(a),
                req.buffer_len.map_or(String::new(), |l| format!(" of {l} elements"))
            ));
        }
    }
    match req.to {
        PromoteTo::Local => check_local(&dom, req, &accesses, &forms, &name),
        _ => check_private(fused, &dom, req, &accesses, &forms, &name),
    }
}

fn check_private(
    fused: &NdRange,
    dom: &Domain,
    req: &Request,
    accesses: &[Access],
    forms: &[Aff],
    name: &dyn Fn(&Access) -> String,
) -> Result<(), String> {
    let items = fused.work_items();
    // Linear-id stride of each dimension.
    let mut stride = [1i128; 3];
    for d in 1..3 {
        stride[d] = stride[d - 1] * fused.global[d - 1] as i128;
    }
    // Each access as `s * L + c`.
    let mut sc: Vec<(i128, i128)> = Vec::with_capacity(forms.len());
    for (a, f) in accesses.iter().zip(forms) {
        // The stride from the fastest dimension that has more than one work-item.
        let s = match (0..3).find(|&d| fused.global[d] > 1) {
            Some(d) if dom.ls[d] > 1 => f.k[3 + d] / stride[d],
            Some(d) => f.k[d] / stride[d],
            None => 0,
        };
        let own = (0..3).all(|d| {
            (dom.ls[d] <= 1 || f.k[3 + d] == s.saturating_mul(stride[d]))
                && (dom.ng[d] <= 1 || f.k[d] == s.saturating_mul(stride[d] * dom.ls[d] as i128))
        });
        if !own || (items > 1 && s == 0) {
            return Err(format!(
                "{}: the index is not (stride) x the work-item's linear id + a constant, so it may be another work-item's element",
                name(a)
            ));
        }
        sc.push((s, f.c));
    }
    if items > 1 {
        if let Some(i) = sc.iter().position(|x| x.0 != sc[0].0) {
            return Err(format!(
                "{} with stride {} but {} with stride {}: work-items meet at each other's elements",
                name(&accesses[0]),
                sc[0].0,
                name(&accesses[i]),
                sc[i].0
            ));
        }
    }
    let (cmin, cmax) = sc.iter().fold((i128::MAX, i128::MIN), |(l, h), x| (l.min(x.1), h.max(x.1)));
    let width = cmax.saturating_sub(cmin);
    if items > 1 && !sc.is_empty() && width >= sc[0].0.abs() {
        let (i, j) = (
            sc.iter().position(|x| x.1 == cmin).unwrap_or(0),
            sc.iter().position(|x| x.1 == cmax).unwrap_or(0),
        );
        return Err(format!(
            "{} and {}: neighbouring work-items access the same element",
            name(&accesses[i]),
            name(&accesses[j])
        ));
    }
    if !sc.is_empty() && width >= req.size as i128 {
        return Err(format!(
            "one work-item accesses {} elements apart, more than the private array's size {}",
            width, req.size
        ));
    }
    if !req.fresh {
        return Ok(());
    }
    // Every read reads what the same work-item wrote before, at the same index.
    let mut written: Vec<i128> = Vec::new();
    for (a, &(_, c)) in accesses.iter().zip(&sc) {
        if a.write {
            if a.definite {
                written.push(c);
            }
        } else if !written.contains(&c) {
            return Err(format!(
                "{}: this work-item has not surely written that element before (unfused, it holds another work-item's or the buffer's earlier value)",
                name(a)
            ));
        }
    }
    Ok(())
}

fn check_local(
    dom: &Domain,
    req: &Request,
    accesses: &[Access],
    forms: &[Aff],
    name: &dyn Fn(&Access) -> String,
) -> Result<(), String> {
    let groups: i128 = dom.ng.iter().map(|&g| g as i128).product();
    let group_items: i128 = dom.ls.iter().map(|&l| l as i128).product();
    let mut gstride = [1i128; 3];
    let mut lstride = [1i128; 3];
    for d in 1..3 {
        gstride[d] = gstride[d - 1] * dom.ng[d - 1] as i128;
        lstride[d] = lstride[d - 1] * dom.ls[d - 1] as i128;
    }
    // Each access as `a * G + l(lid)`, G the linear group id, with one stride `a`.
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
        let mut part = *f;
        part.k[..3].fill(0);
        parts.push(part);
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
    // A store that writes a contiguous run of `group_items` elements, one per work-item.
    let dense = |p: &Aff| (0..3).all(|d| dom.ls[d] <= 1 || p.k[3 + d] == lstride[d]);
    let mut written: Vec<(usize, Aff)> = Vec::new();
    for (i, acc) in accesses.iter().enumerate() {
        if acc.write {
            if acc.definite {
                written.push((acc.entry, parts[i]));
            }
            continue;
        }
        let (rlo, rhi) = ranges[i];
        let covered = written.iter().any(|(e, w)| {
            *w == parts[i]
                || (*e < acc.entry
                    && req.barriers == BarrierPolicy::WorkGroup
                    && dense(w)
                    && w.c <= rlo
                    && rhi < w.c + group_items)
        });
        if !covered {
            return Err(format!(
                "{}: the element is not surely written before (by this work-item at the same index, or by an earlier kernel writing those elements of the work-group, with a barrier between)",
                name(acc)
            ));
        }
    }
    Ok(())
}
