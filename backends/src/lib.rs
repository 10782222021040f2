//! kiln-backends: see ARCHITECTURE.md. Empty until its issue lands.

pub mod amdgpu;
pub mod limits;
/// PTX text for NVIDIA GPUs (sm_70+), validated by ptxas.
pub mod ptx;
/// SPIR-V backend (OpenCL and Vulkan flavours), see [`spirv::emit`].
pub mod spirv;
