//! Comparisons fixed for the call, hoisted out of the batch loop: in the conditions of
//! `if`s and `while`s, a comparison whose operands are values fixed for the whole call
//! ([`V::invariant`]: constants, parameters, ids and sizes other than `global_id(0)`,
//! `local_id(0)` and `group_id(0)`, and hoisted `let`s of those) is the same lane mask in
//! every batch of the call, so it is computed once, before the loop, into a frame slot,
//! and each batch loads it (a 2-D stencil's `y > 0 && y < h - 1`, whose row is fixed for
//! a call). Such a comparison has no loads and no division that can fault, so computing
//! it early is unobservable. Only comparisons whose names are declared once in the kernel
//! (and parameters no `let` shadows) are taken, so a name means at the loop what it means
//! where it is computed.

use std::collections::HashMap;

use iced_x86::code_asm::*;
use kiln_ir::{
    walk_expr, walk_stmt, BinOp, Builtin, Expr, ExprNode, Imm, Kernel, Stmt, StmtNode, Type, UnOp,
    Visitor,
};

use super::{lane_type, R, V};
use crate::x86::sums::bound_name;

/// Names declared in a kernel (parameters included) and how often.
#[derive(Default)]
struct Decls(HashMap<String, usize>);

impl Visitor for Decls {
    fn visit_stmt(&mut self, s: &Stmt) {
        if let Some(n) = bound_name(s) {
            *self.0.entry(n.to_string()).or_default() += 1;
        }
        walk_stmt(self, s)
    }
}

/// The comparisons at the leaves of the kernel's `if` and `while` conditions (through
/// `&&`, `||` and `!`).
#[derive(Default)]
struct Conds<'k>(Vec<&'k Expr>);

impl<'k> Conds<'k> {
    fn leaves(&mut self, e: &'k Expr) {
        match e.node() {
            ExprNode::Binary { op: BinOp::LogicAnd | BinOp::LogicOr, a, b } => {
                self.leaves(a);
                self.leaves(b);
            }
            ExprNode::Unary { op: UnOp::Not, a } => self.leaves(a),
            ExprNode::Binary { op, .. } if op.is_comparison() => self.0.push(e),
            _ => {}
        }
    }

    fn block(&mut self, stmts: &'k [Stmt]) {
        for s in stmts {
            match s.node() {
                StmtNode::If { cond, then, otherwise } => {
                    self.leaves(cond);
                    self.block(then.stmts());
                    if let Some(o) = otherwise {
                        self.block(o.stmts());
                    }
                }
                StmtNode::While { cond, body } => {
                    self.leaves(cond);
                    self.block(body.stmts());
                }
                StmtNode::For { body, .. } => self.block(body.stmts()),
                StmtNode::Block(v) => self.block(v),
                _ => {}
            }
        }
    }
}

/// The names an expression reads.
struct Names<'a>(&'a mut Vec<String>);

impl Visitor for Names<'_> {
    fn visit_expr(&mut self, e: &Expr) {
        if let ExprNode::Var(v) = e.node() {
            self.0.push(v.name().to_string());
        }
        walk_expr(self, e)
    }
}

/// How often each name is declared in `k` (parameters included).
pub(super) fn decl_counts(k: &Kernel) -> HashMap<String, usize> {
    let mut decls = Decls::default();
    for p in k.params() {
        *decls.0.entry(p.name().to_string()).or_default() += 1;
    }
    k.body().stmts().iter().for_each(|s| decls.visit_stmt(s));
    decls.0
}

/// The values of the `let`s of `k` (nested ones too) whose names `decls` (see
/// [`decl_counts`]) counts once: a name there means the same value wherever it is read.
pub(super) fn once_lets(k: &Kernel, decls: &HashMap<String, usize>) -> HashMap<String, Expr> {
    fn walk(stmts: &[Stmt], decls: &HashMap<String, usize>, out: &mut HashMap<String, Expr>) {
        for s in stmts {
            match s.node() {
                StmtNode::Let { var, value } if decls.get(var.name()) == Some(&1) => {
                    out.insert(var.name().to_string(), value.clone());
                }
                StmtNode::If { then, otherwise, .. } => {
                    walk(then.stmts(), decls, out);
                    if let Some(o) = otherwise {
                        walk(o.stmts(), decls, out);
                    }
                }
                StmtNode::For { body, .. } | StmtNode::While { body, .. } => {
                    walk(body.stmts(), decls, out)
                }
                StmtNode::Block(v) => walk(v, decls, out),
                _ => {}
            }
        }
    }
    let mut out = HashMap::new();
    walk(k.body().stmts(), decls, &mut out);
    out
}

