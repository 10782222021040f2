//! The expression simplifier: kiln expressions go into an [egg] e-graph, sound type-aware
//! rules ([`rules`]) and constant folding (an e-class analysis with the interpreter's exact
//! scalar semantics) run under node, iteration and time limits, and the cheapest equivalent
//! expression comes back ([`Cost`]).
//!
//! The e-graph is the strong but slow half. Every expression first goes through a cheap
//! bottom-up pass ([`pre`]: folding, neutral elements, the remapping index identities,
//! cancellation in sums), whose rewrites the rules derive as well, and the e-graph runs only
//! where [`gate::egg_may_help`] says it could still find something cheaper: most index
//! expressions never build an e-graph ([`Limits::presimplify`] turns this off).
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

pub mod gate;
pub mod lang;
pub mod pre;
pub mod rules;
mod sum;

use std::sync::OnceLock;
use std::time::Duration;

use egg::{CostFunction, Extractor, Id, Language, Rewrite, Runner};
use kiln_ir::eval;
use kiln_ir::{Expr, ExprNode, Intrinsic, Kernel, Mutator, Stmt, StmtNode};

use lang::{is_operator, to_expr, KAnalysis, KGraph, Konst, Node};

/// Limits for one simplification.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Most e-nodes in the e-graph.
    pub nodes: usize,
    /// Most rule-application rounds.
    pub iterations: usize,
    /// Most wall-clock time.
    pub time: Duration,
    /// Run the cheap bottom-up pass ([`pre::presimplify`]) first and the e-graph only where
    /// it could still find something cheaper ([`gate::egg_may_help`]). Off, every
    /// expression goes through the e-graph (the reference the tests compare against).
    pub presimplify: bool,
}

