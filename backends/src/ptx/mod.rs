//! # PTX backend: kiln kernels to PTX text
//!
//! [`emit_kernel`] and [`emit_module`] lower verified kiln IR straight to PTX assembly text
//! (no LLVM, no NVRTC) that NVIDIA's `ptxas` assembles for `sm_70` and newer (`sm_90` by
//! default, see [`Options`]).
//!
//! ## Lowering in brief
//!
//! * Values live in typed virtual registers (`%p` predicates for `bool`, `%r` 32-bit integers,
//!   `%rd` 64-bit integers and addresses, `%h` f16 bits, `%f` f32, `%fd` f64), numbered per
//!   kernel and declared once; `ptxas` allocates the physical registers. Integers narrower
//!   than 32 bits live sign- or zero-extended in `%r` registers and are re-canonicalized after
//!   every operation that can leave the type's range, which gives kiln's wrapping semantics.
//! * `let` binds the register an expression was computed into (no move); `var` gets its own
//!   register and assignments compute straight into it where they can.
//! * Control flow uses predicated branches; `for` loops never wrap around (the counter stops
//!   below `hi` even when `v + step` would overflow), as kiln's semantics require.
//! * Built-ins read `%tid`, `%ntid`, `%ctaid`, `%nctaid` once at entry (only those used). PTX
//!   has no global offset register: it is passed as three implicit trailing `.u32` kernel
//!   parameters ([`OFFSET_PARAMS`]), after the kernel's own parameters.
//! * Global and constant buffers are `ld/st.global` through `cvta.to.global` pointers, generic
//!   pointers use generic `ld/st`, local arrays are `.shared` (zeroed at entry, followed by one
//!   `bar.sync`; past [`MAX_SHARED_BYTES`] together, slices of one `.extern` dynamic window
//!   whose size [`dynamic_shared_bytes`] gives and a `// kiln.dynamic_shared_bytes` line
//!   names for launchers), private arrays are `.local` (zeroed where they are declared). An access costs
//!   one `mad.wide` (or none for a constant index) of 64-bit address arithmetic, shared by
//!   accesses whose signed index is the same value plus a positive constant (directly, via
//!   `add3` or a `let`): the constant becomes the address's immediate offset. That is exact
//!   for every in-bounds access, since such an index can only wrap to a negative value;
//!   unsigned indices and negative constants are never folded.
//! * Floating point is exact IEEE: `add.rn`, `mul.rn`, `div.rn`, `sqrt.rn`, `fma.rn` only for
//!   `fma`; under `#fast_math`, `add/sub/mul` drop `.rn` so that `ptxas` may contract them.
//!   `exp`, `log`, `sin` and `cos` use the hardware approximations on f32 (they are
//!   approximate in kiln too) and are an error on f64.
//! * Shift amounts are masked to the bit width unless they are constants in range; float to
//!   integer casts saturate with NaN giving 0 (`cvt.rzi`, clamped further for 8/16-bit types).
//! * `barrier` is `bar.sync 0` (which orders shared and global memory for the work-group),
//!   `fence` is `membar.cta` (local) or `membar.gl` (global), atomics are
//!   `atom.{global,shared}` (generic for generic pointers).
//!
//! Constructs the backend cannot express (f64 transcendental functions, pointer parameters
//! in the local or private address space) are a [`BackendError`], never wrong code.

mod lower;
mod regs;

pub use lower::dynamic_shared_bytes;

use kiln_ir::{Kernel, Module, Verified};

use crate::target::{verified_kernel, BackendError, ErrorKind, Lowering, Target, VectorLowering};

/// Names of the three implicit `.u32` parameters that carry the global offset (x, y, z).
/// They follow the kernel's own parameters, in this order.
pub const OFFSET_PARAMS: [&str; 3] = ["__kiln_offset_x", "__kiln_offset_y", "__kiln_offset_z"];

/// What to emit for: the target architecture and the PTX ISA version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// The SM architecture number: 90 emits `.target sm_90`. At least 70.
    pub sm: u32,
    /// The PTX ISA version as (major, minor); `None` picks the lowest that supports `sm`.
    pub ptx_version: Option<(u32, u32)>,
}

impl Default for Options {
    fn default() -> Options {
        Options { sm: 90, ptx_version: None }
    }
}

impl Options {
    /// Options for the given SM architecture with the default PTX version.
    pub fn sm(sm: u32) -> Options {
        Options { sm, ptx_version: None }
    }

    /// The PTX ISA version the module declares.
    pub fn version(&self) -> (u32, u32) {
        self.ptx_version.unwrap_or(match self.sm {
            0..=79 => (6, 4),
            80..=85 => (7, 0),
            86 => (7, 1),
            87 => (7, 4),
            88..=99 => (7, 8),
            100..=119 => (8, 6),
            _ => (8, 7),
        })
    }
}

/// The PTX target: [`Options`] say for which architecture and ISA version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ptx(pub Options);