/// The names `e` reads, into `out`.
pub(super) fn names_of(e: &Expr, out: &mut Vec<String>) {
    Names(out).visit_expr(e)
}

impl V {
    /// In the code run once per call, after the hoisted `let`s (in scope): the masks of the
    /// comparisons fixed for the call (see the module docs).
    pub(super) fn hoist_conds(&mut self, k: &Kernel) -> R<()> {
        let mut decls = Decls::default();
        for p in k.params() {
            *decls.0.entry(p.name().to_string()).or_default() += 1;
        }
        k.body().stmts().iter().for_each(|s| decls.visit_stmt(s));
        let mut conds = Conds::default();
        conds.block(k.body().stmts());
        for e in conds.0 {
            let ExprNode::Binary { a, b, .. } = e.node() else { continue };
            let mut names = Vec::new();
            Names(&mut names).visit_expr(e);
            let once = names.iter().all(|n| decls.0.get(n) == Some(&1));
            if !once
                || a.ty() != b.ty()
                || !lane_type(a.ty())
                || !self.invariant(a)
                || !self.invariant(b)
            {
                continue;
            }
            self.cond_top(e, 0)?;
            let slot = self.slot();
            self.a.vmovups(ymmword_ptr(r15 + slot), ymm0)?;
            self.hoisted_conds.push((e as *const Expr as usize, slot));
        }
        Ok(())
    }
}

/// The conditions of the kernel's `if`s with their `then` blocks, nested ones included.
fn if_conds<'k>(stmts: &'k [Stmt], out: &mut Vec<(&'k Expr, &'k [Stmt])>) {
    for s in stmts {
        match s.node() {
            StmtNode::If { cond, then, otherwise } => {
                out.push((cond, then.stmts()));
                if_conds(then.stmts(), out);
                if let Some(o) = otherwise {
                    if_conds(o.stmts(), out);
                }
            }
            StmtNode::While { body, .. } | StmtNode::For { body, .. } => {
                if_conds(body.stmts(), out)
            }
            StmtNode::Block(v) => if_conds(v, out),
            _ => {}
        }
    }
}

/// The operands of a conjunction `a && b && ...` (a single operand for anything else).
fn conjuncts<'k>(e: &'k Expr, out: &mut Vec<&'k Expr>) {
    match e.node() {
        ExprNode::Binary { op: BinOp::LogicAnd, a, b } => {
            conjuncts(a, out);
            conjuncts(b, out);
        }
        _ => out.push(e),
    }
}

/// The `let`s of the kernel: names bound to `global_id(0)` (`let x: u32 = global_id(0)`)
/// and every let's value (for names declared once, the value any use of the name has).
#[derive(Default)]
struct Lets {
    gid: Vec<String>,
    values: HashMap<String, Expr>,
}

impl Visitor for Lets {
    fn visit_stmt(&mut self, s: &Stmt) {
        if let StmtNode::Let { var, value } = s.node() {
            if matches!(value.node(), ExprNode::Builtin { kind: Builtin::GlobalId, dim: 0 }) {
                self.gid.push(var.name().to_string());
            }
            self.values.insert(var.name().to_string(), value.clone());
        }
        walk_stmt(self, s)
    }
}

