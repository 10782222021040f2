//! `-fsanitize=bounds` in the runtime: programs built with it are rewritten by
//! [`kiln_passes::sanitize`] before the device compiles them (except on the interpreter,
//! which checks every access itself), and their launches get the hidden arguments and the
//! error buffer, whose report becomes the launch's error.

use std::sync::Arc;

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Module, Scalar};
use kiln_passes::sanitize::{sanitize_kernel, Sanitized, ERROR_WORDS, SANITIZE_BOUNDS};

use crate::device::{Device, DeviceKind, Handle};
use crate::error::DeviceError;
use crate::options::{without, BuildOptions};

/// What a device is given to build, and what its launches need.
pub(crate) struct Prepared {
    /// The module the device compiles (sanitized or not).
    pub module: Module,
    /// The options the device is given (without the sanitizer's).
    pub options: String,
    /// The sanitized kernels, when the sanitizer is on.
    pub sanitized: Option<Arc<[Sanitized]>>,
}

/// What `dev` builds for `module` under `options`: the module sanitized when the options ask
/// for it on a device that needs it (not the interpreter, which checks every access).
pub(crate) fn prepare(
    dev: &dyn Device,
    module: &Module,
    options: &str,
) -> Result<Prepared, DeviceError> {
    // The context has already refused options that do not parse.
    let wanted = BuildOptions::parse(options).is_ok_and(|o| o.sanitize_bounds);
    if !wanted || dev.kind() == DeviceKind::Interp {
        return Ok(Prepared { module: module.clone(), options: options.into(), sanitized: None });
    }
    // Rewrite only verified kernels, so that an error names the user's code, not the
    // sanitizer's hidden parameters.
    kiln_ir::verify_module(module).map_err(|errs| DeviceError::Build {
        device: dev.name(),
        message: errs.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "),
    })?;
    let sanitized: Vec<Sanitized> = module.kernels.iter().map(sanitize_kernel).collect();
    let built = Module::new(sanitized.iter().map(|s| s.kernel.clone()).collect());
    Ok(Prepared {
        module: built,
        options: without(options, SANITIZE_BOUNDS),
        sanitized: Some(sanitized.into()),
    })
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
