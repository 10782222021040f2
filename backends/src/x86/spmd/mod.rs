//! SPMD over 8 AVX2 lanes: eight consecutive work-items of a row run at once, one lane
//! each, and one call runs a whole span of them (a row of a work-group, or for launches of
//! one-row groups many work-groups of a row of groups back to back).
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
//! global, local and private `f32`/`i32`/`u32` memory at `i32`/`u32` indices (at most six
//! buffers with checked accesses). Anything else — conversions between 64-bit integers and f32, f64 `sin`/`cos`, a barrier
//! under divergent control — makes the whole kernel
//! run on the scalar code, and [`generate`] says why (`kiln emit --target x86` prints
//! it).
//!
//! ## Code shape
//!
//! * Registers, not memory: expression temporaries are `ymm0..ymm7` (Sethi-Ullman order),
//!   `let`s and `var`s live in `ymm8..ymm14` while those last (then in 32-byte slots of
//!   the vector frame, `r15`), and `ymm15` holds the batch's `global_id(0)` lanes.
//! * Uniform values once per call: scalar parameters, constants, ids and sizes are
//!   broadcast into the vector frame before the loop, and top-level `let`s computed from
//!   them only are computed there too.
//! * Accesses by index shape: at exactly `global_id(0)`, the memory operand of the
//!   instruction that uses it, bounds-checked once per span by the driver; at a
//!   batch-uniform index, one scalar load broadcast to the lanes; at `global_id(0)` or
//!   `local_id(0)` plus a uniform offset (contiguous), a masked vector load or store
//!   (`vmaskmovps`); anywhere else a gather (`vgatherdps`) or per-lane scalar stores in
//!   lane order (so when lanes store to the same element, the highest lane — the
//!   interpreter's last work-item — wins).
//! * Control by divergence: a branch or loop condition that is batch-uniform is an
//!   ordinary jump on lane 0; a divergent `if` is a pair of lane masks, a divergent
//!   `while` a loop mask iterated until no lane is left; stores under a mask are masked,
//!   assignments to divergent `var`s are blends. A branch no lane takes is jumped over; a
//!   divergent `if` outside other divergent control also has an unmasked copy of each
//!   (small) side, run by batches whose lanes all take that side (`ctl.rs`).
//!   Batch-uniform `for` loops count in a 64-bit frame word (no wrapping, as the
//!   interpreter's `for`).
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
mod ctl;
mod expr;
mod int64;
mod math;
mod math64;
mod mem;
mod narrow;
mod ops;
mod region;
mod scalar;
mod uniform;
mod wide64;

use std::collections::HashSet;

use iced_x86::code_asm::*;
use iced_x86::IcedError;
use kiln_ir::{Kernel, Scalar, Stmt, StmtNode, Type, Var};

use super::gen::{MemInfo, Site};
use super::rt;

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
pub(crate) const IOTA: [u32; 8] = [0, 1, 2, 3, 4, 5, 6, 7];