/// The accesses (index expression, buffer) in the statements of a block at its own level:
/// stores, atomics and the loads in their expressions and in `let`s and assignments, not
/// those of nested `if`s and loops.
fn top_accesses(stmts: &[Stmt]) -> Vec<(&Expr, &kiln_ir::Var)> {
    struct Loads<'k>(Vec<(&'k Expr, &'k kiln_ir::Var)>);
    impl<'k> Loads<'k> {
        fn expr(&mut self, e: &'k Expr) {
            if let ExprNode::Load { buf, index } = e.node() {
                self.0.push((index, buf));
            }
            for c in e.children() {
                self.expr(c);
            }
        }
    }
    let mut l = Loads(Vec::new());
    for s in stmts {
        match s.node() {
            StmtNode::Let { value, .. } | StmtNode::Assign { value, .. } => l.expr(value),
            StmtNode::Store { buf, index, value } => {
                l.0.push((index, buf));
                l.expr(index);
                l.expr(value);
            }
            _ => {}
        }
    }
    l.0
}

/// An `if` whose batches in a range fixed for the call have every lane take its branch
/// ([`V::hoist_ranges`]).
#[derive(Clone)]
pub(super) struct Range {
    /// The condition's address in the kernel.
    pub(super) cond: usize,
    /// The frame slot whose first qword is the lowest lane-0 `global_id(0)` of the range
    /// and whose second is the highest.
    pub(super) slot: i32,
    /// Whether the lowest needs a test (it is 0 otherwise).
    pub(super) lower: bool,
    /// The branch's accesses (index address, table) proven in bounds for the range.
    pub(super) proven: Vec<(usize, u32)>,
}

/// The bounds of a [`Range`] that no row of a call changes ([`V::hoist_call_ranges`]).
pub(super) struct CallRange {
    /// The condition's address in the kernel.
    cond: usize,
    /// The frame slot of the bounds (lowest, highest), as [`Range::slot`]'s.
    slot: i32,
    /// Whether the lowest needs a test.
    lower: bool,
    /// The addresses of the conjunction's comparisons these bounds take.
    leaves: Vec<usize>,
}

/// One operand of a condition's conjunction, for [`V::hoist_ranges`].
enum Part<'k> {
    /// `global_id(0) op e` (`<`, `<=`, `>`, `>=`, unsigned), `e` fixed for the call.
    Gid(BinOp, &'k Expr),
    /// A comparison of `global_id(0)` in the call's bounds ([`CallRange`]).
    Call,
    /// A comparison fixed for the call, its lane mask in this slot ([`V::hoist_conds`]).
    Fixed(i32),
}

/// The kernel's declared names (parameters included) and its `let`s.
fn kernel_names(k: &Kernel) -> (Decls, Lets) {
    let mut decls = Decls::default();
    for p in k.params() {
        *decls.0.entry(p.name().to_string()).or_default() += 1;
    }
    k.body().stmts().iter().for_each(|s| decls.visit_stmt(s));
    let mut lets = Lets::default();
    k.body().stmts().iter().for_each(|s| lets.visit_stmt(s));
    (decls, lets)
}

/// True if `e` is `global_id(0)` or a `let` of it declared once.
fn is_gid(e: &Expr, lets: &Lets, once: &dyn Fn(&str) -> bool) -> bool {
    match e.node() {
        ExprNode::Builtin { kind: Builtin::GlobalId, dim: 0 } => true,
        ExprNode::Var(v) => lets.gid.iter().any(|g| g == v.name()) && once(v.name()),
        _ => false,
    }
}

/// `b op' a` for `a op b`.
fn flipped(op: BinOp) -> Option<BinOp> {
    Some(match op {
        BinOp::Lt => BinOp::Gt,
        BinOp::Le => BinOp::Ge,
        BinOp::Gt => BinOp::Lt,
        BinOp::Ge => BinOp::Le,
        _ => return None,
    })
}

