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
//!   variables, zeroed by the group on entry.
//!
//! Semantics follow the interpreter exactly: signed division guards `MIN / -1`, shift
//! amounts are masked, float-to-int casts clamp and map NaN to 0 explicitly, `min`/`max`
//! follow minimumNumber/maximumNumber with -0.0 < +0.0, `for` loops never wrap.
//! `bool` values are stored in memory as bytes. In the Vulkan flavour float arithmetic is
//! `NoContraction` (no fma fusion or value-changing algebra) and float zero immediates are
//! built from a run-time zero (lavapipe folds `x * 0.0` to `0.0`, wrong for -0.0/NaN/inf).
//!
//! The OpenCL flavour rejects kernels that use `f16` (OpenCL environments forbid the
//! `Float16` capability; a `vload_half`/`vstore_half` lowering is not written yet) and
//! 64-bit atomics (OpenCL environments forbid `Int64Atomics`).
//!
//! What the Vulkan flavour cannot express, rejected with an error: `exp`, `log`, `sin` and
//! `cos` on `f64` (GLSL.std.450 defines them on 16- and 32-bit floats only). The IR has no
//! pointer arithmetic or pointer-valued expressions, so every pointer maps to one binding.

mod ctx;
mod expr;
mod stmt;

use std::fmt;

use rspirv::binary::{Assemble, Disassemble};
use rspirv::dr::Operand;
use rspirv::spirv::{
    AddressingModel, BuiltIn, Capability, Decoration, ExecutionMode, ExecutionModel,
    FunctionControl, MemoryModel, StorageClass, Word,
};

use kiln_ir::{Kernel, Scalar, Stmt, StmtNode, Type};

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

/// An emission error: the kernel uses something the flavour cannot express, or is
/// ill-formed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpirvError {
    /// The kernel's name.
    pub kernel: String,
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for SpirvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "spirv: kernel `{}`: {}", self.kernel, self.message)
    }
}

impl std::error::Error for SpirvError {}

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
    /// Byte offset in the block: a 64-bit slot for 64-bit types, else a 32-bit slot holding
    /// the value's bits zero-extended (`bool` is 0 or 1).
    pub offset: u32,
    /// The parameter's type.
    pub ty: Scalar,
}

/// How the host binds a Vulkan-flavour module.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VulkanLayout {
    /// Storage buffers, one per pointer parameter.
    pub buffers: Vec<BufferBinding>,
    /// Scalars in the push-constant block.
    pub scalars: Vec<PushScalar>,
    /// Size of the push-constant block in bytes; the global offset is three `u32` at 0,
    /// followed by a `u32` that must be 0 (at 12).
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

    /// A textual disassembly (rspirv's).
    pub fn disassemble(&self) -> String {
        match rspirv::dr::load_words(&self.words) {
            Ok(m) => m.disassemble(),
            Err(e) => format!("; cannot parse module: {e}"),
        }
    }
}

/// Emits `kernel` (which must verify) as a SPIR-V module of the given flavour.
pub fn emit(kernel: &Kernel, flavour: Flavour) -> Result<SpirvModule, SpirvError> {
    // Emission recurses over expressions: give it bounded depth (see kiln_ir::depth).
    let kernel = &kiln_ir::depth::bound_kernel(kernel);
    let err = |message: String| SpirvError { kernel: kernel.name().to_string(), message };
    if let Err(errs) = kiln_ir::verify_kernel(kernel) {
        let first = errs.first().map(|e| e.to_string()).unwrap_or_default();
        return Err(err(format!("ill-formed kernel: {first}")));
    }
    let mut cx = Ctx::new(flavour);
    let mut em = stmt::Emitter::new(kernel);
    let layout = match flavour {
        Flavour::Vulkan => setup_vulkan(&mut cx, &mut em, kernel),
        Flavour::OpenCl => setup_opencl(&mut cx, &mut em, kernel),
    }
    .map_err(err)?;
    em.body(&mut cx, kernel).map_err(err)?;
    if flavour == Flavour::OpenCl && cx.f16_used {
        return Err(err("f16 is not supported by the OpenCL flavour (OpenCL environments \
             allow only Float16Buffer; vload_half/vstore_half lowering is not implemented)"
            .into()));
    }
    let module = cx.finish().module();
    Ok(SpirvModule { words: module.assemble(), flavour, entry: kernel.name().to_string(), layout })
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
    cx.b.memory_model(AddressingModel::Logical, MemoryModel::GLSL450);
    let u32t = cx.ty(Scalar::U32);
    let v3 = cx.b.type_vector(u32t, 3);
    let mut iface = Vec::new();
    for (kind, bi) in [
        (kiln_ir::Builtin::GlobalId, BuiltIn::GlobalInvocationId),
        (kiln_ir::Builtin::LocalId, BuiltIn::LocalInvocationId),
        (kiln_ir::Builtin::GroupId, BuiltIn::WorkgroupId),
        (kiln_ir::Builtin::NumGroups, BuiltIn::NumWorkgroups),
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
    // Global offset (0..12), then a u32 the host always sets to 0 (see `Emitter::opaque_zero`).
    let mut members = vec![u32t, u32t, u32t, u32t];
    let mut offsets = vec![0u32, 4, 8, 12];
    let mut decorated_structs = Vec::new();
    let mut next = 16u32;
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
                em.bind_storage(p, v);
                layout.buffers.push(BufferBinding { param: i, elem });
            }
            Type::Scalar(s) => {
                let slot = if s.bits() == 64 { Scalar::U64 } else { Scalar::U32 };
                let t = cx.ty(slot);
                em.push_params.push((p.clone(), members.len() as u32, slot));
                members.push(t);
                offsets.push(next);
                layout.scalars.push(PushScalar { param: i, offset: next, ty: s });
                next += 8;
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
