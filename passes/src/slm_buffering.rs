//! SLM buffering injection: a single-buffered local-memory loop becomes double-buffered, as
//! oneDNN's `simple_slm_buffering_injector_t` does.
//!
//! The pattern, a `for` loop with constant bounds whose body is
//!
//! ```text
//! for kt in LO .. HI step S { P; barrier(local); C; barrier(local) }
//! ```
//!
//! where `P` (the load) only stores into local arrays `X` and `C` (the compute) only reads
//! them, becomes
//!
//! ```text
//! { let kt_first = LO; P[kt := kt_first] }  barrier(local)
//! for kt in LO .. HI step S {
//!   let kt_slot = ((kt - LO) / S) % 2;
//!   if kt + S < HI { let kt_next = kt + S; P[kt := kt_next, X[i] := X[i + (1 - kt_slot) * n]] }
//!   C[X[i] := X[i + kt_slot * n]]
//!   barrier(local)
//! }
//! ```
//!
//! with every `X` twice as long (`n` its old length): the next tile loads while the current
//! one is used, and one barrier per step both publishes the next tile and retires the
//! current one.
//!
//! Exact under conditions the pass proves, and otherwise it leaves the loop alone:
//! * `P` stores only into `X` (local arrays declared at kernel scope and used nowhere but
//!   in this loop: stores in `P`, loads in `C`), never reads `X`, binds only `let`s and
//!   `for` counters, makes no calls, reads no `var` and no local or private array: so
//!   running it one step early reads the same values;
//! * every store of `P` writes the same elements in every step: its index does not depend
//!   on `kt`, and neither does any condition or loop bound around it, except an `if`/`else`
//!   whose two branches store into the same elements (a masked copy: each branch `let`s
//!   and stores, the same index list, no index using a branch's own bindings). So a step reads
//!   the elements its own `P` wrote, whichever of the two halves they are in;
//! * `C` stores only into private arrays and `var`s, makes no calls, does not use what `P`
//!   binds, and holds no barrier; both barriers order local memory;
//! * the loop runs at least once, and `kt + S` cannot wrap.

use hashbrown::{HashMap, HashSet};
use kiln_ir::{
    walk_mutate_expr, walk_mutate_stmt, walk_stmt, AddrSpace, Expr, ExprNode, FuncKind, Kernel,
    MemFence, Mutator, Scalar, Stmt, StmtNode, Type, Var, Visitor,
};

/// Double-buffers every loop that matches the pattern; the same handle when none does.
pub fn slm_double_buffer(k: &Kernel) -> Kernel {
    slm_buffer(k, 2)
}

/// Triple-buffers every loop that matches the pattern (the pass `slm-buffer3`): the arrays
/// hold three tiles, the prologue loads the first two, and step `kt` loads tile `kt + 2S`
/// while it uses tile `kt`, so two loads are in flight. Still one barrier per step: the slot
/// step `kt` writes is the one step `kt - S` read, and a barrier ends every step.
pub fn slm_triple_buffer(k: &Kernel) -> Kernel {
    slm_buffer(k, 3)
}

/// Buffers every loop that matches the pattern `depth` deep (2 or 3; other depths leave the
/// kernel alone); the same handle when no loop matches.
pub fn slm_buffer(k: &Kernel, depth: u32) -> Kernel {
    if !(2..=3).contains(&depth) {
        return k.clone();
    }
    let k = &kiln_ir::depth::bound_kernel(k);
    let mut loops = Loops(Vec::new());
    loops.visit_stmt(k.body());
    let mut plans = Vec::new();
    for s in loops.0 {
        if let Some(p) = plan(k, &s, depth) {
            // Two loops may not share an array: `plan` refuses arrays used elsewhere.
            plans.push((s.addr(), p));
        }
    }
    if plans.is_empty() {
        return k.clone();
    }
    let mut sizes = HashMap::new();
    for (_, p) in &plans {
        for (name, n) in &p.arrays {
            sizes.insert(name.clone(), n.0);
        }
    }
    let mut rw = Rewrite { plans: plans.into_iter().collect(), sizes, depth };
    rw.mutate_kernel(k)
}

struct Loops(Vec<Stmt>);

impl Visitor for Loops {
    fn visit_stmt(&mut self, s: &Stmt) {
        if matches!(s.node(), StmtNode::For { .. }) {
            self.0.push(s.clone());
        }
        walk_stmt(self, s)
    }
}

