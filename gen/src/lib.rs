//! # kiln-gen: kernels generated from views, as oneDNN's GPU JIT generator
//!
//! * [`layout`]: [`Layout`], a blocked memory layout in oneDNN notation (`4n2c7h7w32n32c`).
//! * [`tensor`]: [`Tensor`], a block of a tensor at offsets given as IR expressions.
//! * [`view`]: [`View`], a virtual tensor mapped onto a real one by IR expressions, with
//!   M/N/K kinds and access masks; views compose.
//! * [`codegen`]: the generator: `C = alpha * A·B + beta * C` over three views, with a
//!   work-group tile through local memory (single or double buffered), a register block per
//!   work-item and masked edges ([`GemmConfig`] sets the blocking;
//!   [`GemmConfig::candidates`] lists what a tuner should try).
//! * [`split`]: split-K's second kernel, which adds the slices' partial products in order.
//! * [`tuner`]: a model of the target that ranks blockings, and the search that times the
//!   best of them and their neighbours (split-K included).
//! * [`tc`]: tensor-core GEMM (f16/bf16 inputs, f32 accumulation) through the IR's matrix
//!   operations, with fused element-wise epilogues ([`tc_epilogue`]); [`tc90`] its sm_90a
//!   (warpgroup) form: `wgmma`, tensor copies and barrier objects; [`tc_conv`], the
//!   implicit-GEMM convolution (NHWC) on the same kernel; [`tc_tune`], the model that ranks
//!   their blockings for a tuner; [`tc_attn`], attention (Q·K^T, online softmax, ·V) as one
//!   kernel.
//! * [`gemm`] and [`conv`]: GEMM (four transpositions, f32 or f16 storage) and 2-D
//!   convolution forward (NCHW/NHWC, stride, padding, dilation) as views.
//!
//! Every generated kernel verifies and is a plain kiln kernel: it prints as `.kir`, runs on
//! the interpreter, and lowers with every backend. See `docs/generator.md`.

#![warn(missing_docs)]

pub mod codegen;
pub mod config;
pub mod conv;
pub mod gemm;
pub mod ix;
pub mod layout;
pub mod split;
pub mod tc;
pub mod tc90;
pub mod tc_attn;
pub mod tc_conv;
pub mod tc_epilogue;
pub mod tc_tune;
pub mod tensor;
pub mod tuner;
pub mod view;

pub use codegen::{generate, generate_optimized, GemmViews, Generated};
pub use split::SplitK;
pub use tc::{TcConfig, TcGemmProblem, TcGenerated};
pub use tc90::Tc90Config;
pub use tc_attn::TcAttnProblem;
pub use tc_conv::TcConvProblem;
pub use tc_epilogue::{EpOp, Epilogue};

/// The largest size a problem's dimension may have (GEMM's M, N and K, a convolution's
/// sizes, strides, padding and dilation): generated kernels index with 32-bit integers, and
/// a flattened dimension must stay below 2^30 (see [`generate`]).
pub const MAX_SIZE: i64 = (1 << 30) - 1;
pub use config::GemmConfig;
pub use conv::{ConvFormat, ConvProblem};
pub use gemm::{BatchedGemm, GemmProblem};
pub use layout::{Block, Layout, LayoutError};
pub use tensor::Tensor;
pub use view::{Access, Base, DimKind, TDim, VDim, View};
