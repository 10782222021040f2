//! Running an [`X86Program`], the code object the x86 backend emits: the launch's
//! work-groups, their spans of vector code, barrier rounds and the scalar fallback, the
//! buffers summed per thread, and the fault reports (the executor).

use std::ops::Range;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kiln_backends::x86::abi::{self, Ctx, Limits, MemInfo, MemKind, MemRef};
use kiln_backends::x86::{SpmdCode, X86Program};
use kiln_ir::launch::{resolve_launch, Arg, Buffer, Launch, LaunchError, NdRange};
use kiln_ir::{Kernel, Scalar};

use super::launch::{self, Bound};
use super::pool::WorkerPool;

/// Per-launch limits; the default has none.
#[derive(Clone, Debug, Default)]
pub struct CpuRunOptions {
    /// About the most loop iterations (`for` and `while` back-edges, summed over the
    /// work-items a thread runs; each work-group start counts one too) before the launch
    /// stops with an error.
    pub max_loop_iterations: Option<u64>,
    /// The instant after which the launch stops with an error (checked at the start of
    /// every work-group and every few thousand loop iterations).
    pub deadline: Option<Instant>,
    /// A flag that, once set (by any thread), stops the launch with an error at the next
    /// check (as for the deadline).
    pub cancel: Option<Arc<AtomicBool>>,
}

/// A buffer by address, for [`CpuRun::run_groups_raw`]: `len` elements of type `elem`
/// starting at `ptr`.
#[derive(Clone, Copy, Debug)]
pub struct RawBuffer {
    /// The first byte.
    pub ptr: *mut u8,
    /// The number of elements.
    pub len: usize,
    /// The element type.
    pub elem: Scalar,
}

// SAFETY: a RawBuffer is an address and a length; whoever dereferences it (run_groups_raw,
// under its caller's promise) is responsible for the memory.
unsafe impl Send for RawBuffer {}
// SAFETY: as above.
unsafe impl Sync for RawBuffer {}

impl RawBuffer {
    /// The buffer's bytes by address. The buffer must outlive every use of the result.
    pub fn of(b: &mut Buffer) -> RawBuffer {
        let elem = b.elem();
        let len = b.len();
        RawBuffer { ptr: b.as_bytes_mut().as_mut_ptr(), len, elem }
    }
}

/// The most work-items one call of the vector code runs in a multi-group span: the limits
/// (deadline, cancel flag) are looked at between calls.
const SPAN_ITEMS: u64 = 1 << 16;

/// A launch of at most this many work-items runs on the calling thread: handing work to
/// the pool's threads and waiting for them costs microseconds, more than a small kernel
/// runs. (A kernel with long loops over a small range is the loser of this rule.)
pub const INLINE_ITEMS: u64 = 4096;

/// Parts of a launch split over the pool, per thread (where no buffer is summed per part).
const PARTS_PER_THREAD: u64 = 4;

/// The most memory (local arrays plus the frames of a group's work-items) one run may use:
/// 1 GiB, the interpreter's limit.
const MEMORY_LIMIT: u64 = 1 << 30;

/// The memory a launch runs in (scalar frames, the local block, the memory table, vector
/// frames), kept by each thread between its launches so that a launch allocates nothing.
#[derive(Default)]
struct Scratch {
    frames: Vec<u64>,
    local: Vec<u64>,
    table: Vec<MemRef>,
    vframe: Vec<u32>,
}

/// The first `n` elements of `v` from a 64-byte boundary (`v` grown with zeros as needed):
/// the vector code's 32-byte accesses to its frames and to local arrays then never
/// straddle a cache line, whatever address the allocator gave.
pub(super) fn aligned<T: Copy + Default>(v: &mut Vec<T>, n: usize) -> &mut [T] {
    let pad = 64 / std::mem::size_of::<T>();
    if v.len() < n + pad {
        v.resize(n + pad, T::default());
    }
    let off = v.as_ptr().align_offset(64);
    &mut v[off..off + n]
}

