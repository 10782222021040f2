//! Data-dependent branches of the vector code (`if` under divergence): the lane masks of
//! both sides, the unmasked copies for batches whose lanes all take one side, and the
//! scalar tests that prove a whole batch takes the branch (`global_id(0)` and `local_id(0)`
//! bounds, hoisted ranges).
//!
//! A branch's then-mask goes to a free `let` register while the masked bodies run, when
//! the bodies' own names still fit above it ([`branch_regs`]), the else side reusing the
//! register: every blend of a `var` and every masked access reads it there, where from the
//! frame each would reload it (a chain of five `if`s of a bit-reversal kernel reloaded its
//! masks for ten blends; a Collatz loop's branch put its masks through the frame on the
//! loop's chain). A branch with no `else` computes no else-mask: nothing after it reads one.

use iced_x86::code_asm::*;
use kiln_ir::{BinOp, Expr, ExprNode, Stmt, StmtNode, Type};

use super::{Kind, R, V, XMM, YMM};
/// The largest branch bodies (in statements, nested ones included) that also get an
/// unmasked copy for batches whose lanes all take them.
const FULL_BATCH_STMTS: usize = 64;

/// The statements of `stmts`, nested ones included.
fn stmt_count(stmts: &[Stmt]) -> usize {
    stmts
        .iter()
        .map(|s| {
            1 + match s.node() {
                StmtNode::If { then, otherwise, .. } => {
                    stmt_count(then.stmts())
                        + otherwise.as_ref().map_or(0, |o| stmt_count(o.stmts()))
                }
                StmtNode::For { body, .. } | StmtNode::While { body, .. } => {
                    stmt_count(body.stmts())
                }
                StmtNode::Block(v) => stmt_count(v),
                _ => 0,
            }
        })
        .sum()
}

/// How many `let` registers the bodies of a branch may hold at once (a bound: names, 64-bit
/// ones twice, loop masks and counters, nested branches' masks), so that a branch's mask
/// takes a register only where it displaces none of its bodies' names.
fn branch_regs(then: &[Stmt], otherwise: Option<&[Stmt]>) -> usize {
    block_regs(then).max(otherwise.map_or(0, block_regs))
}

/// The most `let` registers live at once in `stmts` (see [`branch_regs`]).
fn block_regs(stmts: &[Stmt]) -> usize {
    let mut names = 0;
    let mut peak = 0;
    for s in stmts {
        let (held, inner) = match s.node() {
            StmtNode::Let { var, .. } | StmtNode::Decl { var, .. } => {
                (if super::wide64::is_64(var.ty()) { 2 } else { 1 }, 0)
            }
            StmtNode::If { then, otherwise, .. } => {
                (0, 1 + branch_regs(then.stmts(), otherwise.as_ref().map(|o| o.stmts())))
            }
            StmtNode::For { body, .. } => (0, 2 + block_regs(body.stmts())),
            StmtNode::While { body, .. } => (0, 1 + block_regs(body.stmts())),
            StmtNode::Block(v) => (0, block_regs(v)),
            _ => (0, 0),
        };
        names += held;
        peak = peak.max(names + inner);
    }
    peak
}

