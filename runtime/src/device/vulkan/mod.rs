//! A minimal Vulkan compute device: runs kernels through the SPIR-V backend's Vulkan flavour.
//!
//! [`VulkanDevice`](crate::device::vulkan::VulkanDevice) implements the runtime's [`Device`] trait, so it
//! plugs into a [`crate::Context`] and [`crate::Queue`] like the interpreter. [`Device::build`]
//! optimizes the module with the default `-O` pipeline (`-O0` in the build options skips it) and
//! emits one Vulkan-flavour SPIR-V module per kernel; the program binary holds those words, their
//! binding layouts and the kernels' signatures (see `artifact.rs`), which is what the persistent
//! cache stores. [`Device::run`] mirrors the interpreter's `run`: buffers are uploaded to
//! host-visible storage buffers, the module is dispatched over the nd-range (work-group size
//! through specialization constants, global offset and scalars through push constants), and results
//! are read back into the caller's buffers.
//!
//! Limits: `build` refuses a kernel that needs more than the device has (storage buffers per
//! stage, push-constant bytes, shared memory, `#reqd_work_group_size`) or more private
//! memory per work-item than [`MAX_PRIVATE_BYTES`](crate::device::vulkan::MAX_PRIVATE_BYTES), naming the kernel and the limit; `run`
//! refuses `offset + global` past the `u32` ids as the interpreter does. A launch with more
//! work-groups than one dispatch may have (`maxComputeWorkGroupCount`) is split into
//! dispatches with a base group (`vkCmdDispatchBase`); the module reads the whole launch's
//! group counts from push constants, so every built-in reads as in the unsplit launch.
//!
//! Each loaded program creates its pipelines through its own `VkPipelineCache`; its data is
//! [`Device::driver_cache`], which a [`crate::Context`] stores next to the program in the
//! persistent cache and hands back to [`Device::load_with_driver_cache`] in the next
//! process, where it is used only if its header names this device.
//!
//! The Vulkan loader is opened at run time (`ash::Entry::load`), so there is no link-time
//! dependency: without a loader or a device,
//! [`VulkanDevice::open`](crate::device::vulkan::VulkanDevice::open) returns [`DeviceError::Unavailable`].
//! On this project's machines the device is lavapipe (Mesa's CPU Vulkan driver).

use std::ffi::CStr;
use std::fmt;
use std::sync::Arc;

use ash::vk;

use kiln_backends::driver;
use kiln_backends::limits::{exceeded, Footprint};
use kiln_backends::options::BuildOptions;
use kiln_backends::spirv::{Flavour, Spirv, VulkanLayout, PUSH_NUM_GROUPS_AT, PUSH_SCALARS_AT};
use kiln_ir::launch::{default_local_size, Arg, Buffer, NdRange};
use kiln_ir::{Kernel, Scalar, Type, Verified};

use crate::artifact;
use crate::device::{
    handle_as, Device, DeviceKind, DeviceMemory, Handle, Memory, RecordStep, Recording,
    ResidentBuffer,
};
use crate::error::DeviceError;
use crate::sync::{ranks, RankedMutex};

mod coop;
mod launcher;
mod limits;
mod program;
mod resident;
pub use launcher::LaunchStats;
use launcher::Launcher;
use limits::check_launch;
use program::{VkKernel, VkProgram};

/// How fast a kind of physical device is expected to run kernels, higher is faster: a
/// discrete GPU, an integrated one, a virtual one, then a software driver on the CPU.
fn speed_rank(ty: vk::PhysicalDeviceType) -> u8 {
    match ty {
        vk::PhysicalDeviceType::DISCRETE_GPU => 4,
        vk::PhysicalDeviceType::INTEGRATED_GPU => 3,
        vk::PhysicalDeviceType::VIRTUAL_GPU => 2,
        vk::PhysicalDeviceType::CPU => 0,
        _ => 1,
    }
}

fn unavailable(reason: impl Into<String>) -> DeviceError {
    DeviceError::Unavailable { device: "vulkan".into(), reason: reason.into() }
}

fn launch_err(m: impl fmt::Display) -> DeviceError {
    DeviceError::Launch(format!("vulkan launch: {m}"))
}

fn vkerr(what: &'static str) -> impl Fn(vk::Result) -> DeviceError {
    move |e| DeviceError::Driver(format!("vulkan: {what}: {e}"))
}

/// The process's Vulkan loader and instance, made by the first open that succeeds and never
/// destroyed (as CUDA keeps its primary context). When a process destroys its last instance,
/// the loader unloads the driver; NVIDIA's driver (580) then killed the process with SIGSEGV
/// as a thread that had called into it exited, which is what a device dropped on a spawned
/// thread did (docs/vulkan.md). Each device still makes and destroys its own logical device.
struct Shared {
    entry: ash::Entry,
    instance: ash::Instance,
}

