//! Work-groups of several rows in one call of the round code (kernels with barriers that do
//! not run as region loops: groups of more than one row, as a 16 x 16 tile).
//!
//! The round code runs a row's batches one after the other, each to its next barrier (or
//! the end), in frames that follow each other (`ctl.rs`). The driver used to call it once
//! per row and round, so a 16 x 16 group with one barrier took 32 calls of two batches
//! each, and the calls' set-up cost more than the work. When the driver asks for the
//! whole group (`LOOP_SLOT` nonzero in the first frame), the code goes on from a row's last
//! batch to the next row's first (the frames of the group's rows are consecutive, in the
//! interpreter's order of rows: dimension 1, then 2), and after the group's last row starts
//! the next round at the first row, until every batch has finished.
//!
//! ## Why this is the interpreter's schedule
//!
//! It is the order the driver's calls had: every batch of the group, row after row, runs to
//! the round's stop, which the group's first batch set (`[rbp-48]` holds it for the whole
//! call, across rows, as the driver passed it from row to row), and a batch that stops
//! elsewhere ends the call at once with its `global_id(0)` in the context, its row's ids
//! there too: the context's `local_id` and `global_id` of dimensions 1 and 2 are the
//! running row's, set here before its first batch runs (a batch's broadcasts and the code's
//! reads of those ids take them from the context, and so do the fault reports), and put
//! back to the first row's when a round starts again.

use iced_x86::code_asm::*;

use super::{R, V};
use crate::x86::rt;

impl V {
    /// After a row's last batch in a call that runs the whole group: unless the row is the
    /// group's last, the next row's ids in the context, its first frame (after this row's
    /// last), its `global_id(0)` from the call's first and its span's end, then `dispatch`
    /// (which resumes the batch, or starts it from the top in its first round). After the
    /// last row, falls through with the first row's ids back in the context. The round's
    /// stop is left as it is: the next row's batches must reach it too.
    pub(super) fn next_row_of_round(&mut self, dispatch: CodeLabel) -> R<()> {
        let lid = |d: i32| qword_ptr(r12 + (rt::OFF_LOCAL_ID + 8 * d));
        let gid = |d: i32| qword_ptr(r12 + (rt::OFF_GLOBAL_ID + 8 * d));
        let base = |d: i32| qword_ptr(r12 + (rt::OFF_BASE + 8 * d));
        let size = |d: i32| qword_ptr(r12 + (rt::OFF_LOCAL_SIZE + 8 * d));
        let mut next_y = self.a.create_label();
        let mut row = self.a.create_label();
        let mut last = self.a.create_label();
        let stride = self.next;
        self.a.mov(rax, lid(1))?;
        self.a.inc(rax)?;
        self.a.cmp(rax, size(1))?;
        self.a.jb(next_y)?;
        self.a.mov(rax, lid(2))?;
        self.a.inc(rax)?;
        self.a.cmp(rax, size(2))?;
        self.a.jae(last)?;
        self.a.mov(lid(2), rax)?;
        self.a.inc(gid(2))?;
        self.a.mov(lid(1), 0)?;
        self.a.mov(rax, base(1))?;
        self.a.mov(gid(1), rax)?;
        self.a.jmp(row)?;
        self.bind(&mut next_y)?;
        self.a.mov(lid(1), rax)?;
        self.a.inc(gid(1))?;
        self.bind(&mut row)?;
        // Every row spans the same global_id(0)s: the call's first and the end slot's.
        self.a.mov(rax, qword_ptr(r15 + super::END_SLOT))?;
        self.a.mov(rbx, gid(0))?;
        self.a.add(r15, stride)?;
        self.a.mov(qword_ptr(r15 + super::END_SLOT), rax)?;
        self.a.jmp(dispatch)?;
        self.bind(&mut last)?;
        self.a.mov(lid(1), 0)?;
        self.a.mov(lid(2), 0)?;
        self.a.mov(rax, base(1))?;
        self.a.mov(gid(1), rax)?;
        self.a.mov(rax, base(2))?;
        self.a.mov(gid(2), rax)?;
        Ok(())
    }
}
