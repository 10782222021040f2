//! Eager submission without a host round trip: command buffers, descriptor pools and fences
//! reused from a pool of slots, and launches that return once submitted.
//!
//! An eager launch takes a free slot (one command buffer, one descriptor pool, one fence),
//! records a barrier (every earlier compute or transfer write on the queue before this
//! dispatch's reads and writes), the dispatch and a compute-to-host barrier, submits it with
//! the slot's fence and returns: dependent launches are ordered on the device by those
//! barriers, never by the host waiting. A slot is reused once its fence has signalled; while
//! all [`MAX_SLOTS`] are in flight the oldest is waited for. A slot keeps what its commands
//! name (pipeline, buffers' memory, a recording's command buffer) alive until its fence has
//! signalled; then its descriptor pool is emptied *before* it lets them go: a descriptor set
//! must not outlive its set layout (drivers may read the layout when the set is freed; NVIDIA's
//! crashed resetting a pool whose set's layout a dropped pipeline had destroyed).
//!
//! The host waits only where it must see the device's work: before it reads or writes a
//! buffer's device copy ([`Launcher::finish`], called by the memory's upload and download)
//! and when something waits on a launch's event (the runtime calls
//! [`crate::Device::finish`]). Launches of one device are serialized here (one lock held
//! while a slot is recorded and submitted), which is also the order the barriers follow.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ash::vk;

use super::resident::{Bound, Dispatch, Pipeline, VkMem};
use super::{vkerr, Owner};
use crate::device::Memory;
use crate::error::DeviceError;
use crate::sync::{ranks, RankedGuard, RankedMutex};

/// How many launches may be in flight on one device before a new one waits for the
/// oldest: enough for a driver's queue to stay busy, few enough that the pool stays small.
pub(super) const MAX_SLOTS: usize = 32;
/// How long [`Launcher::finish`] polls the fences before it blocks on them: longer than a
/// replayed chain of 100 small kernels takes on NVIDIA (about 300 us), whose driver wakes a
/// blocked thread tens of microseconds late.
const SPIN: Duration = Duration::from_millis(1);

/// Storage-buffer descriptors a slot's pool holds at first (grown for a launch binding more).
const FIRST_DESCRIPTORS: u32 = 16;

/// What a slot's submission names, kept alive until its fence has signalled.
pub(super) enum Keep {
    /// A pipeline bound by the commands.
    Pipeline { _p: Arc<Pipeline> },
    /// A buffer's storage bound by the commands.
    Memory { _m: Memory },
    /// A recording's command resources, submitted with the slot's fence.
    Recorded { _r: Arc<dyn Send + Sync> },
}

/// One reusable submission: a command buffer of the launcher's pool, a descriptor pool for
/// its one set, a fence, and what its last submission names.
struct Slot {
    cb: vk::CommandBuffer,
    fence: vk::Fence,
    pool: vk::DescriptorPool,
    /// Storage-buffer descriptors `pool` holds.
    capacity: u32,
    /// The set allocated from `pool` for the current submission (null when the pool is
    /// empty): its layout, a pipeline's in `keep`, lives as long as it does.
    set: vk::DescriptorSet,
    keep: Vec<Keep>,
}

struct State {
    cmd_pool: vk::CommandPool,
    /// Slots whose fence is unsignalled and reset, ready to record.
    free: Vec<Slot>,
    /// Submitted slots, oldest first.
    busy: VecDeque<Slot>,
}

/// Counts of what eager submission did on one device, since it was opened: how many Vulkan
/// objects it made and how often the host waited for the device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaunchStats {
    /// Eager launches and replays submitted.
    pub submits: u64,
    /// Command buffers allocated (each slot allocates one, once).
    pub command_buffers: u64,
    /// Descriptor pools created (once per slot, again when a launch binds more buffers
    /// than its pool holds).
    pub descriptor_pools: u64,
    /// Fences created (each slot creates one, once).
    pub fences: u64,
    /// Waits of the host for every submitted launch: before a host access to a buffer's
    /// device copy, or a wait on an event, while launches were in flight.
    pub finishes: u64,
    /// Waits for the oldest launch because every slot was in flight.
    pub slot_waits: u64,
}

