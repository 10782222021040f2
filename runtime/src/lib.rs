//! kiln-runtime: see ARCHITECTURE.md. Empty until its issue lands.

/// The CUDA device: kiln kernels on NVIDIA GPUs through the driver API, loaded at run time.
pub mod cuda;
/// A Vulkan compute device running the SPIR-V backend's Vulkan flavour.
pub mod vulkan;