/// `vcmpps`/`vcmppd` predicates (ordered and quiet unless named otherwise).
const CMP_EQ_OQ: i32 = 0x00;
const CMP_LT_OQ: i32 = 0x11;
const CMP_LE_OQ: i32 = 0x12;
const CMP_UNORD_Q: i32 = 0x03;
const CMP_NEQ_UQ: i32 = 0x04;
const CMP_ORD_Q: i32 = 0x07;
const CMP_GE_OQ: i32 = 0x1d;
const CMP_GT_OQ: i32 = 0x1e;

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
const YMM: [AsmRegisterYmm; 16] = [
    ymm0, ymm1, ymm2, ymm3, ymm4, ymm5, ymm6, ymm7, ymm8, ymm9, ymm10, ymm11, ymm12, ymm13, ymm14,
    ymm15,
];
const XMM: [AsmRegisterXmm; 16] = [
    xmm0, xmm1, xmm2, xmm3, xmm4, xmm5, xmm6, xmm7, xmm8, xmm9, xmm10, xmm11, xmm12, xmm13, xmm14,
    xmm15,
];
/// Registers holding buffer bases for the whole span (`rax`, `r10`, `r11` stay scratch).
const BASES: [AsmRegister64; 6] = [rcx, rdx, rsi, rdi, r8, r9];
/// Vector frame slots the code itself uses: the span's end (`global_id(0)` bound).
const END_SLOT: i32 = 32;
/// The slot saying which barrier a batch waits at (0: none, start from the top); the
/// fifth slot after the end slot (alive mask, two spill slots and the faulting lane come
/// first).
pub(crate) const RESUME_SLOT: i32 = END_SLOT + 32 * 5;
/// A qword in the resume slot of a call's first frame: the stop every batch of the call
/// must reach (as the group's first batch did this round), or `u64::MAX` when the call's
/// first batch sets it (see `rounds.rs`).
pub(crate) const ROUND_SLOT: i32 = RESUME_SLOT + 8;
/// A qword after [`ROUND_SLOT`]: nonzero when the call is the group's only row, so that
/// the code itself runs round after round until the row finishes (see `ctl.rs`).
pub(crate) const LOOP_SLOT: i32 = ROUND_SLOT + 8;
/// Returned when a batch stopped elsewhere than the round's stop (barrier divergence):
/// the batch's first `global_id(0)` is in the context, its stop in its resume slot.
pub(crate) const STOP_DIVERGE: u64 = u64::MAX - 1;

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
    /// qword (signed).
    consts: Vec<((u64, u8), i32)>,
    /// Top-level `let`s computed before the loop: statement address, location.
    hoisted: Vec<(usize, Loc, Option<i32>)>,
    /// The current control mask's slot (`None`: every lane of the batch).
    mask: Option<i32>,
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

/// The vector code for `k`, or why it has none; `param_slots` are the scalar frame's
/// parameter slots (the vector code reads scalar parameters from the scalar frame).
///
/// The function takes (ctx, scalar frame, vector frame), runs `ctx.span` work-items (a
/// multiple of 8) from `global_id(0)` = `ctx.global_id[0]`, of one row, and returns 0, or
/// [`rt::STOP_ERROR`] with the error in the context (`global_id[0]` the faulting lane's).
pub(crate) fn generate(
    k: &Kernel,
    param_slots: &[Option<i32>],
    mems: &[MemInfo],
) -> Result<Result<Spmd, String>, IcedError> {
    generate_as(k, param_slots, mems, false)
}

/// The region-loop code of a kernel with barriers (`region.rs`), or why it has none: one
/// call runs a whole work-group of one row (`ctx.span` its size, `ctx.global_id` its first
/// work-item), with the group frame followed by one save frame per batch, the frames'
/// stride in bytes in the group frame's [`ROUND_SLOT`].
pub(crate) fn generate_regions(
    k: &Kernel,
    param_slots: &[Option<i32>],
    mems: &[MemInfo],
) -> Result<Result<Spmd, String>, IcedError> {
    generate_as(k, param_slots, mems, true)
}

fn generate_as(
    k: &Kernel,
    param_slots: &[Option<i32>],
    mems: &[MemInfo],
    regions: bool,
) -> Result<Result<Spmd, String>, IcedError> {
    match generate_inner(k, param_slots, mems, regions) {
        Ok(s) => Ok(Ok(s)),
        Err(Fail::No(why)) => Ok(Err(why)),
        Err(Fail::Asm(e)) => Err(e),
    }
}

