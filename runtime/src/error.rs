//! Typed errors of devices and of the runtime.

use thiserror::Error;

/// An error reported by a [`crate::Device`]: the one error type of every device (the
/// interpreter, Vulkan, CUDA), so callers handle each failure the same way everywhere.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DeviceError {
    /// The device cannot be used here (no driver, no hardware). `device` is the kind as
    /// users name it in messages (`CUDA`, `vulkan`).
    #[error("{device} device unavailable: {reason}")]
    Unavailable {
        /// The device's name.
        device: String,
        /// Why.
        reason: String,
    },
    /// Building a program failed (verification, optimization or code generation).
    #[error("program build failed on `{device}`: {message}")]
    Build {
        /// The device's name.
        device: String,
        /// The compiler's message.
        message: String,
    },
    /// A program binary could not be loaded.
    #[error("cannot load program binary on `{device}`: {message}")]
    Load {
        /// The device's name.
        device: String,
        /// Why.
        message: String,
    },
    /// The program has no kernel of that name.
    #[error("the program has no kernel `{kernel}` (kernels: {available})")]
    NoKernel {
        /// The requested name.
        kernel: String,
        /// The program's kernels, comma-separated.
        available: String,
    },
    /// A launch failed (bad arguments, or a fault while running).
    #[error("{0}")]
    Launch(String),
    /// A driver call failed (the message names the device and the call).
    #[error("{0}")]
    Driver(String),
}

/// An error surfacing at [`crate::Event::wait`] or [`crate::Queue::wait`]; it names the
/// command that failed.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RuntimeError {
    /// A kernel command failed on the device.
    #[error("command {command} failed: {source}")]
    Kernel {
        /// The failing command (`kernel `name` #id`).
        command: String,
        /// The device's error.
        source: DeviceError,
    },
    /// A kernel command's arguments do not fit the kernel's parameters (checked before
    /// anything runs).
    #[error("command {command} failed: {source}")]
    Argument {
        /// The failing command (`kernel `name` #id`).
        command: String,
        /// Which argument, and what is wrong.
        source: kiln_ir::launch::ArgError,
    },
    /// A host task returned an error.
    #[error("command {command} failed: {message}")]
    HostTask {
        /// The failing command.
        command: String,
        /// The task's message.
        message: String,
    },
    /// A command panicked.
    #[error("command {command} panicked: {message}")]
    Panicked {
        /// The failing command.
        command: String,
        /// The panic message, when it is a string.
        message: String,
    },
    /// A command did not run because a command it depends on failed.
    #[error("command {command} was not run: its dependency {dependency} failed")]
    DependencyFailed {
        /// The command that was skipped.
        command: String,
        /// The failed dependency (itself a command name).
        dependency: String,
    },
    /// A command was submitted wrongly (checked at submission, reported at wait).
    #[error("command {command} is invalid: {message}")]
    Invalid {
        /// The command.
        command: String,
        /// What is wrong.
        message: String,
    },
}

impl RuntimeError {
    /// The name of the command the error is about.
    pub fn command(&self) -> &str {
        match self {
            RuntimeError::Kernel { command, .. }
            | RuntimeError::Argument { command, .. }
            | RuntimeError::HostTask { command, .. }
            | RuntimeError::Panicked { command, .. }
            | RuntimeError::DependencyFailed { command, .. }
            | RuntimeError::Invalid { command, .. } => command,
        }
    }
}

impl DeviceError {
    /// A build failure on `device`, with `error`'s words as the message.
    pub fn build(device: impl Into<String>, error: impl std::fmt::Display) -> DeviceError {
        DeviceError::Build { device: device.into(), message: error.to_string() }
    }

    /// The verifier's complaints about a module as a build failure on `device`.
    pub fn ill_formed(device: impl Into<String>, errors: &[kiln_ir::VerifyError]) -> DeviceError {
        let words: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        DeviceError::build(device, words.join("; "))
    }

    /// [`DeviceError::NoKernel`] for `kernel`, listing the program's kernels.
    pub(crate) fn no_kernel<'a>(
        kernel: &str,
        available: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        let available: Vec<&str> = available.into_iter().collect();
        DeviceError::NoKernel { kernel: kernel.into(), available: available.join(", ") }
    }
}

/// The message of a caught panic (`panic!` payloads are a `&str` or a `String`).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> Option<String> {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
}
