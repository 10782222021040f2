//! The embedding facade: source to a launched kernel in a few calls.
//!
//! A [`Jit`] holds a runtime [`Context`] for one [`Device`] (so kernels are built once,
//! through the program cache) and an in-order [`Queue`]. The steps:
//!
//! ```
//! use kiln::{args, Device, Jit, NdRange};
//!
//! let jit = Jit::new(Device::interp())?;
//! let module = jit.compile_source("saxpy.kir", include_str!("../../examples/saxpy.kir"))?;
//! let n = 8u32;
//! let x = jit.buffer_from(&[1.0f32; 8]);
//! let y = jit.buffer_zeroed::<f32>(8);
//! jit.launch(&module, "saxpy", NdRange::new(&[n]), args![&x, &y, 2.0f32, n])?.wait()?;
//! assert_eq!(y.read()?, vec![2.0; 8]);
//! # Ok::<(), kiln::Error>(())
//! ```

mod args;
mod device;
mod error;
mod typed;

use kiln_ir::launch::NdRange;
use kiln_ir::{check_source, Kernel, Module, Verified};
use kiln_passes::fusion::{FusedKernel, FusionSpec, FusionWarning};
use kiln_runtime::fusion::fuse_spec;
use kiln_runtime::{
    Buffer, Config, Context, DeviceError, Element, Event, KernelHandle, Queue, QueueOrder,
    RuntimeError,
};

pub use device::Device;
pub use error::Error;
/// A kernel argument: the runtime's one argument type (a buffer, a range of one, or a
/// scalar of its exact type), made with [`args!`](crate::args) or `Arg::from`.
pub use kiln_runtime::Arg;
pub use typed::{ArgFor, ArgsFor, ParamType, Signature, TypedKernel};

/// A JIT for one device: compiles kiln source, fuses kernels, makes buffers and launches
/// kernels on an in-order queue (each launch sees the previous one's writes).
///
/// ```
/// let jit = kiln::Jit::new(kiln::Device::best())?;
/// println!("running on {}", jit.device().name());
/// # Ok::<(), kiln::Error>(())
/// ```
pub struct Jit {
    device: Device,
    ctx: Context,
    queue: Queue,
    options: String,
    /// The device kernels of the last kernels launched, by the kernel's IR object (its
    /// `Arc`, kept here so that its address is not reused): a launch of one of them again
    /// neither prints nor hashes its module for the program cache's key.
    handles: std::sync::Mutex<Vec<(Kernel, KernelHandle)>>,
}

/// How many kernels' device handles a [`Jit`] keeps for launches ([`Jit::launch`]).
const HANDLES: usize = 64;

impl std::fmt::Debug for Jit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Jit").field("device", &self.device).finish_non_exhaustive()
    }
}

/// A fused kernel with what it was fused from, so that arguments given against the
/// original kernels' parameters can be bound to it ([`Jit::launch_fused`]).
///
/// ```
/// let jit = kiln::Jit::new(kiln::Device::interp())?;
/// let src = "kernel inc(b: ptr<global, i32>) { let i: u32 = global_id(0); b[i] = b[i] + 1; }";
/// let module = jit.compile_source("inc.kir", src)?;
/// let spec = kiln::FusionSpec {
///     name: "inc2".into(),
///     kernels: vec!["inc".into(), "inc".into()],
///     ndranges: vec![kiln::RangeSpec::new(&[4]), kiln::RangeSpec::new(&[4])],
///     identical: vec![vec![kiln::ParamRef::new(0, 0), kiln::ParamRef::new(1, 0)]],
///     ..Default::default()
/// };
/// let fused = jit.fuse(&module, &spec)?;
/// assert_eq!(fused.kernel().params().len(), 1);
/// assert!(fused.warnings().is_empty());
/// # Ok::<(), kiln::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Fused {
    fused: FusedKernel,
    /// The fused kernel alone, as the fusion pass verified it: what is built.
    built: Verified,
    module: Module,
    spec: FusionSpec,
}

impl Fused {
    /// The fused kernel.
    pub fn kernel(&self) -> &Kernel {
        &self.fused.kernel
    }

    /// The nd-range it launches with (derived from the entries' ranges).
    pub fn range(&self) -> &NdRange {
        &self.fused.range
    }

    /// Promotions the fusion refused (those buffers stay in global memory), each with why.
    pub fn warnings(&self) -> &[FusionWarning] {
        &self.fused.warnings
    }

    /// The full result of fusion, argument map included.
    pub fn fused_kernel(&self) -> &FusedKernel {
        &self.fused
    }
}

