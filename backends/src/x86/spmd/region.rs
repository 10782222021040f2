//! Work-groups with barriers as region loops (as POCL's work-item loops): one call runs a
//! whole group of one row, the code between two barriers looping over the group's batches.
//!
//! ## Shape
//!
//! The statements of the kernel's *control levels* (its body, and the bodies of the
//! loops, branches and blocks that contain a barrier) are of three sorts:
//!
//! * **barriers**: points between regions, no code;
//! * **group statements**: the control statements containing a barrier, whose conditions,
//!   bounds and steps must be *group-pure* (below), and the `let`s, `var`s and
//!   assignments of the *group names* (names declared once, at a control level, and only
//!   ever given group-pure values there). They run once per group, in the group frame:
//!   `while stride > 0 { ...; stride = stride / 2; }` counts once per round, not once per
//!   batch;
//! * **region statements**: everything else. A maximal run of them is a region, run batch
//!   after batch (each batch to the region's end) in the group frame.
//!
//! Values of a region that later regions read (its `let`s and `var`s in scope at its end,
//! other than `global_id(0)`'s lanes and one `let` of `local_id(0)`, which are recomputed,
//! the latter in a register) go after each batch into
//! that batch's save frame (frame `1 + b` after the group frame, [`super::ROUND_SLOT`]
//! holding the frames' stride), and back before the batch runs a later region that names
//! them (`saves.rs`: which values, and when they live in registers).
//!
//! A region that is one `if` without `else` whose condition bounds `local_id(0)` by
//! group-pure `u32` values (`lid < s`, `lid <= s`, `lid == s`, `lid >= a`, `lid > a`, and
//! `&&` of those, either side) runs only the batches with a lane in that range: the others
//! would take no side of the branch. The batches it runs still test the condition per
//! lane, so a bound that is not a multiple of 8, or past the group, is exact.
//!
//! ## Why this is the interpreter's schedule
//!
//! The interpreter runs every work-item of a group to its next barrier, in order, round
//! after round. Here too: a region is exactly the statements between two barriers (for
//! every work-item the same ones, as the control around barriers is group-pure, hence the
//! same in every work-item, and barriers are never under other control), run for the
//! batches in order, each batch's lanes interleaved as on the 8-lane code without
//! barriers (race-free kernels give the interpreter's results). Group statements have no
//! effect but on group names, which regions only read; and they cannot fault: group-pure
//! values have no loads and no division but by a constant that cannot fault, and a group
//! `for` has a positive constant step. So the first fault is the interpreter's: the first
//! batch that faults in a region stops the launch at the region's end, its lowest faulting
//! lane reported (lanes before it run on to the region's end, as the interpreter runs them
//! to the barrier). Barrier divergence cannot happen in such a kernel: every work-item
//! meets the same barriers.
//!
//! Group-pure: constants, scalar parameters, group names, ids and sizes other than
//! `global_id(0)` and `local_id(0)` (a group of one row has one `global_id(1)`), and
//! operations of those, with integer `/` and `%` only by a constant that cannot fault.

use std::collections::{HashMap, HashSet};

use iced_x86::code_asm::*;
use kiln_ir::{BinOp, Builtin, Expr, ExprNode, Imm, Kernel, Scalar, Stmt, StmtNode, Type};

use super::uniform::operands;
use super::{no, Bound, Kind, Loc, R, V};
use crate::x86::gen::count_barriers;
use crate::x86::rt;

