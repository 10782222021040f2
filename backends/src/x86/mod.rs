//! x86-64 machine code for kiln kernels, assembled in-process with iced-x86 (no LLVM, no
//! external assembler).
//!
//! [`compile`] lowers a verified kernel to a code object, an [`X86Program`]: one native
//! function that runs one work-item of a work-group from its resume point to the next
//! barrier or the end (the scalar code), 8-lane code where the kernel allows it, and the
//! tables and calling convention ([`abi`]) an executor needs to run them. The executor
//! (threads, the launch of work-groups, barrier rounds, fault reports) is the cpu device's,
//! in `kiln_runtime::device::cpu`, which runs a program over an nd-range with the
//! interpreter's call shape, schedule and errors.
//!
//! ## Design
//!
//! * **Work-items in a loop, barriers as resume points.** The work-items of a group run in
//!   linear local-id order, each until it reaches a barrier or finishes, then the next; when
//!   all wait at the same barrier they all resume (PoCL's work-item loops, with the region
//!   between two barriers run for every work-item in turn). Every IR value (`let`, `var`,
//!   loop counters and trip counts, atomic results) and every private array lives in the
//!   work-item's frame, so values live across a barrier are kept per work-item by
//!   construction, and barriers inside loops and uniform branches need nothing special. A
//!   group whose work-items disagree about the barrier is reported as the interpreter reports
//!   it ("barrier divergence"). Kernels without barriers reuse one frame for every work-item.
//! * **Local arrays** live in one per-group block, zeroed at the start of every group;
//!   private arrays are zeroed each time their declaration runs.
//! * **Code.** A simple, correct generator: expression values in `rax` (operands on the
//!   machine stack), statement results in frame slots. Integer arithmetic is 64-bit and
//!   re-wrapped to the type's width; floats use SSE scalar instructions (IEEE, round to
//!   nearest even, no contraction). Casts other than the plain ones, float `min`/`max`,
//!   `floor`/`ceil`/`trunc`, `fma` and the transcendental intrinsics call the interpreter's
//!   own scalar functions (`kiln_ir::eval`), so their values are the interpreter's
//!   exactly.
//! * **SPMD (AVX2).** Kernels on f32, i32 and u32 values — `let`s, `var`s, `if`s, loops,
//!   loads and stores anywhere in global buffers and local arrays, barriers — also get
//!   8-lane code (`spmd/`): eight work-items of a row per pass, values in YMM registers, the
//!   batch-uniform ones computed once and branched on with ordinary jumps, divergent `if`s
//!   and `while`s as lane masks, accesses at `global_id(0)` as memory operands, contiguous
//!   ones as masked vector accesses, others as gathers and per-lane scatters, every access
//!   but the first kind bounds-checked per lane and reported as the interpreter reports it.
//!   Kernels with barriers run groups of one row as region loops when the control
//!   around their barriers is the same in the whole group (`spmd/region.rs`: the code
//!   between barriers loops over the batches, several groups per call), other groups batch
//!   by batch, round by round (the executor's rounds).
//!   A group runs on the lanes when the CPU has AVX2, `local_size(0)` is a multiple of 8
//!   and its buffers fit (see docs/cpu.md); otherwise the scalar code runs it. 1-D launches
//!   without local arrays or group-dependent ids run up to 2^16 work-items of consecutive
//!   groups per call. Kernels outside the class (64-bit values, casts, atomics, private
//!   arrays, ...) run on the scalar code, and the disassembly says why. `spmd/mod.rs` says
//!   why the results are the scalar code's, bit for bit.
//! * **Compile time.** Instructions are built with iced-x86's code assembler and encoded in
//!   one pass (`encode.rs`: every branch `rel32`, patched when the labels are placed) rather
//!   than by iced-x86's multi-pass block encoder; code pages of dropped programs are reused.
//!   A kernel with vector code gets its scalar code when a launch first needs it (a group
//!   the lanes cannot run) or when it is disassembled, so building an elementwise kernel
//!   costs its vector code alone.
//! * **Persistence.** [`X86Program::to_image`] writes a program as bytes (both codes, an
//!   empty relocation list, the CPU features needed, the frame and fault tables) and
//!   [`X86Program::from_image`] maps them back without compiling (`image.rs`).
//! * **Memory.** Code lives in its own anonymous mapping (memmap2), written while writable,
//!   then made read + execute (never both); when the program is dropped the mapping goes to
//!   a small pool that later programs reuse (made writable, written, made executable again).
//!
//! ## Safety
//!
//! A kernel cannot crash the host: every load, store and atomic is checked against the
//! length of its buffer or array and reported as the interpreter reports it (kernel,
//! work-item, access, index, length); integer division and remainder test for zero first
//! (an error) and handle `i64::MIN / -1` (wraps) before `idiv` could fault. A runaway kernel
//! is stopped by a back-edge counter: every loop iteration counts down a budget, and when
//! it runs out a helper looks at the optional step limit, deadline and cancel flag
//! (the executor's run options). [`X86Options::unchecked`] drops the bounds checks: then a wild
//! index reads or writes wherever it points, so it is for trusted kernels only.
//!
//! ## Concurrency
//!
//! An [`X86Program`] is `Send + Sync` and holds no run state: every call of its code gets
//! its own context, frames and local block from the executor, so calls on different
//! buffers, and calls for disjoint work-groups of one launch, may run on different threads
//! at once. Atomics on buffers are lock-prefixed, so they are atomic across threads too,
//! unless the context says that one thread runs the whole launch ([`abi::Ctx::alone`]).
//!
//! ```
//! use kiln_backends::x86::{compile, X86Options};
//! let m = kiln_ir::parse_module(
//!     "kernel scale(x: ptr<global, f32>, a: f32) { let i: u32 = global_id(0); x[i] = x[i] * a; }",
//! ).unwrap();
//! let prog = compile(&m.kernels[0], &X86Options::default()).unwrap();
//! assert!(prog.code_size() > 0);
//! assert!(prog.disassemble().contains("; kernel `scale`"));
//! ```

