//! SPMD over 8 AVX2 lanes: eight consecutive work-items of a row run at once, one lane
//! each, and one call runs a whole span of them (a row of a work-group, every row of it in
//! order for a kernel that reads an id of dimension 1 or 2 (`function.rs`, `next_row`), or
//! for launches of one-row groups many work-groups of a row of groups back to back).
//!
//! ## The class
//!
//! A kernel gets vector code when its body is `let`s, `var`s and assignments, stores,
//! `if`/`else`, `while` and `for` (with batch-uniform bounds and step, see `uniform.rs`, a
//! scalar counter; else a counter per lane under a loop mask), barriers under
//! batch-uniform control, local and private arrays, and atomics whose order between
//! work-items cannot show (`atomic.rs`), on `f32`, `i32`, `u32` and `bool` values
//! (`bool`s as lane masks) and `i8`, `u8`, `i16`, `u16` values extended to 32-bit lanes,
//! `f16` values as their bits (`narrow.rs`; in buffer memory only), and `f64`, `i64` and
//! `u64` values four lanes per register, two registers a value (`wide64.rs`): every operator (`/` and `%` on integers per lane, shifts by
//! per-lane counts), `select`, the casts between these types and the intrinsics `min`,
//! `max`, `abs`, `sqrt`, `fma`, `floor`, `ceil`, `trunc` (`ops.rs`) and `exp`, `log`, `sin`,
//! `cos` (`math.rs`), with operands that
//! are scalar parameters, constants, built-in ids and sizes, and loads and stores of
//! global, local and private `f32`/`i32`/`u32` memory at `i32`/`u32` indices. Anything else — a barrier
//! under divergent control, say — makes the whole kernel
//! run on the scalar code, and [`generate`] says why (`kiln emit --target x86` prints
//! it).
//!
//! ## Code shape
//!
//! * Registers, not memory: expression temporaries are `ymm0..ymm7` (Sethi-Ullman order;
//!   an expression needing more spills the registers below a node that does not fit,
//!   `spill.rs`),
//!   `let`s and `var`s live in `ymm8..ymm14` while those last (64-bit ones in two; then
//!   in slots of the vector frame, `r15`), as do a divergent loop's mask and per-lane
//!   counter while it runs, and `ymm15` holds the batch's `global_id(0)` lanes. Uniform
//!   integer `var`s, `let`s and `for` counters live in the base registers no buffer takes
//!   (`scalar.rs`). Kernels with barriers keep names in the frame, but for those of
//!   blocks without barriers that declare a `var` ([`V::block`]).
//! * Elementwise kernels on 8- and 16-bit data first run blocks of 32 (16) work-items one
//!   per byte (word) of a register, before the batch loop takes the rest (`packed.rs`).
//! * Short `for` loops with constant bounds are unrolled, the counter a constant in each
//!   copy of the body (`short.rs`).
//! * Uniform values once per call: scalar parameters, constants, ids and sizes are
//!   broadcast into the vector frame before the loop, and top-level `let`s computed from
//!   them only are computed there too.
//! * Accesses by index shape: at exactly `global_id(0)`, the memory operand of the
//!   instruction that uses it, bounds-checked once per span by the driver; at a
//!   batch-uniform index, one scalar load broadcast to the lanes; at `global_id(0)` or
//!   `local_id(0)` plus a uniform offset (contiguous), a masked vector load or store
//!   (`vmaskmovps`); anywhere else a gather (`vgatherdps`) or per-lane scalar stores in
//!   lane order (so when lanes store to the same element, the highest lane — the
//!   interpreter's last work-item — wins), except in loops where each lane walks its own
//!   row (`x[b + j]`): eight iterations at a time, rows transposed in registers
//!   (`blocked.rs`).
//! * Control by divergence: a branch or loop condition that is batch-uniform is an
//!   ordinary jump on lane 0; a divergent `if` is a pair of lane masks, a divergent
//!   `while` a loop mask iterated until no lane is left; stores under a mask are masked,
//!   assignments to divergent `var`s are blends. A branch no lane takes is jumped over; a
//!   divergent `if` outside other divergent control also has an unmasked copy of each
//!   (small) side, run by batches whose lanes all take that side (`ctl.rs`).
//!   Batch-uniform `for` loops count in 64 bits (no wrapping, as the interpreter's
//!   `for`), in a free general-purpose register or else a frame word.
//!
//! ## Faults, exactly as the interpreter reports them
//!
//! Checked accesses compare every active lane's index with the buffer length. When lanes
//! fault, the lowest one, L, is the first the interpreter would report (work-items run in
//! order, and every earlier batch finished): the code records L's error (access, index)
//! and clears lanes L..7 from the batch's *alive* mask, which every later store and loop
//! mask is ANDed with, so L stops there and the lanes before it run on (one of them may
//! still fault later, and is then the one reported). At the end of the batch a recorded
//! fault stops the launch. Masked-off lanes never touch memory (masked loads and stores,
//! gathers with a mask). Lanes after L may have stored before L faulted, which the
//! interpreter would not have done: after an error the buffers are unspecified, as after
//! an error of a parallel launch. Loop back-edges count down the same budget as the scalar
//! code (one per batch iteration), so limits, deadlines and cancellation apply.
//!
//! ## Why this is exact
//!
//! `exp`, `log`, `sin` and `cos` of f32 lanes (`math.rs`) and `exp` and `log` of f64
//! lanes (`math64.rs`) are the interpreter's own operation
//! sequences (`kiln_ir::eval::math`), instruction for instruction.
//!
//! f32 lane arithmetic and comparisons are the scalar code's IEEE operations (quiet
//! predicates, no contraction); integer lanes wrap at 32 bits; the operations of `ops.rs`
//! are `kiln_ir::eval`'s bit for bit (NaN and signed-zero rules of `min`/`max`,
//! saturating casts, integer division through an exact f64 quotient). Where two operands
//! can fault, the left one is computed first, so that a lane faulting in both reports the
//! interpreter's fault. `let`s under a branch are
//! computed in every lane: they are pure, loads in them are masked, and only stores have
//! effects. Lanes of one batch run interleaved, which for a race-free kernel (the only
//! kind with a defined result) gives the interpreter's result: no work-item reads what
//! another one of the same launch writes without a barrier.

