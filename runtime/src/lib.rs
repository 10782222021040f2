//! kiln-runtime: see ARCHITECTURE.md. Empty until its issue lands.

/// A Vulkan compute device running the SPIR-V backend's Vulkan flavour.
pub mod vulkan;
