//! One shape for every backend: a [`Target`] lowers a [`Verified`] module and fails with a
//! [`BackendError`].
//!
//! Targets never verify: the build driver ([`crate::driver`]) verifies a module once, where
//! it is made, and the type says so. Each target declares what the driver should do before
//! emitting ([`Lowering`]): the GPU targets want the `-O` pipeline and the bounds sanitizer's
//! rewrite; the IR target (the interpreter's programs) wants the kernels as written.
//!
//! ```
//! use kiln_backends::ptx::{Options, Ptx};
//! use kiln_backends::target::Target;
//! use kiln_ir::{parse_module, Verified};
//! let m = Verified::new(parse_module("kernel k(x: ptr<global, u32>) { x[0] = 7; }").unwrap()).unwrap();
//! let ptx: String = Ptx(Options::sm(80)).emit(&m).unwrap();
//! assert!(ptx.contains(".visible .entry k("));
//! ```

use std::fmt;

use kiln_ir::{Kernel, Verified, VerifyError};
pub use kiln_passes::vectors::VectorLowering;

/// What went wrong, for callers that act on the kind rather than the words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The build options are not understood.
    Options,
    /// The kernel does not pass the verifier.
    IllFormed,
    /// The optimizer failed on the kernel.
    Optimizer,
    /// The kernel uses something the target cannot express.
    Unsupported,
    /// The kernel needs more of a fixed resource (parameter space, shared or private memory)
    /// than the target has; the message names the resource and the limit.
    Limit,
    /// The kernel needs more registers than the target has, even with spilling.
    RegisterPressure,
    /// The host failed the backend (code memory could not be mapped) or the backend failed
    /// itself (its assembler rejected the code it generated: a bug to report).
    Internal,
}

/// Why a module could not be built for a target: the one error type of every backend.
///
/// Displays as ``ptx backend, kernel `k`: <message>``.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendError {
    /// The target's name ([`Target::name`]).
    pub target: String,
    /// The kernel at fault; empty when the error is about the whole module or the options.
    pub kernel: String,
    /// What kind of failure it is.
    pub kind: ErrorKind,
    /// What went wrong, in words.
    pub message: String,
}

impl BackendError {
    /// An error of `kind` about `kernel` for `target`.
    pub fn new(
        target: impl Into<String>,
        kernel: impl Into<String>,
        kind: ErrorKind,
        message: impl Into<String>,
    ) -> BackendError {
        BackendError { target: target.into(), kernel: kernel.into(), kind, message: message.into() }
    }

    /// The verifier's first complaint about a module, as an [`ErrorKind::IllFormed`] error.
    pub fn ill_formed(target: impl Into<String>, errors: &[VerifyError]) -> BackendError {
        let (kernel, message) = match errors.first() {
            Some(e) => (e.kernel.clone(), format!("ill-formed kernel: {}", e.message)),
            None => (String::new(), "ill-formed module".to_string()),
        };
        BackendError::new(target, kernel, ErrorKind::IllFormed, message)
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} backend", self.target)?;
        if !self.kernel.is_empty() {
            write!(f, ", kernel `{}`", self.kernel)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for BackendError {}

/// What the build driver does to a verified module before the target emits it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lowering {
    /// Run the `-O` pipeline (unless the build options say `-O0`).
    pub optimize: bool,
    /// Apply the bounds sanitizer's IR rewrite when the options say `-fsanitize=bounds`
    /// (a target whose executor checks every access itself says no).
    pub sanitize: bool,
    /// What the driver does with vector values before emitting (always, `-O0` too): the
    /// target's own vector support.
    pub vectors: VectorLowering,
}

/// A backend: lowers verified modules to its output.
pub trait Target {
    /// What one module lowers to (PTX text, a SPIR-V module, assembly listings, ...).
    type Output: Emitted;
    /// The target's name as the CLI spells it (`ptx`, `spirv-vk`, `amdgpu`, ...).
    fn name(&self) -> String;
    /// What the driver does before [`Target::emit`]; by default optimize and sanitize, and
    /// lower vectors to scalar lanes with memory accesses kept whole.
    fn lowering(&self) -> Lowering {
        Lowering { optimize: true, sanitize: true, vectors: VectorLowering::Memory }
    }
    /// Lowers every kernel of `module`.
    fn emit(&self, module: &Verified) -> Result<Self::Output, BackendError>;
}

/// A target's output as something to print or write: a listing, and bytes.
pub trait Emitted {
    /// Human-readable text: the code itself for text targets, a disassembly for binary ones.
    fn listing(&self) -> String;
    /// The bytes a file of the output holds (the listing's bytes for text targets).
    fn to_bytes(&self) -> Vec<u8> {
        self.listing().into_bytes()
    }
    /// True when [`Emitted::to_bytes`] is binary, not text.
    fn is_binary(&self) -> bool {
        false
    }
}

impl Emitted for String {
    fn listing(&self) -> String {
        self.clone()
    }
}

/// A target whose output type is erased, for callers that choose a target at run time (the
/// CLI, by name through [`crate::registry`]).
pub trait AnyTarget {
    /// [`Target::name`].
    fn name(&self) -> String;
    /// [`Target::lowering`].
    fn lowering(&self) -> Lowering;
    /// [`Target::emit`], its output boxed.
    fn emit_any(&self, module: &Verified) -> Result<Box<dyn Emitted>, BackendError>;
}

impl<T: Target> AnyTarget for T
where
    T::Output: 'static,
{
    fn name(&self) -> String {
        Target::name(self)
    }
    fn lowering(&self) -> Lowering {
        Target::lowering(self)
    }
    fn emit_any(&self, module: &Verified) -> Result<Box<dyn Emitted>, BackendError> {
        Ok(Box::new(self.emit(module)?))
    }
}

/// `kernel` alone in a verified module, or the verifier's complaint as `target`'s error: for
/// the backends' one-kernel conveniences, whose callers hold a bare [`Kernel`].
pub(crate) fn verified_kernel(target: &str, kernel: &Kernel) -> Result<Verified, BackendError> {
    Verified::kernel(kernel.clone()).map_err(|errs| BackendError::ill_formed(target, &errs))
}
