//! Buffers in Vulkan memory between launches, pipelines made once per kernel and work-group
//! size, and command buffers recorded once for a command graph's device partition.
//!
//! A buffer's storage is one `VkBuffer` in host-visible, coherent memory (device-local as
//! well where the device has such memory and the allocation fits; host-visible only
//! otherwise), mapped for its whole life: an upload or a download is a `memcpy`, and a
//! launch binds it as it is. A launch (eager, or one of a recording) binds the kernel's
//! cached pipeline, a descriptor set naming the buffers and the push constants
//! (offset, group counts, scalars), and dispatches. A recording also holds a graph's
//! buffer copies (`vkCmdCopyBuffer`) and fills (`vkCmdFillBuffer` of the value's 4-byte
//! pattern; an 8-byte value whose halves differ is copied from a small pattern buffer made
//! at record time, tiled over the destination), puts a compute/transfer barrier before each
//! step that depends on an earlier one, and a compute/transfer-to-host barrier at the end,
//! so the host sees every write once the fence has signalled. A recording starts with a
//! barrier against earlier submissions (eager launches still in flight) and may be pending
//! more than once (`SIMULTANEOUS_USE`): a replay returns once submitted, like an eager
//! launch (see `launcher.rs`).

use std::sync::{Arc, Weak};

use ash::vk;

use super::launcher::Launcher;
use super::limits::split_groups;
use super::program::VkKernel;
use super::{launch_err, vkerr, Owner, VulkanDevice};
use crate::device::memory::{stage_ranges, Staged};
use crate::device::ResidentBuffer;
use crate::device::{handle_as, DeviceMemory, Handle, KeepAlive, RecordStep, Recording};
use crate::error::DeviceError;

/// A buffer's storage: a mapped `VkBuffer` and its memory.
pub(super) struct VkMem {
    owner: Arc<Owner>,
    /// The device's launcher, whose submissions a host access waits for (gone with the
    /// device, which waits for them first).
    launcher: Weak<Launcher>,
    pub(super) buf: vk::Buffer,
    mem: vk::DeviceMemory,
    ptr: *mut u8,
    bytes: usize,
}

// The mapping is written and read only by the runtime, which orders those accesses with
// the launches using the buffer (the scheduler's dependencies); Vulkan objects are handles.
unsafe impl Send for VkMem {}
unsafe impl Sync for VkMem {}