pub mod abi;
mod disasm;
mod encode;
mod expr;
mod gen;
mod image;
mod rt;
mod spmd;
mod sums;
mod vector;

pub use image::cpu_has;

use std::fmt;

use kiln_ir::{Kernel, Verified};

use crate::target::{verified_kernel, BackendError, Emitted, ErrorKind, Lowering, Target};

use gen::MemInfo;
use rt::{Ctx, ExecCode};

/// Build options.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct X86Options {
    /// Run the default `-O` pipeline (`kiln_passes::pipeline::optimize`) first. Error
    /// messages stay the interpreter's on the source kernel (`kiln_passes::origin`).
    pub optimize: bool,
    /// Drop the bounds checks of loads, stores and atomics. An out-of-bounds index then
    /// touches whatever memory it points to: only for kernels known to be correct.
    pub unchecked: bool,
    /// Never use the 8-lane AVX2 code (see [`X86Program::has_spmd`]), only the scalar code.
    pub scalar: bool,
    /// Never compile the kernel for a launch's group size ([`X86Program::for_group`]):
    /// every launch runs the code compiled now (tests use it to run that code).
    pub general_groups: bool,
}

/// Why a kernel could not be compiled, inside the backend; it leaves as a [`BackendError`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum X86Error {
    /// The target machine is not x86-64, or lacks what the code needs.
    Unsupported(String),
    /// Mapping or protecting code memory failed.
    Memory(String),
    /// iced-x86 rejected the generated code (a bug in this backend).
    Internal(String),
}

impl fmt::Display for X86Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            X86Error::Unsupported(m) => write!(f, "unsupported: {m}"),
            X86Error::Memory(m) => write!(f, "code memory: {m}"),
            X86Error::Internal(m) => write!(f, "x86 backend internal error: {m}"),
        }
    }
}

impl std::error::Error for X86Error {}

impl X86Error {
    fn into_backend(self, kernel: &str) -> BackendError {
        let kind = match &self {
            X86Error::Unsupported(_) => ErrorKind::Unsupported,
            X86Error::Memory(_) | X86Error::Internal(_) => ErrorKind::Internal,
        };
        BackendError::new("x86", kernel, kind, self.to_string())
    }
}

