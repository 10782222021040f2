//! Statements on the lanes: `let`s and `var`s bound to registers or frame slots, blocks,
//! and the dispatch of each statement kind to its generator.

use iced_x86::code_asm::*;
use kiln_ir::{Stmt, StmtNode, Type, Var};

use super::*;

impl V {
    /// Binds a `let` of `value` to a location (a free `let` register, else a slot) and
    /// computes it there; a `let` of `global_id(0)` is the lane-id register.
    pub(super) fn bind_let(
        &mut self,
        var: &Var,
        value: &kiln_ir::Expr,
        kind: Kind,
        hoisting: bool,
    ) -> R<(Loc, Option<i32>)> {
        let name = var.name().to_string();
        if kind == Kind::Gid0 {
            self.lets.push(Bound::new(name, Loc::Reg(GID), kind));
            return Ok((Loc::Reg(GID), None));
        }
        if !value_type(var.ty()) {
            return no(format!("`{}` has type {}", var.name(), var.ty()));
        }
        if self.regions.is_some()
            && matches!(
                value.node(),
                kiln_ir::ExprNode::Builtin { kind: kiln_ir::Builtin::LocalId, dim: 0 }
            )
            && !self.lets.iter().any(|b| b.loc == Loc::Reg(LID))
        {
            // Region loops: one `let` of `local_id(0)` lives in a register that every
            // region's batch recomputes (see `region.rs`), never in a save frame.
            if !self.regions().ids_stale {
                self.lid_lanes(LID)?;
            }
            self.lets.push(Bound::new(name, Loc::Reg(LID), kind));
            return Ok((Loc::Reg(LID), None));
        }
        if wide64::is_64(var.ty()) {
            return Ok((self.bind_let64(var, value, kind)?, None));
        }
        // A copy of a divergent `let` (`let p_0: f32 = vl_0`: `-O` splitting vector-typed
        // values) names the same place: that `let` never changes, and this one's scope ends
        // within its, so reading either reads the same value. (Not `var`s, which change;
        // not hoisted `let`s, which outlive what they copy.)
        if let (kiln_ir::ExprNode::Var(src), Kind::Div, false) = (value.node(), kind, hoisting) {
            let same = self.find(src.name()).filter(|b| {
                b.decl.is_none()
                    && b.kind == Kind::Div
                    && b.dword.is_none()
                    && matches!(b.loc, Loc::Reg(_) | Loc::Slot(_))
                    && src.ty() == var.ty()
            });
            if let Some(b) = same {
                let (loc, stride, clamped) = (b.loc, b.stride, b.clamped);
                self.lets.push(Bound { stride, clamped, ..Bound::new(name, loc, kind) });
                return Ok((loc, None));
            }
        }
        let mut dword = None;
        if kind == Kind::Uniform && scalar::int_type(var.ty()) && self.gpr_ok(value) {
            // Uniform index arithmetic stays scalar, in a dword; it is broadcast too when
            // that is cheap: into a free let register, or once per call (hoisted).
            self.gpr(value)?;
            let off = self.slot();
            if !hoisting {
                // (A hoisted `let` lives for the whole call: it keeps its slot.)
                self.take_home(off);
            }
            self.put_dword(off)?;
            dword = Some(off);
            if !self.let_reg_free(self.next_reg) && !hoisting {
                self.lets.push(Bound { dword, ..Bound::new(name, Loc::Scalar(off), kind) });
                return Ok((Loc::Scalar(off), dword));
            }
            if self.let_reg_free(self.next_reg) {
                // Broadcast straight into its `let` register (no copy through `ymm0`).
                let r = self.next_reg;
                self.next_reg += 1;
                self.a.vmovd(XMM[r], eax)?;
                self.a.vpbroadcastd(YMM[r], XMM[r])?;
                self.bind_at(name, value, kind, dword, Loc::Reg(r));
                return Ok((Loc::Reg(r), dword));
            }
            self.a.vmovd(xmm0, eax)?;
            self.a.vpbroadcastd(ymm0, xmm0)?;
        } else {
            self.expr_top(value, 0)?;
        }
        let loc = self.bind_ymm0(name, value, kind, dword)?;
        Ok((loc, dword))
    }

