//! SPIR-V backend: lowers a verified kernel to a SPIR-V module with rspirv, in one of two
//! flavours.
//!
//! * [`Flavour::OpenCl`]: `Kernel` capability, `Physical64` addressing, OpenCL memory model
//!   (SPIR-V 1.2). Pointer parameters are `CrossWorkgroup` (`UniformConstant` for
//!   `constant`) kernel arguments; built-ins are `Input` variables of `size_t` vectors
//!   converted to the IR's `u32`; math uses `OpenCL.std`.
//! * [`Flavour::Vulkan`]: `Shader` capability, `GLCompute`, logical addressing (SPIR-V 1.3,
//!   Vulkan 1.1). Pointer parameter `k` becomes the storage buffer at set 0, binding `k`
//!   (a block holding a runtime array); scalar parameters and the global offset live in a
//!   push-constant block ([`VulkanLayout`]); the work-group size is the specialization
//!   constants 0, 1, 2 (the `WorkgroupSize` built-in); local arrays are `Workgroup`
//!   variables, zeroed by the group on entry; private arrays are `Function` variables,
//!   zeroed where declared (by a loop beyond 64 elements: drivers expand a null constant of
//!   the whole array).
//!
//! Limits checked before emitting (the device checks its own when it builds): at most
//! [`MAX_FUNCTION_PARAMS`] parameters in the OpenCL flavour, array bytes within `u32`.
//!
//! Semantics follow the interpreter exactly: shift amounts are masked, float-to-int casts
//! clamp and map NaN to 0 explicitly, `min`/`max` follow minimumNumber/maximumNumber with
//! -0.0 < +0.0, `for` loops never wrap. `bool` values are stored in memory as bytes. In the
//! Vulkan flavour float arithmetic is `NoContraction` (no fma fusion or value-changing
//! algebra) and float zero immediates are built from a run-time zero (lavapipe folds
//! `x * 0.0` to `0.0`, wrong for -0.0/NaN/inf).
//!
//! # The same answer on every Vulkan driver
//!
//! The Vulkan environment (appendix "Vulkan Environment for SPIR-V", section "Precision and
//! Operation of SPIR-V Instructions") leaves some results undefined or less precise than
//! kiln's semantics; a conformant driver may differ from the interpreter there, and NVIDIA's
//! does. Each such operation is lowered to instructions Vulkan defines exactly (integer
//! operations, and `OpFAdd`/`OpFSub`/`OpFMul`/`OpFConvert`, which it requires to be
//! correctly rounded), in `exact.rs`:
//!
//! | kiln operation | what Vulkan allows | lowering |
//! |---|---|---|
//! | signed `%` | `OpSRem`/`OpSMod` undefined if an operand is negative (NVIDIA: `-42 % -2 == -42`) | `OpUMod` on the magnitudes, sign of the dividend |
//! | signed `/` | `OpSDiv` undefined on overflow (`MIN / -1`) | `OpUDiv` on the magnitudes, negated if the signs differ (`MIN / -1` wraps to `MIN`) |
//! | f32 `fma` | GLSL.std.450 `Fma` may round twice (lavapipe: `fma(1 + 2^-23, 1 - 2^-23, -1)` is 0, `fma(1e38, 10, -inf)` NaN) | exact product in f64, TwoSum, round-to-odd, one rounding to f32 |
//! | f32 `/` | `OpFDiv` 2.5 ULP, undefined for divisors outside [2^-126, 2^126] | f64 estimate, a Newton step with the exact f64 residual `a - q*b`, then the last bit chosen by the exact residual at the midpoint; zeros, infinities and NaN decided explicitly |
//! | f32 `sqrt` | `Sqrt` only as exact as `1 / InverseSqrt` | the same scheme with the residual `x - q*q` |
//! | f64 `fma` | `Fma` may round twice (lavapipe's does; NVIDIA's rounds once) | GLSL.std.450 `Fma` where the device measured it to round once when opened ([`Spirv::exact_f64_fma`]); elsewhere **refused** with an error naming it (no exact f64 emulation is written) |
//! | shifts | undefined for amounts >= the width | amount masked to the width (as the interpreter takes it modulo) |
//! | float to int casts | `OpConvertFToS/U` undefined out of range and for NaN | range and NaN tested first, the converted value only for in-range inputs |
//! | `min`/`max` | GLSL `FMin`/`FMax` undefined for NaN | explicit compares, `IsNan` and a sign test for ±0 (no `FMin`/`FMax`) |
//!
//! The f32 sequences use f64 arithmetic, so a kernel with f32 `fma`, `/` or `sqrt` needs a
//! device with `shaderFloat64` (NVIDIA, AMD, lavapipe have it; many mobile GPUs do not); the
//! runtime refuses to load a module declaring `Float64` on a device without it.
//!
//! What is not made exact, and why:
//! * f64 `/` and `sqrt` are the driver's `OpFDiv` and `Sqrt`. Vulkan only promises that
//!   double precision is at least as precise as single precision; lavapipe and NVIDIA's
//!   driver give the correctly rounded results in every test kiln runs (the differential
//!   tests and benches/gpu/run_vulkan.sh), but no specification promises it.
//! * `exp`, `log`, `sin`, `cos` (f32) are the driver's GLSL.std.450 functions, as the other
//!   backends use their hardware's: Vulkan allows `exp` 3 + 2|x| ULP, `log` 3 ULP (2^-21
//!   absolute in [0.5, 2]), `sin`/`cos` 2^-11 absolute in [-pi, pi]; the interpreter uses
//!   kiln's own f32 algorithms (`kiln_ir::eval::math`, docs/math.md). They are approximate
//!   in kiln's semantics (`Intrinsic::is_approximate`); tests compare them with a tolerance.
//!   On f64 they are refused (GLSL.std.450 defines them on 16- and 32-bit floats only).
//! * Subnormals: Vulkan lets a driver flush them. The module declares `DenormPreserve`
//!   (SPV_KHR_float_controls) for each float width it uses; the runtime drops the mode where
//!   the device does not offer it (`shaderDenormPreserveFloat32/64`), and then the driver's
//!   default applies. lavapipe (Mesa 22) offers neither mode but keeps subnormals. **NVIDIA's
//!   driver (580.159.04, H100) offers neither and flushes f32 subnormals** (inputs and
//!   results; f64 ones are kept): there, f32 results that involve subnormals differ from
//!   the interpreter (flushed to zero). The Vulkan device measures this when opened and
//!   warns when it loads an f32 kernel there; keeping them would need subnormal f32
//!   arithmetic emulated with integer operations.
//! * `SignedZeroInfNanPreserve` is not emitted either: a driver may assume no NaN or
//!   infinity arises. lavapipe and NVIDIA's driver keep NaN and infinities in kiln's tests;
//!   a difference where the interpreter computes a NaN is tolerated by the random tests
//!   (lavapipe drops the store of a NaN it computes at compile time).
//! * Rounding is assumed to be to nearest even: Vulkan allows round-toward-zero for
//!   arithmetic where `shaderRoundingModeRTEFloat32` is false, and kiln does not query it.
//! * lavapipe stops a loop after 65,535 iterations per invocation, silently (a driver
//!   cap, not a Vulkan rule): kernels whose loops run longer give wrong results there and
//!   not on other drivers. Nothing in the module can detect this; a run-time check (the
//!   sanitizer mode) is where such a cap is caught.
//!
//! The OpenCL flavour rejects kernels that use `f16` (OpenCL environments forbid the
//! `Float16` capability; a `vload_half`/`vstore_half` lowering is not written yet) and
//! 64-bit atomics (OpenCL environments forbid `Int64Atomics`).
//!
//! What the Vulkan flavour cannot express, rejected with an error: `exp`, `log`, `sin` and
//! `cos` on `f64` (GLSL.std.450 defines them on 16- and 32-bit floats only), and `fma` on
//! `f64` (see above). The IR has no
//! pointer arithmetic or pointer-valued expressions, so every pointer maps to one binding.