/// What the region walk knows about the kernel.
pub(super) struct Regions {
    /// The group names (see the module docs).
    pub(super) group: HashSet<String>,
    /// Group names whose values are known here (`known.rs`).
    pub(super) known: HashMap<String, Imm>,
    /// The unrolled rounds of group loops, alive while the code is generated.
    pub(super) keep: Vec<Vec<Stmt>>,
    /// Where the code of the last region run as the group's first batch alone, decided
    /// when the code was generated, ends (an instruction count; see
    /// [`V::first_batch_only`]).
    pub(super) first_batch_end: Option<usize>,
    /// Whether the region that ended there left the lanes' ids (`global_id(0)`'s and
    /// `local_id(0)`'s registers) up to date: one whose statements read no lane of them
    /// leaves them as they were.
    pub(super) first_batch_lanes: bool,
    /// The group's size when the kernel fixes it to whole batches (`#reqd_work_group_size(L,
    /// 1, 1)` with `L` a multiple of 8: a launch with another local size is refused before it
    /// runs).
    pub(super) group_size: Option<u64>,
    /// Names bound to exactly `local_id(0)` (declared once).
    pub(super) lids: HashSet<String>,
    /// Frame offsets allocated while generating regions: bindings there are per batch.
    pub(super) ranges: Vec<(i32, i32)>,
    /// The batch bindings in scope where the current region starts (`batch_bindings`).
    pub(super) before: Vec<(i32, i32)>,
    /// Of those, the offsets of the `var`s the current region assigns.
    pub(super) assigned: HashSet<i32>,
    /// Offsets of 64-byte slots (f64, i64 and u64 values).
    pub(super) wide: HashSet<i32>,
    /// While a batch of a region unrolled when the code is generated runs
    /// ([`V::known_batches`]): its lane 0's `local_id(0)`.
    pub(super) lid0: Option<u32>,
    /// While such a batch runs without the lanes' ids kept up to date (nothing in it reads
    /// them: see `batches.rs`): a `let` of `local_id(0)` then binds its register without
    /// computing it.
    pub(super) ids_stale: bool,
}

/// True if `e` is group-pure given the group names `names` and scalar parameters.
fn pure(e: &Expr, names: &dyn Fn(&str) -> bool) -> bool {
    match e.node() {
        ExprNode::Imm(_) => true,
        ExprNode::Var(v) => names(v.name()),
        ExprNode::Builtin { kind: Builtin::GlobalId | Builtin::LocalId, dim: 0 } => false,
        ExprNode::Builtin { .. } => true,
        ExprNode::Binary { op: BinOp::Div | BinOp::Rem, a, b }
            if !matches!(a.ty(), Type::Scalar(Scalar::F32 | Scalar::F64 | Scalar::F16))
                && !super::scalar::safe_divisor_expr(b) =>
        {
            false
        }
        ExprNode::Binary { .. }
        | ExprNode::Unary { .. }
        | ExprNode::Cast { .. }
        | ExprNode::Select { .. }
        | ExprNode::Intrinsic { .. } => operands(e).iter().all(|x| pure(x, names)),
        _ => false,
    }
}

/// Facts gathered by one walk of the kernel.
#[derive(Default)]
struct Facts {
    /// Declarations (`let`, `var`, `for`, atomic results) per name.
    decls: HashMap<String, usize>,
    /// Values given at control levels: name, value.
    values: Vec<(String, Expr)>,
    /// Names declared at control levels.
    control: HashSet<String>,
    /// Names assigned inside region statements.
    region_assigned: HashSet<String>,
    lids: HashSet<String>,
}

impl Facts {
    fn control_block(&mut self, stmts: &[Stmt]) {
        for s in stmts {
            match s.node() {
                StmtNode::Let { var, value } => {
                    self.decl(var.name());
                    self.control.insert(var.name().to_string());
                    self.values.push((var.name().to_string(), value.clone()));
                    if matches!(value.node(), ExprNode::Builtin { kind: Builtin::LocalId, dim: 0 })
                    {
                        self.lids.insert(var.name().to_string());
                    }
                }
                StmtNode::Decl { var, init } => {
                    self.decl(var.name());
                    self.control.insert(var.name().to_string());
                    self.values.push((var.name().to_string(), init.clone()));
                }
                StmtNode::Assign { var, value } => {
                    self.values.push((var.name().to_string(), value.clone()))
                }
                _ if count_barriers(s) == 0 => self.region(s),
                StmtNode::If { then, otherwise, .. } => {
                    self.control_block(then.stmts());
                    if let Some(o) = otherwise {
                        self.control_block(o.stmts());
                    }
                }
                StmtNode::While { body, .. } => self.control_block(body.stmts()),
                StmtNode::For { var, lo, hi, body, .. } => {
                    self.decl(var.name());
                    self.control.insert(var.name().to_string());
                    self.values.push((var.name().to_string(), lo.clone()));
                    self.values.push((var.name().to_string(), hi.clone()));
                    self.control_block(body.stmts());
                }
                StmtNode::Block(v) => self.control_block(v),
                _ => {}
            }
        }
    }