    /// Binds `name` (a `let` of `value`, of kind `kind`) to the lanes in `ymm0`: in the
    /// next free `let` register, else a fresh frame slot; `dword` is its scalar copy, if any.
    pub(super) fn bind_ymm0(
        &mut self,
        name: String,
        value: &kiln_ir::Expr,
        kind: Kind,
        dword: Option<i32>,
    ) -> R<Loc> {
        let loc = if self.let_reg_free(self.next_reg) {
            self.next_reg += 1;
            self.a.vmovaps(YMM[self.next_reg - 1], ymm0)?;
            Loc::Reg(self.next_reg - 1)
        } else {
            let off = self.slot();
            self.a.vmovups(ymmword_ptr(r15 + off), ymm0)?;
            Loc::Slot(off)
        };
        self.bind_at(name, value, kind, dword, loc);
        Ok(loc)
    }

    /// Binds `name` (a `let` of `value`, of kind `kind`) to `loc`, which holds its lanes;
    /// `dword` is its scalar copy, if any.
    fn bind_at(
        &mut self,
        name: String,
        value: &kiln_ir::Expr,
        kind: Kind,
        dword: Option<i32>,
        loc: Loc,
    ) {
        let (stride, clamped) = match kind {
            Kind::Div => (self.any_stride(value), self.clamped(value)),
            _ => (None, false),
        };
        self.lets.push(Bound { dword, stride, clamped, ..Bound::new(name, loc, kind) });
    }

    /// Generates a block under the current mask.
    ///
    /// A kernel with barriers keeps its names in frame slots (they must outlive a
    /// barrier, and region code saves a region's names per batch), but a block with no
    /// barrier in it that declares a `var` (an accumulator) ends before any barrier, so
    /// its names, and those of the blocks inside it, take the `let` registers
    /// `ymm8..ymm13` while it lasts (not `ymm14`, which region code keeps for
    /// `local_id(0)`). Region code forwards local-array values in those registers
    /// (`forward.rs`): it stops forwarding for the block, and forgets what it held.
    pub(super) fn block(&mut self, stmts: &[Stmt]) -> R<()> {
        let (mark, regs, homes) = (self.lets.len(), self.next_reg, self.homes.len());
        let end = self.reg_end;
        // Only where names live in the frame: elsewhere `next_reg` at GID means every `let`
        // register holds a live name.
        if self.frame_names
            && self.next_reg >= GID
            && stmts.iter().any(|s| matches!(s.node(), StmtNode::Decl { .. }))
            && stmts.iter().all(|s| crate::x86::gen::count_barriers(s) == 0)
        {
            self.fwd_clear();
            self.next_reg = LET_REGS.start;
            self.reg_end = LID;
        }
        let shares = self.plan_shares(stmts);
        let mut i = 0;
        while i < stmts.len() {
            let s = &stmts[i];
            if let Some(&(_, loc, dword)) = self.hoisted.iter().find(|h| h.0 == s.addr()) {
                // Computed before the loop; in scope from here on.
                if let StmtNode::Let { var, .. } = s.node() {
                    let name = var.name().to_string();
                    let kind = Kind::Uniform;
                    let loc = self.row_let_home(s.addr(), loc)?;
                    self.lets.push(Bound { dword, ..Bound::new(name, loc, kind) });
                }
                i += 1;
                continue;
            }
            // Interleaved loads and stores (`loadgroup.rs`, `storegroup.rs`) together.
            if let Some(n) = self.load_group(&stmts[i..])? {
                i += n;
                continue;
            }
            if let Some(n) = self.store_group(&stmts[i..], &stmts[..i])? {
                i += n;
                continue;
            }
            if let Some(n) = self.loading_group(stmts, i)? {
                i += n;
                continue;
            }
            self.stmt(s)?;
            i += 1;
        }
        self.end_shares(shares);
        self.lets.truncate(mark);
        self.next_reg = regs;
        self.reg_end = end;
        self.release_homes(homes);
        Ok(())
    }