mod ctx;
mod exact;
mod expr;
mod matrix;
mod stmt;
mod vector;

use rspirv::binary::{Assemble, Disassemble};
use rspirv::dr::Operand;
use rspirv::spirv::{
    AddressingModel, BuiltIn, Capability, Decoration, ExecutionMode, ExecutionModel,
    FunctionControl, MemoryModel, StorageClass, Word,
};

use kiln_ir::{Kernel, Scalar, Stmt, StmtNode, Type, Verified};

use crate::target::{
    verified_kernel, BackendError, Emitted, ErrorKind, Lowering, Target, VectorLowering,
};

use ctx::Ctx;

/// Which SPIR-V environment to target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Flavour {
    /// OpenCL `Kernel` flavour (validate with `spirv-val --target-env opencl2.2`).
    OpenCl,
    /// Vulkan compute flavour (validate with `spirv-val --target-env vulkan1.1`).
    Vulkan,
}

impl Flavour {
    /// The `spirv-val --target-env` value for this flavour.
    pub fn target_env(self) -> &'static str {
        match self {
            Flavour::OpenCl => "opencl2.2",
            Flavour::Vulkan => "vulkan1.1",
        }
    }
}

/// A storage-buffer binding of the Vulkan flavour.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BufferBinding {
    /// The kernel parameter index (also the binding number, in set 0).
    pub param: usize,
    /// The IR element type (`bool` is stored as one byte).
    pub elem: Scalar,
}

