//! kiln-passes: see ARCHITECTURE.md. Empty until its issue lands.

pub mod divergence;
pub mod fusion;
