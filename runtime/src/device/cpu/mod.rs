//! The cpu device: kernels compiled in-process to x86-64 machine code by the x86 backend
//! ([`kiln_backends::x86`]), their work-groups spread over the host's cores.
//!
//! The backend emits a code object ([`X86Program`]: the codes, their tables and calling
//! convention, [`kiln_backends::x86::abi`]); this module is its executor ([`CpuRun`]): it
//! binds a launch's arguments, runs its work-groups on spans of 8-lane code, region loops,
//! barrier rounds or the scalar code, spreads them over a [`WorkerPool`], sums buffers per
//! thread where that is exact, and reports faults in the interpreter's words.
//!
//! A program's binary (what the persistent cache stores) is the machine code itself: the
//! checked artifact container the GPU devices use (the kernels' signatures), with one
//! `x86` blob per kernel holding [`X86Program::to_image`]'s bytes: scalar and vector code,
//! an empty relocation list (the code is position-independent: helpers are called through
//! a table in the run's context), the CPU features the code needs, and the frame layouts
//! and fault tables a launch uses. Both codes are stored, so the scalar code that a fresh
//! build compiles lazily (at the first launch a vector-code kernel needs it) is already
//! there for a loaded program, which compiles nothing. Loading checks the container, each
//! image's checksum and tables, and the features against this CPU and this device, then
//! maps the code writable, fills it and makes it executable. The device's
//! [`Device::version`] names the features its code uses, so a cache item built for
//! features this device does not use is under another key (a miss, then a build), and an
//! image that needs one anyway is refused by `load` (and rebuilt by a `Context`).
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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use kiln_backends::driver;
use kiln_backends::options::BuildOptions;
use kiln_backends::x86::{X86Options, X86Program, X86};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Verified;

mod exec;
mod fault;
mod launch;
mod pool;
mod rounds;

pub use exec::{lane_groups_on_this_thread, CpuRun, CpuRunOptions, RawBuffer, INLINE_ITEMS};
pub use pool::WorkerPool;

use super::registry::OpenOptions;
use super::{handle_as, Device, DeviceKind, Handle};
use crate::artifact;
use crate::error::DeviceError;

/// The host CPU as a device.
#[derive(Debug)]
pub struct CpuDevice {
    threads: usize,
    timeout: Option<Duration>,
    /// Whether kernels get 8-lane AVX2 code (the CPU has AVX2 and the device may use it).
    vector: bool,
    /// Kernels compiled to machine code by [`Device::build`] so far.
    compiled: AtomicU64,
    /// The threads launches run on, started at the first launch that has more than one
    /// work-group and parked between launches (joined when the device is dropped).
    pool: OnceLock<WorkerPool>,
}

/// A loaded program: one compiled kernel per kernel of the module.
struct CpuProgram(Vec<Arc<X86Program>>);

impl CpuDevice {
    /// The host's CPU, running each launch's work-groups on `options.threads` threads (by
    /// default one per core: the calling thread and a pool of workers the device keeps)
    /// and stopping a launch at `options.timeout`. Unavailable on a
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
        let vector = kiln_backends::x86::cpu_has("avx2");
        Ok(CpuDevice {
            threads,
            timeout: options.timeout,
            vector,
            compiled: AtomicU64::new(0),
            pool: OnceLock::new(),
        })
    }

    /// This device without vector code: only the scalar code is built and only images
    /// that need no CPU feature beyond x86-64's baseline are loaded, as on a CPU without
    /// AVX2 (its [`Device::version`], and so its persistent-cache key, says so).
    pub fn scalar_only(mut self) -> CpuDevice {
        self.vector = false;
        self
    }

    /// How many kernels this device has compiled to machine code (a program loaded from
    /// the persistent cache adds none).
    pub fn kernels_compiled(&self) -> u64 {
        self.compiled.load(Ordering::Relaxed)
    }

    /// How many threads a launch's work-groups are spread over.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// How many worker threads the device has started so far (`threads() - 1` once a
    /// launch has had more than one work-group, fewer only if the system refused to start
    /// them, else 0); they are joined when the device is dropped.
    pub fn workers_started(&self) -> usize {
        self.pool.get().map_or(0, |p| p.threads() - 1)
    }

    fn target(&self) -> X86 {
        X86(X86Options { scalar: !self.vector, ..X86Options::default() })
    }

    /// The CPU features this device's code may use beyond x86-64's baseline.
    fn features(&self) -> &'static str {
        if self.vector {
            "x86-64+avx2"
        } else {
            "x86-64"
        }
    }
}

impl Device for CpuDevice {
    fn name(&self) -> String {
        "kiln-cpu".into()
    }
    fn kind(&self) -> DeviceKind {
        DeviceKind::CpuJit
    }
    /// kiln's version and the CPU features the device's code uses (part of the persistent
    /// cache key: an item built for other features is a miss).
    fn version(&self) -> String {
        format!("{} {}", env!("CARGO_PKG_VERSION"), self.features())
    }
    /// Every load, store and atomic is checked against its buffer's length.
    fn checks_bounds(&self) -> bool {
        true
    }
    fn build(&self, module: &Verified, options: &BuildOptions) -> Result<Vec<u8>, DeviceError> {
        let built = driver::build_verified(&self.target(), module.clone(), options)
            .map_err(|e| DeviceError::build(self.name(), e))?;
        self.compiled.fetch_add(built.output.len() as u64, Ordering::Relaxed);
        let mut blobs = Vec::with_capacity(built.output.len());
        for p in &built.output {
            let image = p.to_image().map_err(|e| DeviceError::build(self.name(), e))?;
            blobs.push(("x86".to_string(), image));
        }
        Ok(artifact::encode(&built.kernels.kernels, &blobs))
    }
    fn load(&self, binary: &[u8]) -> Result<Handle, DeviceError> {
        let load_err = |message: String| DeviceError::Load { device: self.name(), message };
        let a = artifact::decode(&self.name(), binary)?;
        if a.blobs.len() != a.signatures.len() || a.blobs.iter().any(|(kind, _)| kind != "x86") {
            return Err(load_err(format!(
                "expected one x86 blob per kernel ({} kernels, blobs {:?})",
                a.signatures.len(),
                a.blobs.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>()
            )));
        }
        let mut programs = Vec::with_capacity(a.blobs.len());
        for (sig, (_, image)) in a.signatures.iter().zip(&a.blobs) {
            let p = X86Program::from_image(sig, image).map_err(|e| load_err(e.to_string()))?;
            if !self.vector && !p.required_features().is_empty() {
                return Err(load_err(format!(
                    "kernel `{}`: the code needs {:?}, which this device does not use",
                    sig.name(),
                    p.required_features()
                )));
            }
            programs.push(Arc::new(p));
        }
        Ok(Arc::new(CpuProgram(programs)))
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
        let opts = CpuRunOptions {
            deadline: self.timeout.and_then(|t| Instant::now().checked_add(t)),
            ..CpuRunOptions::default()
        };
        let pool = self.pool.get_or_init(|| WorkerPool::new(self.threads));
        k.run_on(pool, range, args, buffers, &opts).map_err(|e| DeviceError::Launch(e.to_string()))
    }
}