/// A matched loop: the arrays (name -> (old length, element type)) and fresh names.
struct Plan {
    arrays: HashMap<String, (u32, Scalar)>,
    /// The prologue's tile counters, one per tile loaded before the loop (`depth - 1`).
    first: Vec<Var>,
    next: Var,
    slot: Var,
}

/// Every variable name of the kernel, and which are `var`s.
#[derive(Default)]
struct Names {
    all: HashSet<String>,
    mutable: HashSet<String>,
}

impl Mutator for Names {
    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        if let StmtNode::Decl { var, .. } = s.node() {
            self.mutable.insert(var.name().to_string());
        }
        walk_mutate_stmt(self, s)
    }
    fn mutate_var(&mut self, v: &Var) -> Var {
        self.all.insert(v.name().to_string());
        v.clone()
    }
}

fn names_of(s: &Stmt) -> Names {
    let mut n = Names::default();
    n.mutate_stmt(s);
    n
}

/// Memory accesses of a statement: (array, is_store) per load/store, atomics, calls and
/// the names it binds.
#[derive(Default)]
struct Uses {
    loads: Vec<Var>,
    stores: Vec<Var>,
    calls: usize,
    barriers: Vec<MemFence>,
    bound: HashSet<String>,
    /// The most lanes a vector access of each array has (arrays only accessed by scalars
    /// are absent): offsets must keep such accesses aligned.
    lanes: HashMap<String, u8>,
}

impl Uses {
    fn vector(&mut self, buf: &Var, lanes: u8) {
        let l = self.lanes.entry(buf.name().to_string()).or_insert(1);
        *l = (*l).max(lanes);
    }
}

impl Visitor for Uses {
    fn visit_expr(&mut self, e: &Expr) {
        match e.node() {
            ExprNode::Load { buf, .. } => self.loads.push(buf.clone()),
            ExprNode::VecLoad { buf, lanes, .. } => {
                self.loads.push(buf.clone());
                self.vector(buf, *lanes);
            }
            _ => {}
        }
        kiln_ir::walk_expr(self, e)
    }
    fn visit_stmt(&mut self, s: &Stmt) {
        match s.node() {
            StmtNode::Store { buf, .. } => self.stores.push(buf.clone()),
            StmtNode::VecStore { buf, value, .. } => {
                self.stores.push(buf.clone());
                self.vector(buf, value.ty().lanes());
            }
            StmtNode::Call { func, .. } => match func.kind() {
                FuncKind::Barrier(f) => self.barriers.push(f),
                _ => self.calls += 1,
            },
            StmtNode::Let { var, .. } | StmtNode::Decl { var, .. } | StmtNode::For { var, .. } => {
                self.bound.insert(var.name().to_string());
            }
            _ => {}
        }
        walk_stmt(self, s)
    }
}

fn uses(stmts: &[Stmt]) -> Uses {
    let mut u = Uses::default();
    for s in stmts {
        u.visit_stmt(s);
    }
    u
}

fn mentions(e: &Expr, names: &HashSet<String>) -> bool {
    struct M<'a>(&'a HashSet<String>, bool);
    impl Visitor for M<'_> {
        fn visit_expr(&mut self, e: &Expr) {
            if let ExprNode::Var(v) = e.node() {
                self.1 |= self.0.contains(v.name());
            }
            kiln_ir::walk_expr(self, e)
        }
    }
    let mut m = M(names, false);
    m.visit_expr(e);
    m.1
}

