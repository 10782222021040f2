// The README with its links rewritten for rustdoc, by build.rs.
#![doc = include_str!(concat!(env!("OUT_DIR"), "/README.md"))]
//!
//! # Embedding kiln
//!
//! [`Jit`] is the way in: [`Device`] picks where kernels run, [`Jit::compile_source`] parses
//! and verifies, [`Jit::fuse`] fuses, [`Jit::buffer_from`] / [`Jit::buffer_zeroed`] make typed
//! buffers, [`Jit::kernel`] makes a [`TypedKernel`] whose launches take a Rust tuple checked
//! by the compiler, [`Jit::launch`] / [`Jit::launch_fused`] run kernels with arguments made by
//! [`args!`] (checked at launch), and [`Buffer::read`] reads results back. Every failure is an [`Error`].
//! `examples/embed.rs` runs each step (`cargo run --example embed`).
//!
//! The workspace crates are re-exported for everything else: [`ir`], [`passes`],
//! [`backends`], [`runtime`] and [`generator`] (kernels generated from views).

#![warn(missing_docs)]

mod jit;
pub mod tune;
pub mod tune_tc;

// `kiln::guide`: docs/ and examples/README.md as pages of these docs, written by build.rs.
include!(concat!(env!("OUT_DIR"), "/guide.rs"));

/// The half-precision float of `f16` buffers and scalars (the `half` crate's).
pub use half::f16;
pub use jit::{
    Arg, ArgFor, ArgsFor, Device, Error, Fused, Jit, Launch, ParamType, Signature, TypedKernel,
};
pub use kiln_backends as backends;
pub use kiln_gen as generator;
pub use kiln_ir as ir;
pub use kiln_ir::launch::{NdRange, RangeError};
pub use kiln_passes as passes;
pub use kiln_passes::fusion::{FusionSpec, ParamRef, RangeSpec};
pub use kiln_runtime as runtime;
pub use kiln_runtime::{AnyBuffer, Buffer, Config};

/// The `rust` blocks of README.md (above) and of these docs/*.md files run as doc tests, so
/// the documentation cannot stop compiling. A docs file with a `rust` block must be listed
/// here (`tests/docs.rs` checks that it is).
#[cfg(doctest)]
#[doc = include_str!("../docs/embedding.md")]
#[doc = include_str!("../docs/fusion-queue.md")]
#[doc = include_str!("../docs/ir-syntax.md")]
#[doc = include_str!("../docs/sanitize.md")]
pub struct DocTests;
