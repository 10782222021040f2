//! Eager Vulkan launches at driver speed (issue 25 item 1): command buffers, descriptor
//! pools and fences come from a pool and are reused; a launch returns once submitted, and
//! the host waits for the device only when it reads or writes a buffer or waits on an
//! event. Every result is compared with the interpreter's. Without a Vulkan device the tests
//! skip, unless `KILN_REQUIRE_TOOLS` is set.

use kiln_runtime::QueueGraph;
use std::sync::Arc;
use std::time::Duration;

use kiln_ir::parse_module;
use kiln_runtime::device::vulkan::VulkanDevice;
use kiln_runtime::graph::{Graph, GraphProperties};
use kiln_runtime::{
    interp_device, Arg, Buffer, Context, ContextConfig, Device, EventStatus, KernelHandle, NdRange,
    Queue, QueueOrder,
};

const KERNELS: &str = "
kernel inc(x: ptr<global, u32>) {
  let i: u32 = global_id(0);
  x[i] = x[i] * 3u32 + i;
}
kernel axpy(x: ptr<global, u32>, y: ptr<global, u32>, a: u32) {
  let i: u32 = global_id(0);
  y[i] = a * x[i] + y[i];
}
";

const N: usize = 64;
/// More launches than the launcher has slots, so slots are reused.
const CHAIN: usize = 100;

fn vulkan() -> Option<Arc<VulkanDevice>> {
    kiln_ir::testing::require("KILN_REQUIRE_TOOLS", VulkanDevice::open()).map(Arc::new)
}

fn ctx(d: Arc<dyn Device>) -> Context {
    Context::with_config(d, ContextConfig { workers: 2, ..Default::default() })
}

fn kernel(c: &Context, name: &str) -> KernelHandle {
    c.get_kernel(&parse_module(KERNELS).unwrap(), name).unwrap()
}

fn inc(q: &Queue, k: &KernelHandle, x: &Buffer<u32>) {
    q.submit(|h| {
        let x = h.read_write(x);
        h.parallel_for(k, NdRange::new(&[N as u32]), vec![x.into()]);
    });
}

fn axpy(q: &Queue, k: &KernelHandle, x: &Buffer<u32>, y: &Buffer<u32>, a: u32) {
    q.submit(|h| {
        let (x, y) = (h.read(x), h.read_write(y));
        h.parallel_for(k, NdRange::new(&[N as u32]), vec![x.into(), y.into(), Arg::scalar(a)]);
    });
}

fn iota() -> Vec<u32> {
    (0..N as u32).map(|i| i * 7 + 1).collect()
}

/// `CHAIN` dependent launches of `inc` on an iota buffer, on `dev`, read back.
fn chain_on(dev: Arc<dyn Device>) -> Vec<u32> {
    let c = ctx(dev);
    let k = kernel(&c, "inc");
    let q = Queue::new(&c, QueueOrder::InOrder);
    let x = Buffer::from_slice(&iota());
    for _ in 0..CHAIN {
        inc(&q, &k, &x);
    }
    x.read().unwrap()
}

/// 100 dependent eager launches make at most one command buffer, fence and descriptor pool
/// per slot (not one each per launch), and the host does not wait for the device between
/// them: only the final read waits, once. The result is the interpreter's.
#[test]
fn eager_launches_reuse_pooled_objects_and_do_not_wait() {
    let Some(dev) = vulkan() else { return };
    let c = ctx(dev.clone());
    let k = kernel(&c, "inc");
    let q = Queue::new(&c, QueueOrder::InOrder);
    let x = Buffer::from_slice(&iota());
    // The upload of the buffer's first launch may wait; count from after it.
    inc(&q, &k, &x);
    q.wait().unwrap();
    let before = dev.launch_stats();
    for _ in 2..CHAIN {
        inc(&q, &k, &x);
    }
    let last = q.submit(|h| {
        let a = h.read_write(&x);
        h.parallel_for(&k, NdRange::new(&[N as u32]), vec![a.into()]);
    });
    // Every launch is submitted once its event completes (polling the status does not wait
    // for the device): submission never waited for the device to finish (only for the
    // oldest launch, when all slots were in flight). The read then waits, at most once.
    while last.status() != EventStatus::Complete {
        assert_ne!(last.status(), EventStatus::Failed, "{:?}", last.wait());
        std::thread::yield_now();
    }
    let submitted = dev.launch_stats();
    let got = x.read().unwrap();
    let after = dev.launch_stats();
    assert_eq!(got, chain_on(interp_device()), "the eager chain's result");
    assert_eq!(after.submits - before.submits, CHAIN as u64 - 1, "{before:?} {after:?}");
    // At most one of each per slot over the device's life: far fewer than launches.
    for (what, n) in [
        ("command buffers", after.command_buffers),
        ("fences", after.fences),
        ("descriptor pools", after.descriptor_pools),
    ] {
        assert!(n <= 32, "{n} {what} for {} launches: {after:?}", after.submits);
    }
    assert!(
        submitted.finishes == before.finishes && after.finishes <= submitted.finishes + 1,
        "the host waited for the device between launches, or the read more than once: \
         {before:?} {submitted:?} {after:?}"
    );
    q.wait().unwrap();
}

