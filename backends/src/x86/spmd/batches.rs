//! A region's batches (`region.rs`): what a batch restores and saves, the loop over the
//! full batches of a trimmed region, and the two copies of a region's statements when it
//! has a bounds proof (`proven.rs`), one with no test for the covered accesses (masked ones
//! included), one checking each, the proof's flag tested once per region where the region
//! has no trimmed range (two batch loops) and once per batch otherwise. A fault test ends a
//! batch only after code that can fault.

use iced_x86::code_asm::*;
use std::collections::HashSet;

use kiln_ir::{
    walk_expr, walk_stmt, BinOp, Builtin, Expr, ExprNode, Imm, Stmt, StmtNode, Type, Visitor,
};

use super::region::LidRange;
use super::{no, Bound, Kind, Loc, R, V};
use crate::x86::rt;

impl V {
    /// A batch's start: its values back from its save frame, `local_id(0)`'s lanes (not
    /// where nothing reads them: `ids_stale`). Every lane is alive here (a fault ends the
    /// call at the end of its batch).
    pub(super) fn batch_start(&mut self, restore: &[(i32, i32)]) -> R<()> {
        self.copy_slots(restore, false)?;
        if !self.regions().ids_stale && self.lets.iter().any(|b| b.loc == Loc::Reg(super::LID)) {
            self.lid_lanes(super::LID)?;
        }
        self.batch_mark = Some(self.fault_mark());
        Ok(())
    }

    /// True if, where code is being generated, every lane of the batch is certainly still
    /// alive (the fault lane 8): region code since its batch's start, with no code that can
    /// fault before it and no loop around it (whose body could have faulted before its top
    /// runs again). Code on another path from the batch's start resets this with
    /// [`V::fresh_again`].
    pub(super) fn fresh(&self) -> bool {
        self.batch_mark == Some(self.fault_mark())
    }

    /// Before code on a second path from a point where [`V::fresh`] was `was`: it is again.
    pub(super) fn fresh_again(&mut self, was: bool) {
        self.batch_mark = was.then(|| self.fault_mark());
    }

    /// A batch's end: its values to its save frame, the next batch's ids (its lanes' not
    /// where nothing reads them: `ids_stale`). `held`: the batch saved values from
    /// registers too (`saves.rs`).
    pub(super) fn batch_end(
        &mut self,
        restore: &[(i32, i32)],
        save: &[(i32, i32)],
        held: bool,
    ) -> R<()> {
        self.copy_slots(save, true)?;
        if held || !restore.is_empty() || !save.is_empty() {
            // (The next batch's save frame; a region that copies nothing needs none.)
            match self.save_ptr {
                Some(r) => self.a.add(r, qword_ptr(r15 + super::ROUND_SLOT))?,
                None => {
                    self.a.mov(rax, qword_ptr(r15 + super::ROUND_SLOT))?;
                    self.a.add(qword_ptr(rbp - 48), rax)?;
                }
            }
        }
        if !self.regions().ids_stale {
            let eight = self.imm_slot(8);
            self.a.vpaddd(ymm15, ymm15, ymmword_ptr(r15 + eight))?;
        }
        self.a.add(rbx, 8)?;
        Ok(())
    }

    /// The batches wholly inside a trimmed region's range (`[r15 + f + 8]` the end of
    /// the range's global ids): `body` under no mask. With the region's proof, one loop
    /// runs them back to back with no test per access, per batch only the test that the
    /// next batch is full too (the proof is tested once; ids only grow, so the range's
    /// start stays behind); `test` is where the next batch's loop test is. Without it,
    /// each access checked.
    pub(super) fn full_batches(
        &mut self,
        body: &[Stmt],
        f: i32,
        restore: &[(i32, i32)],
        save: &[(i32, i32)],
        test: CodeLabel,
    ) -> R<()> {
        let since = self.fault_mark();
        let Some((flag, known)) = self.proven.as_ref().map(|p| (p.flag, p.certain)) else {
            self.block(body)?;
            return self.fault_test_since(since);
        };
        let mut unproven = self.a.create_label();
        let fresh = self.fresh();
        // (A proof known when the code was generated has no flag and no unproven copy.)
        if !known {
            self.a.cmp(byte_ptr(r15 + flag), 0)?;
            self.a.je(unproven)?;
        }
        let mut tight = self.a.create_label();
        self.bind(&mut tight)?;
        let since = self.fault_mark();
        self.proven.as_mut().expect("a proof").certain = true;
        self.block(body)?;
        self.proven.as_mut().expect("a proof").certain = known;
        self.fault_test_since(since)?;
        self.batch_end(restore, save, false)?;
        self.a.lea(rax, qword_ptr(rbx + 8))?;
        self.a.cmp(rax, qword_ptr(r15 + (f + 8)))?;
        self.a.ja(test)?;
        self.batch_start(restore)?;
        self.a.jmp(tight)?;
        if known {
            return Ok(());
        }
        self.bind(&mut unproven)?;
        self.fresh_again(fresh);
        let since = self.fault_mark();
        let proof = self.proven.take();
        self.block(body)?;
        self.proven = proof;
        self.fault_test_since(since)
    }