/// Checks that the load part writes the same elements of `xs` in every step; `dep` holds
/// the names whose values depend on the loop counter.
fn same_writes(s: &Stmt, xs: &HashSet<String>, dep: &mut HashSet<String>) -> bool {
    match s.node() {
        StmtNode::Let { var, value } => {
            if mentions(value, dep) {
                dep.insert(var.name().to_string());
            }
            true
        }
        StmtNode::Store { buf, index, .. } | StmtNode::VecStore { buf, index, .. } => {
            xs.contains(buf.name()) && !mentions(index, dep)
        }
        StmtNode::Block(v) => v.iter().all(|s| same_writes(s, xs, dep)),
        StmtNode::For { lo, hi, step, body, .. } => {
            ![lo, hi, step].iter().any(|e| mentions(e, dep)) && same_writes(body, xs, dep)
        }
        StmtNode::If { cond, then, otherwise } => {
            if !mentions(cond, dep) {
                return same_writes(then, xs, dep)
                    && otherwise.as_ref().is_none_or(|o| same_writes(o, xs, dep));
            }
            // A masked copy: both branches store into the same elements (each branch `let`s
            // and stores only; a vector copied lane by lane stores several elements).
            let stores = |b: &Stmt| -> Option<Vec<(Var, Expr, u8)>> {
                let mut local = dep.clone();
                let mut out = Vec::new();
                for s in b.stmts() {
                    match s.node() {
                        // An index may not use the branch's own bindings at all: two branches
                        // may bind one name to different values.
                        StmtNode::Let { var, .. } => {
                            local.insert(var.name().to_string());
                        }
                        StmtNode::Store { buf, index, .. } if !mentions(index, &local) => {
                            out.push((buf.clone(), index.clone(), 1))
                        }
                        StmtNode::VecStore { buf, index, value } if !mentions(index, &local) => {
                            out.push((buf.clone(), index.clone(), value.ty().lanes()))
                        }
                        _ => return None,
                    }
                }
                Some(out)
            };
            match (stores(then), otherwise.as_ref().and_then(stores)) {
                (Some(a), Some(b)) => {
                    !a.is_empty() && a == b && a.iter().all(|(buf, _, _)| xs.contains(buf.name()))
                }
                _ => false,
            }
        }
        _ => false,
    }
}

fn index_types(stmts: &[Stmt], xs: &HashSet<String>) -> Vec<Scalar> {
    struct T<'a>(&'a HashSet<String>, Vec<Scalar>);
    impl Visitor for T<'_> {
        fn visit_expr(&mut self, e: &Expr) {
            if let ExprNode::Load { buf, index } | ExprNode::VecLoad { buf, index, .. } = e.node() {
                if self.0.contains(buf.name()) {
                    self.1.extend(index.ty().scalar());
                }
            }
            kiln_ir::walk_expr(self, e)
        }
        fn visit_stmt(&mut self, s: &Stmt) {
            if let StmtNode::Store { buf, index, .. } | StmtNode::VecStore { buf, index, .. } =
                s.node()
            {
                if self.0.contains(buf.name()) {
                    self.1.extend(index.ty().scalar());
                }
            }
            walk_stmt(self, s)
        }
    }
    let mut t = T(xs, Vec::new());
    for s in stmts {
        t.visit_stmt(s);
    }
    t.1
}

fn fresh(base: &str, taken: &HashSet<String>) -> String {
    (0..)
        .map(|i| if i == 0 { base.to_string() } else { format!("{base}{i}") })
        .find(|n| !taken.contains(n))
        .unwrap_or_default()
}

