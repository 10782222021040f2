//! Bounds proven once per region: a contiguous access at `local_id(0) + e` (`e` a
//! group-pure `u32` value) in a region of the region-loop code (`region.rs`) is checked
//! once before the region's batch loop, for the batch that reaches furthest, instead of
//! once per batch.
//!
//! The batches of a region have lane-0 local ids `8j` below the region's batch end (`[rbp-56]`
//! minus the group's first global id), so their lane-0 indices are at most
//! `end - 8 + e`, computed in 64 bits (both terms below 2^32: no wrap). When that is at most
//! the length minus 8, every lane of every batch is in bounds (lengths are below 2^31, so
//! no index wraps in the lanes either), and the access is a plain vector one, under no
//! mask as [`V::load`]'s fast path, with neither a compare nor the fault-lane test: a lane
//! that faulted earlier in the batch then loads an element in bounds, or stores one, which
//! is as unobservable as the stores of later lanes before a fault (after an error the
//! buffers are unspecified). `e` keeps its value for the whole region: group names change
//! only in group statements, and an `e` naming anything declared in the region is not
//! taken.
//!
//! Loads, stores and atomics (their index) are covered. In the copy of a region's code
//! that runs only when the proof holds (`batches.rs`), a covered access under a mask skips
//! its check too (its lanes are among the batch's, all in bounds); offset 0 is not tested
//! where the same table has another offset (a `u32` offset is at least 0, so the other's
//! test implies it).

use std::collections::HashSet;

use iced_x86::code_asm::*;
use kiln_ir::{
    walk_expr, walk_stmt, BinOp, Builtin, Expr, ExprNode, FuncKind, Stmt, StmtNode, Type, Visitor,
};

use super::{R, V};
use crate::x86::rt;

/// The region's proof: its frame byte (1: proven) and the accesses it covers (the address
/// of the index expression in the kernel, and the memory table).
pub(super) struct Proven {
    pub(super) flag: i32,
    accesses: Vec<(usize, u32)>,
    /// True while generating code that runs only when the flag is set (see
    /// [`V::full_batches`], [`V::region_stmts`]): the covered accesses need no test.
    pub(super) certain: bool,
}

impl Proven {
    /// A proof known to hold wherever the code it is set for runs (no flag): the accesses
    /// (index address, table) need no test there.
    pub(super) fn certain(accesses: Vec<(usize, u32)>) -> Proven {
        Proven { flag: -1, accesses, certain: true }
    }
}

/// The loads and stores of a region with their buffers and indices, and the names it
/// declares.
/// A short loop counts as the copies of its body that the code runs (`short.rs`).
struct Scan<'v> {
    v: &'v V,
    accesses: Vec<(kiln_ir::Var, usize, Expr)>,
    declared: HashSet<String>,
}

impl Visitor for Scan<'_> {
    fn visit_expr(&mut self, e: &Expr) {
        if let ExprNode::Load { buf, index } = e.node() {
            self.accesses.push((buf.clone(), index as *const Expr as usize, index.clone()));
        }
        walk_expr(self, e)
    }

    fn visit_stmt(&mut self, s: &Stmt) {
        if let Some(copies) = self.v.short_copies(s) {
            copies.iter().flatten().for_each(|c| self.visit_stmt(c));
            return;
        }
        match s.node() {
            StmtNode::Let { var, .. }
            | StmtNode::Decl { var, .. }
            | StmtNode::For { var, .. }
            | StmtNode::Alloc { var, .. } => {
                self.declared.insert(var.name().to_string());
            }
            StmtNode::Call { result: Some(r), .. } => {
                self.declared.insert(r.name().to_string());
            }
            StmtNode::Store { buf, index, .. } => {
                self.accesses.push((buf.clone(), index as *const Expr as usize, index.clone()))
            }
            StmtNode::Call { func, args, .. } if matches!(func.kind(), FuncKind::Atomic(_)) => {
                if let (Some(buf), Some(index)) = (args.first().and_then(Expr::as_var), args.get(1))
                {
                    self.accesses.push((buf.clone(), index as *const Expr as usize, index.clone()))
                }
            }
            _ => {}
        }
        walk_stmt(self, s)
    }
}

/// True if `e` names a name of `names`.
pub(super) fn names_any(e: &Expr, names: &HashSet<String>) -> bool {
    match e.node() {
        ExprNode::Var(v) => names.contains(v.name()),
        _ => e.children().iter().any(|c| names_any(c, names)),
    }
}