/// A scalar parameter stored in the push-constant block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushScalar {
    /// The kernel parameter index.
    pub param: usize,
    /// Byte offset in the block: an 8-aligned 64-bit slot for 64-bit types, else a 32-bit
    /// slot holding the value's bits zero-extended (`bool` is 0 or 1).
    pub offset: u32,
    /// The parameter's type.
    pub ty: Scalar,
}

/// Where scalar parameters start in the Vulkan flavour's push-constant block.
pub const PUSH_SCALARS_AT: u32 = 32;

/// Where the launch's work-group counts (three `u32`) live in the push-constant block.
pub const PUSH_NUM_GROUPS_AT: u32 = 16;

/// How the host binds a Vulkan-flavour module.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VulkanLayout {
    /// Storage buffers, one per pointer parameter.
    pub buffers: Vec<BufferBinding>,
    /// Scalars in the push-constant block.
    pub scalars: Vec<PushScalar>,
    /// Size of the push-constant block in bytes; the global offset is three `u32` at 0,
    /// followed by a `u32` that must be 0 (at 12), the launch's work-group counts (three
    /// `u32` at [`PUSH_NUM_GROUPS_AT`]), and a `u32` pad; scalars start at
    /// [`PUSH_SCALARS_AT`]. The module must be dispatched with a dispatch base
    /// (`vkCmdDispatchBase`) when the host splits a launch: `group_id` and `global_id` come
    /// from `WorkgroupId` and `GlobalInvocationId`, which include the base.
    pub push_size: u32,
}

/// An emitted module.
#[derive(Clone, Debug)]
pub struct SpirvModule {
    /// The SPIR-V words.
    pub words: Vec<u32>,
    /// The flavour it was emitted for.
    pub flavour: Flavour,
    /// The entry point's name (the kernel's).
    pub entry: String,
    /// Bindings of the Vulkan flavour (empty for OpenCL).
    pub layout: VulkanLayout,
}

impl SpirvModule {
    /// The module as little-endian bytes (a `.spv` file).
    pub fn to_bytes(&self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    /// Runs the SPIR-V validator at `spirv_val` (`spirv-val` of SPIRV-Tools) on this module
    /// for its flavour's target environment: `Err` holds what the validator printed, or why
    /// it could not run.
    pub fn validate(&self, spirv_val: &std::path::Path) -> Result<(), String> {
        use std::io::Write;
        use std::process::{Command, Stdio};
        let mut child = Command::new(spirv_val)
            .args(["--target-env", self.flavour.target_env(), "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", spirv_val.display()))?;
        let fed = child.stdin.take().map(|mut i| i.write_all(&self.to_bytes()));
        let out = child
            .wait_with_output()
            .map_err(|e| format!("cannot run {}: {e}", spirv_val.display()))?;
        match fed {
            _ if out.status.success() => Ok(()),
            Some(Err(e)) => Err(format!("cannot feed {}: {e}", spirv_val.display())),
            _ => Err(format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )),
        }
    }

