//! Control flow of the vector code: loops by divergence (branches are `branch.rs`),
//! assignments under masks, barriers, the loop back-edge budget and the out-of-line stubs
//! (fault reports, limit checks).

use iced_x86::code_asm::*;
use kiln_ir::{Expr, ExprNode, Scalar, Stmt, Type, Var};

use super::{lane_type, no, Bound, Kind, Loc, Stub, R, V, XMM, YMM};
use crate::x86::gen::Site;
use crate::x86::rt;

impl V {
    /// A barrier: the batch stops here (reporting a fault first) and the next call for it
    /// resumes after it. Only where every lane of the group gets here together: not under
    /// divergent control.
    pub(super) fn barrier(&mut self) -> R<()> {
        if self.dctl > 0 {
            return no("a barrier under a branch or loop that differs between work-items");
        }
        self.barriers += 1;
        let k = self.barriers;
        // Where the batch stops, also on a fault (the lanes before the faulting one got
        // here: the driver compares that with the other batches first).
        self.a.mov(dword_ptr(r15 + self.resume), k as i32)?;
        if self.may_fault {
            self.a.cmp(dword_ptr(r15 + self.fault_lane), 8)?;
            self.a.jne(self.fault_exit)?;
        }
        self.a.mov(eax, k)?;
        self.a.jmp(self.next_batch)?;
        let Some(&(mut l)) = self.resumes.get(k as usize - 1) else {
            return no("internal: more barriers than counted");
        };
        self.bind(&mut l)
    }

    /// The hand-over between the batches of a call with barriers (one call runs a round
    /// of a whole row): the stopped batch's stop (`rax`) must be the round's (`[rbp-48]`,
    /// set by the first batch when the driver passed none), else the call returns
    /// [`super::STOP_DIVERGE`] with the batch's first `global_id(0)` in the context, so
    /// that no later batch runs (the interpreter reports the first divergent work-item
    /// before running on). Otherwise the next batch's frame follows this one's and the
    /// call goes on, until the span's end: then it returns the round's stop, or, when the
    /// driver says the call runs the whole group (`LOOP_SLOT`), goes on with the group's
    /// next row, and after its last row starts the next round at the first batch until the
    /// group has finished. Within the call the base
    /// registers stay loaded: a batch that has started goes on at `lanes` (which sets its
    /// `global_id(0)` lanes) or, as the next batch of a round, with those lanes advanced
    /// by eight (the frame slot `eight`), at `resumed`; one that has not goes through
    /// `dispatch`.
    pub(super) fn next_batch_code(
        &mut self,
        dispatch: CodeLabel,
        lanes: CodeLabel,
        resumed: CodeLabel,
        eight: i32,
    ) -> R<()> {
        let stride = self.next;
        let mut next = self.next_batch;
        let mut other = self.a.create_label();
        let mut advance = self.a.create_label();
        let mut done = self.a.create_label();
        let mut diverge = self.a.create_label();
        let mut whole = self.a.create_label();
        let round = qword_ptr(rbp - 48);
        self.bind(&mut next)?;
        self.a.cmp(round, rax)?;
        self.a.jne(other)?;
        self.bind(&mut advance)?;
        let end = super::END_SLOT;
        self.a.mov(rax, qword_ptr(r15 + end))?;
        self.a.add(rbx, 8)?;
        self.a.cmp(rbx, rax)?;
        self.a.jae(done)?;
        self.a.add(r15, stride)?;
        self.a.mov(qword_ptr(r15 + end), rax)?;
        self.a.cmp(dword_ptr(r15 + super::RESUME_SLOT), 0)?;
        self.a.je(dispatch)?;
        self.a.vpaddd(ymm15, ymm15, ymmword_ptr(r15 + eight))?;
        self.a.jmp(resumed)?;
        // Not the round's stop: the round's first batch (none set yet), or a divergence.
        self.bind(&mut other)?;
        self.a.cmp(round, -1)?;
        self.a.jne(diverge)?;
        self.a.mov(round, rax)?;
        self.a.jmp(advance)?;
        self.bind(&mut done)?;
        self.a.mov(r10, qword_ptr(rbp - 56))?;
        self.a.cmp(qword_ptr(r10 + super::LOOP_SLOT), 0)?;
        self.a.jne(whole)?;
        self.a.mov(rax, round)?;
        self.a.jmp(self.ret)?;
        // The call runs the whole group: its next row in this round (`grouprows.rs`), or, after
        // the last, the next round from the group's first batch (the call's
        // `global_id(0)`) and frame, where every batch of the group waits at the round's
        // barrier.
        self.bind(&mut whole)?;
        self.next_row_of_round(dispatch)?;
        self.a.mov(rax, round)?;
        self.a.test(rax, rax)?;
        self.a.je(self.ret)?;
        self.a.mov(r15, qword_ptr(rbp - 56))?;
        self.a.mov(rbx, qword_ptr(r12 + rt::OFF_GLOBAL_ID))?;
        self.a.mov(round, -1)?;
        self.a.jmp(lanes)?;
        self.bind(&mut diverge)?;
        self.a.mov(qword_ptr(r12 + rt::OFF_GLOBAL_ID), rbx)?;
        self.a.mov(rax, super::STOP_DIVERGE)?;
        self.a.jmp(self.ret)?;
        Ok(())
    }

