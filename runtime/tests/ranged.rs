//! Ranged accessors outside fusion mode: a kernel argument bound to elements
//! `offset..offset + len` of a buffer sees them as a buffer of `len` elements (SYCL's ranged
//! accessor). Each device (the cpu device, Vulkan on lavapipe, CUDA when present) is
//! compared with the interpreter; out-of-range accessors are refused; commands through
//! overlapping ranges are ordered; command graphs replay ranged launches; Vulkan stages
//! offsets that `minStorageBufferOffsetAlignment` does not allow, or refuses them by name.

use kiln_runtime::QueueGraph;
use std::sync::Arc;

use kiln_ir::launch::{Arg, NdRange};
use kiln_ir::parse_module;
use kiln_runtime::device::cpu::CpuDevice;
use kiln_runtime::device::cuda::CudaDevice;
use kiln_runtime::device::registry::OpenOptions;
use kiln_runtime::device::vulkan::VulkanDevice;
use kiln_runtime::graph::{Graph, GraphProperties};
use kiln_runtime::{
    interp_device, AccessMode, AccessProps, Buffer, Context, ContextConfig, Device, KernelHandle,
    Queue, QueueOrder,
};

const KERNELS: &str = "
kernel add(a: ptr<global, u32>, b: ptr<global, u32>, out: ptr<global, u32>) {
  let i: u32 = global_id(0);
  out[i] = a[i] + b[i] * 3u32;
}
kernel inc(x: ptr<global, u32>) {
  let i: u32 = global_id(0);
  x[i] = x[i] + 1u32;
}
kernel inc_first(x: ptr<global, u32>, unused: ptr<global, u32>) {
  let i: u32 = global_id(0);
  x[i] = x[i] + 1u32;
}
kernel double(x: ptr<global, u32>) {
  let i: u32 = global_id(0);
  x[i] = x[i] * 2u32;
}
";

const N: usize = 32;

fn ctx(dev: Arc<dyn Device>) -> Context {
    Context::with_config(dev, ContextConfig { workers: 2, ..Default::default() })
}

/// The devices to compare with the interpreter.
fn devices() -> Vec<Arc<dyn Device>> {
    let mut v: Vec<Arc<dyn Device>> = Vec::new();
    if cfg!(target_arch = "x86_64") {
        let cpu = CpuDevice::open(&OpenOptions::default());
        if let Some(d) = kiln_ir::testing::optional("KILN_REQUIRE_TOOLS", cpu) {
            v.push(Arc::new(d));
        }
    }
    if let Some(d) = vulkan() {
        v.push(d);
    }
    if let Some(d) = kiln_ir::testing::optional("KILN_REQUIRE_CUDA", CudaDevice::open()) {
        v.push(Arc::new(d));
    }
    v
}

fn vulkan() -> Option<Arc<dyn Device>> {
    kiln_ir::testing::optional("KILN_REQUIRE_TOOLS", VulkanDevice::open())
        .map(|d| Arc::new(d) as Arc<dyn Device>)
}

fn kernel(ctx: &Context, name: &str) -> KernelHandle {
    ctx.get_kernel(&parse_module(KERNELS).unwrap(), name).unwrap()
}

fn bufs(n: usize) -> Vec<Buffer<u32>> {
    (0..n)
        .map(|b| Buffer::from_slice(&(0..N as u32).map(|i| i * 7 + b as u32).collect::<Vec<_>>()))
        .collect()
}

fn contents(b: &[Buffer<u32>]) -> Vec<Vec<u32>> {
    b.iter().map(|b| b.read().unwrap()).collect()
}

/// `(buffer, offset)` of a ranged accessor of `len` elements.
type R = (usize, usize);

/// `kernel` over `len` work-items, its arguments ranged accessors (the last one written).
fn launch(q: &Queue, k: &KernelHandle, len: usize, b: &[Buffer<u32>], ranges: &[R]) {
    q.submit(|h| {
        let n = ranges.len();
        let args = ranges
            .iter()
            .enumerate()
            .map(|(i, &(buf, off))| {
                let mode = if i + 1 == n { AccessMode::ReadWrite } else { AccessMode::Read };
                let r = h.access_range(&b[buf], mode, off, len, AccessProps::default());
                Arg::from(r.unwrap())
            })
            .collect();
        h.parallel_for(k, NdRange::new(&[len as u32]), args);
    });
}

