//! The AMDGPU-style backend: gfx9 assembly chosen by divergence analysis, exec-mask control
//! flow, SGPR/VGPR allocation, and a wave64 simulator to run the result.
//!
//! Pipeline: [`kiln_passes::divergence::analyze`] → [`isel::select`] (machine IR over
//! virtual registers) → [`regalloc::allocate`] → [`asm::print`]; [`sim`] runs the allocated
//! machine IR.
//!
//! **Supported**: every scalar type: `bool` and 8/16/32-bit integers in one 32-bit register
//! (8/16-bit ones re-extended after each wrapping operation), `f16` (storage: loads, stores
//! and casts, held as an f32) and `f32` in one VGPR, `i64`/`u64` in an SGPR pair when
//! uniform (SALU where gfx9 has the operation) or a VGPR pair, `f64` in a VGPR pair;
//! buffers of every element type in global, constant or generic (`flat_*`) memory and local
//! arrays of them; private arrays (up to [`isel::MAX_PRIVATE`] elements in registers, larger
//! ones in scratch memory); `let`, `var`, assignment, stores, `if`/`else`, `for` (every
//! integer counter type), `while`, barriers, fences, atomics on global and local memory
//! (every operation and type the IR defines, old values returned); every operator on every
//! type, including integer division and remainder by any divisor (LLVM's reciprocal
//! expansion for 32 bits, a shift-subtract loop for 64) and correctly rounded f32/f64
//! division; casts among all types with the interpreter's semantics; `min`/`max`/`abs` on
//! every type, `fma`, correctly rounded `sqrt`, `floor`/`ceil`/`trunc`, approximate
//! `exp`/`log`/`sin`/`cos` (hardware f32 units, f64 through f32); every work-item built-in.
//! Registers: SGPRs spill to VGPR lanes, VGPRs to scratch; [`Error::RegisterPressure`] only
//! when 64-bit VGPR pairs alone exceed the register file or the spill slots run out.
//! Nothing in a verified kernel is [`Error::Unsupported`] today; the variant stays for
//! inputs the lowering cannot place (e.g. an atomic on a computed pointer).
//!
//! **Kernel ABI** (close to AMDGPUUsage for gfx9): `s[0:1]` holds the kernarg segment
//! pointer, `s[2:3]` the flat scratch init, `s4..s6` the work-group ids, `s7` the wave's
//! private segment offset, `v0..v2` the work-item ids. Explicit arguments are
//! laid out in order (pointers and 64-bit scalars 8 bytes, other scalars 4 with 8/16-bit
//! integers sign- or zero-extended and f16 as an f32, naturally aligned); then, 8-aligned, the
//! hidden arguments kiln adds: global offset, local size, global size and number of groups
//! (three u32 each).

pub mod asm;
pub mod gen;
pub mod isel;
pub mod mir;
pub mod regalloc;
pub mod sim;
pub mod spill;

use kiln_ir::Kernel;
use kiln_passes::divergence::{analyze, Divergence};

/// Why a kernel cannot be compiled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The kernel does not pass the verifier.
    IllFormed(String),
    /// The kernel uses something outside the supported subset.
    Unsupported(String),
    /// The kernel needs more registers than the hardware has.
    RegisterPressure(String),
    /// The kernel needs more of a fixed resource (LDS, scratch, kernel-argument space) than
    /// gfx9 has; the message names the kernel, the resource and the limit.
    Limit(String),
}

/// Bytes of LDS a work-group may use on gfx9 (`group_segment_fixed_size`).
pub const MAX_LDS_BYTES: u32 = 64 * 1024;

/// Bytes of scratch each lane may use on gfx9: the wave's scratch size is a 13-bit count of
/// 1 KiB units, shared by 64 lanes.
pub const MAX_SCRATCH_BYTES: u32 = ((1 << 13) - 1) * 1024 / 64;

/// Bytes of kernel arguments kiln may address: `s_load_dword`'s immediate offset has 20 bits.
pub const MAX_KERNARG_BYTES: u32 = 1 << 20;

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::IllFormed(m) => write!(f, "amdgpu backend: ill-formed kernel: {m}"),
            Error::Unsupported(m) => write!(f, "amdgpu backend: unsupported: {m}"),
            Error::RegisterPressure(m) => write!(f, "amdgpu backend: register pressure: {m}"),
            Error::Limit(m) => write!(f, "amdgpu backend: {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// A compiled kernel: allocated machine code and its listing.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The allocated machine IR (what [`sim`] runs).
    pub func: mir::MFunc,
    /// The assembly listing.
    pub asm: String,
}

impl Compiled {
    /// Counts SALU (`s_*` arithmetic, not memory/branch/wait) and VALU (`v_*`) instructions.
    pub fn salu_valu_counts(&self) -> (usize, usize) {
        let ops = self.func.insts.iter().map(|i| i.op);
        let salu = ops
            .clone()
            .filter(|o| {
                o.starts_with("s_")
                    && !o.starts_with("s_load")
                    && !o.starts_with("s_cbranch")
                    && !matches!(*o, "s_branch" | "s_waitcnt" | "s_barrier" | "s_endpgm")
            })
            .count();
        let valu = ops.filter(|o| o.starts_with("v_")).count();
        (salu, valu)
    }
}

/// Compiles a kernel with its divergence analysis.
pub fn compile(kernel: &Kernel) -> Result<Compiled, Error> {
    // Selection recurses over expressions: give it bounded depth (see kiln_ir::depth), and
    // analyze the kernel it selects from, whose split-off lets need divergence facts too.
    let kernel = &kiln_ir::depth::bound_kernel(kernel);
    compile_with(kernel, &analyze(kernel))
}

/// Compiles a kernel with the given divergence facts (tests pass a deliberately wrong
/// analysis to show the differential test catches the miscompile).
///
/// A kernel with expressions deeper than `kiln_ir::depth::MAX_EXPR_DEPTH` is split into lets
/// first; `div` then lacks the new lets, so it is recomputed (and a planted wrong analysis
/// is not used).
pub fn compile_with(kernel: &Kernel, div: &Divergence) -> Result<Compiled, Error> {
    let bounded = kiln_ir::depth::bound_kernel(kernel);
    if !bounded.ptr_eq(kernel) {
        return compile(&bounded);
    }
    // Selection relies on verified types (pointers have elements, and so on).
    if let Err(errs) = kiln_ir::verify_kernel(kernel) {
        return Err(Error::IllFormed(errs.first().map(|e| e.to_string()).unwrap_or_default()));
    }
    let named = |e: Error| match e {
        Error::Limit(m) => Error::Limit(format!("kernel `{}`: {m}", kernel.name())),
        e => e,
    };
    let mut f = isel::select(kernel, div).map_err(named)?;
    regalloc::allocate(&mut f)?;
    // Spill slots come after the private arrays: the total is checked again.
    if f.scratch_bytes > MAX_SCRATCH_BYTES {
        let m = crate::limits::exceeded(
            "per-lane scratch bytes (private arrays and spills)",
            f.scratch_bytes as u64,
            MAX_SCRATCH_BYTES as u64,
            "gfx9's",
        );
        return Err(Error::Limit(format!("kernel `{}`: {m}", kernel.name())));
    }
    let asm = asm::print(&f);
    Ok(Compiled { func: f, asm })
}