    /// `(e, op)` if condition `c` is `l op e` (either side, mirrored) for `l` a `let` of
    /// `local_id(0)` in its register in region loops (kept up to date by the batch), `op`
    /// one of `<`, `<=`, `>`, `>=`, and `e` a `u32` value computed in general-purpose
    /// registers.
    pub(super) fn lid_bound<'c>(&self, c: &'c Expr) -> Option<(&'c Expr, BinOp)> {
        if self.regions.as_ref().is_none_or(|r| r.ids_stale) {
            return None;
        }
        let ExprNode::Binary { op, a, b } = c.node() else { return None };
        let lid = |x: &Expr| match x.node() {
            ExprNode::Var(v) => self.find(v.name()).is_some_and(|b| b.loc == Loc::Reg(super::LID)),
            _ => false,
        };
        let (op, e) = if lid(a) {
            (*op, b)
        } else if lid(b) {
            let m = match op {
                BinOp::Lt => BinOp::Gt,
                BinOp::Le => BinOp::Ge,
                BinOp::Gt => BinOp::Lt,
                BinOp::Ge => BinOp::Le,
                _ => return None,
            };
            (m, a)
        } else {
            return None;
        };
        if e.ty() != Type::U32 || self.kind(e) != Kind::Uniform || !self.gpr_ok(e) {
            return None;
        }
        matches!(op, BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge).then_some((e, op))
    }

    /// How many fault sites and stubs the code has so far.
    pub(super) fn fault_mark(&self) -> (usize, usize) {
        (self.sites.len(), self.stubs.len())
    }

    /// At a batch's end: a recorded fault stops the launch, if the code since `mark` can
    /// fault (code without fault sites or stubs leaves the fault lane as it was, 8).
    pub(super) fn fault_test_since(&mut self, mark: (usize, usize)) -> R<()> {
        if self.may_fault && (self.sites.len(), self.stubs.len()) != mark {
            self.a.cmp(dword_ptr(r15 + self.fault_lane), 8)?;
            self.a.jne(self.fault_exit)?;
        }
        Ok(())
    }

    /// The region's statements for one batch: with a proof, and when they declare nothing
    /// but `let`s of `global_id(0)` and `local_id(0)` (bound to registers, so that both
    /// copies bind them alike), as two copies, the proof's flag tested once (see
    /// [`V::full_batches`]); the proven copy checks none of the covered accesses, masked
    /// ones included.
    pub(super) fn region_stmts(&mut self, stmts: &[Stmt]) -> R<()> {
        // (A proof known when the code was generated needs no second copy.)
        let twins = self.proven.as_ref().is_some_and(|p| !p.certain) && self.twins_ok(stmts);
        let since = self.fault_mark();
        if !twins {
            self.stmts_in_scope(stmts)?;
            return self.fault_test_since(since);
        }
        let flag = self.proven.as_ref().expect("a proof").flag;
        let (mut slow, mut join) = (self.a.create_label(), self.a.create_label());
        let fresh = self.fresh();
        self.a.cmp(byte_ptr(r15 + flag), 0)?;
        self.a.je(slow)?;
        self.proven_copy(stmts)?;
        self.a.jmp(join)?;
        self.bind(&mut slow)?;
        self.fresh_again(fresh);
        self.unproven_copy(stmts)?;
        self.bind(&mut join)
    }

    /// A region without a trimmed range whose statements can run as two copies (see
    /// [`V::region_stmts`]): two batch loops, the proof's flag tested once before them.
    pub(super) fn twin_loops(&mut self, stmts: &[Stmt], restore: &[(i32, i32)]) -> R<()> {
        let flag = self.proven.as_ref().expect("a proof").flag;
        // (The copies bind names in registers only: what a batch saves is known.)
        let save = self.region_saves(restore);
        let (mut slow, mut exit) = (self.a.create_label(), self.a.create_label());
        self.a.cmp(byte_ptr(r15 + flag), 0)?;
        self.a.je(slow)?;
        for proven in [true, false] {
            let mut top = self.a.create_label();
            self.bind(&mut top)?;
            self.batch_start(restore)?;
            if proven {
                self.proven_copy(stmts)?;
            } else {
                self.unproven_copy(stmts)?;
            }
            self.batch_end(restore, &save, false)?;
            self.a.cmp(rbx, qword_ptr(rbp - 56))?;
            self.a.jb(top)?;
            if proven {
                self.a.jmp(exit)?;
                self.bind(&mut slow)?;
            }
        }
        self.bind(&mut exit)
    }

    /// The copy of `stmts` that runs when the region's proof holds; its names (all in
    /// registers) leave scope, as the other copy binds them again.
    pub(super) fn proven_copy(&mut self, stmts: &[Stmt]) -> R<()> {
        let (since, mark) = (self.fault_mark(), self.lets.len());
        self.proven.as_mut().expect("a proof").certain = true;
        self.stmts_in_scope(stmts)?;
        self.proven.as_mut().expect("a proof").certain = false;
        self.fault_test_since(since)?;
        if self.lets[mark..].iter().any(|b| !matches!(b.loc, Loc::Reg(_))) {
            return no("internal: a region's twins bind a name outside a register");
        }
        self.lets.truncate(mark);
        Ok(())
    }

    /// The copy of `stmts` that checks each access.
    pub(super) fn unproven_copy(&mut self, stmts: &[Stmt]) -> R<()> {
        let since = self.fault_mark();
        let proof = self.proven.take();
        self.stmts_in_scope(stmts)?;
        self.proven = proof;
        self.fault_test_since(since)
    }

    /// True if `stmts` declare nothing but `let`s of `global_id(0)` and `local_id(0)` that
    /// get registers (at most one of `local_id(0)`, the register free), so that two copies
    /// of them bind their names alike.
    pub(super) fn twins_ok(&self, stmts: &[Stmt]) -> bool {
        let lid_lets = stmts.iter().filter(|s| match s.node() {
            StmtNode::Let { value, .. } => {
                matches!(value.node(), ExprNode::Builtin { kind: Builtin::LocalId, dim: 0 })
            }
            _ => false,
        });
        let lid_free = !self.lets.iter().any(|b| b.loc == Loc::Reg(super::LID));
        lid_lets.count() <= usize::from(lid_free)
            && stmts.iter().all(|s| match s.node() {
                StmtNode::Let { value, .. } => matches!(
                    value.node(),
                    ExprNode::Builtin { kind: Builtin::GlobalId | Builtin::LocalId, dim: 0 }
                ),
                // (Local arrays are the kernel's, laid out once; nothing binds them here.)
                StmtNode::Alloc { var, .. } => {
                    matches!(var.ty(), Type::Ptr(kiln_ir::AddrSpace::Local, _))
                }
                StmtNode::Decl { .. } => false,
                StmtNode::Call { result, .. } => result.is_none(),
                _ => true,
            })
    }

    /// `stmts` for one batch, their names staying in scope (later regions read them).
    pub(super) fn stmts_in_scope(&mut self, stmts: &[Stmt]) -> R<()> {
        for s in stmts {
            if let Some(&(_, loc, dword)) = self.hoisted.iter().find(|h| h.0 == s.addr()) {
                if let StmtNode::Let { var, .. } = s.node() {
                    let name = var.name().to_string();
                    self.lets.push(Bound { dword, ..Bound::new(name, loc, Kind::Uniform) });
                }
                continue;
            }
            self.stmt(s)?;
        }
        Ok(())
    }

    /// A trimmed region whose range ends at `e + add` (`e` group-pure): when that is at
    /// most 8, only the group's first batch has lanes in the range (a group has at least
    /// 8 work-items), and it runs the region with no batch loop (the reduction's rounds
    /// of strides 4, 2 and 1), its lanes testing the condition as a partial batch does;
    /// then a jump to `done`. Otherwise on to the general code. Its accesses to local
    /// arrays long enough for any such batch are proven in bounds here, when the code is
    /// generated ([`V::prove_first_batch`]).
    ///
    /// With `e` a constant (`known.rs`) the choice is made now: true if the region is the
    /// first batch alone, generated with no general code to follow (the caller's `done`
    /// then follows), false (nothing generated) if it is not. `lanes`: the lanes that take
    /// the branch when that is known ([`V::const_lanes`], for a condition that is exactly
    /// the range): the `if` then runs under that constant mask.
    pub(super) fn first_batch_only(
        &mut self,
        stmts: &[Stmt],
        e: &kiln_ir::Expr,
        add: i32,
        lanes: Option<u8>,
        done: CodeLabel,
    ) -> R<bool> {
        let mut general = self.a.create_label();
        let group_gid = qword_ptr(r12 + rt::OFF_GLOBAL_ID);
        let constant = match e.as_imm() {
            Some(kiln_ir::Imm::Int(_, bits)) => Some(*bits as u32 as i64),
            _ => None,
        };
        match constant {
            Some(v) if v > 8 - add as i64 => return Ok(false),
            Some(_) => {}
            None => {
                self.uniform_to_eax(e)?;
                // (A 32-bit result: the upper half of rax is zero.)
                self.a.cmp(rax, 8 - add)?;
                self.a.ja(general)?;
            }
        }
        // Right after another such region decided now (no code and no label between):
        // rbx, the batch end, the lanes' ids and `local_id(0)`'s register are as it left
        // them (its statements write none of them), and every lane is alive.
        let here = self.a.instructions().len();
        let resume = constant.is_some()
            && self.regions().first_batch_end == Some(here)
            && self.last_label_at != Some(here);
        // A proof known here needs no flag and no second copy.
        let known = self.prove_first_batch(stmts, e, add as u32);
        if !resume {
            self.a.mov(rbx, group_gid)?;
        }
        if known.is_none() {
            // (The batch end, which only a proof tested when the code runs reads.)
            self.a.lea(rax, qword_ptr(rbx + 8))?;
            self.a.mov(qword_ptr(rbp - 56), rax)?;
        }
        let proof = match known {
            Some(p) => Some(p),
            None => self.prove_region(stmts)?,
        };
        let certain = proof.as_ref().is_some_and(|p| p.certain);
        let outer = std::mem::replace(&mut self.proven, proof);
        // A region that reads no lane of the ids (a reduction's one-batch rounds, only
        // contiguous accesses at a known `local_id(0)`) computes neither register, as
        // `batch_copies` does; one resuming after it computes them if it reads them.
        // (Under a constant mask the condition is not evaluated: only the branch counts.)
        let masked = match (lanes, stmts) {
            (Some(_), [s]) if certain || self.proven.is_none() => match s.node() {
                StmtNode::If { then, otherwise: None, .. } => Some(then.stmts()),
                _ => None,
            },
            _ => None,
        };
        let needed = self.reads_id_lanes(masked.unwrap_or(stmts));
        let had = resume && self.regions().first_batch_lanes;
        if had || !needed {
            self.batch_mark = Some(self.fault_mark());
        } else {
            self.a.vmovd(xmm15, ebx)?;
            self.a.vpbroadcastd(ymm15, xmm15)?;
            self.a.vpaddd(ymm15, ymm15, ymmword_ptr(r15))?;
            self.batch_start(&[])?;
        }
        let lanes_now = had || needed;
        self.regions.as_mut().expect("region mode").ids_stale = !lanes_now;
        let mark = self.lets.len();
        // (The group's first batch: its lane 0's `local_id(0)` is 0.)
        self.regions.as_mut().expect("region mode").lid0 = Some(0);
        let lane_if = match (lanes, stmts) {
            (Some(m), [s]) => match s.node() {
                StmtNode::If { then, otherwise: None, .. } => Some((m, then.stmts())),
                _ => None,
            },
            _ => None,
        };
        // (With a proof to test when the code runs, the twins below.)
        if let Some((m, then)) = lane_if.filter(|_| certain || self.proven.is_none()) {
            let since = self.fault_mark();
            self.const_mask_block(m, then)?;
            self.fault_test_since(since)?;
        } else if certain {
            let since = self.fault_mark();
            self.stmts_in_scope(stmts)?;
            self.fault_test_since(since)?;
        } else {
            self.region_stmts(stmts)?;
        }
        let g = self.regions.as_mut().expect("region mode");
        g.lid0 = None;
        g.ids_stale = false;
        self.lets.truncate(mark);
        self.proven = outer;
        if constant.is_some() {
            let end = self.a.instructions().len();
            let g = self.regions.as_mut().expect("region mode");
            g.first_batch_end = Some(end);
            g.first_batch_lanes = lanes_now;
            return Ok(true);
        }
        self.a.jmp(done)?;
        self.bind(&mut general)?;
        Ok(false)
    }

    /// In a kernel that fixes its group's size `L`, a region whose batches are known when
    /// the code is generated: a trimmed region whose range `[lo, hi)` of `local_id(0)` is
    /// known then (`known.rs`: the reduction's `if lid < 32u32`, `if lid < 16u32` after
    /// its loop is unrolled) and exactly its `if`'s condition, or (`r` `None`) a region
    /// without a range, whose batches are the group's. Its batches with a lane in
    /// `[lo, min(hi, L))` (at most [`KNOWN_BATCHES`]) run one after another with no batch
    /// loop and no range test, a trimmed region's each under the constant mask of its
    /// lanes in the range (none where all eight are), with its lane 0's `local_id(0)`
    /// known (a contiguous access at `local_id(0)` plus a constant then addresses its
    /// element by a constant index, see [`V::lane0_to_eax`]); accesses proven when the
    /// code is generated ([`V::prove_known_range`]) are not checked, others are as in the
    /// general code (a region without a range only with every such access proven). False
    /// (no code) for other regions. The same batches in the same order
    /// as the general code runs, each running a trimmed region's branch in exactly the
    /// lanes whose condition holds (the condition is pure: evaluating it has no effect and
    /// cannot fault). The names a batch binds (the region's `let`s of `global_id(0)` and
    /// `local_id(0)`, in registers) are bound again by the next; the last batch's stay.
    pub(super) fn known_batches(&mut self, stmts: &[Stmt], r: Option<&LidRange>) -> R<bool> {
        let Some(l) = self.regions().group_size else { return Ok(false) };
        let at = |b: &(Expr, u64)| match b.0.as_imm() {
            Some(Imm::Int(_, bits)) => Some((*bits as u32 as u64).saturating_add(b.1)),
            _ => None,
        };
        let (lo, hi, then) = match (r, stmts) {
            (None, _) => (0, l, None),
            (Some(r), [s]) => {
                let StmtNode::If { then, otherwise: None, .. } = s.node() else {
                    return Ok(false);
                };
                let lo = match r.lo.as_ref() {
                    Some(b) => at(b),
                    None => Some(0),
                };
                let (Some(lo), Some(hi)) = (lo, r.hi.as_ref().and_then(at)) else {
                    return Ok(false);
                };
                if !r.exact {
                    return Ok(false);
                }
                (lo, hi, Some(then.stmts()))
            }
            _ => return Ok(false),
        };
        let hi = hi.min(l);
        if lo >= hi || (hi - 1) / 8 - lo / 8 >= KNOWN_BATCHES {
            return Ok(false);
        }
        let (first, last) = (lo / 8, (hi - 1) / 8);
        let proof = self.prove_known_range(stmts, hi);
        // (A region without a range and without a proof now keeps the general code, with
        // its proof tested when the code runs.)
        if then.is_none() && proof.is_none() {
            return Ok(false);
        }
        let outer = std::mem::replace(&mut self.proven, proof);
        let group_gid = qword_ptr(r12 + rt::OFF_GLOBAL_ID);
        let body = match then {
            Some(then) => Body::Masked(then, lo, hi),
            None => Body::All(stmts),
        };
        let mut done = None;
        if let Some((e, add, prefix, then)) =
            then.is_none().then(|| self.group_guard(stmts)).flatten()
        {
            let done = done.insert(self.a.create_label());
            // `global_id(0) < e` (or `<=`) in every lane of the group when in its last: one
            // compare for the group, then every batch runs the branch under no mask.
            let mut general = self.a.create_label();
            self.uniform_to_eax(e)?;
            if add > 0 {
                self.a.add(rax, add)?;
            }
            self.a.mov(r11, group_gid)?;
            self.a.add(r11, (8 * (last + 1)) as i32)?;
            self.a.cmp(r11, rax)?;
            self.a.ja(general)?;
            let mark = self.lets.len();
            self.batch_copies(first, last, &Body::Guarded(prefix, then))?;
            // (The general copy binds the same names, in the same registers.)
            self.lets.truncate(mark);
            self.a.jmp(*done)?;
            self.bind(&mut general)?;
        }
        self.batch_copies(first, last, &body)?;
        // (No label where nothing jumps: values stored stay forwarded, `forward.rs`.)
        if let Some(done) = done.as_mut() {
            self.bind(done)?;
        }
        self.proven = outer;
        self.batch_mark = None;
        // Group code reports nothing per lane, but the budget's stub reads rbx.
        self.a.mov(rbx, group_gid)?;
        Ok(true)
    }

    /// For a region without a range run as known batches: `(e, add, prefix, then)` if its
    /// statements are `let`s (which cannot fault: [`V::twins_ok`] lets only those of
    /// `global_id(0)` and `local_id(0)` through) and local arrays' declarations, and last an
    /// `if` whose condition is `global_id(0) < e + add` (`<` gives 0, `<=` 1, either side,
    /// `global_id(0)` or a name the prefix gives it) for a `u32` value `e` of
    /// general-purpose-register arithmetic naming nothing the prefix declares; with the
    /// `if`'s branch.
    fn group_guard<'s>(
        &self,
        stmts: &'s [Stmt],
    ) -> Option<(&'s Expr, i32, &'s [Stmt], &'s [Stmt])> {
        let (last, prefix) = stmts.split_last()?;
        let mut declared = std::collections::HashSet::new();
        let mut gids = std::collections::HashSet::new();
        for s in prefix {
            match s.node() {
                StmtNode::Let { var, value } => {
                    declared.insert(var.name().to_string());
                    if matches!(value.node(), ExprNode::Builtin { kind: Builtin::GlobalId, dim: 0 })
                    {
                        gids.insert(var.name().to_string());
                    }
                }
                // (Local arrays are the kernel's, laid out once: no code.)
                StmtNode::Alloc { var, .. }
                    if matches!(var.ty(), Type::Ptr(kiln_ir::AddrSpace::Local, _)) => {}
                _ => return None,
            }
        }
        let StmtNode::If { cond, then, .. } = last.node() else { return None };
        let ExprNode::Binary { op, a, b } = cond.node() else { return None };
        let gid = |x: &Expr| match x.node() {
            ExprNode::Builtin { kind: Builtin::GlobalId, dim: 0 } => true,
            ExprNode::Var(v) => gids.contains(v.name()),
            _ => false,
        };
        let (op, e) = match (gid(a), gid(b), op) {
            (true, false, op) => (*op, b),
            (false, true, BinOp::Gt) => (BinOp::Lt, a),
            (false, true, BinOp::Ge) => (BinOp::Le, a),
            _ => return None,
        };
        if e.ty() != Type::U32
            || super::proven::names_any(e, &declared)
            || self.kind(e) != Kind::Uniform
            || !self.gpr_ok(e)
        {
            return None;
        }
        let add = match op {
            BinOp::Lt => 0,
            BinOp::Le => 1,
            _ => return None,
        };
        Some((e, add, prefix, then.stmts()))
    }

    /// The batches `first..=last` of a group, one after another (see
    /// [`V::known_batches`]), each running `body` with its lane 0's `local_id(0)` known.
    fn batch_copies(&mut self, first: u64, last: u64, body: &Body) -> R<()> {
        let group_gid = qword_ptr(r12 + rt::OFF_GLOBAL_ID);
        // A trimmed region's branch that reads no lane of `global_id(0)`/`local_id(0)`
        // (only contiguous accesses at a known `local_id(0)`) keeps neither register up to
        // date: later regions set both again.
        let lanes = match *body {
            Body::Masked(then, ..) => self.reads_id_lanes(then),
            Body::All(stmts) => self.reads_id_lanes(stmts),
            Body::Guarded(prefix, then) => self.reads_id_lanes(&[prefix, then].concat()),
        };
        self.a.mov(rbx, group_gid)?;
        if first > 0 {
            self.a.add(rbx, (8 * first) as i32)?;
        }
        // (No batch end in `[rbp - 56]`: only batch loops and proofs tested when the code
        // runs read it, and these batches have neither.)
        if lanes {
            self.a.vmovd(xmm15, ebx)?;
            self.a.vpbroadcastd(ymm15, xmm15)?;
            self.a.vpaddd(ymm15, ymm15, ymmword_ptr(r15))?;
        }
        self.regions.as_mut().expect("region mode").ids_stale = !lanes;
        for b in first..=last {
            if !lanes {
                if b > first {
                    self.a.add(rbx, 8)?;
                }
                // (Every lane is alive at a batch's start.)
                self.batch_mark = Some(self.fault_mark());
            } else {
                if b > first {
                    self.batch_end(&[], &[], false)?;
                }
                self.batch_start(&[])?;
            }
            let mark = self.lets.len();
            self.regions.as_mut().expect("region mode").lid0 = Some(8 * b as u32);
            let since = self.fault_mark();
            match *body {
                Body::Masked(then, lo, hi) => {
                    let lanes = (0..8u64)
                        .filter(|k| (lo..hi).contains(&(8 * b + k)))
                        .fold(0u8, |m, k| m | 1 << k);
                    self.const_mask_block(lanes, then)?;
                }
                Body::All(stmts) => self.stmts_in_scope(stmts)?,
                Body::Guarded(prefix, then) => {
                    self.stmts_in_scope(prefix)?;
                    self.block(then)?;
                }
            }
            self.fault_test_since(since)?;
            self.regions.as_mut().expect("region mode").lid0 = None;
            if b < last {
                self.lets.truncate(mark);
            } else if self.lets[mark..].iter().any(|b| !matches!(b.loc, Loc::Reg(_))) {
                // (Nothing saves a batch's values: later regions could not read them.)
                return no("internal: an unrolled region binds a name outside a register");
            }
        }
        self.regions.as_mut().expect("region mode").ids_stale = false;
        Ok(())
    }

    /// In a batch of [`V::known_batches`], lane 0's `local_id(0)` if `ymm{r}` holds the
    /// lanes' `local_id(0)`.
    pub(super) fn known_lid0(&self, r: usize) -> Option<u32> {
        (r == super::LID).then(|| self.regions.as_ref().and_then(|g| g.lid0)).flatten()
    }
}

