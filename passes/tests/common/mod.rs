//! Helpers shared by the pass tests: checking a pass on a case against the interpreter, and
//! shrinking a failing case to a smallest failing kernel, printed as `.kir` text.
//!
//! The shrinker is greedy: it tries, in order, deleting one statement, replacing an `if` by
//! one of its branches (a loop by its body, a nested block by its statements), and replacing one expression by one of its operands of the same
//! type or by a zero of its type. An edit is kept when the edited kernel still verifies,
//! still runs on the interpreter, and the pass still gets it wrong; it starts over after
//! every kept edit and stops when no edit is kept (or after a bounded number of tries).
#![allow(dead_code)]

use kiln_ir::interp::{run_with, RunOptions};
use kiln_ir::testing::{results_match, TestCase};
use kiln_ir::{verify_kernel, walk_mutate_expr, walk_mutate_stmt, Expr, Kernel, Mutator, Stmt};
use kiln_ir::{ExprNode, StmtNode, Type};

/// Why `pass` gets `case` wrong, or `Ok` if the output verifies and the interpreter gives
/// identical buffers before and after. The original must run: if it does not, `Ok` (the case
/// says nothing about the pass).
pub fn pass_error(pass: &dyn Fn(&Kernel) -> Kernel, case: &TestCase) -> Result<(), String> {
    let Ok(before) = case.run() else { return Ok(()) };
    let k2 = pass(&case.kernel);
    if let Err(errs) = verify_kernel(&k2) {
        return Err(format!("output does not verify: {errs:?}"));
    }
    let after = case.run_kernel(&k2).map_err(|e| format!("output fails: {e}"))?;
    results_match(&before, &after)
}

/// Like [`pass_error`] for a shrinking candidate, under small step limits: an edit can turn
/// a loop bound into one that runs (nearly) forever, and such candidates are dropped rather
/// than run for seconds. An output that only hits the step limit is not counted as wrong.
fn candidate_error(pass: &dyn Fn(&Kernel) -> Kernel, case: &TestCase) -> Result<(), String> {
    let run = |k: &Kernel, steps: u64| {
        let mut bufs = case.buffers.clone();
        run_with(k, &case.range, &case.args, &mut bufs, &RunOptions::with_max_steps(steps))
            .map(|()| bufs)
    };
    let Ok(before) = run(&case.kernel, 200_000) else { return Ok(()) };
    let k2 = pass(&case.kernel);
    if let Err(errs) = verify_kernel(&k2) {
        return Err(format!("output does not verify: {errs:?}"));
    }
    match run(&k2, 2_000_000) {
        Err(e) if e.message.contains("step limit") => Ok(()),
        Err(e) => Err(format!("output fails: {e}")),
        Ok(after) => results_match(&before, &after),
    }
}

/// Deletes the `target`-th statement (pre-order, over statements inside blocks), or with
/// `branch`, replaces it, if it is an `if`, by its then (`Some(true)`) or else branch, and
/// if it is a nested block (`Some(true)`), by its statements, and if it is a loop
/// (`Some(true)`), by its body.
struct StmtEdit {
    target: usize,
    branch: Option<bool>,
    n: usize,
    done: bool,
}

impl Mutator for StmtEdit {
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        e.clone()
    }

    fn mutate_stmt(&mut self, s: &Stmt) -> Stmt {
        let StmtNode::Block(stmts) = s.node() else { return walk_mutate_stmt(self, s) };
        let mut out = Vec::with_capacity(stmts.len());
        let mut changed = false;
        for t in stmts {
            let here = self.n;
            self.n += 1;
            if !self.done && here == self.target {
                match (self.branch, t.node()) {
                    (None, _) => {
                        self.done = true;
                        changed = true;
                        continue;
                    }
                    (Some(true), StmtNode::Block(inner)) => {
                        self.done = true;
                        changed = true;
                        out.extend(inner.iter().cloned());
                        continue;
                    }
                    (Some(true), StmtNode::For { body, .. } | StmtNode::While { body, .. }) => {
                        // Valid only where the body does not use the counter (verified).
                        self.done = true;
                        changed = true;
                        out.push(body.clone());
                        continue;
                    }
                    (Some(then), StmtNode::If { then: a, otherwise, .. }) => {
                        let pick = if then { Some(a) } else { otherwise.as_ref() };
                        if let Some(b) = pick {
                            self.done = true;
                            changed = true;
                            out.push(b.clone());
                            continue;
                        }
                    }
                    _ => {}
                }
            }
            let t2 = self.mutate_stmt(t);
            changed |= !t2.ptr_eq(t);
            out.push(t2);
        }
        if changed {
            Stmt::block(out)
        } else {
            s.clone()
        }
    }
}

/// Replaces the `target`-th expression (pre-order) by its `choice`-th simplification: its
/// operands of the same type, then a zero of its type.
struct ExprEdit {
    target: usize,
    choice: usize,
    n: usize,
    done: bool,
}

