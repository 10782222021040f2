//! Work-groups of kernels with barriers, in rounds: on the scalar code every work-item runs
//! up to its next barrier, in order, round after round until all have finished (the
//! interpreter's schedule); on the 8-lane code the group's batches (eight work-items of a
//! row each) do the same, eight work-items per step.
//! Each batch keeps its state (values live across barriers, loop counters, masks) in its
//! own vector frame; the code only runs barriers where every lane of a batch agrees (not
//! under divergent control), so batches are compared as the interpreter compares
//! work-items.

use std::time::Instant;

use kiln_backends::x86::abi::{self, Ctx, MemRef};
use kiln_backends::x86::{ScalarCode, SpmdCode};
use kiln_ir::launch::{Launch, LaunchError};

use super::exec::Exec;

impl Exec<'_> {
    /// Runs one work-group (ids in `ctx`) of a kernel with barriers on the vector code.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn vector_rounds(
        &self,
        v: &SpmdCode,
        ctx: &mut Ctx,
        launch: &Launch,
        frames: &mut [u64],
        vframe: &mut Vec<u32>,
        table: &[MemRef],
        ranges: &[Option<usize>],
        start: Instant,
    ) -> Result<(), LaunchError> {
        let l = launch.local.map(u64::from);
        let per_row = (l[0] / 8) as usize;
        let batches = per_row * (l[1] * l[2]) as usize;
        let words = v.vframe_bytes.div_ceil(32) * 8;
        // Every batch starts from the top; the code writes every other slot before reading
        // it, so frames are set up once per launch, not per group.
        let vframe = super::exec::aligned(vframe, batches * words);
        for f in vframe.chunks_mut(words) {
            f[..8].copy_from_slice(&abi::IOTA);
            f[abi::RESUME_SLOT as usize / 4] = 0;
        }
        // One call for the whole group: the code runs the rows' batches one after the
        // other (each in its own frame, the rows' frames in order, see `next_batch_code`
        // and `grouprows.rs`), round after round, checking that each batch stops where the
        // round's first batch stopped.
        ctx.span = l[0];
        ctx.local_id = [0; 3];
        ctx.global_id = ctx.base;
        let resume = abi::RESUME_SLOT as usize / 4;
        let round_slot = abi::ROUND_SLOT as usize / 4;
        let base_id: [u32; 3] = std::array::from_fn(|d| ctx.base[d] as u32);
        // No round's stop yet (the group's first batch sets it); the whole group.
        vframe[round_slot] = u32::MAX;
        vframe[round_slot + 1] = u32::MAX;
        vframe[round_slot + 2] = 1;
        vframe[round_slot + 3] = 0;
        // SAFETY: the frames have the code's vector frame size and the lane constant, one
        // after the other for the group's batches, row by row; the code checks its accesses
        // (unchecked ones are at global_id(0) within the buffers, which the caller checked
        // for the group).
        let stop = unsafe { v.call(ctx, frames, vframe) };
        if stop == 0 {
            return Ok(());
        }
        // The batch the code stopped in: its row's ids are the context's (the code keeps
        // them), its place in the row from its first work-item's global_id(0).
        let lid = ctx.local_id;
        let row = (lid[1] + lid[2] * l[1]) as usize;
        let gid0 = ctx.global_id[0];
        let b = ((gid0 - ctx.base[0]) / 8) as usize;
        let frame = row * per_row + b;
        let batch_stop = |f: usize| vframe[f * words + resume] as u64;
        let batch_id: [u32; 3] = std::array::from_fn(|d| {
            (ctx.base[d] + if d == 0 { b as u64 * 8 } else { lid[d] }) as u32
        });
        // The round's stop as the group's first batch reached it.
        let round = batch_stop(0);
        if stop == abi::STOP_ERROR {
            // The lanes before the faulting one ran to the batch's stop first: if that
            // differs from the round's, the interpreter reports the divergence at the
            // batch's first work-item.
            ctx.local_id[0] = b as u64 * 8;
            let lane = gid0 - (ctx.base[0] + b as u64 * 8);
            let here = batch_stop(frame);
            if frame != 0 && lane > 0 && round != here {
                return Err(self.divergence(ctx, v.n_barriers, (round, base_id), (here, batch_id)));
            }
            return Err(self.fault_at(&v.sites, &v.mems, ctx, table, ranges, start));
        }
        if stop == abi::STOP_DIVERGE {
            ctx.local_id[0] = b as u64 * 8;
            let here = batch_stop(frame);
            return Err(self.divergence(ctx, v.n_barriers, (round, base_id), (here, batch_id)));
        }
        Err(self.launch_error(format!("internal error: the group's 8-lane code stopped at {stop}")))
    }

    /// Runs `groups` consecutive work-groups of one row of groups, each of one row (the
    /// first's ids in `ctx`, its local block zeroed), on the region-loop code (see
    /// `spmd/region.rs`): one call, the group frame followed by a save frame per batch.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn vector_regions(
        &self,
        v: &SpmdCode,
        ctx: &mut Ctx,
        launch: &Launch,
        frames: &mut [u64],
        vframe: &mut Vec<u32>,
        table: &[MemRef],
        ranges: &[Option<usize>],
        start: Instant,
        groups: u64,
    ) -> Result<(), LaunchError> {
        let l0 = launch.local[0] as u64;
        let words = v.vframe_bytes.div_ceil(32) * 8;
        let vframe = super::exec::aligned(vframe, (l0 as usize / 8 + 1) * words);
        vframe[..8].copy_from_slice(&abi::IOTA);
        let stride = (words * 4) as u64;
        let round_slot = abi::ROUND_SLOT as usize / 4;
        vframe[round_slot] = stride as u32;
        vframe[round_slot + 1] = (stride >> 32) as u32;
        let loop_slot = abi::LOOP_SLOT as usize / 4;
        vframe[loop_slot] = groups as u32;
        vframe[loop_slot + 1] = (groups >> 32) as u32;
        ctx.span = l0;
        ctx.local_id = [0; 3];
        ctx.global_id = ctx.base;
        // SAFETY: the frames are as `generate_regions` says, and unchecked accesses are at
        // global_id(0) within the buffers (checked by the caller for the groups).
        let stop = unsafe { v.call(ctx, frames, vframe) };
        if stop != 0 {
            return Err(self.fault_at(&v.sites, &v.mems, ctx, table, ranges, start));
        }
        Ok(())
    }

    /// Runs one group of a kernel with barriers: every work-item up to its next barrier, in
    /// order, until all have finished (the interpreter's schedule and divergence check).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn rounds(
        &self,
        sc: &ScalarCode,
        ctx: &mut Ctx,
        launch: &Launch,
        frames: &mut [u64],
        words: usize,
        table: &[MemRef],
        ranges: &[Option<usize>],
        start: Instant,
    ) -> Result<(), LaunchError> {
        let n = launch.group_size();
        for f in frames.chunks_mut(words) {
            f[0] = 0;
        }
        let l = launch.local.map(u64::from);
        loop {
            let mut first: Option<(u64, [u32; 3])> = None;
            // Local ids walked in order (dimension 0 fastest), without set_ids' divisions.
            let mut lid = [0u64; 3];
            for item in 0..n {
                ctx.local_id = lid;
                ctx.global_id = std::array::from_fn(|d| ctx.base[d] + lid[d]);
                lid[0] += 1;
                if lid[0] == l[0] {
                    lid[0] = 0;
                    lid[1] += 1;
                    if lid[1] == l[1] {
                        lid[1] = 0;
                        lid[2] += 1;
                    }
                }
                let f = frames[item as usize * words..].as_mut_ptr() as *mut u8;
                // SAFETY: as in run_groups_raw.
                let stop = unsafe { sc.call(ctx, f) };
                if stop == abi::STOP_ERROR {
                    return Err(self.fault(sc, ctx, table, ranges, start));
                }
                let id = ctx.global_id.map(|v| v as u32);
                match first {
                    None => first = Some((stop, id)),
                    Some((s, first_id)) if s != stop => {
                        return Err(self.divergence(ctx, sc.n_barriers, (s, first_id), (stop, id)));
                    }
                    Some(_) => {}
                }
            }
            if matches!(first, None | Some((0, _))) {
                return Ok(());
            }
        }
    }

    /// The interpreter's "barrier divergence" error: `first` (stop, work-item) is the
    /// group's first work-item, `other` the first that stopped elsewhere (a stop is 0 for
    /// finished, else the barrier's number).
    pub(super) fn divergence(
        &self,
        ctx: &Ctx,
        n_barriers: u32,
        first: (u64, [u32; 3]),
        other: (u64, [u32; 3]),
    ) -> LaunchError {
        let what = |s: u64| {
            if s == 0 {
                "finished".to_string()
            } else {
                format!("waits at barrier #{s} (of {n_barriers})")
            }
        };
        let g = ctx.group_id.map(|v| v as u32);
        let (f, o) = (first.1, other.1);
        let message = format!(
            "barrier divergence in work-group ({}, {}, {}): work-item ({}, {}, {}) {} while \
             work-item ({}, {}, {}) {}",
            g[0],
            g[1],
            g[2],
            f[0],
            f[1],
            f[2],
            what(first.0),
            o[0],
            o[1],
            o[2],
            what(other.0)
        );
        self.error(Some(o), message)
    }
}
