//! `-fsanitize=bounds` in the runtime: programs built with it are rewritten by
//! [`kiln_passes::sanitize`] before the device compiles them (except on the interpreter,
//! which checks every access itself), and their launches get the hidden arguments and the
//! error buffer, whose report becomes the launch's error.

use std::sync::Arc;

use kiln_backends::options::BuildOptions;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Scalar, Verified};
use kiln_passes::sanitize::{Sanitized, ERROR_WORDS};

use crate::device::{Device, Handle, Memory};
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

/// A sanitized launch recorded into a device command list ([`crate::Device::record`]): its
/// error buffer lives in device memory, zeroed before each replay and read after it.
pub(crate) struct RecordedCheck {
    /// The graph node's label, for the error.
    pub label: String,
    sanitized: Sanitized,
    /// The launch's own arguments (without the hidden ones).
    args: Vec<Arg>,
    /// Its buffers' element types and lengths (what the report names).
    lens: Vec<(Scalar, usize)>,
    /// The error buffer, bound as the launch's last buffer.
    pub mem: Memory,
}

impl RecordedCheck {
    /// The check for a launch of `s` with `args` over buffers of `lens`, its error buffer
    /// allocated on `dev`, and the launch's full arguments (the hidden ones appended; the
    /// error buffer is buffer number `lens.len()`).
    pub fn new(
        dev: &dyn Device,
        label: &str,
        s: &Sanitized,
        args: &[Arg],
        lens: Vec<(Scalar, usize)>,
    ) -> Result<(RecordedCheck, Vec<Arg>), DeviceError> {
        let full = s.launch_args(args, &stand_ins(&lens)).map_err(DeviceError::Launch)?;
        let mem = dev.alloc(ERROR_WORDS * 4)?;
        let check = RecordedCheck {
            label: label.to_string(),
            sanitized: s.clone(),
            args: args.to_vec(),
            lens,
            mem,
        };
        Ok((check, full))
    }

    /// Zeroes the error buffer (before a replay).
    pub fn reset(&self) -> Result<(), DeviceError> {
        self.mem.upload(&[0; ERROR_WORDS * 4])
    }

    /// The violation the last replay recorded, as the interpreter reports it.
    pub fn check(&self) -> Result<(), DeviceError> {
        let mut bytes = [0u8; ERROR_WORDS * 4];
        self.mem.download(&mut bytes)?;
        let words: Vec<u32> =
            bytes.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect();
        if words[0] == 0 {
            return Ok(());
        }
        match self.sanitized.report(&words, &self.args, &stand_ins(&self.lens)) {
            Some(e) => Err(DeviceError::Launch(e.to_string())),
            None => Ok(()),
        }
    }
}

/// Buffers of the given element types and lengths, for the sanitizer's length lookups
/// (zeroed allocations: the pages are never touched).
fn stand_ins(lens: &[(Scalar, usize)]) -> Vec<Buffer> {
    lens.iter().map(|&(e, n)| Buffer::zeroed(e, n)).collect()
}