fn replacements(e: &Expr) -> Vec<Expr> {
    let mut out: Vec<Expr> =
        e.children().into_iter().filter(|c| c.ty() == e.ty()).cloned().collect();
    if let (Type::Scalar(t), None) = (e.ty(), e.as_imm()) {
        out.push(Expr::constant(t, 0.0));
    }
    out
}

impl Mutator for ExprEdit {
    fn mutate_expr(&mut self, e: &Expr) -> Expr {
        if self.done {
            return e.clone();
        }
        let here = self.n;
        self.n += 1;
        if here == self.target {
            self.done = true;
            return replacements(e).into_iter().nth(self.choice).unwrap_or_else(|| e.clone());
        }
        walk_mutate_expr(self, e)
    }
}

/// A size that every kept edit makes smaller: nodes, with variables and loads weighing more
/// than constants (so replacing a variable by a constant counts as progress).
fn size(k: &Kernel) -> usize {
    struct S(usize);
    impl kiln_ir::Visitor for S {
        fn visit_expr(&mut self, e: &Expr) {
            self.0 += match e.node() {
                ExprNode::Imm(_) => 2,
                _ => 3,
            };
            kiln_ir::walk_expr(self, e)
        }
        fn visit_stmt(&mut self, s: &Stmt) {
            self.0 += 3;
            kiln_ir::walk_stmt(self, s)
        }
    }
    let mut s = S(0);
    kiln_ir::Visitor::visit_stmt(&mut s, k.body());
    s.0
}

fn sites(k: &Kernel) -> (usize, usize) {
    let mut st = StmtEdit { target: usize::MAX, branch: None, n: 0, done: false };
    st.mutate_stmt(k.body());
    let mut ex = ExprEdit { target: usize::MAX, choice: 0, n: 0, done: false };
    ex.mutate_stmt(k.body());
    (st.n, ex.n)
}

/// The kinds of edit, biggest first: delete a statement, replace an `if` by a branch (or a
/// nested block by its statements), replace an expression by an operand or zero.
#[derive(Clone, Copy)]
enum Edit {
    Delete,
    Branch(bool),
    Expr(usize),
}

const EDITS: [Edit; 7] = [
    Edit::Delete,
    Edit::Branch(true),
    Edit::Branch(false),
    Edit::Expr(0),
    Edit::Expr(1),
    Edit::Expr(2),
    Edit::Expr(3),
];

/// `k` with edit `e` at site `target`, or `None` past the last site.
fn edited(k: &Kernel, e: Edit, target: usize) -> Option<Kernel> {
    let (stmts, exprs) = sites(k);
    let body = match e {
        Edit::Delete | Edit::Branch(_) if target < stmts => {
            let branch = match e {
                Edit::Branch(b) => Some(b),
                _ => None,
            };
            StmtEdit { target, branch, n: 0, done: false }.mutate_stmt(k.body())
        }
        Edit::Expr(choice) if target < exprs => {
            ExprEdit { target, choice, n: 0, done: false }.mutate_stmt(k.body())
        }
        _ => return None,
    };
    Some(k.with_body(body))
}

/// Shrinks a case `pass` gets wrong to a smaller one it still gets wrong (see the module
/// docs); returns the case unchanged if it does not fail.
pub fn shrink(pass: &dyn Fn(&Kernel) -> Kernel, case: &TestCase) -> TestCase {
    let mut cur = case.clone();
    if pass_error(pass, &cur).is_ok() {
        return cur;
    }
    let mut tries = 0;
    let mut cur_size = size(&cur.kernel);
    loop {
        let mut progress = false;
        for e in EDITS {
            // After a kept edit the sites shift onto the next one: stay at the same index.
            let mut target = 0;
            while let Some(k) = edited(&cur.kernel, e, target) {
                tries += 1;
                if tries > 5_000 {
                    return cur;
                }
                let next = TestCase { kernel: k, ..cur.clone() };
                // `pass_error` is Ok when the edited original itself fails to run.
                if size(&next.kernel) < cur_size
                    && verify_kernel(&next.kernel).is_ok()
                    && candidate_error(pass, &next).is_err()
                {
                    cur = next;
                    cur_size = size(&cur.kernel);
                    progress = true;
                } else {
                    target += 1;
                }
            }
        }
        if !progress {
            return cur;
        }
    }
}

/// A report for a failing case: the shrunk kernel as `.kir` text, what the pass made of it,
/// and why that is wrong.
pub fn shrink_report(name: &str, pass: &dyn Fn(&Kernel) -> Kernel, case: &TestCase) -> String {
    let small = shrink(pass, case);
    let why = pass_error(pass, &small).err().unwrap_or_else(|| "no longer fails".into());
    format!(
        "{name}: shrunk failing case ({why}); launch {:?} with args {:?}\n--- shrunk input (.kir)\n{}\n--- \
         {name} output\n{}",
        small.range,
        small.args,
        small.kernel,
        pass(&small.kernel)
    )
}
