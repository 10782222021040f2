//! `-fsanitize=bounds` in the runtime: programs built with it are rewritten by
//! [`kiln_passes::sanitize`] before the device compiles them (except on the interpreter,
//! which checks every access itself), and their launches get the hidden arguments and the
//! error buffer, whose report becomes the launch's error.

use std::sync::Arc;

use kiln_backends::options::BuildOptions;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Scalar, Verified};
use kiln_passes::sanitize::{Sanitized, ERROR_WORDS};

use crate::device::{Device, Handle};
use crate::error::DeviceError;

/// What a device is given to build, and what its launches need.
pub(crate) struct Prepared {
    /// The module the device compiles (sanitized or not).
    pub module: Verified,
    /// The options the device is given (without the sanitizer's).
    pub options: BuildOptions,
    /// The sanitized kernels, when the sanitizer is on.
    pub sanitized: Option<Arc<[Sanitized]>>,
}

/// What `dev` builds for `module` under `options`: the module sanitized when the options ask
/// for it on a device that needs it (not one that checks every access itself).
pub(crate) fn prepare(dev: &dyn Device, module: Verified, options: BuildOptions) -> Prepared {
    if !options.sanitize_bounds || dev.checks_bounds() {
        return Prepared { module, options, sanitized: None };
    }
    let (module, sanitized) = kiln_backends::driver::sanitize(&module);
    Prepared {
        module,
        options: BuildOptions { sanitize_bounds: false, ..options },
        sanitized: Some(sanitized.into()),
    }
}

/// Runs a sanitized kernel: appends the hidden arguments and a zeroed error buffer, runs
/// it, and turns a recorded violation into the interpreter's message for it.
pub(crate) fn run_checked(
    dev: &dyn Device,
    s: &Sanitized,
    kernel: &Handle,
    range: &NdRange,
    args: &[Arg],
    buffers: &mut Vec<Buffer>,
) -> Result<(), DeviceError> {
    let full = s.launch_args(args, buffers).map_err(DeviceError::Launch)?;
    buffers.push(Buffer::zeroed(Scalar::U32, ERROR_WORDS));
    let r = dev.run(kernel, range, &full, buffers);
    let words = buffers.pop().and_then(|b| b.to_vec::<u32>()).unwrap_or_default();
    r?;
    match s.report(&words, args, buffers) {
        Some(e) => Err(DeviceError::Launch(e.to_string())),
        None => Ok(()),
    }
}
