//! kiln: a pure-Rust compiler IR framework and JIT runtime for GPU-style kernels.
//!
//! This facade re-exports the workspace crates.

pub use kiln_backends as backends;
pub use kiln_ir as ir;
pub use kiln_passes as passes;
pub use kiln_runtime as runtime;