    fn decl(&mut self, name: &str) {
        *self.decls.entry(name.to_string()).or_default() += 1;
    }

    /// A statement without barriers (and what it contains).
    fn region(&mut self, s: &Stmt) {
        match s.node() {
            StmtNode::Let { var, value } => {
                self.decl(var.name());
                if matches!(value.node(), ExprNode::Builtin { kind: Builtin::LocalId, dim: 0 }) {
                    self.lids.insert(var.name().to_string());
                }
            }
            StmtNode::Decl { var, .. } | StmtNode::For { var, .. } => self.decl(var.name()),
            StmtNode::Call { result: Some(r), .. } => self.decl(r.name()),
            StmtNode::Assign { var, .. } => {
                self.region_assigned.insert(var.name().to_string());
            }
            _ => {}
        }
        match s.node() {
            StmtNode::If { then, otherwise, .. } => {
                then.stmts().iter().for_each(|s| self.region(s));
                if let Some(o) = otherwise {
                    o.stmts().iter().for_each(|s| self.region(s));
                }
            }
            StmtNode::While { body, .. } | StmtNode::For { body, .. } => {
                body.stmts().iter().for_each(|s| self.region(s))
            }
            StmtNode::Block(v) => v.iter().for_each(|s| self.region(s)),
            _ => {}
        }
    }
}

impl Regions {
    /// The group names and `local_id(0)` names of `k` (see the module docs).
    pub(super) fn new(k: &Kernel) -> Regions {
        let mut f = Facts::default();
        f.control_block(k.body().stmts());
        let params: HashSet<&str> = k
            .params()
            .iter()
            .filter(|p| matches!(p.ty(), Type::Scalar(_)))
            .map(|p| p.name())
            .collect();
        let once = |n: &str| f.decls.get(n) == Some(&1) && !params.contains(n);
        let mut group: HashSet<String> = f
            .control
            .iter()
            .filter(|n| once(n) && !f.region_assigned.contains(*n))
            .cloned()
            .collect();
        // Drop names given a value that is not pure until nothing changes.
        loop {
            let bad: Vec<String> = f
                .values
                .iter()
                .filter(|(n, e)| {
                    group.contains(n) && !pure(e, &|x| group.contains(x) || params.contains(x))
                })
                .map(|(n, _)| n.clone())
                .collect();
            if bad.is_empty() {
                break;
            }
            bad.iter().for_each(|n| {
                group.remove(n);
            });
        }
        let lids = f.lids.into_iter().filter(|n| once(n)).collect();
        Regions {
            group,
            lids,
            ranges: Vec::new(),
            before: Vec::new(),
            assigned: HashSet::new(),
            wide: HashSet::new(),
            known: HashMap::new(),
            keep: Vec::new(),
            first_batch_end: None,
            first_batch_lanes: false,
            ids_stale: false,
            lid0: None,
            // Only whole batches: the rules that use the size unroll a group's batches with
            // every lane live (the executor runs other groups on the scalar code anyway, but
            // the 8-lane code must not depend on that).
            group_size: match k.attrs().reqd_work_group_size {
                Some([l, 1, 1]) if l % 8 == 0 => Some(u64::from(l)),
                _ => None,
            },
        }
    }
}

/// A bound on `local_id(0)`: the ids in `[lo, hi)` (`None`: unbounded on that side), each
/// a group-pure `u32` value plus a constant.
#[derive(Default)]
pub(super) struct LidRange {
    pub(super) lo: Option<(Expr, u64)>,
    pub(super) hi: Option<(Expr, u64)>,
    /// False when a bound was left out (a second one on one side): the condition then
    /// implies the range but is not the same.
    pub(super) exact: bool,
}