/// The x86-64 target: one [`X86Program`] per kernel, for this machine. The build driver
/// runs `-O` first ([`X86Options::optimize`] is for [`compile`] alone); the code checks
/// every access itself, so the bounds sanitizer's rewrite is wanted only by
/// [`X86Options::unchecked`] builds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct X86(pub X86Options);

impl Target for X86 {
    type Output = Vec<X86Program>;
    fn name(&self) -> String {
        "x86".into()
    }
    fn lowering(&self) -> Lowering {
        Lowering {
            optimize: true,
            sanitize: self.0.unchecked,
            // Vector accesses stay whole to be checked whole (alignment), see vector.rs.
            vectors: crate::target::VectorLowering::Memory,
        }
    }
    fn emit(&self, module: &Verified) -> Result<Vec<X86Program>, BackendError> {
        module.kernels.iter().map(|k| compile_verified(k, &self.0)).collect()
    }
}

impl Emitted for Vec<X86Program> {
    fn listing(&self) -> String {
        self.iter().map(X86Program::disassemble).collect()
    }
}

impl From<iced_x86::IcedError> for X86Error {
    fn from(e: iced_x86::IcedError) -> X86Error {
        X86Error::Internal(e.to_string())
    }
}

/// A kernel compiled to x86-64 machine code. `Send + Sync`; see the module docs.
pub struct X86Program {
    kernel: Kernel,
    checked: bool,
    /// The scalar frame offsets of the scalar parameters.
    param_slots: Vec<Option<i32>>,
    /// The scalar code; for a kernel with vector code, compiled when first needed.
    scalar: std::sync::OnceLock<Result<ScalarCode, X86Error>>,
    spmd: Option<SpmdCode>,
    /// Why the kernel has no vector code (when it has none and it was asked for).
    no_spmd: Option<String>,
    /// The parameters summed per thread (`sums.rs`), and whether they are all the buffers
    /// atomics reach; found at the first launch on several threads.
    sums: std::sync::OnceLock<(Vec<usize>, bool)>,
    /// The kernel counting straight into a buffer instead of its local bins, which runs a
    /// launch that meets its conditions (`spmd/counted.rs`).
    counted: Option<Box<CountedCode>>,
    /// This kernel's programs with its work-group size fixed to a launch's, by that size
    /// (`None`: it could not be compiled), made at the first launch of the size
    /// ([`X86Program::for_group`]).
    fixed: std::sync::Mutex<Vec<(u32, Option<std::sync::Arc<X86Program>>)>>,
    /// Whether [`X86Program::for_group`] may compile programs: the kernel has region-loop
    /// code, fixes no group size, [`X86Options::general_groups`] is off, and there is a
    /// body to compile.
    resizable: bool,
}

/// At most this many group sizes get programs of their own ([`X86Program::for_group`]); a
/// launch of yet another size runs on the kernel's general code.
const MAX_FIXED_SIZES: usize = 8;

/// A program of [`spmd::counted`]'s kernel and when it runs instead of its parent's.
struct CountedCode {
    program: X86Program,
    /// The parameter counted into, which must have at least `bins` elements.
    param: usize,
    /// The local size `[bins, 1, 1]` it needs.
    bins: u32,
}

/// The scalar code of a kernel and its tables: one call runs the work-item whose ids are
/// in the context from its resume point (a frame's first word: 0 for the start, else the
/// barrier it waits at) to its next barrier or its end, or, for a kernel without barriers,
/// every work-item of the group in turn (see `gen.rs`).
pub struct ScalarCode {
    code: ExecCode,
    /// The memory table: the parameters, local and private arrays (a [`MemKind::Table`]
    /// entry is a slot of [`Ctx::mems`]).
    ///
    /// [`MemKind::Table`]: abi::MemKind::Table
    pub mems: Vec<MemInfo>,
    /// Fault sites of the checked accesses, divisions and loops (indexed by
    /// [`Ctx::err_site`]).
    pub sites: Vec<abi::Site>,
    /// Bytes of one work-item's frame (the scalar parameters at [`X86Program::param_slots`]).
    pub frame_bytes: usize,
    /// Bytes of the group's local block (zeroed at the start of every group).
    pub local_bytes: usize,
    /// Barrier statements (0: one call runs the whole group on one frame).
    pub n_barriers: u32,
    /// (code offset, comment) for the disassembly.
    marks: Vec<(u32, gen::Mark)>,
}

