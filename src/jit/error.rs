//! [`Error`]: everything the embedding facade can refuse, with the place it went wrong.

use std::fmt;

use kiln_ir::launch::{ArgError, RangeError};
use kiln_ir::Diagnostic;
use kiln_passes::fusion::{BindError, FusionError};
use kiln_runtime::RuntimeError;

/// An error of the embedding facade ([`crate::Jit`]). `Display` gives the whole message:
/// source errors as `kiln check` prints them (`file:line:col`, the line and a caret),
/// argument errors naming the kernel and parameter.
///
/// ```
/// let jit = kiln::Jit::new(kiln::Device::interp())?;
/// let err = jit.compile_source("bad.kir", "kernel k() {\n  let x: u32 = y;\n}\n").unwrap_err();
/// assert!(err.to_string().contains("bad.kir:2:"), "{err}");
/// # Ok::<(), kiln::Error>(())
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The source did not parse or verify: one located diagnostic per problem.
    Source(Vec<Diagnostic>),
    /// A device could not be opened (no driver, no device), or a setting from the
    /// environment (`KILN_*`) is malformed.
    Device(String),
    /// The module has no kernel of that name.
    NoKernel {
        /// The name asked for.
        name: String,
        /// The kernels the module has.
        available: Vec<String>,
    },
    /// Fusion was refused; the error names the rule.
    Fusion(FusionError),
    /// The device could not build the kernel.
    Build {
        /// The kernel.
        kernel: String,
        /// The compiler's message.
        message: String,
    },
    /// An argument does not fit its parameter, or there are too many or too few: the
    /// argument error of every layer ([`ArgError`]), with the kernel it is for.
    Argument {
        /// The kernel the argument is for.
        kernel: String,
        /// Which argument, and what is wrong.
        source: ArgError,
    },
    /// Arguments given against the original kernels do not fit the fused kernel (parameters
    /// fused as identical given different buffers, a constant given another value).
    Bind(BindError),
    /// The kernel failed while running (e.g. an out-of-bounds access on the interpreter).
    Launch {
        /// The kernel.
        kernel: String,
        /// The device's message.
        message: String,
    },
    /// A global size that does not fit an nd-range ([`NdRange::try_new`](crate::NdRange::try_new)).
    Range(RangeError),
    /// A runtime error outside a launch (reading back a buffer whose writer failed).
    Runtime(RuntimeError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Source(ds) => {
                for (i, d) in ds.iter().enumerate() {
                    if i > 0 {
                        // A blank line between diagnostics, as `kiln check` prints them.
                        f.write_str("\n\n")?;
                    }
                    write!(f, "{d}")?;
                }
                Ok(())
            }
            Error::Device(m) => f.write_str(m),
            Error::NoKernel { name, available } => {
                write!(f, "no kernel named `{name}` (kernels: {})", available.join(", "))
            }
            Error::Fusion(e) => write!(f, "fusion refused: {e}"),
            Error::Build { kernel, message } => {
                write!(f, "building kernel `{kernel}` failed: {message}")
            }
            Error::Argument { kernel, source } => write!(f, "kernel `{kernel}`: {source}"),
            Error::Bind(e) => e.fmt(f),
            Error::Range(e) => e.fmt(f),
            Error::Launch { kernel, message } => write!(f, "kernel `{kernel}` failed: {message}"),
            Error::Runtime(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Fusion(e) => Some(e),
            Error::Bind(e) => Some(e),
            Error::Range(e) => Some(e),
            Error::Runtime(e) => Some(e),
            Error::Argument { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// So that `buffer.read()?` works in a function returning `kiln::Error`.
impl From<RuntimeError> for Error {
    fn from(e: RuntimeError) -> Error {
        Error::Runtime(e)
    }
}

/// So that `NdRange::try_new(&[len])?` works in a function returning `kiln::Error`.
impl From<RangeError> for Error {
    fn from(e: RangeError) -> Error {
        Error::Range(e)
    }
}