fn plan(k: &Kernel, s: &Stmt, depth: u32) -> Option<Plan> {
    let StmtNode::For { var, lo, hi, step, body } = s.node() else { return None };
    let ty = var.ty().scalar().filter(|t| t.is_int())?;
    let (lo, hi, st) =
        (lo.as_imm()?.as_i128()?, hi.as_imm()?.as_i128()?, step.as_imm()?.as_i128()?);
    if st <= 0 || hi <= lo {
        return None;
    }
    let trip = (hi - lo + st - 1) / st;
    // The prefetch computes `kt + (depth - 1) * S` for the last step too.
    if lo + (trip + depth as i128 - 2) * st > ty.int_max()? {
        return None;
    }
    let stmts = body.stmts();
    let b1 = stmts.iter().position(|s| s.barrier_fence().is_some())?;
    let (load, rest) = (&stmts[..b1], &stmts[b1 + 1..]);
    let (last, compute) = rest.split_last()?;
    let fences = [stmts[b1].barrier_fence()?, last.barrier_fence()?];
    if load.is_empty() || fences.iter().any(|f| !f.local) {
        return None;
    }
    let (pu, cu) = (uses(load), uses(compute));
    if !pu.barriers.is_empty() || !cu.barriers.is_empty() || pu.calls > 0 || cu.calls > 0 {
        return None;
    }
    // X: what the load stores into, all local arrays declared at kernel scope.
    let mut arrays = HashMap::new();
    for x in &pu.stores {
        if x.ty().addr_space() != Some(AddrSpace::Local) {
            return None;
        }
        let n = k.body().stmts().iter().find_map(|s| match s.node() {
            StmtNode::Alloc { var, count } if var == x => Some(*count),
            _ => None,
        })?;
        arrays.insert(x.name().to_string(), (n, x.ty().elem()?));
    }
    // A vector access stays aligned only if the offset (a multiple of the length) is a
    // multiple of its lane count.
    for (name, (n, _)) in &arrays {
        let lanes = [&pu, &cu].iter().filter_map(|u| u.lanes.get(name)).max().copied();
        if lanes.is_some_and(|l| n % l as u32 != 0) {
            return None;
        }
    }
    let xs: HashSet<String> = arrays.keys().cloned().collect();
    // The load reads only pointer parameters (no local or private array) and no `var`.
    let params: HashSet<&str> = k.params().iter().map(|p| p.name()).collect();
    if pu.loads.iter().any(|b| !params.contains(b.name())) {
        return None;
    }
    let kernel_names = names_of(k.body());
    let load_names = names_of(&Stmt::block(load.to_vec()));
    if load_names.all.iter().any(|n| kernel_names.mutable.contains(n)) {
        return None;
    }
    // The compute stores only into private arrays, and does not use the load's bindings.
    if cu.stores.iter().any(|b| b.ty().addr_space() != Some(AddrSpace::Private)) {
        return None;
    }
    let compute_names = names_of(&Stmt::block(compute.to_vec()));
    if compute_names.all.iter().any(|n| pu.bound.contains(n)) {
        return None;
    }
    // X is used nowhere else: every access of it in the kernel is one of the loop's.
    let ku = uses(std::slice::from_ref(k.body()));
    let count = |v: &[Var]| v.iter().filter(|b| xs.contains(b.name())).count();
    if count(&ku.loads) != count(&cu.loads) || count(&ku.stores) != count(&pu.stores) {
        return None;
    }
    let mut dep = HashSet::from([var.name().to_string()]);
    if !load.iter().all(|s| same_writes(s, &xs, &mut dep)) {
        return None;
    }
    // Twice the length must fit every index type and an array's u32 length.
    let max_n = arrays.values().map(|a| a.0 as i128).max()?;
    for t in index_types(stmts, &xs) {
        if depth as i128 * max_n > t.int_max()? || !t.is_int() {
            return None;
        }
    }
    if depth as i128 * max_n > u32::MAX as i128 {
        return None;
    }
    let taken = &kernel_names.all;
    let base = var.name();
    Some(Plan {
        arrays,
        first: (0..depth - 1)
            .map(|j| {
                let name =
                    if j == 0 { format!("{base}_first") } else { format!("{base}_first{j}") };
                Var::new(fresh(&name, taken), Type::Scalar(ty))
            })
            .collect(),
        next: Var::new(fresh(&format!("{base}_next"), taken), Type::Scalar(ty)),
        slot: Var::new(fresh(&format!("{base}_slot"), taken), Type::Scalar(ty)),
    })
}

/// Renames the loop counter and offsets the accesses of the arrays by `slot * n`.
struct Offset<'a> {
    rename: Option<(&'a Var, &'a Var)>,
    arrays: &'a HashMap<String, (u32, Scalar)>,
    slot: Option<Expr>,
}

impl Offset<'_> {
    fn index(&self, buf: &Var, index: &Expr) -> Option<Expr> {
        let (n, _) = self.arrays.get(buf.name())?;
        let slot = self.slot.as_ref()?;
        let t = index.ty().scalar()?;
        let s = if slot.ty() == index.ty() { slot.clone() } else { slot.cast(t) };
        Some(index.clone() + s * Expr::int(t, *n as i128))
    }
}

impl Mutator for Offset<'_> {
    fn mutate_var(&mut self, v: &Var) -> Var {
        match self.rename {
            Some((from, to)) if v == from => to.clone(),
            _ => v.clone(),
        }
    }
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        let e = walk_mutate_expr(self, e);
        match e.node() {
            ExprNode::Load { buf, index } => {
                if let Some(i) = self.index(buf, index) {
                    return Expr::load(buf, i);
                }
            }
            ExprNode::VecLoad { buf, index, lanes } => {
                if let Some(i) = self.index(buf, index) {
                    return Expr::vload(buf, i, *lanes);
                }
            }
            _ => {}
        }
        e
    }
    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        let s = walk_mutate_stmt(self, s);
        match s.node() {
            StmtNode::Store { buf, index, value } => {
                if let Some(i) = self.index(buf, index) {
                    return Stmt::store(buf, i, value.clone());
                }
            }
            StmtNode::VecStore { buf, index, value } => {
                if let Some(i) = self.index(buf, index) {
                    return Stmt::vstore(buf, i, value.clone());
                }
            }
            _ => {}
        }
        s
    }
}

struct Rewrite {
    plans: HashMap<usize, Plan>,
    sizes: HashMap<String, u32>,
    depth: u32,
}

