//! The expression simplifier: kiln expressions go into an [egg] e-graph, sound type-aware
//! rules ([`rules`]) and constant folding (an e-class analysis with the interpreter's exact
//! scalar semantics) run under node, iteration and work limits (never time: the result depends
//! only on the input), and the cheapest equivalent
//! expression comes back ([`Cost`]).
//!
//! The e-graph is the strong but slow half. Every expression first goes through a cheap
//! bottom-up pass ([`pre`]: folding, neutral elements, the remapping index identities,
//! cancellation in sums) and the affine normal form of its integer `+ - *` regions
//! ([`affine`]: constants folded, equal terms merged and cancelled, with wrapping), whose
//! rewrites the rules derive as well, and the e-graph runs only where
//! [`gate::egg_may_help`] says it could still find something cheaper (never on an affine
//! region): index expressions of generated kernels build no e-graph at all
//! ([`Limits::presimplify`] turns this off), and an expression with no operator and no
//! constant (`fma(extract(a, 0), extract(b, 1), acc)`) comes back after one look at its
//! nodes, with no round of the cheap pass. An e-graph's result is reused for every later
//! expression of the same shape (operators and constants alike, opaque leaves alike in type,
//! failure and built-in kind, repeated where they repeat), as a generated epilogue repeats
//! one formula over every accumulator: within one simplification, and across the process for
//! the same node and round limits (the second `simplify` of `-O` meets the first one's
//! shapes), charged to the budget as if it ran.
//!
//! ```
//! use kiln_ir::{Type, Var};
//! use kiln_passes::simplify::simplify_expr;
//! let a = Var::new("a", Type::I32);
//! let b = Var::new("b", Type::I32);
//! let e = 2 * (&a + &b) - a.expr();
//! let s = simplify_expr(&e);
//! assert!(kiln_passes::simplify::node_count(&s) <= 5, "{s}");
//! ```
//!
//! Error policy: an interpreter error (division by zero, out-of-bounds load) is an
//! observable result, so a rewrite keeps every operand that may fail and never introduces a
//! division by a value not known non-zero. `0 * (a / b)` stays as it is; `0 * (a / 3)` folds
//! to 0.

pub mod affine;
pub mod gate;
pub mod lang;
pub mod pre;
pub mod rules;
mod sum;
#[cfg(test)]
mod tests;

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use egg::{CostFunction, Extractor, Id, Language, RecExpr, Rewrite, Runner};
use hashbrown::HashMap;
use kiln_ir::eval;
use kiln_ir::{Expr, ExprMap, ExprNode, Imm, Intrinsic, Kernel, Mutator, Stmt, StmtNode};
use smallvec::SmallVec;

use lang::{is_operator, to_expr, KAnalysis, KGraph, Konst, Node};

/// Limits for one simplification. Every limit counts work (e-graph nodes, rounds), never
/// time, so the result depends only on the input, never on the machine or its load.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Most e-nodes in one e-graph (one expression's search).
    pub nodes: usize,
    /// Most rule-application rounds of one e-graph.
    pub iterations: usize,
    /// The work budget of one simplification (an expression, or a whole kernel for the
    /// `simplify` pass), in e-nodes built over all its e-graphs, per node of the input:
    /// the budget is `4 * nodes + work_per_node * (nodes of the input)`. Once it is spent,
    /// the remaining expressions get only the cheap pass ([`pre::presimplify`]), so a huge
    /// kernel costs time linear in its size.
    pub work_per_node: usize,
    /// Run the cheap bottom-up pass ([`pre::presimplify`]) first and the e-graph only where
    /// it could still find something cheaper ([`gate::egg_may_help`]). Off, every
    /// expression goes through the e-graph (the reference the tests compare against).
    pub presimplify: bool,
}

impl Default for Limits {
    /// 6 rounds, 800 nodes, 200 e-nodes of work per input node, pre-simplification on: the
    /// node and round limits stop a typical index expression well under a millisecond; the
    /// work budget only bounds huge kernels.
    fn default() -> Limits {
        Limits { nodes: 800, iterations: 6, work_per_node: 200, presimplify: true }
    }
}

impl Limits {
    /// The work budget for an input of `size` nodes (see [`Limits::work_per_node`]).
    fn budget(&self, size: usize) -> usize {
        self.nodes.saturating_mul(4).saturating_add(self.work_per_node.saturating_mul(size))
    }
}