mod atomic;
mod batches;
mod blocked;
mod blockio;
mod branch;
mod bytecache;
mod clamped;
mod cond;
mod contig64;
mod counted;
mod ctl;
mod div64const;
mod divconst;
mod divuniform;
mod divuniform64;
mod expr;
mod forward;
mod function;
mod gather8;
mod grouprows;
mod guarded;
mod hoist;
mod ifstore;
mod inplace64;
mod int64;
mod ivs;
mod known;
mod lane0;
mod loadgroup;
mod loading;
mod math;
mod math64;
mod mem;
mod memo;
mod merge;
mod mul64const;
mod mulconst;
mod narrow;
mod near;
mod offsetvars;
mod ops;
mod packed;
mod private;
mod privindex;
mod proven;
mod region;
mod rows;
mod rowwise;
mod saves;
mod scalar;
mod short;
mod spill;
mod stmt;
mod storegroup;
mod strided;
mod trig64;
mod uniform;
mod unrolled;
mod vectors;
mod wide64;
mod zeroing;

pub(crate) use counted::counted;

pub(crate) use function::{generate, generate_regions};
pub(crate) use ifstore::merge_if_stores;
pub(crate) use ivs::affine_ivs;
pub(crate) use offsetvars::offset_vars;
pub(crate) use vectors::split as split_vectors;

use std::collections::HashSet;

use iced_x86::code_asm::*;
use iced_x86::IcedError;
use kiln_ir::{Scalar, Type, Var};

use super::gen::{MemInfo, Site};

/// A qualifying kernel's vector code, before assembly.
pub(crate) struct Spmd {
    pub asm: CodeAssembler,
    /// Bytes of the vector frame (the lane-index constant, then 32-byte slots).
    pub vframe_bytes: usize,
    /// Memory-table entries accessed at exactly `global_id(0)` without a check in the code
    /// (the driver checks their lengths against the span).
    pub accessed: Vec<u32>,
    /// The fault sites of the checked accesses and loops.
    pub sites: Vec<Site>,
    /// True if the code reads `local_id(0)` or `group_id(0)`, so one call must not span
    /// several work-groups.
    pub per_group: bool,
    /// The memory table: the parameters', then the local arrays (laid out as the scalar
    /// code lays them out).
    pub mems: Vec<MemInfo>,
    /// Bytes of the local arrays.
    pub local_bytes: usize,
    /// Barrier statements: a call then runs one batch up to its next barrier.
    pub n_barriers: u32,
    /// True if the code has FMA3 instructions.
    pub fma: bool,
    /// True if one call runs every row of its work-group (see `SpmdCode::rows`).
    pub rows: bool,
}