    /// A textual disassembly (rspirv's).
    pub fn disassemble(&self) -> String {
        match rspirv::dr::load_words(&self.words) {
            Ok(m) => m.disassemble(),
            // rspirv 0.12's loader does not take OpTypeCooperativeMatrixKHR for a type and
            // rejects the module: list its instructions one after another instead.
            Err(_) => flat_listing(&self.words),
        }
    }
}

/// The header and the instructions of a module, one a line, as read (no structure).
fn flat_listing(words: &[u32]) -> String {
    use rspirv::binary::{Consumer, ParseAction};
    struct Lines(Vec<String>);
    impl Consumer for Lines {
        fn initialize(&mut self) -> ParseAction {
            ParseAction::Continue
        }
        fn finalize(&mut self) -> ParseAction {
            ParseAction::Continue
        }
        fn consume_header(&mut self, h: rspirv::dr::ModuleHeader) -> ParseAction {
            let (major, minor) = h.version();
            self.0.push(format!("; SPIR-V\n; Version: {major}.{minor}\n; Bound: {}", h.bound));
            ParseAction::Continue
        }
        fn consume_instruction(&mut self, inst: rspirv::dr::Instruction) -> ParseAction {
            self.0.push(inst.disassemble());
            ParseAction::Continue
        }
    }
    let mut lines = Lines(Vec::new());
    match rspirv::binary::parse_words(words, &mut lines) {
        Ok(()) => lines.0.join("\n"),
        Err(e) => format!("; cannot parse module: {e}"),
    }
}

/// The SPIR-V target of one flavour: one module per kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Spirv {
    /// The flavour emitted.
    pub flavour: Flavour,
    /// Whether the Vulkan driver that will run the modules computes GLSL.std.450 `Fma` on
    /// f64 with one rounding, as kiln's `fma` does (the Vulkan device measures it when it
    /// opens). Only then does a Vulkan-flavour module use it for f64 `fma`; otherwise f64
    /// `fma` is refused by name. The OpenCL flavour's `fma` is exact by its specification.
    pub exact_f64_fma: bool,
}

impl Spirv {
    /// The target for `flavour`, assuming nothing of the driver (f64 `fma` is refused in
    /// the Vulkan flavour).
    pub fn new(flavour: Flavour) -> Spirv {
        Spirv { flavour, exact_f64_fma: false }
    }
}

impl Flavour {
    /// The target's name: `spirv-cl` or `spirv-vk`.
    pub fn target_name(self) -> &'static str {
        match self {
            Flavour::OpenCl => "spirv-cl",
            Flavour::Vulkan => "spirv-vk",
        }
    }
}

impl Target for Spirv {
    type Output = Vec<SpirvModule>;
    /// Vector loads and stores stay whole (`OpTypeVector` accesses, see `vector.rs`), the
    /// rest one scalar per lane.
    fn lowering(&self) -> Lowering {
        Lowering { optimize: true, sanitize: true, vectors: VectorLowering::Memory }
    }
    fn name(&self) -> String {
        self.flavour.target_name().into()
    }
    fn emit(&self, module: &Verified) -> Result<Vec<SpirvModule>, BackendError> {
        module.kernels.iter().map(|k| emit_verified(k, *self)).collect()
    }
}

impl Emitted for Vec<SpirvModule> {
    fn listing(&self) -> String {
        self.iter().map(SpirvModule::disassemble).collect::<Vec<_>>().join("\n")
    }
    /// The modules' bytes, one after another: a `.spv` file holds one module, so emit one
    /// kernel per file.
    fn to_bytes(&self) -> Vec<u8> {
        self.iter().flat_map(SpirvModule::to_bytes).collect()
    }
    fn is_binary(&self) -> bool {
        true
    }
}

/// Emits `kernel` as a SPIR-V module of the given flavour; an ill-formed kernel is an error.
pub fn emit(kernel: &Kernel, flavour: Flavour) -> Result<SpirvModule, BackendError> {
    let m = verified_kernel(flavour.target_name(), kernel)?;
    emit_verified(&m.kernels[0], Spirv::new(flavour))
}