impl V {
    /// In the code run once per call, after [`V::hoist_conds`]: for each `if` whose
    /// condition is a conjunction of comparisons of `global_id(0)` (or a `let` of it) with
    /// unsigned values fixed for the call (`x > 0 && x < w - 1`) and of hoisted comparisons
    /// (`y > 0 && y < h - 1`), the range of lane-0 ids whose batch has the condition true in
    /// all eight lanes: a lane's id is lane 0's plus its lane number, so `gid < e` holds in
    /// every lane when `gid0 + 8 <= e`, `gid > e` when `gid0 > e`, and a fixed comparison
    /// holds in all lanes or in none. Computed in 64 bits (nothing wraps), the range is a
    /// frame slot's two qwords (lowest, highest; empty when a fixed comparison is false), and
    /// each batch tests its lane-0 id against them with two compares (one without lower
    /// bounds) to take the branch's unmasked copy (`if_stmt`) without computing the lane
    /// mask. The comparisons cannot fault, so not evaluating them is unobservable. Names are
    /// taken only where declared once, as in [`V::hoist_conds`].
    pub(super) fn hoist_ranges(&mut self, k: &Kernel) -> R<()> {
        let (decls, lets) = kernel_names(k);
        let once = |n: &str| decls.0.get(n) == Some(&1);
        let is_gid = |e: &Expr| is_gid(e, &lets, &once);
        let mut conds = Vec::new();
        if_conds(k.body().stmts(), &mut conds);
        'cond: for (c, then) in conds {
            let mut leaves = Vec::new();
            conjuncts(c, &mut leaves);
            let call = self.call_ranges.iter().find(|r| r.cond == c as *const Expr as usize);
            let call = call.map(|r| (r.slot, r.lower, r.leaves.clone()));
            let mut parts = Vec::new();
            for l in leaves {
                let addr = l as *const Expr as usize;
                if let Some(&(_, slot)) = self.hoisted_conds.iter().find(|h| h.0 == addr) {
                    parts.push(Part::Fixed(slot));
                    continue;
                }
                let Some((op, e)) = self.gid_leaf(l, &is_gid, &once) else { continue 'cond };
                if call.as_ref().is_some_and(|(_, _, leaves)| leaves.contains(&addr)) {
                    // In the call's bounds already (its range's test is the same).
                    parts.push(Part::Call);
                    continue;
                }
                parts.push(Part::Gid(op, e));
            }
            if !parts.iter().any(|p| matches!(p, Part::Gid(..) | Part::Call)) {
                continue;
            }
            let slot = self.slot();
            let (lo, hi) = (qword_ptr(r15 + slot), qword_ptr(r15 + slot + 8));
            let mut lower = false;
            match &call {
                Some((from, call_lower, _)) => {
                    // Both bounds from the call's (one 16-byte move), narrowed below.
                    self.a.vmovups(xmm0, xmmword_ptr(r15 + *from))?;
                    self.a.vmovups(xmmword_ptr(r15 + slot), xmm0)?;
                    lower = *call_lower;
                }
                None => self.unbounded(slot)?,
            }
            for p in parts {
                match p {
                    Part::Call => {}
                    Part::Gid(op, e) => lower |= self.range_bound(op, e, slot)?,
                    Part::Fixed(m) => {
                        // False in every lane: no batch is in the range. Its operands
                        // are fixed for the call, so every lane agrees: lane 0 decides,
                        // in scalar code (no mask extraction in a row's set-up).
                        self.a.mov(rax, i64::MAX)?;
                        self.a.cmp(dword_ptr(r15 + m), 0)?;
                        self.a.cmovne(rax, lo)?;
                        self.a.mov(lo, rax)?;
                        lower = true;
                    }
                }
            }
            // The branch's accesses at `global_id(0) + u` (`u` fixed for the call): every
            // lane of a batch is in bounds when lane 0's id is at most `len - 8 - u`.
            let mut proven = Vec::new();
            for (index, buf) in top_accesses(then) {
                let Some(t) = self.buf(buf).filter(|_| self.private(buf).is_none()) else {
                    continue;
                };
                let m = self.mems.get(self.mem_of(t) as usize);
                if !m.is_some_and(|m| {
                    m.local.is_none()
                        && matches!(
                            m.elem,
                            kiln_ir::Scalar::F32 | kiln_ir::Scalar::I32 | kiln_ir::Scalar::U32
                        )
                }) {
                    continue;
                }
                let Some(u) = gid_offset(index, &is_gid, &lets.values, &once) else { continue };
                let mut names = Vec::new();
                Names(&mut names).visit_expr(&u);
                if !names.iter().all(|n| once(n)) || !self.invariant(&u) || !self.gpr_ok(&u) {
                    continue;
                }
                // `u` as a signed 32-bit `s`: a lane's index `(gid + u) mod 2^32` is
                // `gid + s` wherever that is in `0 .. len` (lengths are below 2^31), so
                // lane 0's id must be at least `-s` and at most `len - 8 - s`. (A constant
                // below 2^31 needs no lower end.)
                self.uniform_to_eax(&u)?;
                self.a.movsxd(rax, eax)?;
                let last8 = self.const_slot((t as u64, 5));
                self.a.mov(r11, qword_ptr(r15 + last8))?;
                self.a.sub(r11, rax)?;
                self.a.cmp(r11, hi)?;
                self.a.cmovg(r11, hi)?;
                self.a.mov(hi, r11)?;
                let small = match u.as_imm() {
                    Some(Imm::Int(_, bits)) => (*bits as u32) < 1 << 31,
                    _ => false,
                };
                if !small {
                    self.a.neg(rax)?;
                    self.a.cmp(rax, lo)?;
                    self.a.cmovl(rax, lo)?;
                    self.a.mov(lo, rax)?;
                    lower = true;
                }
                proven.push((index as *const Expr as usize, t));
            }
            // Loads at indices fixed for the row (`rowwise.rs`).
            let row_loads = self.prove_row_loads(then, slot, &lets.values, &once)?;
            lower |= !row_loads.is_empty();
            proven.extend(row_loads);
            let cond = c as *const Expr as usize;
            self.hoisted_ranges.push(Range { cond, slot, lower, proven });
        }
        Ok(())
    }
}

