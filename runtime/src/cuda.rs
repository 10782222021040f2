//! The CUDA device: runs kiln kernels on an NVIDIA GPU through the CUDA driver API.
//!
//! Kernels are lowered to PTX by [`kiln_backends::ptx`] for the device's own SM version, loaded
//! with `cuModuleLoadData` (the driver JIT-assembles the PTX), and launched over the nd-range
//! with buffers copied in and out, shaped like the interpreter's
//! [`run`](kiln_ir::interp::run). The driver library (`libcuda.so`) is loaded at run time
//! through `cudarc`'s dynamic loading: on a machine without it, [`CudaDevice::open`] returns
//! [`CudaError::Unavailable`], never a panic, and nothing about CUDA is needed to build.
//!
//! ```no_run
//! use kiln_ir::interp::{Arg, Buffer, NdRange};
//! use kiln_runtime::cuda::CudaDevice;
//! # let m = kiln_ir::parse_module("kernel k(x: ptr<global, f32>) { x[global_id(0)] = 1.0; }");
//! # let kernel = m.expect("parses").kernels[0].clone();
//! let dev = CudaDevice::open()?;
//! let mut bufs = vec![Buffer::from_slice(&[1.0f32; 64])];
//! dev.run(&kernel, &NdRange::new(&[64]), &[Arg::Buffer(0)], &mut bufs)?;
//! # Ok::<(), kiln_runtime::cuda::CudaError>(())
//! ```

use std::ffi::{c_void, CString};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use cudarc::driver::{result, sys};
use kiln_backends::ptx::{emit_kernel, Options};
use kiln_ir::interp::{default_local_size, Arg, Buffer, NdRange};
use kiln_ir::{Kernel, Type};

/// Why the CUDA device could not do something.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CudaError {
    /// No usable CUDA driver or device on this machine.
    Unavailable(String),
    /// The kernel could not be lowered to PTX.
    Compile(String),
    /// The launch is malformed (arguments, buffers, nd-range).
    Launch(String),
    /// The driver reported an error.
    Driver(String),
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CudaError::Unavailable(m) => write!(f, "CUDA device unavailable: {m}"),
            CudaError::Compile(m) => write!(f, "{m}"),
            CudaError::Launch(m) => write!(f, "CUDA launch: {m}"),
            CudaError::Driver(m) => write!(f, "CUDA driver: {m}"),
        }
    }
}

impl std::error::Error for CudaError {}

fn driver(what: &str) -> impl Fn(result::DriverError) -> CudaError + '_ {
    move |e| CudaError::Driver(format!("{what}: {e:?}"))
}

/// Runs `f`, turning a panic inside cudarc (a symbol missing from an old driver) into an error.
fn guarded<T>(f: impl FnOnce() -> Result<T, CudaError>) -> Result<T, CudaError> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "panic in the CUDA driver bindings".into());
        Err(CudaError::Unavailable(msg))
    })
}

/// An NVIDIA GPU (device 0) with its primary context.
#[derive(Debug)]
pub struct CudaDevice {
    dev: sys::CUdevice,
    ctx: sys::CUcontext,
    name: String,
    sm: u32,
}

// The context handle is used only after making it current on the calling thread.
unsafe impl Send for CudaDevice {}
unsafe impl Sync for CudaDevice {}