impl V {
    /// `if cond { then } else { otherwise }`: an ordinary branch where every lane agrees,
    /// else both sides under their lane masks (see the module's comment).
    pub(super) fn if_stmt(
        &mut self,
        cond: &Expr,
        then: &[Stmt],
        otherwise: Option<&[Stmt]>,
    ) -> R<()> {
        if self.uniform_cond(cond) {
            // Every lane agrees: an ordinary branch on lane 0.
            let mut els = self.a.create_label();
            let mut end = self.a.create_label();
            self.uniform_jump_unless(cond, els)?;
            self.block(then)?;
            self.a.jmp(end)?;
            self.bind(&mut els)?;
            if let Some(o) = otherwise {
                self.block(o)?;
            }
            return self.bind(&mut end);
        }
        let outer = self.mask;
        let fast = outer.is_none()
            && stmt_count(then) + otherwise.map_or(0, stmt_count) <= FULL_BATCH_STMTS;
        if let Some(taken) = self.known_lid_cond(cond).filter(|_| fast) {
            return self.decided_if(cond, taken, then, otherwise);
        }
        // (A known batch the bound splits never has every lane on one side: no copies.)
        let fast = fast && !self.known_split(cond);
        // (Accesses a guard `local_id(0) >= e` keeps in bounds: `guarded.rs`.)
        let (guard, guarded_len) = (self.guard(cond, then), self.guarded.len());
        let (mut fast_then, mut fast_else) = (self.a.create_label(), self.a.create_label());
        let addr = cond as *const Expr as usize;
        let range = self.hoisted_ranges.iter().find(|h| h.cond == addr).cloned().filter(|_| fast);
        // A range that also proves accesses is the only way into the unmasked copy of `then`
        // (which runs them unchecked): a batch all of whose lanes take the branch outside it
        // runs the masked code.
        let proven = range
            .as_ref()
            .filter(|r| !r.proven.is_empty() && self.proven.is_none())
            .map(|r| super::proven::Proven::certain(r.proven.clone()));
        if let Some(super::hoist::Range { slot, lower, .. }) = range {
            // The batch's lanes all take the branch when lane 0's id is in the range fixed
            // for the call (`hoist.rs`): two compares, no lane mask (and every lane alive).
            let mut general = self.a.create_label();
            if self.may_fault && !self.fresh() {
                self.a.cmp(dword_ptr(r15 + self.fault_lane), 8)?;
                self.a.jne(general)?;
            }
            if lower {
                self.a.cmp(rbx, qword_ptr(r15 + slot))?;
                self.a.jl(general)?;
            }
            self.a.cmp(rbx, qword_ptr(r15 + slot + 8))?;
            self.a.jle(fast_then)?;
            self.bind(&mut general)?;
        } else if let Some((e, add)) = self.gid_bound(cond).filter(|_| fast) {
            // `global_id(0) < e` (or `<=`) holds in every lane of the batch when it holds in
            // its last: a scalar compare, no lane mask (and every lane alive).
            let mut general = self.a.create_label();
            if self.may_fault && !self.fresh() {
                self.a.cmp(dword_ptr(r15 + self.fault_lane), 8)?;
                self.a.jne(general)?;
            }
            self.uniform_to_eax(e)?;
            if add > 0 {
                self.a.add(rax, add)?;
            }
            self.a.lea(r11, qword_ptr(rbx + 8))?;
            self.a.cmp(r11, rax)?;
            self.a.jbe(fast_then)?;
            self.bind(&mut general)?;
        } else if let Some((e, op)) = self.lid_bound(cond).filter(|_| fast) {
            // In region loops, `local_id(0) >= e` (or `>`, `<`, `<=`) holds in every lane
            // of the batch when it holds in the lane at the batch's edge: lane 0's id from
            // its register, a scalar compare, no lane mask (and every lane alive). The ids
            // of a batch are lane 0's plus 0..7, below the group's size: nothing wraps.
            let mut general = self.a.create_label();
            if self.may_fault && !self.fresh() {
                self.a.cmp(dword_ptr(r15 + self.fault_lane), 8)?;
                self.a.jne(general)?;
            }
            // (A 32-bit result, as lane 0's id: the upper halves are zero. A constant below
            // 2^31 is the compare's immediate.)
            let imm = match e.as_imm() {
                Some(kiln_ir::Imm::Int(_, bits)) => i32::try_from(*bits as u32).ok(),
                _ => None,
            };
            if imm.is_none() {
                self.uniform_to_eax(e)?;
            }
            self.a.vmovd(r11d, XMM[super::LID])?;
            if matches!(op, BinOp::Lt | BinOp::Le) {
                // Lane 7's id (lane 0's plus 7) below `e` (`<`), or at most `e` (`<=`).
                self.a.add(r11, if op == BinOp::Lt { 8 } else { 7 })?;
            }
            match imm {
                Some(c) => self.a.cmp(r11, c)?,
                None => self.a.cmp(r11, rax)?,
            }
            match op {
                BinOp::Ge => self.a.jae(fast_then)?,
                BinOp::Gt => self.a.ja(fast_then)?,
                _ => self.a.jbe(fast_then)?,
            }
            self.bind(&mut general)?;
        }
        self.cond_top(cond, 0)?;
        // (Where the copies below start: after the condition, from no other code.)
        let fresh = self.fresh();
        // then-mask = active & cond, else-mask = active & !cond (only with an else: nothing
        // after the branch reads it).
        // (An outer mask in a register, every lane alive: read where it is.)
        let outer_reg = self.mask.and_then(|m| self.vhome(m));
        let act = match outer_reg {
            Some(x) if !self.may_fault || self.fresh() => YMM[x],
            _ => {
                self.active(2)?;
                ymm2
            }
        };
        // The then-mask in a free `let` register while the branch's masked code runs, when
        // the bodies' own names still fit above it, and the else-mask in the next one when
        // that fits too (else it waits in its frame slot and takes the then-mask's register):
        // every blend and masked access of the bodies reads it, and through the frame a
        // branch in a loop puts a store and reloads on the loop's chain (`mask_home`).
        let (regs, homes) = (self.next_reg, self.vhomes.len());
        let need = branch_regs(then, otherwise);
        let home =
            Some(self.next_reg).filter(|&r| self.let_reg_free(r) && r + 1 + need <= self.reg_end);
        let ehome = home.map(|r| r + 1).filter(|&r| {
            otherwise.is_some() && self.let_reg_free(r) && r + 1 + need <= self.reg_end
        });
        let e = otherwise.map(|_| self.slot());
        if let Some(e) = e {
            match ehome {
                Some(r) => {
                    self.a.vpandn(YMM[r], ymm0, act)?;
                    self.vhomes.push((e, r));
                }
                None => {
                    self.a.vpandn(ymm1, ymm0, act)?;
                    self.a.vmovups(ymmword_ptr(r15 + e), ymm1)?;
                }
            }
        }
        let em = ehome.map_or(ymm1, |r| YMM[r]);
        let t = self.slot();
        let tm = match home {
            Some(r) => {
                self.a.vpand(YMM[r], ymm0, act)?;
                self.vhomes.push((t, r));
                YMM[r]
            }
            None => {
                self.a.vpand(ymm0, ymm0, act)?;
                self.a.vmovups(ymmword_ptr(r15 + t), ymm0)?;
                ymm0
            }
        };
        self.next_reg += usize::from(home.is_some()) + usize::from(ehome.is_some());
        // Full batches unmasked: where no mask is in force, a batch whose lanes all take
        // the same side runs a copy of that side under no mask (plain loads and stores, no
        // blends). That mask would be every lane (alive ones), so the copy is exact. Only for
        // small bodies: copies nest, once per divergent `if` level.
        if fast {
            if proven.is_none() {
                self.a.vmovmskps(eax, tm)?;
                self.a.cmp(eax, 0xff)?;
                self.a.je(fast_then)?;
            }
            if otherwise.is_some() {
                self.a.vmovmskps(eax, em)?;
                self.a.cmp(eax, 0xff)?;
                self.a.je(fast_else)?;
            }
        }
        self.dctl += 1;
        let mut skip = self.a.create_label();
        self.a.vptest(tm, tm)?;
        self.a.je(skip)?;
        self.mask = Some(t);
        self.guarded.extend(guard.iter().map(|&(a, t)| (a, t, false)));
        self.block(then)?;
        self.guarded.truncate(guarded_len);
        self.bind(&mut skip)?;
        if let (Some(o), Some(e)) = (otherwise, e) {
            let mut skip = self.a.create_label();
            // (The then-mask's register, free again, holds the else-mask.)
            // (An else-mask in the frame takes the then-mask's register, free again.)
            let em = match (ehome, home) {
                (Some(r), _) => YMM[r],
                (None, Some(r)) => {
                    self.vhomes.push((e, r));
                    self.a.vmovups(YMM[r], ymmword_ptr(r15 + e))?;
                    YMM[r]
                }
                (None, None) => {
                    self.a.vmovups(ymm1, ymmword_ptr(r15 + e))?;
                    ymm1
                }
            };
            self.a.vptest(em, em)?;
            self.a.je(skip)?;
            self.mask = Some(e);
            self.block(o)?;
            self.bind(&mut skip)?;
        }
        self.mask = outer;
        self.dctl -= 1;
        self.vhomes.truncate(homes);
        self.next_reg = regs;
        if fast {
            // (The masked code is generated first, so that what it refuses — a barrier
            // under this branch — is refused for the kernel.)
            let mut done = self.a.create_label();
            self.a.jmp(done)?;
            let masked = self.fresh();
            self.bind(&mut fast_then)?;
            self.fresh_again(fresh);
            let had = proven.is_some();
            if had {
                self.proven = proven;
            }
            self.guarded.extend(guard.iter().map(|&(a, t)| (a, t, true)));
            self.block(then)?;
            self.guarded.truncate(guarded_len);
            if had {
                self.proven = None;
            }
            let mut after = self.fresh();
            if let Some(o) = otherwise {
                self.a.jmp(done)?;
                self.bind(&mut fast_else)?;
                self.fresh_again(fresh);
                self.block(o)?;
                after &= self.fresh();
            }
            self.bind(&mut done)?;
            // After the `if`, lanes are certainly alive only if no path could fault.
            self.fresh_again(after && masked);
        }
        Ok(())
    }