/// The state of one simplification: its limits, the work left, and every expression already
/// simplified (generated and unrolled kernels repeat the same index expressions many times,
/// and each would otherwise build its own e-graphs).
struct Ctx<'a> {
    limits: &'a Limits,
    /// E-nodes the remaining e-graphs may still build.
    work_left: usize,
    /// Whether an e-graph was skipped for lack of budget since this was last cleared.
    starved: bool,
    /// Results by input (`None`: unchanged), reused for free: each distinct expression is
    /// simplified once. A result is kept only if no e-graph was skipped for lack of budget
    /// while computing it. The memo lives as long as one simplification (one kernel) and
    /// is filled in the kernel's order, so the result never depends on anything else.
    memo: ExprMap<Option<Expr>>,
    /// E-graph runs by [`Shape`]: what each found, whether it saturated, and the e-nodes it
    /// built. A run depends only on its input's shape, so an expression of a shape seen
    /// before takes the result without building an e-graph (generated epilogues repeat one
    /// formula over a hundred accumulators), charged the same work so that the budget, and
    /// with it every later result, is as if it had run.
    shapes: HashMap<Shape, Run>,
    /// The affine normal forms of the regions normalized so far ([`affine::normalize_in`]):
    /// every round of an expression normalizes the loads' indices inside it again, and a
    /// store's value takes a round at each level of its operands and a second one once
    /// they changed, so each index is normalized several times.
    norms: ExprMap<Option<Expr>>,
}

/// What an e-graph run depends on: the nodes of its input tree in post-order, each node's
/// children given by their positions in the list (opaque leaves numbered by first
/// occurrence), and each leaf's type, whether it may fail and which work-item built-in it
/// is (all that the analysis and the rules see of a leaf). The e-graph is built by adding
/// these nodes in this order, so equal shapes build equal e-graphs.
type Shape = (Vec<Node>, Vec<(kiln_ir::Type, bool, Option<(kiln_ir::Builtin, u8)>)>);

impl Ctx<'_> {
    fn new(limits: &Limits, size: usize) -> Ctx<'_> {
        Ctx {
            limits,
            work_left: limits.budget(size),
            starved: false,
            memo: ExprMap::default(),
            shapes: HashMap::default(),
            norms: ExprMap::default(),
        }
    }
}

/// The extraction cost: node count weighted by operation cost (division and remainder 8,
/// multiplication 3, everything else 1).
pub struct Cost;

impl CostFunction<Node> for Cost {
    type Cost = u64;
    fn cost<C: FnMut(Id) -> u64>(&mut self, enode: &Node, mut costs: C) -> u64 {
        let own = match enode {
            Node::Div(_) | Node::Rem(_) => 8,
            Node::Mul(_) => 3,
            _ => 1,
        };
        enode.fold(own, |sum, id| sum.saturating_add(costs(id)))
    }
}

/// The cost of an expression as [`Cost`] counts it (opaque leaves count 1).
pub fn expr_cost(e: &Expr) -> u64 {
    let own = match e.node() {
        ExprNode::Binary { op: kiln_ir::BinOp::Div | kiln_ir::BinOp::Rem, .. } => 8,
        ExprNode::Binary { op: kiln_ir::BinOp::Mul, .. } => 3,
        _ => 1,
    };
    // The usual nodes read directly (building the operand list for each node of each
    // candidate was a good part of what costing them took).
    match e.node() {
        ExprNode::Var(_) | ExprNode::Imm(_) | ExprNode::Builtin { .. } => own,
        ExprNode::Unary { a, .. } | ExprNode::Cast { a, .. } | ExprNode::Extract { a, .. } => {
            own.saturating_add(expr_cost(a))
        }
        ExprNode::Binary { a, b, .. } => {
            own.saturating_add(expr_cost(a)).saturating_add(expr_cost(b))
        }
        _ => e.children().iter().fold(own, |s, c| s.saturating_add(expr_cost(c))),
    }
}

/// The number of expression nodes in a kernel (what its simplification's budget scales with).
fn kernel_size(k: &Kernel) -> usize {
    struct Count(usize);
    impl kiln_ir::Visitor for Count {
        fn visit_expr(&mut self, e: &Expr) {
            self.0 += node_count(e);
        }
    }
    let mut c = Count(0);
    kiln_ir::Visitor::visit_kernel(&mut c, k);
    c.0
}

/// The number of nodes in an expression tree.
pub fn node_count(e: &Expr) -> usize {
    e.size()
}

