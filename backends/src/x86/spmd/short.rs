//! Short batch-uniform `for` loops unrolled when the code is generated.
//!
//! A `for` with constant bounds and step and at most [`MAX_TRIP`] iterations (a filter's
//! taps, `for k in 0 .. 7 { acc = acc + w[k] * tile[lid + k]; }`) runs as one copy of its
//! body per iteration, the counter replaced by its value in that iteration and what that
//! makes constant folded (`w[3u32]`, `tile[lid + 3u32]`): a uniform load at a constant
//! index is one broadcast of a constant address, a contiguous access has its offset as a
//! displacement, and nothing counts, compares or jumps between the copies. Each copy is its
//! own block, so its bindings end with it, as the iteration's do.
//!
//! Why it is the loop's behaviour: the interpreter evaluates the bounds and the step once,
//! and binds the counter to exactly these values in this order (constants: nothing else
//! can change them). An integer division that may fault keeps the loop's text in its fault
//! report ([`kiln_ir::Expr::fault_site`]). The back-edge budget is counted as the ordinary
//! loop counts it: the copies run only when the budget outlasts all `T` back-edges (one
//! subtraction, as in `blocked.rs`); else the ordinary loop, kept after them, runs and
//! reaches the limit helper at exactly its back-edge. Where the body can kill lanes, the
//! ordinary loop leaves when no lane is active at an iteration's top: so do the copies,
//! giving back the back-edges not taken. Loops with barriers, private arrays or a body
//! that declares the counter's name again are left alone, as are bodies whose copies would
//! exceed [`MAX_STATEMENTS`] and loops that `blocked.rs` runs eight iterations at a time.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use iced_x86::code_asm::*;
use kiln_ir::{
    walk_mutate_expr, walk_stmt, Expr, ExprNode, Imm, Mutator, Stmt, StmtNode, Var, Visitor,
};
use kiln_passes::util::fold_node;

use super::{R, V};
use crate::x86::gen::count_barriers;
use crate::x86::rt;

/// The cache of [`V::short_copies`]: by the `for` statement's address, the statement (kept
/// alive) and its copies, if it qualifies.
pub(super) type Cache = RefCell<HashMap<usize, (Stmt, Option<Rc<Vec<Vec<Stmt>>>>)>>;

/// Loops with more iterations than this are not unrolled.
pub(super) const MAX_TRIP: i128 = 16;
/// Nor those whose copies would hold more statements than this in all (nested ones
/// included).
const MAX_STATEMENTS: usize = 64;

/// Replaces the counter by its value and folds what becomes constant; a division that may
/// fault keeps the original's fault site.
struct Subst<'a>(&'a HashMap<String, Imm>);

impl Mutator for Subst<'_> {
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        if let ExprNode::Var(v) = e.node() {
            if let Some(&i) = self.0.get(v.name()) {
                return Expr::imm(i);
            }
        }
        let e2 = walk_mutate_expr(self, e);
        if e2.ptr_eq(e) {
            return e2;
        }
        match fold_node(&e2) {
            Some(imm) if e2.ty().scalar() == Some(imm.scalar()) => Expr::imm(imm),
            _ if e2.is_fault_division() => e2.with_origin(e.fault_site().into()),
            _ => e2,
        }
    }
}

/// What keeps a body from being copied: barriers, private arrays, the counter declared
/// again (its substitution would reach the inner name).
struct Blockers<'a> {
    counter: &'a str,
    stmts: usize,
    blocked: bool,
}

impl Visitor for Blockers<'_> {
    fn visit_expr(&mut self, _: &Expr) {}

    fn visit_stmt(&mut self, s: &Stmt) {
        self.stmts += 1;
        match s.node() {
            StmtNode::Alloc { .. } => self.blocked = true,
            StmtNode::Let { var, .. } | StmtNode::Decl { var, .. } | StmtNode::For { var, .. }
                if var.name() == self.counter =>
            {
                self.blocked = true
            }
            StmtNode::Call { result: Some(r), .. } if r.name() == self.counter => {
                self.blocked = true
            }
            _ => {}
        }
        if count_barriers(s) > 0 {
            self.blocked = true;
        }
        walk_stmt(self, s)
    }
}

/// A constant bound or step as the loop's 64-bit counter holds it.
fn constant(e: &Expr) -> Option<i128> {
    e.as_imm()?.as_i128()
}