impl DeviceMemory for VkMem {
    fn bytes(&self) -> usize {
        self.bytes
    }
    fn upload(&self, data: &[u8]) -> Result<(), DeviceError> {
        let n = data.len().min(self.bytes);
        self.finish()?;
        // SAFETY: the mapping holds `bytes` bytes; no launch uses the buffer meanwhile
        // (coherent memory: the next submission sees the write).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr, n) };
        Ok(())
    }
    fn download(&self, out: &mut [u8]) -> Result<(), DeviceError> {
        let n = out.len().min(self.bytes);
        self.finish()?;
        // SAFETY: as in `upload`; the writing launches' fences have signalled after a
        // compute-to-host barrier.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr, out.as_mut_ptr(), n) };
        Ok(())
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl VkMem {
    /// Waits for the device's submissions in flight: a host access must not overlap a
    /// launch that reads or writes the buffer.
    fn finish(&self) -> Result<(), DeviceError> {
        match self.launcher.upgrade() {
            Some(l) => l.finish(None).map(drop),
            None => Ok(()),
        }
    }
}

impl Drop for VkMem {
    fn drop(&mut self) {
        let d = &self.owner.device;
        // SAFETY: no submission uses the buffer any more (launches wait for their fences;
        // recordings hold their memory).
        unsafe {
            d.unmap_memory(self.mem);
            d.destroy_buffer(self.buf, None);
            d.free_memory(self.mem, None);
        }
    }
}

impl VulkanDevice {
    /// A mapped storage buffer of at least `bytes` bytes, zeroed.
    pub(super) fn alloc_mem(&self, bytes: usize) -> Result<VkMem, DeviceError> {
        let d = &self.device;
        let size = (bytes.max(4) as u64).div_ceil(16) * 16;
        let bci = vk::BufferCreateInfo::default()
            .size(size)
            .usage(
                vk::BufferUsageFlags::STORAGE_BUFFER
                    | vk::BufferUsageFlags::TRANSFER_SRC
                    | vk::BufferUsageFlags::TRANSFER_DST,
            )
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        let host = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        // SAFETY: valid create infos on a live device; every object is destroyed on failure
        // or by `VkMem`'s Drop.
        unsafe {
            let buf = d.create_buffer(&bci, None).map_err(vkerr("create buffer"))?;
            let req = d.get_buffer_memory_requirements(buf);
            let mp = &self.memory;
            let types = |want: vk::MemoryPropertyFlags| {
                (0..mp.memory_type_count).filter(move |&i| {
                    req.memory_type_bits & (1 << i) != 0
                        && mp.memory_types[i as usize].property_flags.contains(want)
                })
            };
            // Device-local host-visible memory first (lavapipe's, ReBAR), then any
            // host-visible memory: the first allocation that succeeds.
            let mut mem = None;
            let mut last = vk::Result::ERROR_OUT_OF_DEVICE_MEMORY;
            for ty in types(host | vk::MemoryPropertyFlags::DEVICE_LOCAL).chain(types(host)) {
                let mai = vk::MemoryAllocateInfo::default()
                    .allocation_size(req.size)
                    .memory_type_index(ty);
                match d.allocate_memory(&mai, None) {
                    Ok(m) => {
                        mem = Some(m);
                        break;
                    }
                    Err(e) => last = e,
                }
            }
            let Some(mem) = mem else {
                d.destroy_buffer(buf, None);
                return Err(DeviceError::Driver(format!(
                    "vulkan: no host-visible coherent memory for {size} bytes: {last}"
                )));
            };
            let fail = |e| {
                d.destroy_buffer(buf, None);
                d.free_memory(mem, None);
                e
            };
            d.bind_buffer_memory(buf, mem, 0).map_err(vkerr("bind memory")).map_err(fail)?;
            let p = d
                .map_memory(mem, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty())
                .map_err(vkerr("map"))
                .map_err(fail)?;
            std::ptr::write_bytes(p as *mut u8, 0, size as usize);
            Ok(VkMem {
                owner: self.owner.clone(),
                launcher: Arc::downgrade(&self.launcher),
                buf,
                mem,
                ptr: p as *mut u8,
                bytes: bytes.max(1),
            })
        }
    }
}

/// A kernel's compute pipeline for one work-group size, with its layouts.
pub(super) struct Pipeline {
    owner: Arc<Owner>,
    shader: vk::ShaderModule,
    pub(super) set_layout: vk::DescriptorSetLayout,
    pub(super) layout: vk::PipelineLayout,
    pub(super) pipeline: vk::Pipeline,
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        let d = &self.owner.device;
        // SAFETY: no submission uses it (launches wait; recordings hold their pipelines);
        // null handles (a half-made pipeline) are ignored.
        unsafe {
            d.destroy_pipeline(self.pipeline, None);
            d.destroy_pipeline_layout(self.layout, None);
            d.destroy_descriptor_set_layout(self.set_layout, None);
            d.destroy_shader_module(self.shader, None);
        }
    }
}

/// The kernel's pipeline for work-group size `local` with a `push`-byte push-constant
/// block: made once (through the program's pipeline cache) and kept with the kernel.
pub(super) fn pipeline(
    owner: &Arc<Owner>,
    k: &VkKernel,
    local: [u32; 3],
    push: u32,
) -> Result<Arc<Pipeline>, DeviceError> {
    let mut cached = k.pipelines.lock();
    if let Some((_, p)) = cached.iter().find(|(l, _)| *l == local) {
        return Ok(p.clone());
    }
    let d = &owner.device;
    let mut p = Pipeline {
        owner: owner.clone(),
        shader: vk::ShaderModule::null(),
        set_layout: vk::DescriptorSetLayout::null(),
        layout: vk::PipelineLayout::null(),
        pipeline: vk::Pipeline::null(),
    };
    // SAFETY: valid create infos on a live device; `p`'s Drop destroys what was made.
    unsafe {
        let sci = vk::ShaderModuleCreateInfo::default().code(&k.words);
        p.shader = d.create_shader_module(&sci, None).map_err(vkerr("create shader module"))?;
        let lb: Vec<_> = k
            .layout
            .buffers
            .iter()
            .map(|b| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(b.param as u32)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let dslci = vk::DescriptorSetLayoutCreateInfo::default().bindings(&lb);
        p.set_layout = d.create_descriptor_set_layout(&dslci, None).map_err(vkerr("set layout"))?;
        let pcr = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .offset(0)
            .size(push)];
        let layouts = [p.set_layout];
        let plci = vk::PipelineLayoutCreateInfo::default()
            .set_layouts(&layouts)
            .push_constant_ranges(&pcr);
        p.layout = d.create_pipeline_layout(&plci, None).map_err(vkerr("pipeline layout"))?;
        let entries: Vec<_> = (0..3)
            .map(|i| vk::SpecializationMapEntry::default().constant_id(i).offset(4 * i).size(4))
            .collect();
        let spec_data: Vec<u8> = local.iter().flat_map(|x| x.to_le_bytes()).collect();
        let spec = vk::SpecializationInfo::default().map_entries(&entries).data(&spec_data);
        let name =
            std::ffi::CString::new(k.entry.as_str()).map_err(|_| launch_err("bad entry name"))?;
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(p.shader)
            .name(&name)
            .specialization_info(&spec);
        let cpci = [vk::ComputePipelineCreateInfo::default()
            .flags(vk::PipelineCreateFlags::DISPATCH_BASE)
            .stage(stage)
            .layout(p.layout)];
        p.pipeline = k.cache.create_pipeline(&cpci).map_err(vkerr("create pipeline"))?;
    }
    let p = Arc::new(p);
    cached.push((local, p.clone()));
    Ok(p)
}

/// What one dispatch needs besides its pipeline: sizes, push constants, bindings.
pub(super) struct Dispatch {
    pub local: [u32; 3],
    pub groups: [u32; 3],
    pub push: Vec<u8>,
    pub bindings: Vec<Binding>,
}

impl Dispatch {
    /// Records this dispatch into `cb`: the pipeline, the descriptor set (when it binds a
    /// buffer), the push constants, and the groups, split into several dispatches with a
    /// base group where there are more than one may have (the module reads the launch's
    /// counts from push constants), in the order of the unsplit launch.
    ///
    /// # Safety
    /// `cb` is a command buffer of `d` in the recording state; `p` and `set` are `d`'s and
    /// `set` is written for `p`'s layout.
    pub(super) unsafe fn record<'a>(
        &'a self,
        d: &ash::Device,
        cb: vk::CommandBuffer,
        p: &Pipeline,
        set: vk::DescriptorSet,
        max_groups: [u32; 3],
        bound: &mut Bound<'a>,
    ) {
        // What the command buffer has bound already is not bound again: a recorded chain of
        // one kernel binds its pipeline once, and its set and push constants only where
        // they change.
        if bound.pipeline != p.pipeline {
            d.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, p.pipeline);
            *bound = Bound { pipeline: p.pipeline, ..Bound::default() };
        }
        if !self.bindings.is_empty() && bound.set != set {
            d.cmd_bind_descriptor_sets(
                cb,
                vk::PipelineBindPoint::COMPUTE,
                p.layout,
                0,
                &[set],
                &[],
            );
            bound.set = set;
        }
        if bound.push != Some(&self.push[..]) {
            d.cmd_push_constants(cb, p.layout, vk::ShaderStageFlags::COMPUTE, 0, &self.push);
            bound.push = Some(&self.push);
        }
        for (base, count) in split_groups(self.groups, max_groups) {
            d.cmd_dispatch_base(cb, base[0], base[1], base[2], count[0], count[1], count[2]);
        }
    }
}