impl Target for Ptx {
    type Output = String;
    fn name(&self) -> String {
        "ptx".into()
    }
    /// Vector loads and stores stay whole (`ld.global.v4.f32`); lanes are scalar registers.
    fn lowering(&self) -> Lowering {
        Lowering { optimize: true, sanitize: true, vectors: VectorLowering::Memory }
    }
    fn emit(&self, module: &Verified) -> Result<String, BackendError> {
        emit_kernels(&module.kernels, &self.0, false)
    }
}

/// Emits a PTX module holding one kernel (`.visible .entry` named like the kernel); an
/// ill-formed kernel is an error.
pub fn emit_kernel(kernel: &Kernel, options: &Options) -> Result<String, BackendError> {
    Ptx(*options).emit(&verified_kernel("ptx", kernel)?)
}

/// Emits a PTX module holding every kernel of `module`; an ill-formed module is an error.
pub fn emit_module(module: &Module, options: &Options) -> Result<String, BackendError> {
    let m = Verified::new(module.clone()).map_err(|e| BackendError::ill_formed("ptx", &e))?;
    Ptx(*options).emit(&m)
}

/// Bytes of `.param` space a kernel's parameters may take before PTX ISA 8.1 (ptxas:
/// 0x1100); kiln's default PTX versions are older.
pub const MAX_PARAM_BYTES: u64 = 4352;

/// Bytes of `.param` space from PTX ISA 8.1 on (ptxas: 0x7ffc; needs a CUDA 12.1 driver).
pub const MAX_PARAM_BYTES_8_1: u64 = 32764;

/// Bytes of statically allocated `.shared` memory a kernel may declare (ptxas: 0xc000);
/// local arrays past this share one dynamic (`.extern`) window sized at launch.
pub const MAX_SHARED_BYTES: u64 = 48 * 1024;

/// Bytes of dynamic shared memory one work-group may use on sm_80 and newer after opting in
/// (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`): 227 KiB on sm_90, the largest of
/// the targets (an sm_80 device allows 163 KiB and refuses more at launch).
pub const MAX_DYNAMIC_SHARED_BYTES: u64 = 227 * 1024;

/// Bytes of `.local` memory per thread (the CUDA limit for sm_70 and newer).
pub const MAX_LOCAL_BYTES: u64 = 512 * 1024;

/// The `.param` bytes of `kernel`'s parameters and the implicit offset parameters, each
/// aligned to its size.
pub fn param_bytes(kernel: &Kernel) -> u64 {
    let mut at = 0u64;
    for p in kernel.params() {
        let size = match p.ty() {
            kiln_ir::Type::Ptr(..) => 8,
            kiln_ir::Type::Scalar(s) => s.size_bytes().max(1) as u64,
            kiln_ir::Type::Vector(s, n) => s.size_bytes() as u64 * n as u64,
            // Refused by the verifier; counted as nothing.
            kiln_ir::Type::Frag(_) => 0,
        };
        at = at.next_multiple_of(size) + size;
    }
    at.next_multiple_of(4) + 4 * OFFSET_PARAMS.len() as u64
}

/// What ptxas (or, for `.local`, CUDA) would reject for size, refused before emitting with
/// the limit named.
/// `dynamic` is [`dynamic_shared_bytes`] of `k`, found once by the caller (the lowering
/// declares the same window).
fn check_limits(k: &Kernel, options: &Options, dynamic: u64) -> Result<(), String> {
    use crate::limits::{exceeded, Footprint};
    let f = Footprint::of(k);
    let (params, what) = if options.version() >= (8, 1) {
        (MAX_PARAM_BYTES_8_1, "parameter bytes (with the 3 offset parameters)")
    } else {
        (
            MAX_PARAM_BYTES,
            "parameter bytes (with the 3 offset parameters; PTX ISA 8.1 allows 32764)",
        )
    };
    let checks = [
        (what, param_bytes(k), params, "ptxas's"),
        (
            "shared (local array) bytes",
            f.local_bytes.max(dynamic),
            shared_limit(options),
            "the target's",
        ),
        ("per-thread local (private array) bytes", f.private_bytes, MAX_LOCAL_BYTES, "CUDA's"),
    ];
    for (what, need, limit, whose) in checks {
        if need > limit {
            return Err(exceeded(what, need, limit, whose));
        }
    }
    Ok(())
}

/// The most local-array bytes a kernel may use on the target: the dynamic opt-in limit
/// from sm_80 on, else ptxas's static limit.
fn shared_limit(options: &Options) -> u64 {
    if options.sm >= 80 {
        MAX_DYNAMIC_SHARED_BYTES
    } else {
        MAX_SHARED_BYTES
    }
}