/// A submitted launch. Dropping it does not wait; [`Buffer::read`] waits for the launches
/// that write the buffer.
///
/// ```
/// # let jit = kiln::Jit::new(kiln::Device::interp())?;
/// let module = jit.compile_source("oob.kir", "kernel oob(b: ptr<global, i32>) { b[4] = 1; }")?;
/// let b = jit.buffer_zeroed::<i32>(4);
/// let launch = jit.launch(&module, "oob", kiln::NdRange::new(&[1]), kiln::args![&b])?;
/// // The interpreter checks every access: the failure comes back from wait().
/// let err = launch.wait().unwrap_err();
/// assert!(err.to_string().contains("kernel `oob` failed"), "{err}");
/// # Ok::<(), kiln::Error>(())
/// ```
#[derive(Debug)]
#[must_use = "a launch runs asynchronously: wait() for it to see its errors"]
pub struct Launch {
    kernel: String,
    event: Event,
}

impl Launch {
    /// Waits for the kernel to finish; its error, if it failed.
    pub fn wait(self) -> Result<(), Error> {
        self.event.wait().map_err(|e| launch_error(&self.kernel, e))
    }

    /// Waits at most `timeout`: `None` if the kernel is still running then (a GPU cannot
    /// stop it; the caller may stop waiting), else what [`Launch::wait`] returns.
    pub fn wait_timeout(&self, timeout: std::time::Duration) -> Option<Result<(), Error>> {
        let r = self.event.wait_timeout(timeout)?;
        Some(r.map_err(|e| launch_error(&self.kernel, e)))
    }
}

/// Kernel `name` of `module` alone (which has it). Only this kernel is built: another
/// kernel of its module that the backend cannot express must not fail its launch.
fn only(module: &Verified, name: &str) -> Verified {
    module.clone().retain(|k| k.name() == name)
}

/// Kernel `name` of `module`, or [`Error::NoKernel`] listing the module's kernels.
fn find_kernel<'m>(module: &'m Module, name: &str) -> Result<&'m Kernel, Error> {
    module.kernel(name).ok_or_else(|| Error::NoKernel {
        name: name.to_string(),
        available: module.kernels.iter().map(|k| k.name().to_string()).collect(),
    })
}

fn launch_error(kernel: &str, e: RuntimeError) -> Error {
    match e {
        RuntimeError::Argument { source, .. } => {
            Error::Argument { kernel: kernel.to_string(), source }
        }
        RuntimeError::Kernel { source, .. } => {
            Error::Launch { kernel: kernel.to_string(), message: device_message(source) }
        }
        other => Error::Launch { kernel: kernel.to_string(), message: other.to_string() },
    }
}

/// A build error is the compiler's own text (it names the backend and kernel).
fn device_message(e: DeviceError) -> String {
    match e {
        DeviceError::Build { message, .. } => message,
        other => other.to_string(),
    }
}

impl Jit {
    /// A JIT on `device`, with the program cache configured from the environment
    /// (`KILN_CACHE_PERSISTENT`, `KILN_PROGRAM_BUILD_OPTIONS`, ...: `kiln --help` lists
    /// them); a malformed setting is an [`Error::Device`].
    pub fn new(device: Device) -> Result<Jit, Error> {
        let config = Config::from_env().map_err(|e| Error::Device(e.to_string()))?;
        Jit::with_config(device, &config)
    }

    /// A JIT on `device` with settings given in code instead of the environment.
    ///
    /// ```
    /// let config = kiln::Config { build_options: "-O0".into(), ..kiln::Config::default() };
    /// let jit = kiln::Jit::with_config(kiln::Device::interp(), &config)?;
    /// # let _ = jit;
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn with_config(device: Device, config: &Config) -> Result<Jit, Error> {
        config.install();
        let ctx = Context::with_config(device.inner.clone(), config.context_config());
        let queue = Queue::new(&ctx, QueueOrder::InOrder);
        Ok(Jit { device, ctx, queue, options: String::new(), handles: Default::default() })
    }

    /// The same JIT, building kernels with these build options (as
    /// `KILN_PROGRAM_BUILD_OPTIONS` takes them, which still apply too): `-fsanitize=bounds`
    /// makes Vulkan and CUDA check every access, as the interpreter always does, so that a
    /// buffer too short for the launch is an error from [`Launch::wait`] rather than a
    /// wrong result. An unknown option is an [`Error::Build`] at the first launch.
    ///
    /// ```
    /// let jit = kiln::Jit::new(kiln::Device::interp())?.with_options("-fno-such-thing");
    /// let module = jit.compile_source("k.kir", "kernel k() { }")?;
    /// let err = jit.launch(&module, "k", kiln::NdRange::new(&[1]), kiln::args![]).unwrap_err();
    /// assert!(matches!(err, kiln::Error::Build { .. }), "{err}");
    /// assert!(err.to_string().contains("-fno-such-thing"), "{err}");
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn with_options(mut self, options: &str) -> Jit {
        self.options = options.to_string();
        // Kernels made with the old options are not these options' kernels.
        self.handles = Default::default();
        self
    }