/// Why a vector construct reaches emission: [`emit_verified`] lowers them first.
pub(crate) const VECTORS: &str = "vector values reach SPIR-V emission unlowered";
/// Why a fragment-typed parameter reaches emission (the verifier refuses them).
pub(crate) const MATRIX: &str = "fragments cannot be kernel parameters";

/// Emits one kernel of a verified module.
fn emit_verified(kernel: &Kernel, target: Spirv) -> Result<SpirvModule, BackendError> {
    let flavour = target.flavour;
    // Vector values become one scalar per lane, memory accesses staying whole (the driver
    // does this already for builds; direct callers get the same).
    let kernel = &kiln_passes::vectors::lower_vectors(kernel, VectorLowering::Memory);
    // Emission recurses over expressions: give it bounded depth (see kiln_ir::depth).
    let kernel = &kiln_ir::depth::bound_kernel(kernel);
    let err = |kind| {
        move |message: String| {
            BackendError::new(flavour.target_name(), kernel.name(), kind, message)
        }
    };
    check_limits(kernel, flavour).map_err(err(ErrorKind::Limit))?;
    if let Some(e) = kiln_ir::matrix::first_warpgroup(kernel) {
        return Err(err(ErrorKind::Unsupported)(format!("{e}: {}", matrix::WARPGROUP)));
    }
    if kiln_ir::matrix::uses_bf16(kernel) {
        return Err(err(ErrorKind::Unsupported)(
            "bf16 is not yet emitted for SPIR-V (it needs SPV_KHR_bfloat16)".to_string(),
        ));
    }
    if flavour == Flavour::OpenCl {
        if let Some(e) = kiln_ir::matrix::first_extension(kernel) {
            return Err(err(ErrorKind::Unsupported)(format!("{e}: {}", matrix::OPENCL)));
        }
    }
    let mut cx = Ctx::new(flavour);
    cx.exact_f64_fma = target.exact_f64_fma;
    cx.vulkan_memory_model = flavour == Flavour::Vulkan && matrix::uses_fragments(kernel);
    let mut em = stmt::Emitter::new(kernel);
    let layout = match flavour {
        Flavour::Vulkan => setup_vulkan(&mut cx, &mut em, kernel),
        Flavour::OpenCl => setup_opencl(&mut cx, &mut em, kernel),
    }
    .map_err(err(ErrorKind::Unsupported))?;
    em.body(&mut cx, kernel).map_err(err(ErrorKind::Unsupported))?;
    if flavour == Flavour::Vulkan {
        preserve_subnormals(&mut cx, em.entry_fn);
    }
    if flavour == Flavour::OpenCl && cx.f16_used {
        return Err(err(ErrorKind::Unsupported)(
            "f16 is not supported by the OpenCL flavour (OpenCL environments \
             allow only Float16Buffer; vload_half/vstore_half lowering is not implemented)"
                .into(),
        ));
    }
    let vulkan_memory_model = cx.vulkan_memory_model;
    let mut module = cx.finish().module();
    if vulkan_memory_model {
        matrix::mark_non_private(&mut module);
    }
    Ok(SpirvModule { words: module.assemble(), flavour, entry: kernel.name().to_string(), layout })
}

/// Vulkan lets a driver flush subnormal floats (NVIDIA's does for f32 by default) and
/// assume that no NaN, infinity or signed zero matters; kiln's semantics keep them all, so
/// the module asks for `DenormPreserve` and `SignedZeroInfNanPreserve`
/// (SPV_KHR_float_controls, core in Vulkan 1.2) for each float width it uses. The runtime drops the mode where the
/// device lacks the matching `shaderDenormPreserveFloat*` property (declaring it there is
/// invalid); see the module docs for what that means on lavapipe and NVIDIA.
fn preserve_subnormals(cx: &mut Ctx, entry: Word) {
    let widths: Vec<u32> = [Scalar::F32, Scalar::F64]
        .into_iter()
        .filter(|&s| cx.declared(s))
        .map(|s| s.bits())
        .collect();
    if widths.is_empty() {
        return;
    }
    cx.cap(Capability::DenormPreserve);
    cx.cap(Capability::SignedZeroInfNanPreserve);
    cx.ext("SPV_KHR_float_controls");
    for w in widths {
        cx.b.execution_mode(entry, ExecutionMode::DenormPreserve, [w]);
        // Without it a driver may assume no NaN or infinity arises, and lavapipe then drops
        // the store of a NaN it computes at compile time (`-0.0 / local_id(1)` with one
        // work-item in dimension 1).
        cx.b.execution_mode(entry, ExecutionMode::SignedZeroInfNanPreserve, [w]);
    }
}