fn generate_inner(
    k: &Kernel,
    param_slots: &[Option<i32>],
    mems: &[MemInfo],
    regions: bool,
) -> R<Spmd> {
    let mut a = CodeAssembler::new(64)?;
    let ret = a.create_label();
    let fault_exit = a.create_label();
    let n_barriers = super::gen::count_barriers(k.body());
    if regions && n_barriers == 0 {
        return no("no barriers");
    }
    let resumes = (0..n_barriers).map(|_| a.create_label()).collect();
    let next_batch = a.create_label();
    let mut v = V {
        a,
        lets: Vec::new(),
        next: END_SLOT + 32,
        next_reg: LET_REGS.start,
        params: Vec::new(),
        bufs: Vec::new(),
        mems: mems.to_vec(),
        based: Vec::new(),
        accessed: Vec::new(),
        consts: Vec::new(),
        hoisted: Vec::new(),
        mask: None,
        dctl: 0,
        div_vars: uniform::divergent_vars(k),
        may_fault: false,
        alive: 0,
        fault_lane: 0,
        tmp_i: 0,
        tmp_v: 0,
        save: 0,
        sites: Vec::new(),
        stubs: Vec::new(),
        ret,
        fault_exit,
        per_group: false,
        resumes,
        next_batch,
        resume: 0,
        barriers: 0,
        atomic_problem: atomic::batch_order_problem(k),
        privs: Vec::new(),
        fma: false,
        scratch64: None,
        last_label_at: None,
        regions: regions.then(|| region::Regions::new(k)),
    };
    if regions {
        v.per_group = true;
    }
    if n_barriers > 0 {
        // Values live across a barrier stay in the batch's vector frame: no let registers.
        v.next_reg = GID;
    }
    let mut table = 0;
    for (p, slot) in k.params().iter().zip(param_slots) {
        match (p.ty(), slot) {
            (Type::Ptr(_, e), _) if elem_type(e) => {
                v.bufs.push((p.name().to_string(), table));
                table += 1;
            }
            (Type::Ptr(..), _) => table += 1,
            (_, Some(s)) if value_type(p.ty()) => v.params.push((p.name().to_string(), *s)),
            _ => {}
        }
    }
    // Local arrays (kernel scope only), after the parameters in declaration order, as the
    // scalar code's table has them.
    let mut local_bytes = 0;
    for s in k.body().stmts() {
        if let StmtNode::Alloc { var, count } = s.node() {
            if let Type::Ptr(kiln_ir::AddrSpace::Local, elem) = var.ty() {
                if elem_type(elem) {
                    v.bufs.push((var.name().to_string(), table));
                }
                v.mems.push(MemInfo {
                    name: var.name().to_string(),
                    elem,
                    kind: super::gen::MemKind::Table(table),
                    param: None,
                    local: Some((local_bytes, *count)),
                });
                local_bytes += super::gen::array_bytes(elem, *count);
                table += 1;
                // Local arrays start zeroed in every group: one group per call.
                v.per_group = true;
            }
        }
    }
    // Private array accesses are always checked.
    v.may_fault = expr::needs_alive(k.body().stmts(), &expr::gid0_names(k.body().stmts()))
        || mem::has_private(k.body());
    v.alive = v.slot();
    v.tmp_i = v.slot();
    v.tmp_v = v.slot();
    v.fault_lane = v.slot();
    v.resume = v.slot();
    debug_assert_eq!(v.resume, RESUME_SLOT);
    v.save = v.next;
    v.next += 32 * 8;
    let a = &mut v.a;
    a.push(rbp)?;
    a.mov(rbp, rsp)?;
    a.push(rbx)?;
    a.push(r12)?;
    a.push(r13)?;
    a.push(r14)?;
    a.push(r15)?;
    a.mov(r12, rdi)?;
    a.mov(r13, rsi)?;
    a.mov(r15, rdx)?;
    if n_barriers > 0 {
        // The round's stop, for every batch of this call, and the call's first frame (two
        // pushes keep the stack's 16-byte alignment, which the limit stub's call needs).
        a.mov(rax, qword_ptr(r15 + ROUND_SLOT))?;
        a.push(rax)?;
        a.push(r15)?;
    }
    a.mov(r14, qword_ptr(r12 + rt::OFF_MEMS))?;
    a.mov(rbx, qword_ptr(r12 + rt::OFF_GLOBAL_ID))?;
    a.mov(rax, qword_ptr(r12 + rt::OFF_SPAN))?;
    a.add(rax, rbx)?;
    a.mov(qword_ptr(r15 + END_SLOT), rax)?;
    // Broadcast constants and load buffer bases (emitted last, when all are known), then
    // come back for the uniform `let`s.
    let init = a.create_label();
    let mut hoist = a.create_label();
    // A batch resuming after a barrier has its broadcasts and hoisted lets in its own
    // frame already: only the base registers are loaded again.
    let bases_only = a.create_label();
    // Where the next batch of a call with barriers starts (its frame and ids set).
    let mut dispatch = a.create_label();
    if n_barriers > 0 && !regions {
        v.bind(&mut dispatch)?;
        v.a.cmp(dword_ptr(r15 + RESUME_SLOT), 0)?;
        v.a.jne(bases_only)?;
    }
    let a = &mut v.a;
    a.jmp(init)?;
    v.bind(&mut hoist)?;
    // Top-level lets of values fixed for the call: computed once, before the loop. Other
    // top-level names are in scope as divergent, so that a later let naming one (through
    // shadowing) is not hoisted.
    for s in k.body().stmts() {
        let other = match s.node() {
            StmtNode::Let { var, value } if value_type(var.ty()) && v.invariant(value) => {
                let (loc, dword) = v.bind_let(var, value, Kind::Uniform, true)?;
                v.hoisted.push((s.addr(), loc, dword));
                None
            }
            StmtNode::Let { var, .. } | StmtNode::Decl { var, .. } => Some(var),
            StmtNode::Call { result: Some(r), .. } => Some(r),
            _ => None,
        };
        if let Some(var) = other {
            let name = var.name().to_string();
            let loc = Loc::Slot(0);
            v.lets.push(Bound { name, loc, kind: Kind::Div, decl: Some(0), dword: None });
        }
    }
    v.lets.clear();
    let mut lanes = v.a.create_label();
    v.bind(&mut lanes)?;
    v.a.vmovd(xmm15, ebx)?;
    v.a.vpbroadcastd(ymm15, xmm15)?;
    v.a.vpaddd(ymm15, ymm15, ymmword_ptr(r15))?;
    let mut resumed = v.a.create_label();
    if n_barriers > 0 && !regions {
        v.bind(&mut resumed)?;
    }
    // A batch stopped at a barrier resumes after it (its state is in its vector frame).
    for (k, &l) in v.resumes.iter().enumerate().filter(|_| !regions) {
        v.a.cmp(dword_ptr(r15 + v.resume), k as i32 + 1)?;
        v.a.je(l)?;
    }
    let mut top = v.a.create_label();
    v.bind(&mut top)?;
    let mut fault_exit = v.fault_exit;
    if v.may_fault {
        let ones = v.imm_slot(u32::MAX);
        v.a.vmovups(ymm0, ymmword_ptr(r15 + ones))?;
        v.a.vmovups(ymmword_ptr(r15 + v.alive), ymm0)?;
        v.a.mov(dword_ptr(r15 + v.fault_lane), 8)?;
    }
    let mut eight = 0;
    if regions {
        v.group_block(k.body().stmts())?;
        v.next_group(init, local_bytes, &mems_first_local(&v.mems))?;
        v.a.xor(eax, eax)?;
    } else {
        v.block(k.body().stmts())?;
        if n_barriers > 0 {
            // Finished (see `barrier`).
            v.a.mov(dword_ptr(r15 + RESUME_SLOT), 0)?;
        }
        if v.may_fault {
            v.a.cmp(dword_ptr(r15 + v.fault_lane), 8)?;
            v.a.jne(fault_exit)?;
        }
        if n_barriers > 0 {
            v.a.xor(eax, eax)?;
            v.a.jmp(v.next_batch)?;
        }
        eight = v.imm_slot(8);
        let a = &mut v.a;
        a.add(rbx, 8)?;
        a.vpaddd(ymm15, ymm15, ymmword_ptr(r15 + eight))?;
        a.cmp(rbx, qword_ptr(r15 + END_SLOT))?;
        a.jb(top)?;
        a.xor(eax, eax)?;
    }
    let mut ret = v.ret;
    v.bind(&mut ret)?;
    let a = &mut v.a;
    a.vzeroupper()?;
    a.lea(rsp, qword_ptr(rbp - 40))?;
    a.pop(r15)?;
    a.pop(r14)?;
    a.pop(r13)?;
    a.pop(r12)?;
    a.pop(rbx)?;
    a.pop(rbp)?;
    a.ret()?;
    v.bind(&mut fault_exit)?;
    v.a.mov(eax, dword_ptr(r15 + v.fault_lane))?;
    v.a.add(rax, rbx)?;
    v.a.mov(qword_ptr(r12 + rt::OFF_GLOBAL_ID), rax)?;
    v.a.mov(rax, rt::STOP_ERROR)?;
    v.a.jmp(v.ret)?;
    v.stubs()?;
    let mut init = init;
    v.bind(&mut init)?;
    for &((key, what), off) in &v.consts {
        match what {
            1 => v.a.vbroadcastss(ymm0, dword_ptr(r13 + key as i32))?,
            2 => v.a.vbroadcastss(ymm0, dword_ptr(r12 + key as i32))?,
            4 => {
                v.a.mov(rax, key)?;
                v.a.vmovq(xmm0, rax)?;
                v.a.vpbroadcastq(ymm0, xmm0)?;
            }
            5 => {
                v.a.mov(rax, qword_ptr(r14 + (key as i32 * 16 + 8)))?;
                v.a.sub(rax, 8)?;
                v.a.mov(qword_ptr(r15 + off), rax)?;
                continue;
            }
            3 => {
                v.a.mov(eax, dword_ptr(r14 + (key as i32 * 16 + 8)))?;
                v.a.sub(eax, 1)?;
                v.a.xor(eax, 0x8000_0000u32 as i32)?;
                v.a.vmovd(xmm0, eax)?;
                v.a.vpbroadcastd(ymm0, xmm0)?;
            }
            _ => {
                v.a.mov(eax, key as u32)?;
                v.a.vmovd(xmm0, eax)?;
                v.a.vpbroadcastd(ymm0, xmm0)?;
            }
        }
        v.a.vmovups(ymmword_ptr(r15 + off), ymm0)?;
    }
    for (&t, &r) in v.based.iter().zip(&BASES) {
        v.a.mov(r, qword_ptr(r14 + (t as i32 * 16)))?;
    }
    v.a.jmp(hoist)?;
    let mut bases_only = bases_only;
    v.bind(&mut bases_only)?;
    for (&t, &r) in v.based.iter().zip(&BASES) {
        v.a.mov(r, qword_ptr(r14 + (t as i32 * 16)))?;
    }
    v.a.jmp(lanes)?;
    if n_barriers > 0 && !regions {
        v.next_batch_code(dispatch, lanes, resumed, eight)?;
    }
    Ok(Spmd {
        asm: v.a,
        vframe_bytes: v.next as usize,
        accessed: v.accessed,
        sites: v.sites,
        per_group: v.per_group,
        mems: v.mems,
        local_bytes,
        n_barriers,
        fma: v.fma,
    })
}