impl Default for Limits {
    /// 6 rounds, 800 nodes, 50 ms, pre-simplification on: the node and round limits stop a
    /// typical index expression well under a millisecond (so results are deterministic); the
    /// time limit is only a safety net for huge expressions.
    fn default() -> Limits {
        Limits { nodes: 800, iterations: 6, time: Duration::from_millis(50), presimplify: true }
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
    e.children().iter().fold(own, |s, c| s.saturating_add(expr_cost(c)))
}

/// The number of nodes in an expression tree.
pub fn node_count(e: &Expr) -> usize {
    1 + e.children().iter().map(|c| node_count(c)).sum::<usize>()
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
    let mut cur = e.clone();
    loop {
        let (next, saturated) = if limits.presimplify {
            cheap_round(&cur, limits)
        } else {
            simplify_once(&cur, limits)
        };
        // A saturated e-graph held everything the rules reach from the result too, so
        // another round could not find anything cheaper.
        if next.ptr_eq(&cur) || saturated {
            return next;
        }
        cur = next;
    }
}

/// One round with pre-simplification: the cheap pass, then the e-graph only if it may still
/// help; otherwise just the operands inside opaque leaves (loads' indices, casts, calls) are
/// simplified on their own. Returns `e` itself unless the result is strictly cheaper.
fn cheap_round(e: &Expr, limits: &Limits) -> (Expr, bool) {
    let p = pre::presimplify(e);
    let (r, saturated) = if gate::egg_may_help(&p) {
        simplify_once(&p, limits)
    } else {
        // Nothing for the e-graph at the top. Another round only if something changed (it
        // may fold what the leaves gave); an unchanged round ends the loop by identity.
        (simplify_leaves(&p, limits), false)
    };
    // The result must fail as `e` does, with the same first error (see `crate::origin`).
    if r.ptr_eq(e) || expr_cost(&r) >= expr_cost(e) || !fails_alike(e, &r, limits) {
        (e.clone(), saturated)
    } else {
        (r, saturated)
    }
}

/// `e` with the operands of its opaque leaves simplified (the operator part unchanged).
fn simplify_leaves(e: &Expr, limits: &Limits) -> Expr {
    if e.as_imm().is_some() {
        return e.clone();
    }
    if is_operator(e) {
        let kids: Vec<Expr> = e.children().iter().map(|c| simplify_leaves(c, limits)).collect();
        if kids.iter().zip(e.children()).all(|(a, b)| a.ptr_eq(b)) {
            return e.clone();
        }
        return pre::rebuild(e, kids);
    }
    opaque(e, limits).0
}

/// One e-graph round: the cheapest equivalent found, or `e` itself if none is cheaper, and
/// whether the e-graph saturated (no limit stopped it).
fn simplify_once(e: &Expr, limits: &Limits) -> (Expr, bool) {
    match e.node() {
        ExprNode::Var(_) | ExprNode::Imm(_) | ExprNode::Builtin { .. } => return (e.clone(), true),
        _ => {}
    }
    let mut g = KGraph::new(KAnalysis::default());
    let root = add_expr(&mut g, e, limits);
    let runner = Runner::default()
        .with_egraph(g)
        .with_node_limit(limits.nodes)
        .with_iter_limit(limits.iterations)
        .with_time_limit(limits.time)
        .run(rewrites());
    let saturated = matches!(runner.stop_reason, Some(egg::StopReason::Saturated));
    let root = runner.egraph.find(root);
    let (_, best) = Extractor::new(&runner.egraph, Cost).find_best(root);
    match to_expr(&best, &runner.egraph.analysis.leaves) {
        // Only a strictly cheaper result (counting inside opaque leaves too) replaces `e`,
        // so simplifying a simplified expression returns the very same handle.
        Some(s)
            if s.ty() == e.ty() && expr_cost(&s) < expr_cost(e) && fails_alike(e, &s, limits) =>
        {
            (s, saturated)
        }
        _ => (e.clone(), saturated),
    }
}

/// True if `r` fails as `e` does, with the same first error ([`crate::origin`]), the nodes
/// that may fail compared with their operands simplified (as the e-graph's leaves are).
fn fails_alike(e: &Expr, r: &Expr, limits: &Limits) -> bool {
    crate::origin::same_fault_order(e, r, |x| opaque(x, limits).0)
}

/// Adds `e` to the e-graph: operators as nodes, everything else as an opaque leaf whose
/// operands are simplified on their own (and folded when all are constant).
fn add_expr(g: &mut KGraph, e: &Expr, limits: &Limits) -> Id {
    if let Some(imm) = e.as_imm() {
        return g.add(Node::Const(Konst(*imm)));
    }
    if is_operator(e) {
        let kids: Vec<Id> = e.children().iter().map(|c| add_expr(g, c, limits)).collect();
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
        return g.add(node);
    }
    let (leaf, may_fail) = opaque(e, limits);
    if let Some(imm) = leaf.as_imm() {
        return g.add(Node::Const(Konst(*imm)));
    }
    let l = g.analysis.leaf(&leaf, may_fail);
    g.add(Node::Leaf(l))
}

/// Simplifies the operands of an opaque expression, folds it when they are all constant, and
/// says whether evaluating it may fail.
fn opaque(e: &Expr, limits: &Limits) -> (Expr, bool) {
    let sub = |x: &Expr| simplify_expr_with(x, limits);
    match e.node() {
        ExprNode::Var(_) | ExprNode::Builtin { .. } | ExprNode::Imm(_) => (e.clone(), false),
        ExprNode::Load { buf, index } => {
            let i = sub(index);
            let e2 = if i.ptr_eq(index) { e.clone() } else { Expr::load(buf, i) };
            (e2, true)
        }
        ExprNode::Binary { .. } if e.origin().is_some() => {
            let e2 = named_division(e, sub);
            let f = may_fail(&e2);
            (e2, f)
        }
        ExprNode::Cast { to, a } => {
            let a2 = sub(a);
            if let Some(k) = a2.as_imm() {
                return (Expr::imm(eval::cast(*to, *k)), false);
            }
            if a2.ty() == e.ty() {
                // A cast to the operand's own type is the identity.
                return (a2.clone(), may_fail(&a2));
            }
            let e2 = if a2.ptr_eq(a) { e.clone() } else { a2.cast(*to) };
            let f = may_fail(&e2);
            (e2, f)
        }
        ExprNode::Intrinsic { op, args } => {
            let new: Vec<Expr> = args.iter().map(sub).collect();
            let consts: Option<Vec<_>> = new.iter().map(|a| a.as_imm().copied()).collect();
            if let Some(Ok(k)) = consts.map(|c| eval::intrinsic(*op, &c)) {
                if !op.is_approximate() {
                    return (Expr::imm(k), false);
                }
            }
            let same = new.iter().zip(args.iter()).all(|(a, b)| a.ptr_eq(b));
            let e2 = if same { e.clone() } else { Expr::intrinsic(*op, new) };
            let f = may_fail(&e2);
            (e2, f)
        }
        // Vector loads, lanes, constructors and lane-wise operations: the e-graph's rules
        // are scalar, so a vector expression is a leaf whose operands are simplified alone.
        ExprNode::VecLoad { .. }
        | ExprNode::Extract { .. }
        | ExprNode::Insert { .. }
        | ExprNode::Vector { .. } => vector_leaf(e, limits),
        _ if e.ty().is_vector() => vector_leaf(e, limits),
        _ => {
            let f = may_fail(e);
            (e.clone(), f)
        }
    }
}

/// A division named by its source ([`Expr::origin`]) with its operands simplified by `sub`,
/// keeping its name; once the divisor is a non-zero constant it cannot fail, and comes back
/// as a plain operator for the rules.
pub(crate) fn named_division(e: &Expr, sub: impl Fn(&Expr) -> Expr) -> Expr {
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
fn vector_leaf(e: &Expr, limits: &Limits) -> (Expr, bool) {
    struct Operands<'a>(&'a Limits);
    impl Mutator for Operands<'_> {
        fn mutate_expr(&mut self, e: &Expr) -> Expr {
            simplify_expr_with(e, self.0)
        }
    }
    let e2 = kiln_ir::walk_mutate_expr(&mut Operands(limits), e);
    let f = may_fail(&e2);
    (e2, f)
}