/// The copies of `s`'s body if `s` is a `for` that qualifies by itself (see the module
/// docs; [`V::short_trip`] adds what depends on where it is): one per iteration, the
/// counter replaced by its value.
pub(super) fn copies_of(s: &Stmt) -> Option<Vec<Vec<Stmt>>> {
    let StmtNode::For { var, lo, hi, step, body } = s.node() else { return None };
    let (lo, hi, step) = (constant(lo)?, constant(hi)?, constant(step)?);
    let ty = var.ty().scalar()?;
    if step <= 0 || hi <= lo {
        return None;
    }
    let trip = (hi - lo + step - 1) / step;
    if trip > MAX_TRIP {
        return None;
    }
    let mut b = Blockers { counter: var.name(), stmts: 0, blocked: false };
    for s in body.stmts() {
        b.visit_stmt(s);
    }
    if b.blocked || b.stmts * trip as usize > MAX_STATEMENTS {
        return None;
    }
    let copy = |n: i128| {
        let env = HashMap::from([(var.name().to_string(), Imm::int(ty, lo + n * step))]);
        body.stmts().iter().map(|s| Subst(&env).mutate_stmt(s)).collect()
    };
    Some((0..trip).map(copy).collect())
}

impl V {
    /// The copies of a short `for` `s`'s body (see the module docs), made once per
    /// statement: the region's proof (`proven.rs`) and the code name the copies'
    /// accesses by address, so both must see the same ones (which the cache keeps alive).
    pub(super) fn short_copies(&self, s: &Stmt) -> Option<Rc<Vec<Vec<Stmt>>>> {
        if !matches!(s.node(), StmtNode::For { .. }) {
            return None;
        }
        let key = s.addr();
        if let Some((_, c)) = self.short.borrow().get(&key) {
            return c.clone();
        }
        let c = copies_of(s).map(Rc::new);
        // (The key's statement stays alive: it is the kernel's, or in a cached copy.)
        self.short.borrow_mut().insert(key, (s.clone(), c.clone()));
        c
    }

    /// The copies of the `for` statement `s` (with `var` and `step`) if it is unrolled here:
    /// not where `blocked.rs` runs it eight iterations at a time.
    pub(super) fn short_trip(
        &self,
        s: &Stmt,
        var: &Var,
        step: &Expr,
        body: &[Stmt],
    ) -> Option<Rc<Vec<Vec<Stmt>>>> {
        if self.blocking.is_some() || self.block_plan(var, step, body).is_some() {
            return None;
        }
        self.short_copies(s)
    }

    /// The copies of a short loop's body (`copies`, one per iteration), then a jump to
    /// `exit`; the ordinary loop follows, for when the budget runs out within the copies.
    /// `kill`: the body may kill lanes (the ordinary loop then tests for an active lane at
    /// each iteration's top).
    pub(super) fn short_for(&mut self, copies: &[Vec<Stmt>], kill: bool, exit: CodeLabel) -> R<()> {
        let t = copies.len() as i32;
        let budget = qword_ptr(r12 + rt::OFF_BUDGET);
        let mut ordinary = self.a.create_label();
        self.a.cmp(budget, t)?;
        self.a.jbe(ordinary)?;
        self.a.sub(budget, t)?;
        let mut run = Copies { give_back: Vec::new(), since: None, kill, t };
        let mut i = 0;
        while i < copies.len() {
            // Consecutive copies of one store each (`m[e] = a[16 * i + e]`) may be a group
            // of interleaved loads (`loadgroup.rs`); its other path runs them as below.
            let singles = copies[i..].iter().take_while(|c| c.len() == 1).count();
            if singles > 1 {
                self.copy_top(&mut run, i)?;
                let flat: Vec<Stmt> = copies[i..i + singles].iter().map(|c| c[0].clone()).collect();
                let mut slow = |v: &mut V, n: usize| -> R<()> {
                    for (j, copy) in copies.iter().enumerate().skip(i).take(n) {
                        if j > i {
                            v.copy_top(&mut run, j)?;
                        }
                        v.block(copy)?;
                    }
                    Ok(())
                };
                if let Some(n) = self.load_group_then(&flat, Some(&mut slow))? {
                    i += n;
                    continue;
                }
                self.block(&copies[i])?;
                i += 1;
                continue;
            }
            self.copy_top(&mut run, i)?;
            self.block(&copies[i])?;
            i += 1;
        }
        self.a.jmp(exit)?;
        for (mut l, n) in run.give_back {
            self.bind(&mut l)?;
            self.a.add(budget, n)?;
            self.a.jmp(exit)?;
        }
        self.bind(&mut ordinary)
    }

    /// What comes before copy `i` (of `run.t`): where the body can kill lanes, the test
    /// for an active lane, unless no fault stub came since the last one.
    fn copy_top(&mut self, run: &mut Copies, i: usize) -> R<()> {
        // (Lanes end only at fault stubs: after a copy without any, the test would find
        // what the one before it found.)
        if run.kill && self.may_fault && run.since != Some(self.fault_mark()) {
            let l = self.a.create_label();
            self.exit_if_none_active(l)?;
            run.give_back.push((l, run.t - i as i32));
            run.since = Some(self.fault_mark());
        }
        Ok(())
    }
}

/// The state of a short loop's copies as they are generated: the tests' labels with the
/// back-edges each gives back, and the fault mark at the last test.
struct Copies {
    give_back: Vec<(CodeLabel, i32)>,
    since: Option<(usize, usize)>,
    kill: bool,
    t: i32,
}