impl Mutator for Rewrite {
    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        if let StmtNode::Alloc { var, count } = s.node() {
            if let Some(&n) = self.sizes.get(var.name()) {
                debug_assert_eq!(n, *count);
                return Stmt::alloc(var, self.depth * n);
            }
        }
        // The top-level statement lists are rewritten here, so that a loop can become a
        // prologue plus a loop in its block.
        if let StmtNode::Block(v) = s.node() {
            let mut out = Vec::new();
            let mut changed = false;
            for x in v {
                match self.plans.remove(&x.addr()) {
                    Some(p) => {
                        out.extend(expand(x, &p, self.depth));
                        changed = true;
                    }
                    None => {
                        let y = self.mutate_stmt(x);
                        changed |= !y.ptr_eq(x);
                        out.push(y);
                    }
                }
            }
            return if changed { Stmt::block(out) } else { s.clone() };
        }
        walk_mutate_stmt(self, s)
    }
}

/// The prologue and the double-buffered loop for a planned loop.
fn expand(s: &Stmt, p: &Plan, depth: u32) -> Vec<Stmt> {
    let StmtNode::For { var, lo, hi, step, body } = s.node() else { return vec![s.clone()] };
    let stmts = body.stmts();
    let b1 = stmts.iter().position(|s| s.barrier_fence().is_some()).unwrap_or(0);
    let (load, rest) = (&stmts[..b1], &stmts[b1 + 1..]);
    let Some((last, compute)) = rest.split_last() else { return vec![s.clone()] };
    let copy = |rename: &Var, slot: Option<Expr>| -> Vec<Stmt> {
        let mut m = Offset { rename: Some((var, rename)), arrays: &p.arrays, slot };
        load.iter().map(|s| m.mutate_stmt(s)).collect()
    };
    let ty = var.ty().scalar().unwrap_or(Scalar::I32);
    // Prologue: tiles 0 .. depth - 2 into slots 0 .. depth - 2, those the loop reaches (the
    // bounds are constants; the first always runs).
    let (lo_c, hi_c, st_c) = [lo, hi, step].map(|e| e.as_imm().and_then(|i| i.as_i128())).into();
    let mut prologue = Vec::new();
    for (j, f) in p.first.iter().enumerate() {
        if j > 0
            && !matches!((lo_c, hi_c, st_c), (Some(l), Some(h), Some(s)) if l + j as i128 * s < h)
        {
            break;
        }
        let at = match (lo_c, st_c) {
            _ if j == 0 => lo.clone(),
            (Some(l), Some(s)) => Expr::int(ty, l + j as i128 * s),
            _ => lo.clone() + step.clone() * Expr::int(ty, j as i128),
        };
        let slot = (j > 0).then(|| Expr::int(ty, j as i128));
        prologue.push(Stmt::block([vec![Stmt::let_(f, at)], copy(f, slot)].concat()));
    }
    let one = Expr::int(ty, 1);
    let is = |e: &Expr, v: i128| e.as_imm().and_then(|i| i.as_i128()) == Some(v);
    let mut it = var.expr();
    if !is(lo, 0) {
        it = it - lo.clone();
    }
    if !is(step, 1) {
        it = it / step.clone();
    }
    let d = Expr::int(ty, depth as i128);
    let slot = it % d.clone();
    let (next, next_slot) = if depth == 2 {
        (var.expr() + step.clone(), one - p.slot.expr())
    } else {
        let ahead = Expr::int(ty, depth as i128 - 1);
        let dist = match st_c {
            Some(s) => Expr::int(ty, s * (depth as i128 - 1)),
            None => step.clone() * ahead.clone(),
        };
        (var.expr() + dist, (p.slot.expr() + ahead) % d)
    };
    let prefetch = Stmt::block(
        [vec![Stmt::let_(&p.next, next.clone())], copy(&p.next, Some(next_slot))].concat(),
    );
    let mut m = Offset { rename: None, arrays: &p.arrays, slot: Some(p.slot.expr()) };
    let mut new_body =
        vec![Stmt::let_(&p.slot, slot), Stmt::if_(next.cmp_lt(hi.clone()), prefetch)];
    new_body.extend(compute.iter().map(|s| m.mutate_stmt(s)));
    new_body.push(last.clone());
    prologue.extend([
        stmts[b1].clone(),
        Stmt::for_(var, lo.clone(), hi.clone(), step.clone(), Stmt::block(new_body)),
    ]);
    prologue
}