/// The memory-table index of the local array at the local block's start, if any.
fn mems_first_local(mems: &[MemInfo]) -> Option<u32> {
    mems.iter().find_map(|m| match (m.local, m.kind) {
        (Some((0, _)), super::gen::MemKind::Table(t)) => Some(t),
        _ => None,
    })
}

impl V {
    /// The end of a group's region code: while the call has groups left (the qword at
    /// [`LOOP_SLOT`], counted down), the next group of the row: ids in the context advanced
    /// by one group, its local block zeroed, and the code from the broadcasts on (`init`)
    /// again.
    fn next_group(&mut self, init: CodeLabel, local_bytes: usize, first: &Option<u32>) -> R<()> {
        let mut finish = self.a.create_label();
        self.a.dec(qword_ptr(r15 + LOOP_SLOT))?;
        self.a.je(finish)?;
        self.a.mov(rax, qword_ptr(r12 + rt::OFF_SPAN))?;
        self.a.add(qword_ptr(r12 + rt::OFF_GLOBAL_ID), rax)?;
        self.a.add(qword_ptr(r12 + rt::OFF_BASE), rax)?;
        self.a.add(qword_ptr(r12 + rt::OFF_GROUP_ID), 1)?;
        if let (Some(t), true) = (first, local_bytes > 0) {
            // The driver's block holds local_bytes rounded up to 8.
            let words = local_bytes.div_ceil(8) as i32;
            self.a.mov(r10, qword_ptr(r14 + (*t as i32 * 16)))?;
            self.a.vpxor(ymm0, ymm0, ymm0)?;
            if words / 4 <= 16 {
                for i in 0..words / 4 {
                    self.a.vmovups(ymmword_ptr(r10 + 32 * i), ymm0)?;
                }
            } else {
                let mut zero = self.a.create_label();
                self.a.mov(r11, (words / 4) as u64)?;
                self.bind(&mut zero)?;
                self.a.vmovups(ymmword_ptr(r10), ymm0)?;
                self.a.add(r10, 32)?;
                self.a.dec(r11)?;
                self.a.jne(zero)?;
                self.a.sub(r10, 32 * (words / 4))?;
            }
            for i in (words / 4) * 4..words {
                self.a.mov(qword_ptr(r10 + 8 * i), 0)?;
            }
        } else if local_bytes > 0 {
            return no("internal: local arrays without one at the block's start");
        }
        self.a.mov(rbx, qword_ptr(r12 + rt::OFF_GLOBAL_ID))?;
        self.a.mov(rax, qword_ptr(r12 + rt::OFF_SPAN))?;
        self.a.add(rax, rbx)?;
        self.a.mov(qword_ptr(r15 + END_SLOT), rax)?;
        // Every lane alive again (a fault ended the call).
        self.a.jmp(init)?;
        self.bind(&mut finish)
    }

