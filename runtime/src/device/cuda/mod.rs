//! The CUDA device: runs kiln kernels on an NVIDIA GPU through the CUDA driver API.
//!
//! [`CudaDevice`](crate::device::cuda::CudaDevice) implements the runtime's [`Device`] trait, so it plugs
//! into a [`crate::Context`] and [`crate::Queue`] like the interpreter: [`Device::build`] optimizes
//! the module with the default `-O` pipeline (`-O0` in the build options skips it), lowers it to
//! PTX by [`kiln_backends::ptx`] for the device's own SM version, and has the driver's JIT linker
//! assemble that into a cubin. The program binary is the cubin (the PTX, should linking fail) plus
//! the kernels' signatures (see `artifact.rs`); it is what the persistent cache stores, so a hit
//! skips both kiln's compiler and the driver's. [`Device::load`] hands the image to
//! `cuModuleLoadData`, [`Device::kernel`] looks the function up, and [`Device::run`] launches it
//! over the nd-range with buffers copied in and out, shaped like the interpreter's
//! [`run`](kiln_ir::interp::run). Through a [`crate::Context`], buffers stay in device memory
//! between launches ([`Device::run_resident`]; copied back only when the host reads them), and
//! a command graph's device partitions become CUDA graphs ([`Device::record`]). The driver library (`libcuda.so`) is loaded at run time through
//! `cudarc`'s dynamic loading: on a machine without it,
//! [`CudaDevice::open`](crate::device::cuda::CudaDevice::open) returns [`DeviceError::Unavailable`], never
//! a panic, and nothing about CUDA is needed to build.
//!
//! ```no_run
//! use kiln_ir::launch::{Arg, Buffer, NdRange};
//! use kiln_runtime::device::cuda::CudaDevice;
//! use kiln_runtime::Device;
//! # let m = kiln_ir::parse_module("kernel k(x: ptr<global, f32>) { x[global_id(0)] = 1.0; }");
//! # let kernel = m.expect("parses").kernels[0].clone();
//! let dev = CudaDevice::open()?;
//! let mut bufs = vec![Buffer::from_slice(&[1.0f32; 64])];
//! dev.build_and_run(&kernel, &NdRange::new(&[64]), &[Arg::Buffer(0)], &mut bufs)?;
//! # Ok::<(), kiln_runtime::DeviceError>(())
//! ```

use std::ffi::{c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use cudarc::driver::{result, sys};
use kiln_backends::driver;
use kiln_backends::options::BuildOptions;
use kiln_backends::ptx::{Options, Ptx};
use kiln_backends::target::Target;
use kiln_ir::launch::{default_local_size, Arg, Buffer, NdRange};
use kiln_ir::{Kernel, Scalar, Type, Verified};

use crate::artifact;
use crate::device::memory::stage_ranges;
use crate::device::{
    handle_as, Device, DeviceKind, DeviceMemory, Handle, Memory, RecordStep, Recording,
    ResidentBuffer,
};
use crate::error::{panic_message, DeviceError};

/// How the CUDA device names itself in "unavailable" messages.
const UNAVAILABLE: &str = "CUDA";

mod graph;

fn unavailable(reason: impl Into<String>) -> DeviceError {
    DeviceError::Unavailable { device: UNAVAILABLE.into(), reason: reason.into() }
}

fn launch_err(m: impl std::fmt::Display) -> DeviceError {
    DeviceError::Launch(format!("CUDA launch: {m}"))
}

fn driver(what: &str) -> impl Fn(result::DriverError) -> DeviceError + '_ {
    move |e| DeviceError::Driver(format!("CUDA driver: {what}: {e:?}"))
}

/// Runs `f`, turning a panic inside cudarc (a symbol missing from an old driver) into an error.
fn guarded<T>(f: impl FnOnce() -> Result<T, DeviceError>) -> Result<T, DeviceError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = panic_message(&*p).unwrap_or_else(|| "panic in the CUDA driver bindings".into());
        Err(unavailable(msg))
    })
}

/// Device 0's primary context, retained while anything made in it (the device, a program,
/// a buffer's memory, a graph) lives.
#[derive(Debug)]
pub(crate) struct Primary {
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
}

// The context handle is used only after making it current on the calling thread.
unsafe impl Send for Primary {}
unsafe impl Sync for Primary {}

impl Primary {
    /// Makes the context current on the calling thread.
    pub(crate) fn current(&self) -> Result<(), DeviceError> {
        // SAFETY: the context is retained while `self` lives.
        unsafe { result::ctx::set_current(self.ctx) }.map_err(driver("cuCtxSetCurrent"))
    }
}

impl Drop for Primary {
    fn drop(&mut self) {
        // SAFETY: releases the retain taken when it was made.
        let _ = guarded(|| {
            let _ = unsafe { result::primary_ctx::release(self.dev) };
            Ok(())
        });
    }
}

/// The memory space of device 0's primary context: every [`CudaDevice`] shares it.
const CUDA_SPACE: u64 = u64::MAX;

/// An NVIDIA GPU (device 0) with its primary context.
#[derive(Debug)]
pub struct CudaDevice {
    primary: Arc<Primary>,
    name: String,
    sm: u32,
    driver_version: i32,
}