/// The process's [`Shared`] instance, made now if no open has made it yet.
fn shared() -> Result<&'static Shared, DeviceError> {
    static SHARED: std::sync::OnceLock<Shared> = std::sync::OnceLock::new();
    if let Some(s) = SHARED.get() {
        return Ok(s);
    }
    // SAFETY: loading the system's Vulkan loader library; failure is reported.
    let entry = unsafe { ash::Entry::load() }
        .map_err(|e| unavailable(format!("cannot load the Vulkan loader: {e}")))?;
    let app =
        vk::ApplicationInfo::default().application_name(c"kiln").api_version(vk::API_VERSION_1_2);
    let ici = vk::InstanceCreateInfo::default().application_info(&app);
    // SAFETY: valid create info; the instance lives as long as the process.
    let instance = unsafe { entry.create_instance(&ici, None) }
        .map_err(|e| unavailable(format!("cannot create an instance: {e}")))?;
    if let Err(ours) = SHARED.set(Shared { entry, instance }) {
        // Another thread's open made it first: ours is not the last instance, and no object
        // was made from it.
        // SAFETY: no child objects exist.
        unsafe { ours.instance.destroy_instance(None) };
    }
    SHARED.get().ok_or_else(|| unavailable("the Vulkan instance was not kept"))
}

/// Held while a logical device is made or destroyed: one at a time in the process. On
/// NVIDIA's driver (580) a `vkDestroyDevice` while another device of the process was in use
/// or going away on another thread hung now and then inside the driver (docs/vulkan.md).
fn lifetimes() -> std::sync::MutexGuard<'static, ()> {
    static LIFETIMES: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LIFETIMES.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The logical device, destroyed when the last user is gone: the device and every loaded
/// program (whose pipeline cache must be destroyed before the device) share it.
pub(crate) struct Owner {
    pub(crate) device: ash::Device,
}

impl Drop for Owner {
    fn drop(&mut self) {
        // SAFETY: the last reference: every program's objects are gone, and `run` destroys
        // its per-launch objects.
        let _one = lifetimes();
        unsafe {
            let _ = self.device.device_wait_idle();
            self.device.destroy_device(None);
        }
    }
}

/// A Vulkan compute device: the fastest kind of physical device with a compute queue (a
/// discrete GPU, else an integrated or virtual one, else a software driver such as lavapipe).
pub struct VulkanDevice {
    owner: Arc<Owner>,
    device: ash::Device,
    queue_family: u32,
    memory: vk::PhysicalDeviceMemoryProperties,
    limits: vk::PhysicalDeviceLimits,
    name: String,
    /// A software driver on the host's CPU (`VK_PHYSICAL_DEVICE_TYPE_CPU`: lavapipe).
    emulated: bool,
    driver_version: u32,
    api_version: u32,
    /// `shaderDenormPreserveFloat32` and `...Float64`: whether the `DenormPreserve` mode
    /// kiln's modules declare may be used here.
    denorm_preserve: [bool; 2],
    /// `shaderSignedZeroInfNanPreserveFloat32` and `...Float64`: whether the
    /// `SignedZeroInfNanPreserve` mode kiln's modules declare may be used here.
    nan_preserve: [bool; 2],
    /// `shaderFloat64`: modules declaring `Float64` (f64 values, and f32 `/`, `sqrt` and
    /// `fma`, which kiln computes exactly through f64) need it.
    float64: bool,
    /// What a pipeline cache's header must name to be used here.
    cache_id: program::CacheId,
    /// Measured at open on devices without `shaderDenormPreserveFloat32`: whether the driver
    /// really flushes f32 subnormals to zero (NVIDIA's does; lavapipe keeps them).
    flushes_f32_subnormals: bool,
    /// Whether the flushing warning was printed (once per device).
    warned_flush: std::sync::atomic::AtomicBool,
    /// Measured at open on devices with `shaderFloat64`: whether the driver's GLSL.std.450
    /// `Fma` on f64 rounds once (NVIDIA's does; lavapipe's rounds twice). Only then do
    /// kernels with f64 `fma` build for this device.
    exact_f64_fma: bool,
    /// Its memory space (buffers' copies on this device; see [`Device::memory_space`]).
    space: u64,
    /// Cooperative matrices offered (kernels with matrix operations need them).
    coop: coop::CoopSupport,
    /// Eager submission: pooled command buffers, descriptor pools and fences.
    launcher: Arc<Launcher>,
}