/// What a command buffer being recorded has bound: the pipeline, the descriptor set and the
/// push constants of the last dispatch (null and `None` before the first).
#[derive(Default)]
pub(super) struct Bound<'a> {
    pipeline: vk::Pipeline,
    set: vk::DescriptorSet,
    push: Option<&'a [u8]>,
}

impl Dispatch {
    /// Whether this dispatch binds the same buffer ranges (`mine` naming its buffers) at the
    /// same bindings as `other` (on `theirs`): one descriptor set serves both.
    fn binds_as(&self, mine: &[&VkMem], other: &Dispatch, theirs: &[&VkMem]) -> bool {
        self.bindings.len() == other.bindings.len()
            && self.bindings.iter().zip(&other.bindings).all(|(a, b)| {
                (a.binding, a.offset, a.range) == (b.binding, b.offset, b.range)
                    && mine.get(a.buffer).map(|m| m.buf) == theirs.get(b.buffer).map(|m| m.buf)
            })
    }
}

/// One storage-buffer descriptor of a dispatch.
pub(super) struct Binding {
    /// The binding number (the parameter's index).
    pub binding: u32,
    /// The launch's buffer it names.
    pub buffer: usize,
    /// The first byte bound (a ranged argument's offset, aligned).
    pub offset: u64,
    /// The bytes bound (`vk::WHOLE_SIZE` for the rest of the buffer).
    pub range: u64,
}

