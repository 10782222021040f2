//! The driver's own floor under kiln's Vulkan graph replay (issue 25): the same 100 dependent
//! tiny dispatches as `launch`'s `chain100-vulkan/replay`, recorded by hand through `ash`
//! into one command buffer with nothing of kiln's runtime around them, submitted and waited
//! for as kiln does (one `vkQueueSubmit`, a fence polled). Each variant's result is checked
//! before it is timed:
//!
//! * `global barrier`: a `VkMemoryBarrier` (shader writes to shader reads and writes,
//!   compute to compute) between dispatches, what kiln records;
//! * `buffer barrier`: a `VkBufferMemoryBarrier` on the one buffer instead;
//! * `independent`: 100 dispatches on 100 buffers with no barrier (what a dispatch costs
//!   when nothing orders it; not a chain);
//! * `one dispatch`: a single dispatch, submitted and waited for (the fixed cost that the
//!   per-node figures include once per replay, divided by 100).
//!
//! Printed: the median microseconds per node of 200 replays for each, on the first Vulkan
//! device that is not a CPU implementation (else the first one). No device: it says so and
//! exits 0.
//!
//! `cargo bench -p kiln-runtime --bench vk_chain_ref`

use std::time::{Duration, Instant};

use ash::vk;
use kiln_backends::spirv::{emit, Flavour, PUSH_NUM_GROUPS_AT};

const ITEMS: u32 = 256;
const LOCAL: u32 = 32;
const NODES: usize = 100;
const REPLAYS: usize = 200;

const SOURCE: &str = "kernel inc(x: ptr<global, u32>) {
    let i: u32 = global_id(0); x[i] = x[i] + i + 1u32; }";

/// One Vulkan device opened for the measurement, with the `inc` pipeline.
struct Rig {
    _entry: ash::Entry,
    instance: ash::Instance,
    pd: vk::PhysicalDevice,
    device: ash::Device,
    queue: vk::Queue,
    qf: u32,
    set_layout: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    module: vk::ShaderModule,
    pool: vk::DescriptorPool,
    push: Vec<u8>,
    name: String,
}

/// A host-visible buffer of `ITEMS` u32s, mapped.
struct Buf {
    buf: vk::Buffer,
    mem: vk::DeviceMemory,
    ptr: *mut u32,
    set: vk::DescriptorSet,
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // SAFETY: every Vulkan call below is made on objects of this rig, in the order the
    // specification asks; everything is destroyed after the device is idle.
    match unsafe { Rig::open() } {
        Ok(rig) => unsafe {
            rig.run();
            rig.close();
        },
        Err(e) => println!("vk_chain_ref: no Vulkan device ({e}); nothing measured"),
    }
}