    /// A loop's back-edge to `top`, counted against the launch's budget: one decrement and
    /// a conditional jump (the limit stub resumes at `top` when the helper lets it).
    pub(super) fn back_edge_to(&mut self, top: CodeLabel) -> R<()> {
        let slow = self.a.create_label();
        self.a.dec(qword_ptr(r12 + rt::OFF_BUDGET))?;
        self.a.jne(top)?;
        self.a.jmp(slow)?;
        self.stubs.push((slow, Stub::Limit { back: top }));
        Ok(())
    }

    /// Counts one loop back-edge against the launch's budget (the helper applies the
    /// limits when it runs out).
    pub(super) fn back_edge(&mut self) -> R<()> {
        let slow = self.a.create_label();
        let mut back = self.a.create_label();
        self.a.dec(qword_ptr(r12 + rt::OFF_BUDGET))?;
        self.a.je(slow)?;
        self.bind(&mut back)?;
        self.stubs.push((slow, Stub::Limit { back }));
        Ok(())
    }

    pub(super) fn while_loop(&mut self, cond: &Expr, body: &[Stmt]) -> R<()> {
        self.batch_mark = None;
        let mut top = self.a.create_label();
        let mut exit = self.a.create_label();
        if self.uniform_cond(cond) {
            let kill = self.kills(body) || super::expr::has_checked_load(cond, &self.gid0);
            if !kill {
                self.exit_if_none_active(exit)?;
            }
            self.bind(&mut top)?;
            self.uniform_jump_unless(cond, exit)?;
            if kill {
                self.exit_if_none_active(exit)?;
            }
            self.block(body)?;
            self.back_edge_to(top)?;
            return self.bind(&mut exit);
        }
        // The loop mask: lanes still iterating (and alive), narrowed by the condition; in
        // a free `let` register while the loop runs (the body's masked code reads it).
        let lm = self.slot();
        let regs = self.next_reg;
        let homes = self.vhomes.len();
        self.active(0)?;
        self.mask_home(lm)?;
        let outer = self.mask;
        self.mask = Some(lm);
        self.dctl += 1;
        self.bind(&mut top)?;
        self.cond_top(cond, 0)?;
        match self.vhome(lm) {
            Some(x) => self.a.vpand(ymm0, ymm0, YMM[x])?,
            None => self.a.vpand(ymm0, ymm0, ymmword_ptr(r15 + lm))?,
        }
        if self.may_fault {
            self.a.vpand(ymm0, ymm0, ymmword_ptr(r15 + self.alive))?;
        }
        self.put_mask(lm, 0)?;
        self.a.vptest(ymm0, ymm0)?;
        self.a.je(exit)?;
        self.block(body)?;
        self.back_edge_to(top)?;
        self.bind(&mut exit)?;
        self.mask = outer;
        self.dctl -= 1;
        self.vhomes.truncate(homes);
        self.next_reg = regs;
        Ok(())
    }