impl Drop for VulkanDevice {
    /// Waits for the launches in flight, which releases what they keep alive.
    fn drop(&mut self) {
        let _ = self.launcher.finish(None);
    }
}

impl fmt::Debug for VulkanDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VulkanDevice({})", self.name)
    }
}

impl VulkanDevice {
    /// Opens the loader and the fastest device with a compute queue, enabling the optional
    /// features kernels may need (8/16/64-bit types, 64-bit and f32 atomics) where present.
    pub fn open() -> Result<VulkanDevice, DeviceError> {
        let mut d = Self::open_device(shared()?)?;
        if !d.denorm_preserve[0] {
            d.flushes_f32_subnormals = d.probe_f32_flush()?;
        }
        if d.float64 {
            // The probe itself needs the instruction; any failure counts as inexact.
            d.exact_f64_fma = true;
            d.exact_f64_fma = matches!(d.probe_f64_fma(), Ok(true));
        }
        Ok(d)
    }

    fn open_device(shared: &Shared) -> Result<VulkanDevice, DeviceError> {
        let instance = &shared.instance;
        // SAFETY: plain queries on a live instance.
        let pds = unsafe { instance.enumerate_physical_devices() }
            .map_err(|e| unavailable(format!("cannot list devices: {e}")))?;
        // The fastest kind of device with a compute queue; the driver's order among equals.
        let mut chosen: Option<(u8, vk::PhysicalDevice, u32)> = None;
        for pd in pds {
            let qfs = unsafe { instance.get_physical_device_queue_family_properties(pd) };
            if let Some(q) =
                qfs.iter().position(|q| q.queue_flags.contains(vk::QueueFlags::COMPUTE))
            {
                let ty = unsafe { instance.get_physical_device_properties(pd) }.device_type;
                let rank = speed_rank(ty);
                if chosen.is_none_or(|(best, ..)| rank > best) {
                    chosen = Some((rank, pd, q as u32));
                }
            }
        }
        let (_, pd, qf) =
            chosen.ok_or_else(|| unavailable("no Vulkan device with a compute queue"))?;
        let props = unsafe { instance.get_physical_device_properties(pd) };
        let name =
            unsafe { CStr::from_ptr(props.device_name.as_ptr()) }.to_string_lossy().into_owned();
        if props.api_version < vk::API_VERSION_1_2 {
            return Err(unavailable(format!("{name} does not support Vulkan 1.2")));
        }
        let mut p12 = vk::PhysicalDeviceVulkan12Properties::default();
        {
            let mut p2 = vk::PhysicalDeviceProperties2::default().push_next(&mut p12);
            unsafe { instance.get_physical_device_properties2(pd, &mut p2) };
        }
        let denorm_preserve =
            [p12.shader_denorm_preserve_float32 != 0, p12.shader_denorm_preserve_float64 != 0];
        let nan_preserve = [
            p12.shader_signed_zero_inf_nan_preserve_float32 != 0,
            p12.shader_signed_zero_inf_nan_preserve_float64 != 0,
        ];
        let exts = unsafe { instance.enumerate_device_extension_properties(pd) }
            .map_err(vkerr("enumerate extensions"))?;
        let has_ext = |name: &CStr| {
            exts.iter().any(|e| unsafe { CStr::from_ptr(e.extension_name.as_ptr()) } == name)
        };
        let has_float_atomics = has_ext(ash::ext::shader_atomic_float::NAME);
        // Query the optional features and enable what the device has.
        let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
        let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
        let mut fa = vk::PhysicalDeviceShaderAtomicFloatFeaturesEXT::default();
        {
            let mut f2 =
                vk::PhysicalDeviceFeatures2::default().push_next(&mut f11).push_next(&mut f12);
            if has_float_atomics {
                f2 = f2.push_next(&mut fa);
            }
            unsafe { instance.get_physical_device_features2(pd, &mut f2) };
        }
        let base = unsafe { instance.get_physical_device_features(pd) };
        let coop = coop::CoopSupport::query(
            &shared.entry,
            instance,
            pd,
            has_ext(coop::EXTENSION),
            f12.vulkan_memory_model != 0,
        );
        let core = vk::PhysicalDeviceFeatures::default()
            .shader_int64(base.shader_int64 != 0)
            .shader_int16(base.shader_int16 != 0)
            .shader_float64(base.shader_float64 != 0);
        let mut e11 = vk::PhysicalDeviceVulkan11Features::default()
            .storage_buffer16_bit_access(f11.storage_buffer16_bit_access != 0);
        let mut e12 = vk::PhysicalDeviceVulkan12Features::default()
            .storage_buffer8_bit_access(f12.storage_buffer8_bit_access != 0)
            .shader_int8(f12.shader_int8 != 0)
            .shader_float16(f12.shader_float16 != 0)
            .shader_buffer_int64_atomics(f12.shader_buffer_int64_atomics != 0)
            .shader_shared_int64_atomics(f12.shader_shared_int64_atomics != 0)
            .vulkan_memory_model(f12.vulkan_memory_model != 0);
        let mut ea = vk::PhysicalDeviceShaderAtomicFloatFeaturesEXT::default()
            .shader_buffer_float32_atomic_add(fa.shader_buffer_float32_atomic_add != 0)
            .shader_shared_float32_atomic_add(fa.shader_shared_float32_atomic_add != 0);
        let mut ef = vk::PhysicalDeviceFeatures2::default().features(core);
        let prio = [1.0f32];
        let qci =
            [vk::DeviceQueueCreateInfo::default().queue_family_index(qf).queue_priorities(&prio)];
        let mut ext_names = Vec::new();
        let mut dci = vk::DeviceCreateInfo::default()
            .queue_create_infos(&qci)
            .push_next(&mut ef)
            .push_next(&mut e11)
            .push_next(&mut e12);
        if has_float_atomics {
            ext_names.push(ash::ext::shader_atomic_float::NAME.as_ptr());
            dci = dci.push_next(&mut ea);
        }
        let mut ec =
            vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default().cooperative_matrix(true);
        if coop.enabled {
            ext_names.push(coop::EXTENSION.as_ptr());
            dci = dci.push_next(&mut ec);
        }
        dci = dci.enabled_extension_names(&ext_names);
        // SAFETY: valid create info; the device is destroyed in Drop.
        let device = unsafe {
            let _one = lifetimes();
            instance.create_device(pd, &dci, None)
        }
        .map_err(|e| unavailable(format!("cannot create a device on {name}: {e}")))?;
        let queue = Arc::new(RankedMutex::new(ranks::VULKAN_QUEUE, unsafe {
            device.get_device_queue(qf, 0)
        }));
        let memory = unsafe { instance.get_physical_device_memory_properties(pd) };
        let owner = Arc::new(Owner { device: device.clone() });
        let launcher =
            match Launcher::new(&owner, &queue, qf, props.limits.max_compute_work_group_count) {
                Ok(l) => Arc::new(l),
                Err(e) => {
                    // Dropping the owner destroys the device: it has no child objects.
                    drop(owner);
                    return Err(e);
                }
            };
        Ok(VulkanDevice {
            owner,
            device,
            queue_family: qf,
            memory,
            limits: props.limits,
            name,
            emulated: props.device_type == vk::PhysicalDeviceType::CPU,
            driver_version: props.driver_version,
            api_version: props.api_version,
            denorm_preserve,
            nan_preserve,
            float64: base.shader_float64 != 0,
            cache_id: program::CacheId {
                vendor: props.vendor_id,
                device: props.device_id,
                uuid: props.pipeline_cache_uuid,
            },
            flushes_f32_subnormals: false,
            warned_flush: std::sync::atomic::AtomicBool::new(false),
            exact_f64_fma: false,
            space: crate::device::memory::new_space(),
            launcher,
            coop,
        })
    }

