//! What generated code runs against: the context block it reads ids and memory from, the
//! executable mapping that holds it, and the Rust helpers it calls for operations whose exact
//! semantics are easiest to get from the interpreter's own functions.

use kiln_ir::eval;
use kiln_ir::expr::canonical_int;
use kiln_ir::launch::Launch;
use kiln_ir::{BinOp, Imm, Intrinsic, Scalar};

use super::X86Error;

/// One memory object as generated code sees it: base address and length in elements.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MemRef {
    /// The first byte.
    pub ptr: *mut u8,
    /// The number of elements.
    pub len: u64,
}

/// The block generated code addresses through `r12`. Field offsets are fixed by `repr(C)`
/// and named by the `OFF_*` constants the code generator uses. The executor sets the ids
/// before each call and reads the fault fields after a stop.
#[repr(C)]
pub struct Ctx {
    /// The work-item's (or the batch's first work-item's) `local_id`.
    pub local_id: [u64; 3],
    /// Its `global_id`.
    pub global_id: [u64; 3],
    /// Its work-group's `group_id`.
    pub group_id: [u64; 3],
    /// The launch's `global_size`.
    pub global_size: [u64; 3],
    /// The launch's `local_size`.
    pub local_size: [u64; 3],
    /// The launch's `num_groups`.
    pub num_groups: [u64; 3],
    /// The launch's `global_offset`.
    pub offset: [u64; 3],
    /// Loop back-edges left before the limit helper is called.
    pub budget: u64,
    /// Why the code returned [`STOP_ERROR`]: one of the `ERR_*` codes.
    pub err_code: u64,
    /// The site (index into the program's site table) of the error.
    pub err_site: u64,
    /// The offending value (an index, a step), canonical bits.
    pub err_val: u64,
    /// The memory table: one [`MemRef`] per global parameter and local array.
    pub mems: *const MemRef,
    /// Limit state read only by [`limit_hit`].
    pub limits: *const Limits,
    /// Work-items per group (kernels without barriers loop over them in generated code).
    pub items: u64,
    /// `global_offset + group_id * local_size` per dimension: the group's first global id.
    pub base: [u64; 3],
    /// The helpers generated code calls, by the `HELPER_*` indices (filled by [`Ctx::new`]).
    pub helpers: [usize; 4],
    /// Work-items the vector code runs in one call (a multiple of 8), from `global_id[0]`.
    pub span: u64,
    /// `kiln_ir::eval::math::SINCOS_TABLE`, which the vector code of `sin`/`cos` gathers
    /// from (an address in the context keeps the code position-independent).
    pub math_table: *const f64,
    /// 1 when this thread runs every work-group of the launch (nothing else may touch its
    /// buffers meanwhile, the executor's promise), so that atomics on buffers need no `lock`
    /// prefix; else 0.
    pub alone: u64,
    /// `kiln_ir::eval::math64::SINCOS_TABLE`, the f64 `sin`/`cos` table (as
    /// [`Ctx::math_table`]; last, so that the earlier fields keep their offsets).
    pub math64_table: *const f64,
}

impl Ctx {
    /// A context for running groups of `launch`: sizes and offset from the launch, ids 0,
    /// the memory table `mems` (one entry per table slot of the code's memory table), the
    /// limits the limit helper applies, and `alone` (see [`Ctx::alone`]). Its budget makes
    /// the first back-edge call the limit helper.
    pub fn new(launch: &Launch, mems: *const MemRef, limits: *const Limits, alone: bool) -> Ctx {
        Ctx {
            local_id: [0; 3],
            global_id: [0; 3],
            group_id: [0; 3],
            global_size: launch.global.map(u64::from),
            local_size: launch.local.map(u64::from),
            num_groups: launch.groups().map(u64::from),
            offset: launch.offset.map(u64::from),
            budget: 1,
            err_code: 0,
            err_site: 0,
            err_val: 0,
            mems,
            limits,
            items: launch.group_size(),
            base: [0; 3],
            helpers: helpers(),
            span: 0,
            math_table: kiln_ir::eval::math::SINCOS_TABLE.as_ptr(),
            alone: u64::from(alone),
            math64_table: kiln_ir::eval::math64::SINCOS_TABLE.as_ptr(),
        }
    }
}