    /// Gives lane-mask slot `lm` a free `let` register, if one is left, and sets it from
    /// `ymm0` (a divergent loop's mask at the loop's entry). The mask goes before the
    /// body's names: every blend and masked access of the body reads it, and from memory
    /// its store at the loop's top and the reloads put a store-to-load forwarding on the
    /// chain from one iteration's values through the condition to the next (a Mandelbrot
    /// loop ran 1.26x faster on one thread with its mask in a register and its `xt`
    /// spilled than the other way round).
    fn mask_home(&mut self, lm: i32) -> R<()> {
        if self.let_reg_free(self.next_reg) {
            self.vhomes.push((lm, self.next_reg));
            self.next_reg += 1;
        }
        self.put_mask(lm, 0)
    }

    /// `ymm{r}` into lane-mask slot `lm` (its register, if it has one).
    fn put_mask(&mut self, lm: i32, r: usize) -> R<()> {
        match self.vhome(lm) {
            Some(x) => self.a.vmovaps(YMM[x], YMM[r])?,
            None => self.a.vmovups(ymmword_ptr(r15 + lm), YMM[r])?,
        }
        Ok(())
    }

    /// True if running `body` can end lanes (a fault): only then does a uniform loop test
    /// its lanes on every iteration, else once before it (no lane's state changes).
    fn kills(&self, body: &[Stmt]) -> bool {
        self.may_fault
            && (super::expr::needs_alive(body, &self.gid0)
                || !self.privs.is_empty()
                || body.iter().any(super::private::has_private))
    }

    /// Jumps to `exit` if no lane is active (all that were have faulted), so that a
    /// uniform loop stops with its lanes.
    pub(super) fn exit_if_none_active(&mut self, exit: CodeLabel) -> R<()> {
        if self.may_fault {
            self.active(1)?;
            self.a.vptest(ymm1, ymm1)?;
            self.a.je(exit)?;
        }
        Ok(())
    }

