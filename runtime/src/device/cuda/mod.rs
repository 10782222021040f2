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
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Kernel, Scalar, Verified};

use crate::artifact;
use crate::device::memory::stage_ranges;
use crate::device::{
    handle_as, Device, DeviceKind, DeviceMemory, Handle, Memory, RecordStep, Recording,
    ResidentBuffer,
};
use crate::error::{panic_message, DeviceError};

/// How the CUDA device names itself in "unavailable" messages.
const UNAVAILABLE: &str = "CUDA";

// Recording command graphs as CUDA graphs.
mod graph;
// Device memory, parameter blocks and launch shapes.
mod launch;
// PTX, the launch blob and the cubin.
mod program;
// Tensor maps encoded per launch.
mod tmap;

use launch::{
    check_recorded_ranges, device_ptr, launch_shape, Params, EAGER_PARAMS, RANGE_ALIGN, RANGE_LIMIT,
};
pub use program::build_ptx_program;
use program::{check_dynamic_shared, optimized_ptx, parse_launch_blob, LaunchNeeds, LAUNCH_BLOB};

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
            if !k.maps.is_empty() {
                let (sig, cache) = (&k.signature, &k.map_cache);
                let lens = |b: usize| ptrs.get(b).map_or(0, |p| p.1 .1);
                let slot = |i: usize| params.slot(i);
                for a in tmap::addresses(self, cache, sig, &k.maps, args, slot, lens)? {
                    params.push(a);
                }
            }
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
    /// The tensor maps it takes (hidden parameters after the offsets), and their device
    /// copies.
    maps: Vec<tmap::MapSpec>,
    map_cache: tmap::MapCache,
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
        let maps = needs.map_or(Vec::new(), |l| l.maps.clone());
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
            maps,
            map_cache: tmap::MapCache::default(),
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
