//! Every device by name: what `kiln run --device` and [`open`] accept. Adding a device is
//! its module under `device/` plus one entry in [`DEVICES`].

use std::sync::Arc;
use std::time::Duration;

use super::cpu::CpuDevice;
use super::cuda::CudaDevice;
use super::vulkan::VulkanDevice;
use super::{Device, Interp, IrDevice};
use crate::error::DeviceError;

/// Settings for opening a device: limits on each launch where the device can honour them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenOptions {
    /// The most statements one launch may execute (devices with [`DeviceInfo::counts_steps`]).
    pub max_steps: Option<u64>,
    /// How long one launch may run (devices with [`DeviceInfo::stops_at_timeout`]; on the
    /// others a caller can only stop waiting).
    pub timeout: Option<Duration>,
    /// How many threads a launch's work-groups are spread over (the cpu device; `None`: one
    /// per core).
    pub threads: Option<usize>,
}

/// A device the registry knows.
pub struct DeviceInfo {
    /// Its name, as `--device` spells it.
    pub name: &'static str,
    /// What it is, in a few words.
    pub about: &'static str,
    /// Whether it can bound a launch by [`OpenOptions::max_steps`].
    pub counts_steps: bool,
    /// Whether it stops a launch itself at [`OpenOptions::timeout`]; a GPU cannot, so a
    /// caller that must not wait longer abandons the wait instead.
    pub stops_at_timeout: bool,
    open: fn(&OpenOptions) -> Result<Arc<dyn Device>, DeviceError>,
}

impl DeviceInfo {
    /// Opens the device (its first instance); a missing driver or GPU is an error saying so.
    pub fn open(&self, options: &OpenOptions) -> Result<Arc<dyn Device>, DeviceError> {
        (self.open)(options)
    }
}

/// Every device, in order of expected speed: the oracle first, the fastest last ([`best`]
/// takes the last that opens and is not [`Device::emulated`]).
pub const DEVICES: &[DeviceInfo] = &[
    DeviceInfo {
        name: "interp",
        about: "the reference interpreter (the oracle; checks every access)",
        counts_steps: true,
        stops_at_timeout: true,
        open: |o| Ok(Arc::new(IrDevice(Interp { max_steps: o.max_steps, timeout: o.timeout }))),
    },
    DeviceInfo {
        name: "cpu",
        about: "this host's CPU (x86-64 machine code, work-groups over every core)",
        counts_steps: false,
        stops_at_timeout: true,
        open: |o| Ok(Arc::new(CpuDevice::open(o)?)),
    },
    DeviceInfo {
        name: "vulkan",
        about: "the fastest Vulkan device, a GPU before lavapipe (SPIR-V, Vulkan compute flavour)",
        counts_steps: false,
        stops_at_timeout: false,
        open: |_| Ok(Arc::new(VulkanDevice::open()?)),
    },
    DeviceInfo {
        name: "cuda",
        about: "the first CUDA GPU (PTX, through the driver API)",
        counts_steps: false,
        stops_at_timeout: false,
        open: |_| Ok(Arc::new(CudaDevice::open()?)),
    },
];

/// Other names of registered devices: (alias, name).
const ALIASES: &[(&str, &str)] = &[("cpu-interp", "interp")];

/// The registered device called `name` (or one of its aliases, such as `cpu-interp`), or
/// `None`.
pub fn info(name: &str) -> Option<&'static DeviceInfo> {
    let name = ALIASES.iter().find(|(a, _)| *a == name).map_or(name, |(_, n)| n);
    DEVICES.iter().find(|d| d.name == name)
}

/// The names of every device.
pub fn names() -> Vec<&'static str> {
    DEVICES.iter().map(|d| d.name).collect()
}

/// Opens the device called `name`; an unknown name is an error listing the known ones.
pub fn open(name: &str, options: &OpenOptions) -> Result<Arc<dyn Device>, DeviceError> {
    match info(name) {
        Some(d) => d.open(options),
        None => Err(DeviceError::Unavailable {
            device: name.to_string(),
            reason: format!("unknown device (devices: {})", names().join(", ")),
        }),
    }
}

/// The fastest device there is: a GPU (CUDA, else a Vulkan GPU), else the cpu device (on
/// x86-64), else the interpreter, which always opens. A GPU interface emulated on the host's
/// CPU ([`Device::emulated`]: lavapipe) is never chosen here; [`open`] it by name.
pub fn best(options: &OpenOptions) -> Arc<dyn Device> {
    fastest(DEVICES.iter().rev().map(|d| d.open(options)))
        .unwrap_or_else(|| Arc::new(IrDevice(Interp::default())))
}