    fn find(&self, name: &str) -> Option<&Bound> {
        self.lets.iter().rev().find(|b| b.name == name)
    }

    fn buf(&self, v: &Var) -> Option<u32> {
        self.bufs.iter().find(|(n, _)| n == v.name()).map(|b| b.1)
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
        self.a.set_label(label)?;
        Ok(())
    }

    /// Binds a `let` of `value` to a location (a free `let` register, else a slot) and
    /// computes it there; a `let` of `global_id(0)` is the lane-id register.
    fn bind_let(
        &mut self,
        var: &Var,
        value: &kiln_ir::Expr,
        kind: Kind,
        hoisting: bool,
    ) -> R<(Loc, Option<i32>)> {
        let name = var.name().to_string();
        if kind == Kind::Gid0 {
            self.lets.push(Bound { name, loc: Loc::Reg(GID), kind, decl: None, dword: None });
            return Ok((Loc::Reg(GID), None));
        }
        if !value_type(var.ty()) {
            return no(format!("`{}` has type {}", var.name(), var.ty()));
        }
        if wide64::is_64(var.ty()) {
            return Ok((self.bind_let64(var, value, kind)?, None));
        }
        let mut dword = None;
        if kind == Kind::Uniform && scalar::int_type(var.ty()) && self.gpr_ok(value) {
            // Uniform index arithmetic stays scalar, in a dword; it is broadcast too when
            // that is cheap: into a free let register, or once per call (hoisted).
            self.gpr(value)?;
            let off = self.slot();
            self.a.mov(dword_ptr(r15 + off), eax)?;
            dword = Some(off);
            if !LET_REGS.contains(&self.next_reg) && !hoisting {
                self.lets.push(Bound { name, loc: Loc::Scalar(off), kind, decl: None, dword });
                return Ok((Loc::Scalar(off), dword));
            }
            self.a.vmovd(xmm0, eax)?;
            self.a.vpbroadcastd(ymm0, xmm0)?;
        } else {
            self.expr_top(value, 0)?;
        }
        let loc = if LET_REGS.contains(&self.next_reg) {
            self.next_reg += 1;
            self.a.vmovaps(YMM[self.next_reg - 1], ymm0)?;
            Loc::Reg(self.next_reg - 1)
        } else {
            let off = self.slot();
            self.a.vmovups(ymmword_ptr(r15 + off), ymm0)?;
            Loc::Slot(off)
        };
        self.lets.push(Bound { name, loc, kind, decl: None, dword });
        Ok((loc, dword))
    }