impl CudaDevice {
    /// Loads the CUDA driver and opens device 0; [`DeviceError::Unavailable`] when there is
    /// no driver library or no device.
    pub fn open() -> Result<CudaDevice, DeviceError> {
        // SAFETY: only checks whether the library can be loaded.
        if !guarded(|| Ok(unsafe { sys::is_culib_present() }))? {
            return Err(unavailable("the CUDA driver library (libcuda.so) could not be loaded"));
        }
        guarded(|| {
            let unavail = |e: result::DriverError| unavailable(format!("{e:?}"));
            result::init().map_err(unavail)?;
            if result::device::get_count().map_err(unavail)? < 1 {
                return Err(unavailable("no CUDA device"));
            }
            let dev = result::device::get(0).map_err(unavail)?;
            let name = result::device::get_name(dev).unwrap_or_default();
            // SAFETY: `dev` is a valid device; the attribute query has no other requirement.
            let (major, minor) = unsafe {
                use sys::CUdevice_attribute::*;
                (
                    result::device::get_attribute(
                        dev,
                        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                    )
                    .map_err(unavail)?,
                    result::device::get_attribute(
                        dev,
                        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                    )
                    .map_err(unavail)?,
                )
            };
            let mut driver_version = 0;
            // SAFETY: writes one int; an error leaves 0, which only weakens the cache key.
            let _ = unsafe { sys::cuDriverGetVersion(&mut driver_version) };
            // SAFETY: retaining the primary context of a valid device.
            let ctx = unsafe { result::primary_ctx::retain(dev) }.map_err(unavail)?;
            let primary = Arc::new(Primary { dev, ctx });
            Ok(CudaDevice { primary, name, sm: (major * 10 + minor) as u32, driver_version })
        })
    }

    /// The SM version (90 for an H100) that kernels are compiled for.
    pub fn sm(&self) -> u32 {
        self.sm
    }

    /// Lowers `module` to PTX for this device (the device code [`Device::build`] stores),
    /// without optimizing it.
    pub fn ptx(&self, module: &Verified) -> Result<String, DeviceError> {
        Ptx(Options::sm(self.sm)).emit(module).map_err(|e| DeviceError::build(&self.name, e))
    }

    /// Launches `k` on resident buffers on the context's null stream and returns: later
    /// launches, graph replays and the synchronous copies of uploads and downloads run after
    /// it on that stream, and [`Device::finish`] waits for it (errors of the kernel's
    /// execution surface there, or at the next synchronous call).
    fn launch(
        &self,
        k: &CudaKernel,
        (grid, block): ([u32; 3], [u32; 3]),
        range: &NdRange,
        args: &[Arg],
        buffers: &[ResidentBuffer],
    ) -> Result<(), DeviceError> {
        // At most this many buffers are looked at on the stack (more take a vector).
        const ON_STACK: usize = 16;
        let mut ptrs = [(0, (Scalar::U8, 0)); ON_STACK];
        let many: Vec<(sys::CUdeviceptr, (Scalar, usize))>;
        let ptrs = if buffers.len() <= ON_STACK {
            for (p, b) in ptrs.iter_mut().zip(buffers) {
                *p = (device_ptr(b)?, (b.elem, b.len));
            }
            &ptrs[..buffers.len()]
        } else {
            many = buffers
                .iter()
                .map(|b| Ok((device_ptr(b)?, (b.elem, b.len))))
                .collect::<Result<_, DeviceError>>()?;
            &many[..]
        };
        EAGER_PARAMS.with_borrow_mut(|params| {
            params.fill(&k.signature, args, ptrs, range)?;
            // SAFETY: the context is retained by `self`; `k.func` belongs to a module the
            // kernel handle keeps loaded (unloading it synchronizes first); the parameters
            // point into `params`, which outlives the call: `cuLaunchKernel` copies them.
            unsafe {
                self.primary.current()?;
                result::launch_kernel(
                    k.func,
                    (grid[0], grid[1], grid[2]),
                    (block[0], block[1], block[2]),
                    k.shared,
                    std::ptr::null_mut(),
                    params.pointers(),
                )
                .map_err(driver("cuLaunchKernel"))
            }
        })
    }