fn rewrites() -> &'static [Rewrite<Node, KAnalysis>] {
    static RULES: OnceLock<Vec<Rewrite<Node, KAnalysis>>> = OnceLock::new();
    RULES.get_or_init(rules::rewrites)
}

/// Simplifies `e` with the default [`Limits`]. Returns the very same handle when nothing
/// changed (the result is only taken when it is strictly cheaper).
pub fn simplify_expr(e: &Expr) -> Expr {
    simplify_expr_with(e, &Limits::default())
}

/// Simplifies `e` under `limits`: rounds repeat while they make the expression strictly
/// cheaper (so this terminates), so simplifying the result again changes nothing.
pub fn simplify_expr_with(e: &Expr, limits: &Limits) -> Expr {
    simplify_in(e, &mut Ctx::new(limits, node_count(e)))
}

/// [`simplify_expr_with`] within a simplification's context: each distinct expression is
/// simplified once.
fn simplify_in(e: &Expr, cx: &mut Ctx) -> Expr {
    if is_leaf(e) {
        return e.clone();
    }
    if cx.limits.presimplify && e.is_opaque() {
        // What the rounds below would answer, without an e-graph or a memo entry: a tenth
        // of the first `simplify` of a generated GEMM, whose accumulator updates
        // `fma(extract(a, 0), extract(b, 1), acc)` are all like this. Every step of a round
        // ([`pre::presimplify`], [`affine::normalize`], the opaque leaves' operands) leaves
        // an opaque expression as it is (a cast to its operand's own type, which is dropped,
        // and `min` and `max`, which are operators, are not opaque), and
        // [`gate::egg_may_help`] never sends it to an e-graph (it has no operator), so
        // simplifying it answers the very same handle without charging the budget, and so
        // does every equal expression: the memo has nothing to add. Without
        // pre-simplification every expression goes to an e-graph, so this does not apply.
        // The flag is kept per node (`Expr::is_opaque`): the walk it replaces was asked of
        // every operand of every expression simplified.
        return e.clone();
    }
    // A hit is taken only from an equal expression of the same source names: a rewrite
    // keeps the names it was built from (see `crate::origin`).
    if let Some((k, r)) = cx.memo.get_key_value(e) {
        if r.is_none() || crate::origin::same_origins(k, e) {
            return r.clone().unwrap_or_else(|| e.clone());
        }
    }
    let starved = std::mem::replace(&mut cx.starved, false);
    let (r, done) = fixpoint(e, cx);
    if !cx.starved {
        // The first entry stays: its value belongs to its key's source names.
        cx.memo.entry(e.clone()).or_insert_with(|| (!r.ptr_eq(e)).then(|| r.clone()));
        if done && !r.ptr_eq(e) && result_entries() {
            // The last round gave `r` back: simplifying `r` now answers `r` itself, as
            // the next round of an expression holding it (its leaves' operands), or a
            // later statement holding it, would otherwise find out again.
            cx.memo.entry(r.clone()).or_insert(None);
        }
    }
    cx.starved |= starved;
    r
}

/// True if `e` is a variable, a constant or a built-in: simplified as it is.
fn is_leaf(e: &Expr) -> bool {
    matches!(e.node(), ExprNode::Var(_) | ExprNode::Imm(_) | ExprNode::Builtin { .. })
}

thread_local! {
    /// The clock egg's runs read (see `simplify_once`'s run): one that never moves, made
    /// once per thread.
    static STILL_CLOCK: quanta::Clock = quanta::Clock::mock().0;
}