/// Ranged launches with aligned and unaligned offsets, the same buffer through two disjoint
/// ranges, and ranges of different lengths.
fn work(ctx: &Context, q: &Queue, b: &[Buffer<u32>]) {
    let (add, inc, double) = (kernel(ctx, "add"), kernel(ctx, "inc"), kernel(ctx, "double"));
    launch(q, &inc, 5, b, &[(0, 3)]);
    launch(q, &add, 8, b, &[(0, 4), (1, 8), (2, 16)]);
    launch(q, &add, 7, b, &[(0, 1), (1, 9), (3, 5)]);
    launch(q, &double, 12, b, &[(1, 20)]);
    launch(q, &add, 8, b, &[(2, 0), (3, 13), (1, 0)]);
    // A zero-length range (at the buffer's end) bound to a parameter the kernel never uses.
    let inc_first = kernel(ctx, "inc_first");
    q.submit(|h| {
        let none = AccessProps::default();
        let x = h.access_range(&b[3], AccessMode::ReadWrite, 6, 3, none).unwrap();
        let y = h.access_range(&b[2], AccessMode::Read, N, 0, none).unwrap();
        h.parallel_for(&inc_first, NdRange::new(&[3]), vec![x.into(), y.into()]);
    });
}

#[test]
fn the_interpreter_indexes_relative_to_the_range() {
    let c = ctx(interp_device());
    let q = Queue::new(&c, QueueOrder::InOrder);
    let b = Buffer::from_slice(&[0u32; 8]);
    launch(&q, &kernel(&c, "inc"), 4, std::slice::from_ref(&b), &[(0, 2)]);
    q.wait().unwrap();
    assert_eq!(b.read().unwrap(), [0, 0, 1, 1, 1, 1, 0, 0]);
}

#[test]
fn each_device_matches_the_interpreter_on_ranged_launches() {
    let reference = {
        let c = ctx(interp_device());
        let q = Queue::new(&c, QueueOrder::InOrder);
        let b = bufs(4);
        work(&c, &q, &b);
        q.wait().unwrap();
        contents(&b)
    };
    for dev in devices() {
        let name = dev.name();
        let c = ctx(dev);
        let q = Queue::new(&c, QueueOrder::InOrder);
        let b = bufs(4);
        work(&c, &q, &b);
        q.wait().unwrap();
        assert_eq!(contents(&b), reference, "{name}");
    }
}

#[test]
fn out_of_range_accessors_are_refused() {
    let c = ctx(interp_device());
    let q = Queue::new(&c, QueueOrder::InOrder);
    let b = Buffer::from_slice(&[0u32; 8]);
    let mut errs = Vec::new();
    q.submit(|h| {
        for (off, len) in [(6, 4), (9, 0), (usize::MAX, 2)] {
            let r = h.access_range(&b, AccessMode::Read, off, len, AccessProps::default());
            errs.push(r.unwrap_err().to_string());
        }
        assert!(h.access_range(&b, AccessMode::Read, 8, 0, AccessProps::default()).is_ok());
    });
    q.wait().unwrap();
    assert!(
        errs[0].contains("buffer #")
            && errs[0].contains("offset 6 + length 4")
            && errs[0].contains("(8 elements)"),
        "{}",
        errs[0]
    );
    assert!(errs[1].contains("offset 9 + length 0"), "{}", errs[1]);
    // An executor given an out-of-range Arg::Range directly refuses it too.
    let k = parse_module(KERNELS).unwrap().kernel("inc").unwrap().clone();
    let mut raw = vec![kiln_ir::launch::Buffer::from_slice(&[0u32; 8])];
    let arg = [Arg::Range { buffer: 0, offset: 6, len: 4 }];
    let want = "argument 0 (`x`) binds elements 6..10 (offset 6, length 4) of buffer 0, which \
                has 8 elements";
    let e = kiln_ir::interp::run(&k, &NdRange::new(&[4]), &arg, &mut raw).unwrap_err();
    assert!(e.to_string().contains(want), "{e}");
    for dev in devices() {
        let e = dev.build_and_run(&k, &NdRange::new(&[4]), &arg, &mut raw).unwrap_err();
        assert!(e.to_string().contains("6..10"), "{}: {e}", dev.name());
    }
}