/// [`limit_hit`]'s index in [`Ctx::helpers`].
pub(crate) const HELPER_LIMIT: usize = 0;
/// [`cast_helper`]'s index.
pub(crate) const HELPER_CAST: usize = 1;
/// [`intrinsic_helper`]'s index.
pub(crate) const HELPER_INTRINSIC: usize = 2;
/// [`binary_helper`]'s index.
pub(crate) const HELPER_BINARY: usize = 3;

/// The helper table a context starts with.
pub(crate) fn helpers() -> [usize; 4] {
    [
        limit_hit as *const () as usize,
        cast_helper as *const () as usize,
        intrinsic_helper as *const () as usize,
        binary_helper as *const () as usize,
    ]
}

pub(crate) const OFF_LOCAL_ID: i32 = 0;
pub(crate) const OFF_GLOBAL_ID: i32 = 24;
pub(crate) const OFF_GROUP_ID: i32 = 48;
pub(crate) const OFF_GLOBAL_SIZE: i32 = 72;
pub(crate) const OFF_LOCAL_SIZE: i32 = 96;
pub(crate) const OFF_NUM_GROUPS: i32 = 120;
pub(crate) const OFF_OFFSET: i32 = 144;
pub(crate) const OFF_BUDGET: i32 = 168;
pub(crate) const OFF_ERR_CODE: i32 = 176;
pub(crate) const OFF_ERR_SITE: i32 = 184;
pub(crate) const OFF_ERR_VAL: i32 = 192;
pub(crate) const OFF_MEMS: i32 = 200;
pub(crate) const OFF_ITEMS: i32 = 216;
pub(crate) const OFF_BASE: i32 = 224;
pub(crate) const OFF_HELPERS: i32 = 248;
pub(crate) const OFF_SPAN: i32 = 280;
pub(crate) const OFF_MATH_TABLE: i32 = 288;
pub(crate) const OFF_ALONE: i32 = 296;
pub(crate) const OFF_MATH64_TABLE: i32 = 304;

/// Return value of generated code for a fault; the details are in the context.
pub const STOP_ERROR: u64 = u64::MAX;

/// An access out of bounds (site, index).
pub const ERR_OOB: u64 = 1;
/// Integer division or remainder by zero (site).
pub const ERR_DIV_ZERO: u64 = 2;
/// A `for` step that is not positive (site, step).
pub const ERR_FOR_STEP: u64 = 3;
/// The back-edge limit was reached.
pub const ERR_STEPS: u64 = 4;
/// The deadline passed.
pub const ERR_DEADLINE: u64 = 5;
/// The launch was cancelled through its flag.
pub const ERR_CANCELLED: u64 = 6;
/// A vector access whose index is not a multiple of its lanes (site, index).
pub const ERR_MISALIGNED: u64 = 7;

/// How many back-edges run between two looks at the clock and the cancel flag.
pub(crate) const CHECK_EVERY: u64 = 4096;