    /// A `for` with batch-uniform bounds: a 64-bit counter in the frame, values and
    /// comparisons as the interpreter's (no wrapping), the step checked first.
    pub(super) fn for_loop(
        &mut self,
        s: &Stmt,
        var: &Var,
        lo: &Expr,
        hi: &Expr,
        step: &Expr,
        body: &[Stmt],
    ) -> R<()> {
        // (Code at a loop's top also runs after its body, which may fault.)
        self.batch_mark = None;
        if !lane_type(var.ty()) || var.ty() == Type::F32 {
            return no(format!("`for {}` over {}", var.name(), var.ty()));
        }
        if [lo, hi, step].iter().any(|e| self.kind(e) != Kind::Uniform) {
            return self.divergent_for(var, lo, hi, step, body);
        }
        let signed = var.ty().scalar().is_some_and(Scalar::is_signed);
        let (cnt, end, inc) = (self.slot(), self.slot(), self.slot());
        let mut exit = self.a.create_label();
        let mut top = self.a.create_label();
        let kill = self.kills(body);
        // A short loop with constant bounds: a copy of its body per iteration (`short.rs`),
        // before the ordinary loop's set-up (its constant step is positive: no check).
        if let Some(copies) = self.short_trip(s, var, step, body) {
            if !kill {
                self.exit_if_none_active(exit)?;
            }
            self.short_for(&copies, kill, exit)?;
        }
        for (e, off) in [(lo, cnt), (hi, end), (step, inc)] {
            self.uniform_to_eax(e)?;
            if signed {
                self.a.movsxd(rax, eax)?;
            }
            self.a.mov(qword_ptr(r15 + off), rax)?;
        }
        // rax holds the step: a step that is not positive is an error of every active lane
        // (the lowest is reported), and the loop is skipped.
        let mut ok = self.a.create_label();
        self.a.test(rax, rax)?;
        if signed {
            self.a.jg(ok)?;
        } else {
            self.a.jne(ok)?;
        }
        // The fault report reads the step from the lanes of ymm0.
        self.a.vmovd(xmm0, eax)?;
        self.a.vpbroadcastd(ymm0, xmm0)?;
        self.active(1)?;
        self.a.vptest(ymm1, ymm1)?;
        self.a.je(exit)?;
        self.a.vmovaps(ymm2, ymm1)?;
        let site = Site::ForStep { var: var.name().to_string(), signed };
        self.fault_stub(0, 2, 1, rt::ERR_FOR_STEP, site, signed, Some(exit))?;
        self.bind(&mut ok)?;
        if !kill {
            self.exit_if_none_active(exit)?;
        }
        // Eight iterations at a time where the body's accesses walk rows (`blocked.rs`).
        let resume = self.blocked_for(var, step, body, cnt, end, signed, top)?;
        // Else the counter in a free GPR (the chunks read and advance it in its slot).
        let homes = self.homes.len();
        let reg = match resume {
            None => self.take_home(cnt),
            Some(_) => None,
        };
        if let Some(r) = reg {
            self.a.mov(r, qword_ptr(r15 + cnt))?;
        }
        // Bounds and steps known when the code is generated are immediates.
        let imm = |e: &Expr| match e.node() {
            ExprNode::Imm(i) => {
                let bits = rt::bits_of(kiln_ir::eval::cast(i.scalar(), *i)) as u32;
                let v = if signed { bits as i32 as i64 } else { bits as i64 };
                i32::try_from(v).ok()
            }
            _ => None,
        };
        self.bind(&mut top)?;
        if let Some((chunk, flag)) = resume {
            self.blocked_resume(chunk, flag)?;
        }
        match (reg, imm(hi)) {
            (Some(r), Some(h)) => self.a.cmp(r, h)?,
            (Some(r), None) => self.a.cmp(r, qword_ptr(r15 + end))?,
            (None, _) => {
                self.a.mov(rax, qword_ptr(r15 + cnt))?;
                self.a.cmp(rax, qword_ptr(r15 + end))?;
            }
        }
        if signed {
            self.a.jge(exit)?;
        } else {
            self.a.jae(exit)?;
        }
        if kill {
            self.exit_if_none_active(exit)?;
        }
        // The counter's low dword is the variable's value (in range: below `hi`), read
        // by scalar code and broadcast only where it meets lanes.
        let name = var.name().to_string();
        let (loc, dword) = (Loc::Scalar(cnt), Some(cnt));
        self.lets.push(Bound { dword, ..Bound::new(name, loc, Kind::Uniform) });
        self.block(body)?;
        self.lets.pop();
        match (reg, imm(step)) {
            (Some(r), Some(i)) => self.a.add(r, i)?,
            (Some(r), None) => self.a.add(r, qword_ptr(r15 + inc))?,
            (None, _) => {
                self.a.mov(rax, qword_ptr(r15 + inc))?;
                self.a.add(qword_ptr(r15 + cnt), rax)?;
            }
        }
        self.back_edge_to(top)?;
        self.bind(&mut exit)?;
        self.release_homes(homes);
        Ok(())
    }