/// A wait on a launch's event waits for the device: the buffer's device copy is final
/// then, and reading it needs no further wait.
#[test]
fn event_wait_waits_for_the_device() {
    let Some(dev) = vulkan() else { return };
    let c = ctx(dev.clone());
    let k = kernel(&c, "inc");
    let q = Queue::new(&c, QueueOrder::InOrder);
    let x = Buffer::from_slice(&iota());
    for _ in 0..CHAIN - 1 {
        inc(&q, &k, &x);
    }
    let last = q.submit(|h| {
        let a = h.read_write(&x);
        h.parallel_for(&k, NdRange::new(&[N as u32]), vec![a.into()]);
    });
    assert_eq!(last.wait_timeout(Duration::from_secs(60)).map(|r| r.is_ok()), Some(true));
    let waited = dev.launch_stats();
    let got = x.read().unwrap();
    assert_eq!(dev.launch_stats().finishes, waited.finishes, "the read waited again");
    assert_eq!(got, chain_on(interp_device()));
}

/// The host's writes between launches (a partial write, a host task, a copy, a fill) are
/// ordered with the launches in flight: each sees the device's writes and the device sees
/// its writes, as on the interpreter. A graph replay submitted after eager launches in
/// flight runs after them, and eager launches after a replay run after it.
#[test]
fn host_accesses_and_replays_order_with_launches_in_flight() {
    let Some(dev) = vulkan() else { return };
    let run = |dev: Arc<dyn Device>| {
        let c = ctx(dev);
        let (ki, ka) = (kernel(&c, "inc"), kernel(&c, "axpy"));
        let q = Queue::new(&c, QueueOrder::OutOfOrder);
        let x = Buffer::from_slice(&iota());
        let y = Buffer::from_slice(&[5u32; N]);
        let g = Graph::new(&c, GraphProperties::default());
        q.begin_recording(&g).unwrap();
        axpy(&q, &ka, &x, &y, 3);
        inc(&q, &ki, &y);
        q.end_recording().unwrap();
        let exec = g.finalize().unwrap();
        let mut seen = Vec::new();
        for round in 0..3u32 {
            for _ in 0..5 {
                inc(&q, &ki, &x);
            }
            axpy(&q, &ka, &x, &y, round + 2);
            x.write(&[round * 1000, 1, 2]).unwrap();
            q.submit_graph(&exec);
            let z = Buffer::<u32>::zeroed(N);
            q.submit(|h| {
                let (ya, za) = (h.read(&y), h.write(&z));
                h.host_task(move |t| {
                    let v = t.read::<u32>(&ya).ok_or("y unreadable")?;
                    t.write(&za, &v.iter().map(|e| e ^ 0x55).collect::<Vec<_>>())
                });
            });
            axpy(&q, &ka, &z, &x, 1);
            q.submit(|h| h.copy(&(&y).into(), &(&z).into()));
            inc(&q, &ki, &z);
            q.submit(|h| h.fill(&(&y).into(), kiln_ir::launch::Element::to_imm(round + 9)));
            axpy(&q, &ka, &z, &y, 2);
            seen.push(x.read().unwrap());
            seen.push(y.read().unwrap());
            seen.push(z.read().unwrap());
        }
        q.wait().unwrap();
        seen
    };
    assert_eq!(run(dev), run(interp_device()));
}

/// Buffers dropped while launches using them are in flight, and a context dropped with
/// launches in flight, neither crash nor lose a result that was read.
#[test]
fn drops_with_launches_in_flight() {
    let Some(dev) = vulkan() else { return };
    let k;
    {
        let c = ctx(dev.clone());
        k = kernel(&c, "inc");
        let q = Queue::new(&c, QueueOrder::InOrder);
        for _ in 0..10 {
            let t = Buffer::from_slice(&iota());
            for _ in 0..10 {
                inc(&q, &k, &t);
            }
        }
        let x = Buffer::from_slice(&iota());
        for _ in 0..CHAIN {
            inc(&q, &k, &x);
        }
        assert_eq!(x.read().unwrap(), chain_on(interp_device()));
        for _ in 0..CHAIN {
            inc(&q, &k, &x);
        }
    }
    drop(k);
    assert_eq!(chain_on(dev), chain_on(interp_device()));
}