    /// Waits for the work on the context's null stream, at most `timeout`: `false` if some
    /// is still running then.
    fn wait_stream(&self, timeout: Option<std::time::Duration>) -> Result<bool, DeviceError> {
        let Some(timeout) = timeout else {
            self.primary.current()?;
            return result::ctx::synchronize().map(|()| true).map_err(driver("kernel execution"));
        };
        let deadline = std::time::Instant::now() + timeout;
        loop {
            // SAFETY: as above; the null stream is the context's own.
            let r = unsafe {
                self.primary.current()?;
                sys::cuStreamQuery(std::ptr::null_mut())
            };
            match r {
                sys::CUresult::CUDA_SUCCESS => return Ok(true),
                sys::CUresult::CUDA_ERROR_NOT_READY => {}
                e => return Err(driver("kernel execution")(result::DriverError(e))),
            }
            if std::time::Instant::now() >= deadline {
                return Ok(false);
            }
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
    }
}

/// The program binary [`CudaDevice`]'s [`Device::build`] makes for an `sm_<sm>` GPU before
/// the driver assembles it: the module built by the build driver for the PTX target, with
/// the kernels' signatures. Needs no GPU or driver (benchmarks and tools use it to build
/// what the device would).
pub fn build_ptx_program(
    module: &Verified,
    options: &BuildOptions,
    sm: u32,
) -> Result<Vec<u8>, DeviceError> {
    let (kernels, ptx, launch) = optimized_ptx(module, options, sm)?;
    Ok(artifact::encode(&kernels, &[("ptx".into(), ptx.into_bytes()), launch]))
}

/// The optimized module's kernels (signatures), its PTX, and the blob of what each kernel's
/// launch needs (see [`launch_blob`]). From sm_90 on, every kernel first waits for the grids
/// it depends on ([`with_grid_dependency`]), so that a CUDA graph may launch it early.
fn optimized_ptx(
    module: &Verified,
    options: &BuildOptions,
    sm: u32,
) -> Result<(Vec<Kernel>, String, Blob), DeviceError> {
    let opts = Options::sm(sm);
    let built = driver::build_verified(&Ptx(opts), module.clone(), options)
        .map_err(|e| DeviceError::build(format!("cuda sm_{sm}"), e))?;
    // Tensor maps are hidden parameters the host encodes (docs/matrix.md); kiln's CUDA
    // launches pass none yet, so such kernels are refused by name rather than launched short.
    let map_of = |k: &Kernel| format!("// kiln.tensor_map {} ", k.name());
    if let Some(k) = built.kernels.kernels.iter().find(|k| built.output.contains(&map_of(k))) {
        return Err(DeviceError::build(
            format!("cuda sm_{sm}"),
            format!(
                "kernel `{}` reads tensors with `tma_load`, whose tensor maps kiln's CUDA \
                 launches do not encode yet (launch it from a script, as \
                 benches/gpu/tc90_gemm.py does)",
                k.name()
            ),
        ));
    }
    let waits = sm >= 90 && opts.version() >= (7, 8);
    let launch = launch_blob(&built.kernels.kernels, waits);
    let ptx = if waits { with_grid_dependency(&built.output) } else { built.output };
    Ok((built.kernels.into_module().kernels, ptx, launch))
}

/// `ptx` with every kernel starting by waiting for the grids it depends on to have finished
/// and their writes to be visible (`griddepcontrol.wait`), then letting the grids that
/// depend on it be launched (`griddepcontrol.launch_dependents`). Launched in order, as
/// eagerly, the wait returns at once; a CUDA graph's programmatic edge into such a kernel
/// lets the driver launch it while its producer still runs, and the wait keeps every read
/// after the producer's writes. Triggering only after the wait keeps at most one grid of a
/// chain waiting ahead. The instructions go first in each entry's body (PTX declares
/// registers anywhere before their use).
fn with_grid_dependency(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len() + 128);
    let mut in_entry = false;
    for line in ptx.split_inclusive('\n') {
        out.push_str(line);
        if line.starts_with(".visible .entry ") {
            in_entry = true;
        } else if in_entry && line.trim_end() == "{" {
            out.push_str("\tgriddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;\n");
            in_entry = false;
        }
    }
    out
}

/// The name of the program binary's blob that says what each kernel's launch needs: one
/// line `<kernel> <bytes of dynamic shared memory> <waits: 1 or 0>` per kernel (the
/// signatures the binary keeps have no bodies to measure again at load).
const LAUNCH_BLOB: &str = "launch";

/// A named blob of a program binary.
type Blob = (String, Vec<u8>);

/// What a kernel's launch needs, from the [`LAUNCH_BLOB`].
#[derive(Clone, Debug, PartialEq, Eq)]
struct LaunchNeeds {
    name: String,
    /// Bytes of dynamic shared memory (the PTX backend's window; 0: none).
    shared: u32,
    /// Whether the kernel waits for the grids it depends on first
    /// ([`with_grid_dependency`]), so that it may be launched before they finish.
    waits: bool,
}

/// The [`LAUNCH_BLOB`] of `kernels`, as the PTX backend sizes their windows.
fn launch_blob(kernels: &[Kernel], waits: bool) -> Blob {
    let mut text = String::new();
    for k in kernels {
        let bytes = kiln_backends::ptx::dynamic_shared_bytes(k);
        text.push_str(&format!("{} {bytes} {}\n", k.name(), u8::from(waits)));
    }
    (LAUNCH_BLOB.into(), text.into_bytes())
}

/// Reads a [`LAUNCH_BLOB`] back.
fn parse_launch_blob(blob: &[u8]) -> Result<Vec<LaunchNeeds>, String> {
    let text = std::str::from_utf8(blob).map_err(|e| format!("{LAUNCH_BLOB}: {e}"))?;
    text.lines()
        .map(|l| {
            let bad = || format!("{LAUNCH_BLOB}: bad line `{l}`");
            let mut w = l.split(' ');
            let (Some(name), Some(shared), Some(waits), None) =
                (w.next(), w.next(), w.next(), w.next())
            else {
                return Err(bad());
            };
            let shared = shared.parse().map_err(|_| bad())?;
            let waits = match waits {
                "0" => false,
                "1" => true,
                _ => return Err(bad()),
            };
            Ok(LaunchNeeds { name: name.to_string(), shared, waits })
        })
        .collect()
}

