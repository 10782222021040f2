#![doc = include_str!("../README.md")]
//!
//! This facade re-exports the workspace crates: [`ir`], [`passes`], [`backends`] and
//! [`runtime`].

pub use kiln_backends as backends;
pub use kiln_ir as ir;
pub use kiln_passes as passes;
pub use kiln_runtime as runtime;

/// The `rust` blocks of README.md (above) and of these docs/*.md files run as doc tests, so
/// the documentation cannot stop compiling. A docs file with a `rust` block must be listed
/// here (`tests/docs.rs` checks that it is).
#[cfg(doctest)]
#[doc = include_str!("../docs/ir-syntax.md")]
#[doc = include_str!("../docs/sanitize.md")]
pub struct DocTests;