#[cfg(test)]
thread_local! {
    /// Off, the memo keeps no entry for results (see `simplify_in`): tests compare.
    static RESULT_ENTRIES: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

#[cfg(test)]
thread_local! {
    /// Off, every region is normalized anew (see `cheap_round`): tests compare.
    static NORM_ENTRIES: std::cell::Cell<bool> = const { std::cell::Cell::new(true) };
}

/// Whether the normal forms of regions are kept for the rest of the simplification
/// (always, but in tests).
fn norm_entries() -> bool {
    #[cfg(test)]
    return NORM_ENTRIES.with(|c| c.get());
    #[cfg(not(test))]
    true
}

/// Whether the memo keeps an entry for each settled result (always, but in tests).
fn result_entries() -> bool {
    #[cfg(test)]
    return RESULT_ENTRIES.with(|c| c.get());
    #[cfg(not(test))]
    true
}

/// Rounds until nothing cheaper is found; and whether the last round gave its input back
/// (so that simplifying the result now would answer the result itself).
fn fixpoint(e: &Expr, cx: &mut Ctx) -> (Expr, bool) {
    let mut cur = e.clone();
    loop {
        let (next, saturated) =
            if cx.limits.presimplify { cheap_round(&cur, cx) } else { simplify_once(&cur, cx) };
        // A saturated e-graph held everything the rules reach from the result too, so
        // another round could not find anything cheaper.
        let same = next.ptr_eq(&cur);
        if same || saturated {
            return (next, same);
        }
        cur = next;
    }
}

/// One round with pre-simplification: the cheap pass, then the e-graph only if it may still
/// help; otherwise just the operands inside opaque leaves (loads' indices, casts, calls) are
/// simplified on their own. Returns `e` itself unless the result is strictly cheaper.
fn cheap_round(e: &Expr, cx: &mut Ctx) -> (Expr, bool) {
    let p = pre::presimplify(e);
    let p = if norm_entries() {
        affine::normalize_in(&p, &mut cx.norms)
    } else {
        affine::normalize(&p)
    };
    let (r, saturated) = if gate::egg_may_help(&p) {
        simplify_once(&p, cx)
    } else {
        // Nothing for the e-graph at the top. Another round only if something changed (it
        // may fold what the leaves gave); an unchanged round ends the loop by identity.
        (simplify_leaves(&p, cx), false)
    };
    // The result must fail as `e` does, with the same first error (see `crate::origin`).
    if r.ptr_eq(e) || expr_cost(&r) >= expr_cost(e) || !fails_alike(e, &r, cx) {
        (e.clone(), saturated)
    } else {
        (r, saturated)
    }
}

/// `e` with the operands of its opaque leaves simplified (the operator part unchanged).
fn simplify_leaves(e: &Expr, cx: &mut Ctx) -> Expr {
    if e.as_imm().is_some() {
        return e.clone();
    }
    if is_operator(e) {
        // `None` for an operand that stays (a variable or a constant without a call): an
        // operator over operands that all stay, most of them, takes no handle of each.
        let ops = e.children();
        let new: SmallVec<[Option<Expr>; 3]> = ops
            .iter()
            .map(|c| {
                if matches!(
                    c.node(),
                    ExprNode::Var(_) | ExprNode::Imm(_) | ExprNode::Builtin { .. }
                ) {
                    return None;
                }
                let r = simplify_leaves(c, cx);
                (!r.ptr_eq(c)).then_some(r)
            })
            .collect();
        if new.iter().all(Option::is_none) {
            return e.clone();
        }
        let kids = new.into_iter().zip(ops).map(|(n, c)| n.unwrap_or_else(|| c.clone())).collect();
        return pre::rebuild(e, kids);
    }
    opaque(e, cx).0
}

/// One e-graph round: the cheapest equivalent found, or `e` itself if none is cheaper, and
/// whether the e-graph saturated (no limit stopped it).
fn simplify_once(e: &Expr, cx: &mut Ctx) -> (Expr, bool) {
    match e.node() {
        ExprNode::Var(_) | ExprNode::Imm(_) | ExprNode::Builtin { .. } => return (e.clone(), true),
        _ => {}
    }
    // The input as a tree of e-graph nodes whose children are positions in `nodes` (the
    // shape), its opaque leaves numbered as the e-graph numbers them. The e-graph is built
    // from it only when no run of this shape is known: building it was most of the cost
    // of a run that the shape cache then answered.
    let mut analysis = KAnalysis::default();
    let mut nodes = Vec::new();
    add_expr(&mut analysis, e, cx, &mut nodes);
    // An e-graph may overshoot its node limit by one round's additions: charge what it
    // built, and start one only with a whole limit's worth left.
    if cx.work_left < cx.limits.nodes {
        cx.starved = true;
        return (e.clone(), false);
    }
    let leaves = std::mem::take(&mut analysis.leaves);
    let shape: Shape = (nodes, leaves.iter().map(|(x, f)| (x.ty(), *f, builtin(x))).collect());
    // A run this simplification made, else one the process kept.
    let known = cx.shapes.get(&shape).cloned().or_else(|| {
        let r = shared_run(cx.limits, &shape)?;
        cx.shapes.insert(shape.clone(), r.clone());
        Some(r)
    });
    let (best, saturated, size) = match known {
        Some(r) => r,
        None => {
            analysis.leaves = leaves.clone();
            let mut g = KGraph::new(analysis);
            // The same additions, in the same order, as a walk of the expression makes.
            let mut ids: Vec<Id> = Vec::with_capacity(shape.0.len());
            for n in &shape.0 {
                let n = n.clone().map_children(|c| ids[usize::from(c)]);
                ids.push(g.add(n));
            }
            // `add_expr` always adds the root, last.
            let root =
                ids.last().copied().unwrap_or_else(|| g.add(Node::Const(Konst(Imm::Bool(false)))));
            // Work limits only (nodes, rounds, the budget): never wall-clock time, so the
            // result never depends on the machine's load. egg still reads its clock for its
            // iteration reports; a still clock answers those without the calibration that
            // quanta's real one runs on its first use in a process (at least 0.5 ms of
            // spinning, up to 200 ms where the counter is noisy: a cold JIT paid it).
            let runner = STILL_CLOCK.with(|clock| {
                quanta::with_clock(clock, || {
                    Runner::default()
                        .with_egraph(g)
                        .with_node_limit(cx.limits.nodes)
                        .with_iter_limit(cx.limits.iterations)
                        .with_time_limit(Duration::MAX)
                        .run(rewrites())
                })
            });
            let saturated = matches!(runner.stop_reason, Some(egg::StopReason::Saturated));
            let root = runner.egraph.find(root);
            let (_, best) = Extractor::new(&runner.egraph, Cost).find_best(root);
            let r = (best, saturated, runner.egraph.total_size());
            keep_shared_run(cx.limits, &shape, &r);
            cx.shapes.insert(shape, r.clone());
            r
        }
    };
    cx.work_left = cx.work_left.saturating_sub(size);
    match to_expr(&best, &leaves) {
        // Only a strictly cheaper result (counting inside opaque leaves too) replaces `e`,
        // so simplifying a simplified expression returns the very same handle.
        Some(s) if s.ty() == e.ty() && expr_cost(&s) < expr_cost(e) && fails_alike(e, &s, cx) => {
            (s, saturated)
        }
        _ => (e.clone(), saturated),
    }
}

/// What an e-graph run found (its best expression, whether it saturated, the e-nodes it
/// built): a function of its input's [`Shape`] and the node and round limits alone.
type Run = (RecExpr<Node>, bool, usize);

/// E-graph runs kept for the whole process, by node limit, round limit and [`Shape`]: the
/// same shapes come back in every simplification (the second `simplify` of the `-O`
/// pipeline meets the first one's, and generated kernels of one family share their index
/// shapes), and a run's result depends on nothing else, so taking a kept one gives exactly
/// what running it would, charged the same work. At most [`SHARED_RUNS`] are kept (then
/// the table starts over), so memory stays bounded.
type SharedRuns = Mutex<HashMap<(usize, usize, Shape), Run>>;

/// The most e-graph runs [`SharedRuns`] keeps.
const SHARED_RUNS: usize = 4096;

fn shared_runs() -> &'static SharedRuns {
    static RUNS: OnceLock<SharedRuns> = OnceLock::new();
    RUNS.get_or_init(Default::default)
}

