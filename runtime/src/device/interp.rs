//! Devices that run IR directly: the reference interpreter ([`Interp`]), and any executor
//! shaped like it ([`IrExecutor`], wrapped in [`IrDevice`]).

use std::sync::Arc;

use kiln_backends::kir::Kir;
use kiln_backends::options::BuildOptions;
use kiln_ir::interp;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Kernel, Module, Verified};

use super::{handle_as, module_from_text, Device, DeviceKind, Handle};
use crate::error::DeviceError;

/// An executor that runs IR kernels directly (the interpreter, or a backend that compiles
/// inside its `run`). Wrap one in [`IrDevice`] to get a [`Device`].
pub trait IrExecutor: Send + Sync + 'static {
    /// The device's name.
    fn name(&self) -> String;
    /// Its kind.
    fn kind(&self) -> DeviceKind;
    /// Driver / runtime version.
    fn version(&self) -> String;
    /// True when [`IrExecutor::run`] checks every access itself (see
    /// [`Device::checks_bounds`]); false by default.
    fn checks_bounds(&self) -> bool {
        false
    }
    /// True when it emulates a GPU on the host's CPU (see [`Device::emulated`]); false by
    /// default.
    fn emulated(&self) -> bool {
        false
    }
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
    fn checks_bounds(&self) -> bool {
        self.0.checks_bounds()
    }
    fn emulated(&self) -> bool {
        self.0.emulated()
    }
    fn build(&self, module: &Verified, options: &BuildOptions) -> Result<Vec<u8>, DeviceError> {
        let built = kiln_backends::driver::build_verified(&Kir, module.clone(), options)
            .map_err(|e| DeviceError::build(self.name(), e))?;
        Ok(built.output.into_bytes())
    }
    fn load(&self, binary: &[u8]) -> Result<Handle, DeviceError> {
        Ok(Arc::new(module_from_text(&self.name(), binary)?.into_module()))
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
    fn checks_bounds(&self) -> bool {
        true
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
