//! Work-groups of a kernel with barriers on the 8-lane code: the group's batches (eight
//! work-items of a row each) run in order, each up to its next barrier, round after round
//! until all have finished — the interpreter's schedule with eight work-items per step.
//! Each batch keeps its state (values live across barriers, loop counters, masks) in its
//! own vector frame; the code only runs barriers where every lane of a batch agrees (not
//! under divergent control), so batches are compared as the interpreter compares
//! work-items.

use std::time::Instant;

use kiln_ir::interp::InterpError;
use kiln_ir::launch::Launch;

use super::rt::{self, Ctx, MemRef};
use super::{spmd, SpmdCode, VectorEntry, X86Program};

impl X86Program {
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
        start: Instant,
    ) -> Result<(), InterpError> {
        let l = launch.local.map(u64::from);
        let per_row = (l[0] / 8) as usize;
        let batches = per_row * (l[1] * l[2]) as usize;
        let words = v.vframe_bytes.div_ceil(32) * 8;
        // Every batch starts from the top; the code writes every other slot before reading
        // it, so frames are set up once per launch, not per group.
        if vframe.len() != batches * words {
            vframe.clear();
            vframe.resize(batches * words, 0);
        }
        for f in vframe.chunks_mut(words) {
            f[..8].copy_from_slice(&spmd::IOTA);
            f[spmd::RESUME_SLOT as usize / 4] = 0;
        }
        // SAFETY: the mapping holds a function with this signature (see spmd/mod.rs).
        let entry: VectorEntry =
            unsafe { std::mem::transmute::<*const u8, VectorEntry>(v.code.addr()) };
        ctx.span = 8;
        loop {
            let mut first: Option<(u64, [u32; 3])> = None;
            for (b, f) in vframe.chunks_mut(words).enumerate() {
                let row = (b / per_row) as u64;
                let lid = [(b % per_row) as u64 * 8, row % l[1], row / l[1]];
                ctx.local_id = lid;
                ctx.global_id = std::array::from_fn(|d| ctx.base[d] + lid[d]);
                // SAFETY: the frame has the code's vector frame size and the lane constant;
                // the code checks its accesses (unchecked ones are at global_id(0) within
                // the buffers, which the caller checked for the group).
                let stop = unsafe {
                    entry(ctx, frames.as_mut_ptr() as *mut u8, f.as_mut_ptr() as *mut u8)
                };
                if stop == rt::STOP_ERROR {
                    return Err(self.fault_at(&v.sites, &v.mems, ctx, table, start));
                }
                let id = ctx.global_id.map(|x| x as u32);
                match first {
                    None => first = Some((stop, id)),
                    Some((s, first_id)) if s != stop => {
                        return Err(self.divergence(ctx, v.n_barriers, (s, first_id), (stop, id)));
                    }
                    Some(_) => {}
                }
            }
            if matches!(first, None | Some((0, _))) {
                return Ok(());
            }
        }
    }
}
