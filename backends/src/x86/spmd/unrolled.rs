//! A region whose batches save or restore values, unrolled when the code is generated
//! (`region.rs`): in a kernel that fixes its group's size, a small region without loops or
//! calls runs as one copy of its statements per batch of the group, one after another, with
//! no batch loop. Each copy knows its lane 0's `local_id(0)`, so its accesses at
//! `local_id(0)` plus a constant (proven for the group when the code is generated) are
//! addressed at constant displacements, and a divergent `if` bounding `local_id(0)` by a
//! constant is decided for the batch when the code is generated (`branch.rs`: the scan's
//! `if lid >= off` runs the branch under no mask, or not at all, with no test). Restores
//! and saves are the plain batch loop's (`saves.rs`), at the same save-frame offsets in
//! every copy: each copy binds the region's names afresh (its own frame slots), and what a
//! copy saves goes to the offsets of the first copy's bindings, which the last copy's
//! bindings take after the region, as later regions restore them from there.
//!
//! Exact as the loop is: the same batches in the same order, each running the region's
//! statements on its lanes; a batch's fault ends the call at the batch's end.

use iced_x86::code_asm::*;
use kiln_ir::{Stmt, StmtNode};

use super::{no, Loc, R, V};
use crate::x86::rt;

/// The most batches a region unrolled here has (a group of 256 work-items).
const MAX_BATCHES: u64 = 32;

/// The most statements (nested ones included) of all the copies of one region.
const MAX_STMTS: usize = 128;

/// Names held in `let` registers: `lets` index, register, save-frame offset
/// ([`V::held_names`]).
type Held = Vec<(usize, usize, i32)>;

impl V {
    /// Region `stmts` (no trimmed range; `restore` what its batches restore) as one copy
    /// per batch of the group (see the module's comment); false (no code) if it does not
    /// qualify.
    pub(super) fn unrolled_batches(&mut self, stmts: &[Stmt], restore: &[(i32, i32)]) -> R<bool> {
        let Some(l) = self.regions().group_size else { return Ok(false) };
        let batches = l.div_ceil(8);
        if !(2..=MAX_BATCHES).contains(&batches)
            || stmts_here(stmts).is_none_or(|n| n * batches as usize > MAX_STMTS)
            || !self.lid_ifs_only(stmts)
            || self.next_reg != super::GID
            || !self.vhomes.is_empty()
            || self.region_has_wide(stmts)
        {
            return Ok(false);
        }
        // Every access at `local_id(0)` (plus a constant) proven for the whole group.
        let Some(proof) = self.prove_known_range(stmts, l) else { return Ok(false) };
        let start = self.next;
        let copies = !restore.is_empty() || !self.twins_ok(stmts);
        let outer = self.proven.replace(proof);
        let group_gid = qword_ptr(r12 + rt::OFF_GLOBAL_ID);
        if copies {
            self.a.mov(rax, qword_ptr(r15 + super::ROUND_SLOT))?;
            self.a.add(rax, r15)?;
            self.set_save_ptr()?;
        }
        self.a.mov(rbx, group_gid)?;
        // A region that reads no lane of `global_id(0)`/`local_id(0)` (only accesses at a
        // known `local_id(0)`: the scan's `t[lid] = v`) keeps neither register up to date,
        // as [`V::known_batches`]; later regions set both again.
        let lanes = self.reads_id_lanes(stmts);
        if lanes {
            self.a.vmovd(xmm15, ebx)?;
            self.a.vpbroadcastd(ymm15, xmm15)?;
            self.a.vpaddd(ymm15, ymm15, ymmword_ptr(r15))?;
        }
        self.regions.as_mut().expect("region mode").ids_stale = !lanes;
        // As the plain loop: restored values and the region's names in `let` registers.
        let regs = self.next_reg;
        let loaded = self.plan_loaded(restore);
        let slots: Vec<(i32, i32)> =
            restore.iter().filter(|s| !loaded.iter().any(|l| l.2 == s.0)).copied().collect();
        let in_regs = self.region_regs_ok(stmts) || !loaded.is_empty();
        // The first copy's held names and saved slots: where every copy saves.
        let mut first: Option<(Held, Vec<(i32, i32)>)> = None;
        for b in 0..batches {
            if in_regs {
                self.next_reg = super::LET_REGS.start + loaded.len();
                self.reg_end = super::LID;
            }
            self.load_held(&loaded)?;
            self.batch_start(&slots)?;
            self.regions.as_mut().expect("region mode").lid0 = Some(8 * b as u32);
            let mark = self.lets.len();
            self.region_stmts(stmts)?;
            self.regions.as_mut().expect("region mode").lid0 = None;
            self.regions.as_mut().expect("region mode").ranges.push((start, self.next));
            (self.next_reg, self.reg_end) = (regs, super::GID);
            let (held, save) = match &first {
                None => {
                    let held = if in_regs { self.held_names(mark) } else { Vec::new() };
                    (held, self.region_saves(restore))
                }
                Some((held0, _)) => (self.held_like(mark, held0)?, self.region_saves(restore)),
            };
            if !copies && (!held.is_empty() || !save.is_empty()) {
                return no("internal: a region saves values without a save-frame pointer");
            }
            let (held0, save0) = first.get_or_insert_with(|| (held.clone(), save.clone()));
            if save.len() != save0.len() || save.iter().zip(save0.iter()).any(|(s, t)| s.1 != t.1) {
                return no("internal: the copies of an unrolled region save different values");
            }
            let pairs: Vec<(i32, i32, i32)> =
                save.iter().zip(save0.iter()).map(|(s, t)| (s.0, t.0, s.1)).collect();
            // (The loaded `var`s the region assigns go back too, to where they came from.)
            let assigned = &self.regions().assigned;
            let to_save: Vec<(usize, usize, i32)> = held0
                .iter()
                .zip(&held)
                .map(|(h0, h)| (h.0, h.1, h0.2))
                .chain(loaded.iter().filter(|l| assigned.contains(&l.2)).copied())
                .collect();
            self.save_held(&to_save)?;
            self.save_pairs(&pairs)?;
            if b + 1 < batches {
                self.batch_end(&slots, &[], copies)?;
                self.lets.truncate(mark);
                continue;
            }
            // The last copy's bindings take the first copy's offsets, where every batch
            // saved them (and later regions restore them from).
            for &(from, to, _) in &pairs {
                for bd in &mut self.lets[mark..] {
                    match &mut bd.loc {
                        Loc::Slot(o) | Loc::Scalar(o) if *o == from => *o = to,
                        _ => {}
                    }
                    if bd.dword == Some(from) {
                        bd.dword = Some(to);
                    }
                }
            }
            for &(i, _, off) in to_save.iter().chain(&loaded) {
                self.lets[i].loc = Loc::Slot(off);
                if self.lets[i].dword.is_some() {
                    self.lets[i].dword = Some(off);
                }
            }
        }
        let r = self.regions.as_mut().expect("region mode");
        r.ranges.push((start, self.next));
        r.ids_stale = false;
        self.proven = outer;
        self.batch_mark = None;
        // Group code reports nothing per lane, but the budget's stub reads rbx.
        self.a.mov(rbx, group_gid)?;
        Ok(true)
    }