impl V {
    pub(super) fn regions(&self) -> &Regions {
        self.regions.as_ref().expect("region mode")
    }

    /// True if `e` is group-pure here.
    pub(super) fn group_pure(&self, e: &Expr) -> bool {
        pure(e, &|n| match self.find(n) {
            Some(b) => self.group_binding(b),
            None => self.params.iter().any(|p| p.0 == n),
        })
    }

    /// True if binding `b` was made by group code (one value per group).
    fn group_binding(&self, b: &Bound) -> bool {
        let off = match b.loc {
            Loc::Slot(o) | Loc::Scalar(o) => o,
            Loc::Reg(_) => return false,
        };
        !self.regions().ranges.iter().any(|&(s, e)| (s..e).contains(&off))
    }

    /// True if `s` is a group statement at a control level.
    pub(super) fn is_group_stmt(&self, s: &Stmt) -> bool {
        let g = &self.regions().group;
        match s.node() {
            StmtNode::Let { var, .. } | StmtNode::Decl { var, .. } => g.contains(var.name()),
            StmtNode::Assign { var, .. } => g.contains(var.name()),
            _ => count_barriers(s) > 0,
        }
    }

    /// The statements of a control level (see the module docs).
    pub(super) fn group_block(&mut self, stmts: &[Stmt]) -> R<()> {
        let mark = self.lets.len();
        let mut i = 0;
        while i < stmts.len() {
            let s = &stmts[i];
            if s.barrier_fence().is_some() {
                i += 1;
                continue;
            }
            if self.is_group_stmt(s) {
                self.group_stmt(s)?;
                i += 1;
                continue;
            }
            let j = self.run_end(stmts, i)?;
            // (With the next run, across a barrier, where they merge: `merge.rs`.)
            if let Some(k) = self.merged_region(stmts, i, j)? {
                i = k;
                continue;
            }
            self.region(&stmts[i..j])?;
            i = j;
        }
        self.lets.truncate(mark);
        Ok(())
    }

    /// A group statement: once per group, in the group frame.
    fn group_stmt(&mut self, s: &Stmt) -> R<()> {
        match s.node() {
            StmtNode::Let { var, value } | StmtNode::Decl { var, init: value } => {
                if !self.group_pure(value) {
                    return no(format!("internal: `{}` is not group-pure", var.name()));
                }
                self.learn(var.name(), value);
                self.stmt(s)
            }
            StmtNode::Assign { var, value } => {
                if !self.group_pure(value) {
                    return no(format!("internal: `{}` is not group-pure", var.name()));
                }
                self.learn(var.name(), value);
                self.stmt(s)
            }
            StmtNode::If { cond, then, otherwise } => {
                self.require_pure(cond)?;
                // (Either side may change group names: unknown in both, and after.)
                self.forget_assigned(s);
                let mut els = self.a.create_label();
                let mut end = self.a.create_label();
                self.uniform_jump_unless(cond, els)?;
                self.group_block(then.stmts())?;
                self.a.jmp(end)?;
                self.bind(&mut els)?;
                if let Some(o) = otherwise {
                    self.forget_assigned(s);
                    self.group_block(o.stmts())?;
                }
                self.forget_assigned(s);
                self.bind(&mut end)
            }
            StmtNode::While { cond, body } => {
                self.require_pure(cond)?;
                if self.unroll_group_while(cond, body.stmts())? {
                    return Ok(());
                }
                self.forget_assigned(s);
                let mut top = self.a.create_label();
                let mut exit = self.a.create_label();
                self.bind(&mut top)?;
                self.uniform_jump_unless(cond, exit)?;
                self.group_block(body.stmts())?;
                self.back_edge()?;
                self.a.jmp(top)?;
                self.forget_assigned(s);
                self.bind(&mut exit)
            }
            StmtNode::For { var, lo, hi, step, body } => {
                self.forget_assigned(s);
                self.group_for(var, lo, hi, step, body.stmts())?;
                self.forget_assigned(s);
                Ok(())
            }
            StmtNode::Block(v) => self.group_block(v),
            _ => no("internal: a barrier inside a statement that is not control"),
        }
    }