    /// Whether this device's driver flushes f32 subnormals to zero, so that f32 results
    /// below 1.18e-38 in magnitude read as 0 where the interpreter keeps them. kiln asks
    /// every driver to keep them (`DenormPreserve`); a device that does not offer that mode
    /// is measured once when opened.
    pub fn flushes_f32_subnormals(&self) -> bool {
        self.flushes_f32_subnormals
    }

    /// Runs `2^-126 * 0.5` (a subnormal result) on the device: `true` when it gives 0.
    fn probe_f32_flush(&self) -> Result<bool, DeviceError> {
        let k = kiln_ir::parse_module(
            "kernel kiln_probe_subnormal(x: ptr<global, f32>) {\n  x[0] = x[1] * 0.5;\n}\n",
        )
        .map_err(|e| launch_err(format!("subnormal probe: {e:?}")))?
        .kernels
        .remove(0);
        let mut bufs = vec![Buffer::from_slice(&[0.0f32, f32::MIN_POSITIVE])];
        self.build_and_run(&k, &NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs)?;
        Ok(bufs[0].to_vec::<f32>().is_none_or(|v| v[0] == 0.0))
    }

    /// Whether this device's driver computes f64 `fma` with one rounding, as kiln's `fma`
    /// does, measured when it was opened: only then do kernels with f64 `fma` build here (the
    /// SPIR-V Vulkan flavour has no exact emulation of it; lavapipe's `Fma` rounds twice).
    pub fn exact_f64_fma(&self) -> bool {
        self.exact_f64_fma
    }

