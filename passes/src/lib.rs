//! kiln-passes: optimization passes over kiln IR, each checked against the reference
//! interpreter.
//!
//! * [`simplify`]: the egg-based expression simplifier and the `simplify` pass.
//! * [`manager`]: named passes, [`manager::PassManager`], verification and IR tracing.
//! * [`pipeline`]: the default `-O` pipeline, [`pipeline::optimize`].
//! * Classic passes: [`let_opt`], [`cse`], [`licm`], [`dce`], [`constprop`], [`strength`],
//!   [`peephole`], [`scalarize`], [`var_to_let`], [`unroll`], [`slm_buffering`] (`kiln opt
//!   --list-passes` lists them).
//! * [`vectors`]: vector values (`f32x4`) to one scalar per lane, whole or but for memory
//!   accesses, for targets without vector registers (the build driver applies it).
//! * [`fusion`]: the kernel fusion JIT.
//! * [`divergence`]: uniform/divergent analysis of every value.
//! * [`origin`]: the source names of fault sites, kept through the passes for error
//!   messages.
//! * [`sanitize`]: the bounds sanitizer (`-fsanitize=bounds`): kernels that check their own
//!   accesses and loops and report the first violation.

#![warn(missing_docs)]

pub mod constprop;
pub mod cse;
pub mod dce;
pub mod divergence;
pub mod fusion;
pub mod let_opt;
pub mod licm;
pub mod manager;
pub mod origin;
pub mod peephole;
pub mod pipeline;
pub mod sanitize;
pub mod scalarize;
pub mod simplify;
pub mod slm_buffering;
pub mod strength;
pub mod unroll;
pub mod util;
pub mod var_to_let;
pub mod vectors;