    fn require_pure(&self, e: &Expr) -> R<()> {
        if self.group_pure(e) {
            Ok(())
        } else {
            no(format!("a barrier under `{e}`, which may differ between the group's work-items"))
        }
    }

    /// A `for` around barriers: group-pure bounds, a positive constant step (so it
    /// cannot fault), a 64-bit counter in the group frame as [`V::for_loop`]'s.
    fn group_for(
        &mut self,
        var: &kiln_ir::Var,
        lo: &Expr,
        hi: &Expr,
        step: &Expr,
        body: &[Stmt],
    ) -> R<()> {
        let signed = match var.ty() {
            Type::Scalar(Scalar::I32) => true,
            Type::Scalar(Scalar::U32) => false,
            t => return no(format!("a barrier in `for {}` over {t}", var.name())),
        };
        let positive = match step.node() {
            ExprNode::Imm(Imm::Int(_, bits)) => {
                if signed {
                    (*bits as u32 as i32) > 0
                } else {
                    *bits as u32 != 0
                }
            }
            _ => false,
        };
        if !positive {
            return no(format!(
                "a barrier in `for {}` whose step is not a positive constant",
                var.name()
            ));
        }
        self.require_pure(lo)?;
        self.require_pure(hi)?;
        let (cnt, end, inc) = (self.slot(), self.slot(), self.slot());
        let mut exit = self.a.create_label();
        let mut top = self.a.create_label();
        for (e, off) in [(lo, cnt), (hi, end), (step, inc)] {
            self.uniform_to_eax(e)?;
            if signed {
                self.a.movsxd(rax, eax)?;
            }
            self.a.mov(qword_ptr(r15 + off), rax)?;
        }
        self.bind(&mut top)?;
        self.a.mov(rax, qword_ptr(r15 + cnt))?;
        self.a.cmp(rax, qword_ptr(r15 + end))?;
        if signed {
            self.a.jge(exit)?;
        } else {
            self.a.jae(exit)?;
        }
        let name = var.name().to_string();
        let (loc, dword) = (Loc::Scalar(cnt), Some(cnt));
        self.lets.push(Bound { dword, ..Bound::new(name, loc, Kind::Uniform) });
        self.group_block(body)?;
        self.lets.pop();
        self.a.mov(rax, qword_ptr(r15 + inc))?;
        self.a.add(qword_ptr(r15 + cnt), rax)?;
        self.back_edge()?;
        self.a.jmp(top)?;
        self.bind(&mut exit)
    }

    /// The bindings in scope that hold one value per batch, with their widths (32 or 64
    /// bytes): what a region restores before a batch and saves after it.
    pub(super) fn batch_bindings(&self) -> Vec<(i32, i32)> {
        let r = self.regions();
        let mut out = Vec::new();
        for b in &self.lets {
            if b.kind == Kind::Gid0 || self.group_binding(b) {
                continue;
            }
            let off = match b.loc {
                Loc::Slot(o) | Loc::Scalar(o) => o,
                Loc::Reg(_) => continue,
            };
            let bytes = if r.wide.contains(&off) { 64 } else { 32 };
            if !out.contains(&(off, bytes)) {
                out.push((off, bytes));
            }
        }
        out
    }