/// Forgets every e-graph run the process kept, so that the next simplification builds its
/// e-graphs anew (tests compare its results with those of kept runs).
#[doc(hidden)]
pub fn forget_kept_runs() {
    shared_runs().lock().unwrap_or_else(|p| p.into_inner()).clear();
}

/// A kept run of `shape` under `limits`, if there is one.
fn shared_run(limits: &Limits, shape: &Shape) -> Option<Run> {
    // A panic elsewhere while the lock was held left the table as it was between two
    // whole operations: it is still good.
    let runs = shared_runs().lock().unwrap_or_else(|p| p.into_inner());
    // The key is built to look it up (its shape cloned): only where a kernel meets a
    // shape for the first time, a few times per kernel.
    runs.get(&(limits.nodes, limits.iterations, shape.clone())).cloned()
}

/// Keeps `run`, the e-graph run of `shape` under `limits`.
fn keep_shared_run(limits: &Limits, shape: &Shape, run: &Run) {
    let mut runs = shared_runs().lock().unwrap_or_else(|p| p.into_inner());
    if runs.len() >= SHARED_RUNS {
        runs.clear();
    }
    runs.insert((limits.nodes, limits.iterations, shape.clone()), run.clone());
}

/// True if `r` fails as `e` does, with the same first error ([`crate::origin`]), the nodes
/// that may fail compared with their operands simplified (as the e-graph's leaves are).
fn fails_alike(e: &Expr, r: &Expr, cx: &mut Ctx) -> bool {
    crate::origin::same_fault_order(e, r, |x| opaque(x, cx).0)
}