/// PTX for `kernels`; `always_lower`: take every kernel through the vector lowering (see
/// [`prepare`]).
fn emit_kernels(
    kernels: &[Kernel],
    options: &Options,
    always_lower: bool,
) -> Result<String, BackendError> {
    if options.sm < 70 {
        return Err(BackendError::new(
            "ptx",
            kernels.first().map_or("", |k| k.name()),
            ErrorKind::Unsupported,
            format!("sm_{} is not supported (sm_70 or newer)", options.sm),
        ));
    }
    let (mut major, mut minor) = options.version();
    // The warpgroup tier (wgmma, TMA, mbarrier transaction counts) exists only on sm_90a,
    // from PTX ISA 8.0 on.
    // Each kernel's, found once: the local arrays' alignment and the dynamic window's size
    // depend on it too (a statement walk of the whole kernel each time it was asked).
    let wgs: Vec<_> = kernels.iter().map(kiln_ir::matrix::first_warpgroup).collect();
    let wg = kernels.iter().zip(&wgs).find_map(|(k, e)| e.map(|e| (k, e)));
    let mut arch = format!("sm_{}", options.sm);
    if let Some((k, e)) = wg {
        let refuse = |why: String| {
            Err(BackendError::new("ptx", k.name(), ErrorKind::Unsupported, format!("{e} {why}")))
        };
        if options.sm != 90 {
            return refuse(format!(
                "needs sm_90a (sm_90 exactly); the target is sm_{}",
                options.sm
            ));
        }
        if options.ptx_version.is_some_and(|v| v < (8, 0)) {
            return refuse(format!("needs PTX ISA 8.0 or newer; the target is {major}.{minor}"));
        }
        if (major, minor) < (8, 0) {
            (major, minor) = (8, 0);
        }
        arch = "sm_90a".into();
    }
    let mut out = format!(
        "//\n// Generated by kiln\n//\n\n.version {major}.{minor}\n.target {arch}\n.address_size 64\n"
    );
    for (k, wg) in kernels.iter().zip(wgs) {
        let prepared = prepare(k, always_lower);
        // The vector lowering adds no warpgroup operation, but a rewritten kernel is asked
        // again rather than assumed.
        let wg = if prepared.ptr_eq(k) { wg } else { kiln_ir::matrix::first_warpgroup(&prepared) };
        let k = &prepared;
        let align = lower::local_align_of(wg);
        let dynamic = lower::dynamic_shared_bytes_at(k, align);
        let fail = |kind| move |m| BackendError::new("ptx", k.name(), kind, m);
        check_limits(k, options, dynamic).map_err(fail(ErrorKind::Limit))?;
        // Only older targets pay for the walk.
        let needs_sm80 = || kiln_ir::matrix::first_extension(k);
        if let Some(e) = (options.sm < 80).then(needs_sm80).flatten() {
            return Err(fail(ErrorKind::Unsupported)(format!(
                "{e} needs sm_80 or newer; the target is sm_{}",
                options.sm
            )));
        }
        out.push('\n');
        let text = lower::lower_kernel(k, options, align, dynamic)
            .map_err(fail(ErrorKind::Unsupported))?;
        out.push_str(&text);
    }
    Ok(out)
}

/// `k` as [`lower::lower_kernel`] takes it: lane-wise vector arithmetic made scalar code
/// (the driver did this already for builds; direct callers get the same) and every
/// expression of bounded depth, since lowering recurses (see `kiln_ir::depth`).
///
/// A kernel of bounded depth whose vector arithmetic is all in simple statements
/// ([`vectors::lowers_by_statement`]: the `-O` pipeline's output of the generator's kernels,
/// whose vectors are loads, stores and, in the epilogue, `alpha * acc`) is taken as it is:
/// lowering takes each statement that is not in the memory form through the vector lowering
/// on its own ([`vectors::StmtLanes`]), which computes what the whole kernel's lowering
/// computes, in the same order, and binds the rest directly (the lowering's extra `let` per
/// lane binds a register without an instruction), so the PTX is the same byte for byte,
/// without rebuilding (and freeing) the whole kernel. The depth check comes first because
/// bounding the rewritten kernel instead could cut its trees elsewhere.
fn prepare(k: &Kernel, always_lower: bool) -> Kernel {
    use kiln_passes::vectors;
    if !always_lower && kiln_ir::depth::is_bounded(k) && vectors::lowers_by_statement(k) {
        return k.clone();
    }
    kiln_ir::depth::bound_kernel(&vectors::lower_vectors(k, VectorLowering::Memory))
}

/// PTX for `module` with every kernel taken through the vector lowering, never as it is
/// (see `prepare`): the text the backend emitted before it skipped the rewrite, for tests
/// that check both give the same.
#[cfg(feature = "testing")]
pub fn emit_module_lowering_vectors(
    module: &Module,
    options: &Options,
) -> Result<String, BackendError> {
    let m = Verified::new(module.clone()).map_err(|e| BackendError::ill_formed("ptx", &e))?;
    emit_kernels(&m.kernels, options, true)
}
