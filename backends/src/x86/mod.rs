//! x86-64 machine code for kiln kernels, assembled in-process with iced-x86 (no LLVM, no
//! external assembler).
//!
//! [`compile`] lowers a verified kernel to one native function that runs one work-item of a
//! work-group from its resume point to the next barrier or the end; [`X86Program::run`]
//! drives it over an nd-range with the interpreter's call shape, schedule and errors.
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
//!   by batch, round by round (`rounds.rs`).
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
//! ([`X86RunOptions`]). [`X86Options::unchecked`] drops the bounds checks: then a wild
//! index reads or writes wherever it points, so it is for trusted kernels only.
//!
//! ## Concurrency
//!
//! An [`X86Program`] is `Send + Sync`. Every run builds its own context, frames and local
//! block, so runs on different buffers may proceed on different threads at once, and
//! [`X86Program::run_groups_raw`] runs a sub-range of the work-groups of one launch so that
//! a thread pool can split a launch ([`X86Program::run_on`] does, on a [`WorkerPool`]).
//! Atomics on buffers are lock-prefixed, so they are atomic across threads too, except in a
//! launch that runs on one thread (`run`, or `run_on` a small range or a pool of one).
//!
//! ```
//! use kiln_backends::x86::{compile, X86Options};
//! use kiln_ir::launch::{resolve_launch, Arg, Buffer, Launch, NdRange};
//! let m = kiln_ir::parse_module(
//!     "kernel scale(x: ptr<global, f32>, a: f32) { let i: u32 = global_id(0); x[i] = x[i] * a; }",
//! ).unwrap();
//! let prog = compile(&m.kernels[0], &X86Options::default()).unwrap();
//! let mut bufs = vec![Buffer::from_slice(&[1.0f32, 2.0, 3.0, 4.0])];
//! prog.run(&NdRange::new(&[4]), &[Arg::Buffer(0), Arg::scalar(2.5f32)], &mut bufs).unwrap();
//! assert_eq!(bufs[0].to_vec::<f32>(), Some(vec![2.5, 5.0, 7.5, 10.0]));
//! ```

mod disasm;
mod encode;
mod expr;
mod fault;
mod gen;
mod image;
mod launch;
mod pool;
mod rounds;
mod rt;
mod spmd;
mod vector;

pub use image::cpu_has;
pub use pool::WorkerPool;

use std::fmt;
use std::ops::Range;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kiln_ir::launch::{resolve_launch, Arg, Buffer, Launch, LaunchError, NdRange};
use kiln_ir::{Kernel, Scalar, Verified};

use crate::target::{verified_kernel, BackendError, Emitted, ErrorKind, Lowering, Target};

use gen::{MemInfo, MemKind, Site};
use launch::Bound;
use rt::{Ctx, ExecCode, Limits, MemRef};

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
}

/// Per-launch limits; the default has none.
#[derive(Clone, Debug, Default)]
pub struct X86RunOptions {
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

/// A buffer by address, for [`X86Program::run_groups_raw`]: `len` elements of type `elem`
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

type Entry = unsafe extern "sysv64" fn(*mut Ctx, *mut u8) -> u64;

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
}

/// The scalar code of a kernel and its tables.
struct ScalarCode {
    code: ExecCode,
    mems: Vec<MemInfo>,
    sites: Vec<Site>,
    frame_bytes: usize,
    local_bytes: usize,
    n_barriers: u32,
    /// (code offset, comment) for the disassembly.
    marks: Vec<(u32, gen::Mark)>,
}

/// The 8-lane version of a kernel in the SPMD class (see `spmd.rs`).
struct SpmdCode {
    code: ExecCode,
    vframe_bytes: usize,
    accessed: Vec<u32>,
    /// The memory table: the parameters, local and private arrays.
    mems: Vec<MemInfo>,
    /// Bytes of a scalar frame holding the parameters.
    frame_bytes: usize,
    /// Fault sites of the checked accesses and loops (indexed by `Ctx::err_site`).
    sites: Vec<gen::Site>,
    /// True if one call must not run several work-groups (the code reads `local_id(0)` or
    /// `group_id(0)`).
    per_group: bool,
    /// Bytes of the local arrays (laid out as in the scalar code).
    local_bytes: usize,
    /// Barrier statements (then a call runs one batch up to its next barrier).
    n_barriers: u32,
    /// True if the code has FMA3 instructions (the CPU feature `fma`).
    fma: bool,
    /// For a kernel with barriers, the region-loop code (`spmd/region.rs`) that runs
    /// groups of one row, one call per group, if the kernel has one.
    regions: Option<Box<SpmdCode>>,
}