/// A command pool with one command buffer and a descriptor pool with one set per launch:
/// what a recording submits.
struct Commands {
    owner: Arc<Owner>,
    pool: vk::DescriptorPool,
    cmd_pool: vk::CommandPool,
    cb: vk::CommandBuffer,
}

impl Drop for Commands {
    fn drop(&mut self) {
        let d = &self.owner.device;
        // SAFETY: no submission is in flight (the launcher keeps the recording alive until
        // its replays have finished); null handles are ignored.
        unsafe {
            d.destroy_command_pool(self.cmd_pool, None);
            d.destroy_descriptor_pool(self.pool, None);
        }
    }
}

/// One step to encode, and whether a barrier must come first (it depends on an earlier
/// step).
struct Encode<'a> {
    work: Work<'a>,
    barrier: bool,
}

/// What one encoded step does.
enum Work<'a> {
    /// A launch: its pipeline, dispatch and buffers (by `Dispatch::bindings`).
    Dispatch { pipeline: Arc<Pipeline>, dispatch: Dispatch, buffers: Vec<&'a VkMem> },
    /// `vkCmdCopyBuffer` with these regions.
    Copy { src: vk::Buffer, dst: vk::Buffer, regions: Vec<vk::BufferCopy> },
    /// `vkCmdFillBuffer` of `size` bytes from the start with the 4-byte pattern `data`.
    Fill { dst: vk::Buffer, size: u64, data: u32 },
}

impl Encode<'_> {
    fn dispatch(&self) -> Option<(&Arc<Pipeline>, &Dispatch, &[&VkMem])> {
        match &self.work {
            Work::Dispatch { pipeline, dispatch, buffers } => Some((pipeline, dispatch, buffers)),
            _ => None,
        }
    }
}