    /// A `for` whose bounds or step differ between lanes: a loop mask, as a divergent
    /// `while`, over a counter per lane. The interpreter's counter never wraps (it stops
    /// below `hi`): a lane whose next value would wrap past 2^32 (u32) or 2^31 (i32) leaves
    /// the loop instead. A step that is not positive is an error of the lowest active lane
    /// with one, after `lo`, `hi` and `step` are computed, as in the interpreter.
    fn divergent_for(
        &mut self,
        var: &Var,
        lo: &Expr,
        hi: &Expr,
        step: &Expr,
        body: &[Stmt],
    ) -> R<()> {
        let signed = var.ty().scalar().is_some_and(Scalar::is_signed);
        let (cnt, end, inc, lm) = (self.slot(), self.slot(), self.slot(), self.slot());
        for (e, off) in [(lo, cnt), (hi, end), (step, inc)] {
            self.expr_top(e, 0)?;
            self.a.vmovups(ymmword_ptr(r15 + off), ymm0)?;
        }
        // Bad steps among the active lanes (ymm0 holds the steps).
        self.active(1)?;
        self.a.vpxor(ymm2, ymm2, ymm2)?;
        if signed {
            self.a.vpcmpgtd(ymm2, ymm0, ymm2)?;
            self.a.vpandn(ymm2, ymm2, ymm1)?;
        } else {
            self.a.vpcmpeqd(ymm2, ymm0, ymm2)?;
            self.a.vpand(ymm2, ymm2, ymm1)?;
        }
        let site = Site::ForStep { var: var.name().to_string(), signed };
        self.fault_stub(0, 2, 1, rt::ERR_FOR_STEP, site, signed, None)?;
        // The mask, then the lanes' counter, in free `let` registers while the loop runs.
        let (regs, homes) = (self.next_reg, self.vhomes.len());
        self.a.vmovaps(ymm0, ymm1)?;
        self.mask_home(lm)?;
        let creg = self.let_reg_free(self.next_reg).then_some(self.next_reg);
        if let Some(c) = creg {
            self.next_reg += 1;
            self.a.vmovups(YMM[c], ymmword_ptr(r15 + cnt))?;
        }
        let counter = |v: &mut V, r: usize| match creg {
            Some(c) => v.a.vmovaps(YMM[r], YMM[c]),
            None => v.a.vmovups(YMM[r], ymmword_ptr(r15 + cnt)),
        };
        let outer = self.mask;
        self.mask = Some(lm);
        self.dctl += 1;
        let mut top = self.a.create_label();
        let exit = self.a.create_label();
        // The lanes done: `k >= end` is `max(k, end) == k` (unsigned or signed max), which
        // reads the counter where it is and `end` as the memory operand; `vpandn` folds
        // its negation into the mask.
        self.bind(&mut top)?;
        let k = match creg {
            Some(c) => YMM[c],
            None => {
                self.a.vmovups(ymm0, ymmword_ptr(r15 + cnt))?;
                ymm0
            }
        };
        if signed {
            self.a.vpmaxsd(ymm1, k, ymmword_ptr(r15 + end))?;
        } else {
            self.a.vpmaxud(ymm1, k, ymmword_ptr(r15 + end))?;
        }
        self.a.vpcmpeqd(ymm1, ymm1, k)?;
        match self.vhome(lm) {
            Some(x) => self.a.vpandn(ymm0, ymm1, YMM[x])?,
            None => self.a.vpandn(ymm0, ymm1, ymmword_ptr(r15 + lm))?,
        }
        if self.may_fault {
            self.a.vpand(ymm0, ymm0, ymmword_ptr(r15 + self.alive))?;
        }
        self.put_mask(lm, 0)?;
        self.a.vptest(ymm0, ymm0)?;
        self.a.je(exit)?;
        let name = var.name().to_string();
        let loc = creg.map_or(Loc::Slot(cnt), Loc::Reg);
        self.lets.push(Bound::new(name, loc, Kind::Div));
        self.block(body)?;
        self.lets.pop();
        // Next values; lanes whose counter would wrap leave the loop. With a step of 1
        // none can: a lane still in the loop passed `k < end` at the top (`k` is immutable
        // in the body), so `k + 1 <= end` fits; a lane out of it stays out (the top ands
        // the mask), whatever its counter becomes.
        if unit_step(step) {
            match creg {
                Some(c) => self.a.vpaddd(YMM[c], YMM[c], ymmword_ptr(r15 + inc))?,
                None => {
                    self.a.vmovups(ymm0, ymmword_ptr(r15 + cnt))?;
                    self.a.vpaddd(ymm0, ymm0, ymmword_ptr(r15 + inc))?;
                    self.a.vmovups(ymmword_ptr(r15 + cnt), ymm0)?;
                }
            }
            self.back_edge_to(top)?;
            return self.end_divergent_for(exit, outer, regs, homes);
        }
        counter(self, 0)?;
        self.a.vpaddd(ymm1, ymm0, ymmword_ptr(r15 + inc))?;
        match creg {
            Some(c) => self.a.vmovaps(YMM[c], ymm1)?,
            None => self.a.vmovups(ymmword_ptr(r15 + cnt), ymm1)?,
        }
        if !signed {
            // Unsigned order is signed order with the sign bits flipped.
            let sign = self.imm_slot(0x8000_0000);
            self.a.vpxor(ymm0, ymm0, ymmword_ptr(r15 + sign))?;
            self.a.vpxor(ymm1, ymm1, ymmword_ptr(r15 + sign))?;
        }
        self.a.vpcmpgtd(ymm0, ymm0, ymm1)?;
        match self.vhome(lm) {
            Some(x) => self.a.vpandn(ymm0, ymm0, YMM[x])?,
            None => self.a.vpandn(ymm0, ymm0, ymmword_ptr(r15 + lm))?,
        }
        self.put_mask(lm, 0)?;
        self.back_edge_to(top)?;
        self.end_divergent_for(exit, outer, regs, homes)
    }

