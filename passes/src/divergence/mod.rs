//! Divergence (uniformity) analysis for kiln's structured IR.
//!
//! A value is *uniform* at a program point if every active work-item of a 64-lane wavefront
//! that reaches that point at the same dynamic instance holds the same value; otherwise it is
//! *divergent*. Backends put uniform values in scalar registers and divergent ones in vector
//! registers, so calling a divergent value uniform is a silent miscompile: the analysis is
//! conservative (it may call a uniform value divergent, never the reverse).
//!
//! * **Sources of divergence**: `global_id` and `local_id` (group ids, sizes and offsets are
//!   uniform: a wavefront never spans work-groups), atomics' results, loads from private
//!   memory and loads through generic pointers. Kernel parameters are uniform. A load from
//!   global, constant or local memory at a uniform index is uniform (generated and valid
//!   kernels are race-free, so work-items loading one address at one instance agree).
//! * **Data dependence**: an expression with a divergent operand is divergent.
//! * **Sync dependence**: a mutable local assigned under a divergent `if` is divergent after
//!   the `if`; after a loop whose exit is divergent (a divergent `while` condition or `for`
//!   bound), every local assigned in the loop is divergent (temporal divergence), while it
//!   may stay uniform inside the loop. A uniform branch or loop inside a divergent one keeps
//!   its values uniform inside. Nested cases compose.
//!
//! The analysis is flow-sensitive over the structured IR for mutable variables (`var`s and
//! loop counters): it computes, for every statement, the set of those that are divergent
//! just before it ([`Divergence::divergent_before`]), with loops solved to a fixed point.
//! Immutable bindings (`let`s and call results) are bound once per scope, so one fact per
//! name holds everywhere: divergent if any binding of that name is. That keeps the facts
//! per statement as small as the live mutable state, so the analysis stays linear on long
//! straight-line code (a set of every divergent `let` per statement was quadratic). Ask
//! [`Divergence::is_divergent_before`] or [`Divergence::expr_divergent_at`], which combine
//! both. Statements are identified by their handle's address ([`Stmt::addr`]); a handle
//! shared by several places gets the union of their states.

mod print;
#[cfg(feature = "testing")]
pub mod trace;

use std::collections::{BTreeSet, HashMap, HashSet};

use kiln_ir::{AddrSpace, Builtin, Expr, ExprNode, FuncKind, Kernel, Stmt, StmtNode, Var};

pub use print::annotate;

// Keep `dump()` in every binary that links kiln-passes, for debuggers (see kiln-ir's).
#[used]
static KEEP_DIVERGENCE_DUMP: fn(&Divergence) = Divergence::dump;

/// A set of divergent variables.
pub type VarSet = HashSet<Var>;

/// The result of [`analyze`]: divergence facts for every statement of one kernel.
#[derive(Clone, Debug, Default)]
pub struct Divergence {
    before: HashMap<usize, VarSet>,
    loop_head: HashMap<usize, VarSet>,
    branch: HashMap<usize, bool>,
    binding: HashMap<usize, bool>,
    forced_uniform: HashSet<Var>,
    /// Immutable bindings (lets, call results) divergent at some binding.
    lets: VarSet,
    /// Every variable divergent somewhere (for [`Divergence::ever_divergent`]).
    ever: VarSet,
}

/// Runs the analysis on a kernel (which should verify).
pub fn analyze(kernel: &Kernel) -> Divergence {
    analyze_forcing(kernel, &HashSet::new())
}

/// Runs the analysis, but pretends every variable in `forced` is uniform wherever it is
/// bound. **Unsound by design**: it exists to plant miscompiles in tests and show that the
/// differential tests catch them. Only with the `testing` feature.
#[cfg(feature = "testing")]
pub fn analyze_with(kernel: &Kernel, forced: &HashSet<Var>) -> Divergence {
    analyze_forcing(kernel, forced)
}

fn analyze_forcing(kernel: &Kernel, forced: &HashSet<Var>) -> Divergence {
    let mut d = Divergence { forced_uniform: forced.clone(), ..Divergence::default() };
    let mut state = VarSet::new();
    // The analysis recurses over expressions; its facts about the kernel's own variables are
    // the same on the depth-bounded form (which only adds lets).
    d.stmt(kiln_ir::depth::bound_kernel(kernel).body(), &mut state);
    d
}

/// True if `e` is divergent when the variables in `div` are divergent (data dependence and
/// sources of divergence only).
pub fn expr_divergent(e: &Expr, div: &VarSet) -> bool {
    divergent_by(e, &|v| div.contains(v))
}