/// The most batches a region unrolled when the code is generated runs
/// ([`V::known_batches`]): its code is that many copies of the branch.
const KNOWN_BATCHES: u64 = 8;

impl V {
    /// False if `stmts` access memory only at `l` or `l + c` (`l` a name in `local_id(0)`'s
    /// register, `c` a constant) with the region's proof certain for the access (so
    /// [`V::lane0_operand`] addresses it at a constant displacement in a batch of known
    /// `local_id(0)`), call nothing, and name no other lane of `global_id(0)` or
    /// `local_id(0)` (neither the builtins nor names in their registers).
    pub(super) fn reads_id_lanes(&self, stmts: &[Stmt]) -> bool {
        let reg_names = |r: usize| -> HashSet<String> {
            self.lets.iter().filter(|b| b.loc == Loc::Reg(r)).map(|b| b.name.clone()).collect()
        };
        let mut scan = LaneScan {
            lids: reg_names(super::LID),
            gids: reg_names(super::GID),
            accesses: Vec::new(),
            uniform: Vec::new(),
            other: false,
        };
        stmts.iter().for_each(|s| scan.visit_stmt(s));
        scan.other
            || scan
                .accesses
                .iter()
                .any(|(buf, addr)| !self.buf(buf).is_some_and(|t| self.proven_certain_at(*addr, t)))
            || scan.uniform.iter().any(|i| !self.lane_free(i))
    }