    pub(super) fn stmt(&mut self, s: &Stmt) -> R<()> {
        match s.node() {
            // An index of a blocked loop's rows, read from the chunk's block instead.
            StmtNode::Let { var, .. } if self.skipped_let(var) => {}
            StmtNode::Let { var, value } if var.ty().is_vector() => match value.node() {
                kiln_ir::ExprNode::VecLoad { buf, index, lanes } => {
                    self.vector_check(buf, index, *lanes, "vector load")?
                }
                _ => return no(format!("`{}` has type {}", var.name(), var.ty())),
            },
            StmtNode::Let { var, value } if self.memo_let(s.addr(), var, value)? => {}
            StmtNode::Let { var, value } => {
                // Pure, and its loads masked: computed in every lane.
                let kind = self.kind(value);
                self.bind_let(var, value, kind, false)?;
            }
            StmtNode::Decl { var, init } if wide64::is_64(var.ty()) => {
                let kind = self.var_kind(var, init)?;
                self.decl64(var, init, kind)?;
            }
            StmtNode::Decl { var, init } => {
                if !value_type(var.ty()) {
                    return no(format!("`{}` has type {}", var.name(), var.ty()));
                }
                let kind = self.var_kind(var, init)?;
                let loc = if kind == Kind::Uniform && scalar::int_type(var.ty()) {
                    // Every assignment is uniform too (see uniform.rs): a scalar variable.
                    let off = self.slot();
                    self.uniform_to_eax(init)?;
                    self.take_home(off);
                    self.put_dword(off)?;
                    Loc::Scalar(off)
                } else if self.let_reg_free(self.next_reg) {
                    // In a free `let` register while its scope lasts, as a `let` (loop-carried
                    // values, accumulators): assignments are moves or blends there.
                    self.expr_top(init, 0)?;
                    self.next_reg += 1;
                    self.a.vmovaps(YMM[self.next_reg - 1], ymm0)?;
                    Loc::Reg(self.next_reg - 1)
                } else {
                    let off = self.slot();
                    self.expr_top(init, 0)?;
                    self.a.vmovups(ymmword_ptr(r15 + off), ymm0)?;
                    Loc::Slot(off)
                };
                let name = var.name().to_string();
                let dword = match loc {
                    Loc::Scalar(off) => Some(off),
                    _ => None,
                };
                self.lets.push(Bound {
                    decl: Some(self.dctl),
                    dword,
                    ..Bound::new(name, loc, kind)
                });
            }
            StmtNode::Assign { var, value } => self.assign(var, value)?,
            StmtNode::Store { value, .. } if self.capture.iter().any(|c| c.0 == s.addr()) => {
                self.capture_value(s.addr(), value)?
            }
            StmtNode::Store { buf, index, value } => self.store(buf, index, value)?,
            StmtNode::If { cond, then, otherwise } => {
                self.if_stmt(cond, then.stmts(), otherwise.as_ref().map(|o| o.stmts()))?
            }
            StmtNode::While { cond, body } => {
                let cache = self.open_byte_cache(s)?;
                self.while_loop(cond, body.stmts())?;
                self.close_byte_cache(cache);
            }
            StmtNode::For { var, lo, hi, step, body } => {
                let cache = self.open_byte_cache(s)?;
                self.for_loop(s, var, lo, hi, step, body.stmts())?;
                self.close_byte_cache(cache);
            }
            StmtNode::Block(v) => self.block(v)?,
            StmtNode::Call { func, result, args } => {
                // (Atomics may write local arrays: no value is forwarded past a call.)
                self.fwd_clear();
                match func.kind() {
                    kiln_ir::FuncKind::Barrier(_) => self.barrier()?,
                    // Execution is in order per batch: memory is always consistent.
                    kiln_ir::FuncKind::Fence(_) => {}
                    kiln_ir::FuncKind::Atomic(op) => self.atomic(op, result.as_ref(), args)?,
                    kiln_ir::FuncKind::Matrix(_) => return no("matrix operations"),
                }
            }
            StmtNode::Alloc { var, count } => {
                if let Type::Ptr(kiln_ir::AddrSpace::Private, _) = var.ty() {
                    self.alloc_private(var, *count)?;
                } else if self.buf(var).is_none() {
                    return no(format!("array `{}` ({})", var.name(), var.ty()));
                }
            }
            StmtNode::VecStore { buf, index, value } => {
                self.vector_check(buf, index, value.ty().lanes(), "vector store")?
            }
        }
        Ok(())
    }

    /// The kind of a new `var`: uniform if the analysis says so (checked against its
    /// initial value).
    pub(super) fn var_kind(&self, var: &Var, init: &kiln_ir::Expr) -> R<Kind> {
        if self.div_vars.contains(var.name()) {
            return Ok(Kind::Div);
        }
        if self.kind(init) != Kind::Uniform {
            return no(format!("internal: `{}` is not uniform", var.name()));
        }
        Ok(Kind::Uniform)
    }
}
