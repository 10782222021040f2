//! Tensor maps for kernels that copy tiles with `tma_load`. The PTX names each map the kernel
//! takes on a `// kiln.tensor_map` line (docs/matrix.md, "Tensor maps"); the program binary
//! keeps those lines in its launch blob, and each launch encodes the maps for the buffers it
//! binds (`cuTensorMapEncodeTiled`), keeps one device copy of each distinct map, and passes
//! the copies' addresses as the kernel's hidden parameters, after the three offsets.

use crate::sync::{ranks, RankedMutex};

use cudarc::driver::sys;
use kiln_ir::launch::Arg;
use kiln_ir::warpgroup::Swizzle;
use kiln_ir::Scalar;

use super::launch::CudaMem;
use super::{guarded, launch_err, CudaDevice};
use crate::device::DeviceMemory;
use crate::error::DeviceError;

/// One tensor map a kernel takes: a row-major `height x width` tensor (rows `pitch`
/// elements apart) of `elem` at parameter `param`, copied in boxes of `bw x bh` through
/// `swizzle`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct MapSpec {
    pub(super) param: String,
    elem: Scalar,
    width: u64,
    height: u64,
    pitch: u64,
    bw: u32,
    bh: u32,
    swizzle: Swizzle,
}

impl MapSpec {
    /// Parses `<param> <elem> <width> <height> <pitch> <box w> <box h> <swizzle>` (what
    /// follows the kernel name and index on a `kiln.tensor_map` line).
    pub(super) fn parse(fields: &[&str]) -> Result<MapSpec, String> {
        let bad = || format!("bad tensor map `{}`", fields.join(" "));
        let [param, elem, w, h, pitch, bw, bh, sw] = fields else { return Err(bad()) };
        let n = |s: &str| s.parse::<u64>().map_err(|_| bad());
        Ok(MapSpec {
            param: param.to_string(),
            elem: Scalar::from_name(elem).ok_or_else(bad)?,
            width: n(w)?,
            height: n(h)?,
            pitch: n(pitch)?,
            bw: n(bw)?.try_into().map_err(|_| bad())?,
            bh: n(bh)?.try_into().map_err(|_| bad())?,
            swizzle: Swizzle::from_name(sw).ok_or_else(bad)?,
        })
    }

    /// The fields [`MapSpec::parse`] reads.
    pub(super) fn fields(&self) -> String {
        let MapSpec { param, elem, width, height, pitch, bw, bh, swizzle } = self;
        format!("{param} {elem} {width} {height} {pitch} {bw} {bh} {swizzle}")
    }

    fn data_type(&self) -> Option<sys::CUtensorMapDataType> {
        use sys::CUtensorMapDataType::*;
        // The copy moves bits: integer types of a size stand for each other.
        Some(match self.elem {
            Scalar::U8 | Scalar::I8 => CU_TENSOR_MAP_DATA_TYPE_UINT8,
            Scalar::U16 | Scalar::I16 => CU_TENSOR_MAP_DATA_TYPE_UINT16,
            Scalar::U32 => CU_TENSOR_MAP_DATA_TYPE_UINT32,
            Scalar::I32 => CU_TENSOR_MAP_DATA_TYPE_INT32,
            Scalar::U64 => CU_TENSOR_MAP_DATA_TYPE_UINT64,
            Scalar::I64 => CU_TENSOR_MAP_DATA_TYPE_INT64,
            Scalar::F16 => CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            Scalar::BF16 => CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            Scalar::F32 => CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
            Scalar::F64 => CU_TENSOR_MAP_DATA_TYPE_FLOAT64,
            _ => return None,
        })
    }

    /// Why the map cannot be encoded for `len` elements at device address `ptr`, if it
    /// cannot: the copy engine needs a 16-byte aligned start and pitch, and the tensor must
    /// lie within what the argument binds.
    pub(super) fn check(&self, kernel: &str, ptr: u64, len: usize) -> Result<(), DeviceError> {
        let es = self.elem.size_bytes() as u64;
        let why = if self.data_type().is_none() {
            format!("{} elements have no tensor-map type", self.elem)
        } else if !ptr.is_multiple_of(16) {
            format!("its argument starts at byte address {ptr:#x}, not a multiple of 16")
        } else if !(self.pitch * es).is_multiple_of(16) || self.width > self.pitch {
            format!(
                "its rows are {} bytes apart (at least the width, {} elements, and a multiple \
                 of 16 bytes)",
                self.pitch * es,
                self.width
            )
        } else if self.height > 0 && (self.height - 1) * self.pitch + self.width > len as u64 {
            format!(
                "the {} x {} tensor (pitch {}) needs {} elements, its argument binds {len}",
                self.height,
                self.width,
                self.pitch,
                (self.height - 1) * self.pitch + self.width
            )
        } else {
            return Ok(());
        };
        Err(launch_err(format!(
            "kernel `{kernel}`: the tensor map of `{}` cannot be encoded: {why}",
            self.param
        )))
    }