/// Why a kernel gets no vector code, or an assembler error.
pub(crate) enum Fail {
    Asm(IcedError),
    No(String),
}

impl From<IcedError> for Fail {
    fn from(e: IcedError) -> Fail {
        Fail::Asm(e)
    }
}

type R<T> = Result<T, Fail>;

fn no<T>(why: impl Into<String>) -> R<T> {
    Err(Fail::No(why.into()))
}

/// The lane-index constant `[0, 1, ..., 7]` at the start of the vector frame.
pub const IOTA: [u32; 8] = [0, 1, 2, 3, 4, 5, 6, 7];

/// `vcmpps`/`vcmppd` predicates (ordered and quiet unless named otherwise).
const CMP_EQ_OQ: i32 = 0x00;
const CMP_LT_OQ: i32 = 0x11;
const CMP_LE_OQ: i32 = 0x12;
const CMP_UNORD_Q: i32 = 0x03;
const CMP_NEQ_UQ: i32 = 0x04;
const CMP_ORD_Q: i32 = 0x07;
const CMP_GE_OQ: i32 = 0x1d;
const CMP_GT_OQ: i32 = 0x1e;

/// The `vcmpps`/`vcmppd` predicate of comparison `op`: the quiet ones that are false on
/// NaN, except `!=` (true on NaN), as the scalar comparisons are.
fn float_pred(op: kiln_ir::BinOp) -> i32 {
    match op {
        kiln_ir::BinOp::Eq => CMP_EQ_OQ,
        kiln_ir::BinOp::Ne => CMP_NEQ_UQ,
        kiln_ir::BinOp::Lt => CMP_LT_OQ,
        kiln_ir::BinOp::Le => CMP_LE_OQ,
        kiln_ir::BinOp::Gt => CMP_GT_OQ,
        _ => CMP_GE_OQ,
    }
}

/// True if this CPU has FMA3 (every AVX2 CPU kiln meets does; the check keeps code
/// generation honest on one that does not).
fn has_fma() -> bool {
    std::arch::is_x86_feature_detected!("fma")
}

/// Expression temporaries: `ymm0..ymm{TEMPS-1}`.
const TEMPS: usize = 8;
/// The register holding the batch's `global_id(0)` lanes.
const GID: usize = 15;
/// Registers for `let`s: `ymm8..ymm14`.
const LET_REGS: std::ops::Range<usize> = TEMPS..GID;
/// In region loops (where barrier kernels keep no `let` registers), the register of a
/// `let` of `local_id(0)`, recomputed by each region's batch.
const LID: usize = GID - 1;
const YMM: [AsmRegisterYmm; 16] = [
    ymm0, ymm1, ymm2, ymm3, ymm4, ymm5, ymm6, ymm7, ymm8, ymm9, ymm10, ymm11, ymm12, ymm13, ymm14,
    ymm15,
];
const XMM: [AsmRegisterXmm; 16] = [
    xmm0, xmm1, xmm2, xmm3, xmm4, xmm5, xmm6, xmm7, xmm8, xmm9, xmm10, xmm11, xmm12, xmm13, xmm14,
    xmm15,
];
/// Registers holding buffer bases for the whole span (`rax`, `r10`, `r11` stay scratch).
/// A kernel with more tables than these keeps the first five there and loads the base of
/// any other table into the last one at each access ([`V::resident_bases`]).
const BASES: [AsmRegister64; 6] = [rcx, rdx, rsi, rdi, r8, r9];
/// Vector frame slots the code itself uses: the span's end (`global_id(0)` bound).
const END_SLOT: i32 = 32;
/// The slot saying which barrier a batch waits at (0: none, start from the top); the
/// fifth slot after the end slot (alive mask, two spill slots and the faulting lane come
/// first).
pub const RESUME_SLOT: i32 = END_SLOT + 32 * 5;
/// A qword in the resume slot of a call's first frame: the stop every batch of the call
/// must reach (as the group's first batch did this round), or `u64::MAX` when the call's
/// first batch sets it (see the executor's rounds).
pub const ROUND_SLOT: i32 = RESUME_SLOT + 8;
/// A qword after [`ROUND_SLOT`]: nonzero when the call runs the whole group, so that the
/// code itself goes from row to row and round to round until the group finishes (see
/// `ctl.rs`, `grouprows.rs`); zero when it runs one round of the context's row.
pub const LOOP_SLOT: i32 = ROUND_SLOT + 8;
/// Returned when a batch stopped elsewhere than the round's stop (barrier divergence):
/// the batch's first `global_id(0)` is in the context, its stop in its resume slot.
pub const STOP_DIVERGE: u64 = u64::MAX - 1;

