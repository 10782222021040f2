//! Devices: what builds programs and runs kernels.
//!
//! A [`Device`] turns a [`Module`] into a *program binary* (bytes: SPIR-V words, PTX text,
//! machine code, or the verified IR's text for the interpreter), loads binaries into
//! device-side handles, looks kernels up in loaded programs, and launches them. The binary
//! is what the persistent cache stores; handles stay in memory.
//!
//! Executors that take the IR kernel directly (the interpreter, a simulator), shaped like
//! `fn run(&self, &Kernel, &NdRange, &[Arg], &mut [Buffer]) -> Result<(), String>`, plug in
//! through [`IrExecutor`] and [`IrDevice`]: implement four short methods and wrap.
//!
//! ```
//! use std::sync::Arc;
//! use kiln_ir::launch::{Arg, Buffer, NdRange};
//! use kiln_ir::Kernel;
//! use kiln_runtime::{Context, DeviceKind, IrDevice, IrExecutor};
//!
//! /// A device that runs IR directly (a simulator, say).
//! struct MyGpu;
//! impl IrExecutor for MyGpu {
//!     fn name(&self) -> String { "my-gpu".into() }
//!     fn kind(&self) -> DeviceKind { DeviceKind::Cuda }
//!     fn version(&self) -> String { "driver 1.0".into() }
//!     fn run(&self, k: &Kernel, r: &NdRange, a: &[Arg], b: &mut [Buffer]) -> Result<(), String> {
//!         kiln_ir::interp::run(k, r, a, b).map_err(|e| e.to_string()) // the device's own run
//!     }
//! }
//! let ctx = Context::new(Arc::new(IrDevice(MyGpu)));
//! assert!(ctx.device().identity().starts_with("cuda|my-gpu|driver 1.0|"));
//! ```
//!
//! A device whose binaries are real device code implements [`Device`] directly instead:
//! `build` returns those bytes (they are what the persistent cache stores), `load` turns
//! them into a module handle, `kernel` looks up a function. The CUDA device
//! ([`crate::cuda::CudaDevice`], PTX) and the Vulkan device ([`crate::vulkan::VulkanDevice`],
//! SPIR-V) do so.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use kiln_ir::interp;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{parse_module, verify_module, Kernel, Module};

use crate::error::DeviceError;

/// A device-side object (a loaded program or a kernel), type-erased.
pub type Handle = Arc<dyn Any + Send + Sync>;

/// The kind of a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// The reference interpreter.
    Interp,
    /// Native x86-64 code.
    CpuJit,
    /// Vulkan compute (SPIR-V).
    Vulkan,
    /// CUDA (PTX).
    Cuda,
    /// Anything else.
    Other,
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceKind::Interp => "interp",
            DeviceKind::CpuJit => "cpu-jit",
            DeviceKind::Vulkan => "vulkan",
            DeviceKind::Cuda => "cuda",
            DeviceKind::Other => "other",
        })
    }
}

/// The version stamp of kiln's code generators; bump it when any backend's output changes
/// for the same input, so persistent-cache entries of older builds are not used.
pub const CODEGEN_VERSION: u32 = 3;

/// A device that builds programs and runs their kernels. Shared between threads.
pub trait Device: Send + Sync + 'static {
    /// The device's name (`"kiln-interp"`, `"NVIDIA H100"`, ...).
    fn name(&self) -> String;
    /// Its kind.
    fn kind(&self) -> DeviceKind;
    /// Driver / runtime version, as precise as the driver says.
    fn version(&self) -> String;
    /// Everything that changes the artifacts it builds: part of every cache key. The
    /// default covers kind, name, version, kiln's version and [`CODEGEN_VERSION`].
    fn identity(&self) -> String {
        format!(
            "{}|{}|{}|kiln {}|codegen {}",
            self.kind(),
            self.name(),
            self.version(),
            env!("CARGO_PKG_VERSION"),
            CODEGEN_VERSION
        )
    }
    /// Builds a program binary for `module` with the given build options.
    fn build(&self, module: &Module, options: &str) -> Result<Vec<u8>, DeviceError>;
    /// Loads a binary made by [`Device::build`] (possibly by another process, from the
    /// persistent cache) into a program handle.
    fn load(&self, binary: &[u8]) -> Result<Handle, DeviceError>;
    /// The kernel `name` of a loaded program.
    fn kernel(&self, program: &Handle, name: &str) -> Result<Handle, DeviceError>;
    /// The driver's own compiled state for a loaded program, worth storing next to its
    /// binary so that another process need not compile it again in the driver (Vulkan: the
    /// program's `VkPipelineCache` data), when it changed since the last call; `None` by
    /// default. A [`crate::Context`] stores it in the persistent cache.
    fn driver_cache(&self, _program: &Handle) -> Option<Vec<u8>> {
        None
    }
    /// [`Device::load`] with the state [`Device::driver_cache`] returned for this binary
    /// (possibly in another process). Data the device cannot use (another device's, damaged)
    /// is ignored, never trusted: the second value says why, so the caller can discard it.
    /// By default the data is ignored.
    fn load_with_driver_cache(
        &self,
        binary: &[u8],
        _driver_cache: &[u8],
    ) -> Result<(Handle, Option<String>), DeviceError> {
        Ok((self.load(binary)?, None))
    }
    /// Launches a kernel handle made by [`Device::kernel`]: `args` has one entry per
    /// parameter, pointer parameters indexing `buffers`.
    fn run(
        &self,
        kernel: &Handle,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
    ) -> Result<(), DeviceError>;

    /// Builds a program of `kernel` alone (default options), loads it and runs the kernel:
    /// [`Device::build`], [`Device::load`], [`Device::kernel`], [`Device::run`] without any
    /// cache, for one-off launches and differential tests. Submissions that repeat should go
    /// through a [`crate::Context`], whose caches make the build happen once.
    fn build_and_run(
        &self,
        kernel: &Kernel,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
    ) -> Result<(), DeviceError> {
        let bin = self.build(&Module::new(vec![kernel.clone()]), "")?;
        let program = self.load(&bin)?;
        let k = self.kernel(&program, kernel.name())?;
        self.run(&k, range, args, buffers)
    }
}

