//! The cpu device: kernels compiled in-process to x86-64 machine code by the x86 backend
//! ([`kiln_backends::x86`]), their work-groups spread over the host's cores.
//!
//! A program's binary (what the persistent cache stores) is the module as the build driver
//! lowered it (`-O`, in the text format, in the checked artifact container the GPU devices
//! use too): the backend's machine code holds no absolute address, but its frame layouts
//! and fault tables cannot be stored yet, so loading a program compiles it to machine code
//! again (tens of microseconds for a small kernel: about PTX emission's time), and no
//! machine code is ever read back from disk.
//!
//! ```
//! use kiln_ir::launch::{Arg, Buffer, NdRange};
//! use kiln_runtime::device::cpu::CpuDevice;
//! use kiln_runtime::device::registry::OpenOptions;
//! use kiln_runtime::Device;
//! # if !cfg!(target_arch = "x86_64") { return; }
//! let dev = CpuDevice::open(&OpenOptions::default()).unwrap();
//! let m = kiln_ir::parse_module(
//!     "kernel twice(x: ptr<global, i32>) { let i: u32 = global_id(0); x[i] = 2 * x[i]; }",
//! ).unwrap();
//! let mut bufs = vec![Buffer::from_slice(&[1i32, 2, 3, 4])];
//! dev.build_and_run(&m.kernels[0], &NdRange::new(&[4]), &[Arg::Buffer(0)], &mut bufs).unwrap();
//! assert_eq!(bufs[0].to_vec::<i32>(), Some(vec![2, 4, 6, 8]));
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln_backends::driver;
use kiln_backends::options::BuildOptions;
use kiln_backends::target::Target;
use kiln_backends::x86::{X86Options, X86Program, X86RunOptions, X86};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Verified;

use super::registry::OpenOptions;
use super::{handle_as, module_from_text, Device, DeviceKind, Handle};
use crate::artifact;
use crate::error::DeviceError;

/// The host CPU as a device.
#[derive(Debug)]
pub struct CpuDevice {
    threads: usize,
    timeout: Option<Duration>,
    features: String,
}

/// A loaded program: one compiled kernel per kernel of the module.
struct CpuProgram(Vec<Arc<X86Program>>);

impl CpuDevice {
    /// The host's CPU, running each launch's work-groups on `options.threads` threads (by
    /// default one per core) and stopping a launch at `options.timeout`. Unavailable on a
    /// host that is not x86-64.
    pub fn open(options: &OpenOptions) -> Result<CpuDevice, DeviceError> {
        if !cfg!(target_arch = "x86_64") {
            return Err(DeviceError::Unavailable {
                device: "cpu".into(),
                reason: "the cpu device compiles x86-64 code, and this host is not x86-64".into(),
            });
        }
        let threads = options
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1);
        Ok(CpuDevice { threads, timeout: options.timeout, features: host_features() })
    }

    /// How many threads a launch's work-groups are spread over.
    pub fn threads(&self) -> usize {
        self.threads
    }

    fn target(&self) -> X86 {
        X86(X86Options::default())
    }
}

/// The CPU features the generated code depends on (part of the device's identity, so a
/// cached program is never used on a host that lacks them).
fn host_features() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        let avx2 = std::arch::is_x86_feature_detected!("avx2");
        let fma = std::arch::is_x86_feature_detected!("fma");
        format!("x86-64 avx2 {avx2} fma {fma}")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        "not x86-64".into()
    }
}

impl Device for CpuDevice {
    fn name(&self) -> String {
        "kiln-cpu".into()
    }
    fn kind(&self) -> DeviceKind {
        DeviceKind::CpuJit
    }
    /// kiln's version and the host CPU's features.
    fn version(&self) -> String {
        format!("{} {}", env!("CARGO_PKG_VERSION"), self.features)
    }
    /// Every load, store and atomic is checked against its buffer's length.
    fn checks_bounds(&self) -> bool {
        true
    }
    fn build(&self, module: &Verified, options: &BuildOptions) -> Result<Vec<u8>, DeviceError> {
        let target = self.target();
        let (lowered, _) =
            driver::lower(&target.name(), target.lowering(), module.clone(), options)
                .map_err(|e| DeviceError::build(self.name(), e))?;
        Ok(artifact::encode(&lowered.kernels, &[("kir".into(), lowered.to_string().into_bytes())]))
    }
    fn load(&self, binary: &[u8]) -> Result<Handle, DeviceError> {
        let load_err = |message: String| DeviceError::Load { device: self.name(), message };
        let a = artifact::decode(&self.name(), binary)?;
        let text = match a.blobs.as_slice() {
            [(kind, text)] if kind == "kir" => text,
            _ => return Err(load_err("expected one kir blob".into())),
        };
        let module = module_from_text(&self.name(), text)?;
        let programs = self.target().emit(&module).map_err(|e| load_err(e.to_string()))?;
        Ok(Arc::new(CpuProgram(programs.into_iter().map(Arc::new).collect())))
    }
    fn kernel(&self, program: &Handle, name: &str) -> Result<Handle, DeviceError> {
        let p = handle_as::<CpuProgram>(program, "program")?;
        match p.0.iter().find(|k| k.kernel().name() == name) {
            Some(k) => Ok(k.clone()),
            None => Err(DeviceError::no_kernel(name, p.0.iter().map(|k| k.kernel().name()))),
        }
    }
    fn run(
        &self,
        kernel: &Handle,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
    ) -> Result<(), DeviceError> {
        let k = handle_as::<X86Program>(kernel, "kernel")?;
        let opts = X86RunOptions {
            deadline: self.timeout.and_then(|t| Instant::now().checked_add(t)),
            ..X86RunOptions::default()
        };
        k.run_parallel(range, args, buffers, self.threads, &opts)
            .map_err(|e| DeviceError::Launch(e.to_string()))
    }
}