/// Where a `let` or `var` lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Loc {
    /// A `let` register.
    Reg(usize),
    /// A 32-byte slot of the vector frame.
    Slot(i32),
    /// A batch-uniform `i32`/`u32` value in the dword at this vector frame offset,
    /// computed and read by scalar (GPR) code (see `scalar.rs`).
    Scalar(i32),
}

/// What is known about a value's lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Exactly `global_id(0)`.
    Gid0,
    /// Lane k holds lane 0's value + k (wrapping): `global_id(0)` or `local_id(0)` plus a
    /// uniform value.
    Contig,
    /// All lanes equal.
    Uniform,
    /// Anything.
    Div,
}

/// A name in scope.
struct Bound {
    name: String,
    loc: Loc,
    kind: Kind,
    /// For `var`s, the divergent-control depth of the declaration.
    decl: Option<usize>,
    /// A batch-uniform `i32`/`u32` value's dword in the vector frame, for scalar code
    /// (`scalar.rs`); with `loc` a `Reg` or `Slot`, the value is also there in all lanes.
    dword: Option<i32>,
    /// For a `let` of an index at a constant stride of a contiguous one (`let p = 2 * i`,
    /// common subexpressions of the `-O` pipeline), the stride (`strided.rs`).
    stride: Option<u32>,
    /// For a divergent `let` whose value clamps consecutive lanes, that gathers indexed by
    /// it test their batch for consecutive indices (`clamped.rs`).
    clamped: bool,
}

impl Bound {
    /// `name` at `loc`, of `kind`: a `let`, with no dword, stride or clamp.
    fn new(name: String, loc: Loc, kind: Kind) -> Bound {
        Bound { name, loc, kind, decl: None, dword: None, stride: None, clamped: false }
    }
}

/// Out-of-line code, emitted after the function.
enum Stub {
    /// Lanes `f` (a mask register) fault at `site` with indices in register `idx`; `act`
    /// is the access's lane mask, narrowed to the lanes still alive afterwards.
    Fault { idx: usize, f: usize, act: usize, code: u64, site: u64, signed: bool, back: CodeLabel },
    /// The back-edge budget ran out.
    Limit { back: CodeLabel },
}