type VectorEntry = unsafe extern "sysv64" fn(*mut Ctx, *mut u8, *mut u8) -> u64;

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

/// The most work-items one call of the vector code runs in a multi-group span: the limits
/// (deadline, cancel flag) are looked at between calls.
const SPAN_ITEMS: u64 = 1 << 16;

/// A launch of at most this many work-items runs on the calling thread: handing work to
/// the pool's threads and waiting for them costs microseconds, more than a small kernel
/// runs. (A kernel with long loops over a small range is the loser of this rule.)
pub const INLINE_ITEMS: u64 = 4096;

/// The most memory (local arrays plus the frames of a group's work-items) one run may use:
/// 1 GiB, the interpreter's limit.
const MEMORY_LIMIT: u64 = 1 << 30;

/// Machine code generated in this process so far (scalar and vector code counted apart).
static CODES_GENERATED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many times this process has generated machine code (each kernel's scalar code and
/// vector code count one each, lazily compiled scalar code included); a program loaded by
/// [`X86Program::from_image`] generates none. For tests and statistics.
pub fn codes_generated() -> u64 {
    CODES_GENERATED.load(std::sync::atomic::Ordering::Relaxed)
}

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
fn aligned<T: Copy + Default>(v: &mut Vec<T>, n: usize) -> &mut [T] {
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
    let vector = if opts.scalar {
        Err("scalar code was asked for".to_string())
    } else if !avx2() {
        Err("this CPU has no AVX2".to_string())
    } else {
        spmd::generate(&k, &param_slots, &g.mems)?
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
            regions: None,
        })
    };
    let spmd = match vector {
        Some(v) => {
            let mut code = mapped(v)?;
            if code.n_barriers > 0 {
                if let Ok(r) = spmd::generate_regions(&k, &param_slots, &g.mems)? {
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
    Ok(X86Program { kernel: k, checked, param_slots, scalar, spmd, no_spmd })
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
    /// the first launch that needs it).
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
        s
    }

    /// Runs the kernel over `range` with the interpreter's call shape, schedule and errors:
    /// `args` has one entry per parameter, pointer parameters naming entries of `buffers`,
    /// which the kernel reads and writes in place. No limits.
    pub fn run(
        &self,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
    ) -> Result<(), LaunchError> {
        self.run_with(range, args, buffers, &X86RunOptions::default())
    }

    /// [`X86Program::run`] with limits.
    pub fn run_with(
        &self,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
        opts: &X86RunOptions,
    ) -> Result<(), LaunchError> {
        let raw: Vec<RawBuffer> = buffers.iter_mut().map(RawBuffer::of).collect();
        let launch = resolve_launch(&self.kernel, range).map_err(|m| self.launch_error(m))?;
        // SAFETY: the raw buffers come from `buffers`, borrowed mutably for this call, and
        // this thread runs every group.
        unsafe { self.run_groups(&launch, args, &raw, 0..launch.group_count(), opts, true) }
    }

    /// Runs the launch's work-groups on up to `threads` threads, started for this call:
    /// [`X86Program::run_on`] a [`WorkerPool`] of `threads`.
    pub fn run_parallel(
        &self,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
        threads: usize,
        opts: &X86RunOptions,
    ) -> Result<(), LaunchError> {
        self.run_on(&WorkerPool::new(threads), range, args, buffers, opts)
    }

    /// Runs the launch's work-groups on the pool's threads (each takes a contiguous run of
    /// groups, run in order); a launch of at most [`INLINE_ITEMS`] work-items runs on this
    /// thread alone. A race-free kernel gives the interpreter's buffers; when
    /// groups fail, the error of the lowest-numbered failing group among those run is
    /// returned, and groups on other threads may have run past it.
    pub fn run_on(
        &self,
        pool: &WorkerPool,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
        opts: &X86RunOptions,
    ) -> Result<(), LaunchError> {
        let raw: Vec<RawBuffer> = buffers.iter_mut().map(RawBuffer::of).collect();
        let launch = resolve_launch(&self.kernel, range).map_err(|m| self.launch_error(m))?;
        let n = launch.group_count();
        let parts = (pool.threads() as u64).min(n);
        if parts <= 1 || n.saturating_mul(launch.group_size()) <= INLINE_ITEMS {
            // SAFETY: as below, with every group on this thread.
            return unsafe { self.run_groups(&launch, args, &raw, 0..n, opts, true) };
        }
        let per = n.div_ceil(parts);
        let results: Vec<Mutex<Option<LaunchError>>> =
            (0..parts).map(|_| Mutex::new(None)).collect();
        pool.run(parts as usize, &|t| {
            let (lo, hi) = (t as u64 * per, ((t as u64 + 1) * per).min(n));
            // SAFETY: the buffers are borrowed mutably for this call, which returns after
            // every part has run; parts run disjoint groups, and a race-free kernel's groups
            // write disjoint elements (atomics are lock-prefixed).
            if let Err(e) = unsafe { self.run_groups_raw(&launch, args, &raw, lo..hi, opts) } {
                *results[t].lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
            }
        });
        // Parts are in group order: the first error is the lowest-numbered group's.
        results
            .into_iter()
            .find_map(|r| r.into_inner().unwrap_or_else(|e| e.into_inner()))
            .map_or(Ok(()), Err)
    }

    /// Runs the work-groups `groups` (linear group ids, dimension 0 fastest) of `launch`
    /// (from [`resolve_launch`]) in order, on this thread.
    ///
    /// # Safety
    ///
    /// Each buffer must be valid for reads and writes of `len` elements for the whole call,
    /// and no other code may access them meanwhile, except other `run_groups_raw` calls of
    /// the same launch on disjoint group ranges (the kernel's own races aside).
    pub unsafe fn run_groups_raw(
        &self,
        launch: &Launch,
        args: &[Arg],
        buffers: &[RawBuffer],
        groups: Range<u64>,
        opts: &X86RunOptions,
    ) -> Result<(), LaunchError> {
        // SAFETY: the caller's promise.
        unsafe { self.run_groups(launch, args, buffers, groups, opts, false) }
    }

    /// [`X86Program::run_groups_raw`]; with `alone`, the caller also promises that no other
    /// thread runs groups of the launch (atomics on buffers then need no `lock`).
    ///
    /// # Safety
    ///
    /// As for [`X86Program::run_groups_raw`].
    unsafe fn run_groups(
        &self,
        launch: &Launch,
        args: &[Arg],
        buffers: &[RawBuffer],
        groups: Range<u64>,
        opts: &X86RunOptions,
        alone: bool,
    ) -> Result<(), LaunchError> {
        // The thread's blocks from its last launch (none if a launch is running below this
        // one on the same thread, which then keeps its own).
        let mut s = SCRATCH.with(std::cell::Cell::take);
        // SAFETY: the caller's promise.
        let r = unsafe { self.run_groups_in(launch, args, buffers, groups, opts, alone, &mut s) };
        SCRATCH.with(|c| c.set(s));
        r
    }

    /// [`X86Program::run_groups`] with the memory blocks of `s`.
    ///
    /// # Safety
    ///
    /// As for [`X86Program::run_groups_raw`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn run_groups_in(
        &self,
        launch: &Launch,
        args: &[Arg],
        buffers: &[RawBuffer],
        groups: Range<u64>,
        opts: &X86RunOptions,
        alone: bool,
        s: &mut Scratch,
    ) -> Result<(), LaunchError> {
        let bound =
            launch::bind_args(&self.kernel, args, buffers).map_err(|m| self.launch_error(m))?;
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
        let lens_fit = self.spmd.as_ref().is_some_and(|v| {
            v.mems.iter().map(param_len).all(|n| n < 1 << 31 && (n > 0 || v.sites.is_empty()))
        });
        let vector_all = self.spmd.as_ref().is_some_and(|v| {
            let end0 = launch.offset[0] as u64 + g[0] * l[0];
            lens_fit
                && l[0].is_multiple_of(8)
                && v.accessed.iter().all(|&t| v.mems.get(t as usize).map_or(0, param_len) >= end0)
        });
        let sc = match (vector_all, &self.spmd) {
            (true, Some(_)) => None,
            _ => Some(self.scalar().map_err(|e| self.launch_error(e.to_string()))?),
        };
        let (mems, frame_bytes, local_bytes, n_barriers) = match (sc, &self.spmd) {
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
            for (p, slot) in self.param_slots.iter().enumerate() {
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
        let mut ctx = Ctx {
            local_id: [0; 3],
            global_id: [0; 3],
            group_id: [0; 3],
            global_size: launch.global.map(u64::from),
            local_size: launch.local.map(u64::from),
            num_groups: launch.groups().map(u64::from),
            offset: launch.offset.map(u64::from),
            budget: 0,
            err_code: 0,
            err_site: 0,
            err_val: 0,
            mems: table.as_ptr(),
            limits: &limits,
            items: group_size,
            base: [0; 3],
            helpers: rt::helpers(),
            span: 0,
            math_table: kiln_ir::eval::math::SINCOS_TABLE.as_ptr(),
            alone: u64::from(alone),
        };
        // The first back-edge asks the helper, which applies the limits.
        ctx.budget = 1;
        let start = Instant::now();
        // Launches whose groups are one row of whole batches run many groups per call of
        // the vector code: the consecutive groups of a row of groups (all of them in 1-D)
        // are one contiguous run of global_id(0), their other ids the same.
        let spans = self.spmd.as_ref().filter(|v| {
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
                    if rt::limit_hit(&mut ctx) != 0 {
                        return Err(self.fault_in(sc, &ctx, table, &ranges, start));
                    }
                    let vframe = aligned(vframe, v.vframe_bytes.div_ceil(4));
                    vframe[..8].copy_from_slice(&spmd::IOTA);
                    ctx.span = n * l[0];
                    // SAFETY: the vector code reads the lane constant at the vector frame's
                    // start; every access is at a global_id(0) below `fit` (checked above).
                    let stop = unsafe {
                        let entry: VectorEntry =
                            std::mem::transmute::<*const u8, VectorEntry>(v.code.addr());
                        entry(
                            &mut ctx,
                            frames.as_mut_ptr() as *mut u8,
                            vframe.as_mut_ptr() as *mut u8,
                        )
                    };
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
                    if rt::limit_hit(&mut ctx) != 0 {
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
            if rt::limit_hit(&mut ctx) != 0 {
                return Err(self.fault_in(sc, &ctx, table, &ranges, start));
            }
            let vector = self.spmd.as_ref().filter(|v| {
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
                // SAFETY: the vector code reads the lane constant at the vector frame's start.
                let entry: VectorEntry =
                    unsafe { std::mem::transmute::<*const u8, VectorEntry>(v.code.addr()) };
                let vframe = aligned(vframe, v.vframe_bytes.div_ceil(4));
                vframe[..8].copy_from_slice(&spmd::IOTA);
                ctx.span = l[0];
                for row in 0..l[1] * l[2] {
                    let (y, z) = (row % l[1], row / l[1]);
                    ctx.local_id = [0, y, z];
                    ctx.global_id = [ctx.base[0], ctx.base[1] + y, ctx.base[2] + z];
                    // SAFETY: every access of the vector code is at global_id(0) of a
                    // buffer longer than the row's last global_id(0) (checked above).
                    let stop = unsafe {
                        entry(
                            &mut ctx,
                            frames.as_mut_ptr() as *mut u8,
                            vframe.as_mut_ptr() as *mut u8,
                        )
                    };
                    if stop != 0 {
                        return Err(self.fault_at(&v.sites, &v.mems, &ctx, table, &ranges, start));
                    }
                }
                Ok(())
            } else if let Some(sc) = sc {
                // SAFETY: the mapping holds a function with this signature (see gen.rs).
                let entry: Entry =
                    unsafe { std::mem::transmute::<*const u8, Entry>(sc.code.addr()) };
                if sc.n_barriers == 0 {
                    // The generated code loops over the group's work-items itself.
                    self.set_ids(&mut ctx, launch, 0);
                    let f = frames.as_mut_ptr() as *mut u8;
                    // SAFETY: the frame has frame_bytes; ctx's table points at live memory.
                    let stop = unsafe { entry(&mut ctx, f) };
                    if stop == 0 {
                        Ok(())
                    } else {
                        Err(self.fault(sc, &ctx, table, &ranges, start))
                    }
                } else {
                    self.rounds(sc, &mut ctx, launch, frames, words, entry, table, &ranges, start)
                }
            } else {
                Err(self.launch_error("internal error: a group the vector code cannot run".into()))
            };
            r?;
            linear += 1;
        }
        Ok(())
    }

    fn set_ids(&self, ctx: &mut Ctx, launch: &Launch, item: u64) {
        let l = launch.local.map(u64::from);
        let lid = [item % l[0], item / l[0] % l[1], item / (l[0] * l[1])];
        ctx.local_id = lid;
        ctx.global_id =
            std::array::from_fn(|d| launch.offset[d] as u64 + ctx.group_id[d] * l[d] + lid[d]);
    }

    fn launch_error(&self, message: String) -> LaunchError {
        self.error(None, message)
    }

    fn error(&self, work_item: Option<[u32; 3]>, message: String) -> LaunchError {
        LaunchError { kernel: self.kernel.name().to_string(), work_item, message }
    }
}
