//! The eager launch path (issue 25): a launch whose dependencies have finished, on a device
//! whose launches return once submitted (memory of its own, as CUDA and Vulkan), is made by
//! the submitting thread itself, with no hand-off to a worker; a graph replay of device work
//! too. Work that must wait (for a host task) or is a host task runs on a worker, and every
//! order still holds.

#[path = "common/host_device.rs"]
mod host_device;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::ThreadId;

use host_device::{Dev, HostNative, INC};
use kiln_ir::parse_module;
use kiln_runtime::graph::{Graph, GraphProperties};
use kiln_runtime::QueueGraph;
use kiln_runtime::{Arg, Buffer, Context, KernelHandle, NdRange, Queue, QueueOrder};

const N: u32 = 64;

fn setup() -> (Arc<HostNative>, Context, KernelHandle) {
    let dev = Arc::new(HostNative::default());
    let ctx = Context::new(Arc::new(Dev(dev.clone())));
    let k = ctx.get_kernel(&parse_module(INC).unwrap(), "inc").unwrap();
    (dev, ctx, k)
}

fn inc(q: &Queue, k: &KernelHandle, b: &Buffer<u32>) {
    q.submit(|h| {
        let x = h.read_write(b);
        h.parallel_for(k, NdRange::new(&[N]), vec![Arg::from(x)]);
    });
}

/// `x` after `runs` launches of `inc` on zeros.
fn after(runs: u32) -> Vec<u32> {
    (0..N).map(|i| runs * (i + 1)).collect()
}

fn threads(dev: &HostNative) -> Vec<ThreadId> {
    std::mem::take(&mut *dev.threads.lock().unwrap())
}

#[test]
fn ready_launches_and_replays_run_on_the_submitting_thread() {
    let (dev, ctx, k) = setup();
    let me = std::thread::current().id();
    let b = Buffer::<u32>::zeroed(N as usize);
    for order in [QueueOrder::InOrder, QueueOrder::OutOfOrder] {
        let q = Queue::new(&ctx, order);
        for _ in 0..10 {
            inc(&q, &k, &b);
        }
        q.wait().unwrap();
        assert_eq!(threads(&dev), vec![me; 10], "{order:?}: eager launches");
    }
    assert_eq!(b.read().unwrap(), after(20));
    let q = Queue::new(&ctx, QueueOrder::InOrder);
    let g = Graph::new(&ctx, GraphProperties::default());
    q.begin_recording(&g).unwrap();
    for _ in 0..5 {
        inc(&q, &k, &b);
    }
    q.end_recording().unwrap();
    let exec = g.finalize().unwrap();
    for _ in 0..3 {
        q.submit_graph(&exec).wait().unwrap();
    }
    assert_eq!(threads(&dev), vec![me; 3], "one replay of the recording per submission");
    assert_eq!(b.read().unwrap(), after(35));
    assert_eq!(dev.launches.load(Ordering::Relaxed), 35);
}

#[test]
fn launches_after_a_host_task_run_on_a_worker_in_order() {
    let (dev, ctx, k) = setup();
    let me = std::thread::current().id();
    let b = Buffer::<u32>::zeroed(N as usize);
    let q = Queue::new(&ctx, QueueOrder::InOrder);
    let host = std::sync::Mutex::new(None);
    let host = Arc::new(host);
    let seen = host.clone();
    // The host task ends only once the launches below are submitted.
    let (go, submitted) = std::sync::mpsc::channel::<()>();
    q.submit(|h| {
        let x = h.read_write(&b);
        h.host_task(move |t| {
            *seen.lock().unwrap() = Some(std::thread::current().id());
            submitted.recv().map_err(|e| e.to_string())?;
            t.write(&x, &vec![1000u32; N as usize])
        });
    });
    for _ in 0..3 {
        inc(&q, &k, &b);
    }
    go.send(()).unwrap();
    q.wait().unwrap();
    let host = host.lock().unwrap().expect("the host task ran");
    assert_ne!(host, me, "a host task runs on a worker");
    let ran = threads(&dev);
    assert_eq!(ran.len(), 3);
    assert!(ran.iter().all(|t| *t != me), "launches that had to wait ran on workers: {ran:?}");
    let want: Vec<u32> = after(3).iter().map(|v| v + 1000).collect();
    assert_eq!(b.read().unwrap(), want, "the launches ran after the host task, in order");
}
