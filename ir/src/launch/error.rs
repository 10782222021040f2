//! The one type of launch faults, shared by every executor of a kernel.

use std::fmt;

/// A launch's fault (out-of-bounds access, division by zero, barrier divergence, a limit
/// reached, a launch that cannot start), naming the kernel and, when it is about one, the
/// work-item. Every executor (the interpreter, the cpu device's machine code, a simulator,
/// the bounds sanitizer's report) gives the same value for the same fault, so that
/// differential tests can compare errors as they compare buffers.
///
/// Displays as ``kernel `saxpy`, work-item (17, 0, 0): load `x[17]` out of bounds (buffer
/// has 16 elements)``, or ``kernel `saxpy`: ...`` for errors about the whole launch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LaunchError {
    /// The kernel's name.
    pub kernel: String,
    /// The global id of the failing work-item.
    pub work_item: Option<[u32; 3]>,
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for LaunchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel `{}`", self.kernel)?;
        if let Some([x, y, z]) = self.work_item {
            write!(f, ", work-item ({x}, {y}, {z})")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for LaunchError {}