struct V {
    a: CodeAssembler,
    lets: Vec<Bound>,
    /// Next free vector frame offset.
    next: i32,
    /// Next free `let` register.
    next_reg: usize,
    /// Scalar parameters: name, frame slot.
    params: Vec<(String, i32)>,
    /// Pointer parameters of lane element types: name, table index.
    bufs: Vec<(String, u32)>,
    /// The kernel's memory table (for fault sites).
    mems: Vec<MemInfo>,
    /// Tables with a base register, in first-use order (the first six have one).
    based: Vec<u32>,
    /// Tables accessed unchecked at `global_id(0)`.
    accessed: Vec<u32>,
    /// Values broadcast before the loop and their slots; the key's second part says what
    /// the first is: 0 constant bits, 1 scalar frame slot, 2 context offset (a u64 field
    /// truncated to 32 bits), 3 table whose (length - 1) ^ sign bit is broadcast, 4 a
    /// 64-bit constant broadcast to the four qwords, 5 table whose length - 8 is the first
    /// qword (signed), [`CONST_LANES`] a lane mask whose bit k says lane k is set,
    /// [`strided::CONST_STRIDE`] a stride's permutation, [`strided::CONST_BYTES`] a `vpshufb` mask,
    /// [`storegroup::CONST_SHUFFLE`] a 32-byte one.
    consts: Vec<((u64, u8), i32)>,
    /// Top-level `let`s computed before the loop: statement address, location.
    hoisted: Vec<(usize, Loc, Option<i32>)>,
    /// The nested ones among them (`rowwise.rs`): statement addresses.
    row_lets: Vec<usize>,
    /// `let`s fixed for the call that can fault, computed by the first batch that reaches
    /// them (`memo.rs`): statement address, the flag's and the value's slots.
    memos: std::collections::HashMap<usize, (i32, i32)>,
    /// Comparisons in conditions of values fixed for the call, computed once before the
    /// loop (`hoist.rs`): expression address, slot of the lane mask.
    hoisted_conds: Vec<(usize, i32)>,
    /// Magic numbers of i32/u32 divisors fixed for the call, computed once per call
    /// (`divuniform.rs`): the division's node address, the slots of the broadcast multiplier
    /// and of the two shift counts (i64/u64: the first of its slots twice, `divuniform64.rs`).
    magics: Vec<(usize, i32, i32)>,
    /// `/` and `%` pairs that share one computation (`near.rs`).
    shares: near::Shares,
    /// Conditions whose lanes all hold in a range of batches fixed for the call, computed
    /// once per call (`hoist.rs`, [`V::hoist_ranges`]).
    hoisted_ranges: Vec<hoist::Range>,
    /// The parts of [`V::hoisted_ranges`] fixed for every row of a call that runs its
    /// group's rows (`hoist.rs`, [`V::hoist_call_ranges`]): computed once per call.
    call_ranges: Vec<hoist::CallRange>,
    /// The current control mask's slot (`None`: every lane of the batch).
    mask: Option<i32>,
    /// A control mask whose lanes are known as the code is generated (`known.rs`): its
    /// slot and lanes (bit k: lane k). It says which lanes the mask holds while `mask` is
    /// that slot, which lets accesses touch only those lanes' elements (`mem.rs`).
    const_mask: Option<(i32, u8)>,
    /// Divergent-control depth (divergent `if`s and `while`s around the code).
    dctl: usize,
    /// Names of `var`s that are not batch-uniform.
    div_vars: HashSet<String>,
    /// The code has checked accesses or loops (so it keeps the alive mask).
    may_fault: bool,
    alive: i32,
    fault_lane: i32,
    tmp_i: i32,
    tmp_v: i32,
    save: i32,
    sites: Vec<Site>,
    stubs: Vec<(CodeLabel, Stub)>,
    ret: CodeLabel,
    fault_exit: CodeLabel,
    per_group: bool,
    /// The resume point after each barrier, and the slot saying where to resume.
    resumes: Vec<CodeLabel>,
    /// Where a batch that stopped (at a barrier or the end, its stop in `eax`) hands over
    /// to the next batch of the call (see `ctl.rs`).
    next_batch: CodeLabel,
    resume: i32,
    /// Barriers generated so far.
    barriers: u32,
    /// Why the kernel's atomics cannot run in batch order, if they cannot (see
    /// `atomic.rs`).
    atomic_problem: Option<String>,
    /// Private arrays declared so far (see `mem.rs`).
    privs: Vec<Priv>,
    /// The code has FMA3 instructions.
    fma: bool,
    /// A 64-byte slot for f64 per-lane stores, once one needs it (`wide64.rs`).
    scratch64: Option<i32>,
    /// The instruction count where the last label was placed (two labels at one place
    /// need a `nop` between them).
    last_label_at: Option<usize>,
    /// Set when generating a group's region loops (`region.rs`).
    regions: Option<region::Regions>,
    /// The current region's bounds proof, if it has one (`proven.rs`).
    proven: Option<proven::Proven>,
    /// The accesses proven by the `local_id(0) >= e` guards around the code
    /// (`guarded.rs`).
    guarded: guarded::Guarded,
    /// In region loops, the fault marks ([`V::fault_mark`]) at the start of the current
    /// batch, while no loop has been entered since: see [`V::fresh`].
    batch_mark: Option<(usize, usize)>,
    /// Buffer parameters (by position) with a length every launch has at least (see
    /// [`generate`]).
    known: Vec<(usize, u32)>,
    /// The blocked accesses of the `for` loop whose chunk is being generated
    /// (`blocked.rs`).
    blocking: Option<blocked::Blocking>,
    /// The byte loads of the loop being generated that reuse their last gather's dwords
    /// (`bytecache.rs`).
    byte_cache: Option<bytecache::ByteCache>,
    /// Row prefetch decisions of the row-blocked loops generated so far (`blockio.rs`).
    row_reads: blockio::RowReads,
    /// Frame dwords (`for` counters' qwords) held in a general-purpose register while
    /// their name is in scope: the register is the value, the slot unused (`scalar.rs`).
    homes: Vec<(i32, AsmRegister64)>,
    /// Base registers no buffer takes, free for [`V::homes`].
    free_gprs: Vec<AsmRegister64>,
    /// The kernel's names of `global_id(0)` (`expr::gid0_names`).
    gid0: HashSet<String>,
    /// Lane-mask slots held in a `let` register instead while their loop runs (a
    /// divergent loop's mask, see `ctl.rs`): slot, register.
    vhomes: Vec<(i32, usize)>,
    /// Local-array values stored at constant displacements, still in registers
    /// (`forward.rs`).
    fwd: Vec<forward::Fwd>,
    /// The statement's expression needs more registers than there are: nodes that do not
    /// fit spill the registers below them (`spill.rs`).
    deep: bool,
    /// Frame slots for spilled registers, allocated as deeper spills need them.
    spill_slots: Vec<i32>,
    /// How many of [`V::spill_slots`] hold spilled registers now.
    spill_used: usize,
    /// In region loops, the register holding the batch's save frame's address while a
    /// region's batch loop runs (`region.rs`): the last of [`BASES`] when no table takes
    /// it, else `None` (the address then lives in `[rbp-48]`).
    save_ptr: Option<AsmRegister64>,
    /// The end of the `let` registers free for bindings (`next_reg..reg_end`): [`GID`], or
    /// [`LID`] in a region's batch loop (`region.rs`) and in a barrier kernel's block without
    /// barriers ([`V::block`]), whose register the `let` of `local_id(0)` keeps.
    reg_end: usize,
    /// The bodies of short loops copied with their counters' values (`short.rs`), alive
    /// while the code is generated.
    short: short::Cache,
    /// Stores whose values a group of stores that load (`loading.rs`) takes instead, in
    /// the order they run: by statement address, the frame slot the value goes to.
    capture: Vec<(usize, i32)>,
    /// The kernel has barriers, so its names live in the vector frame, not in `let`
    /// registers (which a block without barriers may then take, [`V::block`]).
    frame_names: bool,
    /// While set, [`V::gpr_ok`] and [`V::gpr`] also take loads that need no check
    /// ([`V::unchecked_load`]): lane 0's index of a contiguous load (`lane0.rs`).
    gpr_loads: bool,
}