    /// Runs the driver's f64 `Fma` on inputs where one rounding and two differ (a product's
    /// rounding error, an overflowing product against an infinity, products near a rounding
    /// tie, a subnormal result): `true` when every result is the correctly rounded one.
    fn probe_f64_fma(&self) -> Result<bool, DeviceError> {
        let k = kiln_ir::parse_module(
            "kernel kiln_probe_fma(a: ptr<global, f64>, b: ptr<global, f64>, c: ptr<global, f64>) {
  let i: u32 = global_id(0);
  c[i] = fma(a[i], b[i], c[i]);
}
",
        )
        .map_err(|e| launch_err(format!("fma probe: {e:?}")))?
        .kernels
        .remove(0);
        let (a, b, c) = fma_probe_inputs();
        let want: Vec<u64> = (0..a.len()).map(|i| a[i].mul_add(b[i], c[i]).to_bits()).collect();
        let mut bufs = vec![Buffer::from_slice(&a), Buffer::from_slice(&b), Buffer::from_slice(&c)];
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
        self.build_and_run(&k, &NdRange::new(&[a.len() as u32]), &args, &mut bufs)?;
        let got = bufs[2].to_vec::<f64>().unwrap_or_default();
        Ok(got.iter().map(|v| v.to_bits()).eq(want))
    }

    /// The cooperative-matrix products this device runs, as `m16n8k16 f16 x f16 + f32 -> f32`
    /// (Subgroup scope, as the driver lists them; empty where VK_KHR_cooperative_matrix is
    /// not offered). Kernels with matrix operations need theirs listed here.
    pub fn cooperative_matrices(&self) -> Vec<String> {
        self.coop.products.iter().map(|p| p.to_string()).collect()
    }

    /// What eager submission has done on this device so far: the Vulkan objects it made
    /// (reused from launch to launch) and how often the host waited for the device.
    pub fn launch_stats(&self) -> LaunchStats {
        self.launcher.stats()
    }

    /// The device's limits, as it reports them (kiln checks kernels and launches against
    /// them).
    pub fn limits(&self) -> &vk::PhysicalDeviceLimits {
        &self.limits
    }

    fn load_program(
        &self,
        binary: &[u8],
        seed: Option<&[u8]>,
    ) -> Result<(Handle, Option<String>), DeviceError> {
        let a = artifact::decode(&self.name, binary)?;
        let (cache, rejected) = program::PipelineCache::new(&self.owner, &self.cache_id, seed)?;
        let cache = Arc::new(cache);
        let kernels = program::decode_kernels(&self.name, a, &cache)?;
        if !self.float64 {
            if let Some(k) = kernels.iter().find(|k| program::declares_float64(&k.words)) {
                return Err(DeviceError::Load {
                    device: self.name.clone(),
                    message: format!(
                        "kernel `{}` needs shaderFloat64 (it uses f64, or f32 `/`, `sqrt` or \
                         `fma`, which the Vulkan flavour computes exactly through f64) and \
                         this device lacks it",
                        k.entry
                    ),
                });
            }
        }
        for k in &kernels {
            self.coop
                .check(&self.name, &k.entry, &k.words)
                .map_err(|message| DeviceError::Load { device: self.name.clone(), message })?;
        }
        // A width whose DenormPreserve or SignedZeroInfNanPreserve the device cannot honour
        // loses the mode (declaring it there is invalid): the driver's default applies, which
        // keeps subnormals on lavapipe (Mesa 22 reports no DenormPreserve support); see
        // docs/vulkan.md.
        let supported = |mode: u32, w: u32| {
            let flags = if mode == program::NAN_PRESERVE {
                self.nan_preserve
            } else {
                self.denorm_preserve
            };
            match w {
                32 => flags[0],
                64 => flags[1],
                _ => false,
            }
        };
        let modes = [program::DENORM_PRESERVE, program::NAN_PRESERVE];
        let kernels = kernels
            .into_iter()
            .map(|k| {
                let all = |mode| {
                    program::mode_widths(&k.words, mode).into_iter().all(|w| supported(mode, w))
                };
                if modes.iter().all(|&m| all(m)) {
                    return k;
                }
                let words = modes.iter().fold(k.words.clone(), |words, &m| {
                    program::without_mode(&words, m, |w| supported(m, w))
                });
                Arc::new(program::VkKernel {
                    entry: k.entry.clone(),
                    signature: k.signature.clone(),
                    layout: k.layout.clone(),
                    words,
                    cache: k.cache.clone(),
                    cooperative: k.cooperative,
                    pipelines: RankedMutex::new(ranks::VULKAN_PIPELINES, Vec::new()),
                })
            })
            .collect::<Vec<_>>();
        if self.flushes_f32_subnormals {
            let uses_f32 = kernels
                .iter()
                .find(|k| program::mode_widths(&k.words, program::DENORM_PRESERVE).contains(&32));
            if let Some(k) = uses_f32 {
                if !self.warned_flush.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    eprintln!(
                        "kiln: warning: Vulkan device `{}` flushes f32 subnormals to zero (it \
                         offers no shaderDenormPreserveFloat32): in kernel `{}` and others, f32 \
                         values below 1.18e-38 in magnitude read as 0 where the interpreter \
                         keeps them (docs/vulkan.md)",
                        self.name, k.entry
                    );
                }
            }
        }
        Ok((Arc::new(VkProgram { kernels, cache }), rejected))
    }

    /// Checks a launch of a loaded kernel (`elems`: each buffer's element type and length)
    /// and works out its dispatch: work-group size and count, push constants, bindings. A
    /// ranged argument binds its range through the descriptor's offset, which must be a
    /// multiple of `minStorageBufferOffsetAlignment` (an eager launch stages other ranges
    /// first, see `resident.rs`; here they are refused, naming the limit).
    fn prepare_dispatch(
        &self,
        k: &VkKernel,
        range: &NdRange,
        args: &[Arg],
        elems: &[(Scalar, usize)],
    ) -> Result<resident::Dispatch, DeviceError> {
        let kernel = &k.signature;
        let local = check_launch(kernel, range, args, elems)?;
        coop::check_group(kernel.name(), k.cooperative, local)?;
        let layout = &k.layout;
        let mut push = vec![0u8; layout.push_size as usize];
        if push.len() < PUSH_SCALARS_AT as usize {
            return Err(launch_err("push-constant block smaller than the launch's fields"));
        }
        let groups = [0, 1, 2].map(|d| range.global[d] / local[d]);
        let groups = [0, 1, 2].map(|d| if d < range.dims { groups[d] } else { 1 });
        for (d, o) in range.offset.iter().enumerate() {
            let v = if d < range.dims { *o } else { 0 };
            push[4 * d..4 * d + 4].copy_from_slice(&v.to_le_bytes());
            let at = PUSH_NUM_GROUPS_AT as usize + 4 * d;
            push[at..at + 4].copy_from_slice(&groups[d].to_le_bytes());
        }
        // The layout may come from disk: every index and offset is checked, never trusted.
        for s in &layout.scalars {
            let Some(Arg::Scalar(imm)) = args.get(s.param) else {
                return Err(launch_err(format!("layout: parameter {} is not a scalar", s.param)));
            };
            let bits = imm.to_bits();
            let (at, n) = (s.offset as usize, if s.ty.bits() == 64 { 8 } else { 4 });
            let Some(slot) = push.get_mut(at..at + n) else {
                return Err(launch_err(format!("layout: push offset {at} out of range")));
            };
            slot.copy_from_slice(&bits.to_le_bytes()[..n]);
        }
        let mut bindings: Vec<resident::Binding> = Vec::new();
        for b in &layout.buffers {
            match args.get(b.param) {
                Some(Arg::Buffer(i)) if *i < elems.len() => bindings.push(resident::Binding {
                    binding: b.param as u32,
                    buffer: *i,
                    offset: 0,
                    range: vk::WHOLE_SIZE,
                }),
                // A zero-length range has no element to bind (and Vulkan wants a non-zero
                // range starting inside the buffer): the buffer is bound, which no valid
                // access of the kernel touches.
                Some(&Arg::Range { buffer, len: 0, .. }) if buffer < elems.len() => {
                    bindings.push(resident::Binding {
                        binding: b.param as u32,
                        buffer,
                        offset: 0,
                        range: vk::WHOLE_SIZE,
                    })
                }
                Some(&Arg::Range { buffer, offset, len }) if buffer < elems.len() => {
                    let size = elems[buffer].0.size_bytes() as u64;
                    let at = offset as u64 * size;
                    let align = self.limits.min_storage_buffer_offset_alignment.max(1);
                    if !at.is_multiple_of(align) {
                        return Err(launch_err(format!(
                            "kernel `{}`: argument {} binds elements from offset {offset} of \
                             buffer {buffer}, byte {at}, which is not a multiple of this \
                             device's minStorageBufferOffsetAlignment ({align} bytes); a \
                             recorded launch cannot stage it",
                            kernel.name(),
                            b.param
                        )));
                    }
                    bindings.push(resident::Binding {
                        binding: b.param as u32,
                        buffer,
                        offset: at,
                        range: len as u64 * size,
                    })
                }
                _ => {
                    return Err(launch_err(format!(
                        "layout: parameter {} is not a buffer",
                        b.param
                    )))
                }
            }
        }
        self.check_limits(kernel, local, layout.push_size)?;
        Ok(resident::Dispatch { local, groups, push, bindings })
    }
}