/// The limits of one launch, consulted every few thousand back-edges by [`limit_hit`]
/// (which generated code calls through the context's helper table).
pub struct Limits {
    /// Back-edges left (whole launch on this thread), or `u64::MAX` for no limit.
    pub steps_left: std::cell::Cell<u64>,
    /// The instant after which the launch stops.
    pub deadline: Option<std::time::Instant>,
    /// Set (by any thread) to stop the launch.
    pub cancel: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// Called by generated code when `budget` reaches zero (and by the executor between
/// work-groups): refills it, or records why the launch must stop and returns nonzero.
///
/// # Safety
/// `ctx` is a live context whose `limits` points at live [`Limits`].
pub unsafe extern "sysv64" fn limit_hit(ctx: *mut Ctx) -> u64 {
    // SAFETY: generated code passes the context it was called with, which outlives the call.
    let ctx = unsafe { &mut *ctx };
    // SAFETY: the executor points `limits` at a `Limits` that lives for the whole launch.
    let limits = unsafe { &*ctx.limits };
    let stop = |ctx: &mut Ctx, code| {
        ctx.err_code = code;
        1
    };
    if let Some(c) = &limits.cancel {
        if c.load(std::sync::atomic::Ordering::Relaxed) {
            return stop(ctx, ERR_CANCELLED);
        }
    }
    if let Some(d) = limits.deadline {
        if std::time::Instant::now() >= d {
            return stop(ctx, ERR_DEADLINE);
        }
    }
    let left = limits.steps_left.get();
    if left == 0 {
        return stop(ctx, ERR_STEPS);
    }
    let chunk = left.min(CHECK_EVERY);
    if left != u64::MAX {
        limits.steps_left.set(left - chunk);
    }
    ctx.budget = chunk;
    0
}

/// The scalar type with the given index in [`Scalar::ALL`].
fn scalar_of(id: u64) -> Scalar {
    Scalar::ALL[id as usize % Scalar::ALL.len()]
}

/// The index of `t` in [`Scalar::ALL`], as generated code passes it to helpers.
pub(crate) fn scalar_id(t: Scalar) -> u64 {
    Scalar::ALL.iter().position(|&s| s == t).unwrap_or(0) as u64
}

/// A value in generated code's form (canonical 64-bit pattern: integers sign- or
/// zero-extended, bools 0/1, floats their IEEE bits zero-extended) as an immediate.
pub(crate) fn imm_of(t: Scalar, bits: u64) -> Imm {
    match t {
        Scalar::Bool => Imm::Bool(bits != 0),
        _ => Imm::from_bits(t, bits),
    }
}

/// An immediate in generated code's value form (canonical 64-bit pattern: integers sign- or
/// zero-extended, bools 0/1, floats their IEEE bits zero-extended), as scalar arguments sit
/// in frames.
pub fn bits_of(i: Imm) -> u64 {
    match i {
        Imm::Bool(b) => b as u64,
        Imm::Int(t, bits) => canonical_int(t, bits),
        Imm::Float(..) => i.to_bits(),
    }
}

/// `bits as to`, `bits` being a value of type `from`: the interpreter's cast.
pub(crate) extern "sysv64" fn cast_helper(from: u64, to: u64, bits: u64) -> u64 {
    bits_of(eval::cast(scalar_of(to), imm_of(scalar_of(from), bits)))
}

/// An intrinsic on values of type `ty` (unused arguments are ignored): the interpreter's
/// result. Only called for verified kernels, whose intrinsics are defined on their types.
pub(crate) extern "sysv64" fn intrinsic_helper(op: u64, ty: u64, a: u64, b: u64, c: u64) -> u64 {
    let op = Intrinsic::ALL[op as usize % Intrinsic::ALL.len()];
    let t = scalar_of(ty);
    let all = [imm_of(t, a), imm_of(t, b), imm_of(t, c)];
    let n = op.arity().min(3);
    eval::intrinsic(op, &all[..n]).map(bits_of).unwrap_or(0)
}

/// A binary operator on values of type `ty` (a verified kernel's, never a division by
/// zero, which generated code checks first): the interpreter's result.
pub(crate) extern "sysv64" fn binary_helper(op: u64, ty: u64, a: u64, b: u64) -> u64 {
    let op = BinOp::ALL[op as usize % BinOp::ALL.len()];
    let t = scalar_of(ty);
    eval::binary(op, imm_of(t, a), imm_of(t, b)).map(bits_of).unwrap_or(0)
}

/// The index of `op` in [`Intrinsic::ALL`].
pub(crate) fn intrinsic_id(op: Intrinsic) -> u64 {
    Intrinsic::ALL.iter().position(|&o| o == op).unwrap_or(0) as u64
}

/// The index of `op` in [`BinOp::ALL`].
pub(crate) fn binop_id(op: BinOp) -> u64 {
    BinOp::ALL.iter().position(|&o| o == op).unwrap_or(0) as u64
}

/// Machine code in its own mapping: written while writable, then made read + execute (never
/// both). On drop the mapping goes back to a small pool of page mappings that later
/// programs reuse (made writable again, written, made executable): a fresh mapping's system
/// calls and page faults would be a good part of the compile time of a small kernel.
pub(crate) struct ExecCode {
    map: Option<memmap2::Mmap>,
    len: usize,
}

/// Mappings of dropped programs, for reuse; at most [`POOL_MAX`].
static POOL: std::sync::Mutex<Vec<memmap2::Mmap>> = std::sync::Mutex::new(Vec::new());
const POOL_MAX: usize = 64;
/// Code mappings are whole multiples of this (the page size on x86-64 hosts).
const PAGE: usize = 4096;

impl ExecCode {
    /// Maps `code` (position independent: it runs wherever it lands) executable.
    pub fn new(code: &[u8]) -> Result<ExecCode, X86Error> {
        let size = code.len().max(1).next_multiple_of(PAGE);
        let reused = {
            let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
            pool.iter().position(|m| m.len() == size).map(|i| pool.swap_remove(i))
        };
        let mut map = match reused {
            Some(m) => m
                .make_mut()
                .map_err(|e| X86Error::Memory(format!("cannot make code writable: {e}")))?,
            None => memmap2::MmapMut::map_anon(size)
                .map_err(|e| X86Error::Memory(format!("cannot map {size} bytes for code: {e}")))?,
        };
        map[..code.len()].copy_from_slice(code);
        // int3 after the code, over whatever an earlier program left there.
        map[code.len()..].fill(0xcc);
        let map = map
            .make_exec()
            .map_err(|e| X86Error::Memory(format!("cannot make code executable: {e}")))?;
        Ok(ExecCode { map: Some(map), len: code.len() })
    }