    /// The current lane mask (control mask and alive lanes) into `ymm{r}`.
    fn active(&mut self, r: usize) -> R<()> {
        match (self.mask, self.may_fault) {
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

    /// Generates a block under the current mask.
    fn block(&mut self, stmts: &[Stmt]) -> R<()> {
        let (mark, regs) = (self.lets.len(), self.next_reg);
        for s in stmts {
            if let Some(&(_, loc, dword)) = self.hoisted.iter().find(|h| h.0 == s.addr()) {
                // Computed before the loop; in scope from here on.
                if let StmtNode::Let { var, .. } = s.node() {
                    let name = var.name().to_string();
                    let kind = Kind::Uniform;
                    self.lets.push(Bound { name, loc, kind, decl: None, dword });
                }
                continue;
            }
            self.stmt(s)?;
        }
        self.lets.truncate(mark);
        self.next_reg = regs;
        Ok(())
    }

    fn stmt(&mut self, s: &Stmt) -> R<()> {
        match s.node() {
            StmtNode::Let { var, value } => {
                // Pure, and its loads masked: computed in every lane.
                let kind = self.kind(value);
                self.bind_let(var, value, kind, false)?;
            }
            StmtNode::Decl { var, init } if wide64::is_64(var.ty()) => {
                let kind = self.var_kind(var, init)?;
                self.decl64(var, init, kind)?;
            }
            StmtNode::Decl { var, init } => {
                if !value_type(var.ty()) {
                    return no(format!("`{}` has type {}", var.name(), var.ty()));
                }
                let kind = self.var_kind(var, init)?;
                let loc = if kind == Kind::Uniform && scalar::int_type(var.ty()) {
                    // Every assignment is uniform too (see uniform.rs): a scalar variable.
                    let off = self.slot();
                    self.uniform_to_eax(init)?;
                    self.a.mov(dword_ptr(r15 + off), eax)?;
                    Loc::Scalar(off)
                } else if LET_REGS.contains(&self.next_reg) {
                    // In a free `let` register while its scope lasts, as a `let` (loop-carried
                    // values, accumulators): assignments are moves or blends there.
                    self.expr_top(init, 0)?;
                    self.next_reg += 1;
                    self.a.vmovaps(YMM[self.next_reg - 1], ymm0)?;
                    Loc::Reg(self.next_reg - 1)
                } else {
                    let off = self.slot();
                    self.expr_top(init, 0)?;
                    self.a.vmovups(ymmword_ptr(r15 + off), ymm0)?;
                    Loc::Slot(off)
                };
                let name = var.name().to_string();
                let dword = match loc {
                    Loc::Scalar(off) => Some(off),
                    _ => None,
                };
                self.lets.push(Bound { name, loc, kind, decl: Some(self.dctl), dword });
            }
            StmtNode::Assign { var, value } => self.assign(var, value)?,
            StmtNode::Store { buf, index, value } => self.store(buf, index, value)?,
            StmtNode::If { cond, then, otherwise } => {
                self.if_stmt(cond, then.stmts(), otherwise.as_ref().map(|o| o.stmts()))?
            }
            StmtNode::While { cond, body } => self.while_loop(cond, body.stmts())?,
            StmtNode::For { var, lo, hi, step, body } => {
                self.for_loop(var, lo, hi, step, body.stmts())?
            }
            StmtNode::Block(v) => self.block(v)?,
            StmtNode::Call { func, result, args } => match func.kind() {
                kiln_ir::FuncKind::Barrier(_) => self.barrier()?,
                // Execution is in order per batch: memory is always consistent.
                kiln_ir::FuncKind::Fence(_) => {}
                kiln_ir::FuncKind::Atomic(op) => self.atomic(op, result.as_ref(), args)?,
                kiln_ir::FuncKind::Matrix(_) => return no("matrix operations"),
            },
            StmtNode::Alloc { var, count } => {
                if let Type::Ptr(kiln_ir::AddrSpace::Private, _) = var.ty() {
                    self.alloc_private(var, *count)?;
                } else if self.buf(var).is_none() {
                    return no(format!("array `{}` ({})", var.name(), var.ty()));
                }
            }
            StmtNode::VecStore { .. } => return no("a vector store"),
        }
        Ok(())
    }

    /// The kind of a new `var`: uniform if the analysis says so (checked against its
    /// initial value).
    fn var_kind(&self, var: &Var, init: &kiln_ir::Expr) -> R<Kind> {
        if self.div_vars.contains(var.name()) {
            return Ok(Kind::Div);
        }
        if self.kind(init) != Kind::Uniform {
            return no(format!("internal: `{}` is not uniform", var.name()));
        }
        Ok(Kind::Uniform)
    }
}