/// [`expr_divergent`] with the divergent variables given by a predicate.
fn divergent_by(e: &Expr, div: &impl Fn(&Var) -> bool) -> bool {
    match e.node() {
        ExprNode::Var(v) => div(v),
        ExprNode::Imm(_) => false,
        ExprNode::Builtin { kind, .. } => matches!(kind, Builtin::GlobalId | Builtin::LocalId),
        ExprNode::Load { buf, index } | ExprNode::VecLoad { buf, index, .. } => {
            matches!(buf.ty().addr_space(), Some(AddrSpace::Private | AddrSpace::Generic) | None)
                || divergent_by(index, div)
        }
        _ => e.children().into_iter().any(|c| divergent_by(c, div)),
    }
}

/// Every variable assigned (by `v = ...`) anywhere inside `s`.
pub fn assigned_vars(s: &Stmt) -> BTreeSet<Var> {
    fn go(s: &Stmt, out: &mut BTreeSet<Var>) {
        match s.node() {
            StmtNode::Assign { var, .. } => {
                out.insert(var.clone());
            }
            StmtNode::If { then, otherwise, .. } => {
                go(then, out);
                if let Some(o) = otherwise {
                    go(o, out);
                }
            }
            StmtNode::For { body, .. } | StmtNode::While { body, .. } => go(body, out),
            StmtNode::Block(v) => v.iter().for_each(|s| go(s, out)),
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    go(s, &mut out);
    out
}

impl std::fmt::Display for Divergence {
    /// The variables divergent somewhere, by name, and how many branches and bindings were
    /// found uniform and divergent (the facts per statement print with [`annotate`]).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<&str> = self.ever.iter().map(|v| v.name()).collect();
        names.sort_unstable();
        names.dedup();
        let count = |m: &HashMap<usize, bool>| {
            let d = m.values().filter(|&&d| d).count();
            (m.len() - d, d)
        };
        let (bu, bd) = count(&self.branch);
        let (lu, ld) = count(&self.binding);
        write!(
            f,
            "divergent: [{}]; branches: {bu} uniform, {bd} divergent; bindings: {lu} uniform, \
             {ld} divergent",
            names.join(", ")
        )
    }
}

impl Divergence {
    /// Prints the result's summary ([`Divergence`]'s `Display`) to stderr. Meant for
    /// debuggers: `call kiln_passes::divergence::Divergence::dump(&d)` in gdb.
    #[inline(never)]
    pub fn dump(&self) {
        eprintln!("{self}");
    }

    /// The mutable variables (`var`s, loop counters) divergent just before statement `s`
    /// (empty if `s` was not analyzed). Immutable bindings are not in it: combine it with
    /// them through [`Divergence::expr_divergent_in`].
    pub fn divergent_before(&self, s: &Stmt) -> VarSet {
        self.before.get(&s.addr()).cloned().unwrap_or_default()
    }

    /// True if `var` is divergent just before `s`.
    pub fn is_divergent_before(&self, s: &Stmt, var: &Var) -> bool {
        self.lets.contains(var) || self.before.get(&s.addr()).is_some_and(|d| d.contains(var))
    }

    /// True if expression `e`, evaluated just before statement `s`, is divergent. For a
    /// `while` statement, its condition is evaluated at the loop head: use
    /// [`Divergence::loop_head_divergent`] for it.
    pub fn expr_divergent_at(&self, s: &Stmt, e: &Expr) -> bool {
        match self.before.get(&s.addr()) {
            Some(state) => self.expr_divergent_in(e, state),
            None => self.expr_divergent_in(e, &VarSet::new()),
        }
    }

    /// True if `e` is divergent where the mutable variables in `state` (a
    /// [`Divergence::divergent_before`] or [`Divergence::loop_head_divergent`] set) are
    /// divergent, together with this kernel's divergent immutable bindings.
    pub fn expr_divergent_in(&self, e: &Expr, state: &VarSet) -> bool {
        divergent_by(e, &|v| state.contains(v) || self.lets.contains(v))
    }

    /// The mutable variables divergent at the head of loop `s` (where a `while` condition
    /// is evaluated and a `for` body begins), after the fixed point; as
    /// [`Divergence::divergent_before`], immutable bindings are not in it.
    pub fn loop_head_divergent(&self, s: &Stmt) -> VarSet {
        self.loop_head.get(&s.addr()).cloned().unwrap_or_default()
    }

    /// True if `var` is divergent at the head of loop `s`.
    pub fn is_divergent_at_head(&self, s: &Stmt, var: &Var) -> bool {
        self.lets.contains(var) || self.loop_head.get(&s.addr()).is_some_and(|d| d.contains(var))
    }

    /// For an `if`: whether its condition is divergent. For a loop: whether its exit is
    /// divergent (work-items may leave it at different iterations). `None` for other
    /// statements.
    pub fn branch_divergent(&self, s: &Stmt) -> Option<bool> {
        self.branch.get(&s.addr()).copied()
    }

    /// For a `let`, `var`, assignment, `for` (its counter) or call with a result: whether
    /// the bound value is divergent. `None` for other statements.
    pub fn binding_divergent(&self, s: &Stmt) -> Option<bool> {
        self.binding.get(&s.addr()).copied()
    }

    /// True if some binding of `var` anywhere in the kernel is divergent, or it is divergent
    /// before some statement. Use it where one answer must hold for the whole kernel.
    pub fn ever_divergent(&self, var: &Var) -> bool {
        self.ever.contains(var)
    }

    fn record_before(&mut self, s: &Stmt, state: &VarSet) {
        self.ever.extend(state.iter().cloned());
        self.before.entry(s.addr()).or_default().extend(state.iter().cloned());
    }

    fn record_head(&mut self, s: &Stmt, head: &VarSet) {
        self.ever.extend(head.iter().cloned());
        self.loop_head.entry(s.addr()).or_default().extend(head.iter().cloned());
    }

    fn expr_div(&self, e: &Expr, state: &VarSet) -> bool {
        self.expr_divergent_in(e, state)
    }

    /// Binds a mutable variable (a `var`, an assignment, a loop counter): flow-sensitive.
    fn bind(&mut self, s: &Stmt, var: &Var, divergent: bool, state: &mut VarSet) {
        let divergent = divergent && !self.forced_uniform.contains(var);
        *self.binding.entry(s.addr()).or_default() |= divergent;
        if divergent {
            state.insert(var.clone());
        } else {
            state.remove(var);
        }
    }

    /// Binds an immutable variable (a `let`, a call result): one fact per name.
    fn bind_once(&mut self, s: &Stmt, var: &Var, divergent: bool) {
        let divergent = divergent && !self.forced_uniform.contains(var);
        *self.binding.entry(s.addr()).or_default() |= divergent;
        if divergent {
            self.lets.insert(var.clone());
            self.ever.insert(var.clone());
        }
    }

    fn stmt(&mut self, s: &Stmt, state: &mut VarSet) {
        self.record_before(s, state);
        match s.node() {
            StmtNode::Let { var, value } => {
                let d = self.expr_div(value, state);
                self.bind_once(s, var, d);
            }
            StmtNode::Assign { var, value } | StmtNode::Decl { var, init: value } => {
                let d = self.expr_div(value, state);
                self.bind(s, var, d, state);
            }
            StmtNode::Store { .. } | StmtNode::VecStore { .. } | StmtNode::Alloc { .. } => {}
            StmtNode::Call { result, func, .. } => {
                if let Some(r) = result {
                    let d = matches!(func.kind(), FuncKind::Atomic(_));
                    self.bind_once(s, r, d);
                }
            }
            StmtNode::Block(v) => {
                for c in v {
                    self.stmt(c, state);
                }
            }
            StmtNode::If { cond, then, otherwise } => {
                let div = self.expr_div(cond, state);
                *self.branch.entry(s.addr()).or_default() |= div;
                let mut t = state.clone();
                self.stmt(then, &mut t);
                let mut e = state.clone();
                if let Some(o) = otherwise {
                    self.stmt(o, &mut e);
                }
                t.extend(e);
                if div {
                    t.extend(assigned_vars(s));
                }
                *state = t;
            }
            StmtNode::While { cond, body } => {
                let entry = state.clone();
                let mut head = entry.clone();
                loop {
                    // Immutable facts only grow; a round that adds one must run again.
                    let lets = self.lets.len();
                    let mut b = head.clone();
                    self.stmt(body, &mut b);
                    b.extend(entry.iter().cloned());
                    if b == head && self.lets.len() == lets {
                        break;
                    }
                    head = b;
                }
                let div = self.expr_div(cond, &head);
                self.record_head(s, &head);
                *self.branch.entry(s.addr()).or_default() |= div;
                if div {
                    head.extend(assigned_vars(body));
                }
                *state = head;
            }
            StmtNode::For { var, lo, hi, step, body } => {
                let counter = self.expr_div(lo, state) || self.expr_div(step, state);
                let div = counter || self.expr_div(hi, state);
                *self.branch.entry(s.addr()).or_default() |= div;
                let entry = state.clone();
                let mut head = entry.clone();
                loop {
                    let lets = self.lets.len();
                    let mut b = head.clone();
                    self.bind(s, var, counter, &mut b);
                    let at_body = b.clone();
                    self.stmt(body, &mut b);
                    b.extend(entry.iter().cloned());
                    b.remove(var);
                    if b == head && self.lets.len() == lets {
                        self.record_head(s, &at_body);
                        break;
                    }
                    head = b;
                }
                if div {
                    head.extend(assigned_vars(body));
                }
                *state = head;
            }
        }
    }
}