/// The work-item built-in `e` is, if it is one.
fn builtin(e: &Expr) -> Option<(kiln_ir::Builtin, u8)> {
    match e.node() {
        ExprNode::Builtin { kind, dim } => Some((*kind, *dim)),
        _ => None,
    }
}

/// Appends `e` to `nodes` in post-order (children first), each node's children being the
/// positions of their nodes in `nodes`: operators as nodes, everything else as an opaque
/// leaf of `analysis` whose operands are simplified on their own (and folded when all are
/// constant). Returns the position of `e`'s node.
fn add_expr(analysis: &mut KAnalysis, e: &Expr, cx: &mut Ctx, nodes: &mut Vec<Node>) -> Id {
    fn add(nodes: &mut Vec<Node>, n: Node) -> Id {
        nodes.push(n);
        Id::from(nodes.len() - 1)
    }
    if let Some(imm) = e.as_imm() {
        return add(nodes, Node::Const(Konst(*imm)));
    }
    if is_operator(e) {
        let mut kids = [Id::from(0usize); 3];
        for (k, c) in kids.iter_mut().zip(e.children().iter()) {
            *k = add_expr(analysis, c, cx, nodes);
        }
        let node = match e.node() {
            ExprNode::Unary { op, .. } => match op {
                kiln_ir::UnOp::Neg => Node::Neg([kids[0]]),
                kiln_ir::UnOp::Not => Node::Not([kids[0]]),
                kiln_ir::UnOp::BitNot => Node::BitNot([kids[0]]),
            },
            ExprNode::Binary { op, .. } => Node::from_binop(*op, [kids[0], kids[1]]),
            ExprNode::Select { .. } => Node::Select([kids[0], kids[1], kids[2]]),
            ExprNode::Intrinsic { op: Intrinsic::Min, .. } => Node::Min([kids[0], kids[1]]),
            _ => Node::Max([kids[0], kids[1]]),
        };
        return add(nodes, node);
    }
    let (leaf, may_fail) = opaque(e, cx);
    if let Some(imm) = leaf.as_imm() {
        return add(nodes, Node::Const(Konst(*imm)));
    }
    let l = analysis.leaf(&leaf, may_fail);
    add(nodes, Node::Leaf(l))
}

/// Simplifies the operands of an opaque expression, folds it when they are all constant, and
/// says whether evaluating it may fail.
fn opaque(e: &Expr, cx: &mut Ctx) -> (Expr, bool) {
    let mut sub = |x: &Expr| simplify_in(x, cx);
    match e.node() {
        ExprNode::Var(_) | ExprNode::Builtin { .. } | ExprNode::Imm(_) => (e.clone(), false),
        ExprNode::Load { buf, index } => {
            let i = sub(index);
            let e2 = if i.ptr_eq(index) { e.clone() } else { Expr::load(buf, i) };
            (e2, true)
        }
        ExprNode::Binary { .. } if e.origin().is_some() => {
            let e2 = named_division(e, &mut sub);
            let f = e2.may_fail();
            (e2, f)
        }
        ExprNode::Cast { to, a } => {
            let a2 = sub(a);
            if let Some(k) = a2.as_imm() {
                return (Expr::imm(eval::cast(*to, *k)), false);
            }
            if a2.ty() == e.ty() {
                // A cast to the operand's own type is the identity.
                return (a2.clone(), a2.may_fail());
            }
            let e2 = if a2.ptr_eq(a) { e.clone() } else { a2.cast(*to) };
            let f = e2.may_fail();
            (e2, f)
        }
        ExprNode::Intrinsic { op, args } => {
            let new: SmallVec<[Expr; 3]> = args.iter().map(&mut sub).collect();
            // The constants are gathered only when every operand is one.
            let consts: Option<SmallVec<[Imm; 3]>> = if new.iter().all(|a| a.as_imm().is_some()) {
                new.iter().map(|a| a.as_imm().copied()).collect()
            } else {
                None
            };
            if let Some(Ok(k)) = consts.map(|c| eval::intrinsic(*op, &c)) {
                if !op.is_approximate() {
                    return (Expr::imm(k), false);
                }
            }
            let same = new.iter().zip(args.iter()).all(|(a, b)| a.ptr_eq(b));
            let e2 = if same { e.clone() } else { Expr::intrinsic(*op, new) };
            let f = e2.may_fail();
            (e2, f)
        }
        // Vector loads, lanes, constructors and lane-wise operations: the e-graph's rules
        // are scalar, so a vector expression is a leaf whose operands are simplified alone.
        ExprNode::VecLoad { .. }
        | ExprNode::Extract { .. }
        | ExprNode::Insert { .. }
        | ExprNode::Vector { .. } => vector_leaf(e, cx),
        _ if e.ty().is_vector() => vector_leaf(e, cx),
        _ => {
            let f = e.may_fail();
            (e.clone(), f)
        }
    }
}