    /// A divergent `for`'s exit: the outer mask, depth and registers back.
    fn end_divergent_for(
        &mut self,
        mut exit: CodeLabel,
        outer: Option<i32>,
        regs: usize,
        homes: usize,
    ) -> R<()> {
        self.bind(&mut exit)?;
        self.mask = outer;
        self.dctl -= 1;
        self.vhomes.truncate(homes);
        self.next_reg = regs;
        Ok(())
    }

    /// Emits the out-of-line stubs. A fault also sets each table's length minus 8 (the
    /// whole-batch bounds test's, `mem.rs`) to -1, so that every later such test in the
    /// call (which ends with the faulting batch) takes the checked, masked access, where
    /// the lanes alive are respected.
    pub(super) fn stubs(&mut self) -> R<()> {
        let last8: Vec<i32> = self.consts.iter().filter(|c| c.0 .1 == 5).map(|c| c.1).collect();
        for (mut label, stub) in std::mem::take(&mut self.stubs) {
            self.bind(&mut label)?;
            match stub {
                Stub::Fault { idx, f, act, code, site, signed, back } => {
                    let a = &mut self.a;
                    a.vmovups(ymmword_ptr(r15 + self.tmp_i), YMM[idx])?;
                    a.vmovmskps(eax, YMM[f])?;
                    a.bsf(eax, eax)?;
                    a.mov(dword_ptr(r15 + self.fault_lane), eax)?;
                    a.mov(qword_ptr(r12 + rt::OFF_ERR_CODE), code as i32)?;
                    a.mov(qword_ptr(r12 + rt::OFF_ERR_SITE), site as i32)?;
                    if signed {
                        a.movsxd(r10, dword_ptr(r15 + rax * 4 + self.tmp_i))?;
                    } else {
                        a.mov(r10d, dword_ptr(r15 + rax * 4 + self.tmp_i))?;
                    }
                    a.mov(qword_ptr(r12 + rt::OFF_ERR_VAL), r10)?;
                    // Alive: the lanes before the faulting one.
                    a.vmovd(XMM[f], eax)?;
                    a.vpbroadcastd(YMM[f], XMM[f])?;
                    a.vpcmpgtd(YMM[f], YMM[f], ymmword_ptr(r15))?;
                    a.vpand(YMM[f], YMM[f], ymmword_ptr(r15 + self.alive))?;
                    a.vmovups(ymmword_ptr(r15 + self.alive), YMM[f])?;
                    a.vpand(YMM[act], YMM[act], YMM[f])?;
                    for &slot in &last8 {
                        a.mov(qword_ptr(r15 + slot), -1)?;
                    }
                    a.jmp(back)?;
                }
                Stub::Limit { back } => {
                    let a = &mut self.a;
                    for (i, &y) in YMM[8..].iter().enumerate() {
                        a.vmovups(ymmword_ptr(r15 + (self.save + 32 * i as i32)), y)?;
                    }
                    for r in [rcx, rdx, rsi, rdi, r8, r9, r10, r11] {
                        a.push(r)?;
                    }
                    // Eight pushes after the prologue's six: 16-byte aligned after this.
                    a.sub(rsp, 8)?;
                    a.vzeroupper()?;
                    a.mov(rdi, r12)?;
                    a.call(qword_ptr(r12 + (rt::OFF_HELPERS + 8 * rt::HELPER_LIMIT as i32)))?;
                    a.add(rsp, 8)?;
                    for r in [r11, r10, r9, r8, rdi, rsi, rdx, rcx] {
                        a.pop(r)?;
                    }
                    for (i, &y) in YMM[8..].iter().enumerate() {
                        a.vmovups(y, ymmword_ptr(r15 + (self.save + 32 * i as i32)))?;
                    }
                    a.test(rax, rax)?;
                    a.je(back)?;
                    a.mov(qword_ptr(r12 + rt::OFF_GLOBAL_ID), rbx)?;
                    a.mov(rax, rt::STOP_ERROR)?;
                    a.jmp(self.ret)?;
                }
            }
        }
        Ok(())
    }

