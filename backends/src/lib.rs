//! kiln-backends: lowering verified kiln IR to device code.
//!
//! Every backend has one shape, [`target::Target`]: it lowers a [`kiln_ir::Verified`]
//! module and fails with [`target::BackendError`]. The build driver ([`driver`]) is the one
//! path from a module to a target's output (verify once, sanitize, optimize, emit) for the
//! CLI and every device; [`registry`] finds targets by name.
//!
//! * [`spirv`]: SPIR-V words (OpenCL `Kernel` and Vulkan compute flavours), checked by
//!   spirv-val and run on Vulkan by `kiln-runtime`.
//! * [`ptx`]: PTX text for NVIDIA GPUs (sm_70+), checked by ptxas and run through CUDA.
//! * [`amdgpu`]: gfx9-style assembly text, checked by llvm-mc and run on kiln's own wave64
//!   simulator.
//! * [`kir`]: the kernels as the interpreter runs them.
//! * [`x86`]: x86-64 machine code assembled in-process with iced-x86, run on the host
//!   (one function per work-group's work-items, barriers as per-work-item resume points).
//!
//! Each backend is tested against the reference interpreter (`kiln_ir::interp`).

#![warn(missing_docs)]

pub mod amdgpu;
pub mod driver;
pub mod kir;
pub mod limits;
pub mod options;
// The modules' own docs say what they are: an outer doc here would make rustdoc resolve
// their intra-doc links in this crate root's scope instead of the module's.
pub mod ptx;
pub mod registry;
pub mod spirv;
pub mod target;
pub mod x86;