    /// True if `e` is computed without any lane: constants, scalar parameters, ids and
    /// sizes other than `global_id(0)`/`local_id(0)`, batch-uniform names bound now, and
    /// arithmetic of those (an access at such an index is the uniform one of `mem.rs`,
    /// whose check reports a fault from the lane numbers and `rbx`, not the ids' lanes).
    fn lane_free(&self, e: &Expr) -> bool {
        match e.node() {
            ExprNode::Imm(_) => true,
            ExprNode::Builtin { kind: Builtin::GlobalId | Builtin::LocalId, dim: 0 } => false,
            ExprNode::Builtin { .. } => true,
            ExprNode::Var(v) => match self.find(v.name()) {
                Some(b) => b.kind == Kind::Uniform,
                None => self.param(v).is_some(),
            },
            ExprNode::Unary { a, .. } | ExprNode::Cast { a, .. } => self.lane_free(a),
            ExprNode::Binary { a, b, .. } => self.lane_free(a) && self.lane_free(b),
            _ => false,
        }
    }
}

/// The accesses of a batch's statements at `local_id(0)` plus a constant, and whether
/// anything else there reads a lane of `global_id(0)` or `local_id(0)` or may (another
/// access, a call): see [`V::reads_id_lanes`].
struct LaneScan {
    lids: HashSet<String>,
    gids: HashSet<String>,
    /// Buffer and index address of each access at `l` or `l + c`.
    accesses: Vec<(kiln_ir::Var, usize)>,
    /// The indices of other accesses, which read no lane if uniform ([`V::lane_free`]).
    uniform: Vec<Expr>,
    other: bool,
}