/// The most parameters an `OpFunction` may have (SPIR-V's universal limits): the OpenCL
/// flavour passes every kernel parameter as one.
pub const MAX_FUNCTION_PARAMS: usize = 255;

/// SPIR-V's own limits that a kernel can exceed; the device's (buffer bindings, push
/// constants, shared memory) are checked by the device when it builds.
fn check_limits(kernel: &Kernel, flavour: Flavour) -> Result<(), String> {
    let f = crate::limits::Footprint::of(kernel);
    if flavour == Flavour::OpenCl && f.params > MAX_FUNCTION_PARAMS {
        return Err(crate::limits::exceeded(
            "kernel parameters",
            f.params as u64,
            MAX_FUNCTION_PARAMS as u64,
            "SPIR-V's function-parameter",
        ));
    }
    // Every array's element count is a `u32`; their sum, in bytes, must be one too (the
    // Vulkan flavour's push-constant offsets and the byte sizes drivers compute).
    for (what, bytes) in [("local arrays", f.local_bytes), ("private arrays", f.private_bytes)] {
        if bytes > u32::MAX as u64 {
            return Err(crate::limits::exceeded(
                &format!("{what} bytes"),
                bytes,
                u32::MAX as u64,
                "SPIR-V's 32-bit size",
            ));
        }
    }
    Ok(())
}

/// Collects `local` array declarations anywhere in the body (they are per work-group).
fn local_allocs(s: &Stmt, out: &mut Vec<Stmt>) {
    match s.node() {
        StmtNode::Alloc { var, .. } if var.ty().addr_space() == Some(kiln_ir::AddrSpace::Local) => {
            out.push(s.clone())
        }
        StmtNode::If { then, otherwise, .. } => {
            local_allocs(then, out);
            if let Some(o) = otherwise {
                local_allocs(o, out);
            }
        }
        StmtNode::For { body, .. } | StmtNode::While { body, .. } => local_allocs(body, out),
        StmtNode::Block(v) => v.iter().for_each(|s| local_allocs(s, out)),
        _ => {}
    }
}

/// Declares `Workgroup` arrays for the kernel's local allocations.
fn declare_local_arrays(cx: &mut Ctx, em: &mut stmt::Emitter, kernel: &Kernel) {
    let mut allocs = Vec::new();
    local_allocs(kernel.body(), &mut allocs);
    for s in allocs {
        if let StmtNode::Alloc { var, count } = s.node() {
            let elem = var.ty().elem().expect("pointer");
            let et = cx.mem_ty(elem);
            let n = cx.u32c((*count).max(1));
            let arr = cx.b.type_array(et, n);
            let pt = cx.ptr(StorageClass::Workgroup, arr);
            let v = cx.b.variable(pt, None, StorageClass::Workgroup, None);
            em.add_local_array(&s, v, arr, elem, *count);
        }
    }
}

/// An `Input` built-in variable of type `ty`.
fn builtin_var(cx: &mut Ctx, ty: Word, which: BuiltIn) -> Word {
    let pt = cx.ptr(StorageClass::Input, ty);
    let v = cx.b.variable(pt, None, StorageClass::Input, None);
    cx.b.decorate(v, Decoration::BuiltIn, [Operand::BuiltIn(which)]);
    v
}