/// An executor that runs IR kernels directly (the interpreter, or a backend that compiles
/// inside its `run`). Wrap one in [`IrDevice`] to get a [`Device`].
pub trait IrExecutor: Send + Sync + 'static {
    /// The device's name.
    fn name(&self) -> String;
    /// Its kind.
    fn kind(&self) -> DeviceKind;
    /// Driver / runtime version.
    fn version(&self) -> String;
    /// Runs `kernel` over `range`.
    fn run(
        &self,
        kernel: &Kernel,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
    ) -> Result<(), String>;
}

/// A [`Device`] whose program binary is the verified module's canonical text and whose
/// kernels are IR [`Kernel`]s handed to an [`IrExecutor`].
#[derive(Debug, Default)]
pub struct IrDevice<X>(pub X);

/// The value behind a program or kernel handle, when `device` made it; `what` names the
/// handle in the error (a handle of another device is a launch error, not a panic).
pub(crate) fn handle_as<'a, T: Any>(h: &'a Handle, what: &str) -> Result<&'a T, DeviceError> {
    h.downcast_ref::<T>().ok_or_else(|| DeviceError::Launch(format!("not a {what} of this device")))
}

impl<X: IrExecutor> Device for IrDevice<X> {
    fn name(&self) -> String {
        self.0.name()
    }
    fn kind(&self) -> DeviceKind {
        self.0.kind()
    }
    fn version(&self) -> String {
        self.0.version()
    }
    fn build(&self, module: &Module, options: &str) -> Result<Vec<u8>, DeviceError> {
        // No option changes what is built here, but an unknown one is refused as on the GPU
        // devices.
        crate::options::BuildOptions::parse(options)
            .map_err(|message| DeviceError::Build { device: self.name(), message })?;
        verify_module(module).map_err(|errs| DeviceError::Build {
            device: self.name(),
            message: errs.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "),
        })?;
        Ok(module.to_string().into_bytes())
    }
    fn load(&self, binary: &[u8]) -> Result<Handle, DeviceError> {
        let load_err = |message: String| DeviceError::Load { device: self.name(), message };
        let text = std::str::from_utf8(binary).map_err(|e| load_err(e.to_string()))?;
        let module = parse_module(text).map_err(|d| load_err(d.to_string()))?;
        verify_module(&module).map_err(|_| load_err("the module does not verify".into()))?;
        Ok(Arc::new(module))
    }
    fn kernel(&self, program: &Handle, name: &str) -> Result<Handle, DeviceError> {
        let m = handle_as::<Module>(program, "program")?;
        match m.kernel(name) {
            Some(k) => Ok(Arc::new(k.clone())),
            None => Err(DeviceError::no_kernel(name, m.kernels.iter().map(|k| k.name()))),
        }
    }
    fn run(
        &self,
        kernel: &Handle,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
    ) -> Result<(), DeviceError> {
        let k = handle_as::<Kernel>(kernel, "kernel")?;
        self.0.run(k, range, args, buffers).map_err(DeviceError::Launch)
    }
}

/// The reference interpreter as an [`IrExecutor`], with optional limits on each launch: a
/// step limit and a wall-clock timeout (see [`interp::RunOptions`]). The limits are not part
/// of its identity: programs built for one `Interp` serve any other.
#[derive(Clone, Copy, Debug, Default)]
pub struct Interp {
    /// The most statements a launch may execute, summed over its work-items.
    pub max_steps: Option<u64>,
    /// How long a launch may run, from the moment the device starts it.
    pub timeout: Option<std::time::Duration>,
}

impl IrExecutor for Interp {
    fn name(&self) -> String {
        "kiln-interp".into()
    }
    fn kind(&self) -> DeviceKind {
        DeviceKind::Interp
    }
    fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").into()
    }
    fn run(
        &self,
        kernel: &Kernel,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
    ) -> Result<(), String> {
        let options = interp::RunOptions {
            max_steps: self.max_steps,
            deadline: self.timeout.and_then(|t| std::time::Instant::now().checked_add(t)),
            ..interp::RunOptions::default()
        };
        interp::run_with(kernel, range, args, buffers, &options).map_err(|e| e.to_string())
    }
}

/// The interpreter as a [`Device`].
pub type InterpDevice = IrDevice<Interp>;

/// A shared interpreter device.
pub fn interp_device() -> Arc<dyn Device> {
    Arc::new(IrDevice(Interp::default()))
}