impl V {
    /// A conjunction's comparison `l` of `global_id(0)` with an unsigned value `e` fixed for
    /// the call, its names declared once, as `(op, e)` with the id on the left; `None` for
    /// other comparisons.
    fn gid_leaf<'k>(
        &self,
        l: &'k Expr,
        is_gid: &dyn Fn(&Expr) -> bool,
        once: &dyn Fn(&str) -> bool,
    ) -> Option<(BinOp, &'k Expr)> {
        let ExprNode::Binary { op, a, b } = l.node() else { return None };
        let (op, e) = if is_gid(a) {
            (*op, b)
        } else if is_gid(b) {
            (flipped(*op)?, a)
        } else {
            return None;
        };
        let mut names = Vec::new();
        Names(&mut names).visit_expr(e);
        let ok = matches!(op, BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge)
            && e.ty() == Type::U32
            && names.iter().all(|n| once(n))
            && self.invariant(e)
            && self.gpr_ok(e);
        ok.then_some((op, e))
    }

    /// The range in `slot` unbounded: lowest 0, highest `i64::MAX`.
    fn unbounded(&mut self, slot: i32) -> R<()> {
        self.a.mov(qword_ptr(r15 + slot), 0)?;
        self.a.mov(rax, i64::MAX)?;
        self.a.mov(qword_ptr(r15 + slot + 8), rax)?;
        Ok(())
    }

    /// Narrows the range in `slot` to the lane-0 ids whose batch has `global_id(0) op e` in
    /// all eight lanes (see [`V::hoist_ranges`]); true if that bounds the lowest.
    fn range_bound(&mut self, op: BinOp, e: &Expr, slot: i32) -> R<bool> {
        let (lo, hi) = (qword_ptr(r15 + slot), qword_ptr(r15 + slot + 8));
        // `e`, zero-extended into rax.
        self.uniform_to_eax(e)?;
        let adjust = match op {
            BinOp::Lt => -8,
            BinOp::Le => -7,
            BinOp::Gt => 1,
            _ => 0,
        };
        if adjust != 0 {
            self.a.add(rax, adjust)?;
        }
        if matches!(op, BinOp::Lt | BinOp::Le) {
            // highest = min(highest, rax)
            self.a.cmp(rax, hi)?;
            self.a.cmovg(rax, hi)?;
            self.a.mov(hi, rax)?;
            Ok(false)
        } else {
            // lowest = max(lowest, rax)
            self.a.cmp(rax, lo)?;
            self.a.cmovl(rax, lo)?;
            self.a.mov(lo, rax)?;
            Ok(true)
        }
    }

    /// In code that runs every row of its group (`SpmdCode::rows`), once per call before
    /// its first row's set-up: of each [`V::hoist_ranges`] condition, the comparisons of
    /// `global_id(0)` with values of parameters and constants only (embed's `d < dim`, a
    /// stencil's `x < w - 1`), which are the same for every row, as bounds in a slot of
    /// their own ([`CallRange`]). Each row's range then starts from a copy of them and adds
    /// only what depends on the row. (A condition that the row's analysis then rejects has
    /// its call bounds unused: computing them cannot fault.)
    pub(super) fn hoist_call_ranges(&mut self, k: &Kernel) -> R<()> {
        let (decls, lets) = kernel_names(k);
        let once = |n: &str| decls.0.get(n) == Some(&1);
        let is_gid = |e: &Expr| is_gid(e, &lets, &once);
        let mut conds = Vec::new();
        if_conds(k.body().stmts(), &mut conds);
        for (c, _) in conds {
            let mut leaves = Vec::new();
            conjuncts(c, &mut leaves);
            let fixed: Vec<_> = leaves
                .into_iter()
                .filter_map(|l| {
                    Some((l as *const Expr as usize, self.gid_leaf(l, &is_gid, &once)?))
                })
                .filter(|(_, (_, e))| self.params_only(e))
                .collect();
            if fixed.is_empty() {
                continue;
            }
            let slot = self.slot();
            self.unbounded(slot)?;
            let mut lower = false;
            for &(_, (op, e)) in &fixed {
                lower |= self.range_bound(op, e, slot)?;
            }
            let leaves = fixed.iter().map(|f| f.0).collect();
            self.call_ranges.push(CallRange {
                cond: c as *const Expr as usize,
                slot,
                lower,
                leaves,
            });
        }
        Ok(())
    }

    /// True if `e` reads only parameters and constants (no ids, no loads): the same value
    /// in every row of a call.
    fn params_only(&self, e: &Expr) -> bool {
        match e.node() {
            ExprNode::Var(v) => self.param(v).is_some(),
            ExprNode::Imm(_) => true,
            ExprNode::Builtin { .. } | ExprNode::Load { .. } => false,
            _ => e.children().iter().all(|c| self.params_only(c)),
        }
    }
}