    /// In a batch whose lane 0's `local_id(0)` is known when the code is generated
    /// (`unrolled.rs`, [`V::known_batches`]), with every lane alive: whether condition `c`,
    /// `local_id(0)` bounded by a constant ([`V::lid_bound`]), holds in all eight lanes
    /// (true) or in none (false); `None` where the lanes differ or nothing is known.
    fn known_lid_cond(&self, c: &Expr) -> Option<bool> {
        if self.may_fault && !self.fresh() {
            return None;
        }
        let (first, last) = self.known_lid_ends(c)?;
        (first == last).then_some(first)
    }

    /// True if condition `c` bounds `local_id(0)` by a constant ([`V::lid_bound`]) in a
    /// batch of known lane 0's `local_id(0)` and holds in some of its lanes but not all.
    fn known_split(&self, c: &Expr) -> bool {
        self.known_lid_ends(c).is_some_and(|(first, last)| first != last)
    }

    /// Whether condition `c`, `local_id(0)` bounded by a constant ([`V::lid_bound`]),
    /// holds in the first and in the last lane of a batch whose lane 0's `local_id(0)` is
    /// known; `None` for other conditions and batches. (The batch's ids are lane 0's plus
    /// 0..7, below the group's size: no wrap. The bound is monotone in the id, so the
    /// lanes agree when both ends do.)
    fn known_lid_ends(&self, c: &Expr) -> Option<(bool, bool)> {
        let (e, op) = self.lid_bound(c)?;
        let lid0 = self.known_lid0(super::LID)?;
        let kiln_ir::Imm::Int(_, bits) = e.as_imm()? else { return None };
        let holds = |l: u32| lid_holds(op, l, *bits as u32);
        Some((holds(lid0), holds(lid0 + 7)))
    }

