//! Lane 0's element of a contiguous access whose every lane is known in bounds (a region's
//! proof, `proven.rs`; a guard's, `guarded.rs`): its address from lane 0's index alone,
//! without the lanes' indices, at a constant displacement where that index is known when
//! the code is generated.

use iced_x86::code_asm::*;
use kiln_ir::{Expr, Imm};

use super::{R, V, XMM};

impl V {
    /// For a contiguous access of table `t` at `index` that the region's proof covers, in
    /// code that runs only when it holds: the memory operand of lane 0's element, at a
    /// constant displacement where lane 0's index is known when the code is generated (in
    /// a batch of known `local_id(0)`, at `local_id(0)` plus a constant: no instruction),
    /// else from `rax` ([`V::lane0_to_eax`]); `None` (no code) for other indices.
    /// (The operand has no size: the caller gives it the access's.)
    pub(super) fn lane0_operand(&mut self, index: &Expr, t: u32) -> R<Option<AsmMemoryOperand>> {
        if let Some(k) = self.const_disp(index, t) {
            let base = self.base(t)?;
            return Ok(Some(base + k));
        }
        if !self.proven_certain(index, t) {
            return Ok(None);
        }
        // `local_id(0) - c` (`guarded.rs`): lane 0's id from its register, `c` in the
        // displacement (proven: lane 0's index, the id minus `c`, is at least 0).
        if let kiln_ir::ExprNode::Binary { op: kiln_ir::BinOp::Sub, a, b } = index.node() {
            if let (Some(r), Some(Imm::Int(_, c))) = (self.let_reg(a), b.as_imm()) {
                let c = u64::from(*c as u32) * 4;
                if self.known_lid0(r).is_none() && c <= i32::MAX as u64 {
                    self.a.vmovd(eax, XMM[r])?;
                    let base = self.base(t)?;
                    return Ok(Some(base + rax * 4 - c as i32));
                }
            }
        }
        if !self.lane0_to_eax(index, t)? {
            return Ok(None);
        }
        let base = self.base(t)?;
        Ok(Some(base + rax * 4))
    }

    /// The byte displacement from table `t`'s base at which [`V::lane0_operand`] addresses
    /// a contiguous access at `index`, when it is a constant (see `forward.rs`).
    pub(super) fn const_disp(&self, index: &Expr, t: u32) -> Option<i32> {
        if !self.proven_certain(index, t) {
            return None;
        }
        // (Proven: every lane's index is below 2^31; the displacement must fit 32 bits.)
        let k = self.known_lane0(index).filter(|k| u64::from(*k) * 4 <= i32::MAX as u64)?;
        Some(k as i32 * 4)
    }

    /// The lanes the current control mask holds, when they are known as the code is
    /// generated (bit k: lane k; see [`V::const_mask_block`]).
    pub(super) fn known_lanes(&self) -> Option<u8> {
        self.const_mask.filter(|&(slot, _)| self.mask == Some(slot)).map(|(_, lanes)| lanes)
    }

    /// The `let` register holding `e`, if `e` is a name bound in one.
    pub(super) fn let_reg(&self, e: &Expr) -> Option<usize> {
        match e.node() {
            kiln_ir::ExprNode::Var(x) => match self.find(x.name()).map(|b| b.loc) {
                Some(super::Loc::Reg(r)) => Some(r),
                _ => None,
            },
            _ => None,
        }
    }

    /// Lane 0's value of `index` when it is known as the code is generated: in a batch of
    /// known `local_id(0)`, a register holding it, or that plus a constant (wrapping, as
    /// the lanes add).
    pub(super) fn known_lane0(&self, index: &Expr) -> Option<u32> {
        let known = |e: &Expr| self.let_reg(e).and_then(|r| self.known_lid0(r));
        match index.node() {
            kiln_ir::ExprNode::Binary { op: kiln_ir::BinOp::Add, a, b } => {
                match (known(a), known(b), a.as_imm(), b.as_imm()) {
                    (Some(k), _, _, Some(kiln_ir::Imm::Int(_, c)))
                    | (_, Some(k), Some(kiln_ir::Imm::Int(_, c)), _) => {
                        Some(k.wrapping_add(*c as u32))
                    }
                    _ => None,
                }
            }
            kiln_ir::ExprNode::Binary { op: kiln_ir::BinOp::Sub, a, b } => {
                match (known(a), b.as_imm()) {
                    (Some(k), Some(kiln_ir::Imm::Int(_, c))) => Some(k.wrapping_sub(*c as u32)),
                    _ => None,
                }
            }
            _ => known(index),
        }
    }