thread_local! {
    /// See [`Scratch`].
    static SCRATCH: std::cell::Cell<Scratch> = const {
        std::cell::Cell::new(Scratch {
            frames: Vec::new(),
            local: Vec::new(),
            table: Vec::new(),
            vframe: Vec::new(),
        })
    };
    /// Work-groups this thread has run on the 8-lane code.
    static LANE_GROUPS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many work-groups this thread has run on the 8-lane AVX2 code so far (the rest ran
/// on the scalar code). For tests and statistics: a test can tell which code ran a launch.
pub fn lane_groups_on_this_thread() -> u64 {
    LANE_GROUPS.with(|c| c.get())
}

fn count_lane_groups(n: u64) {
    LANE_GROUPS.with(|c| c.set(c.get() + n));
}

/// Running a compiled kernel on this host, as the cpu device does: with the interpreter's
/// call shape, schedule and errors.
pub trait CpuRun {
    /// Runs the kernel over `range` on this thread: `args` has one entry per parameter,
    /// pointer parameters naming entries of `buffers`, which the kernel reads and writes in
    /// place. No limits.
    fn run(&self, range: &NdRange, args: &[Arg], buffers: &mut [Buffer])
        -> Result<(), LaunchError>;

    /// [`CpuRun::run`] with limits.
    fn run_with(
        &self,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
        opts: &CpuRunOptions,
    ) -> Result<(), LaunchError>;

    /// Runs the launch's work-groups on up to `threads` threads, started for this call:
    /// [`CpuRun::run_on`] a [`WorkerPool`] of `threads`.
    fn run_parallel(
        &self,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
        threads: usize,
        opts: &CpuRunOptions,
    ) -> Result<(), LaunchError>;

    /// Runs the launch's work-groups on the pool's threads (each takes a contiguous run of
    /// groups, run in order); a launch of at most [`INLINE_ITEMS`] work-items runs on this
    /// thread alone. A race-free kernel gives the interpreter's buffers; when
    /// groups fail, the error of the lowest-numbered failing group among those run is
    /// returned, and groups on other threads may have run past it.
    fn run_on(
        &self,
        pool: &WorkerPool,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
        opts: &CpuRunOptions,
    ) -> Result<(), LaunchError>;

    /// Runs the work-groups `groups` (linear group ids, dimension 0 fastest) of `launch`
    /// (from [`resolve_launch`]) in order, on this thread.
    ///
    /// # Safety
    ///
    /// Each buffer must be valid for reads and writes of `len` elements for the whole call,
    /// and no other code may access them meanwhile, except other `run_groups_raw` calls of
    /// the same launch on disjoint group ranges (the kernel's own races aside).
    unsafe fn run_groups_raw(
        &self,
        launch: &Launch,
        args: &[Arg],
        buffers: &[RawBuffer],
        groups: Range<u64>,
        opts: &CpuRunOptions,
    ) -> Result<(), LaunchError>;
}

impl CpuRun for X86Program {
    fn run(
        &self,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
    ) -> Result<(), LaunchError> {
        self.run_with(range, args, buffers, &CpuRunOptions::default())
    }

    fn run_with(
        &self,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
        opts: &CpuRunOptions,
    ) -> Result<(), LaunchError> {
        let raw: Vec<RawBuffer> = buffers.iter_mut().map(RawBuffer::of).collect();
        let x = Exec::of(self);
        let launch = resolve_launch(x.kernel, range).map_err(|m| x.launch_error(m))?;
        // SAFETY: the raw buffers come from `buffers`, borrowed mutably for this call, and
        // this thread runs every group.
        unsafe { x.run_groups(&launch, args, &raw, 0..launch.group_count(), opts, true) }
    }

    fn run_parallel(
        &self,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
        threads: usize,
        opts: &CpuRunOptions,
    ) -> Result<(), LaunchError> {
        self.run_on(&WorkerPool::new(threads), range, args, buffers, opts)
    }

    fn run_on(
        &self,
        pool: &WorkerPool,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
        opts: &CpuRunOptions,
    ) -> Result<(), LaunchError> {
        Exec::of(self).run_on(pool, range, args, buffers, opts)
    }

    unsafe fn run_groups_raw(
        &self,
        launch: &Launch,
        args: &[Arg],
        buffers: &[RawBuffer],
        groups: Range<u64>,
        opts: &CpuRunOptions,
    ) -> Result<(), LaunchError> {
        // SAFETY: the caller's promise.
        unsafe { Exec::of(self).run_groups(launch, args, buffers, groups, opts, false) }
    }
}

/// The executor's view of one program: its kernel and codes.
pub(super) struct Exec<'a> {
    prog: &'a X86Program,
    pub(super) kernel: &'a Kernel,
    spmd: Option<&'a SpmdCode>,
}

impl<'a> Exec<'a> {
    fn of(prog: &'a X86Program) -> Exec<'a> {
        Exec { prog, kernel: prog.kernel(), spmd: prog.vector_code() }
    }

    /// [`CpuRun::run_on`].
    fn run_on(
        &self,
        pool: &WorkerPool,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
        opts: &CpuRunOptions,
    ) -> Result<(), LaunchError> {
        let launch = resolve_launch(self.kernel, range).map_err(|m| self.launch_error(m))?;
        if let Some(p) = self.prog.for_group(launch.local) {
            // The kernel compiled for this group size (it fixes no size of its own).
            return Exec::of(&p).run_on(pool, range, args, buffers, opts);
        }
        let raw: Vec<RawBuffer> = buffers.iter_mut().map(RawBuffer::of).collect();
        let n = launch.group_count();
        let parts = (pool.threads() as u64).min(n);
        if parts <= 1 || n.saturating_mul(launch.group_size()) <= INLINE_ITEMS {
            // SAFETY: as below, with every group on this thread.
            return unsafe { self.run_groups(&launch, args, &raw, 0..n, opts, true) };
        }
        // Buffers summed per thread (`sums.rs`): parts after the first get zeroed copies.
        let (summed, every) = self.summed_buffers(args, &raw, parts, n * launch.group_size());
        // Without copies, several parts per thread, claimed in group order as threads come
        // free: a thread that starts late or runs slow (another process on its core) then
        // holds the launch up by one small part, not by a whole share of it.
        let parts = if summed.is_empty() { (parts * PARTS_PER_THREAD).min(n) } else { parts };
        let per = n.div_ceil(parts);
        let results: Vec<Mutex<Option<LaunchError>>> =
            (0..parts).map(|_| Mutex::new(None)).collect();
        let mut copies: Vec<Vec<u32>> = Vec::new();
        let mut tables: Vec<Vec<RawBuffer>> = Vec::new();
        for _ in (1..parts).filter(|_| !summed.is_empty()) {
            let mut table = raw.clone();
            for &b in &summed {
                let mut c = vec![0u32; raw[b].len];
                table[b] =
                    RawBuffer { ptr: c.as_mut_ptr().cast(), len: c.len(), elem: raw[b].elem };
                copies.push(c);
            }
            tables.push(table);
        }
        let alone = !summed.is_empty() && every && self.prog.atomics_only_on_summed();
        pool.run(parts as usize, &|t| {
            let (lo, hi) = (t as u64 * per, ((t as u64 + 1) * per).min(n));
            let table = if t == 0 || summed.is_empty() { &raw } else { &tables[t - 1] };
            // SAFETY: the buffers are borrowed mutably for this call, which returns after
            // every part has run; parts run disjoint groups, and a race-free kernel's groups
            // write disjoint elements (atomics are lock-prefixed), the copies of summed
            // buffers being each part's own (so with `alone`, where every buffer that
            // atomics reach is summed, the part's atomics need no lock).
            let r = unsafe { self.run_groups(&launch, args, table, lo..hi, opts, alone) };
            if let Err(e) = r {
                *results[t].lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
            }
        });
        // The copies into their buffers, in part order (wrapping: any order gives these bits).
        for (i, c) in copies.iter().enumerate() {
            let b = summed[i % summed.len()];
            // SAFETY: `raw[b]` is a buffer of `len` 32-bit elements borrowed mutably for this
            // call, and every part has finished.
            let dst = unsafe { std::slice::from_raw_parts_mut(raw[b].ptr, raw[b].len * 4) };
            for (d, x) in dst.chunks_exact_mut(4).zip(c) {
                let v = u32::from_le_bytes([d[0], d[1], d[2], d[3]]).wrapping_add(*x);
                d.copy_from_slice(&v.to_le_bytes());
            }
        }
        // Parts are in group order: the first error is the lowest-numbered group's.
        results
            .into_iter()
            .find_map(|r| r.into_inner().unwrap_or_else(|e| e.into_inner()))
            .map_or(Ok(()), Err)
    }

    /// The buffers (indices into `raw`) a launch on `parts` threads of `items` work-items
    /// sums per thread: the summed parameters' (see [`X86Program::summed_params`]) when no
    /// other parameter names the same buffer and the copies are worth it; and whether every
    /// summed parameter's buffer is.
    fn summed_buffers(
        &self,
        args: &[Arg],
        raw: &[RawBuffer],
        parts: u64,
        items: u64,
    ) -> (Vec<usize>, bool) {
        let buffer = |a: &Arg| match a {
            Arg::Buffer(b) => Some(*b),
            _ => None,
        };
        let (mut out, mut every) = (Vec::new(), true);
        for &p in self.prog.summed_params() {
            let Some(b) = args.get(p).and_then(buffer) else {
                every = false;
                continue;
            };
            let shared = args.iter().enumerate().any(|(q, a)| q != p && buffer(a) == Some(b));
            let ok = raw.get(b).is_some_and(|r| {
                matches!(r.elem, Scalar::I32 | Scalar::U32) && worth_copying(r.len, parts, items)
            });
            if !shared && ok && !out.contains(&b) {
                out.push(b);
            } else {
                every = false;
            }
        }
        (out, every)
    }

    /// [`CpuRun::run_groups_raw`]; with `alone`, the caller also promises that no other
    /// thread runs groups of the launch (atomics on buffers then need no `lock`).
    ///
    /// # Safety
    ///
    /// As for [`CpuRun::run_groups_raw`].
    unsafe fn run_groups(
        &self,
        launch: &Launch,
        args: &[Arg],
        buffers: &[RawBuffer],
        groups: Range<u64>,
        opts: &CpuRunOptions,
        alone: bool,
    ) -> Result<(), LaunchError> {
        if let Some(c) = self.counted_for(launch, args, buffers) {
            // SAFETY: the caller's promise; the program has the same parameters.
            return unsafe { Exec::of(c).run_groups(launch, args, buffers, groups, opts, alone) };
        }
        if let Some(p) = self.prog.for_group(launch.local) {
            // SAFETY: the caller's promise; the same kernel, compiled for this group size.
            return unsafe { Exec::of(&p).run_groups(launch, args, buffers, groups, opts, alone) };
        }
        // The thread's blocks from its last launch (none if a launch is running below this
        // one on the same thread, which then keeps its own).
        let mut s = SCRATCH.with(std::cell::Cell::take);
        // SAFETY: the caller's promise.
        let r = unsafe { self.run_groups_in(launch, args, buffers, groups, opts, alone, &mut s) };
        SCRATCH.with(|c| c.set(s));
        r
    }

    /// The program counting straight into a buffer (`spmd/counted.rs` in the x86 backend) if
    /// this launch meets its conditions: the local size `[L, 1, 1]` and a buffer of at least
    /// `L` elements.
    fn counted_for(
        &self,
        launch: &Launch,
        args: &[Arg],
        buffers: &[RawBuffer],
    ) -> Option<&'a X86Program> {
        let (program, param, bins) = self.prog.counting()?;
        let len = match args.get(param)? {
            Arg::Buffer(b) => buffers.get(*b)?.len,
            Arg::Range { buffer, len, .. } => buffers.get(*buffer).map(|_| *len)?,
            _ => return None,
        };
        // Another argument bound to the same buffer could read what the counts write,
        // which the bins kept out of the buffer until the add-back: the kernel as written.
        let own = args[param].buffer();
        if args
            .iter()
            .enumerate()
            .any(|(i, a)| i != param && a.buffer().is_some() && a.buffer() == own)
        {
            return None;
        }
        (launch.local == [bins, 1, 1] && len >= bins as usize).then_some(program)
    }

    /// [`Exec::run_groups`] with the memory blocks of `s`.
    ///
    /// # Safety
    ///
    /// As for [`CpuRun::run_groups_raw`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn run_groups_in(
        &self,
        launch: &Launch,
        args: &[Arg],
        buffers: &[RawBuffer],
        groups: Range<u64>,
        opts: &CpuRunOptions,
        alone: bool,
        s: &mut Scratch,
    ) -> Result<(), LaunchError> {
        let bound =
            launch::bind_args(self.kernel, args, buffers).map_err(|m| self.launch_error(m))?;
        let group_size = launch.group_size();
        let l = launch.local.map(u64::from);
        let g = launch.groups().map(|g| g as u64);
        let param_len = |m: &MemInfo| match (m.param.map(|p| bound[p]), m.local) {
            (Some(Bound::Buffer(b)), _) => buffers[b].len as u64,
            (Some(Bound::Range { len, .. }), _) => len as u64,
            (None, Some((_, count))) => count as u64,
            (None, None) => match m.kind {
                MemKind::Private { count, .. } => count as u64,
                MemKind::Table(_) => 0,
            },
            _ => 0,
        };
        // Per parameter, the offset of a ranged buffer argument (bounds messages name it).
        let ranges: Vec<Option<usize>> = args.iter().map(Arg::range_offset).collect();
        // The scalar code is compiled (if it was not yet) unless the vector code runs every
        // group: rows of whole batches, every access within its buffer.
        // The vector code's checked accesses compare 32-bit indices with lengths below 2^31
        // (see spmd/mem.rs): other buffers leave the kernel to the scalar code.
        let lens_fit = self.spmd.is_some_and(|v| {
            v.mems.iter().map(param_len).all(|n| n < 1 << 31 && (n > 0 || v.sites.is_empty()))
        });
        let vector_all = self.spmd.is_some_and(|v| {
            let end0 = launch.offset[0] as u64 + g[0] * l[0];
            lens_fit
                && l[0].is_multiple_of(8)
                && v.accessed.iter().all(|&t| v.mems.get(t as usize).map_or(0, param_len) >= end0)
        });
        let sc = match (vector_all, &self.spmd) {
            (true, Some(_)) => None,
            _ => Some(self.prog.scalar_code().map_err(|e| self.launch_error(e))?),
        };
        let (mems, frame_bytes, local_bytes, n_barriers) = match (sc, self.spmd) {
            (Some(sc), _) => (&sc.mems, sc.frame_bytes, sc.local_bytes, sc.n_barriers),
            (None, Some(v)) => (&v.mems, v.frame_bytes, v.local_bytes, 0),
            (None, None) => return Err(self.launch_error("internal error: no code".into())),
        };
        let n_states = if n_barriers == 0 { 1 } else { group_size };
        let needed = local_bytes as u128 + n_states as u128 * frame_bytes as u128;
        if needed > MEMORY_LIMIT as u128 {
            return Err(self.launch_error(format!(
                "the arrays and work-item states of a work-group need {needed} bytes, more \
                 than the limit of {MEMORY_LIMIT}"
            )));
        }
        let words = frame_bytes / 8;
        // As freshly allocated, zeroed blocks, without the allocations.
        let Scratch { frames, local, table, vframe } = s;
        frames.clear();
        frames.resize(n_states as usize * words, 0);
        local.clear();
        let local = aligned(local, local_bytes.div_ceil(8));
        table.clear();
        vframe.clear();
        for m in mems {
            let MemKind::Table(t) = m.kind else { continue };
            debug_assert_eq!(t as usize, table.len());
            let r = match (m.param, m.local) {
                (Some(p), _) => match bound[p] {
                    Bound::Buffer(b) => MemRef { ptr: buffers[b].ptr, len: buffers[b].len as u64 },
                    // SAFETY: bind_args checked that the range lies within the buffer.
                    Bound::Range { buffer, offset, len } => MemRef {
                        ptr: unsafe {
                            buffers[buffer].ptr.add(offset * buffers[buffer].elem.size_bytes())
                        },
                        len: len as u64,
                    },
                    Bound::Scalar(_) => MemRef { ptr: std::ptr::null_mut(), len: 0 },
                },
                (None, Some((off, count))) => MemRef {
                    // SAFETY: `off` is within the local block, which has `local_bytes`.
                    ptr: unsafe { (local.as_mut_ptr() as *mut u8).add(off) },
                    len: count as u64,
                },
                (None, None) => MemRef { ptr: std::ptr::null_mut(), len: 0 },
            };
            table.push(r);
        }
        for f in frames.chunks_mut(words.max(1)) {
            for (p, slot) in self.prog.param_slots().iter().enumerate() {
                if let (Some(s), Bound::Scalar(bits)) = (slot, bound[p]) {
                    f[*s as usize / 8] = bits;
                }
            }
        }
        let limits = Limits {
            steps_left: std::cell::Cell::new(opts.max_loop_iterations.unwrap_or(u64::MAX)),
            deadline: opts.deadline,
            cancel: opts.cancel.clone(),
        };
        // The first back-edge asks the helper, which applies the limits.
        let mut ctx = Ctx::new(launch, table.as_ptr(), &limits, alone);
        let start = Instant::now();
        // Launches whose groups are one row of whole batches run many groups per call of
        // the vector code: the consecutive groups of a row of groups (all of them in 1-D)
        // are one contiguous run of global_id(0), their other ids the same.
        let spans = self.spmd.filter(|v| {
            lens_fit
                && !v.per_group
                && v.n_barriers == 0
                && l[0].is_multiple_of(8)
                && l[1] * l[2] == 1
        });
        let region_spans = self
            .spmd
            .as_ref()
            .and_then(|v| v.regions.as_deref())
            .filter(|_| lens_fit && l[0].is_multiple_of(8) && l[1] * l[2] == 1);
        let end = groups.end.min(launch.group_count());
        // How many groups from `linear` on one call of span code runs (`accessed`: the
        // tables its unchecked accesses use): the consecutive groups of its row of groups
        // whose every access is in bounds (the bounds check, hoisted out of the work-items),
        // at most SPAN_ITEMS work-items between two limit checks; 0 if not even the first.
        let span_len = |accessed: &[u32], linear: u64| {
            let gx = linear % g[0];
            let base = launch.offset[0] as u64 + gx * l[0];
            let fit = accessed
                .iter()
                .map(|&t| table.get(t as usize).map_or(0, |m| m.len.saturating_sub(base)))
                .min()
                .unwrap_or(u64::MAX);
            (fit / l[0]).min(end - linear).min(g[0] - gx).min((SPAN_ITEMS / l[0]).max(1))
        };
        // Sets the ids of the first group of a span starting at `linear`.
        let enter_span = |ctx: &mut Ctx, linear: u64| {
            let (gx, gy, gz) = (linear % g[0], linear / g[0] % g[1], linear / (g[0] * g[1]));
            ctx.group_id = [gx, gy, gz];
            ctx.base = [
                launch.offset[0] as u64 + gx * l[0],
                launch.offset[1] as u64 + gy * l[1],
                launch.offset[2] as u64 + gz * l[2],
            ];
            self.set_ids(ctx, launch, 0);
        };
        let mut linear = groups.start;
        while linear < end {
            if let Some(v) = spans {
                let n = span_len(&v.accessed, linear);
                if n > 0 {
                    enter_span(&mut ctx, linear);
                    if limits_hit(&mut ctx) {
                        return Err(self.fault_in(sc, &ctx, table, &ranges, start));
                    }
                    let vframe = aligned(vframe, v.vframe_bytes.div_ceil(4));
                    vframe[..8].copy_from_slice(&abi::IOTA);
                    ctx.span = n * l[0];
                    // SAFETY: the vector code reads the lane constant at the vector frame's
                    // start; every access is at a global_id(0) below `fit` (checked above).
                    let stop = unsafe { v.call(&mut ctx, frames, vframe) };
                    if stop != 0 {
                        return Err(self.fault_at(&v.sites, &v.mems, &ctx, table, &ranges, start));
                    }
                    count_lane_groups(n);
                    linear += n;
                    continue;
                }
            }
            if let Some(rc) = region_spans {
                // Consecutive groups of a row of groups, each one row, whose unchecked
                // accesses are all in bounds: several per call of the region code.
                let n = span_len(&rc.accessed, linear);
                if n > 0 {
                    enter_span(&mut ctx, linear);
                    if limits_hit(&mut ctx) {
                        return Err(self.fault_in(sc, &ctx, table, &ranges, start));
                    }
                    local.fill(0);
                    let (f, v) = (&mut *frames, &mut *vframe);
                    self.vector_regions(rc, &mut ctx, launch, f, v, table, &ranges, start, n)?;
                    count_lane_groups(n);
                    linear += n;
                    continue;
                }
            }
            ctx.group_id = [linear % g[0], linear / g[0] % g[1], linear / (g[0] * g[1])];
            local.fill(0);
            ctx.base = std::array::from_fn(|d| {
                launch.offset[d] as u64 + ctx.group_id[d] * launch.local[d] as u64
            });
            self.set_ids(&mut ctx, launch, 0);
            // Limits are also checked between groups, so that a huge launch of loop-free
            // code can be stopped; this also refills the back-edge budget.
            if limits_hit(&mut ctx) {
                return Err(self.fault_in(sc, &ctx, table, &ranges, start));
            }
            let vector = self.spmd.filter(|v| {
                let last = ctx.base[0] + launch.local[0] as u64 - 1;
                lens_fit
                    && launch.local[0].is_multiple_of(8)
                    && v.accessed
                        .iter()
                        .all(|&t| table.get(t as usize).is_some_and(|m| last < m.len))
            });
            if vector.is_some() {
                count_lane_groups(1);
            }
            let regions = vector.and_then(|v| v.regions.as_deref()).filter(|rc| {
                let last = ctx.base[0] + launch.local[0] as u64 - 1;
                l[1] * l[2] == 1
                    && rc
                        .accessed
                        .iter()
                        .all(|&t| table.get(t as usize).is_some_and(|m| last < m.len))
            });
            let r = if let Some(v) = regions {
                self.vector_regions(v, &mut ctx, launch, frames, vframe, table, &ranges, start, 1)
            } else if let Some(v) = vector.filter(|v| v.n_barriers > 0) {
                self.vector_rounds(v, &mut ctx, launch, frames, vframe, table, &ranges, start)
            } else if let Some(v) = vector {
                let vframe = aligned(vframe, v.vframe_bytes.div_ceil(4));
                vframe[..8].copy_from_slice(&abi::IOTA);
                ctx.span = l[0];
                // Code that runs every row of its group itself: one call from the first.
                let calls = if v.rows { 1 } else { l[1] * l[2] };
                for row in 0..calls {
                    let (y, z) = (row % l[1], row / l[1]);
                    ctx.local_id = [0, y, z];
                    ctx.global_id = [ctx.base[0], ctx.base[1] + y, ctx.base[2] + z];
                    // SAFETY: every access of the vector code is at global_id(0) of a
                    // buffer longer than the row's last global_id(0) (checked above).
                    let stop = unsafe { v.call(&mut ctx, frames, vframe) };
                    if stop != 0 {
                        return Err(self.fault_at(&v.sites, &v.mems, &ctx, table, &ranges, start));
                    }
                }
                Ok(())
            } else if let Some(sc) = sc {
                if sc.n_barriers == 0 {
                    // The generated code loops over the group's work-items itself.
                    self.set_ids(&mut ctx, launch, 0);
                    let f = frames.as_mut_ptr() as *mut u8;
                    // SAFETY: the frame has frame_bytes; ctx's table points at live memory.
                    let stop = unsafe { sc.call(&mut ctx, f) };
                    if stop == 0 {
                        Ok(())
                    } else {
                        Err(self.fault(sc, &ctx, table, &ranges, start))
                    }
                } else {
                    self.rounds(sc, &mut ctx, launch, frames, words, table, &ranges, start)
                }
            } else {
                Err(self.launch_error("internal error: a group the vector code cannot run".into()))
            };
            r?;
            linear += 1;
        }
        Ok(())
    }

    pub(super) fn set_ids(&self, ctx: &mut Ctx, launch: &Launch, item: u64) {
        let l = launch.local.map(u64::from);
        let lid = [item % l[0], item / l[0] % l[1], item / (l[0] * l[1])];
        ctx.local_id = lid;
        ctx.global_id =
            std::array::from_fn(|d| launch.offset[d] as u64 + ctx.group_id[d] * l[d] + lid[d]);
    }

    pub(super) fn launch_error(&self, message: String) -> LaunchError {
        self.error(None, message)
    }

    pub(super) fn error(&self, work_item: Option<[u32; 3]>, message: String) -> LaunchError {
        LaunchError { kernel: self.kernel.name().to_string(), work_item, message }
    }
}

/// The limit helper between calls of the code (which also refills the back-edge budget):
/// true if the launch must stop (why is in `ctx`).
fn limits_hit(ctx: &mut Ctx) -> bool {
    // SAFETY: every context of this module points at `Limits` living for its launch.
    unsafe { abi::limit_hit(ctx) != 0 }
}

/// Copies for `threads - 1` threads of a buffer of `len` elements cost at most one
/// addition per work-item of the launch.
fn worth_copying(len: usize, threads: u64, items: u64) -> bool {
    (len as u64).saturating_mul(threads.saturating_sub(1)) <= items
}