/// Inputs `(a, b, c)` on which `fma(a, b, c)` rounded once differs from `a * b + c` rounded
/// twice: the probe of [`VulkanDevice::exact_f64_fma`].
fn fma_probe_inputs() -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let e = f64::EPSILON;
    let tiny = f64::MIN_POSITIVE;
    let cases = [
        // The product's rounding error: -2^-104 once, 0 twice.
        (1.0 + e, 1.0 - e, -1.0),
        // The product overflows: -inf once, NaN twice.
        (1e308, 10.0, f64::NEG_INFINITY),
        (f64::MAX, 2.0, -f64::MAX),
        // Near a tie: 1 + 2^-53 + 2^-104 rounds up once, to even (down) twice.
        (1.0 + 2.0 * e, 0.5 + e / 4.0, 0.5 - e),
        // A subnormal result whose product's low part decides the rounding.
        (tiny * (1.0 + e), 0.75 + e, -(tiny * 0.75)),
        (3.0, 1.0 / 3.0, -1.0),
        (0.1, 10.0, -1.0),
    ];
    (
        cases.iter().map(|c| c.0).collect(),
        cases.iter().map(|c| c.1).collect(),
        cases.iter().map(|c| c.2).collect(),
    )
}

/// The program binary [`VulkanDevice`]'s [`Device::build`] makes: the module built by the
/// build driver for the Vulkan-flavour SPIR-V target, each kernel's module with its binding
/// layout, and the kernels' signatures. Needs no Vulkan device (benchmarks and tools use it
/// to build what the device would; f64 `fma` is refused, as on a device whose driver
/// rounds it twice).
pub fn build_spirv_program(
    module: &Verified,
    options: &BuildOptions,
) -> Result<Vec<u8>, DeviceError> {
    build_checked(Spirv::new(Flavour::Vulkan), module, options, |_, _| Ok(()))
}