    /// A branch decided for the batch when the code is generated ([`V::known_lid_cond`]):
    /// the side every lane takes, under no mask (the condition is pure: not evaluating it
    /// changes nothing), as the unmasked copy a batch runs when its lanes all take it.
    fn decided_if(
        &mut self,
        cond: &Expr,
        taken: bool,
        then: &[Stmt],
        otherwise: Option<&[Stmt]>,
    ) -> R<()> {
        if !taken {
            return otherwise.map_or(Ok(()), |o| self.block(o));
        }
        let (guard, guarded_len) = (self.guard(cond, then), self.guarded.len());
        self.guarded.extend(guard.iter().map(|&(a, t)| (a, t, true)));
        self.block(then)?;
        self.guarded.truncate(guarded_len);
        Ok(())
    }

    /// `(e, k)` if condition `c` is `global_id(0) < e + k` for a `u32` value `e` computed
    /// in general-purpose registers (`<` gives k = 0, `<=` k = 1, either side).
    fn gid_bound<'c>(&self, c: &'c Expr) -> Option<(&'c Expr, i32)> {
        let ExprNode::Binary { op, a, b } = c.node() else { return None };
        let (op, e) = match (self.kind(a), self.kind(b)) {
            (Kind::Gid0, Kind::Uniform) => (*op, b),
            (Kind::Uniform, Kind::Gid0) => match op {
                BinOp::Gt => (BinOp::Lt, a),
                BinOp::Ge => (BinOp::Le, a),
                _ => return None,
            },
            _ => return None,
        };
        if e.ty() != Type::U32 || !self.gpr_ok(e) {
            return None;
        }
        match op {
            BinOp::Lt => Some((e, 0)),
            BinOp::Le => Some((e, 1)),
            _ => None,
        }
    }
}

/// Whether `local_id(0)` `l` satisfies `l op e` (`op` one of [`V::lid_bound`]'s).
fn lid_holds(op: BinOp, l: u32, e: u32) -> bool {
    match op {
        BinOp::Ge => l >= e,
        BinOp::Gt => l > e,
        BinOp::Lt => l < e,
        _ => l <= e,
    }
}
