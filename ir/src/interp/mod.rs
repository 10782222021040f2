//! The reference interpreter: the semantic definition of kiln. STUB.

use std::fmt;

use crate::expr::Imm;
use crate::kernel::Kernel;
use crate::types::Scalar;

/// An nd-range: 1 to 3 dimensions of global size, optional local size, and offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NdRange {
    /// Number of dimensions, 1..=3.
    pub dims: usize,
    /// Global size per dimension (1 in unused dimensions).
    pub global: [u32; 3],
    /// Work-group size per dimension; `None` lets the device choose.
    pub local: Option<[u32; 3]>,
    /// Global offset per dimension (0 in unused dimensions).
    pub offset: [u32; 3],
}

/// A buffer's contents: elements of one scalar type, stored little-endian.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buffer {
    elem: Scalar,
    data: Vec<u8>,
}

/// A kernel argument: a scalar value, or the index of a buffer in the buffer list.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// A scalar parameter's value.
    Scalar(Imm),
    /// A pointer parameter bound to `buffers[i]`.
    Buffer(usize),
}

/// A run-time error, naming the kernel and (when it is about one) the work-item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterpError {
    /// The kernel's name.
    pub kernel: String,
    /// The global id of the failing work-item.
    pub work_item: Option<[u32; 3]>,
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for InterpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel `{}`: {}", self.kernel, self.message)
    }
}

impl std::error::Error for InterpError {}

/// Runs `kernel` over `range`.
pub fn run(
    kernel: &Kernel,
    _range: &NdRange,
    _args: &[Arg],
    _buffers: &mut [Buffer],
) -> Result<(), InterpError> {
    Err(InterpError {
        kernel: kernel.name().to_string(),
        work_item: None,
        message: "interpreter not yet written".into(),
    })
}

/// The local size used when none is given.
pub fn default_local_size(global: [u32; 3]) -> [u32; 3] {
    global
}

impl Buffer {
    /// A zeroed buffer of `len` elements.
    pub fn zeroed(elem: Scalar, len: usize) -> Buffer {
        Buffer {
            elem,
            data: vec![0; len * elem.size_bytes()],
        }
    }
}
