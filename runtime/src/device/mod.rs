//! Devices: what builds programs and runs kernels.
//!
//! A [`Device`] turns a [`kiln_ir::Module`] into a *program binary* (bytes: SPIR-V words, PTX text,
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
//! ([`crate::device::cuda::CudaDevice`], PTX) and the Vulkan device ([`crate::device::vulkan::VulkanDevice`],
//! SPIR-V) do so.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use kiln_backends::options::BuildOptions;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Kernel, Verified};

use crate::error::DeviceError;

pub mod cpu;
/// The CUDA device: kiln kernels on NVIDIA GPUs through the driver API, loaded at run time.
pub mod cuda;
pub mod interp;
pub mod memory;
pub mod registry;
/// A Vulkan compute device running the SPIR-V backend's Vulkan flavour.
pub mod vulkan;

pub use interp::{interp_device, Interp, InterpDevice, IrDevice, IrExecutor};
pub use memory::{
    DeviceMemory, KeepAlive, Memory, RecordCopy, RecordFill, RecordLaunch, RecordStep, Recording,
    ResidentBuffer,
};

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
pub const CODEGEN_VERSION: u32 = 4;

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
    /// True when the device is a GPU interface that a software driver implements on the
    /// host's CPU (lavapipe, llvmpipe, SwiftShader: Vulkan's `VK_PHYSICAL_DEVICE_TYPE_CPU`).
    /// The cpu device runs kernels faster there, so [`registry::best`] passes such a device
    /// over; it is used only when asked for by name. False by default.
    fn emulated(&self) -> bool {
        false
    }
    /// True when the device checks every access of every launch itself, so
    /// `-fsanitize=bounds` needs no rewrite of its programs (the interpreter); false by
    /// default.
    fn checks_bounds(&self) -> bool {
        false
    }
    /// Builds a program binary for `module` with the given build options, through the build
    /// driver ([`kiln_backends::driver`]) and the device's target.
    fn build(&self, module: &Verified, options: &BuildOptions) -> Result<Vec<u8>, DeviceError>;
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

    /// The memory space the device keeps buffers in between launches, when it has one of
    /// its own (see [`memory`]): a number no other device shares (two devices that can use
    /// each other's memory may share it). `None` (the default): launches take host buffers
    /// through [`Device::run`].
    fn memory_space(&self) -> Option<u64> {
        None
    }
    /// Allocates `bytes` bytes of device memory (contents unspecified) for a buffer. Only
    /// called on a device with a [`Device::memory_space`].
    fn alloc(&self, bytes: usize) -> Result<Memory, DeviceError> {
        let _ = bytes;
        Err(DeviceError::Launch(format!("device `{}` has no memory of its own", self.name())))
    }
    /// Launches like [`Device::run`], with buffers that are already in the device's memory
    /// (made by [`Device::alloc`]), which the kernel updates in place. Only called on a
    /// device with a [`Device::memory_space`]. It may return once the launch is submitted
    /// (see [`Device::finish`]).
    fn run_resident(
        &self,
        kernel: &Handle,
        range: &NdRange,
        args: &[Arg],
        buffers: &[ResidentBuffer],
    ) -> Result<(), DeviceError> {
        let _ = (kernel, range, args, buffers);
        Err(DeviceError::Launch(format!("device `{}` has no memory of its own", self.name())))
    }
    /// Records `steps` (kernel launches, buffer copies and fills) once into a command list
    /// of the device's own (a Vulkan command buffer with pipelines, descriptor sets, copies,
    /// fills and barriers prepared; a CUDA graph of kernel, memcpy and memset nodes), which
    /// a command graph replays on every run. `Ok(None)` (the default) means the device has
    /// none: the command graph replays its own prepared step list, step by step.
    fn record(&self, steps: &[RecordStep]) -> Result<Option<Box<dyn Recording>>, DeviceError> {
        let _ = steps;
        Ok(None)
    }
    /// Waits, at most `timeout` (`None`: as long as it takes), until every launch and replay
    /// handed to the device has finished on it: `Ok(false)` if some had not by then, the
    /// device's error if one failed there. A device whose [`Device::run_resident`] and
    /// [`Recording::replay`] return once the work is submitted (Vulkan, CUDA: later work
    /// on the device is ordered after it there, and a host access to a buffer's device copy
    /// waits for it first) implements it; a wait on the event of a launch calls it. The
    /// default, for devices that return when the work is done, returns `Ok(true)`.
    fn finish(&self, timeout: Option<std::time::Duration>) -> Result<bool, DeviceError> {
        let _ = timeout;
        Ok(true)
    }

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
        let module = Verified::kernel(kernel.clone())
            .map_err(|errs| DeviceError::ill_formed(self.name(), &errs))?;
        let bin = self.build(&module, &BuildOptions::default())?;
        let program = self.load(&bin)?;
        let k = self.kernel(&program, kernel.name())?;
        self.run(&k, range, args, buffers)
    }
}

/// The module a program binary holds as kiln text, for the device whose binaries are IR
/// (the interpreter). The bytes may come from disk: anything that does not
/// parse and verify is a load error on `device`, never trusted.
pub(crate) fn module_from_text(device: &str, text: &[u8]) -> Result<Verified, DeviceError> {
    let load_err = |message: String| DeviceError::Load { device: device.into(), message };
    let text = std::str::from_utf8(text).map_err(|e| load_err(e.to_string()))?;
    let module = kiln_ir::parse_module(text).map_err(|d| load_err(d.to_string()))?;
    Verified::new(module).map_err(|_| load_err("the module does not verify".into()))
}

/// The value behind a program or kernel handle, when `device` made it; `what` names the
/// handle in the error (a handle of another device is a launch error, not a panic).
pub(crate) fn handle_as<'a, T: Any>(h: &'a Handle, what: &str) -> Result<&'a T, DeviceError> {
    h.downcast_ref::<T>().ok_or_else(|| DeviceError::Launch(format!("not a {what} of this device")))
}