/// Checks that kernel `name`, with `static_bytes` of static shared memory, may have `dynamic`
/// bytes of dynamic shared memory on a device whose work-groups may opt in to `opt_in`
/// bytes in all (`cudaDevAttrMaxSharedMemoryPerBlockOptin`).
fn check_dynamic_shared(
    name: &str,
    dynamic: u32,
    static_bytes: u32,
    opt_in: u32,
) -> Result<(), DeviceError> {
    if u64::from(dynamic) + u64::from(static_bytes) > u64::from(opt_in) {
        return Err(launch_err(format!(
            "kernel `{name}` needs {dynamic} bytes of dynamic shared memory (and {static_bytes} \
             static), past the {opt_in} bytes a work-group of this device may use"
        )));
    }
    Ok(())
}

impl CudaDevice {
    /// Assembles `ptx` into a cubin for this device with the driver's JIT linker, so that
    /// loading the program later (from the persistent cache, in another process) loads
    /// machine code instead of assembling PTX again.
    fn cubin(&self, ptx: &str) -> Result<Vec<u8>, DeviceError> {
        let ptx = CString::new(ptx)
            .map_err(|e| DeviceError::Driver(format!("CUDA: PTX holds a NUL byte: {e}")))?;
        guarded(|| {
            // SAFETY: the context is alive with `self`; the link state is created, used and
            // destroyed here; the PTX image is NUL-terminated and its size includes the NUL;
            // the cubin belongs to the link state, so it is copied before the state goes.
            unsafe {
                self.primary.current()?;
                let null = std::ptr::null_mut();
                let mut state: sys::CUlinkState = std::ptr::null_mut();
                sys::cuLinkCreate_v2(0, null as _, null as _, &mut state)
                    .result()
                    .map_err(driver("cuLinkCreate"))?;
                let out = (|| {
                    let bytes = ptx.as_bytes_with_nul();
                    sys::cuLinkAddData_v2(
                        state,
                        sys::CUjitInputType::CU_JIT_INPUT_PTX,
                        bytes.as_ptr() as *mut c_void,
                        bytes.len(),
                        c"kiln.ptx".as_ptr(),
                        0,
                        null as _,
                        null as _,
                    )
                    .result()
                    .map_err(driver("cuLinkAddData"))?;
                    let (mut cubin, mut size): (*mut c_void, usize) = (null, 0);
                    sys::cuLinkComplete(state, &mut cubin, &mut size)
                        .result()
                        .map_err(driver("cuLinkComplete"))?;
                    if cubin.is_null() || size == 0 {
                        return Err(DeviceError::Driver("CUDA driver: empty cubin".into()));
                    }
                    Ok(std::slice::from_raw_parts(cubin as *const u8, size).to_vec())
                })();
                let _ = sys::cuLinkDestroy(state);
                out
            }
        })
    }
}

/// A loaded module (from a cubin or PTX) and the signatures of its kernels.
struct CudaProgram {
    module: sys::CUmodule,
    primary: Arc<Primary>,
    signatures: Vec<Kernel>,
    /// What each kernel's launch needs.
    launch: Vec<LaunchNeeds>,
}

// The module handle is used only with its context made current on the calling thread.
unsafe impl Send for CudaProgram {}
unsafe impl Sync for CudaProgram {}

impl Drop for CudaProgram {
    fn drop(&mut self) {
        let _ = guarded(|| {
            // SAFETY: unloads the module loaded in `load`, with its context current, once
            // launches in flight (which may use its functions) have finished; if the context
            // is gone, the calls fail harmlessly.
            unsafe {
                let _ = self.primary.current();
                let _ = result::ctx::synchronize();
                let _ = result::module::unload(self.module);
            }
            Ok(())
        });
    }
}

/// A kernel of a loaded program: its function and signature. Holds the program, so the
/// module stays loaded while the kernel can be launched.
struct CudaKernel {
    _program: Handle,
    func: sys::CUfunction,
    signature: Kernel,
    /// Bytes of dynamic shared memory each launch passes (`sharedMemBytes`).
    shared: u32,
    /// Whether the kernel waits for the grids it depends on first: a CUDA graph may then
    /// give its edges from other kernels the programmatic type.
    waits: bool,
}

// The function handle is used only with its context made current on the calling thread.
unsafe impl Send for CudaKernel {}
unsafe impl Sync for CudaKernel {}

impl Device for CudaDevice {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn kind(&self) -> DeviceKind {
        DeviceKind::Cuda
    }

    /// The SM version and the driver's version: both change the code the driver runs.
    fn version(&self) -> String {
        format!("sm_{} driver {}", self.sm, self.driver_version)
    }

    /// PTX assembled by the driver into a cubin (the binary the persistent cache keeps);
    /// should the driver's linker fail, the PTX itself, which `load` assembles.
    fn build(&self, module: &Verified, options: &BuildOptions) -> Result<Vec<u8>, DeviceError> {
        let (kernels, ptx, launch) = optimized_ptx(module, options, self.sm)?;
        let blob = match self.cubin(&ptx) {
            Ok(cubin) => ("cubin".to_string(), cubin),
            Err(e) => {
                tracing::warn!("kiln: keeping PTX, the driver could not link it: {e}");
                ("ptx".to_string(), ptx.into_bytes())
            }
        };
        Ok(artifact::encode(&kernels, &[blob, launch]))
    }