impl VulkanDevice {
    /// Records `launches` into a fresh command buffer, ready to submit (again and again, even
    /// while an earlier submission is pending).
    fn encode(&self, launches: &[Encode<'_>]) -> Result<Commands, DeviceError> {
        let d = &self.device;
        let mut c = Commands {
            owner: self.owner.clone(),
            pool: vk::DescriptorPool::null(),
            cmd_pool: vk::CommandPool::null(),
            cb: vk::CommandBuffer::null(),
        };
        let dispatches: Vec<_> = launches.iter().filter_map(Encode::dispatch).collect();
        // A dispatch binding what the one before binds, through the same set layout, shares
        // its descriptor set: `owners` are the dispatches with a set of their own, and
        // `set_of[i]` the set (an index into them) dispatch `i` binds.
        let mut owners = Vec::with_capacity(dispatches.len());
        let mut set_of = Vec::with_capacity(dispatches.len());
        for (i, (p, dispatch, buffers)) in dispatches.iter().enumerate() {
            let shares = i > 0 && {
                let (q, before, theirs) = &dispatches[i - 1];
                q.set_layout == p.set_layout && dispatch.binds_as(buffers, before, theirs)
            };
            if !shares {
                owners.push(dispatches[i]);
            }
            set_of.push(owners.len() - 1);
        }
        let nbind: usize = owners.iter().map(|l| l.1.bindings.len()).sum();
        // SAFETY: objects made from valid infos on a live device, destroyed by `c`'s Drop;
        // the descriptor writes name live buffers, which the caller keeps alive with `c`.
        unsafe {
            let ps = [vk::DescriptorPoolSize::default()
                .ty(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(nbind.max(1) as u32)];
            let dpci = vk::DescriptorPoolCreateInfo::default()
                .max_sets(owners.len().max(1) as u32)
                .pool_sizes(&ps);
            c.pool = d.create_descriptor_pool(&dpci, None).map_err(vkerr("descriptor pool"))?;
            let layouts: Vec<_> = owners.iter().map(|l| l.0.set_layout).collect();
            let sets = if layouts.is_empty() {
                Vec::new()
            } else {
                let dsai = vk::DescriptorSetAllocateInfo::default()
                    .descriptor_pool(c.pool)
                    .set_layouts(&layouts);
                d.allocate_descriptor_sets(&dsai).map_err(vkerr("descriptor set"))?
            };
            for ((_, dispatch, buffers), &set) in owners.iter().zip(&sets) {
                let infos: Vec<[vk::DescriptorBufferInfo; 1]> = dispatch
                    .bindings
                    .iter()
                    .map(|b| {
                        [vk::DescriptorBufferInfo::default()
                            .buffer(buffers[b.buffer].buf)
                            .offset(b.offset)
                            .range(b.range)]
                    })
                    .collect();
                let writes: Vec<_> = dispatch
                    .bindings
                    .iter()
                    .zip(&infos)
                    .map(|(b, info)| {
                        vk::WriteDescriptorSet::default()
                            .dst_set(set)
                            .dst_binding(b.binding)
                            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                            .buffer_info(info)
                    })
                    .collect();
                d.update_descriptor_sets(&writes, &[]);
            }
            let cpci = vk::CommandPoolCreateInfo::default().queue_family_index(self.queue_family);
            c.cmd_pool = d.create_command_pool(&cpci, None).map_err(vkerr("command pool"))?;
            let cbai = vk::CommandBufferAllocateInfo::default()
                .command_pool(c.cmd_pool)
                .level(vk::CommandBufferLevel::PRIMARY)
                .command_buffer_count(1);
            c.cb = d.allocate_command_buffers(&cbai).map_err(vkerr("command buffer"))?[0];
            let bi = vk::CommandBufferBeginInfo::default()
                .flags(vk::CommandBufferUsageFlags::SIMULTANEOUS_USE);
            d.begin_command_buffer(c.cb, &bi).map_err(vkerr("begin"))?;
            // A barrier waits for the stages the earlier steps used (all of them, for the
            // first step: eager launches and replays submitted before return before they
            // finish) and makes their writes visible to this step's stage: no wider, so a
            // chain of dispatches waits for compute work only.
            let transfer = vk::PipelineStageFlags::TRANSFER;
            let compute = vk::PipelineStageFlags::COMPUTE_SHADER;
            let mut used = vk::PipelineStageFlags::empty();
            let mut set_of = set_of.into_iter();
            let mut bound = Bound::default();
            for (i, l) in launches.iter().enumerate() {
                let stage = if l.dispatch().is_some() { compute } else { transfer };
                if l.barrier || i == 0 {
                    let src = if i == 0 { compute | transfer } else { used };
                    let mut writes = vk::AccessFlags::empty();
                    if src.contains(compute) {
                        writes |= vk::AccessFlags::SHADER_WRITE;
                    }
                    if src.contains(transfer) {
                        writes |= vk::AccessFlags::TRANSFER_WRITE;
                    }
                    // The first barrier also orders the later steps that have none of their
                    // own (no dependency inside the recording) after earlier submissions, so
                    // it reaches both stages whatever the first step's is.
                    let dst = if i == 0 { compute | transfer } else { stage };
                    let mut access = vk::AccessFlags::empty();
                    if dst.contains(compute) {
                        access |= vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE;
                    }
                    if dst.contains(transfer) {
                        access |= vk::AccessFlags::TRANSFER_READ | vk::AccessFlags::TRANSFER_WRITE;
                    }
                    let b = [vk::MemoryBarrier::default()
                        .src_access_mask(writes)
                        .dst_access_mask(access)];
                    d.cmd_pipeline_barrier(
                        c.cb,
                        src,
                        dst,
                        vk::DependencyFlags::empty(),
                        &b,
                        &[],
                        &[],
                    );
                }
                used |= stage;
                let (p, dispatch) = match &l.work {
                    Work::Dispatch { pipeline, dispatch, .. } => (pipeline, dispatch),
                    Work::Copy { src, dst, regions } => {
                        d.cmd_copy_buffer(c.cb, *src, *dst, regions);
                        continue;
                    }
                    Work::Fill { dst, size, data } => {
                        d.cmd_fill_buffer(c.cb, *dst, 0, *size, *data);
                        continue;
                    }
                };
                let set = set_of.next().and_then(|i| sets.get(i).copied()).unwrap_or_default();
                let max = self.limits.max_compute_work_group_count;
                dispatch.record(d, c.cb, p, set, max, &mut bound);
            }
            let b = [vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE)
                .dst_access_mask(vk::AccessFlags::HOST_READ)];
            d.cmd_pipeline_barrier(
                c.cb,
                compute | transfer,
                vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &b,
                &[],
                &[],
            );
            d.end_command_buffer(c.cb).map_err(vkerr("end"))?;
        }
        Ok(c)
    }

    /// One launch's pipeline, dispatch and buffers, checked.
    fn encode_launch<'a>(
        &self,
        kernel: &Handle,
        range: &kiln_ir::launch::NdRange,
        args: &[kiln_ir::launch::Arg],
        buffers: &'a [ResidentBuffer],
        barrier: bool,
    ) -> Result<Encode<'a>, DeviceError> {
        let k = handle_as::<VkKernel>(kernel, "kernel")?;
        let elems: Vec<_> = buffers.iter().map(|b| (b.elem, b.len)).collect();
        let dispatch = self.prepare_dispatch(k, range, args, &elems)?;
        let mems = buffers.iter().map(vk_mem).collect::<Result<Vec<_>, _>>()?;
        let pipeline = pipeline(&self.owner, k, dispatch.local, dispatch.push.len() as u32)?;
        Ok(Encode { work: Work::Dispatch { pipeline, dispatch, buffers: mems }, barrier })
    }

    /// Runs one launch on resident buffers: returns once it is submitted (see
    /// `launcher.rs`), unless ranges were staged, whose copying back waits for it.
    pub(super) fn launch_resident(
        &self,
        kernel: &Handle,
        range: &kiln_ir::launch::NdRange,
        args: &[kiln_ir::launch::Arg],
        buffers: &[ResidentBuffer],
    ) -> Result<(), DeviceError> {
        let staged = self.stage_unaligned(args, buffers)?;
        let (args, buffers) = match &staged {
            Some(s) => (&s.args[..], &s.buffers[..]),
            None => (args, buffers),
        };
        let k = handle_as::<VkKernel>(kernel, "kernel")?;
        let elems: Vec<_> = buffers.iter().map(|b| (b.elem, b.len)).collect();
        let dispatch = self.prepare_dispatch(k, range, args, &elems)?;
        let mems = buffers.iter().map(vk_mem).collect::<Result<Vec<_>, _>>()?;
        let pipeline = pipeline(&self.owner, k, dispatch.local, dispatch.push.len() as u32)?;
        let keep = buffers.iter().map(|b| b.mem.clone());
        self.launcher.dispatch(&pipeline, &dispatch, &mems, keep)?;
        match staged {
            Some(s) => s.copy_back(),
            None => Ok(()),
        }
    }

    /// A launch's ranged arguments whose byte offset is not a multiple of
    /// `minStorageBufferOffsetAlignment` (a descriptor cannot start there), staged into
    /// buffers of their own ([`crate::device::memory::stage_ranges`]); `None` when there are
    /// none.
    fn stage_unaligned(
        &self,
        args: &[kiln_ir::launch::Arg],
        buffers: &[ResidentBuffer],
    ) -> Result<Option<Staged>, DeviceError> {
        // Most launches bind no range: nothing to stage, and no message to format.
        if !args.iter().any(|a| matches!(a, kiln_ir::launch::Arg::Range { .. })) {
            return Ok(None);
        }
        let align = self.limits.min_storage_buffer_offset_alignment.max(1);
        let limit = format!("this device's minStorageBufferOffsetAlignment ({align} bytes)");
        stage_ranges(args, buffers, align, &limit, |bytes| {
            Ok(Arc::new(self.alloc_mem(bytes)?) as crate::device::Memory)
        })
    }

    /// Records `steps` into one command buffer (see the module docs).
    pub(super) fn record_steps(&self, steps: &[RecordStep]) -> Result<VkGraph, DeviceError> {
        let mut enc = Vec::with_capacity(steps.len());
        let mut patterns = Vec::new();
        for (i, st) in steps.iter().enumerate() {
            if st.after().iter().any(|&j| j >= i) {
                return Err(launch_err(format!("step {i} is to run after a later step")));
            }
            let barrier = !st.after().is_empty();
            let work = match st {
                RecordStep::Launch(l) => {
                    self.encode_launch(&l.kernel, &l.range, &l.args, &l.buffers, barrier)?.work
                }
                RecordStep::Copy(cp) => {
                    let src = vk_mem(&cp.src)?;
                    let dst = vk_mem(&cp.dst)?;
                    if cp.src.elem != cp.dst.elem || cp.src.len > cp.dst.len {
                        return Err(launch_err(
                            "a copy's buffers differ in element type, or the destination is \
                             shorter",
                        ));
                    }
                    let size = (cp.src.len * cp.src.elem.size_bytes()) as u64;
                    if size == 0 {
                        continue;
                    }
                    let regions = vec![vk::BufferCopy { src_offset: 0, dst_offset: 0, size }];
                    Work::Copy { src: src.buf, dst: dst.buf, regions }
                }
                RecordStep::Fill(f) => {
                    let dst = vk_mem(&f.dst)?;
                    let es = f.dst.elem.size_bytes();
                    if f.value.len() != es {
                        return Err(launch_err(format!(
                            "a fill value of {} bytes for elements of {es}",
                            f.value.len()
                        )));
                    }
                    let bytes = f.dst.len * es;
                    if bytes == 0 {
                        continue;
                    }
                    match fill_word(&f.value) {
                        // Rounded up to whole words: the storage is allocated in 16-byte
                        // units, and bytes past the buffer's are never read.
                        Some(data) => {
                            Work::Fill { dst: dst.buf, size: bytes.div_ceil(4) as u64 * 4, data }
                        }
                        None => {
                            // A pattern buffer of whole values, copied over the destination
                            // tile by tile (one copy command, many regions).
                            let tile = bytes.min((64 << 10) / es * es);
                            let pat = self.alloc_mem(tile)?;
                            pat.upload(&f.value.repeat(tile / es))?;
                            let regions = (0..bytes)
                                .step_by(tile)
                                .map(|off| vk::BufferCopy {
                                    src_offset: 0,
                                    dst_offset: off as u64,
                                    size: tile.min(bytes - off) as u64,
                                })
                                .collect();
                            let w = Work::Copy { src: pat.buf, dst: dst.buf, regions };
                            patterns.push(pat);
                            w
                        }
                    }
                }
            };
            enc.push(Encode { work, barrier });
        }
        let commands = self.encode(&enc)?;
        let pipelines =
            enc.iter().filter_map(|e| e.dispatch().map(|(p, _, _)| p.clone())).collect();
        Ok(VkGraph {
            recorded: Arc::new(Recorded {
                commands,
                _pipelines: pipelines,
                _alive: KeepAlive::of(steps),
                _patterns: patterns,
            }),
            launcher: self.launcher.clone(),
        })
    }
}