    /// The address of the first byte.
    pub fn addr(&self) -> *const u8 {
        self.bytes().as_ptr()
    }

    /// The code bytes.
    pub fn bytes(&self) -> &[u8] {
        self.map.as_ref().map_or(&[], |m| &m[..self.len])
    }
}

impl Drop for ExecCode {
    fn drop(&mut self) {
        // Nothing runs this code any more (its program is being dropped).
        if let Some(m) = self.map.take() {
            let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
            if pool.len() < POOL_MAX {
                pool.push(m);
            }
        }
    }
}

// Generated code addresses the context by these offsets: keep them the struct's.
const _: () = {
    use std::mem::offset_of;
    assert!(offset_of!(Ctx, local_id) == OFF_LOCAL_ID as usize);
    assert!(offset_of!(Ctx, global_id) == OFF_GLOBAL_ID as usize);
    assert!(offset_of!(Ctx, group_id) == OFF_GROUP_ID as usize);
    assert!(offset_of!(Ctx, global_size) == OFF_GLOBAL_SIZE as usize);
    assert!(offset_of!(Ctx, local_size) == OFF_LOCAL_SIZE as usize);
    assert!(offset_of!(Ctx, num_groups) == OFF_NUM_GROUPS as usize);
    assert!(offset_of!(Ctx, offset) == OFF_OFFSET as usize);
    assert!(offset_of!(Ctx, budget) == OFF_BUDGET as usize);
    assert!(offset_of!(Ctx, err_code) == OFF_ERR_CODE as usize);
    assert!(offset_of!(Ctx, err_site) == OFF_ERR_SITE as usize);
    assert!(offset_of!(Ctx, err_val) == OFF_ERR_VAL as usize);
    assert!(offset_of!(Ctx, mems) == OFF_MEMS as usize);
    assert!(offset_of!(Ctx, items) == OFF_ITEMS as usize);
    assert!(offset_of!(Ctx, base) == OFF_BASE as usize);
    assert!(offset_of!(Ctx, helpers) == OFF_HELPERS as usize);
    assert!(offset_of!(Ctx, span) == OFF_SPAN as usize);
    assert!(offset_of!(Ctx, math_table) == OFF_MATH_TABLE as usize);
    assert!(offset_of!(Ctx, math64_table) == OFF_MATH64_TABLE as usize);
    assert!(offset_of!(Ctx, alone) == OFF_ALONE as usize);
};
