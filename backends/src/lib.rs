//! kiln-backends: see ARCHITECTURE.md. Empty until its issue lands.

/// SPIR-V backend (OpenCL and Vulkan flavours), see [`spirv::emit`].
pub mod spirv;