impl LaneScan {
    /// `index` is `l` or `l + c`: recorded; exactly `global_id(0)` into a 32-bit global
    /// buffer: addressed from the batch's first id (`rbx`, which the batches keep), no
    /// lane read; otherwise something else.
    fn access(&mut self, buf: &kiln_ir::Var, index: &Expr) {
        let gid = match index.node() {
            ExprNode::Var(v) => self.gids.contains(v.name()),
            ExprNode::Builtin { kind: Builtin::GlobalId, dim: 0 } => true,
            _ => false,
        };
        let word = matches!(
            buf.ty(),
            Type::Ptr(
                kiln_ir::AddrSpace::Global,
                kiln_ir::Scalar::F32 | kiln_ir::Scalar::I32 | kiln_ir::Scalar::U32
            )
        );
        if gid && word {
            return;
        }
        let lid = |e: &Expr| matches!(e.node(), ExprNode::Var(v) if self.lids.contains(v.name()));
        let ok = lid(index)
            || matches!(index.node(), ExprNode::Binary { op: BinOp::Add, a, b }
                if (lid(a) && b.as_imm().is_some()) || (lid(b) && a.as_imm().is_some()));
        if ok {
            self.accesses.push((buf.clone(), index as *const Expr as usize));
        } else {
            self.uniform.push(index.clone());
        }
    }
}