impl V {
    /// True if `e` is exactly `local_id(0)`: the builtin, or a name of one (declared once
    /// in the kernel, so every use of the name is that `let`).
    pub(super) fn lid_exactly(&self, e: &Expr) -> bool {
        match e.node() {
            ExprNode::Builtin { kind: Builtin::LocalId, dim: 0 } => true,
            ExprNode::Var(v) => self.regions().lids.contains(v.name()),
            _ => false,
        }
    }

    /// `e` for an index `local_id(0) + e` (either side; `None` for the offset 0).
    fn lid_offset<'e>(&self, index: &'e Expr) -> Option<Option<&'e Expr>> {
        if self.lid_exactly(index) {
            return Some(None);
        }
        let ExprNode::Binary { op: BinOp::Add, a, b } = index.node() else { return None };
        if self.lid_exactly(a) {
            Some(Some(b))
        } else if self.lid_exactly(b) {
            Some(Some(a))
        } else {
            None
        }
    }

    /// Before a region's batch loop (its end in `[rbp-56]`): the proof of the contiguous
    /// accesses of `stmts` at `local_id(0)` plus a group-pure offset (see the module
    /// docs), or `None` if there are none.
    pub(super) fn prove_region(&mut self, stmts: &[Stmt]) -> R<Option<Proven>> {
        let cands = self.candidates(stmts);
        if cands.is_empty() {
            return Ok(None);
        }
        let flag = self.slot();
        let mut fail = self.a.create_label();
        self.a.mov(byte_ptr(r15 + flag), 0)?;
        for (i, (_, t, e)) in cands.iter().enumerate() {
            // (`tile[lid] = tile[lid] + ...`: one test per table and offset; none for offset
            // 0 where the table has another, as a `u32` offset is at least 0.)
            if cands[..i].iter().any(|c| c.1 == *t && c.2 == *e)
                || e.is_none() && cands.iter().any(|c| c.1 == *t && c.2.is_some())
            {
                continue;
            }
            match e {
                Some(e) => self.uniform_to_eax(e)?,
                None => self.a.xor(eax, eax)?,
            }
            // (A 32-bit result: the upper half of rax is zero.)
            let last8 = self.const_slot((*t as u64, 5));
            self.a.add(rax, qword_ptr(rbp - 56))?;
            self.a.sub(rax, qword_ptr(r12 + rt::OFF_GLOBAL_ID))?;
            self.a.sub(rax, 8)?;
            self.a.cmp(rax, qword_ptr(r15 + last8))?;
            self.a.jg(fail)?;
        }
        self.a.mov(byte_ptr(r15 + flag), 1)?;
        self.bind(&mut fail)?;
        let accesses = cands.iter().map(|c| (c.0, c.1)).collect();
        Ok(Some(Proven { flag, accesses, certain: false }))
    }

    /// The contiguous accesses of `stmts` at `local_id(0)` plus a group-pure offset that a
    /// proof may cover: the index's address, the table and the offset (`None`: 0).
    fn candidates(&self, stmts: &[Stmt]) -> Vec<(usize, u32, Option<Expr>)> {
        let mut scan = Scan { v: self, accesses: Vec::new(), declared: HashSet::new() };
        stmts.iter().for_each(|s| scan.visit_stmt(s));
        let mut cands: Vec<(usize, u32, Option<Expr>)> = Vec::new();
        for (buf, addr, index) in &scan.accesses {
            if index.ty() != Type::U32 || self.private(buf).is_some() {
                continue;
            }
            let Some(t) = self.buf(buf) else { continue };
            let elem = self.mems.get(self.mem_of(t) as usize).map(|m| m.elem);
            if !matches!(
                elem,
                Some(kiln_ir::Scalar::F32 | kiln_ir::Scalar::I32 | kiln_ir::Scalar::U32)
            ) {
                continue;
            }
            let Some(off) = self.lid_offset(index) else { continue };
            if let Some(e) = off {
                if e.ty() != Type::U32
                    || names_any(e, &scan.declared)
                    || !self.group_pure(e)
                    || !self.gpr_ok(e)
                {
                    continue;
                }
            }
            cands.push((*addr, t, off.cloned()));
        }
        cands
    }

    /// The proof of a region run as the group's first batch alone ([`V::first_batch_only`],
    /// its range ending at `e + add`, so `e <= 8 - add` there), known when the code is
    /// generated: lane k's index is `k + o` for `o` 0 or `e` (`local_id(0)` is k in the
    /// first batch), at most `7 + 8 - add`, so an access to a local array of at least
    /// `16 - add` elements (8 for offset 0) is in bounds in every lane. `Some` only if
    /// that covers every access a proof could cover, with no flag to test: the code
    /// runs as the proven copy (`certain`).
    pub(super) fn prove_first_batch(&self, stmts: &[Stmt], e: &Expr, add: u32) -> Option<Proven> {
        let cands = self.candidates(stmts);
        let fits = |&(_, t, ref o): &(usize, u32, Option<Expr>)| {
            let local = self.mems.get(self.mem_of(t) as usize).and_then(|m| m.local);
            let need = match o {
                None => 8,
                Some(o) if o == e => 16 - add,
                Some(_) => return false,
            };
            local.is_some_and(|(_, count)| count >= need)
        };
        if cands.is_empty() || !cands.iter().all(fits) {
            return None;
        }
        let accesses = cands.iter().map(|c| (c.0, c.1)).collect();
        Some(Proven { flag: -1, accesses, certain: true })
    }

    /// The proof of a region whose range of `local_id(0)` ends at `hi`, a value known
    /// when the code is generated (`known.rs`; or the group's end, for a kernel that fixes
    /// its group's size), known then too: its batches have local
    /// ids below `hi` rounded up to 8 (batches start at multiples of 8 and end at the
    /// first past the range, or earlier at the group's end), so an access at `local_id(0)`
    /// plus a constant `o` to a local array of at least that plus `o` elements is in bounds
    /// in every lane. `Some` only if that covers every access a proof could cover: the
    /// region's code is then only the proven copy (`certain`), with no flag.
    pub(super) fn prove_known_range(&self, stmts: &[Stmt], hi: u64) -> Option<Proven> {
        let cands = self.candidates(stmts);
        let reach = hi.div_ceil(8) * 8;
        let fits = |&(_, t, ref o): &(usize, u32, Option<Expr>)| {
            let local = self.mems.get(self.mem_of(t) as usize).and_then(|m| m.local);
            let o = match o.as_ref().map(|o| o.as_imm()) {
                None => 0,
                Some(Some(kiln_ir::Imm::Int(_, bits))) => *bits as u32 as u64,
                Some(_) => return false,
            };
            local.is_some_and(|(_, count)| reach + o <= count as u64)
        };
        if cands.is_empty() || !cands.iter().all(fits) {
            return None;
        }
        let accesses = cands.iter().map(|c| (c.0, c.1)).collect();
        Some(Proven { flag: -1, accesses, certain: true })
    }

    /// [`V::proven_certain`] for the index expression at address `addr`.
    pub(super) fn proven_certain_at(&self, addr: usize, t: u32) -> bool {
        self.proven.as_ref().is_some_and(|p| p.certain && p.accesses.contains(&(addr, t)))
            || self.guarded_full(addr, t)
    }

    /// True while generating code that runs only when the region's proof holds, if it
    /// covers the access of table `t` at `index`: every lane's index is in bounds.
    pub(super) fn proven_certain(&self, index: &Expr, t: u32) -> bool {
        self.proven_certain_at(index as *const Expr as usize, t)
    }

    /// The region's proof (its flag, and whether the code runs only when it holds) where it
    /// covers the access of table `t` at the index at `addr`.
    fn proven_covering(&self, addr: usize, t: u32) -> Option<(i32, bool)> {
        let p = self.proven.as_ref().filter(|p| p.accesses.contains(&(addr, t)))?;
        Some((p.flag, p.certain))
    }

    /// True if [`V::proven_test`] takes the contiguous access of table `t` at `index` (a
    /// guard's or a region's proof covers it).
    pub(super) fn proof_covers(&self, index: &Expr, t: u32) -> bool {
        let addr = index as *const Expr as usize;
        self.guarded_full(addr, t) || self.proven_covering(addr, t).is_some()
    }

    /// For a contiguous access under no mask (the index in `ymm{idx}`): when the region's
    /// proof covers it, lane 0's index into `rax` and, unless the code runs only when
    /// proven, a test jumping to the returned label if not proven (`Some(None)`: no
    /// test); else `None`.
    pub(super) fn proven_test(
        &mut self,
        index: &Expr,
        t: u32,
        idx: usize,
    ) -> R<Option<Option<CodeLabel>>> {
        let addr = index as *const Expr as usize;
        if self.guarded_full(addr, t) {
            self.a.vmovd(eax, super::XMM[idx])?;
            return Ok(Some(None));
        }
        let Some((flag, certain)) = self.proven_covering(addr, t) else {
            return Ok(None);
        };
        self.a.vmovd(eax, super::XMM[idx])?;
        if certain {
            return Ok(Some(None));
        }
        let slow = self.a.create_label();
        self.a.cmp(byte_ptr(r15 + flag), 0)?;
        self.a.je(slow)?;
        Ok(Some(Some(slow)))
    }
}