/// A private array: element `j` of lane `k` is the dword at `off + 32 * j + 4 * k` of the
/// vector frame.
#[derive(Clone)]
struct Priv {
    name: String,
    elem: Scalar,
    off: i32,
    count: u32,
    /// Its position in the memory table (for fault sites).
    mem: u32,
}

/// The types of lane values in memory and parameters.
fn lane_type(t: Type) -> bool {
    matches!(t.scalar(), Some(Scalar::F32 | Scalar::I32 | Scalar::U32))
}

/// The types of `let`s and `var`s: lane types, `bool` as a lane mask, and 8/16-bit
/// integers extended to 32 bits (`narrow.rs`).
fn value_type(t: Type) -> bool {
    lane_type(t) || t == Type::BOOL || narrow::narrow(t).is_some() || wide64::is_64(t)
}

/// The element types of buffers the lane code accesses.
fn elem_type(e: Scalar) -> bool {
    let t = Type::Scalar(e);
    lane_type(t) || narrow::narrow(t).is_some() || wide64::is_64(t)
}

/// The kind of a [`V::const_slot`] key that is a constant lane mask (bit k of the key's
/// first part: lane k all ones), filled once per call.
const CONST_LANES: u8 = 6;

impl V {
    /// True if `let` register `r` may be handed out ([`V::reg_end`]).
    fn let_reg_free(&self, r: usize) -> bool {
        (LET_REGS.start..self.reg_end).contains(&r)
    }

