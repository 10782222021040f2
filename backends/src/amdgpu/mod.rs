//! The AMDGPU-style backend: gfx9 assembly chosen by divergence analysis, exec-mask control
//! flow, SGPR/VGPR allocation, and a wave64 simulator to run the result.
//!
//! Pipeline: [`kiln_passes::divergence::analyze`] → [`isel::select`] (machine IR over
//! virtual registers) → [`regalloc::allocate`] → [`asm::print`]; [`sim`] runs the allocated
//! machine IR.
//!
//! **Supported**: every scalar type: `bool` and 8/16/32-bit integers in one 32-bit register
//! (8/16-bit ones re-extended after each wrapping operation), `f16` (storage: loads, stores
//! and casts, held as its 16 bits, so a copy keeps every bit) and `f32` in one VGPR, `i64`/`u64` in an SGPR pair when
//! uniform (SALU where gfx9 has the operation) or a VGPR pair, `f64` in a VGPR pair;
//! buffers of every element type in global, constant or generic (`flat_*`) memory and local
//! arrays of them; vector loads and stores of 32-bit lanes whole (`global_load_dwordx2/x4`,
//! `ds_read_b64/b128` and the stores; [`isel`]'s vector module); private arrays (up to
//! [`isel::MAX_PRIVATE`] elements in registers, larger ones in scratch memory); `let`, `var`, assignment, stores, `if`/`else`, `for` (every
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
//! integers sign- or zero-extended and f16 as its bits, naturally aligned); then, 8-aligned, the
//! hidden arguments kiln adds: global offset, local size, global size and number of groups
//! (three u32 each).

pub mod asm;
#[cfg(feature = "testing")]
pub mod gen;
pub mod isel;
pub mod mir;
pub mod regalloc;
pub mod sim;
pub mod spill;

use kiln_ir::{Kernel, Verified};
use kiln_passes::divergence::{analyze, Divergence};

use crate::target::{verified_kernel, BackendError, Emitted, ErrorKind, Target};

/// Why selection or allocation failed, inside the backend; it leaves as a
/// [`BackendError`] of the matching [`ErrorKind`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The kernel uses something outside the supported subset.
    Unsupported(String),
    /// The kernel needs more registers than the hardware has.
    RegisterPressure(String),
    /// The kernel needs more of a fixed resource (LDS, scratch, kernel-argument space) than
    /// gfx9 has.
    Limit(String),
}

impl Error {
    fn into_backend(self, kernel: &str) -> BackendError {
        let (kind, message) = match self {
            Error::Unsupported(m) => (ErrorKind::Unsupported, format!("unsupported: {m}")),
            Error::RegisterPressure(m) => {
                (ErrorKind::RegisterPressure, format!("register pressure: {m}"))
            }
            Error::Limit(m) => (ErrorKind::Limit, m),
        };
        BackendError::new("amdgpu", kernel, kind, message)
    }
}

/// Bytes of LDS a work-group may use on gfx9 (`group_segment_fixed_size`).
pub const MAX_LDS_BYTES: u32 = 64 * 1024;

/// Bytes of scratch each lane may use on gfx9: the wave's scratch size is a 13-bit count of
/// 1 KiB units, shared by 64 lanes.
pub const MAX_SCRATCH_BYTES: u32 = ((1 << 13) - 1) * 1024 / 64;

/// Bytes of kernel arguments kiln may address: `s_load_dword`'s immediate offset has 20 bits.
pub const MAX_KERNARG_BYTES: u32 = 1 << 20;

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

/// The AMDGPU target (gfx900 assembly): one [`Compiled`] kernel per kernel of the module.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Amdgpu;

impl Target for Amdgpu {
    type Output = Vec<Compiled>;
    fn name(&self) -> String {
        "amdgpu".into()
    }
    /// Vector loads and stores stay whole (`global_load_dwordx4`, `ds_read_b128`, ...: see
    /// `isel/vector.rs`), the rest one scalar per lane.
    fn lowering(&self) -> crate::target::Lowering {
        crate::target::Lowering {
            optimize: true,
            sanitize: true,
            vectors: crate::target::VectorLowering::Memory,
        }
    }
    fn emit(&self, module: &Verified) -> Result<Vec<Compiled>, BackendError> {
        module.kernels.iter().map(compile_verified).collect()
    }
}

impl Emitted for Vec<Compiled> {
    fn listing(&self) -> String {
        self.iter().map(|c| c.asm.as_str()).collect()
    }
}

/// Compiles a kernel with its divergence analysis; an ill-formed kernel is an error.
pub fn compile(kernel: &Kernel) -> Result<Compiled, BackendError> {
    compile_verified(&verified_kernel("amdgpu", kernel)?.kernels[0])
}

fn compile_verified(kernel: &Kernel) -> Result<Compiled, BackendError> {
    if let Some(e) = kiln_ir::matrix::first_extension(kernel) {
        return Err(BackendError::new(
            "amdgpu",
            kernel.name(),
            ErrorKind::Unsupported,
            format!("unsupported: {e} is not lowered for amdgpu (no WMMA-style lowering yet)"),
        ));
    }
    // Selection recurses over expressions: give it bounded depth (see kiln_ir::depth), and
    // analyze the kernel it selects from, whose split-off lets need divergence facts too.
    // Vector values become one scalar per lane, memory accesses staying whole (the driver
    // did this already for builds; direct callers get the same): see `isel/vector.rs`.
    let kernel =
        &kiln_passes::vectors::lower_vectors(kernel, kiln_passes::vectors::VectorLowering::Memory);
    let kernel = &kiln_ir::depth::bound_kernel(kernel);
    select_and_allocate(kernel, &analyze(kernel))
}

/// Compiles a kernel with the given divergence facts (tests pass a deliberately wrong
/// analysis to show the differential test catches the miscompile). Only with the `testing`
/// feature.
///
/// A kernel with expressions deeper than `kiln_ir::depth::MAX_EXPR_DEPTH` is split into lets
/// first; `div` then lacks the new lets, so it is recomputed (and a planted wrong analysis
/// is not used).
#[cfg(feature = "testing")]
pub fn compile_with(kernel: &Kernel, div: &Divergence) -> Result<Compiled, BackendError> {
    let m = verified_kernel("amdgpu", kernel)?;
    let bounded = kiln_ir::depth::bound_kernel(&m.kernels[0]);
    // Divergence facts are for the kernel as given: one that needs rewriting is analyzed
    // again after it.
    if !bounded.ptr_eq(kernel) || kiln_passes::vectors::uses_vectors(kernel) {
        return compile_verified(&bounded);
    }
    select_and_allocate(kernel, div)
}

/// Selection, allocation and the final scratch check of a verified, depth-bounded kernel.
fn select_and_allocate(kernel: &Kernel, div: &Divergence) -> Result<Compiled, BackendError> {
    let fail = |e: Error| e.into_backend(kernel.name());
    let mut f = isel::select(kernel, div).map_err(fail)?;
    regalloc::allocate(&mut f).map_err(fail)?;
    // Spill slots come after the private arrays: the total is checked again.
    if f.scratch_bytes > MAX_SCRATCH_BYTES {
        let m = crate::limits::exceeded(
            "per-lane scratch bytes (private arrays and spills)",
            f.scratch_bytes as u64,
            MAX_SCRATCH_BYTES as u64,
            "gfx9's",
        );
        return Err(Error::Limit(m).into_backend(kernel.name()));
    }
    let asm = asm::print(&f);
    Ok(Compiled { func: f, asm })
}