impl CudaDevice {
    /// Loads the CUDA driver and opens device 0; [`CudaError::Unavailable`] when there is no
    /// driver library or no device.
    pub fn open() -> Result<CudaDevice, CudaError> {
        // SAFETY: only checks whether the library can be loaded.
        if !guarded(|| Ok(unsafe { sys::is_culib_present() }))? {
            return Err(CudaError::Unavailable(
                "the CUDA driver library (libcuda.so) could not be loaded".into(),
            ));
        }
        guarded(|| {
            let unavailable = |e: result::DriverError| CudaError::Unavailable(format!("{e:?}"));
            result::init().map_err(unavailable)?;
            if result::device::get_count().map_err(unavailable)? < 1 {
                return Err(CudaError::Unavailable("no CUDA device".into()));
            }
            let dev = result::device::get(0).map_err(unavailable)?;
            let name = result::device::get_name(dev).unwrap_or_default();
            // SAFETY: `dev` is a valid device; the attribute query has no other requirement.
            let (major, minor) = unsafe {
                use sys::CUdevice_attribute::*;
                (
                    result::device::get_attribute(
                        dev,
                        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                    )
                    .map_err(unavailable)?,
                    result::device::get_attribute(
                        dev,
                        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                    )
                    .map_err(unavailable)?,
                )
            };
            // SAFETY: retaining the primary context of a valid device.
            let ctx = unsafe { result::primary_ctx::retain(dev) }.map_err(unavailable)?;
            Ok(CudaDevice { dev, ctx, name, sm: (major * 10 + minor) as u32 })
        })
    }

    /// The device's name, as the driver reports it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The SM version (90 for an H100) that kernels are compiled for.
    pub fn sm(&self) -> u32 {
        self.sm
    }

    /// Lowers `kernel` to PTX for this device (what [`CudaDevice::run`] loads).
    pub fn ptx(&self, kernel: &Kernel) -> Result<String, CudaError> {
        emit_kernel(kernel, &Options::sm(self.sm)).map_err(|e| CudaError::Compile(e.to_string()))
    }

    /// Runs `kernel` over `range` like the interpreter's `run`: `args` has one entry per
    /// parameter, pointer parameters naming entries of `buffers`, which are copied to the
    /// device, and back when the kernel has finished. Without a local size, the kernel's
    /// `#reqd_work_group_size` or the interpreter's default is used.
    pub fn run(
        &self,
        kernel: &Kernel,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
    ) -> Result<(), CudaError> {
        let (grid, block) = launch_shape(kernel, range)?;
        if grid.contains(&0) {
            return Ok(()); // an empty nd-range runs nothing
        }
        let params = kernel.params();
        if args.len() != params.len() {
            return Err(CudaError::Launch(format!(
                "kernel `{}` has {} parameters, {} arguments given",
                kernel.name(),
                params.len(),
                args.len()
            )));
        }
        // Scalar argument bytes, checked against the parameter types.
        let mut scalars: Vec<Vec<u8>> = Vec::new();
        for (p, a) in params.iter().zip(args) {
            match (p.ty(), a) {
                (Type::Scalar(s), Arg::Scalar(v)) if v.scalar() == s => {
                    let b = Buffer::from_imms(s, &[*v])
                        .map_err(|e| CudaError::Launch(format!("argument `{}`: {e}", p.name())))?;
                    scalars.push(b.as_bytes().to_vec());
                }
                (Type::Ptr(_, elem), Arg::Buffer(i)) => match buffers.get(*i) {
                    Some(b) if b.elem() == elem => {}
                    Some(b) => {
                        return Err(CudaError::Launch(format!(
                            "parameter `{}` points to {elem}, buffer {i} holds {}",
                            p.name(),
                            b.elem()
                        )))
                    }
                    None => return Err(CudaError::Launch(format!("no buffer {i}"))),
                },
                _ => {
                    return Err(CudaError::Launch(format!(
                        "argument for `{}: {}` is of the wrong kind or type",
                        p.name(),
                        p.ty()
                    )))
                }
            }
        }
        let ptx = self.ptx(kernel)?;
        let ptx = CString::new(ptx).map_err(|e| CudaError::Compile(e.to_string()))?;
        guarded(|| self.launch(kernel, &ptx, grid, block, range, args, &scalars, buffers))
    }