#[derive(Default)]
struct Counters {
    submits: AtomicU64,
    command_buffers: AtomicU64,
    descriptor_pools: AtomicU64,
    fences: AtomicU64,
    finishes: AtomicU64,
    slot_waits: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// A device's eager submission: its slots, its queue, and the counts of [`LaunchStats`].
pub(super) struct Launcher {
    owner: Arc<Owner>,
    queue: Arc<RankedMutex<vk::Queue>>,
    /// `maxComputeWorkGroupCount`: bigger launches are split into several dispatches.
    max_groups: [u32; 3],
    state: RankedMutex<State>,
    counts: Counters,
}

impl Launcher {
    /// A launcher for the queue of family `family`, with no slot yet.
    pub fn new(
        owner: &Arc<Owner>,
        queue: &Arc<RankedMutex<vk::Queue>>,
        family: u32,
        max_groups: [u32; 3],
    ) -> Result<Launcher, DeviceError> {
        let cpci = vk::CommandPoolCreateInfo::default()
            .queue_family_index(family)
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        // SAFETY: valid create info on a live device; destroyed in Drop.
        let cmd_pool = unsafe { owner.device.create_command_pool(&cpci, None) }
            .map_err(vkerr("command pool"))?;
        Ok(Launcher {
            owner: owner.clone(),
            queue: queue.clone(),
            max_groups,
            state: RankedMutex::new(
                ranks::VULKAN_SLOTS,
                State { cmd_pool, free: Vec::new(), busy: VecDeque::new() },
            ),
            counts: Counters::default(),
        })
    }

    fn lock(&self) -> RankedGuard<'_, State> {
        self.state.lock()
    }

    /// The counts so far.
    pub fn stats(&self) -> LaunchStats {
        let c = &self.counts;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LaunchStats {
            submits: get(&c.submits),
            command_buffers: get(&c.command_buffers),
            descriptor_pools: get(&c.descriptor_pools),
            fences: get(&c.fences),
            finishes: get(&c.finishes),
            slot_waits: get(&c.slot_waits),
        }
    }

    /// Moves the finished slots at the front of the busy list to the free list.
    fn recycle(&self, st: &mut State) -> Result<(), DeviceError> {
        let d = &self.owner.device;
        while let Some(s) = st.busy.front() {
            // SAFETY: a fence of this device.
            if !unsafe { d.get_fence_status(s.fence) }.map_err(vkerr("fence status"))? {
                break;
            }
            let mut s = st.busy.pop_front().expect("a front slot");
            // SAFETY: its submission has finished: nothing uses the fence or what it kept.
            unsafe { d.reset_fences(&[s.fence]) }.map_err(vkerr("reset fence"))?;
            self.release(&mut s)?;
            st.free.push(s);
        }
        Ok(())
    }

    /// Empties `s`'s descriptor pool, then drops what it kept: the set goes before the
    /// pipeline whose set layout it was allocated with (the layout may be destroyed with it).
    /// `s` must not be pending.
    fn release(&self, s: &mut Slot) -> Result<(), DeviceError> {
        if s.set != vk::DescriptorSet::null() {
            // SAFETY: the slot is not pending, so its set is no longer in use; the set's
            // layout is still alive (in `keep`).
            unsafe {
                self.owner
                    .device
                    .reset_descriptor_pool(s.pool, vk::DescriptorPoolResetFlags::empty())
            }
            .map_err(vkerr("reset descriptor pool"))?;
            s.set = vk::DescriptorSet::null();
        }
        s.keep.clear();
        Ok(())
    }

    /// A slot ready to record: a free one, a new one while fewer than [`MAX_SLOTS`] exist,
    /// else the oldest once it has finished.
    fn slot(&self, st: &mut State) -> Result<Slot, DeviceError> {
        self.recycle(st)?;
        if let Some(s) = st.free.pop() {
            return Ok(s);
        }
        if st.busy.len() < MAX_SLOTS {
            return self.new_slot(st);
        }
        bump(&self.counts.slot_waits);
        let fence = st.busy.front().expect("a busy slot").fence;
        // SAFETY: a submitted fence of this device.
        unsafe { self.owner.device.wait_for_fences(&[fence], true, u64::MAX) }
            .map_err(vkerr("wait"))?;
        self.recycle(st)?;
        st.free.pop().ok_or_else(|| DeviceError::Driver("vulkan: no slot after a wait".into()))
    }