fn setup_vulkan(
    cx: &mut Ctx,
    em: &mut stmt::Emitter,
    kernel: &Kernel,
) -> Result<VulkanLayout, String> {
    cx.b.set_version(1, 3);
    cx.cap(Capability::Shader);
    if cx.vulkan_memory_model {
        cx.cap(Capability::VulkanMemoryModel);
        cx.ext("SPV_KHR_vulkan_memory_model");
        cx.b.memory_model(AddressingModel::Logical, MemoryModel::Vulkan);
    } else {
        cx.b.memory_model(AddressingModel::Logical, MemoryModel::GLSL450);
    }
    let u32t = cx.ty(Scalar::U32);
    let v3 = cx.b.type_vector(u32t, 3);
    let mut iface = Vec::new();
    for (kind, bi) in [
        (kiln_ir::Builtin::GlobalId, BuiltIn::GlobalInvocationId),
        (kiln_ir::Builtin::LocalId, BuiltIn::LocalInvocationId),
        (kiln_ir::Builtin::GroupId, BuiltIn::WorkgroupId),
    ] {
        let v = builtin_var(cx, v3, bi);
        iface.push(v);
        em.builtins.insert(kind, v);
    }
    // Work-group size: specialization constants 0..2 (defaults: the required size, or 1).
    let reqd = kernel.attrs().reqd_work_group_size.unwrap_or([1, 1, 1]);
    let mut comps = Vec::new();
    for (d, &r) in reqd.iter().enumerate() {
        let c = cx.b.spec_constant_bit32(u32t, r);
        cx.b.decorate(c, Decoration::SpecId, [Operand::LiteralBit32(d as u32)]);
        comps.push(c);
    }
    let wgs = cx.b.spec_constant_composite(v3, comps.clone());
    cx.b.decorate(wgs, Decoration::BuiltIn, [Operand::BuiltIn(BuiltIn::WorkgroupSize)]);
    em.wg_size = comps;

    // Storage buffers and the push-constant block.
    let mut layout = VulkanLayout::default();
    // Global offset (0..12), then a u32 the host always sets to 0 (see `Emitter::opaque_zero`),
    // then the launch's work-group counts (16..28): a launch the host splits into several
    // dispatches (more groups than one dispatch may have) must still read the whole
    // launch's `num_groups`, which `NumWorkgroups` would not give.
    let mut members = vec![u32t; 7];
    let mut offsets = vec![0u32, 4, 8, 12, 16, 20, 24];
    let mut decorated_structs = Vec::new();
    let mut next = PUSH_SCALARS_AT;
    for (i, p) in kernel.params().iter().enumerate() {
        match p.ty() {
            Type::Ptr(_, elem) => {
                let ms = ctx::mem_scalar(elem);
                match ms.bits() {
                    8 => {
                        cx.cap(Capability::StorageBuffer8BitAccess);
                        cx.ext("SPV_KHR_8bit_storage");
                    }
                    16 => cx.cap(Capability::StorageBuffer16BitAccess),
                    _ => {}
                }
                let et = cx.ty(ms);
                let rt = cx.b.type_runtime_array(et);
                let st = cx.b.type_struct([rt]);
                if !decorated_structs.contains(&st) {
                    decorated_structs.push(st);
                    let stride = ms.size_bytes() as u32;
                    cx.b.decorate(rt, Decoration::ArrayStride, [Operand::LiteralBit32(stride)]);
                    cx.b.decorate(st, Decoration::Block, []);
                    cx.b.member_decorate(st, 0, Decoration::Offset, [Operand::LiteralBit32(0)]);
                }
                let pt = cx.ptr(StorageClass::StorageBuffer, st);
                let v = cx.b.variable(pt, None, StorageClass::StorageBuffer, None);
                cx.b.decorate(v, Decoration::DescriptorSet, [Operand::LiteralBit32(0)]);
                cx.b.decorate(v, Decoration::Binding, [Operand::LiteralBit32(i as u32)]);
                cx.b.decorate(v, Decoration::Aliased, []);
                em.bind_storage(p, v, i as u32);
                layout.buffers.push(BufferBinding { param: i, elem });
            }
            Type::Vector(..) => return Err(VECTORS.into()),
            Type::Frag(_) => return Err(MATRIX.into()),
            Type::Scalar(s) => {
                // 4-byte slots, 8-byte ones aligned for 64-bit types: push-constant space is
                // small (128 bytes guaranteed), so scalars are packed.
                let slot = if s.bits() == 64 { Scalar::U64 } else { Scalar::U32 };
                let size = slot.size_bytes() as u32;
                next = next.next_multiple_of(size);
                let t = cx.ty(slot);
                em.push_params.push((p.clone(), members.len() as u32, slot));
                members.push(t);
                offsets.push(next);
                layout.scalars.push(PushScalar { param: i, offset: next, ty: s });
                next += size;
            }
        }
    }
    let pst = cx.b.type_struct(members);
    cx.b.decorate(pst, Decoration::Block, []);
    for (m, off) in offsets.iter().enumerate() {
        cx.b.member_decorate(pst, m as u32, Decoration::Offset, [Operand::LiteralBit32(*off)]);
    }
    let ppt = cx.ptr(StorageClass::PushConstant, pst);
    em.push_var = Some(cx.b.variable(ppt, None, StorageClass::PushConstant, None));
    layout.push_size = next;
    declare_local_arrays(cx, em, kernel);

    let fty = cx.b.type_function(cx.void, []);
    let f =
        cx.b.begin_function(cx.void, None, FunctionControl::NONE, fty)
            .map_err(|e| e.to_string())?;
    cx.b.entry_point(ExecutionModel::GLCompute, f, kernel.name(), iface);
    em.entry_fn = f;
    Ok(layout)
}