    /// For a contiguous access of table `t` at `index` that the region's proof covers, in
    /// code that runs only when it holds: lane 0's index into `rax` (zero-extended) from
    /// the `let` register holding `index`, or holding `a` for `index` `a + e` with `e`
    /// uniform scalar arithmetic, without computing the lanes' indices; false (no code)
    /// for other indices. The proof puts every lane's index below 2^31.
    pub(super) fn lane0_to_eax(&mut self, index: &Expr, t: u32) -> R<bool> {
        if !self.proven_certain(index, t) {
            return Ok(false);
        }
        if let Some(k) = self.known_lane0(index) {
            self.a.mov(eax, k)?;
            return Ok(true);
        }
        if let Some(r) = self.let_reg(index) {
            self.lane0_to(eax, r)?;
            return Ok(true);
        }
        if let kiln_ir::ExprNode::Binary { op: kiln_ir::BinOp::Sub, a, b } = index.node() {
            // A register minus a constant (`local_id(0) - c`, `guarded.rs`; a stencil's
            // `c - 1`), wrapping as the lanes subtract. (Another subtrahend would take
            // more instructions than the lanes' `vpsubd`.)
            return match (self.let_reg(a), b.as_imm()) {
                (Some(r), Some(Imm::Int(_, c))) => {
                    self.lane0_to(eax, r)?;
                    self.a.sub(eax, *c as u32 as i32)?;
                    Ok(true)
                }
                _ => Ok(false),
            };
        }
        self.lane0_sum(index)
    }

    /// For a contiguous load at `index` under no control mask that no proof covers: lane
    /// 0's index into `rax` (zero-extended) by scalar code where `index` is `u + g`
    /// (`mad(x, y, g)`, `x * y + g`), `g` a `let` register (the lanes consecutive, as the
    /// access is contiguous) and `u` batch-uniform scalar arithmetic whose loads need no
    /// check (embed's `table[ids[r] * dim + d]`, `ids[r]` proven in bounds for the row by
    /// its guard's range, `rowwise.rs`): a scalar load and `imul` instead of the lanes'
    /// broadcast, 10-cycle `vpmulld`, `vpaddd` and an extraction. False (no code) for
    /// other indices. The value is the lanes' (32-bit wrapping arithmetic, the load's
    /// element read where the lanes read it), and nothing in it can fault.
    pub(super) fn lane0_scalar(&mut self, index: &Expr) -> R<bool> {
        self.gpr_loads = true;
        let done = self.lane0_sum(index);
        self.gpr_loads = false;
        done
    }

    /// True if lane 0 of `let` register `r` is `ebx`: `global_id(0)`'s register, whose
    /// lanes the batch loop builds from `rbx`, the batch's first id, and advances with it
    /// (outside regions, whose batch loops run the ids their own way; and, to keep barrier
    /// kernels' resumed batches as they were, only before the kernel's first barrier).
    fn lane0_in_rbx(&self, r: usize) -> bool {
        r == super::GID && self.regions.is_none() && self.barriers == 0
    }

    /// Lane 0's element of the `let` register `r` into `dst` (from `ebx` where
    /// [`V::lane0_in_rbx`], else extracted).
    fn lane0_to(&mut self, dst: AsmRegister32, r: usize) -> R<()> {
        if self.lane0_in_rbx(r) {
            self.a.mov(dst, ebx)?;
        } else {
            self.a.vmovd(dst, XMM[r])?;
        }
        Ok(())
    }

    /// Lane 0's index into `rax` for `index` `a + e` (`mad(x, y, c)`), `a` a `let` register
    /// and `e` [`V::gpr_ok`]; false (no code) otherwise.
    fn lane0_sum(&mut self, index: &Expr) -> R<bool> {
        // `mad(x, y, c)` (`-O`'s form of a row's `r * w + x`) as the `x * y + c` it is for
        // 32-bit integers (wrapping as the lanes' `vpmulld` and `vpaddd` do): the row's
        // product in scalar code, not the lanes' 10-cycle multiply and an extraction.
        let sugared = super::expr::desugar(index)
            .filter(|_| matches!(index.ty(), kiln_ir::Type::U32 | kiln_ir::Type::I32));
        let index = sugared.as_ref().unwrap_or(index);
        let kiln_ir::ExprNode::Binary { op: kiln_ir::BinOp::Add, a, b } = index.node() else {
            return Ok(false);
        };
        let (r, e) = match (self.let_reg(a), self.let_reg(b)) {
            (Some(r), _) if self.gpr_ok(b) => (r, b),
            (_, Some(r)) if self.gpr_ok(a) => (r, a),
            _ => return Ok(false),
        };
        // (Wrapping 32-bit addition, as the lanes add; the 32-bit result clears rax's upper
        // half.)
        if let (Some(Imm::Int(_, c)), None) = (e.as_imm(), self.known_lid0(r)) {
            self.lane0_to(eax, r)?;
            if *c as u32 != 0 {
                self.a.add(eax, *c as u32 as i32)?;
            }
            return Ok(true);
        }
        self.gpr(e)?;
        match self.known_lid0(r) {
            Some(k) => self.a.add(eax, k as i32)?,
            None if self.lane0_in_rbx(r) => self.a.add(eax, ebx)?,
            None => {
                self.a.vmovd(r11d, XMM[r])?;
                self.a.add(eax, r11d)?;
            }
        }
        Ok(true)
    }
}