impl Visitor for LaneScan {
    fn visit_expr(&mut self, e: &Expr) {
        match e.node() {
            ExprNode::Load { buf, index } => self.access(buf, index),
            ExprNode::Var(v) if self.lids.contains(v.name()) || self.gids.contains(v.name()) => {
                self.other = true
            }
            ExprNode::Builtin { kind: Builtin::GlobalId | Builtin::LocalId, dim: 0 } => {
                self.other = true
            }
            _ => walk_expr(self, e),
        }
    }

    fn visit_stmt(&mut self, s: &Stmt) {
        let id = |e: &Expr| {
            matches!(
                e.node(),
                ExprNode::Builtin { kind: Builtin::GlobalId | Builtin::LocalId, dim: 0 }
            )
        };
        match s.node() {
            StmtNode::Store { buf, index, value } => {
                self.access(buf, index);
                self.visit_expr(value);
            }
            // A name for an id: the id's register, bound with no code that reads it.
            StmtNode::Let { var, value } if id(value) => {
                let ExprNode::Builtin { kind, .. } = value.node() else { return };
                let names =
                    if *kind == Builtin::GlobalId { &mut self.gids } else { &mut self.lids };
                names.insert(var.name().to_string());
            }
            StmtNode::Call { .. } => self.other = true,
            _ => walk_stmt(self, s),
        }
    }
}

/// What each batch of [`V::batch_copies`] runs.
enum Body<'s> {
    /// A trimmed region's branch, under the constant mask of the lanes in `[lo, hi)`.
    Masked(&'s [Stmt], u64, u64),
    /// A region's statements.
    All(&'s [Stmt]),
    /// A region's `let`s, then its guarded branch under no mask (see [`V::group_guard`]).
    Guarded(&'s [Stmt], &'s [Stmt]),
}