/// A division named by its source ([`Expr::origin`]) with its operands simplified by `sub`,
/// keeping its name; once the divisor is a non-zero constant it cannot fail, and comes back
/// as a plain operator for the rules.
pub(crate) fn named_division(e: &Expr, mut sub: impl FnMut(&Expr) -> Expr) -> Expr {
    let ExprNode::Binary { op, a, b } = e.node() else { return e.clone() };
    let (a2, b2) = (sub(a), sub(b));
    if b2.as_imm().is_some_and(|k| !k.is_zero()) {
        return Expr::binary(*op, a2, b2);
    }
    if a2.ptr_eq(a) && b2.ptr_eq(b) {
        return e.clone();
    }
    e.rebuild(ExprNode::Binary { op: *op, a: a2, b: b2 })
}

/// A vector expression (or a lane of one) with its operands simplified.
fn vector_leaf(e: &Expr, cx: &mut Ctx) -> (Expr, bool) {
    struct Operands<'a, 'b>(&'a mut Ctx<'b>);
    impl Mutator for Operands<'_, '_> {
        fn mutate_expr_changed(&mut self, e: &Expr) -> Option<Expr> {
            // What `simplify_in` answers at once: the very same handle.
            if is_leaf(e) || (self.0.limits.presimplify && e.is_opaque()) {
                return None;
            }
            let n = simplify_in(e, self.0);
            (!n.ptr_eq(e)).then_some(n)
        }
        fn mutate_var_changed(&mut self, _: &kiln_ir::Var) -> Option<kiln_ir::Var> {
            None
        }
        fn mutate_expr(&mut self, e: &Expr) -> Expr {
            simplify_in(e, self.0)
        }
    }
    let e2 = kiln_ir::walk_mutate_expr(&mut Operands(cx), e);
    let f = e2.may_fail();
    (e2, f)
}

/// The `simplify` pass: simplifies every expression of the kernel (conditions, indices, let
/// values, loop bounds, stored values, call operands), removes `if`s with a constant
/// condition, loops that provably run zero times or have empty bodies, and empty blocks.
pub struct StmtSimplifier {
    limits: Limits,
    /// The budget of the kernel being simplified, and every expression simplified so far
    /// (set up by `mutate_kernel`, or for the first expression when used on its own).
    cx: Option<CtxState>,
}

/// [`Ctx`] without its borrow of the limits, kept between the calls of a mutator.
struct CtxState {
    work_left: usize,
    memo: ExprMap<Option<Expr>>,
    shapes: HashMap<Shape, Run>,
    norms: ExprMap<Option<Expr>>,
}

impl StmtSimplifier {
    /// A statement simplifier using `limits` for each expression.
    pub fn new(limits: Limits) -> StmtSimplifier {
        StmtSimplifier { limits, cx: None }
    }

    /// Runs `f` in this simplifier's context, whose budget is set from `size()` input nodes
    /// the first time.
    fn with_cx<R>(&mut self, size: impl FnOnce() -> usize, f: impl FnOnce(&mut Ctx) -> R) -> R {
        let state = self.cx.take().unwrap_or_else(|| CtxState {
            work_left: self.limits.budget(size()),
            memo: ExprMap::default(),
            shapes: HashMap::default(),
            norms: ExprMap::default(),
        });
        let mut cx = Ctx {
            limits: &self.limits,
            work_left: state.work_left,
            starved: false,
            memo: state.memo,
            shapes: state.shapes,
            norms: state.norms,
        };
        let r = f(&mut cx);
        self.cx = Some(CtxState {
            work_left: cx.work_left,
            memo: cx.memo,
            shapes: cx.shapes,
            norms: cx.norms,
        });
        r
    }
}

fn is_empty_block(s: &Stmt) -> bool {
    matches!(s.node(), StmtNode::Block(v) if v.iter().all(is_empty_block))
}

impl Mutator for StmtSimplifier {
    fn mutate_kernel(&mut self, k: &Kernel) -> Kernel {
        // One budget for the whole kernel, scaled by its size, and nothing from an earlier
        // kernel: a kernel's result never depends on what was simplified before.
        self.cx = None;
        let size = kernel_size(k);
        self.with_cx(|| size, |_| ());
        kiln_ir::walk_mutate_kernel(self, k)
    }