/// `u` for an index `e` that is `global_id(0) + u` (wrapping `u32` arithmetic), through
/// `+`, `-`, `mad`/`add3` and `let`s declared once; the other operands are taken as they
/// are (the caller checks that `u` is fixed for the call).
fn gid_offset(
    e: &Expr,
    is_gid: &dyn Fn(&Expr) -> bool,
    lets: &HashMap<String, Expr>,
    once: &dyn Fn(&str) -> bool,
) -> Option<Expr> {
    if let Some(d) = super::expr::desugar(e) {
        return gid_offset(&d, is_gid, lets, once);
    }
    if e.ty() != Type::U32 {
        return None;
    }
    if is_gid(e) {
        return Some(Expr::u32(0));
    }
    match e.node() {
        ExprNode::Var(v) if once(v.name()) => gid_offset(lets.get(v.name())?, is_gid, lets, once),
        ExprNode::Binary { op: BinOp::Add, a, b } => match gid_offset(a, is_gid, lets, once) {
            Some(u) if u.as_imm().is_some_and(|i| matches!(i, Imm::Int(_, 0))) => Some(b.clone()),
            Some(u) => Some(Expr::binary(BinOp::Add, u, b.clone())),
            None => Some(Expr::binary(BinOp::Add, a.clone(), gid_offset(b, is_gid, lets, once)?)),
        },
        ExprNode::Binary { op: BinOp::Sub, a, b } => {
            Some(Expr::binary(BinOp::Sub, gid_offset(a, is_gid, lets, once)?, b.clone()))
        }
        _ => None,
    }
}
