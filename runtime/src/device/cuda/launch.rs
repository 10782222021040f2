//! Launching on the CUDA device: buffers' device memory, the kernel parameter block, ranged
//! arguments bound in place, and the launch shape within CUDA's block and grid limits.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{result, sys};
use kiln_ir::launch::{default_local_size, Arg, NdRange};
use kiln_ir::{Kernel, Scalar, Type};

use super::{driver, guarded, launch_err, CudaDevice, Primary};
use crate::device::{DeviceMemory, ResidentBuffer};
use crate::error::DeviceError;

impl CudaDevice {
    pub(super) fn alloc_mem(&self, bytes: usize) -> Result<CudaMem, DeviceError> {
        // SAFETY: allocation in the retained context, made current first.
        unsafe {
            self.primary.current()?;
            let ptr = result::malloc_sync(bytes).map_err(driver("cuMemAlloc"))?;
            Ok(CudaMem { ptr, bytes, primary: self.primary.clone() })
        }
    }
}

/// A buffer's storage in device memory.
pub(super) struct CudaMem {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    primary: Arc<Primary>,
}

impl CudaMem {
    /// The allocation's device address.
    pub(super) fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }
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
pub(super) const RANGE_ALIGN: u64 = 16;
/// [`RANGE_ALIGN`] in errors.
pub(super) const RANGE_LIMIT: &str = "the 16 bytes CUDA's vector loads and stores need";

/// Checks that no ranged argument of a recorded launch starts off [`RANGE_ALIGN`] (a CUDA
/// graph's kernel node cannot stage it).
pub(super) fn check_recorded_ranges(
    args: &[Arg],
    buffers: &[ResidentBuffer],
) -> Result<(), DeviceError> {
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
pub(super) fn device_ptr(b: &ResidentBuffer) -> Result<sys::CUdeviceptr, DeviceError> {
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
pub(super) struct Params {
    slots: Vec<u64>,
    pointers: Vec<*mut c_void>,
}

thread_local! {
    /// The parameters of this thread's eager launches, reused.
    pub(super) static EAGER_PARAMS: std::cell::RefCell<Params> = std::cell::RefCell::default();
}

impl Params {
    /// Checks every argument against its parameter (`bufs` gives each buffer's device
    /// pointer, element type and length; a ranged argument must lie within its buffer) and
    /// fills the slots, the offsets `range`'s.
    pub(super) fn fill(
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

    /// Parameter `i`'s slot, as [`Params::fill`] set it.
    pub(super) fn slot(&self, i: usize) -> u64 {
        self.slots[i]
    }

    /// Appends a slot after those [`Params::fill`] set (a hidden parameter).
    pub(super) fn push(&mut self, v: u64) {
        self.slots.push(v);
    }

    /// The `void*` array `cuLaunchKernel` takes: one pointer per slot. Points into `self`,
    /// which must outlive its use and not change meanwhile.
    pub(super) fn pointers(&mut self) -> &mut Vec<*mut c_void> {
        self.pointers.clear();
        self.pointers.extend(self.slots.iter_mut().map(|s| s as *mut u64 as *mut c_void));
        &mut self.pointers
    }
}

/// Grid and block sizes for a launch, with the interpreter's rules for the local size.
pub(super) fn launch_shape(
    kernel: &Kernel,
    range: &NdRange,
) -> Result<([u32; 3], [u32; 3]), DeviceError> {
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
    use kiln_ir::launch::NdRange;

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
}