    /// The device.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The runtime context, for what the facade does not cover (cache statistics, the
    /// persistent cache's warnings, other queues).
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Parses and verifies kiln source (`file` names it in messages). Every problem is a
    /// located diagnostic in [`Error::Source`].
    ///
    /// ```
    /// # let jit = kiln::Jit::new(kiln::Device::interp())?;
    /// let module = jit.compile_source("saxpy.kir", include_str!("../../examples/saxpy.kir"))?;
    /// assert!(module.kernel("saxpy").is_some());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn compile_source(&self, file: &str, src: &str) -> Result<Verified, Error> {
        check_source(file, src).map_err(Error::Source)
    }

    /// Fuses kernels of `module` as `spec` says (see docs/fusion.md; a TOML spec parses
    /// with [`FusionSpec::from_toml`]). An illegal fusion is an [`Error::Fusion`] naming the
    /// rule. The entries are separated by a work-group barrier only where a dependence
    /// needs one, by the rule queue fusion and command graphs apply
    /// ([`kiln_runtime::fusion::fuse_spec`]): the same list fuses into the same kernel
    /// whichever API fuses it.
    pub fn fuse(&self, module: &Verified, spec: &FusionSpec) -> Result<Fused, Error> {
        let fused = fuse_spec(module, spec).map_err(Error::Fusion)?;
        // The fusion pass verifies what it makes.
        let built = Verified::from_pass_output(Module::new(vec![fused.kernel.clone()]));
        Ok(Fused { fused, built, module: module.module().clone(), spec: spec.clone() })
    }

    /// A buffer holding a copy of `values`.
    ///
    /// ```
    /// # let jit = kiln::Jit::new(kiln::Device::interp())?;
    /// let h = jit.buffer_from(&[half::f16::from_f32(1.5); 3]);
    /// assert_eq!(h.read()?, vec![half::f16::from_f32(1.5); 3]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn buffer_from<T: Element>(&self, values: &[T]) -> Buffer<T> {
        Buffer::from_slice(values)
    }

    /// A buffer of `len` zeros.
    ///
    /// ```
    /// # let jit = kiln::Jit::new(kiln::Device::interp())?;
    /// let b = jit.buffer_zeroed::<u64>(5);
    /// assert_eq!(b.read()?, vec![0u64; 5]);
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn buffer_zeroed<T: Element>(&self, len: usize) -> Buffer<T> {
        Buffer::zeroed(len)
    }

    /// Launches kernel `name` of `module` over `range`, one argument per parameter in
    /// order. Arguments are checked first: a wrong count, a scalar for a pointer, a buffer or
    /// scalar of another type is an [`Error::Argument`] naming the kernel and parameter.
    /// Only that kernel is built (through the program cache); launching it again (the same
    /// module's kernel) takes the device kernel the Jit keeps, with no cache lookup.
    ///
    /// ```
    /// # let jit = kiln::Jit::new(kiln::Device::interp())?;
    /// let module = jit.compile_source("saxpy.kir", include_str!("../../examples/saxpy.kir"))?;
    /// let x = jit.buffer_from(&[1.0f32; 4]);
    /// let y = jit.buffer_zeroed::<f32>(4);
    /// let err = jit.launch(&module, "saxpy", kiln::NdRange::new(&[4]), kiln::args![&x, &y, 2.0f64, 4u32]);
    /// assert_eq!(
    ///     err.unwrap_err().to_string(),
    ///     "kernel `saxpy`: argument 2 (`a`) is a f32 but the value given is a f64"
    /// );
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn launch(
        &self,
        module: &Verified,
        name: &str,
        range: NdRange,
        args: Vec<Arg>,
    ) -> Result<Launch, Error> {
        let kernel = find_kernel(module, name)?;
        args::check_args(kernel, &args)?;
        let handle = self.handle_of(module, kernel)?;
        Ok(self.submit_handle(handle, name, range, &args))
    }

    /// The device kernel of `kernel` (of `module`): the one made for the same IR object
    /// before, else built through the caches and remembered.
    fn handle_of(&self, module: &Verified, kernel: &Kernel) -> Result<KernelHandle, Error> {
        let lock = || self.handles.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((_, h)) = lock().iter().find(|(k, _)| k.ptr_eq(kernel)) {
            return Ok(h.clone());
        }
        let h = self.kernel_handle(&only(module, kernel.name()))?;
        let mut hs = lock();
        if hs.len() >= HANDLES {
            hs.remove(0);
        }
        hs.push((kernel.clone(), h.clone()));
        Ok(h)
    }

    /// Launches a fused kernel with the arguments of the kernels it was fused from:
    /// `args[e]` holds one argument per parameter of entry `e` (the kernel
    /// `spec.kernels[e]`), exactly as for launching the originals one after another. The
    /// library binds them to the fused kernel's parameters ([`FusedKernel::bind_args`]):
    /// parameters fused as identical must be given the same buffer (or equal scalars),
    /// constants their value; promoted (internalized) buffers are neither read nor
    /// written. It runs over [`Fused::range`].
    ///
    /// ```
    /// # let jit = kiln::Jit::new(kiln::Device::interp())?;
    /// # let src = "kernel inc(b: ptr<global, i32>) { let i: u32 = global_id(0); b[i] = b[i] + 1; }";
    /// # let module = jit.compile_source("inc.kir", src)?;
    /// # let spec = kiln::FusionSpec {
    /// #     name: "inc2".into(),
    /// #     kernels: vec!["inc".into(), "inc".into()],
    /// #     ndranges: vec![kiln::RangeSpec::new(&[4]), kiln::RangeSpec::new(&[4])],
    /// #     identical: vec![vec![kiln::ParamRef::new(0, 0), kiln::ParamRef::new(1, 0)]],
    /// #     ..Default::default()
    /// # };
    /// let fused = jit.fuse(&module, &spec)?; // inc twice, on one buffer
    /// let b = jit.buffer_from(&[1i32, 2, 3, 4]);
    /// jit.launch_fused(&fused, &[kiln::args![&b], kiln::args![&b]])?.wait()?;
    /// assert_eq!(b.read()?, vec![3, 4, 5, 6]);
    /// // Two different buffers for parameters fused as one cannot be honoured.
    /// let other = jit.buffer_zeroed::<i32>(4);
    /// assert!(jit.launch_fused(&fused, &[kiln::args![&b], kiln::args![&other]]).is_err());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn launch_fused(&self, fused: &Fused, args: &[Vec<Arg>]) -> Result<Launch, Error> {
        // Checked against the originals first, so that messages name the parameter the
        // caller wrote the argument for.
        for (e, entry_args) in args.iter().enumerate() {
            if let Some(k) = fused.spec.kernels.get(e).and_then(|n| fused.module.kernel(n)) {
                args::check_args(k, entry_args)?;
            }
        }
        let bound = fused.fused.bind_args(&fused.module, &fused.spec, args).map_err(Error::Bind)?;
        args::check_args(&fused.fused.kernel, &bound)?;
        self.submit(&fused.built, fused.fused.range, &bound)
    }

    /// Builds kernel `name` of `module` for the device now (through the program cache, as
    /// the first [`Jit::launch`] of it would), so that launches after it only run: to time
    /// builds and launches apart, or to see build errors before any buffer is made.
    ///
    /// ```
    /// # let jit = kiln::Jit::new(kiln::Device::interp())?;
    /// let module = jit.compile_source("saxpy.kir", include_str!("../../examples/saxpy.kir"))?;
    /// jit.prepare(&module, "saxpy")?;
    /// assert!(jit.prepare(&module, "nope").is_err());
    /// # Ok::<(), kiln::Error>(())
    /// ```
    pub fn prepare(&self, module: &Verified, name: &str) -> Result<(), Error> {
        self.handle_of(module, find_kernel(module, name)?).map(|_| ())
    }

    /// The device's kernel for the one kernel of `module`, built through the caches. The
    /// module is verified already, so the build does not verify it again.
    fn kernel_handle(&self, module: &Verified) -> Result<KernelHandle, Error> {
        let name = module.kernels[0].name();
        let build =
            |e: DeviceError| Error::Build { kernel: name.to_string(), message: device_message(e) };
        let program = self.ctx.build_program(module, &[], &self.options).map_err(build)?;
        self.ctx.kernel(&program, name).map_err(build)
    }

    /// `module` (of one kernel) launched: built once, then submitted to the queue.
    fn submit(&self, module: &Verified, range: NdRange, args: &[Arg]) -> Result<Launch, Error> {
        let handle = self.kernel_handle(module)?;
        Ok(self.submit_handle(handle, module.kernels[0].name(), range, args))
    }

    /// `handle` (of kernel `name`) submitted to the queue.
    fn submit_handle(
        &self,
        handle: KernelHandle,
        name: &str,
        range: NdRange,
        args: &[Arg],
    ) -> Launch {
        // Each buffer argument's accessor is the launch's requirement.
        let event = self.queue.submit(|h| h.parallel_for(&handle, range, args.to_vec()));
        Launch { kernel: name.to_string(), event }
    }
}