    fn load(&self, binary: &[u8]) -> Result<Handle, DeviceError> {
        let load_err = |message: String| DeviceError::Load { device: self.name.clone(), message };
        let a = artifact::decode(&self.name, binary)?;
        // A cubin is machine code as is; PTX is handed over NUL-terminated.
        let (code, launch) = match a.blobs.as_slice() {
            [code, (kind, launch)] if kind == LAUNCH_BLOB => {
                (code, parse_launch_blob(launch).map_err(load_err)?)
            }
            _ => return Err(load_err(format!("expected a cubin or PTX blob and {LAUNCH_BLOB}"))),
        };
        let image = match code {
            (kind, cubin) if kind == "cubin" => cubin.clone(),
            (kind, ptx) if kind == "ptx" => CString::new(ptx.clone())
                .map_err(|e| load_err(e.to_string()))?
                .into_bytes_with_nul(),
            _ => return Err(load_err("expected one cubin or PTX blob".into())),
        };
        let module = guarded(|| {
            // SAFETY: the context is alive with `self`; the image is a complete cubin or a
            // NUL-terminated PTX string, and outlives the call.
            unsafe {
                self.primary.current()?;
                result::module::load_data(image.as_ptr() as *const c_void)
                    .map_err(driver("cuModuleLoadData"))
            }
        })?;
        Ok(Arc::new(CudaProgram {
            module,
            primary: self.primary.clone(),
            signatures: a.signatures,
            launch,
        }))
    }

    fn kernel(&self, program: &Handle, name: &str) -> Result<Handle, DeviceError> {
        let p = handle_as::<CudaProgram>(program, "program")?;
        let Some(sig) = p.signatures.iter().find(|k| k.name() == name) else {
            return Err(DeviceError::no_kernel(name, p.signatures.iter().map(|k| k.name())));
        };
        let cname = CString::new(name).map_err(launch_err)?;
        let needs = p.launch.iter().find(|l| l.name == name);
        let (shared, waits) = needs.map_or((0, false), |l| (l.shared, l.waits));
        let func = guarded(|| {
            // SAFETY: the module is loaded (held by `p`), its context made current first;
            // the attribute calls take the function just looked up.
            unsafe {
                p.primary.current()?;
                let func = result::module::get_function(p.module, cname)
                    .map_err(driver("cuModuleGetFunction"))?;
                if shared > 0 {
                    use sys::CUfunction_attribute::*;
                    let opt_in = result::device::get_attribute(
                        self.primary.dev,
                        sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                    )
                    .map_err(driver("cuDeviceGetAttribute"))?;
                    let static_bytes = result::function::get_function_attribute(
                        func,
                        CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
                    )
                    .map_err(driver("cuFuncGetAttribute"))?;
                    check_dynamic_shared(name, shared, static_bytes as u32, opt_in as u32)?;
                    result::function::set_function_attribute(
                        func,
                        CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        shared as i32,
                    )
                    .map_err(driver("cuFuncSetAttribute"))?;
                }
                Ok(func)
            }
        })?;
        Ok(Arc::new(CudaKernel {
            _program: program.clone(),
            func,
            signature: sig.clone(),
            shared,
            waits,
        }))
    }

    /// Runs the kernel like the interpreter's `run`: `args` has one entry per parameter,
    /// pointer parameters naming entries of `buffers`, which are copied to the device, and
    /// back when the kernel has finished. Without a local size, the kernel's
    /// `#reqd_work_group_size` or the interpreter's default is used.
    fn run(
        &self,
        kernel: &Handle,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
    ) -> Result<(), DeviceError> {
        let k = handle_as::<CudaKernel>(kernel, "kernel")?;
        let shape = launch_shape(&k.signature, range)?;
        if shape.0.contains(&0) {
            return Ok(()); // an empty nd-range runs nothing
        }
        // The arguments are checked before anything is allocated on the device.
        let bufs: Vec<_> = buffers.iter().map(|b| (0, (b.elem(), b.len()))).collect();
        Params::default().fill(&k.signature, args, &bufs, range)?;
        let mut resident = Vec::with_capacity(buffers.len());
        for b in buffers.iter() {
            let m = guarded(|| self.alloc_mem(b.as_bytes().len().max(1)))?;
            if !b.is_empty() {
                m.upload(b.as_bytes())?;
            }
            resident.push(ResidentBuffer { mem: Arc::new(m), elem: b.elem(), len: b.len() });
        }
        self.run_resident(kernel, range, args, &resident)?;
        for (b, r) in buffers.iter_mut().zip(&resident) {
            if !b.is_empty() {
                r.mem.download(b.as_bytes_mut())?;
            }
        }
        Ok(())
    }

    /// Every CUDA device of this process shares device 0's primary context.
    fn memory_space(&self) -> Option<u64> {
        Some(CUDA_SPACE)
    }

    fn alloc(&self, bytes: usize) -> Result<Memory, DeviceError> {
        Ok(Arc::new(guarded(|| self.alloc_mem(bytes))?))
    }