    fn mutate_expr_changed(&mut self, e: &Expr) -> Option<Expr> {
        // What `simplify_in` answers at once, the very same handle, answered without one
        // (and without moving the context in and out). Only once a kernel or an earlier
        // expression set the budget up: the first expression sets it from its size.
        if self.cx.is_some() && (is_leaf(e) || (self.limits.presimplify && e.is_opaque())) {
            return None;
        }
        let n = self.mutate_expr(e);
        (!n.ptr_eq(e)).then_some(n)
    }

    fn mutate_var_changed(&mut self, _: &kiln_ir::Var) -> Option<kiln_ir::Var> {
        None
    }

    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        // The memo keeps an unchanged expression as `None`, so that every equal one comes
        // back as its own handle (passes leave unchanged kernels pointer-equal).
        // The size is counted only when no kernel set the budget up (counting every
        // expression for nothing was a seventh of this pass).
        self.with_cx(|| node_count(e), |cx| simplify_in(e, cx))
    }

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        self.mutate_stmt_changed(s).unwrap_or_else(|| s.clone())
    }

    fn mutate_stmt_changed(&mut self, s: &Stmt) -> Option<Stmt> {
        let new = kiln_ir::walk_mutate_stmt_changed(self, s);
        settle_stmt(new.as_ref().unwrap_or(s)).or(new)
    }
}

/// What `s`, its parts simplified, becomes: an `if` on a constant its branch, a loop that
/// runs zero times or does nothing and an `if` with empty branches nothing, a block without
/// its empty blocks; `None` where it stays as it is.
fn settle_stmt(s: &Stmt) -> Option<Stmt> {
    Some(match s.node() {
        StmtNode::If { cond, then, otherwise } => {
            let else_empty = otherwise.as_ref().is_none_or(is_empty_block);
            match cond.as_imm() {
                Some(kiln_ir::Imm::Bool(true)) => then.clone(),
                Some(kiln_ir::Imm::Bool(false)) => {
                    otherwise.clone().unwrap_or_else(|| Stmt::block([]))
                }
                _ if is_empty_block(then) && else_empty && !cond.may_fail() => Stmt::block([]),
                _ => return None,
            }
        }
        StmtNode::For { lo, hi, step, body, .. } => {
            let step_ok = step.as_imm().and_then(|k| k.as_i128()).is_some_and(|v| v > 0);
            let bounds_safe = !lo.may_fail() && !hi.may_fail();
            let zero_trips = match (lo.as_imm(), hi.as_imm()) {
                (Some(l), Some(h)) => l.as_i128().zip(h.as_i128()).is_some_and(|(l, h)| l >= h),
                _ => false,
            };
            if step_ok && bounds_safe && (zero_trips || is_empty_block(body)) {
                Stmt::block([])
            } else {
                return None;
            }
        }
        StmtNode::While { cond, .. } if cond.as_imm() == Some(&kiln_ir::Imm::Bool(false)) => {
            Stmt::block([])
        }
        StmtNode::Block(v) if v.iter().any(is_empty_block) && !v.is_empty() => {
            // Empty nested blocks bind nothing: drop them.
            Stmt::block(v.iter().filter(|x| !is_empty_block(x)).cloned())
        }
        _ => return None,
    })
}

/// Runs the `simplify` pass on a kernel with the default limits.
pub fn simplify_kernel(k: &Kernel) -> Kernel {
    let k = &kiln_ir::depth::bound_kernel(k);
    StmtSimplifier::new(Limits::default()).mutate_kernel(k)
}

/// Removes empty blocks nested in blocks (they bind nothing and do nothing).
pub fn drop_empty_blocks(k: &Kernel) -> Kernel {
    struct Drop;
    impl Mutator for Drop {
        // Statements only (`walk_mutate_nested`): expressions hold no blocks.
        fn mutate_expr(&mut self, e: &Expr) -> Expr {
            e.clone()
        }
        fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
            // Nested statements only: a statement without any comes back as it is.
            let s = kiln_ir::walk_mutate_nested(self, s);
            match s.node() {
                StmtNode::Block(v) if v.iter().any(is_empty_block) => {
                    Stmt::block(v.iter().filter(|x| !is_empty_block(x)).cloned())
                }
                _ => s,
            }
        }
    }
    Drop.mutate_kernel(k)
}