impl Rig {
    unsafe fn open() -> Result<Rig, String> {
        let entry = ash::Entry::load().map_err(|e| e.to_string())?;
        let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_2);
        let instance = entry
            .create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None)
            .map_err(|e| e.to_string())?;
        let pds = instance.enumerate_physical_devices().map_err(|e| e.to_string())?;
        let score = |pd: &vk::PhysicalDevice| {
            let p = instance.get_physical_device_properties(*pd);
            p.device_type == vk::PhysicalDeviceType::CPU
        };
        let Some(&pd) = pds.iter().find(|p| !score(p)).or(pds.first()) else {
            return Err("no physical device".into());
        };
        let props = instance.get_physical_device_properties(pd);
        let name = props.device_name_as_c_str().map_err(|e| e.to_string())?;
        let name = name.to_string_lossy().into_owned();
        let qf = instance
            .get_physical_device_queue_family_properties(pd)
            .iter()
            .position(|q| q.queue_flags.contains(vk::QueueFlags::COMPUTE))
            .ok_or("no compute queue")? as u32;
        let prio = [1.0f32];
        let qci =
            [vk::DeviceQueueCreateInfo::default().queue_family_index(qf).queue_priorities(&prio)];
        let device = instance
            .create_device(pd, &vk::DeviceCreateInfo::default().queue_create_infos(&qci), None)
            .map_err(|e| e.to_string())?;
        let queue = device.get_device_queue(qf, 0);

        let m = kiln_ir::parse_module(SOURCE).map_err(|e| e.to_string())?;
        let spv = emit(&m.kernels[0], Flavour::Vulkan).map_err(|e| e.to_string())?;
        assert_eq!(spv.layout.buffers.len(), 1, "inc binds one buffer");
        let module = device
            .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&spv.words), None)
            .map_err(|e| e.to_string())?;
        let binding = [vk::DescriptorSetLayoutBinding::default()
            .binding(spv.layout.buffers[0].param as u32)
            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
            .descriptor_count(1)
            .stage_flags(vk::ShaderStageFlags::COMPUTE)];
        let set_layout = device
            .create_descriptor_set_layout(
                &vk::DescriptorSetLayoutCreateInfo::default().bindings(&binding),
                None,
            )
            .map_err(|e| e.to_string())?;
        let ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .size(spv.layout.push_size)];
        let sls = [set_layout];
        let layout = device
            .create_pipeline_layout(
                &vk::PipelineLayoutCreateInfo::default()
                    .set_layouts(&sls)
                    .push_constant_ranges(&ranges),
                None,
            )
            .map_err(|e| e.to_string())?;
        // The work-group size is specialization constants 0, 1, 2 (see the SPIR-V writer).
        let local = [LOCAL, 1, 1];
        let entries: Vec<_> = (0..3)
            .map(|i| vk::SpecializationMapEntry::default().constant_id(i).offset(4 * i).size(4))
            .collect();
        let data: Vec<u8> = local.iter().flat_map(|v| v.to_le_bytes()).collect();
        let spec = vk::SpecializationInfo::default().map_entries(&entries).data(&data);
        let entry_name = std::ffi::CString::new(spv.entry.clone()).map_err(|e| e.to_string())?;
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(&entry_name)
            .specialization_info(&spec);
        let pci = [vk::ComputePipelineCreateInfo::default().stage(stage).layout(layout)];
        let pipeline = device
            .create_compute_pipelines(vk::PipelineCache::null(), &pci, None)
            .map_err(|(_, e)| e.to_string())?[0];
        let sizes = [vk::DescriptorPoolSize::default()
            .ty(vk::DescriptorType::STORAGE_BUFFER)
            .descriptor_count(NODES as u32 + 1)];
        let pool = device
            .create_descriptor_pool(
                &vk::DescriptorPoolCreateInfo::default()
                    .max_sets(NODES as u32 + 1)
                    .pool_sizes(&sizes),
                None,
            )
            .map_err(|e| e.to_string())?;
        // The launch's fields: offsets zero, the group counts at their place.
        let mut push = vec![0u8; spv.layout.push_size as usize];
        let at = PUSH_NUM_GROUPS_AT as usize;
        for (d, g) in [ITEMS / LOCAL, 1, 1].into_iter().enumerate() {
            push[at + 4 * d..at + 4 * d + 4].copy_from_slice(&g.to_le_bytes());
        }
        Ok(Rig {
            _entry: entry,
            instance,
            pd,
            device,
            queue,
            qf,
            set_layout,
            layout,
            pipeline,
            module,
            pool,
            push,
            name,
        })
    }

    unsafe fn buffer(&self) -> Buf {
        let d = &self.device;
        let bytes = u64::from(ITEMS) * 4;
        let buf = d
            .create_buffer(
                &vk::BufferCreateInfo::default()
                    .size(bytes)
                    .usage(vk::BufferUsageFlags::STORAGE_BUFFER),
                None,
            )
            .expect("buffer");
        let req = d.get_buffer_memory_requirements(buf);
        let mp = self.instance.get_physical_device_memory_properties(self.pd);
        let want = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
        let ty = (0..mp.memory_type_count)
            .find(|&i| {
                req.memory_type_bits & (1 << i) != 0
                    && mp.memory_types[i as usize].property_flags.contains(want)
            })
            .expect("a host-visible memory type");
        let mem = d
            .allocate_memory(
                &vk::MemoryAllocateInfo::default().allocation_size(req.size).memory_type_index(ty),
                None,
            )
            .expect("memory");
        d.bind_buffer_memory(buf, mem, 0).expect("bind");
        let ptr =
            d.map_memory(mem, 0, bytes, vk::MemoryMapFlags::empty()).expect("map") as *mut u32;
        let sls = [self.set_layout];
        let set = d
            .allocate_descriptor_sets(
                &vk::DescriptorSetAllocateInfo::default()
                    .descriptor_pool(self.pool)
                    .set_layouts(&sls),
            )
            .expect("set")[0];
        let info = [vk::DescriptorBufferInfo::default().buffer(buf).range(vk::WHOLE_SIZE)];
        let w = [vk::WriteDescriptorSet::default()
            .dst_set(set)
            .dst_binding(0)
            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
            .buffer_info(&info)];
        d.update_descriptor_sets(&w, &[]);
        Buf { buf, mem, ptr, set }
    }

    /// Records one replay: `nodes` dispatches, each on `bufs[i % bufs.len()]`, separated by
    /// `barrier` (if any), then a barrier making the writes visible to the host.
    unsafe fn record(
        &self,
        pool: vk::CommandPool,
        bufs: &[Buf],
        nodes: usize,
        barrier: Barrier,
    ) -> vk::CommandBuffer {
        let d = &self.device;
        let cb = d
            .allocate_command_buffers(
                &vk::CommandBufferAllocateInfo::default()
                    .command_pool(pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1),
            )
            .expect("command buffer")[0];
        d.begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default()).expect("begin");
        let compute = vk::PipelineStageFlags::COMPUTE_SHADER;
        d.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, self.pipeline);
        d.cmd_push_constants(cb, self.layout, vk::ShaderStageFlags::COMPUTE, 0, &self.push);
        let mut bound = vk::DescriptorSet::null();
        for i in 0..nodes {
            let b = &bufs[i % bufs.len()];
            if i > 0 {
                let rw = vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE;
                match barrier {
                    Barrier::None => {}
                    Barrier::Global => {
                        let mb = [vk::MemoryBarrier::default()
                            .src_access_mask(vk::AccessFlags::SHADER_WRITE)
                            .dst_access_mask(rw)];
                        let f = vk::DependencyFlags::empty();
                        d.cmd_pipeline_barrier(cb, compute, compute, f, &mb, &[], &[]);
                    }
                    Barrier::Buffer => {
                        let bb = [vk::BufferMemoryBarrier::default()
                            .src_access_mask(vk::AccessFlags::SHADER_WRITE)
                            .dst_access_mask(rw)
                            .src_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                            .dst_queue_family_index(vk::QUEUE_FAMILY_IGNORED)
                            .buffer(b.buf)
                            .size(vk::WHOLE_SIZE)];
                        let f = vk::DependencyFlags::empty();
                        d.cmd_pipeline_barrier(cb, compute, compute, f, &[], &bb, &[]);
                    }
                }
            }
            if bound != b.set {
                let sets = [b.set];
                d.cmd_bind_descriptor_sets(
                    cb,
                    vk::PipelineBindPoint::COMPUTE,
                    self.layout,
                    0,
                    &sets,
                    &[],
                );
                bound = b.set;
            }
            d.cmd_dispatch(cb, ITEMS / LOCAL, 1, 1);
        }
        let mb = [vk::MemoryBarrier::default()
            .src_access_mask(vk::AccessFlags::SHADER_WRITE)
            .dst_access_mask(vk::AccessFlags::HOST_READ)];
        let host = vk::PipelineStageFlags::HOST;
        d.cmd_pipeline_barrier(cb, compute, host, vk::DependencyFlags::empty(), &mb, &[], &[]);
        d.end_command_buffer(cb).expect("end");
        cb
    }

    /// Submits `cb` and polls the fence until it signals (as kiln's replay and wait do);
    /// returns how long that took.
    unsafe fn replay(&self, cb: vk::CommandBuffer, fence: vk::Fence) -> Duration {
        let d = &self.device;
        let cbs = [cb];
        let submit = [vk::SubmitInfo::default().command_buffers(&cbs)];
        let t = Instant::now();
        d.queue_submit(self.queue, &submit, fence).expect("submit");
        while !d.get_fence_status(fence).expect("fence") {
            std::hint::spin_loop();
        }
        let e = t.elapsed();
        d.reset_fences(&[fence]).expect("reset");
        e
    }

    unsafe fn run(&self) {
        let d = &self.device;
        println!(
            "vk_chain_ref on {}: {NODES} dispatches of {ITEMS} work-items per replay",
            self.name
        );
        let pool = d
            .create_command_pool(
                &vk::CommandPoolCreateInfo::default().queue_family_index(self.qf),
                None,
            )
            .expect("command pool");
        let fence = d.create_fence(&vk::FenceCreateInfo::default(), None).expect("fence");
        let one = [self.buffer()];
        let many: Vec<Buf> = (0..NODES).map(|_| self.buffer()).collect();
        let cases: [(&str, &[Buf], usize, Barrier); 4] = [
            ("global barrier", &one, NODES, Barrier::Global),
            ("buffer barrier", &one, NODES, Barrier::Buffer),
            ("independent", &many, NODES, Barrier::None),
            ("one dispatch", &one, 1, Barrier::None),
        ];
        for (name, bufs, nodes, barrier) in cases {
            let cb = self.record(pool, bufs, nodes, barrier);
            for b in bufs {
                std::ptr::write_bytes(b.ptr, 0, ITEMS as usize);
            }
            // Checked first: one replay adds i + 1 to element i once per dispatch on it.
            self.replay(cb, fence);
            let per_buf = nodes.div_ceil(bufs.len()) as u32;
            for b in bufs {
                let got = std::slice::from_raw_parts(b.ptr, ITEMS as usize);
                for (i, &v) in got.iter().enumerate() {
                    assert_eq!(v, per_buf * (i as u32 + 1), "{name}: element {i} wrong");
                }
            }
            let mut t: Vec<Duration> = (0..REPLAYS).map(|_| self.replay(cb, fence)).collect();
            t.sort();
            let med = t[REPLAYS / 2].as_secs_f64() * 1e6;
            println!(
                "  {name:<15} {:>8.2} us per replay, {:>6.3} us per node",
                med,
                med / nodes as f64
            );
        }
        d.device_wait_idle().expect("idle");
        for b in one.iter().chain(&many) {
            d.destroy_buffer(b.buf, None);
            d.free_memory(b.mem, None);
        }
        d.destroy_fence(fence, None);
        d.destroy_command_pool(pool, None);
    }

    unsafe fn close(self) {
        let d = &self.device;
        d.destroy_descriptor_pool(self.pool, None);
        d.destroy_pipeline(self.pipeline, None);
        d.destroy_pipeline_layout(self.layout, None);
        d.destroy_descriptor_set_layout(self.set_layout, None);
        d.destroy_shader_module(self.module, None);
        d.destroy_device(None);
        // The instance is left to the process's end, as kiln's is (docs/vulkan.md: NVIDIA's
        // driver may crash a thread at exit when the last instance goes).
    }
}

/// What separates consecutive dispatches.
#[derive(Clone, Copy)]
enum Barrier {
    None,
    Global,
    Buffer,
}