#[test]
fn bounds_errors_name_indexes_relative_to_the_range() {
    // Four work-items on a range of three elements: `x[3]` is out of bounds although the
    // buffer goes on; the message says the index is relative to the range.
    let k = parse_module(KERNELS).unwrap().kernel("inc").unwrap().clone();
    let arg = [Arg::Range { buffer: 0, offset: 2, len: 3 }];
    let run = |dev: &dyn Device| {
        let mut raw = vec![kiln_ir::launch::Buffer::from_slice(&[0u32; 8])];
        dev.build_and_run(&k, &NdRange::new(&[4]), &arg, &mut raw).unwrap_err().to_string()
    };
    let want = run(&*interp_device());
    assert!(
        want.contains(
            "`x[3]` out of bounds (buffer range has 3 elements, at offset 2 of its \
                       buffer; the index is relative to the range)"
        ),
        "{want}"
    );
    for dev in devices().into_iter().filter(|d| d.checks_bounds() || d.name().contains("cpu")) {
        assert!(run(&*dev).contains(&want[want.find("`x[3]`").unwrap()..]), "{}", dev.name());
    }
    // Devices without bounds checks of their own report the same through -fsanitize=bounds.
    for dev in devices() {
        let name = dev.name();
        let c = ctx(dev);
        let m = kiln_ir::Module::new(vec![k.clone()]);
        let p = c.build_program(&m, &[], "-fsanitize=bounds").unwrap();
        let kh = c.kernel(&p, "inc").unwrap();
        let q = Queue::new(&c, QueueOrder::InOrder);
        let b = Buffer::from_slice(&[0u32; 8]);
        q.submit(|h| {
            let x = h.access_range(&b, AccessMode::ReadWrite, 2, 3, AccessProps::default());
            h.parallel_for(&kh, NdRange::new(&[4]), vec![x.unwrap().into()]);
        });
        let e = q.wait().unwrap_err().to_string();
        assert!(e.contains("buffer range has 3 elements, at offset 2"), "{name}: {e}");
    }
}

#[test]
fn overlapping_ranges_are_ordered() {
    // An out-of-order queue: each launch overlaps the previous one's range, so each must
    // wait for it; the result is the in-order one, computed here on the host.
    let mut devs = vec![interp_device()];
    devs.extend(devices());
    for dev in devs {
        let name = dev.name();
        let c = ctx(dev);
        let (inc, double) = (kernel(&c, "inc"), kernel(&c, "double"));
        let q = Queue::new(&c, QueueOrder::OutOfOrder);
        let b = bufs(1);
        let mut want = b[0].read().unwrap();
        for step in 0..12 {
            let off = (step * 3) % 20;
            let (k, f): (&KernelHandle, fn(u32) -> u32) =
                if step % 2 == 0 { (&inc, |v| v + 1) } else { (&double, |v| v * 2) };
            launch(&q, k, 10, &b, &[(0, off)]);
            for v in &mut want[off..off + 10] {
                *v = f(*v);
            }
        }
        q.wait().unwrap();
        assert_eq!(b[0].read().unwrap(), want, "{name}");
    }
}

#[test]
fn command_graphs_replay_ranged_launches() {
    let mut devs = vec![interp_device()];
    devs.extend(devices());
    for dev in devs {
        let name = dev.name();
        let c = ctx(dev);
        let (add, double) = (kernel(&c, "add"), kernel(&c, "double"));
        // Offsets that are multiples of 64 bytes: recordable on every device (Vulkan's
        // minStorageBufferOffsetAlignment is 16 on lavapipe, at most 64 on NVIDIA's).
        let record = |q: &Queue, b: &[Buffer<u32>]| {
            launch(q, &add, 8, b, &[(0, 0), (1, 16), (2, 16)]);
            launch(q, &double, 12, b, &[(2, 16)]);
            launch(q, &add, 8, b, &[(1, 16), (2, 0), (0, 16)]);
        };
        let q = Queue::new(&c, QueueOrder::OutOfOrder);
        let eager = bufs(3);
        for _ in 0..2 {
            record(&q, &eager);
        }
        q.wait().unwrap();
        let replay = bufs(3);
        let g = Graph::new(&c, GraphProperties::default());
        q.begin_recording(&g).unwrap();
        record(&q, &replay);
        q.end_recording().unwrap();
        let exec = g.finalize().unwrap();
        for _ in 0..2 {
            q.submit_graph(&exec).wait().unwrap();
        }
        assert_eq!(contents(&replay), contents(&eager), "{name}");
    }
}