fn setup_opencl(
    cx: &mut Ctx,
    em: &mut stmt::Emitter,
    kernel: &Kernel,
) -> Result<VulkanLayout, String> {
    cx.b.set_version(1, 2);
    cx.cap(Capability::Addresses);
    cx.cap(Capability::Kernel);
    cx.b.memory_model(AddressingModel::Physical64, MemoryModel::OpenCL);
    let u64t = cx.ty(Scalar::U64);
    let v3 = cx.b.type_vector(u64t, 3);
    let mut iface = Vec::new();
    for (kind, bi) in [
        (kiln_ir::Builtin::GlobalId, BuiltIn::GlobalInvocationId),
        (kiln_ir::Builtin::LocalId, BuiltIn::LocalInvocationId),
        (kiln_ir::Builtin::GroupId, BuiltIn::WorkgroupId),
        (kiln_ir::Builtin::GlobalSize, BuiltIn::GlobalSize),
        (kiln_ir::Builtin::LocalSize, BuiltIn::WorkgroupSize),
        (kiln_ir::Builtin::NumGroups, BuiltIn::NumWorkgroups),
        (kiln_ir::Builtin::GlobalOffset, BuiltIn::GlobalOffset),
    ] {
        let v = builtin_var(cx, v3, bi);
        cx.b.decorate(v, Decoration::Constant, []);
        iface.push(v);
        em.builtins.insert(kind, v);
    }
    declare_local_arrays(cx, em, kernel);
    let mut ptys = Vec::new();
    for p in kernel.params() {
        ptys.push(match p.ty() {
            Type::Ptr(space, elem) => {
                let sc = if space == kiln_ir::AddrSpace::Constant {
                    StorageClass::UniformConstant
                } else {
                    StorageClass::CrossWorkgroup
                };
                let et = cx.mem_ty(elem);
                cx.ptr(sc, et)
            }
            Type::Scalar(s) => cx.mem_ty(s),
            Type::Vector(..) => return Err(VECTORS.into()),
            Type::Frag(_) => return Err(MATRIX.into()),
        });
    }
    let fty = cx.b.type_function(cx.void, ptys.clone());
    let f =
        cx.b.begin_function(cx.void, None, FunctionControl::NONE, fty)
            .map_err(|e| e.to_string())?;
    for (p, &t) in kernel.params().iter().zip(&ptys) {
        let id = cx.b.function_parameter(t).map_err(|e| e.to_string())?;
        em.bind_cl_param(p, id);
    }
    cx.b.entry_point(ExecutionModel::Kernel, f, kernel.name(), iface);
    if let Some([x, y, z]) = kernel.attrs().reqd_work_group_size {
        cx.b.execution_mode(f, ExecutionMode::LocalSize, [x, y, z]);
    }
    Ok(VulkanLayout::default())
}