    /// Runs the kernel on buffers in device memory, in place; returns once it is launched
    /// (see [`Device::finish`]).
    fn run_resident(
        &self,
        kernel: &Handle,
        range: &NdRange,
        args: &[Arg],
        buffers: &[ResidentBuffer],
    ) -> Result<(), DeviceError> {
        let k = handle_as::<CudaKernel>(kernel, "kernel")?;
        let shape = launch_shape(&k.signature, range)?;
        if shape.0.contains(&0) {
            return Ok(());
        }
        // A range whose start is not 16-byte aligned runs from memory of its own: the
        // kernel's vector accesses (`ld.global.v4`) need aligned addresses.
        let staged = stage_ranges(args, buffers, RANGE_ALIGN, RANGE_LIMIT, |bytes| {
            Ok(Arc::new(guarded(|| self.alloc_mem(bytes.max(1)))?) as Memory)
        })?;
        let (args, buffers) = match &staged {
            Some(s) => (&s.args[..], &s.buffers[..]),
            None => (args, buffers),
        };
        guarded(|| self.launch(k, shape, range, args, buffers))?;
        match staged {
            Some(s) => s.copy_back(),
            None => Ok(()),
        }
    }

    /// A CUDA graph of the steps (kernel, memcpy and memset nodes) with edges from their
    /// `after` lists, instantiated once; a replay is one `cuGraphLaunch`.
    fn record(&self, steps: &[RecordStep]) -> Result<Option<Box<dyn Recording>>, DeviceError> {
        graph::record(self, steps).map(|g| Some(Box::new(g) as Box<dyn Recording>))
    }

    /// Waits for every launch and graph replay on the context's null stream.
    fn finish(&self, timeout: Option<std::time::Duration>) -> Result<bool, DeviceError> {
        guarded(|| self.wait_stream(timeout))
    }
}

impl CudaDevice {
    fn alloc_mem(&self, bytes: usize) -> Result<CudaMem, DeviceError> {
        // SAFETY: allocation in the retained context, made current first.
        unsafe {
            self.primary.current()?;
            let ptr = result::malloc_sync(bytes).map_err(driver("cuMemAlloc"))?;
            Ok(CudaMem { ptr, bytes, primary: self.primary.clone() })
        }
    }
}

/// A buffer's storage in device memory.
struct CudaMem {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    primary: Arc<Primary>,
}