    #[allow(clippy::too_many_arguments)]
    fn launch(
        &self,
        kernel: &Kernel,
        ptx: &CString,
        grid: [u32; 3],
        block: [u32; 3],
        range: &NdRange,
        args: &[Arg],
        scalars: &[Vec<u8>],
        buffers: &mut [Buffer],
    ) -> Result<(), CudaError> {
        // SAFETY: the context was retained in `open` and stays alive with `self`; every
        // device pointer below is allocated here, sized from the host buffer, and freed on
        // every path; kernel parameters point to host values that outlive the launch, which
        // is synchronized before they are dropped.
        unsafe {
            result::ctx::set_current(self.ctx).map_err(driver("cuCtxSetCurrent"))?;
            let module = result::module::load_data(ptx.as_ptr() as *const c_void)
                .map_err(driver("cuModuleLoadData"))?;
            let mut ptrs: Vec<sys::CUdeviceptr> = Vec::with_capacity(buffers.len());
            let outcome = (|| {
                let name = CString::new(kernel.name()).expect("kernel names have no NUL");
                let f = result::module::get_function(module, name)
                    .map_err(driver("cuModuleGetFunction"))?;
                for b in buffers.iter() {
                    let p = result::malloc_sync(b.as_bytes().len().max(1))
                        .map_err(driver("cuMemAlloc"))?;
                    ptrs.push(p);
                    if !b.is_empty() {
                        result::memcpy_htod_sync(p, b.as_bytes())
                            .map_err(driver("cuMemcpyHtoD"))?;
                    }
                }
                let mut ptr_args: Vec<sys::CUdeviceptr> = Vec::new();
                for a in args {
                    if let Arg::Buffer(i) = a {
                        ptr_args.push(ptrs[*i]);
                    }
                }
                let mut offsets = range.offset;
                let mut kparams: Vec<*mut c_void> = Vec::new();
                let (mut si, mut pi) = (0, 0);
                for a in args {
                    match a {
                        Arg::Scalar(_) => {
                            kparams.push(scalars[si].as_ptr() as *mut c_void);
                            si += 1;
                        }
                        Arg::Buffer(_) => {
                            kparams.push(&mut ptr_args[pi] as *mut _ as *mut c_void);
                            pi += 1;
                        }
                    }
                }
                for o in offsets.iter_mut() {
                    kparams.push(o as *mut u32 as *mut c_void);
                }
                result::launch_kernel(
                    f,
                    (grid[0], grid[1], grid[2]),
                    (block[0], block[1], block[2]),
                    0,
                    std::ptr::null_mut(),
                    &mut kparams,
                )
                .map_err(driver("cuLaunchKernel"))?;
                result::ctx::synchronize().map_err(driver("kernel execution"))?;
                for (b, p) in buffers.iter_mut().zip(&ptrs) {
                    if b.is_empty() {
                        continue;
                    }
                    let mut bytes = vec![0u8; b.as_bytes().len()];
                    result::memcpy_dtoh_sync(&mut bytes, *p).map_err(driver("cuMemcpyDtoH"))?;
                    *b = Buffer::from_bytes(b.elem(), bytes)
                        .map_err(|e| CudaError::Driver(e.to_string()))?;
                }
                Ok(())
            })();
            for p in ptrs {
                let _ = result::free_sync(p);
            }
            let _ = result::module::unload(module);
            outcome
        }
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        // SAFETY: releases the retain taken in `open`.
        let _ = guarded(|| {
            let _ = unsafe { result::primary_ctx::release(self.dev) };
            Ok(())
        });
    }
}

/// Grid and block sizes for a launch, with the interpreter's rules for the local size.
fn launch_shape(kernel: &Kernel, range: &NdRange) -> Result<([u32; 3], [u32; 3]), CudaError> {
    if !(1..=3).contains(&range.dims) {
        return Err(CudaError::Launch(format!("{} dimensions (1 to 3)", range.dims)));
    }
    let local = range
        .local
        .or(kernel.attrs().reqd_work_group_size)
        .unwrap_or_else(|| default_local_size(range.global));
    let mut grid = [1; 3];
    for d in 0..3 {
        if range.global[d].checked_rem(local[d]) != Some(0) {
            return Err(CudaError::Launch(format!(
                "global size {} is not a multiple of local size {} in dimension {d}",
                range.global[d], local[d]
            )));
        }
        grid[d] = range.global[d] / local[d];
    }
    if local.iter().map(|&l| l as u64).product::<u64>() > 1024 {
        return Err(CudaError::Launch(format!("work-group of {local:?} exceeds 1024 items")));
    }
    Ok((grid, local))
}