#[test]
fn vulkan_offsets_below_the_descriptor_alignment() {
    // The whole test is about Vulkan: without it, a recorded skip.
    let Some(vk) = kiln_ir::testing::require("KILN_REQUIRE_TOOLS", VulkanDevice::open()) else {
        return;
    };
    let align = vk.limits().min_storage_buffer_offset_alignment;
    let dev: Arc<dyn Device> = Arc::new(vk);
    if align <= 4 {
        // Every u32 offset is aligned there: nothing is staged or refused.
        kiln_ir::testing::skip(&format!("minStorageBufferOffsetAlignment is {align} bytes"));
        return;
    }
    // An eager launch stages an unaligned range (offset 1 element = 4 bytes) and matches
    // the interpreter.
    let run = |dev: Arc<dyn Device>| {
        let c = ctx(dev);
        let q = Queue::new(&c, QueueOrder::InOrder);
        let b = bufs(2);
        launch(&q, &kernel(&c, "add"), 9, &b, &[(0, 1), (1, 3), (1, 17)]);
        launch(&q, &kernel(&c, "inc"), 7, &b, &[(0, 5)]);
        q.wait().map(|()| contents(&b)).map_err(|e| e.to_string())
    };
    // The interpreter binds both views of buffer 1 (they see each other's stores).
    run(interp_device()).unwrap();
    // The unaligned range of buffer 1 shares its buffer with another argument: refused.
    let e = run(dev.clone()).unwrap_err();
    assert!(e.contains("minStorageBufferOffsetAlignment") && e.contains("binds the same"), "{e}");
    let c = ctx(dev.clone());
    let q = Queue::new(&c, QueueOrder::InOrder);
    let b = bufs(3);
    launch(&q, &kernel(&c, "add"), 9, &b, &[(0, 1), (1, 3), (2, 17)]);
    launch(&q, &kernel(&c, "inc"), 7, &b, &[(0, 5)]);
    q.wait().unwrap();
    let ci = ctx(interp_device());
    let qi = Queue::new(&ci, QueueOrder::InOrder);
    let bi = bufs(3);
    launch(&qi, &kernel(&ci, "add"), 9, &bi, &[(0, 1), (1, 3), (2, 17)]);
    launch(&qi, &kernel(&ci, "inc"), 7, &bi, &[(0, 5)]);
    qi.wait().unwrap();
    assert_eq!(contents(&b), contents(&bi));
    // A command graph cannot stage it: finalize refuses it, naming the limit.
    let g = Graph::new(&c, GraphProperties::default());
    q.begin_recording(&g).unwrap();
    launch(&q, &kernel(&c, "inc"), 7, &b, &[(0, 5)]);
    q.end_recording().unwrap();
    let e = match g.finalize() {
        Ok(_) => panic!("an unaligned range was recorded"),
        Err(e) => e.to_string(),
    };
    assert!(e.contains("minStorageBufferOffsetAlignment"), "{e}");
}

/// Command graph chain fusion goes through the fusion front end a queue uses, so it takes
/// ranged accessors as a fusion list does: kernels over ranges fuse (two disjoint ranges of
/// one buffer are two arguments) and replay with the eager result; a chain binding one
/// written buffer through overlapping ranges is refused, saying so.
#[test]
fn command_graph_chains_over_ranges_fuse() {
    let c = ctx(interp_device());
    let (add, double, inc) = (kernel(&c, "add"), kernel(&c, "double"), kernel(&c, "inc"));
    let record = |q: &Queue, b: &[Buffer<u32>]| {
        launch(q, &add, 8, b, &[(0, 0), (1, 16), (2, 16)]);
        launch(q, &double, 8, b, &[(2, 16)]);
        launch(q, &add, 8, b, &[(2, 16), (2, 0), (0, 8)]);
    };
    let q = Queue::new(&c, QueueOrder::OutOfOrder);
    let eager = bufs(3);
    record(&q, &eager);
    q.wait().unwrap();
    let replay = bufs(3);
    let g = Graph::new(&c, GraphProperties { fuse_chains: true, ..Default::default() });
    q.begin_recording(&g).unwrap();
    record(&q, &replay);
    q.end_recording().unwrap();
    let exec = g.finalize().unwrap();
    assert_eq!(exec.fused_chain_nodes(), [["node 0", "node 1", "node 2"]]);
    q.submit_graph(&exec).wait().unwrap();
    assert_eq!(contents(&replay), contents(&eager));
    // `double` over elements 16..24 then `inc` over 20..28 of the same buffer.
    let g = Graph::new(&c, GraphProperties { fuse_chains: true, ..Default::default() });
    q.begin_recording(&g).unwrap();
    launch(&q, &double, 8, &replay, &[(2, 16)]);
    launch(&q, &inc, 8, &replay, &[(2, 20)]);
    q.end_recording().unwrap();
    let exec = g.finalize().unwrap();
    assert_eq!(exec.fused_chains(), 0);
    let refused = exec.refused_chains();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].reason.contains("overlapping accessors (elements 16..24 and elements 20..28)"),
        "{refused:?}"
    );
}