    /// A region: `stmts` for each batch of the group (or of its trimmed range), in order.
    pub(super) fn region(&mut self, stmts: &[Stmt]) -> R<()> {
        let restore = self.region_restores(stmts);
        let start = self.next;
        // The batches to run: gid range [rbx, [rbp-56]), the first save frame in [rbp-48].
        let range = match stmts {
            [s] => self.lid_range_of(s),
            _ => None,
        };
        let group_gid = qword_ptr(r12 + rt::OFF_GLOBAL_ID);
        let end_slot = qword_ptr(r15 + super::END_SLOT);
        let stride = qword_ptr(r15 + super::ROUND_SLOT);
        let mut done = self.a.create_label();
        // With an exact range, the batches wholly inside it take the branch in every lane:
        // the global ids [f, f + 8) of a group frame slot, from the range's first (only
        // with a lower bound; without one every batch starts inside) to its end or the
        // batches' end, whichever is first.
        let full = match &range {
            Some(r) if r.exact => Some(self.slot()),
            _ => None,
        };
        if let Some(r @ LidRange { hi: Some(h @ (e, add)), .. }) = range.as_ref() {
            if *add <= 8 && restore.is_empty() && self.twins_ok(stmts) {
                // A range within the first batch known now: that batch alone, nothing else.
                let lanes = r.exact.then(|| self.const_lanes(r.lo.as_ref(), h)).flatten();
                if self.first_batch_only(stmts, e, *add as i32, lanes, done)? {
                    // (Nothing jumps to `done`; rbx is the group's first id again.)
                    self.regions.as_mut().expect("region mode").ranges.push((start, self.next));
                    return Ok(());
                }
            }
        }
        if restore.is_empty()
            && self.twins_ok(stmts)
            && self.known_batches(stmts, range.as_ref())?
        {
            self.regions.as_mut().expect("region mode").ranges.push((start, self.next));
            return Ok(());
        }
        if range.is_none() && self.unrolled_batches(stmts, &restore)? {
            return Ok(());
        }
        let lo_bound = range.as_ref().and_then(|r| r.lo.as_ref()).is_some();
        match range.as_ref().and_then(|r| r.hi.as_ref()) {
            Some((e, add)) => {
                self.uniform_to_eax(e)?;
                // (A 32-bit result: the upper half of rax is zero.)
                if full.is_some() {
                    self.a.lea(r11, qword_ptr(rax + *add as i32))?;
                    self.a.add(r11, group_gid)?;
                }
                self.a.add(rax, (*add + 7) as i32)?;
                self.a.and(rax, -8)?;
                self.a.add(rax, group_gid)?;
                self.a.cmp(rax, end_slot)?;
                self.a.cmova(rax, end_slot)?;
                if let Some(f) = full {
                    self.a.cmp(r11, rax)?;
                    self.a.cmova(r11, rax)?;
                    self.a.mov(qword_ptr(r15 + (f + 8)), r11)?;
                }
            }
            None => {
                self.a.mov(rax, end_slot)?;
                if let Some(f) = full {
                    self.a.mov(qword_ptr(r15 + (f + 8)), rax)?;
                }
            }
        }
        self.a.mov(qword_ptr(rbp - 56), rax)?;
        // A range ending at a known value may be proven now (no flag, one copy).
        // (Or at the group's end, when the kernel fixes its size.)
        let range_hi =
            range.as_ref().and_then(|r| r.hi.as_ref()).and_then(|(e, add)| match e.as_imm() {
                Some(Imm::Int(_, bits)) => Some((*bits as u32 as u64).saturating_add(*add)),
                _ => None,
            });
        let known_hi = match (range_hi, self.regions().group_size) {
            (Some(h), Some(l)) => Some(h.min(l)),
            (h, l) => h.or(l),
        };
        let proof = match known_hi.and_then(|hi| self.prove_known_range(stmts, hi)) {
            Some(p) => Some(p),
            None => self.prove_region(stmts)?,
        };
        // A region that restores nothing and binds names only in registers copies nothing
        // to save frames and needs no save-frame pointer.
        let copies = !restore.is_empty() || !self.twins_ok(stmts);
        let outer = std::mem::replace(&mut self.proven, proof);
        match range.as_ref().and_then(|r| r.lo.as_ref()) {
            Some((e, add)) => {
                self.uniform_to_eax(e)?;
                if *add > 0 {
                    self.a.add(rax, *add as i32)?;
                }
                if let Some(f) = full {
                    self.a.mov(r11, rax)?;
                    self.a.add(r11, group_gid)?;
                    self.a.mov(qword_ptr(r15 + f), r11)?;
                }
                self.a.and(rax, -8)?;
                self.a.mov(rbx, rax)?;
                if copies {
                    self.a.shr(rax, 3)?;
                    self.a.add(rax, 1)?;
                    self.a.imul_2(rax, stride)?;
                    self.a.add(rax, r15)?;
                    self.set_save_ptr()?;
                }
                self.a.add(rbx, group_gid)?;
            }
            None => {
                if copies {
                    self.a.mov(rax, stride)?;
                    self.a.add(rax, r15)?;
                    self.set_save_ptr()?;
                }
                self.a.mov(rbx, group_gid)?;
            }
        }
        self.a.cmp(rbx, qword_ptr(rbp - 56))?;
        self.a.jae(done)?;
        // The lanes' global ids, advanced by 8 per batch. (Every lane is alive at a batch's
        // start: a fault ends the launch at the end of the batch's pass, so the alive mask
        // set at the call's start holds.)
        self.a.vmovd(xmm15, ebx)?;
        self.a.vpbroadcastd(ymm15, xmm15)?;
        self.a.vpaddd(ymm15, ymm15, ymmword_ptr(r15))?;
        let certain = self.proven.as_ref().is_some_and(|p| p.certain);
        if full.is_none() && self.proven.is_some() && !certain && self.twins_ok(stmts) {
            self.twin_loops(stmts, &restore)?;
            self.regions.as_mut().expect("region mode").ranges.push((start, self.next));
            self.bind(&mut done)?;
            self.proven = outer;
            self.batch_mark = None;
            self.a.mov(rbx, group_gid)?;
            return Ok(());
        }
        let mut top = self.a.create_label();
        let mut test = self.a.create_label();
        // In the plain batch loop, values in `let` registers while the batch runs: the
        // restored ones loaded there, the region's own names bound there (`saves.rs`).
        let regs = self.next_reg;
        let regs_here = full.is_none() && copies && regs == super::GID && self.vhomes.is_empty();
        let in_regs = regs_here && self.region_regs_ok(stmts);
        // (Not where the region binds a 64-bit or vector name: once registers are handed
        // out, its new names take them too, and those would need two each.)
        let loaded = if regs_here && !self.region_has_wide(stmts) {
            self.plan_loaded(&restore)
        } else {
            Vec::new()
        };
        let slots: Vec<(i32, i32)> =
            restore.iter().filter(|s| !loaded.iter().any(|l| l.2 == s.0)).copied().collect();
        // (Once registers are handed out, any new name of the region may take one.)
        let in_regs = in_regs || !loaded.is_empty();
        if in_regs {
            self.next_reg = super::LET_REGS.start + loaded.len();
            self.reg_end = super::LID;
        }
        self.bind(&mut top)?;
        self.load_held(&loaded)?;
        self.batch_start(&slots)?;
        let fresh = self.fresh();
        let mut after = self.a.create_label();
        let mut to_after = false;
        if let (Some(f), [s]) = (full, stmts) {
            if let StmtNode::If { then, .. } = s.node() {
                // Inside the range: the branch's body under no mask (the condition is pure).
                let mut partial = self.a.create_label();
                if lo_bound {
                    self.a.cmp(rbx, qword_ptr(r15 + f))?;
                    self.a.jb(partial)?;
                }
                self.a.lea(rax, qword_ptr(rbx + 8))?;
                self.a.cmp(rax, qword_ptr(r15 + (f + 8)))?;
                self.a.ja(partial)?;
                // (No new bindings at the region's level: what the batch saves is known.)
                let save = self.region_saves(&restore);
                if !copies && !save.is_empty() {
                    return no("internal: a region saves values without a save-frame pointer");
                }
                self.full_batches(then.stmts(), f, &restore, &save, test)?;
                self.a.jmp(after)?;
                to_after = true;
                self.bind(&mut partial)?;
            }
        }
        self.fresh_again(fresh);
        let mark = self.lets.len();
        self.region_stmts(stmts)?;
        let mut held = if in_regs { self.held_names(mark) } else { Vec::new() };
        (self.next_reg, self.reg_end) = (regs, super::GID);
        // (Only the full batches' path jumps here: no label, and no `nop` for one, else.)
        if to_after {
            self.bind(&mut after)?;
        }
        self.regions.as_mut().expect("region mode").ranges.push((start, self.next));
        // Lets from earlier regions are unchanged; their vars and this region's values
        // go back to the batch's save frame.
        let save = self.region_saves(&restore);
        if !copies && !save.is_empty() {
            return no("internal: a region saves values without a save-frame pointer");
        }
        // (The loaded `var`s the region assigns go back too.)
        let assigned = &self.regions().assigned;
        held.extend(loaded.iter().filter(|l| assigned.contains(&l.2)));
        self.save_held(&held)?;
        self.batch_end(&slots, &save, !held.is_empty() || !loaded.is_empty())?;
        self.bind(&mut test)?;
        self.a.cmp(rbx, qword_ptr(rbp - 56))?;
        self.a.jb(top)?;
        self.bind(&mut done)?;
        // Later regions restore them from their slots.
        for &(i, _, off) in held.iter().chain(&loaded) {
            self.lets[i].loc = Loc::Slot(off);
        }
        self.proven = outer;
        self.batch_mark = None;
        // Group code reports nothing per lane, but the budget's stub reads rbx.
        self.a.mov(rbx, group_gid)?;
        Ok(())
    }