/// The first device of `candidates` (fastest first) that opened and is not emulated.
fn fastest(
    candidates: impl Iterator<Item = Result<Arc<dyn Device>, DeviceError>>,
) -> Option<Arc<dyn Device>> {
    candidates.filter_map(Result::ok).find(|d| !d.emulated())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DeviceKind;

    #[test]
    fn names_are_unique_and_open_or_say_why() {
        for (i, d) in DEVICES.iter().enumerate() {
            assert!(DEVICES[..i].iter().all(|e| e.name != d.name), "{} twice", d.name);
            assert!(info(d.name).is_some_and(|i| i.name == d.name));
            // Opening either works or says the device is unavailable: never a panic.
            match d.open(&OpenOptions::default()) {
                Ok(dev) => assert!(!dev.name().is_empty()),
                Err(e) => assert!(matches!(e, DeviceError::Unavailable { .. }), "{e}"),
            }
        }
        assert_eq!(names()[0], "interp", "the oracle comes first");
    }

    #[test]
    fn the_interpreter_takes_its_limits_and_unknown_names_are_refused() {
        let dev =
            open("interp", &OpenOptions { max_steps: Some(5), ..OpenOptions::default() }).unwrap();
        assert_eq!(dev.kind(), DeviceKind::Interp);
        let k = kiln_ir::parse_module(
            "kernel spin(x: ptr<global, u32>) { for i: u32 in 0u32 .. 1000u32 { x[0] = i; } }",
        )
        .unwrap()
        .kernels
        .remove(0);
        let mut bufs = vec![kiln_ir::launch::Buffer::zeroed(kiln_ir::Scalar::U32, 1)];
        let args = [kiln_ir::launch::Arg::Buffer(0)];
        let e = dev
            .build_and_run(&k, &kiln_ir::launch::NdRange::new(&[1]), &args, &mut bufs)
            .unwrap_err();
        assert!(e.to_string().contains("step limit"), "{e}");
        let Err(e) = open("abacus", &OpenOptions::default()) else { panic!("abacus opened") };
        assert!(
            e.to_string().contains("unknown device (devices: interp, cpu, vulkan, cuda"),
            "{e}"
        );
        assert!(!best(&OpenOptions::default()).name().is_empty());
    }

    /// A device of `kind` that says whether it is emulated.
    struct Fake(DeviceKind, bool);
    impl super::super::IrExecutor for Fake {
        fn name(&self) -> String {
            format!("fake-{}", self.0)
        }
        fn kind(&self) -> DeviceKind {
            self.0
        }
        fn version(&self) -> String {
            String::new()
        }
        fn run(
            &self,
            _: &kiln_ir::Kernel,
            _: &kiln_ir::launch::NdRange,
            _: &[kiln_ir::launch::Arg],
            _: &mut [kiln_ir::launch::Buffer],
        ) -> Result<(), String> {
            Ok(())
        }
        fn emulated(&self) -> bool {
            self.1
        }
    }

    #[test]
    fn the_fastest_device_that_opens_is_not_an_emulated_gpu() {
        let fake = |kind, emulated| -> Result<Arc<dyn Device>, DeviceError> {
            Ok(Arc::new(IrDevice(Fake(kind, emulated))))
        };
        let missing = || Err(DeviceError::Unavailable { device: "x".into(), reason: "y".into() });
        // lavapipe and the cpu device, no CUDA: the cpu device.
        let order = [missing(), fake(DeviceKind::Vulkan, true), fake(DeviceKind::CpuJit, false)];
        assert_eq!(fastest(order.into_iter()).unwrap().kind(), DeviceKind::CpuJit);
        // A Vulkan GPU beats the cpu device; CUDA beats both.
        let order = [missing(), fake(DeviceKind::Vulkan, false), fake(DeviceKind::CpuJit, false)];
        assert_eq!(fastest(order.into_iter()).unwrap().kind(), DeviceKind::Vulkan);
        let order = [fake(DeviceKind::Cuda, false), fake(DeviceKind::Vulkan, false)];
        assert_eq!(fastest(order.into_iter()).unwrap().kind(), DeviceKind::Cuda);
        assert!(fastest([fake(DeviceKind::Vulkan, true)].into_iter()).is_none());
    }

    /// The registry's order is the ranking: GPUs after the cpu device after the oracle.
    #[test]
    fn devices_are_listed_slowest_first() {
        assert_eq!(names(), ["interp", "cpu", "vulkan", "cuda"]);
    }
}
