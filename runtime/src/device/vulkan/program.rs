//! The Vulkan device's loaded programs and the encoding of one kernel's device code.
//!
//! Each kernel's blob in the program binary (see `artifact.rs`) is its binding layout and
//! its SPIR-V words, little-endian:
//!
//! ```text
//! u32 push_size; u32 n, n × u32 buffer param; u32 m, m × (u32 scalar param, u32 offset);
//! u32 w, w × u32 word
//! ```
//!
//! Element and scalar types are not stored: they come from the kernel's signature, and
//! decoding checks each parameter index against it, so a damaged blob is a load error.
//!
//! Each loaded program has its own `VkPipelineCache` ([`PipelineCache`]): its pipelines are
//! created through it, and its data is what the runtime stores next to the program in the
//! persistent cache, to seed the program's cache in the next process. Seed data is used only
//! when its header names this device (vendor, device, pipeline-cache UUID; a driver is not
//! required to check, and some crash on foreign data).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ash::vk;

use kiln_backends::spirv::{BufferBinding, PushScalar, VulkanLayout};
use kiln_ir::{Kernel, Type};

use crate::artifact::{Artifact, Reader};
use crate::error::DeviceError;
use crate::sync::{ranks, RankedMutex};

/// A loaded program: its kernels and their pipeline cache.
pub(super) struct VkProgram {
    pub kernels: Vec<Arc<VkKernel>>,
    pub cache: Arc<PipelineCache>,
}

/// What a pipeline cache's header names: data for another device is never used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct CacheId {
    pub vendor: u32,
    pub device: u32,
    pub uuid: [u8; vk::UUID_SIZE],
}