/// [`build_spirv_program`] for `target`, with `check` run on each kernel and its layout
/// before encoding.
fn build_checked(
    target: Spirv,
    module: &Verified,
    options: &BuildOptions,
    check: impl Fn(&Kernel, &VulkanLayout) -> Result<(), String>,
) -> Result<Vec<u8>, DeviceError> {
    let built = driver::build_verified(&target, module.clone(), options)
        .map_err(|e| DeviceError::build("vulkan", e))?;
    let kernels = &built.kernels.kernels;
    let mut blobs = Vec::with_capacity(kernels.len());
    for (k, m) in kernels.iter().zip(&built.output) {
        check(k, &m.layout).map_err(|e| DeviceError::build("vulkan", e))?;
        blobs.push((m.entry.clone(), program::encode_kernel(&m.layout, &m.words)));
    }
    Ok(artifact::encode(kernels, &blobs))
}

/// The most bytes of private arrays one work-item may declare on a Vulkan device. Vulkan has
/// no such limit to query, and drivers crash or hang on huge per-invocation arrays
/// (lavapipe keeps them on its threads' stacks), so kiln sets one it has seen work.
pub const MAX_PRIVATE_BYTES: u64 = 64 * 1024;

impl Device for VulkanDevice {
    /// The device's name (e.g. `llvmpipe (LLVM 15.0.6, 256 bits)` for lavapipe).
    fn name(&self) -> String {
        self.name.clone()
    }

    fn kind(&self) -> DeviceKind {
        DeviceKind::Vulkan
    }

    /// A software Vulkan driver (lavapipe, SwiftShader) reports itself as a CPU device.
    fn emulated(&self) -> bool {
        self.emulated
    }

    /// The driver's and the API's versions, as the device reports them, whether it
    /// honours `DenormPreserve` for f32 and f64 (which changes the modules it runs), and
    /// what was measured at open (f32 flushing, one-rounding f64 `fma`).
    fn version(&self) -> String {
        let [p32, p64] = self.denorm_preserve;
        let [n32, n64] = self.nan_preserve;
        format!(
            "driver {:#x} api {:#x} denorm-preserve f32 {p32} f64 {p64} nan-preserve f32 {n32} \
             f64 {n64} flushes-f32 {} exact-fma-f64 {}",
            self.driver_version, self.api_version, self.flushes_f32_subnormals, self.exact_f64_fma
        )
    }