    fn find(&self, name: &str) -> Option<&Bound> {
        self.lets.iter().rev().find(|b| b.name == name)
    }

    fn buf(&self, v: &Var) -> Option<u32> {
        self.bufs.iter().find(|(n, _)| n == v.name()).map(|b| b.1)
    }

    /// How many tables keep a base register for the whole span: all of them when they fit
    /// in [`BASES`]; otherwise all but the last register, which each access to a later
    /// table loads for itself (no code keeps it across another table's access).
    fn resident_bases(&self) -> usize {
        if self.bufs.len() > BASES.len() {
            BASES.len() - 1
        } else {
            BASES.len()
        }
    }

    fn param(&self, v: &Var) -> Option<i32> {
        self.params.iter().find(|(n, _)| n == v.name()).map(|p| p.1)
    }

    /// A fresh 32-byte vector frame slot.
    fn slot(&mut self) -> i32 {
        let off = self.next;
        self.next += 32;
        off
    }

    /// A vector frame slot holding `key` broadcast to every lane (filled before the loop).
    fn const_slot(&mut self, key: (u64, u8)) -> i32 {
        if let Some(&(_, off)) = self.consts.iter().find(|(k, _)| *k == key) {
            return off;
        }
        let off = self.slot();
        self.consts.push((key, off));
        off
    }

    fn imm_slot(&mut self, bits: u32) -> i32 {
        self.const_slot((bits as u64, 0))
    }

    /// Places `label` here (a `nop` first if the previous instruction already has a label).
    fn bind(&mut self, label: &mut CodeLabel) -> R<()> {
        // (Not a `nop` at every label: many are in loops, where it would cost an issue slot
        // per iteration.)
        let here = self.a.instructions().len();
        if self.last_label_at == Some(here) {
            self.a.nop()?;
        }
        self.last_label_at = Some(self.a.instructions().len());
        // (Control may reach a label from elsewhere, with other values in memory.)
        self.fwd_clear();
        self.a.set_label(label)?;
        Ok(())
    }

    /// The `let` register holding the lane-mask slot `m`, if one does.
    fn vhome(&self, m: i32) -> Option<usize> {
        self.vhomes.iter().rev().find(|h| h.0 == m).map(|h| h.1)
    }

    /// The control mask `m` into `ymm{r}` (a move from its register, else a load).
    fn mask_to(&mut self, m: i32, r: usize) -> R<()> {
        match self.vhome(m) {
            Some(x) => self.a.vmovaps(YMM[r], YMM[x])?,
            None => self.a.vmovups(YMM[r], ymmword_ptr(r15 + m))?,
        }
        Ok(())
    }

    /// True if every lane of the batch is active here, known as the code is generated: no
    /// control mask, and no lane can have faulted (see [`V::active`]).
    fn all_lanes_active(&self) -> bool {
        self.mask.is_none() && (!self.may_fault || self.fresh())
    }

    /// The current lane mask (control mask and alive lanes) into `ymm{r}`.
    fn active(&mut self, r: usize) -> R<()> {
        // (Where every lane is certainly alive, the alive mask is all ones.)
        let may_fault = self.may_fault && !self.fresh();
        let reg = self.mask.and_then(|m| self.vhome(m));
        match (self.mask, may_fault) {
            (Some(_), true) if reg.is_some() => {
                let x = YMM[reg.expect("a register")];
                self.a.vpand(YMM[r], x, ymmword_ptr(r15 + self.alive))?;
            }
            (Some(_), false) if reg.is_some() => {
                self.a.vmovaps(YMM[r], YMM[reg.expect("a register")])?
            }
            (Some(m), true) => {
                self.a.vmovups(YMM[r], ymmword_ptr(r15 + m))?;
                self.a.vpand(YMM[r], YMM[r], ymmword_ptr(r15 + self.alive))?;
            }
            (Some(m), false) => self.a.vmovups(YMM[r], ymmword_ptr(r15 + m))?,
            (None, true) => self.a.vmovups(YMM[r], ymmword_ptr(r15 + self.alive))?,
            (None, false) => {
                let ones = self.imm_slot(u32::MAX);
                self.a.vmovups(YMM[r], ymmword_ptr(r15 + ones))?;
            }
        }
        Ok(())
    }
}