/// Why pipeline cache `data` cannot be used on the device `id` describes, if it cannot:
/// the `VkPipelineCacheHeaderVersionOne` header (length, version, vendor, device, UUID).
pub(super) fn check_header(id: &CacheId, data: &[u8]) -> Result<(), String> {
    let word =
        |i: usize| data.get(4 * i..4 * i + 4).map(|b| u32::from_le_bytes(b.try_into().unwrap()));
    let (Some(len), Some(version), Some(vendor), Some(device)) =
        (word(0), word(1), word(2), word(3))
    else {
        return Err(format!("pipeline cache data of {} bytes has no header", data.len()));
    };
    if len < 32 || len as usize > data.len() {
        return Err(format!("pipeline cache header length {len} is not 32 to {}", data.len()));
    }
    if version != vk::PipelineCacheHeaderVersion::ONE.as_raw() as u32 {
        return Err(format!("pipeline cache header version {version} is not 1"));
    }
    if (vendor, device) != (id.vendor, id.device) || data[16..32] != id.uuid {
        return Err(format!(
            "pipeline cache is for vendor {vendor:#x} device {device:#x} (UUID {}), not this \
             device's {:#x} {:#x} ({})",
            hex(&data[16..32]),
            id.vendor,
            id.device,
            hex(&id.uuid)
        ));
    }
    Ok(())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A program's `VkPipelineCache`, destroyed with the program (before the device: it holds
/// the device's owner).
pub(super) struct PipelineCache {
    owner: Arc<super::Owner>,
    cache: vk::PipelineCache,
    /// A pipeline was created since the data was last read.
    changed: AtomicBool,
}

impl PipelineCache {
    /// A cache seeded with `seed` when its header names this device; otherwise empty, with
    /// the reason the seed was not used.
    pub fn new(
        owner: &Arc<super::Owner>,
        id: &CacheId,
        seed: Option<&[u8]>,
    ) -> Result<(PipelineCache, Option<String>), DeviceError> {
        let (initial, rejected) = match seed.map(|d| (d, check_header(id, d))) {
            Some((d, Ok(()))) => (d, None),
            Some((_, Err(why))) => (&[][..], Some(why)),
            None => (&[][..], None),
        };
        let ci = vk::PipelineCacheCreateInfo::default().initial_data(initial);
        // SAFETY: valid create info on a live device; destroyed in Drop.
        let cache = unsafe { owner.device.create_pipeline_cache(&ci, None) }
            .map_err(|e| DeviceError::Driver(format!("vulkan: create pipeline cache: {e}")))?;
        let c = PipelineCache { owner: owner.clone(), cache, changed: AtomicBool::new(false) };
        Ok((c, rejected))
    }

    /// Creates one compute pipeline through the cache.
    pub fn create_pipeline(
        &self,
        info: &[vk::ComputePipelineCreateInfo<'_>],
    ) -> Result<vk::Pipeline, vk::Result> {
        // SAFETY: the caller's infos are valid; the cache is internally synchronized.
        let p = unsafe { self.owner.device.create_compute_pipelines(self.cache, info, None) }
            .map_err(|(_, e)| e)?;
        self.changed.store(true, Ordering::Release);
        Ok(p[0])
    }

    /// The cache's data, if a pipeline was created since the last call.
    pub fn data_if_changed(&self) -> Option<Vec<u8>> {
        if !self.changed.swap(false, Ordering::AcqRel) {
            return None;
        }
        // SAFETY: a live cache of a live device.
        unsafe { self.owner.device.get_pipeline_cache_data(self.cache) }.ok()
    }
}

impl Drop for PipelineCache {
    fn drop(&mut self) {
        // SAFETY: pipelines made through it belong to its kernels, which hold the cache: they
        // are gone.
        unsafe { self.owner.device.destroy_pipeline_cache(self.cache, None) };
    }
}

/// One kernel's SPIR-V module, ready to dispatch.
pub(super) struct VkKernel {
    /// The entry point (the kernel's name).
    pub entry: String,
    /// Parameters and attributes, to check launches against.
    pub signature: Kernel,
    /// Bindings and push constants.
    pub layout: VulkanLayout,
    /// The SPIR-V words.
    pub words: Vec<u32>,
    /// The program's pipeline cache.
    pub cache: Arc<PipelineCache>,
    /// It has cooperative matrices (the IR's sub-group matrix operations): its work-groups
    /// must be whole sub-groups of 32.
    pub cooperative: bool,
    /// The pipelines made so far, by work-group size (made once, kept with the kernel).
    pub pipelines: RankedMutex<Vec<([u32; 3], Arc<super::resident::Pipeline>)>>,
}

fn put(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// One kernel's blob.
pub(super) fn encode_kernel(layout: &VulkanLayout, words: &[u32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + 4 * words.len());
    put(&mut out, layout.push_size);
    put(&mut out, layout.buffers.len() as u32);
    for b in &layout.buffers {
        put(&mut out, b.param as u32);
    }
    put(&mut out, layout.scalars.len() as u32);
    for s in &layout.scalars {
        put(&mut out, s.param as u32);
        put(&mut out, s.offset);
    }
    put(&mut out, words.len() as u32);
    for w in words {
        put(&mut out, *w);
    }
    out
}

fn decode_kernel(signature: &Kernel, blob: &[u8]) -> Result<(VulkanLayout, Vec<u32>), String> {
    let mut r = Reader::new(blob);
    let params = signature.params();
    let push_size = r.u32()?;
    let mut layout = VulkanLayout { push_size, ..VulkanLayout::default() };
    for _ in 0..r.u32()? {
        let param = r.u32()? as usize;
        match params.get(param).map(|p| p.ty()) {
            Some(Type::Ptr(_, elem)) => layout.buffers.push(BufferBinding { param, elem }),
            _ => return Err(format!("binding {param} is not a pointer parameter")),
        }
    }
    for _ in 0..r.u32()? {
        let (param, offset) = (r.u32()? as usize, r.u32()?);
        match params.get(param).map(|p| p.ty()) {
            Some(Type::Scalar(ty)) => layout.scalars.push(PushScalar { param, offset, ty }),
            _ => return Err(format!("push constant {param} is not a scalar parameter")),
        }
    }
    let n = r.u32()? as usize;
    let bytes = r.take(n.checked_mul(4).ok_or("word count overflows")?)?;
    let words = bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    if !r.is_empty() {
        return Err("trailing bytes".into());
    }
    Ok((layout, words.collect()))
}

/// The kernels of a decoded program binary: one blob per signature, matched by name.
pub(super) fn decode_kernels(
    device: &str,
    a: Artifact,
    cache: &Arc<PipelineCache>,
) -> Result<Vec<Arc<VkKernel>>, DeviceError> {
    let fail = |message: String| DeviceError::Load { device: device.into(), message };
    if a.blobs.len() != a.signatures.len() {
        return Err(fail(format!(
            "{} kernels but {} SPIR-V modules",
            a.signatures.len(),
            a.blobs.len()
        )));
    }
    let mut kernels = Vec::with_capacity(a.blobs.len());
    for (signature, (entry, blob)) in a.signatures.into_iter().zip(a.blobs) {
        if signature.name() != entry {
            return Err(fail(format!("module `{entry}` has no matching kernel signature")));
        }
        let (layout, words) =
            decode_kernel(&signature, &blob).map_err(|e| fail(format!("kernel `{entry}`: {e}")))?;
        let cache = cache.clone();
        kernels.push(Arc::new(VkKernel {
            entry,
            signature,
            layout,
            cooperative: super::coop::uses(&words) != super::coop::Uses::default(),
            words,
            cache,
            pipelines: RankedMutex::new(ranks::VULKAN_PIPELINES, Vec::new()),
        }));
    }
    Ok(kernels)
}

/// The `DenormPreserve` execution mode (SPV_KHR_float_controls).
pub(super) const DENORM_PRESERVE: u32 = 4459;
/// The `SignedZeroInfNanPreserve` execution mode (SPV_KHR_float_controls).
pub(super) const NAN_PRESERVE: u32 = 4461;

/// The float widths for which the module declares the execution mode `mode` (one of the
/// float-controls modes above, whose one operand is a width).
pub(super) fn mode_widths(words: &[u32], mode: u32) -> Vec<u32> {
    const OP_EXECUTION_MODE: u32 = 16;
    let mut out = Vec::new();
    let mut i = 5; // after the header
    while let Some(&w) = words.get(i) {
        let n = (w >> 16) as usize;
        if n == 0 {
            break;
        }
        if w & 0xffff == OP_EXECUTION_MODE && n >= 4 && words.get(i + 2) == Some(&mode) {
            out.extend(words.get(i + 3));
        }
        i += n;
    }
    out
}

/// `words` without the execution modes `mode` whose width `keep` rejects.
pub(super) fn without_mode(words: &[u32], mode: u32, keep: impl Fn(u32) -> bool) -> Vec<u32> {
    const OP_EXECUTION_MODE: u32 = 16;
    let mut out = words[..words.len().min(5)].to_vec();
    let mut i = 5;
    while let Some(&w) = words.get(i) {
        let n = ((w >> 16) as usize).max(1).min(words.len() - i);
        let inst = &words[i..i + n];
        let drop = w & 0xffff == OP_EXECUTION_MODE && n >= 4 && inst[2] == mode && !keep(inst[3]);
        if !drop {
            out.extend_from_slice(inst);
        }
        i += n;
    }
    out
}

/// Whether a SPIR-V module declares the `Float64` capability.
pub(super) fn declares_float64(words: &[u32]) -> bool {
    const OP_CAPABILITY: u32 = 17;
    const FLOAT64: u32 = 10;
    let mut i = 5;
    while let Some(&w) = words.get(i) {
        let n = (w >> 16) as usize;
        if n == 0 {
            break;
        }
        if w & 0xffff == OP_CAPABILITY && words.get(i + 1) == Some(&FLOAT64) {
            return true;
        }
        i += n;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A module's DenormPreserve modes are found, and only the rejected widths are dropped.
    #[test]
    fn denorm_preserve_modes_are_found_and_dropped_by_width() {
        let k = kiln_ir::parse_module(
            "kernel d(x: ptr<global, f32>, y: ptr<global, f64>) { x[0] = x[1] * 0.5; y[0] = y[1]; }",
        )
        .unwrap()
        .kernels
        .remove(0);
        let m = kiln_backends::spirv::emit(&k, kiln_backends::spirv::Flavour::Vulkan).unwrap();
        assert_eq!(mode_widths(&m.words, DENORM_PRESERVE), vec![32, 64]);
        assert_eq!(mode_widths(&m.words, NAN_PRESERVE), vec![32, 64]);
        let no64 = without_mode(&m.words, DENORM_PRESERVE, |w| w == 32);
        assert_eq!(mode_widths(&no64, DENORM_PRESERVE), vec![32]);
        assert_eq!(mode_widths(&no64, NAN_PRESERVE), vec![32, 64]);
        assert_eq!(no64.len(), m.words.len() - 4);
        let none = without_mode(&m.words, DENORM_PRESERVE, |_| false);
        assert_eq!(mode_widths(&none, DENORM_PRESERVE), Vec::<u32>::new());
        assert_eq!(without_mode(&m.words, DENORM_PRESERVE, |_| true), m.words);
    }

    /// f64 values and the exact f32 division need `Float64`; integer kernels do not.
    #[test]
    fn float64_capability_is_found() {
        let emit = |src: &str| {
            let k = kiln_ir::parse_module(src).unwrap().kernels.remove(0);
            kiln_backends::spirv::emit(&k, kiln_backends::spirv::Flavour::Vulkan).unwrap().words
        };
        assert!(declares_float64(&emit("kernel a(x: ptr<global, f32>) { x[0] = x[1] / x[2]; }")));
        assert!(declares_float64(&emit("kernel b(x: ptr<global, f64>) { x[0] = x[1]; }")));
        assert!(!declares_float64(&emit("kernel c(x: ptr<global, f32>) { x[0] = x[1] * x[2]; }")));
        assert!(!declares_float64(&emit("kernel d(x: ptr<global, u32>) { x[0] = x[1] / 3u32; }")));
    }

    fn header(id: &CacheId) -> Vec<u8> {
        let mut d = Vec::new();
        for w in [32u32, 1, id.vendor, id.device] {
            d.extend_from_slice(&w.to_le_bytes());
        }
        d.extend_from_slice(&id.uuid);
        d.extend_from_slice(b"driver data");
        d
    }

    /// Issue 13: pipeline cache data is used only with a header naming this device.
    #[test]
    fn pipeline_cache_header_is_validated() {
        let id = CacheId { vendor: 0x10005, device: 0, uuid: [7; 16] };
        let good = header(&id);
        check_header(&id, &good).unwrap();
        let other = CacheId { uuid: [8; 16], ..id };
        let e = check_header(&other, &good).unwrap_err();
        assert!(e.contains("UUID 07070707") && e.contains("08080808"), "{e}");
        let e = check_header(&CacheId { device: 1, ..id }, &good).unwrap_err();
        assert!(e.contains("device 0x0"), "{e}");
        assert!(check_header(&id, &good[..12]).unwrap_err().contains("no header"));
        assert!(check_header(&id, &good[..20]).unwrap_err().contains("not 32 to 20"));
        let mut bad = good.clone();
        bad[0] = 200;
        assert!(check_header(&id, &bad).unwrap_err().contains("length 200"));
        let mut bad = good.clone();
        bad[4] = 2;
        assert!(check_header(&id, &bad).unwrap_err().contains("version 2"));
        assert!(check_header(&id, &[]).is_err());
    }
}
