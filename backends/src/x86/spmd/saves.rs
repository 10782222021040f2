//! What a region's batches keep between regions (`region.rs`): each batch's save frame,
//! the values a batch restores from it before running a region (the batch values the
//! region names) and saves to it after (the region's new values, and the restored `var`s it
//! assigns), and the region's own top-level names, which live in `let` registers while
//! its batch runs and are saved from there.
//!
//! The save frame's address is in a register ([`V::save_ptr`]) where no table takes the
//! last base register: a read-modify-write of `[rbp-48]` per batch was a chain of
//! store-to-load forwards through every batch of every region.
//!
//! Exact: a value no statement of a region names is neither read nor written by it, so the
//! copy in the batch's save frame stays the value, and the group frame's slot (which holds
//! another batch's copy, or none) is never read before the next region that names the
//! value restores it. A name in a register while the region runs is the same value as in
//! a slot: the batch's code reads and assigns it there, and its end saves it.

use std::collections::HashSet;

use iced_x86::code_asm::*;
use kiln_ir::{walk_expr, walk_stmt, Expr, ExprNode, Stmt, StmtNode, Visitor};

use super::{Loc, R, V, YMM};

impl V {
    /// What a batch of the region `stmts` restores before it runs them: the batch
    /// bindings in scope that its statements name (read, or assign: an assignment under a
    /// mask blends into the old value). The others stay in the batch's save frame, which
    /// no code between here and the next restore of them reads or writes through the group
    /// frame. Also notes, for [`V::region_saves`], the bindings in scope and the restored
    /// `var`s the region assigns (only those, and the region's new bindings, change).
    pub(super) fn region_restores(&mut self, stmts: &[Stmt]) -> Vec<(i32, i32)> {
        let before = self.batch_bindings();
        let mut names = Names::default();
        stmts.iter().for_each(|s| names.visit_stmt(s));
        // (A name the region declares again before using it resolves here to the outer
        // binding: restoring that one too is harmless.)
        let off_of = |n: &String| {
            self.find(n).and_then(|b| match b.loc {
                Loc::Slot(o) | Loc::Scalar(o) => Some(o),
                Loc::Reg(_) => None,
            })
        };
        let named: HashSet<i32> =
            names.read.iter().chain(&names.assigned).filter_map(off_of).collect();
        let assigned: HashSet<i32> = names.assigned.iter().filter_map(off_of).collect();
        let restore: Vec<(i32, i32)> =
            before.iter().filter(|s| named.contains(&s.0)).copied().collect();
        let r = self.regions.as_mut().expect("region mode");
        r.before = before;
        r.assigned = assigned;
        restore
    }

    /// What a batch of the current region copies to its save frame after running it,
    /// given what it restored ([`V::region_restores`]): the region's new bindings and the
    /// restored `var`s it assigns.
    pub(super) fn region_saves(&self, restore: &[(i32, i32)]) -> Vec<(i32, i32)> {
        let r = self.regions();
        self.batch_bindings()
            .into_iter()
            .filter(|s| {
                !r.before.contains(s)
                    || restore.contains(s) && r.assigned.contains(&s.0) && self.is_var_at(s.0)
            })
            .collect()
    }

    /// Copies the listed slots between the group frame and the batch's save frame
    /// ([`V::save_ptr`], else `[rbp-48]`).
    pub(super) fn copy_slots(&mut self, slots: &[(i32, i32)], save: bool) -> R<()> {
        if slots.is_empty() {
            return Ok(());
        }
        let fp = self.save_frame()?;
        for &(off, bytes) in slots {
            for o in (off..off + bytes).step_by(32) {
                if save {
                    self.a.vmovups(ymm0, ymmword_ptr(r15 + o))?;
                    self.a.vmovups(ymmword_ptr(fp + o), ymm0)?;
                } else {
                    self.a.vmovups(ymm0, ymmword_ptr(fp + o))?;
                    self.a.vmovups(ymmword_ptr(r15 + o), ymm0)?;
                }
            }
        }
        Ok(())
    }

    /// True if region `stmts` may keep its own top-level names in `let` registers: it
    /// declares some (other than `let`s of the ids), none of 64 bits (two registers each),
    /// and no `let` register is in use.
    pub(super) fn region_regs_ok(&self, stmts: &[Stmt]) -> bool {
        let mut some = false;
        for s in stmts {
            let (var, value) = match s.node() {
                StmtNode::Let { var, value } => (var, Some(value)),
                StmtNode::Decl { var, .. } => (var, None),
                StmtNode::Call { result: Some(r), .. } => (r, None),
                StmtNode::For { var, .. } => (var, None),
                _ => continue,
            };
            if wide_name(var) {
                return false;
            }
            let id = value.is_some_and(|v| {
                matches!(
                    v.node(),
                    ExprNode::Builtin {
                        kind: kiln_ir::Builtin::GlobalId | kiln_ir::Builtin::LocalId,
                        dim: 0
                    }
                )
            });
            some |= !id;
        }
        some && self.next_reg == super::GID && self.vhomes.is_empty()
    }