    fn new_slot(&self, st: &mut State) -> Result<Slot, DeviceError> {
        let d = &self.owner.device;
        let cbai = vk::CommandBufferAllocateInfo::default()
            .command_pool(st.cmd_pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: valid infos on a live device; the pool is used under the state's lock; the
        // objects are destroyed with the pool (command buffer) or in `Launcher::drop`.
        unsafe {
            let cb = d.allocate_command_buffers(&cbai).map_err(vkerr("command buffer"))?[0];
            bump(&self.counts.command_buffers);
            let fence = match d.create_fence(&vk::FenceCreateInfo::default(), None) {
                Ok(f) => f,
                Err(e) => {
                    d.free_command_buffers(st.cmd_pool, &[cb]);
                    return Err(vkerr("fence")(e));
                }
            };
            bump(&self.counts.fences);
            let pool = vk::DescriptorPool::null();
            let set = vk::DescriptorSet::null();
            Ok(Slot { cb, fence, pool, capacity: 0, set, keep: Vec::new() })
        }
    }

    /// Makes sure `s`'s descriptor pool (empty: the slot was released or is new) holds `n`
    /// storage-buffer descriptors.
    fn descriptors(&self, s: &mut Slot, n: u32) -> Result<(), DeviceError> {
        let d = &self.owner.device;
        // SAFETY: the slot's pool holds no set (`release` emptied it), so nothing in it is
        // in use.
        unsafe {
            if s.pool != vk::DescriptorPool::null() && s.capacity >= n {
                return Ok(());
            }
            d.destroy_descriptor_pool(s.pool, None);
            s.pool = vk::DescriptorPool::null();
            let capacity = n.max(FIRST_DESCRIPTORS).next_power_of_two();
            let ps = [vk::DescriptorPoolSize::default()
                .ty(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(capacity)];
            let dpci = vk::DescriptorPoolCreateInfo::default().max_sets(1).pool_sizes(&ps);
            s.pool = d.create_descriptor_pool(&dpci, None).map_err(vkerr("descriptor pool"))?;
            s.capacity = capacity;
            bump(&self.counts.descriptor_pools);
        }
        Ok(())
    }

    /// Records and submits one dispatch of `pipeline` on `mems` (its buffers, as
    /// `dispatch.bindings` index them; `keep` their storage) and returns without waiting.
    pub fn dispatch(
        &self,
        pipeline: &Arc<Pipeline>,
        dispatch: &Dispatch,
        mems: &[&VkMem],
        keep: impl Iterator<Item = Memory>,
    ) -> Result<(), DeviceError> {
        let mut st = self.lock();
        let mut s = self.slot(&mut st)?;
        // Nothing in flight (the slot search recycled every finished submission): no earlier
        // write on the device to wait for.
        let after_others = !st.busy.is_empty();
        let r = self.record_dispatch(&mut s, pipeline, dispatch, mems, after_others);
        let r = r.and_then(|()| self.submit(&s, s.cb));
        match r {
            Ok(()) => {
                s.keep.push(Keep::Pipeline { _p: pipeline.clone() });
                s.keep.extend(keep.map(|m| Keep::Memory { _m: m }));
                st.busy.push_back(s);
                Ok(())
            }
            Err(e) => {
                // Not submitted: the set it may have allocated goes before the caller's
                // pipeline can. The launch's error is the one reported.
                let _ = self.release(&mut s);
                st.free.push(s);
                Err(e)
            }
        }
    }

    fn record_dispatch(
        &self,
        s: &mut Slot,
        p: &Pipeline,
        dispatch: &Dispatch,
        mems: &[&VkMem],
        after_others: bool,
    ) -> Result<(), DeviceError> {
        let d = &self.owner.device;
        let n = dispatch.bindings.len() as u32;
        // SAFETY: the slot is free (its last submission finished); the command buffer is
        // recorded under the state's lock (its pool's external synchronization); the
        // descriptor writes name live buffers, which the slot keeps alive once submitted.
        unsafe {
            let mut set = vk::DescriptorSet::null();
            if n > 0 {
                self.descriptors(s, n)?;
                let layouts = [p.set_layout];
                let dsai = vk::DescriptorSetAllocateInfo::default()
                    .descriptor_pool(s.pool)
                    .set_layouts(&layouts);
                set = d.allocate_descriptor_sets(&dsai).map_err(vkerr("descriptor set"))?[0];
                s.set = set;
                for b in &dispatch.bindings {
                    let mem = mems.get(b.buffer).ok_or_else(|| {
                        DeviceError::Launch(format!("vulkan launch: no buffer {}", b.buffer))
                    })?;
                    let info = [vk::DescriptorBufferInfo::default()
                        .buffer(mem.buf)
                        .offset(b.offset)
                        .range(b.range)];
                    let w = [vk::WriteDescriptorSet::default()
                        .dst_set(set)
                        .dst_binding(b.binding)
                        .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                        .buffer_info(&info)];
                    d.update_descriptor_sets(&w, &[]);
                }
            }
            let bi = vk::CommandBufferBeginInfo::default()
                .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
            d.begin_command_buffer(s.cb, &bi).map_err(vkerr("begin"))?;
            // Earlier submissions still in flight on the queue (eager launches, replays,
            // their transfers) write before this dispatch reads or writes: the barrier orders
            // them on the device, in submission order, instead of the host waiting between
            // them. With none in flight it is left out (lavapipe drains its pipeline at
            // every barrier).
            if after_others {
                let b = [vk::MemoryBarrier::default()
                    .src_access_mask(
                        vk::AccessFlags::SHADER_WRITE | vk::AccessFlags::TRANSFER_WRITE,
                    )
                    .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE)];
                d.cmd_pipeline_barrier(
                    s.cb,
                    vk::PipelineStageFlags::COMPUTE_SHADER | vk::PipelineStageFlags::TRANSFER,
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                    vk::DependencyFlags::empty(),
                    &b,
                    &[],
                    &[],
                );
            }
            dispatch.record(d, s.cb, p, set, self.max_groups, &mut Bound::default());
            let b = [vk::MemoryBarrier::default()
                .src_access_mask(vk::AccessFlags::SHADER_WRITE)
                .dst_access_mask(vk::AccessFlags::HOST_READ)];
            d.cmd_pipeline_barrier(
                s.cb,
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &b,
                &[],
                &[],
            );
            d.end_command_buffer(s.cb).map_err(vkerr("end"))
        }
    }

    /// Submits `cb` with `s`'s fence.
    fn submit(&self, s: &Slot, cb: vk::CommandBuffer) -> Result<(), DeviceError> {
        let cbs = [cb];
        let submit = [vk::SubmitInfo::default().command_buffers(&cbs)];
        let q = self.queue.lock();
        // SAFETY: a finished command buffer; the slot's fence is unsignalled and not in use.
        unsafe { self.owner.device.queue_submit(*q, &submit, s.fence) }.map_err(vkerr("submit"))?;
        bump(&self.counts.submits);
        Ok(())
    }

    /// Submits a recorded command buffer (made with `SIMULTANEOUS_USE`, starting with a
    /// barrier against earlier submissions) with a slot's fence, keeping `keep` (what owns
    /// the command buffer) alive until it has finished; returns without waiting.
    pub fn replay(
        &self,
        cb: vk::CommandBuffer,
        keep: Arc<dyn Send + Sync>,
    ) -> Result<(), DeviceError> {
        let mut st = self.lock();
        let mut s = self.slot(&mut st)?;
        match self.submit(&s, cb) {
            Ok(()) => {
                s.keep.push(Keep::Recorded { _r: keep });
                st.busy.push_back(s);
                Ok(())
            }
            Err(e) => {
                st.free.push(s);
                Err(e)
            }
        }
    }

    /// Waits until every submission so far has finished, at most `timeout` (`None`:
    /// forever): `false` if some had not by then.
    pub fn finish(&self, timeout: Option<Duration>) -> Result<bool, DeviceError> {
        let mut st = self.lock();
        self.recycle(&mut st)?;
        if st.busy.is_empty() {
            return Ok(true);
        }
        bump(&self.counts.finishes);
        let fences: Vec<vk::Fence> = st.busy.iter().map(|s| s.fence).collect();
        // Spin briefly before the blocking wait: NVIDIA's driver wakes a thread blocked on a
        // fence tens of microseconds after it signals, which is most of a short replay's
        // time (CUDA's default synchronization spins first the same way). A longer wait
        // blocks after `SPIN`, so the host core is not held for long kernels; the spin
        // yields, so a driver running on the host's cores (lavapipe) keeps them.
        let spin = timeout.map_or(SPIN, |t| t.min(SPIN));
        let start = Instant::now();
        while start.elapsed() < spin {
            // SAFETY: submitted fences of this device.
            let done = fences.iter().try_fold(true, |all, &f| {
                Ok::<bool, vk::Result>(all && unsafe { self.owner.device.get_fence_status(f) }?)
            });
            match done {
                Ok(true) => {
                    self.recycle(&mut st)?;
                    return Ok(true);
                }
                Ok(false) => std::thread::yield_now(),
                // The blocking wait below reports it.
                Err(_) => break,
            }
        }
        let ns = timeout.map_or(u64::MAX, |t| {
            u64::try_from(t.saturating_sub(start.elapsed()).as_nanos()).unwrap_or(u64::MAX)
        });
        // SAFETY: submitted fences of this device.
        match unsafe { self.owner.device.wait_for_fences(&fences, true, ns) } {
            Ok(()) => {
                self.recycle(&mut st)?;
                Ok(true)
            }
            Err(vk::Result::TIMEOUT) => Ok(false),
            Err(e) => Err(vkerr("wait")(e)),
        }
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        let d = &self.owner.device;
        let st = self.state.get_mut();
        // SAFETY: waits for what is in flight before destroying it; the command buffers go
        // with their pool.
        unsafe {
            let fences: Vec<vk::Fence> = st.busy.iter().map(|s| s.fence).collect();
            if !fences.is_empty() {
                let _ = d.wait_for_fences(&fences, true, u64::MAX);
            }
            // Each slot's pool (and its set) is destroyed before the slot's `keep` drops the
            // pipeline whose set layout the set was allocated with.
            for s in st.free.drain(..).chain(st.busy.drain(..)) {
                d.destroy_fence(s.fence, None);
                d.destroy_descriptor_pool(s.pool, None);
            }
            d.destroy_command_pool(st.cmd_pool, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::device::Device;
    use kiln_ir::launch::{Arg, Buffer, NdRange};

    /// A finished launch's slot frees its descriptor set before it drops the pipeline it
    /// kept (whose set layout goes with it): no free slot holds a set whose layout may be
    /// gone. NVIDIA's driver crashed resetting such a pool when the kernel's pipelines had
    /// been dropped meanwhile (runtime/tests/concurrent.rs, with cache clears).
    #[test]
    fn finished_slots_hold_no_descriptor_set_past_their_pipeline() {
        let found = super::super::VulkanDevice::open();
        let Some(dev) = kiln_ir::testing::require("KILN_REQUIRE_TOOLS", found) else {
            return;
        };
        for (i, name) in ["first", "second"].into_iter().enumerate() {
            let src = format!("kernel {name}(x: ptr<global, u32>) {{\n  x[0] = x[0] + 1u32;\n}}\n");
            let k = kiln_ir::parse_module(&src).unwrap().kernels.remove(0);
            let mut bufs = vec![Buffer::from_slice(&[i as u32])];
            // Builds, loads and runs the kernel, then drops it: only the launch's slot
            // kept its pipeline, until the copy back waited for the launch.
            dev.build_and_run(&k, &NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs).unwrap();
            assert_eq!(bufs[0].to_vec::<u32>(), Some(vec![i as u32 + 1]));
            let st = dev.launcher.lock();
            assert!(st.busy.is_empty(), "the copy back waited for the launch");
            assert!(!st.free.is_empty());
            for s in &st.free {
                assert!(s.keep.is_empty());
                assert_eq!(s.set, ash::vk::DescriptorSet::null(), "a set outlived its pipeline");
            }
        }
    }

    /// The launch slots are a ranked lock (issue 25): in a debug build, taking a lock the
    /// order puts before them (a buffer's contents) while holding them panics, naming both.
    #[test]
    #[cfg(debug_assertions)]
    fn vulkan_launch_slots_take_part_in_the_lock_order() {
        let found = super::super::VulkanDevice::open();
        let Some(dev) = kiln_ir::testing::require("KILN_REQUIRE_TOOLS", found) else {
            return;
        };
        use crate::sync::{ranks, RankedMutex};
        let contents = RankedMutex::new(ranks::BUFFER_DATA, ());
        let e = std::thread::scope(|s| {
            s.spawn(|| {
                let _slots = dev.launcher.lock();
                let _ = contents.lock();
            })
            .join()
            .unwrap_err()
        });
        let e = crate::error::panic_message(&*e).unwrap_or_default();
        assert!(e.contains("`buffer contents`") && e.contains("`vulkan launch slots`"), "{e}");
        // The order the runtime uses is allowed.
        let _c = contents.lock();
        let _slots = dev.launcher.lock();
        let _q = dev.launcher.queue.lock();
    }
}