    /// The 128-byte `CUtensorMap` for the tensor at `ptr`, after [`MapSpec::check`].
    pub(super) fn encode(&self, kernel: &str, ptr: u64, len: usize) -> Result<Map, DeviceError> {
        self.check(kernel, ptr, len)?;
        use sys::CUtensorMapSwizzle::*;
        let swizzle = match self.swizzle {
            Swizzle::None => CU_TENSOR_MAP_SWIZZLE_NONE,
            Swizzle::B32 => CU_TENSOR_MAP_SWIZZLE_32B,
            Swizzle::B64 => CU_TENSOR_MAP_SWIZZLE_64B,
            Swizzle::B128 => CU_TENSOR_MAP_SWIZZLE_128B,
        };
        let dtype = self.data_type().expect("checked");
        let dims = [self.width, self.height];
        let strides = [self.pitch * self.elem.size_bytes() as u64];
        let (bx, es) = ([self.bw, self.bh], [1u32, 1]);
        let mut map = sys::CUtensorMap { opaque: [0; 16] };
        guarded(|| {
            // SAFETY: every array holds the rank's (2) entries (strides one fewer); the map is
            // written in place; the address is only recorded, not read.
            unsafe {
                sys::cuTensorMapEncodeTiled(
                    &mut map,
                    dtype,
                    2,
                    ptr as *mut std::ffi::c_void,
                    dims.as_ptr(),
                    strides.as_ptr(),
                    bx.as_ptr(),
                    es.as_ptr(),
                    sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                    swizzle,
                    sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                    sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
                )
                .result()
                .map_err(|e| {
                    launch_err(format!(
                        "kernel `{kernel}`: the driver cannot encode the tensor map of `{}` \
                         ({}): {e:?}",
                        self.param,
                        self.fields()
                    ))
                })
            }
        })?;
        Ok(map.opaque)
    }
}

/// An encoded `CUtensorMap`.
pub(super) type Map = [u64; 16];

/// The most distinct maps a kernel keeps on the device; past it they are dropped (each
/// drop waits for the launches in flight) and made again as needed.
const MAX_MAPS: usize = 64;

/// The device copies of a kernel's encoded tensor maps, each made once: a launch only
/// reads them, so a copy never changes under a launch in flight.
pub(super) struct MapCache(RankedMutex<Vec<(Map, CudaMem)>>);

impl Default for MapCache {
    fn default() -> MapCache {
        MapCache(RankedMutex::new(ranks::CUDA_TENSOR_MAPS, Vec::new()))
    }
}

impl MapCache {
    /// The device address of a copy of `map`.
    fn device_copy(&self, dev: &CudaDevice, map: Map) -> Result<u64, DeviceError> {
        let mut v = self.0.lock();
        if let Some((_, m)) = v.iter().find(|(k, _)| *k == map) {
            return Ok(m.ptr());
        }
        if v.len() >= MAX_MAPS {
            v.clear();
        }
        let m = dev.alloc_mem(128)?;
        let bytes: Vec<u8> = map.iter().flat_map(|w| w.to_le_bytes()).collect();
        m.upload(&bytes)?;
        let ptr = m.ptr();
        v.push((map, m));
        Ok(ptr)
    }
}

/// The device addresses of `maps` encoded for a launch of kernel `kernel` (parameters
/// `params`) with `args` and the slots [`super::Params`] filled (`slot(i)`: parameter `i`'s
/// device pointer) over buffers of `lens` elements.
pub(super) fn addresses(
    dev: &CudaDevice,
    cache: &MapCache,
    kernel: &kiln_ir::Kernel,
    maps: &[MapSpec],
    args: &[Arg],
    slot: impl Fn(usize) -> u64,
    lens: impl Fn(usize) -> usize,
) -> Result<Vec<u64>, DeviceError> {
    let mut out = Vec::with_capacity(maps.len());
    for spec in maps {
        let Some(i) = kernel.params().iter().position(|p| p.name() == spec.param) else {
            return Err(launch_err(format!(
                "kernel `{}`: a tensor map names `{}`, which is none of its parameters",
                kernel.name(),
                spec.param
            )));
        };
        let len = match args.get(i) {
            Some(Arg::Buffer(b)) => lens(*b),
            Some(Arg::Range { len, .. }) => *len,
            _ => 0,
        };
        let map = spec.encode(kernel.name(), slot(i), len)?;
        out.push(cache.device_copy(dev, map)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(line: &str) -> MapSpec {
        MapSpec::parse(&line.split(' ').collect::<Vec<_>>()).unwrap()
    }

    /// Issue 27: what the copy engine cannot read is refused naming the kernel, the
    /// parameter and the reason, before the driver is asked.
    #[test]
    fn unencodable_maps_are_refused_by_name() {
        let m = spec("a bf16 100 70 104 64 64 sw128");
        assert_eq!(m.fields(), "a bf16 100 70 104 64 64 sw128");
        m.check("k", 0x1000, 69 * 104 + 100).unwrap();
        let e = m.check("k", 0x1000, 69 * 104 + 99).unwrap_err().to_string();
        assert!(e.contains("kernel `k`") && e.contains("`a`") && e.contains("needs 7276"), "{e}");
        let e = m.check("k", 0x1008, 1 << 20).unwrap_err().to_string();
        assert!(e.contains("not a multiple of 16"), "{e}");
        let e = spec("b f16 100 70 100 64 64 sw128").check("k", 0, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("200 bytes apart"), "{e}");
        let e = spec("b bool 8 8 16 8 8 noswizzle").check("k", 0, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("no tensor-map type"), "{e}");
        assert!(MapSpec::parse(&["a", "bf16", "1"]).is_err());
        assert!(MapSpec::parse(&["a", "bf17", "1", "1", "8", "8", "8", "sw128"]).is_err());
    }
}