    /// True if region `stmts` binds a 64-bit or vector name at its top level: such a name
    /// takes two registers or none, which [`V::held_names`] does not save, so the region
    /// keeps its values in frame slots.
    pub(super) fn region_has_wide(&self, stmts: &[Stmt]) -> bool {
        stmts.iter().any(|s| match s.node() {
            StmtNode::Let { var, .. } | StmtNode::Decl { var, .. } | StmtNode::For { var, .. } => {
                wide_name(var)
            }
            StmtNode::Call { result: Some(r), .. } => wide_name(r),
            _ => false,
        })
    }

    /// The region's top-level names (bound since `lets` mark `mark`) in `let` registers:
    /// their index in `lets`, register and the slot they are saved to (the dword's slot of
    /// a uniform integer, which scalar code reads, else a new one).
    pub(super) fn held_names(&mut self, mark: usize) -> Vec<(usize, usize, i32)> {
        let mut out = Vec::new();
        for i in mark..self.lets.len() {
            let b = &self.lets[i];
            let Loc::Reg(r) = b.loc else { continue };
            if r == super::LID || r == super::GID {
                continue;
            }
            let off = match b.dword {
                Some(d) => d,
                None => self.slot(),
            };
            out.push((i, r, off));
        }
        out
    }

    /// Restored values the batch loads into `let` registers at its start instead of
    /// copying them to the group frame: those in 32-byte slots that one binding names (not
    /// a uniform integer's, whose dword scalar code reads from the frame), up to the
    /// registers there are. Their bindings name the register until the region's end:
    /// `lets` index, register, slot.
    pub(super) fn plan_loaded(&mut self, restore: &[(i32, i32)]) -> Vec<(usize, usize, i32)> {
        let mut out = Vec::new();
        for &(off, bytes) in restore {
            let r = super::LET_REGS.start + out.len();
            if r >= super::LID {
                break;
            }
            let at = |b: &super::Bound| matches!(b.loc, Loc::Slot(o) | Loc::Scalar(o) if o == off);
            let mut named = self.lets.iter().enumerate().filter(|(_, b)| at(b));
            let (Some((i, b)), None) = (named.next(), named.next()) else { continue };
            if bytes != 32 || b.dword.is_some() || b.loc != Loc::Slot(off) {
                continue;
            }
            out.push((i, r, off));
        }
        for &(i, r, _) in &out {
            self.lets[i].loc = Loc::Reg(r);
        }
        out
    }

    /// At a batch's start: the values [`V::plan_loaded`] put in registers, from its save
    /// frame.
    pub(super) fn load_held(&mut self, loaded: &[(usize, usize, i32)]) -> R<()> {
        if loaded.is_empty() {
            return Ok(());
        }
        let fp = self.save_frame()?;
        for &(_, r, off) in loaded {
            self.a.vmovups(YMM[r], ymmword_ptr(fp + off))?;
        }
        Ok(())
    }

    /// At a batch's end: the region's names held in registers to its save frame.
    pub(super) fn save_held(&mut self, held: &[(usize, usize, i32)]) -> R<()> {
        if held.is_empty() {
            return Ok(());
        }
        let fp = self.save_frame()?;
        for &(_, r, off) in held {
            self.a.vmovups(ymmword_ptr(fp + off), YMM[r])?;
        }
        Ok(())
    }

    /// The register holding the batch's save frame's address ([`V::save_ptr`], else `r10`
    /// loaded from `[rbp-48]`).
    pub(super) fn save_frame(&mut self) -> R<AsmRegister64> {
        Ok(match self.save_ptr {
            Some(r) => r,
            None => {
                self.a.mov(r10, qword_ptr(rbp - 48))?;
                r10
            }
        })
    }

    /// The first batch's save frame (`rax`) into its place ([`V::save_ptr`], else
    /// `[rbp-48]`).
    pub(super) fn set_save_ptr(&mut self) -> R<()> {
        match self.save_ptr {
            Some(r) => self.a.mov(r, rax)?,
            None => self.a.mov(qword_ptr(rbp - 48), rax)?,
        }
        Ok(())
    }
}

/// True if `var` takes two registers (a 64-bit value) or is a vector.
fn wide_name(var: &kiln_ir::Var) -> bool {
    super::wide64::is_64(var.ty()) || var.ty().is_vector()
}

/// The names a region's statements read and assign.
#[derive(Default)]
struct Names {
    read: HashSet<String>,
    assigned: HashSet<String>,
}

impl Visitor for Names {
    fn visit_expr(&mut self, e: &Expr) {
        if let ExprNode::Var(v) = e.node() {
            self.read.insert(v.name().to_string());
        }
        walk_expr(self, e)
    }

    fn visit_stmt(&mut self, s: &Stmt) {
        if let StmtNode::Assign { var, .. } = s.node() {
            self.assigned.insert(var.name().to_string());
        }
        walk_stmt(self, s)
    }
}