    /// True if the binding at frame offset `off` is a `var`.
    pub(super) fn is_var_at(&self, off: i32) -> bool {
        self.lets
            .iter()
            .any(|b| b.decl.is_some() && matches!(b.loc, Loc::Slot(o) | Loc::Scalar(o) if o == off))
    }

    /// The `local_id(0)` range outside which region `s` does nothing: an `if` without
    /// `else` whose condition bounds `local_id(0)` (see the module docs).
    fn lid_range_of(&self, s: &Stmt) -> Option<LidRange> {
        let StmtNode::If { cond, otherwise: None, .. } = s.node() else { return None };
        let mut r = LidRange { exact: true, ..LidRange::default() };
        self.bound_lid(cond, &mut r).then_some(r)
    }

    fn is_lid(&self, e: &Expr) -> bool {
        match e.node() {
            ExprNode::Builtin { kind: Builtin::LocalId, dim: 0 } => true,
            ExprNode::Var(v) => {
                self.regions().lids.contains(v.name())
                    && self.find(v.name()).is_some_and(|b| b.decl.is_none())
            }
            _ => false,
        }
    }

    /// Narrows `r` by condition `c`; false if `c` is not of a recognised form.
    fn bound_lid(&self, c: &Expr, r: &mut LidRange) -> bool {
        let ExprNode::Binary { op, a, b } = c.node() else { return false };
        if *op == BinOp::LogicAnd {
            return self.bound_lid(a, r) && self.bound_lid(b, r);
        }
        // lid OP e, with OP mirrored when lid is on the right.
        let (op, e) = if self.is_lid(a) {
            (*op, b)
        } else if self.is_lid(b) {
            let m = match op {
                BinOp::Lt => BinOp::Gt,
                BinOp::Le => BinOp::Ge,
                BinOp::Gt => BinOp::Lt,
                BinOp::Ge => BinOp::Le,
                o => *o,
            };
            (m, a)
        } else {
            return false;
        };
        if e.ty() != Type::U32 || !self.group_pure(e) || !self.gpr_ok(e) {
            return false;
        }
        // One bound per side: a second of the same side is not narrowed (still exact).
        let (lo, hi) = match op {
            BinOp::Lt => (None, Some((e.clone(), 0))),
            BinOp::Le => (None, Some((e.clone(), 1))),
            BinOp::Eq => (Some((e.clone(), 0)), Some((e.clone(), 1))),
            BinOp::Ge => (Some((e.clone(), 0)), None),
            BinOp::Gt => (Some((e.clone(), 1)), None),
            _ => return false,
        };
        r.exact &= !(r.lo.is_some() && lo.is_some() || r.hi.is_some() && hi.is_some());
        if r.lo.is_none() {
            r.lo = lo;
        }
        if r.hi.is_none() {
            r.hi = hi;
        }
        true
    }
}