type Entry = unsafe extern "sysv64" fn(*mut Ctx, *mut u8) -> u64;

impl ScalarCode {
    /// Calls the scalar code on the work-item `frame`, returning its stop word: 0 finished,
    /// [`abi::STOP_ERROR`] a fault or a limit (the details in `ctx`), else the barrier it
    /// waits at.
    ///
    /// # Safety
    /// `frame` is a work-item frame of [`ScalarCode::frame_bytes`] bytes (its first word the
    /// resume point, the scalar arguments in their slots), and `ctx`'s memory table points
    /// at live memory of the lengths it says.
    // Called across crates (the executor), per group or span.
    #[inline]
    pub unsafe fn call(&self, ctx: &mut Ctx, frame: *mut u8) -> u64 {
        // SAFETY: the mapping holds a function with this signature (see gen.rs).
        let entry = unsafe { std::mem::transmute::<*const u8, Entry>(self.code.addr()) };
        // SAFETY: the caller's promise.
        unsafe { entry(ctx, frame) }
    }
}

/// The 8-lane version of a kernel in the SPMD class (see `spmd/mod.rs`): one call runs
/// eight work-items of a row per pass, [`Ctx::span`] work-items from the context's
/// `global_id(0)`.
pub struct SpmdCode {
    code: ExecCode,
    /// Bytes of one vector frame (the lane constant [`abi::IOTA`] first).
    pub vframe_bytes: usize,
    /// The memory table entries the code accesses unchecked at `global_id(0)`: each must
    /// be longer than the last `global_id(0)` a call runs.
    pub accessed: Vec<u32>,
    /// The memory table: the parameters, local and private arrays.
    pub mems: Vec<MemInfo>,
    /// Bytes of a scalar frame holding the parameters.
    pub frame_bytes: usize,
    /// Fault sites of the checked accesses and loops (indexed by [`Ctx::err_site`]).
    pub sites: Vec<abi::Site>,
    /// True if one call must not run several work-groups (the code reads `local_id(0)` or
    /// `group_id(0)`).
    pub per_group: bool,
    /// Bytes of the local arrays (laid out as in the scalar code).
    pub local_bytes: usize,
    /// Barrier statements (then a call runs one batch up to its next barrier).
    pub n_barriers: u32,
    /// True if the code has FMA3 instructions (the CPU feature `fma`).
    fma: bool,
    /// True if one call runs every row of the work-group its context's ids start (a
    /// kernel without barriers that reads an id of dimension 1 or 2): after a row, the code
    /// sets the next row's ids in the context and runs it, until the group's last row (the
    /// ids of dimensions 1 and 2 must be the group's first). A call saves the executor's
    /// and the code's per-call work on each row but the row's own set-up. Else a call runs
    /// one row.
    pub rows: bool,
    /// For a kernel with barriers, the region-loop code (`spmd/region.rs`) that runs
    /// groups of one row, one call per group, if the kernel has one.
    pub regions: Option<Box<SpmdCode>>,
}

type VectorEntry = unsafe extern "sysv64" fn(*mut Ctx, *mut u8, *mut u8) -> u64;

impl SpmdCode {
    /// Calls the 8-lane code with the work-items' `frames` and the vector frame(s) `vframe`,
    /// returning its stop word (non-zero: a fault or a limit, in `ctx`).
    ///
    /// # Safety
    /// `vframe` is laid out as the code expects (the lane constant first; see `spmd/mod.rs`
    /// and `generate_regions`), and every access the code makes unchecked is within its
    /// buffer for the ids in `ctx` (the caller's bounds check).
    // Called across crates (the executor), per group or span.
    #[inline]
    pub unsafe fn call(&self, ctx: &mut Ctx, frames: &mut [u64], vframe: &mut [u32]) -> u64 {
        // SAFETY: the mapping holds a function with this signature (see spmd/mod.rs).
        let entry = unsafe { std::mem::transmute::<*const u8, VectorEntry>(self.code.addr()) };
        // SAFETY: the caller's promise.
        unsafe { entry(ctx, frames.as_mut_ptr() as *mut u8, vframe.as_mut_ptr() as *mut u8) }
    }
}

