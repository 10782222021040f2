//! kiln-backends: see ARCHITECTURE.md. Empty until its issue lands.
pub mod amdgpu;
