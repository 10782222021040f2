//! Where a kernel runs and for how long: the device options `kiln run` and `kiln graph --run`
//! share (`--device`, `--max-steps`, `--timeout`, `--threads`), one default device for
//! both, and leaving a GPU wait that ran past `--timeout`.

use std::time::Duration;

use clap::Args;
use kiln::runtime::device::registry::{self, DeviceInfo, OpenOptions};

use super::value;

/// The device options of a command that runs kernels.
#[derive(Args, Debug, Clone)]
pub struct DeviceArgs {
    /// Where to run: a device of the registry: `interp` (the reference interpreter, also
    /// `cpu-interp`), `cpu` (this host's CPU, through the x86-64 backend), `vulkan` (the
    /// fastest Vulkan device, e.g. lavapipe, through the SPIR-V backend) or `cuda` (an NVIDIA
    /// GPU, through PTX). Default: `cpu` on x86-64 hosts, else `interp`; `interp` when
    /// --max-steps is given.
    #[arg(long, value_name = "DEVICE", value_parser = device_name)]
    pub device: Option<String>,
    /// Stop with an error after N interpreter statements, summed over all work-items
    /// (interp only: GPU devices cannot count steps; use --timeout there).
    #[arg(long, value_name = "N")]
    pub max_steps: Option<u64>,
    /// Stop waiting after SECS seconds (decimals allowed). The interpreter and the cpu
    /// device stop the kernel and name the work-item it was running; on GPU devices kiln
    /// abandons the wait and exits with an error, though the GPU work may still be running.
    #[arg(long, value_name = "SECS", value_parser = value::parse_timeout)]
    pub timeout: Option<Duration>,
    /// cpu: spread the work-groups over N threads (default: one per core).
    #[arg(long, value_name = "N", value_parser = threads)]
    pub threads: Option<usize>,
}

impl DeviceArgs {
    /// The device to open and the limits to open it with. `--max-steps` with a device that
    /// cannot count steps is a usage error: the process exits with code 2.
    pub fn resolve(&self) -> (&'static DeviceInfo, OpenOptions) {
        let name = self.device.as_deref().unwrap_or(default_device(self.max_steps.is_some()));
        let info = registry::info(name).expect("--device passed the value parser");
        if self.max_steps.is_some() && !info.counts_steps {
            clap::Error::raw(
                clap::error::ErrorKind::ArgumentConflict,
                format!(
                    "--max-steps counts interpreter statements; device `{}` cannot count them \
                     (use --timeout)\n",
                    info.name
                ),
            )
            .exit()
        }
        let limits =
            OpenOptions { max_steps: self.max_steps, timeout: self.timeout, threads: self.threads };
        (info, limits)
    }
}

/// A `--device` value: a device of the registry (`cpu-interp` is another name for
/// `interp`); anything else is a usage error (exit code 2).
fn device_name(name: &str) -> Result<String, String> {
    match registry::info(name) {
        Some(d) => Ok(d.name.to_string()),
        None => Err(format!("unknown device `{name}` (devices: {})", registry::names().join(", "))),
    }
}

/// The device used without --device: the host's CPU where the x86 backend runs (it passes
/// the interpreter's differential tests), else the interpreter; and the interpreter when
/// steps are to be counted, which only it can do.
fn default_device(max_steps: bool) -> &'static str {
    if cfg!(target_arch = "x86_64") && !max_steps {
        "cpu"
    } else {
        "interp"
    }
}

/// A `--threads` value: 1 to 4096.
fn threads(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n @ 1..=4096) => Ok(n),
        _ => Err(format!("`{text}` is not a thread count from 1 to 4096")),
    }
}

/// Reports that `what` (e.g. ``kernel `saxpy` ``) did not finish within `timeout` on
/// `device`, a device that cannot stop it, and ends the process with exit code 1.
///
/// The worker thread is stuck in the driver until the GPU finishes: dropping the queue or
/// the context would join it, and the driver's exit handlers (NVIDIA's Vulkan driver's,
/// measured) wait for the GPU too. So report and leave at once, without destructors or exit
/// handlers: that is what abandoning the wait means.
pub fn abandon_wait(what: &str, timeout: Duration, device: &str) -> ! {
    eprintln!(
        "kiln: error: {what} did not finish within {}s (--timeout) on device `{device}`; kiln \
         abandoned the wait, but the GPU work may still be running",
        timeout.as_secs_f64(),
    );
    abandon(1)
}

/// Ends the process with `code` at once: no destructors, no exit handlers (stdout is
/// flushed first, stderr is unbuffered).
fn abandon(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    #[cfg(unix)]
    // SAFETY: `_exit` ends the process; nothing runs after it.
    unsafe {
        libc::_exit(code)
    }
    #[cfg(not(unix))]
    std::process::exit(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices() {
        assert_eq!(device_name("interp").unwrap(), "interp");
        assert_eq!(device_name("cpu-interp").unwrap(), "interp");
        assert_eq!(device_name("cuda").unwrap(), "cuda");
        assert_eq!(device_name("vulkan").unwrap(), "vulkan");
        let e = device_name("tpu").unwrap_err();
        assert!(e.contains("unknown device `tpu`") && e.contains("interp"), "{e}");
    }
}