    /// True if every `if` in `stmts` bounds `local_id(0)` by a constant ([`V::lid_bound`]):
    /// each batch's copy decides it when the code is generated, except a batch the bound
    /// splits. (A branch on data would be copied whole, masked and unmasked, per batch,
    /// for no gain.)
    fn lid_ifs_only(&self, stmts: &[Stmt]) -> bool {
        stmts.iter().all(|s| match s.node() {
            StmtNode::If { cond, then, otherwise } => {
                self.lid_bound(cond).is_some_and(|(e, _)| e.as_imm().is_some())
                    && self.lid_ifs_only(then.stmts())
                    && otherwise.as_ref().is_none_or(|o| self.lid_ifs_only(o.stmts()))
            }
            StmtNode::Block(v) => self.lid_ifs_only(v),
            _ => true,
        })
    }

    /// A later copy's names in `let` registers (bound since `mark`), as
    /// [`V::held_names`] found the first copy's, saved to the first copy's offsets.
    fn held_like(&self, mark: usize, first: &[(usize, usize, i32)]) -> R<Vec<(usize, usize, i32)>> {
        let held: Vec<(usize, usize, i32)> = (mark..self.lets.len())
            .filter_map(|i| match self.lets[i].loc {
                Loc::Reg(r) if r != super::LID && r != super::GID => Some((i, r, 0)),
                _ => None,
            })
            .zip(first)
            .map(|((i, r, _), f)| (i, r, f.2))
            .collect();
        if held.len() != first.len() || held.iter().zip(first).any(|(h, f)| h.1 != f.1) {
            return no("internal: the copies of an unrolled region hold different names");
        }
        Ok(held)
    }

    /// A batch's saved slots, each from the group frame's `from` to its save frame's `to`.
    fn save_pairs(&mut self, pairs: &[(i32, i32, i32)]) -> R<()> {
        if pairs.is_empty() {
            return Ok(());
        }
        let fp = self.save_frame()?;
        for &(from, to, bytes) in pairs {
            for o in (0..bytes).step_by(32) {
                self.a.vmovups(ymm0, ymmword_ptr(r15 + (from + o)))?;
                self.a.vmovups(ymmword_ptr(fp + (to + o)), ymm0)?;
            }
        }
        Ok(())
    }
}

/// The statements of `stmts`, nested ones included, if none is a loop or a call.
fn stmts_here(stmts: &[Stmt]) -> Option<usize> {
    let mut n = 0;
    for s in stmts {
        n += 1 + match s.node() {
            StmtNode::If { then, otherwise, .. } => {
                stmts_here(then.stmts())?
                    + otherwise.as_ref().map_or(Some(0), |o| stmts_here(o.stmts()))?
            }
            StmtNode::Block(v) => stmts_here(v)?,
            StmtNode::For { .. } | StmtNode::While { .. } | StmtNode::Call { .. } => return None,
            _ => 0,
        };
    }
    Some(n)
}