/// True if evaluating `e` may be an error: it contains a load, or an integer division or
/// remainder whose divisor is not a non-zero constant.
pub fn may_fail(e: &Expr) -> bool {
    match e.node() {
        ExprNode::Load { .. } | ExprNode::VecLoad { .. } => true,
        _ if crate::origin::is_fault_division(e) => true,
        _ => e.children().iter().any(|c| may_fail(c)),
    }
}

/// The `simplify` pass: simplifies every expression of the kernel (conditions, indices, let
/// values, loop bounds, stored values, call operands), removes `if`s with a constant
/// condition, loops that provably run zero times or have empty bodies, and empty blocks.
pub struct StmtSimplifier {
    limits: Limits,
    /// Results so far, by expression: generated and unrolled kernels repeat the same index
    /// expressions many times, and each would otherwise build its own e-graph.
    done: hashbrown::HashMap<Expr, Option<Expr>>,
}

impl StmtSimplifier {
    /// A statement simplifier using `limits` for each expression.
    pub fn new(limits: Limits) -> StmtSimplifier {
        StmtSimplifier { limits, done: hashbrown::HashMap::new() }
    }
}

fn is_empty_block(s: &Stmt) -> bool {
    matches!(s.node(), StmtNode::Block(v) if v.iter().all(is_empty_block))
}

impl Mutator for StmtSimplifier {
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        // An unchanged expression is kept as `None`, so that every equal one comes back as
        // its own handle (passes leave unchanged kernels pointer-equal).
        if let Some(r) = self.done.get(e) {
            return r.clone().unwrap_or_else(|| e.clone());
        }
        let r = simplify_expr_with(e, &self.limits);
        let changed = (!r.ptr_eq(e)).then(|| r.clone());
        self.done.insert(e.clone(), changed);
        r
    }

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        let s = kiln_ir::walk_mutate_stmt(self, s);
        match s.node() {
            StmtNode::If { cond, then, otherwise } => {
                let else_empty = otherwise.as_ref().is_none_or(is_empty_block);
                match cond.as_imm() {
                    Some(kiln_ir::Imm::Bool(true)) => then.clone(),
                    Some(kiln_ir::Imm::Bool(false)) => {
                        otherwise.clone().unwrap_or_else(|| Stmt::block([]))
                    }
                    _ if is_empty_block(then) && else_empty && !may_fail(cond) => Stmt::block([]),
                    _ => s,
                }
            }
            StmtNode::For { lo, hi, step, body, .. } => {
                let step_ok = step.as_imm().and_then(|k| k.as_i128()).is_some_and(|v| v > 0);
                let bounds_safe = !may_fail(lo) && !may_fail(hi);
                let zero_trips = match (lo.as_imm(), hi.as_imm()) {
                    (Some(l), Some(h)) => l.as_i128().zip(h.as_i128()).is_some_and(|(l, h)| l >= h),
                    _ => false,
                };
                if step_ok && bounds_safe && (zero_trips || is_empty_block(body)) {
                    Stmt::block([])
                } else {
                    s
                }
            }
            StmtNode::While { cond, .. } if cond.as_imm() == Some(&kiln_ir::Imm::Bool(false)) => {
                Stmt::block([])
            }
            StmtNode::Block(v) if v.iter().any(is_empty_block) && !v.is_empty() => {
                // Empty nested blocks bind nothing: drop them.
                Stmt::block(v.iter().filter(|x| !is_empty_block(x)).cloned())
            }
            _ => s,
        }
    }
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
        // Statements only: expressions hold no blocks, so they are not walked.
        fn mutate_expr(&mut self, e: &Expr) -> Expr {
            e.clone()
        }
        fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
            let s = kiln_ir::walk_mutate_stmt(self, s);
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
