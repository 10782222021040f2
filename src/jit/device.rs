//! [`Device`]: where a [`crate::Jit`] runs kernels.

use std::sync::Arc;

use kiln_runtime::device::cuda::CudaDevice;
use kiln_runtime::device::vulkan::VulkanDevice;
use kiln_runtime::{Interp, IrDevice};

use super::Error;

/// A device to run kernels on: the reference interpreter, the first Vulkan device (through
/// the SPIR-V backend) or the first CUDA GPU (through PTX). Cheap to clone.
///
/// ```
/// use kiln::runtime::DeviceKind;
///
/// let dev = kiln::Device::interp();
/// assert_eq!(dev.kind(), DeviceKind::Interp);
/// // Without a driver the explicit constructors say so; they never fall back.
/// match kiln::Device::cuda() {
///     Ok(gpu) => assert_eq!(gpu.kind(), DeviceKind::Cuda),
///     Err(e) => assert!(e.to_string().starts_with("cuda: "), "{e}"),
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
    /// The reference interpreter: always available, checks every access, slow.
    pub fn interp() -> Device {
        Device { inner: Arc::new(IrDevice(Interp::default())) }
    }

    /// The first Vulkan device; [`Error::Device`] when there is no Vulkan loader or device.
    pub fn vulkan() -> Result<Device, Error> {
        let d = VulkanDevice::open().map_err(|e| Error::Device(format!("vulkan: {e}")))?;
        Ok(Device { inner: Arc::new(d) })
    }

    /// CUDA device 0; [`Error::Device`] when there is no CUDA driver or GPU.
    pub fn cuda() -> Result<Device, Error> {
        let d = CudaDevice::open().map_err(|e| Error::Device(format!("cuda: {e}")))?;
        Ok(Device { inner: Arc::new(d) })
    }

    /// The fastest device there is: CUDA, else Vulkan, else the interpreter.
    ///
    /// ```
    /// use kiln::runtime::DeviceKind;
    ///
    /// let dev = kiln::Device::best();
    /// assert!(matches!(dev.kind(), DeviceKind::Cuda | DeviceKind::Vulkan | DeviceKind::Interp));
    /// ```
    pub fn best() -> Device {
        Device::cuda().or_else(|_| Device::vulkan()).unwrap_or_else(|_| Device::interp())
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