impl DeviceMemory for CudaMem {
    fn bytes(&self) -> usize {
        self.bytes
    }
    fn upload(&self, data: &[u8]) -> Result<(), DeviceError> {
        let n = data.len().min(self.bytes);
        guarded(|| {
            // SAFETY: `ptr` holds `bytes` bytes in the retained context; at most that many
            // are copied; the synchronous copy finishes before `data` can go.
            unsafe {
                self.primary.current()?;
                result::memcpy_htod_sync(self.ptr, &data[..n]).map_err(driver("cuMemcpyHtoD"))
            }
        })
    }
    fn download(&self, out: &mut [u8]) -> Result<(), DeviceError> {
        let n = out.len().min(self.bytes);
        guarded(|| {
            // SAFETY: as in `upload`, the other way.
            unsafe {
                self.primary.current()?;
                result::memcpy_dtoh_sync(&mut out[..n], self.ptr).map_err(driver("cuMemcpyDtoH"))
            }
        })
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Drop for CudaMem {
    fn drop(&mut self) {
        let _ = guarded(|| {
            // SAFETY: frees the allocation of `alloc_mem` in its (still retained) context once
            // launches in flight have finished (recordings hold their memory).
            unsafe {
                let _ = self.primary.current();
                let _ = result::ctx::synchronize();
                let _ = result::free_sync(self.ptr);
            }
            Ok(())
        });
    }
}

/// The alignment, in bytes, of a ranged argument's start that a launch binds in place:
/// kiln's PTX keeps vector loads and stores whole (`ld.global.v4`), which need it.
const RANGE_ALIGN: u64 = 16;
/// [`RANGE_ALIGN`] in errors.
const RANGE_LIMIT: &str = "the 16 bytes CUDA's vector loads and stores need";

/// Checks that no ranged argument of a recorded launch starts off [`RANGE_ALIGN`] (a CUDA
/// graph's kernel node cannot stage it).
fn check_recorded_ranges(args: &[Arg], buffers: &[ResidentBuffer]) -> Result<(), DeviceError> {
    for (n, a) in args.iter().enumerate() {
        if let Arg::Range { buffer, offset, len: 1.. } = *a {
            let at = buffers.get(buffer).map_or(0, |b| offset * b.elem.size_bytes()) as u64;
            if !at.is_multiple_of(RANGE_ALIGN) {
                return Err(launch_err(format!(
                    "argument {n} binds elements from offset {offset} of buffer {buffer}, byte \
                     {at}, which is not a multiple of {RANGE_LIMIT}; a CUDA graph cannot stage \
                     it (an eager launch does)"
                )));
            }
        }
    }
    Ok(())
}

/// The device pointer of a resident buffer, which must be this device's memory and hold
/// what it claims to.
fn device_ptr(b: &ResidentBuffer) -> Result<sys::CUdeviceptr, DeviceError> {
    match b.mem.as_any().downcast_ref::<CudaMem>() {
        Some(m) if m.bytes >= b.len * b.elem.size_bytes() => Ok(m.ptr),
        Some(_) => Err(launch_err("a buffer's device memory is smaller than the buffer")),
        None => Err(launch_err("a buffer's memory belongs to another device")),
    }
}

/// A launch's kernel parameters, owned until the launch (or graph node) has taken them: one
/// 8-byte slot per parameter, in order (a scalar's bits, little-endian, or a buffer's device
/// pointer, advanced to its range's first element for an [`Arg::Range`]), then the three
/// global offsets (kiln's PTX takes them last), and the `void*` array pointing at the slots.
/// An eager launch fills the calling thread's one [`Params`] again, so a launch allocates
/// nothing once the thread has launched a kernel with as many parameters.
#[derive(Default)]
struct Params {
    slots: Vec<u64>,
    pointers: Vec<*mut c_void>,
}

thread_local! {
    /// The parameters of this thread's eager launches, reused.
    static EAGER_PARAMS: std::cell::RefCell<Params> = std::cell::RefCell::default();
}

impl Params {
    /// Checks every argument against its parameter (`bufs` gives each buffer's device
    /// pointer, element type and length; a ranged argument must lie within its buffer) and
    /// fills the slots, the offsets `range`'s.
    fn fill(
        &mut self,
        sig: &Kernel,
        args: &[Arg],
        bufs: &[(sys::CUdeviceptr, (Scalar, usize))],
        range: &NdRange,
    ) -> Result<(), DeviceError> {
        let params = sig.params();
        if args.len() != params.len() {
            return Err(launch_err(format!(
                "kernel `{}` has {} parameters, {} arguments given",
                sig.name(),
                params.len(),
                args.len()
            )));
        }
        self.slots.clear();
        for (n, (p, a)) in params.iter().zip(args).enumerate() {
            let slot = match (p.ty(), a) {
                (Type::Scalar(s), Arg::Scalar(v)) if v.scalar() == s => v.to_bits(),
                (Type::Ptr(_, elem), Arg::Buffer(i) | Arg::Range { buffer: i, .. }) => {
                    match bufs.get(*i) {
                        Some(&(ptr, (e, len))) if e == elem => {
                            kiln_ir::launch::check_range(n, p.name(), a, len)
                                .map_err(launch_err)?;
                            match *a {
                                Arg::Range { offset, .. } => ptr + (offset * e.size_bytes()) as u64,
                                _ => ptr,
                            }
                        }
                        Some((_, (e, _))) => {
                            return Err(launch_err(format!(
                                "parameter `{}` points to {elem}, buffer {i} holds {e}",
                                p.name()
                            )))
                        }
                        _ => return Err(launch_err(format!("no buffer {i}"))),
                    }
                }
                _ => {
                    return Err(launch_err(format!(
                        "argument for `{}: {}` is of the wrong kind or type",
                        p.name(),
                        p.ty()
                    )))
                }
            };
            self.slots.push(slot);
        }
        self.slots.extend(range.offset.iter().map(|&o| u64::from(o)));
        Ok(())
    }

    /// The `void*` array `cuLaunchKernel` takes: one pointer per slot. Points into `self`,
    /// which must outlive its use and not change meanwhile.
    fn pointers(&mut self) -> &mut Vec<*mut c_void> {
        self.pointers.clear();
        self.pointers.extend(self.slots.iter_mut().map(|s| s as *mut u64 as *mut c_void));
        &mut self.pointers
    }
}

/// Grid and block sizes for a launch, with the interpreter's rules for the local size.
fn launch_shape(kernel: &Kernel, range: &NdRange) -> Result<([u32; 3], [u32; 3]), DeviceError> {
    if !(1..=3).contains(&range.dims) {
        return Err(launch_err(format!("{} dimensions (1 to 3)", range.dims)));
    }
    let local = range
        .local
        .or(kernel.attrs().reqd_work_group_size)
        .unwrap_or_else(|| default_local_size(range.global));
    let mut grid = [1; 3];
    for d in 0..3 {
        if range.global[d].checked_rem(local[d]) != Some(0) {
            return Err(launch_err(format!(
                "global size {} is not a multiple of local size {} in dimension {d}",
                range.global[d], local[d]
            )));
        }
        grid[d] = range.global[d] / local[d];
    }
    if local.iter().map(|&l| l as u64).product::<u64>() > 1024 {
        return Err(launch_err(format!("work-group of {local:?} exceeds 1024 items")));
    }
    let name = kernel.name();
    for d in 0..3 {
        // The interpreter's rule: ids are u32 (the offset is added to them on the device).
        if d < range.dims && range.offset[d] as u64 + range.global[d] as u64 > 1 << 32 {
            return Err(launch_err(format!(
                "kernel `{name}`: global offset {} + global size {} in dimension {d} \
                 overflows the u32 ids",
                range.offset[d], range.global[d]
            )));
        }
        if local[d] > MAX_BLOCK[d] {
            return Err(launch_err(format!(
                "kernel `{name}`: local size {} in dimension {d} exceeds CUDA's block limit \
                 of {} (maxThreadsDim)",
                local[d], MAX_BLOCK[d]
            )));
        }
        if grid[d] > MAX_GRID[d] {
            return Err(launch_err(format!(
                "kernel `{name}`: {} work-groups in dimension {d} exceed CUDA's grid limit \
                 of {} (maxGridSize)",
                grid[d], MAX_GRID[d]
            )));
        }
    }
    Ok((grid, local))
}

/// CUDA's block size limits per dimension (every architecture kiln targets, sm_70+).
const MAX_BLOCK: [u32; 3] = [1024, 1024, 64];

/// CUDA's grid size limits per dimension (sm_70+).
const MAX_GRID: [u32; 3] = [(1 << 31) - 1, 65535, 65535];

#[cfg(test)]
mod tests {
    use super::*;

    fn shape_err(src: &str, range: NdRange) -> String {
        let k = kiln_ir::parse_module(src).unwrap().kernels.remove(0);
        launch_shape(&k, &range).unwrap_err().to_string()
    }

    const K: &str = "kernel k(out: ptr<global, u32>) { out[0] = 1; }";

    /// Issue 12: CUDA launches past the block and grid limits are refused by name.
    #[test]
    fn cuda_launch_limits_are_refused_by_name() {
        let e = shape_err(K, NdRange::new(&[1, 1, 128]).with_local(&[1, 1, 128]));
        assert!(e.contains("block limit of 64") && e.contains("`k`"), "{e}");
        let e = shape_err(K, NdRange::new(&[1, 65536 * 2]).with_local(&[1, 1]));
        assert!(e.contains("131072 work-groups in dimension 1") && e.contains("65535"), "{e}");
        let e = shape_err(K, NdRange::new(&[u32::MAX]).with_local(&[1]));
        assert!(e.contains("grid limit of 2147483647"), "{e}");
        let k = kiln_ir::parse_module(K).unwrap().kernels.remove(0);
        let ok = NdRange::new(&[1 << 20, 65535]).with_local(&[1024, 1]);
        assert_eq!(launch_shape(&k, &ok).unwrap(), ([1024, 65535, 1], [1024, 1, 1]));
    }

    /// Issue 12: the CUDA device refuses `offset + global` past the u32 ids, as the
    /// interpreter does.
    #[test]
    fn cuda_offset_plus_global_overflow_is_refused() {
        let e = shape_err(K, NdRange::new(&[64]).with_offset(&[u32::MAX - 10]));
        assert!(e.contains("overflows the u32 ids"), "{e}");
    }

    /// Issue 27: the dynamic shared memory a kernel needs travels in the program binary
    /// (the signatures have no bodies), and a window past the device's opt-in limit is
    /// refused naming the kernel and both sizes.
    #[test]
    fn dynamic_shared_memory_is_recorded_and_checked_against_the_opt_in_limit() {
        let m = kiln_ir::parse_module(
            "kernel big(o: ptr<global, f32>) { local t: f32[16384]; t[0] = 1.0; \
             barrier(local); o[0] = t[16383]; }\n\
             kernel small(o: ptr<global, f32>) { o[0] = 1.0; }",
        )
        .unwrap();
        let (name, blob) = launch_blob(&m.kernels, true);
        assert_eq!(name, LAUNCH_BLOB);
        let need = |name: &str, shared| LaunchNeeds { name: name.into(), shared, waits: true };
        assert_eq!(parse_launch_blob(&blob).unwrap(), vec![need("big", 65536), need("small", 0)]);
        for bad in ["big lots 1", "big 4 2", "big 4", "big 4 1 x"] {
            assert!(parse_launch_blob(bad.as_bytes()).unwrap_err().contains("bad line"), "{bad}");
        }
        check_dynamic_shared("big", 65536, 0, 232448).unwrap();
        // An sm_80 work-group may use 163 KiB.
        let e = check_dynamic_shared("big", 160 * 1024, 4096, 163 * 1024).unwrap_err();
        let e = e.to_string();
        assert!(e.contains("`big`") && e.contains("163840") && e.contains("166912"), "{e}");
    }

    /// Issue 25: from sm_90 on, every kernel's body starts by waiting for the grids it
    /// depends on, then releasing its dependents (what lets a CUDA graph's programmatic
    /// edges launch it early); sm_80 PTX has no such instruction. ptxas must accept it.
    #[test]
    fn sm_90_kernels_wait_for_their_prerequisite_grids_first() {
        let m = Verified::new(
            kiln_ir::parse_module(
                "kernel a(o: ptr<global, u32>) { o[global_id(0)] = 1; }\n\
                 kernel b(o: ptr<global, u32>) { let i: u32 = global_id(0); o[i] = o[i] + 1; }",
            )
            .unwrap(),
        )
        .unwrap();
        let (_, ptx, launch) = optimized_ptx(&m, &BuildOptions::default(), 90).unwrap();
        let prologue = "{\n\tgriddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;\n";
        assert_eq!(ptx.matches(prologue).count(), 2, "{ptx}");
        assert_eq!(ptx.matches("griddepcontrol").count(), 4, "{ptx}");
        assert!(parse_launch_blob(&launch.1).unwrap().iter().all(|l| l.waits));
        if let Some(ptxas) = kiln_ir::testing::tool("KILN_PTXAS") {
            let dir = std::env::temp_dir().join(format!("kiln_pdl_{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let (src, out) = (dir.join("k.ptx"), dir.join("k.cubin"));
            std::fs::write(&src, &ptx).unwrap();
            let run = std::process::Command::new(ptxas)
                .arg("-arch=sm_90")
                .arg(&src)
                .arg("-o")
                .arg(&out)
                .output()
                .unwrap();
            let _ = std::fs::remove_dir_all(&dir);
            let err = String::from_utf8_lossy(&run.stderr);
            assert!(run.status.success(), "ptxas: {err}\n{ptx}");
        }
        let (_, ptx, launch) = optimized_ptx(&m, &BuildOptions::default(), 80).unwrap();
        assert!(!ptx.contains("griddepcontrol"), "{ptx}");
        assert!(parse_launch_blob(&launch.1).unwrap().iter().all(|l| !l.waits));
    }
}
