//! The errors generated code reports through the context, in the interpreter's words
//! (kernel, work-item, access, index, length).

use std::time::Instant;

use kiln_backends::x86::abi::{self, Ctx, MemInfo, MemKind, MemRef, Site};
use kiln_backends::x86::ScalarCode;
use kiln_ir::launch::LaunchError;

use super::exec::Exec;

impl Exec<'_> {
    /// [`Exec::fault`] for a stop outside the scalar code (a limit between groups).
    pub(super) fn fault_in(
        &self,
        sc: Option<&ScalarCode>,
        ctx: &Ctx,
        table: &[MemRef],
        ranges: &[Option<usize>],
        start: Instant,
    ) -> LaunchError {
        match sc {
            Some(sc) => self.fault(sc, ctx, table, ranges, start),
            None => self.fault_at(&[], &[], ctx, table, ranges, start),
        }
    }

    /// The error generated code reported through the context.
    pub(super) fn fault(
        &self,
        sc: &ScalarCode,
        ctx: &Ctx,
        table: &[MemRef],
        ranges: &[Option<usize>],
        start: Instant,
    ) -> LaunchError {
        self.fault_at(&sc.sites, &sc.mems, ctx, table, ranges, start)
    }

    /// The error for the stop in `ctx`, with the scalar code's site and memory tables.
    pub(super) fn fault_at(
        &self,
        sites: &[Site],
        mems: &[MemInfo],
        ctx: &Ctx,
        table: &[MemRef],
        ranges: &[Option<usize>],
        start: Instant,
    ) -> LaunchError {
        let id = Some(ctx.global_id.map(|v| v as u32));
        let site = sites.get(ctx.err_site as usize);
        let message = match (ctx.err_code, site) {
            (abi::ERR_OOB, Some(Site::Access { what, mem, signed })) => {
                let m = &mems[*mem as usize];
                let v = if *signed { ctx.err_val as i64 as i128 } else { ctx.err_val as i128 };
                let len = match m.kind {
                    MemKind::Table(t) => table[t as usize].len,
                    MemKind::Private { count, .. } => count as u64,
                };
                // A ranged buffer argument's index is relative to its range: say so.
                let offset = m.param.and_then(|p| ranges.get(p).copied().flatten());
                let note = kiln_ir::launch::bounds_note(m.kind_word(), len, offset);
                format!("{what} `{}[{v}]` out of bounds ({note})", m.name)
            }
            (abi::ERR_MISALIGNED, Some(Site::Align { what, mem, lanes })) => format!(
                "misaligned {what} `{}[{}]` of {lanes} lanes: the index must be a multiple of \
                 {lanes}",
                mems[*mem as usize].name, ctx.err_val
            ),
            (abi::ERR_DIV_ZERO, Some(Site::Div { rem, expr })) => {
                format!("integer {} by zero in {expr}", if *rem { "remainder" } else { "division" })
            }
            (abi::ERR_FOR_STEP, Some(Site::ForStep { var, signed })) => {
                let s = if *signed { ctx.err_val as i64 as i128 } else { ctx.err_val as i128 };
                format!("for loop over `{var}`: step {s} is not positive")
            }
            (abi::ERR_STEPS, _) => "loop iteration limit exceeded".to_string(),
            (abi::ERR_DEADLINE, _) => format!(
                "time limit exceeded: still running at the deadline, {:.3}s after the launch \
                 started",
                start.elapsed().as_secs_f64()
            ),
            (abi::ERR_CANCELLED, _) => "launch cancelled".to_string(),
            (code, _) => format!("internal error: fault code {code} without its site"),
        };
        self.error(id, message)
    }
}