    /// `var = value`: a move (or under a mask a blend) into the variable's place.
    pub(super) fn assign(&mut self, var: &Var, value: &Expr) -> R<()> {
        let Some(b) = self.find(var.name()) else {
            return no(format!("`{}` is not a variable here", var.name()));
        };
        let (loc, kind, decl) = (b.loc, b.kind, b.decl);
        if decl.is_none() {
            return no(format!("`{}` is not a variable here", var.name()));
        }
        if kind == Kind::Uniform && (decl != Some(self.dctl) || self.kind(value) != Kind::Uniform) {
            return no(format!("internal: `{}` is not uniform", var.name()));
        }
        if super::wide64::is_64(var.ty()) {
            return self.assign64(loc, kind, value);
        }
        let off = match loc {
            Loc::Slot(off) => off,
            Loc::Scalar(off) => {
                if let Some(r) = self.home(off) {
                    if self.update_in_place(var.name(), r, value)? {
                        return Ok(());
                    }
                }
                self.uniform_to_eax(value)?;
                return self.put_dword(off);
            }
            Loc::Reg(r) => {
                self.expr_top(value, 0)?;
                match self.mask {
                    Some(m) if kind != Kind::Uniform => {
                        let x = self.vhome(m).map_or(ymm1, |x| YMM[x]);
                        if self.vhome(m).is_none() {
                            self.a.vmovups(ymm1, ymmword_ptr(r15 + m))?;
                        }
                        self.a.vblendvps(YMM[r], YMM[r], ymm0, x)?;
                    }
                    _ => self.a.vmovaps(YMM[r], ymm0)?,
                }
                return Ok(());
            }
        };
        self.expr_top(value, 0)?;
        match self.mask {
            // A uniform variable's lanes all take the value (see uniform.rs).
            Some(m) if kind != Kind::Uniform => {
                self.mask_to(m, 1)?;
                self.a.vmovups(ymm2, ymmword_ptr(r15 + off))?;
                self.a.vblendvps(ymm2, ymm2, ymm0, ymm1)?;
                self.a.vmovups(ymmword_ptr(r15 + off), ymm2)?;
            }
            _ => self.a.vmovups(ymmword_ptr(r15 + off), ymm0)?,
        }
        Ok(())
    }
}

/// True if `step` is the constant 1 (of any integer type): a `for` counter that steps by
/// one from below `hi` cannot wrap.
fn unit_step(step: &Expr) -> bool {
    matches!(step.node(), ExprNode::Imm(kiln_ir::Imm::Int(_, 1)))
}