/// A buffer's Vulkan storage, checked to hold the buffer.
fn vk_mem(b: &ResidentBuffer) -> Result<&VkMem, DeviceError> {
    match b.mem.as_any().downcast_ref::<VkMem>() {
        Some(m) if m.bytes >= b.len * b.elem.size_bytes() => Ok(m),
        Some(_) => Err(launch_err("a buffer's device memory is smaller than the buffer")),
        None => Err(launch_err("a buffer's memory belongs to another device")),
    }
}

/// The 4-byte word whose repetition is a buffer full of the value `v` (its bytes), when
/// there is one: values of 1, 2 or 4 bytes, and 8-byte values whose halves are equal.
fn fill_word(v: &[u8]) -> Option<u32> {
    let w = match v.len() {
        1 => [v[0]; 4],
        2 => [v[0], v[1], v[0], v[1]],
        4 => [v[0], v[1], v[2], v[3]],
        8 if v[..4] == v[4..] => [v[0], v[1], v[2], v[3]],
        _ => return None,
    };
    Some(u32::from_le_bytes(w))
}

/// What a recorded command buffer names, kept alive by the recording and by each replay in
/// flight.
struct Recorded {
    /// First, so its descriptor sets are freed before the pipelines (their set layouts) go.
    commands: Commands,
    _pipelines: Vec<Arc<Pipeline>>,
    _alive: KeepAlive,
    /// The pattern buffers of fills copied from one.
    _patterns: Vec<VkMem>,
}

/// A command graph's device partition as one recorded command buffer.
pub(super) struct VkGraph {
    recorded: Arc<Recorded>,
    launcher: Arc<Launcher>,
}

impl Recording for VkGraph {
    /// Submits the command buffer and returns: the device orders it after earlier
    /// submissions, and host accesses and waits wait for it (see `launcher.rs`).
    fn replay(&self) -> Result<(), DeviceError> {
        let cb = self.recorded.commands.cb;
        self.launcher.replay(cb, self.recorded.clone())
    }
}