    /// Builds as [`build_spirv_program`] does, and refuses a kernel that needs more than
    /// this device has (buffer bindings, push constants, shared memory, work-group size) or
    /// more private memory than [`MAX_PRIVATE_BYTES`]: drivers crash or hang on those.
    fn build(&self, module: &Verified, options: &BuildOptions) -> Result<Vec<u8>, DeviceError> {
        let target = Spirv { flavour: Flavour::Vulkan, exact_f64_fma: self.exact_f64_fma };
        build_checked(target, module, options, |k, layout| self.check_kernel(k, layout))
    }

    fn load(&self, binary: &[u8]) -> Result<Handle, DeviceError> {
        Ok(self.load_program(binary, None)?.0)
    }

    /// The program's pipeline cache data, when a pipeline was created since the last call.
    fn driver_cache(&self, program: &Handle) -> Option<Vec<u8>> {
        handle_as::<VkProgram>(program, "program").ok()?.cache.data_if_changed()
    }

    /// Loads with the pipeline cache data of an earlier process: used only when its header
    /// names this device (vendor, device, pipeline-cache UUID), otherwise ignored and why
    /// returned.
    fn load_with_driver_cache(
        &self,
        binary: &[u8],
        driver_cache: &[u8],
    ) -> Result<(Handle, Option<String>), DeviceError> {
        self.load_program(binary, Some(driver_cache))
    }

    fn kernel(&self, program: &Handle, name: &str) -> Result<Handle, DeviceError> {
        let p = handle_as::<VkProgram>(program, "program")?;
        match p.kernels.iter().find(|k| k.entry == name) {
            Some(k) => Ok(k.clone()),
            None => Err(DeviceError::no_kernel(name, p.kernels.iter().map(|k| k.entry.as_str()))),
        }
    }

    /// Runs the kernel like the interpreter's `run`: the buffers are copied into device
    /// memory, the kernel runs there in place, and they are copied back.
    fn run(
        &self,
        kernel: &Handle,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
    ) -> Result<(), DeviceError> {
        let mut resident = Vec::with_capacity(buffers.len());
        for b in buffers.iter() {
            let mem = self.alloc_mem(b.as_bytes().len())?;
            mem.upload(b.as_bytes())?;
            resident.push(ResidentBuffer { mem: Arc::new(mem), elem: b.elem(), len: b.len() });
        }
        self.launch_resident(kernel, range, args, &resident)?;
        for (b, r) in buffers.iter_mut().zip(&resident) {
            r.mem.download(b.as_bytes_mut())?;
        }
        Ok(())
    }

    fn memory_space(&self) -> Option<u64> {
        Some(self.space)
    }

    fn alloc(&self, bytes: usize) -> Result<Memory, DeviceError> {
        Ok(Arc::new(self.alloc_mem(bytes)?))
    }

    /// Runs the kernel on buffers in this device's memory, in place: returns once it is
    /// submitted; later launches and replays run after it, and [`Device::finish`] and any
    /// host access to a buffer's device copy wait for it.
    fn run_resident(
        &self,
        kernel: &Handle,
        range: &NdRange,
        args: &[Arg],
        buffers: &[ResidentBuffer],
    ) -> Result<(), DeviceError> {
        self.launch_resident(kernel, range, args, buffers)
    }

    /// One command buffer for all of `steps` (dispatches, copies, fills), with pipelines
    /// and descriptor sets made now and a barrier before each step that depends on an
    /// earlier one.
    fn record(&self, steps: &[RecordStep]) -> Result<Option<Box<dyn Recording>>, DeviceError> {
        Ok(Some(Box::new(self.record_steps(steps)?)))
    }

    /// Waits for every launch and replay submitted so far.
    fn finish(&self, timeout: Option<std::time::Duration>) -> Result<bool, DeviceError> {
        self.launcher.finish(timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::{shared, VulkanDevice};

    /// Devices come and go, on any thread; the instance stays, and the driver with it
    /// ([`super::Shared`]).
    #[test]
    fn the_instance_outlives_every_device() {
        let Some(d) = kiln_ir::testing::require("KILN_REQUIRE_TOOLS", VulkanDevice::open()) else {
            return;
        };
        let first = shared().unwrap().instance.handle();
        drop(d);
        std::thread::spawn(|| drop(VulkanDevice::open().unwrap())).join().unwrap();
        assert_eq!(shared().unwrap().instance.handle(), first);
    }
}
