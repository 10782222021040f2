//! [`Device`]: where a [`crate::Jit`] runs kernels.

use std::sync::Arc;

use kiln_runtime::device::registry::{self, OpenOptions};
use kiln_runtime::{DeviceError, Interp, IrDevice};

use super::Error;

/// A device to run kernels on: the reference interpreter, this host's CPU (x86-64 machine
/// code), the fastest Vulkan device (through the SPIR-V backend) or the first CUDA GPU
/// (through PTX). Cheap to clone.
///
/// ```
/// use kiln::runtime::DeviceKind;
///
/// let dev = kiln::Device::interp();
/// assert_eq!(dev.kind(), DeviceKind::Interp);
/// // Without a driver the explicit constructors say so; they never fall back.
/// match kiln::Device::cuda() {
///     Ok(gpu) => assert_eq!(gpu.kind(), DeviceKind::Cuda),
///     Err(e) => assert!(e.to_string().starts_with("CUDA device unavailable"), "{e}"),
/// }
/// ```
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<dyn kiln_runtime::Device>,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({})", self.inner.name())
    }
}

impl Device {
    /// The device the registry ([`kiln_runtime::device::registry`]) calls `name`
    /// (`interp`, `cpu`, `vulkan`, `cuda`, ...); an unknown name or a missing driver is
    /// [`Error::Device`].
    ///
    /// ```
    /// assert_eq!(kiln::Device::open("interp")?.name(), "kiln-interp");
    /// assert!(kiln::Device::open("abacus").unwrap_err().to_string().contains("unknown device"));
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn open(name: &str) -> Result<Device, Error> {
        Device::open_with(name, &OpenOptions::default())
    }

    /// [`Device::open`] with limits on each launch, where the device can honour them
    /// ([`registry::DeviceInfo`] says which it can).
    pub fn open_with(name: &str, options: &OpenOptions) -> Result<Device, Error> {
        let Some(info) = registry::info(name) else {
            let names = registry::names().join(", ");
            return Err(Error::Device(format!("unknown device `{name}` (devices: {names})")));
        };
        let inner = info.open(options).map_err(|e| match e {
            // Already names the device.
            DeviceError::Unavailable { .. } => Error::Device(e.to_string()),
            e => Error::Device(format!("{name}: {e}")),
        })?;
        Ok(Device { inner })
    }

    /// The reference interpreter: always available, checks every access, slow.
    pub fn interp() -> Device {
        Device { inner: Arc::new(IrDevice(Interp::default())) }
    }

    /// This host's CPU: kernels compiled to x86-64 machine code, their work-groups spread
    /// over every core; [`Error::Device`] on a host that is not x86-64.
    ///
    /// ```
    /// # if !cfg!(target_arch = "x86_64") { return Ok(()); }
    /// assert_eq!(kiln::Device::cpu()?.kind(), kiln::runtime::DeviceKind::CpuJit);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn cpu() -> Result<Device, Error> {
        Device::open("cpu")
    }

    /// The fastest Vulkan device (a GPU before a software driver such as lavapipe);
    /// [`Error::Device`] when there is no Vulkan loader or device.
    pub fn vulkan() -> Result<Device, Error> {
        Device::open("vulkan")
    }

    /// CUDA device 0; [`Error::Device`] when there is no CUDA driver or GPU.
    pub fn cuda() -> Result<Device, Error> {
        Device::open("cuda")
    }

    /// The fastest device there is: a GPU (CUDA, else a Vulkan GPU), else the cpu device
    /// (x86-64 hosts), else the interpreter. A software Vulkan driver (lavapipe, which runs
    /// on the CPU slower than the cpu device) is never chosen; [`Device::vulkan`] opens it.
    ///
    /// ```
    /// use kiln::runtime::DeviceKind;
    ///
    /// let dev = kiln::Device::best();
    /// if cfg!(target_arch = "x86_64") {
    ///     assert!(matches!(dev.kind(), DeviceKind::Cuda | DeviceKind::Vulkan | DeviceKind::CpuJit));
    /// }
    /// ```
    pub fn best() -> Device {
        Device { inner: registry::best(&OpenOptions::default()) }
    }

    /// True for a GPU interface that a software driver emulates on the host's CPU
    /// (lavapipe): [`Device::best`] never picks one.
    pub fn is_emulated(&self) -> bool {
        self.inner.emulated()
    }

    /// Which kind of device it is.
    pub fn kind(&self) -> kiln_runtime::DeviceKind {
        self.inner.kind()
    }

    /// The device's name, as `kiln run` and the program cache know it.
    pub fn name(&self) -> String {
        self.inner.name()
    }
}