impl fmt::Debug for X86Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("X86Program");
        d.field("kernel", &self.kernel.name());
        if let Some(Ok(sc)) = self.scalar.get() {
            d.field("code_bytes", &sc.code.bytes().len())
                .field("frame_bytes", &sc.frame_bytes)
                .field("local_bytes", &sc.local_bytes)
                .field("barriers", &sc.n_barriers);
        }
        d.field("spmd", &self.spmd.is_some()).finish()
    }
}

/// Machine code generated in this process so far (scalar and vector code counted apart).
static CODES_GENERATED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many times this process has generated machine code (each kernel's scalar code and
/// vector code count one each, lazily compiled scalar code included); a program loaded by
/// [`X86Program::from_image`] generates none. For tests and statistics.
pub fn codes_generated() -> u64 {
    CODES_GENERATED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Compiles `kernel` to x86-64 machine code for this machine (after the `-O` pipeline when
/// `opts.optimize`); an ill-formed kernel is an error.
pub fn compile(kernel: &Kernel, opts: &X86Options) -> Result<X86Program, BackendError> {
    let m = verified_kernel("x86", kernel)?;
    let k = &m.kernels[0];
    let k = if opts.optimize { kiln_passes::pipeline::optimize(k) } else { k.clone() };
    compile_verified(&k, opts)
}

/// Compiles a verified kernel as it is.
fn compile_verified(kernel: &Kernel, opts: &X86Options) -> Result<X86Program, BackendError> {
    compile_inner(kernel, opts).map_err(|e| e.into_backend(kernel.name()))
}

fn compile_inner(kernel: &Kernel, opts: &X86Options) -> Result<X86Program, X86Error> {
    compile_known(kernel, opts, &[])
}

/// [`compile_inner`] for launches whose buffers `known` (parameter, length) have at least
/// those lengths, which the caller checks before each launch (see `spmd::generate`).
fn compile_known(
    kernel: &Kernel,
    opts: &X86Options,
    known: &[(usize, u32)],
) -> Result<X86Program, X86Error> {
    if !cfg!(target_arch = "x86_64") {
        return Err(X86Error::Unsupported("the x86 backend runs only on x86-64 hosts".into()));
    }
    // Vector values become one scalar per lane, memory accesses staying vector accesses,
    // which code generation checks as the interpreter does (alignment included) and splits
    // (see vector.rs). The driver did this already for builds; direct callers get the same.
    // The interpreter, not this backend, defines matrix operations and bf16 conversions.
    if let Some(e) = kiln_ir::matrix::first_extension(kernel) {
        return Err(X86Error::Unsupported(format!(
            "{e} is not lowered by the x86 backend (run the kernel on the interpreter device)"
        )));
    }
    let k =
        kiln_passes::vectors::lower_vectors(kernel, kiln_passes::vectors::VectorLowering::Memory);
    // Code generation recurses over expressions: bound their depth (same meaning).
    let k = kiln_ir::depth::bound_kernel(&k);
    if gen::nesting(k.body(), 0) > gen::MAX_NESTING {
        return Err(X86Error::Unsupported(format!(
            "statements nested more than {} deep",
            gen::MAX_NESTING
        )));
    }
    let checked = !opts.unchecked;
    let g = gen::Gen::new(k.params(), k.body(), checked)?;
    let param_slots = g.param_slots();
    // The lanes' form of the kernel's vector accesses (see spmd/vectors.rs), made once for
    // both the batch code and the region loops.
    let lanes_k =
        if kiln_passes::vectors::uses_vectors(&k) { spmd::split_vectors(&k) } else { k.clone() };
    // Short loops' induction variables as affine values of their counters (spmd/ivs.rs).
    let lanes_k = spmd::affine_ivs(&lanes_k);
    // Stores on both sides of an `if` as one store of a select (spmd/ifstore.rs).
    let lanes_k = spmd::merge_if_stores(&lanes_k);
    // `var`s that are `global_id(0)` plus a uniform offset, as the offset (spmd/offsetvars.rs).
    let lanes_k = spmd::offset_vars(&lanes_k);
    let vector = if opts.scalar {
        Err("scalar code was asked for".to_string())
    } else if !avx2() {
        Err("this CPU has no AVX2".to_string())
    } else {
        spmd::generate(&lanes_k, &param_slots, &g.mems, known)?
    };
    let (vector, no_spmd) = match vector {
        Ok(v) => (Some(v), None),
        Err(why) => (None, Some(why)),
    };
    let frame_bytes = param_slots.iter().flatten().max().map_or(8, |&s| s as usize + 8);
    let mapped = |v: spmd::Spmd| -> Result<SpmdCode, X86Error> {
        CODES_GENERATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let e = encode::encode(v.asm.instructions())?;
        Ok(SpmdCode {
            code: ExecCode::new(&e.bytes)?,
            vframe_bytes: v.vframe_bytes,
            accessed: v.accessed,
            mems: v.mems,
            frame_bytes,
            sites: v.sites,
            per_group: v.per_group,
            local_bytes: v.local_bytes,
            n_barriers: v.n_barriers,
            fma: v.fma,
            rows: v.rows,
            regions: None,
        })
    };
    let spmd = match vector {
        Some(v) => {
            let mut code = mapped(v)?;
            if code.n_barriers > 0 {
                if let Ok(r) = spmd::generate_regions(&lanes_k, &param_slots, &g.mems)? {
                    code.regions = Some(Box::new(mapped(r)?));
                }
            }
            Some(code)
        }
        None => None,
    };
    let scalar = std::sync::OnceLock::new();
    if spmd.is_none() {
        // The scalar code is all there is: compile it now (its errors are the build's).
        scalar.get_or_init(|| scalar_code(g, &k)).as_ref().map_err(Clone::clone)?;
    }
    let sums = std::sync::OnceLock::new();
    // Only where the kernel has 8-lane code, and only if the counting kernel has some too.
    let counted = match spmd.as_ref().and_then(|_| spmd::counted(&k)) {
        Some(c) => Some(compile_known(&c.kernel, opts, &[(c.param, c.bins)])?)
            .filter(X86Program::has_spmd)
            .map(|program| Box::new(CountedCode { program, param: c.param, bins: c.bins })),
        None => None,
    };
    let resizable = !opts.general_groups
        && spmd.as_ref().is_some_and(|v| v.regions.is_some())
        && k.attrs().reqd_work_group_size.is_none();
    Ok(X86Program {
        kernel: k,
        checked,
        param_slots,
        scalar,
        spmd,
        no_spmd,
        sums,
        counted,
        fixed: Default::default(),
        resizable,
    })
}

/// Generates and maps the scalar code of `k` (see gen.rs).
fn scalar_code(g: gen::Gen, k: &Kernel) -> Result<ScalarCode, X86Error> {
    CODES_GENERATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = g.finish(k.body())?;
    // Position-independent (relative branches, helpers called through the context), so
    // encoded at 0 and copied into the mapping.
    let e = encode::encode(out.asm.instructions())?;
    let marks =
        out.marks.into_iter().filter_map(|(i, m)| e.offsets.get(i).map(|&o| (o, m))).collect();
    Ok(ScalarCode {
        code: ExecCode::new(&e.bytes)?,
        mems: out.mems,
        sites: out.sites,
        frame_bytes: out.frame_bytes,
        local_bytes: out.local_bytes,
        n_barriers: out.n_barriers,
        marks,
    })
}

/// True if this CPU runs AVX2 code (and the OS saves YMM state).
fn avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

impl X86Program {
    /// The compiled kernel (after the optional `-O` pipeline); for a program loaded by
    /// [`X86Program::from_image`], the signature it was loaded for (no body).
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// The scalar code, compiled now if it was not yet (kernels with vector code get it at
    /// the first launch that needs it), or why it cannot be built.
    pub fn scalar_code(&self) -> Result<&ScalarCode, String> {
        self.scalar().map_err(|e| e.to_string())
    }

    /// The 8-lane code, if the kernel has it (see [`X86Program::has_spmd`]).
    #[inline]
    pub fn vector_code(&self) -> Option<&SpmdCode> {
        self.spmd.as_ref()
    }

    /// Per parameter, the byte offset in a work-item's frame where a scalar argument's bits
    /// ([`abi::bits_of`]) go; `None` for pointers.
    #[inline]
    pub fn param_slots(&self) -> &[Option<i32>] {
        &self.param_slots
    }

    /// The scalar code, compiled now if it was not yet.
    fn scalar(&self) -> Result<&ScalarCode, X86Error> {
        self.scalar
            .get_or_init(|| {
                let g = gen::Gen::new(self.kernel.params(), self.kernel.body(), self.checked)?;
                scalar_code(g, &self.kernel)
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The scalar machine code's size in bytes (0 if it cannot be built).
    pub fn code_size(&self) -> usize {
        self.code_bytes().len()
    }

    /// The scalar machine code (empty if it cannot be built). It holds no absolute address
    /// (branches are relative, helper calls go through the run's context), so the bytes are
    /// the same in every process for the same kernel and options, and run wherever they are
    /// mapped ([`X86Program::to_image`] stores them with the tables a launch needs).
    pub fn code_bytes(&self) -> &[u8] {
        self.scalar().map_or(&[][..], |s| s.code.bytes())
    }

    /// True if the kernel also has 8-lane AVX2 code, which runs every work-group whose
    /// row length (`local_size(0)`) is a multiple of 8 and whose buffers fit (see the module
    /// docs). False with [`X86Options::scalar`], without AVX2, or for a kernel outside the
    /// class; [`X86Program::disassemble`] then says why on its `; no 8-lane AVX2 code:`
    /// line.
    pub fn has_spmd(&self) -> bool {
        self.spmd.is_some()
    }

    /// True if the kernel has barriers and 8-lane region-loop code: work-groups of one row
    /// run as loops over their batches between barriers, control around the barriers once
    /// per group (see docs/cpu.md). Such groups run on it; others on the 8-lane code that
    /// runs batches round by round.
    pub fn has_region_code(&self) -> bool {
        self.spmd.as_ref().is_some_and(|v| v.regions.is_some())
    }

    /// For a launch of local size `local`: this kernel's program with its work-group size
    /// fixed to that size, as `#reqd_work_group_size(L, 1, 1)` fixes it, compiled at the
    /// first launch of the size and kept (for up to 8 sizes). Its region
    /// loops know `local_size(0)`: a tree reduction whose stride starts from it is unrolled
    /// round by round, its last rounds under lane masks known when the code is generated.
    /// The same kernel launched at the size it is fixed to, so the same results and errors.
    /// `None` where it would not differ: a kernel without region-loop code, one that fixes
    /// its size already, a local size that is not `[L, 1, 1]` with `L` a multiple of 8, a
    /// program loaded from an image without the kernel's text (see `image.rs`: the text
    /// comes along unless it would lose a fault site's name).
    pub fn for_group(&self, local: [u32; 3]) -> Option<std::sync::Arc<X86Program>> {
        let [l, 1, 1] = local else { return None };
        if !self.resizable || l % 8 != 0 {
            return None;
        }
        let mut fixed = self.fixed.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, p)) = fixed.iter().find(|(size, _)| *size == l) {
            return p.clone();
        }
        if fixed.len() == MAX_FIXED_SIZES {
            return None;
        }
        let mut attrs = self.kernel.attrs().clone();
        attrs.reqd_work_group_size = Some([l, 1, 1]);
        let k = Kernel::with_attrs(
            self.kernel.name(),
            self.kernel.params().to_vec(),
            attrs,
            self.kernel.body().clone(),
        );
        // The kernel is compiled already (after `-O`, if that was asked for).
        let opts = X86Options { unchecked: !self.checked, ..X86Options::default() };
        let p = compile_known(&k, &opts, &[])
            .ok()
            .filter(X86Program::has_region_code)
            .map(std::sync::Arc::new);
        fixed.push((l, p.clone()));
        p
    }

    /// The kernel's text for its image, when [`X86Program::for_group`] may compile it and
    /// the text is all of it: no fault site is named apart from its text
    /// (`kiln_passes::origin`), which the text would lose.
    fn resizable_text(&self) -> Option<String> {
        struct Named(bool);
        impl kiln_ir::Visitor for Named {
            fn visit_expr(&mut self, e: &kiln_ir::Expr) {
                self.0 |= e.origin().is_some();
                if !self.0 {
                    kiln_ir::walk_expr(self, e);
                }
            }
        }
        if !self.resizable {
            return None;
        }
        let mut named = Named(false);
        kiln_ir::Visitor::visit_stmt(&mut named, self.kernel.body());
        (!named.0).then(|| self.kernel.to_string())
    }

    /// The buffer parameter (by position) a histogram's local bins are counted straight
    /// into, when the kernel has that shape (docs/cpu.md, "Counting straight into the
    /// buffer"): launches whose local size is the bins' count in dimension 0 (1 in the
    /// others) and whose buffer has at least as many elements run without the bins.
    pub fn counts_into(&self) -> Option<usize> {
        self.counted.as_ref().map(|c| c.param)
    }

    /// The program counting straight into a buffer ([`X86Program::counts_into`]), that
    /// buffer's parameter and the bins' count `L`: the program runs a launch instead of this
    /// one when the launch's local size is `[L, 1, 1]` and the buffer has at least `L`
    /// elements.
    pub fn counting(&self) -> Option<(&X86Program, usize, u32)> {
        self.counted.as_deref().map(|c| (&c.program, c.param, c.bins))
    }

    /// The buffer parameters (by position) that a launch on several threads gives each
    /// thread a copy of, summed into the buffer when the launch ends: those the kernel
    /// reaches only through `atomic_add`/`atomic_sub` of `i32`/`u32` values whose results
    /// no one reads (see docs/cpu.md, "Threads").
    pub fn summed_params(&self) -> &[usize] {
        &self.sums().0
    }

    /// True if every buffer parameter an atomic names is a summed one
    /// ([`X86Program::summed_params`]): with each summed buffer a thread's own copy, that
    /// thread's atomics then touch no shared memory.
    pub fn atomics_only_on_summed(&self) -> bool {
        self.sums().1
    }

    fn sums(&self) -> &(Vec<usize>, bool) {
        self.sums.get_or_init(|| {
            let summed = sums::summed_params(&self.kernel);
            let alone = !summed.is_empty() && sums::atomics_only_on(&self.kernel, &summed);
            (summed, alone)
        })
    }

    /// The machine code in Intel syntax, one block per region (the code before the first
    /// barrier, then after each barrier), each IR statement as a comment above its code;
    /// then the 8-lane code, or the line saying why there is none.
    pub fn disassemble(&self) -> String {
        let mut s = match self.scalar() {
            Ok(sc) => {
                let marks: Vec<(u32, String)> =
                    sc.marks.iter().map(|(o, m)| (*o, m.to_string())).collect();
                disasm::disassemble(sc.code.bytes(), &marks, self.kernel.name())
            }
            Err(e) => format!("; kernel `{}`: no scalar code: {e}\n", self.kernel.name()),
        };
        if let Some(why) = &self.no_spmd {
            s.push_str(&format!("; no 8-lane AVX2 code: {why}\n"));
        }
        if let Some(v) = &self.spmd {
            s.push_str("; 8-lane AVX2 code (8 work-items of a row per pass)\n");
            s.push_str(&disasm::disassemble(v.code.bytes(), &[], self.kernel.name()));
            if let Some(r) = &v.regions {
                s.push_str("; 8-lane region loops (a work-group of one row per call)\n");
                s.push_str(&disasm::disassemble(r.code.bytes(), &[], self.kernel.name()));
            }
        }
        if let Some(c) = &self.counted {
            let name = self.kernel.params()[c.param].name();
            s.push_str(&format!(
                "; counting straight into `{name}` (launches of local size [{}, 1, 1] whose `{name}` \
                 has at least {} elements): the kernel without its local bins\n",
                c.bins, c.bins
            ));
            if let Some(v) = &c.program.spmd {
                s.push_str(&disasm::disassemble(v.code.bytes(), &[], self.kernel.name()));
            }
        }
        s
    }
}
