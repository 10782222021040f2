//! Every public operation of the runtime at once, from several threads, on the interp, cpu
//! and Vulkan devices: queue submissions and waits, fusion lists, command graph recording and
//! replay, cache builds and clears, host reads and writes of buffers shared between the
//! threads. Tests build in debug, where every lock checks the written lock order
//! (`kiln_runtime`'s "Lock order"): an out-of-order lock panics naming both locks, and a
//! deadlock fails the watchdog instead of hanging the suite. Each thread's own buffer must
//! end with exactly the updates it asked for.

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use kiln_ir::parse_module;
use kiln_runtime::device::registry::{self, OpenOptions};
use kiln_runtime::graph::{Graph, GraphProperties};
use kiln_runtime::{
    interp_device, Arg, Buffer, Context, ContextConfig, Device, FusionProps, KernelHandle, NdRange,
    Queue, QueueFusion, QueueGraph, QueueOrder,
};

const N: usize = 64;
const THREADS: usize = 6;
const ROUNDS: usize = 40;

const SRC: &str = "
kernel inc(b: ptr<global, u32>, s: ptr<global, u32>) {
  let i: u32 = global_id(0);
  b[i] = b[i] + 1u32 + s[i];
}
";

fn range() -> NdRange {
    NdRange::new(&[N as u32])
}

/// `inc(b, s)` submitted to `q`: `b` gains 1 (`s` holds zeros).
fn inc(q: &Queue, k: &KernelHandle, b: &Buffer<u32>, s: &Buffer<u32>) {
    q.submit(|h| {
        let (b, s) = (h.read_write(b), h.read(s));
        h.parallel_for(k, range(), vec![Arg::from(b), Arg::from(s)]);
    });
}

/// One thread's work: `ROUNDS` rounds cycling through the operations, each checked.
fn worker(ctx: &Context, t: usize, shared: &Buffer<u32>) {
    let m = parse_module(SRC).unwrap();
    let k = ctx.get_kernel(&m, "inc").unwrap();
    let mine = Buffer::from_slice(&[0u32; N]);
    let mut want = 0u32;
    for round in 0..ROUNDS {
        let q = Queue::new(ctx, QueueOrder::InOrder);
        match (t + round) % 5 {
            0 => {
                inc(&q, &k, &mine, shared);
                q.wait().unwrap();
                want += 1;
            }
            1 => {
                // Another thread's host write of `shared` may end the fusion early: the
                // kernels then run unfused, with the same result.
                q.start_fusion().unwrap();
                inc(&q, &k, &mine, shared);
                inc(&q, &k, &mine, shared);
                q.complete_fusion(FusionProps::default()).wait().unwrap();
                want += 2;
            }
            2 => {
                let props = GraphProperties { fuse_chains: round % 2 == 0, ..Default::default() };
                let g = Graph::new(ctx, props);
                q.begin_recording(&g).unwrap();
                inc(&q, &k, &mine, shared);
                inc(&q, &k, &mine, shared);
                q.end_recording().unwrap();
                let exec = g.finalize().unwrap();
                for _ in 0..2 {
                    q.submit_graph(&exec).wait().unwrap();
                }
                want += 4;
            }
            3 => {
                // Builds through the caches (a module of this thread and round: a miss),
                // statistics and a clear, while other threads build and launch.
                let src = SRC.replace("inc(", &format!("inc_{t}_{round}("));
                let m = parse_module(&src).unwrap();
                let k2 = ctx.get_kernel(&m, &format!("inc_{t}_{round}")).unwrap();
                let _ = (ctx.program_cache_stats(), ctx.kernel_cache_stats());
                let _ = ctx.fusion_cache_stats();
                if round % 3 == 0 {
                    ctx.clear_caches();
                }
                inc(&q, &k2, &mine, shared);
                want += 1;
            }
            _ => {
                // Host access: a write of the shared buffer (zeros again) waits for every
                // kernel reading it; reads wait for the writers.
                shared.write(&[0u32; N]).unwrap();
                assert_eq!(mine.read().unwrap(), vec![want; N], "thread {t} round {round}");
                mine.write(&[want; N]).unwrap();
            }
        }
    }
    assert_eq!(mine.read().unwrap(), vec![want; N], "thread {t}");
}

/// Runs the threads on `device`; a deadlock fails after a minute instead of hanging.
fn hammer(device: Arc<dyn Device>) {
    let (done, finished) = mpsc::channel();
    let worker_pool = std::thread::spawn(move || {
        let config = ContextConfig { workers: 3, ..ContextConfig::default() };
        let ctx = Context::with_config(device, config);
        let shared = Buffer::from_slice(&[0u32; N]);
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (ctx, shared) = (&ctx, &shared);
                s.spawn(move || worker(ctx, t, shared));
            }
        });
        let _ = done.send(());
    });
    match finished.recv_timeout(Duration::from_secs(120)) {
        Ok(()) => worker_pool.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            // A worker panicked (a lock-order violation names both locks): show it.
            if let Err(p) = worker_pool.join() {
                std::panic::resume_unwind(p);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("deadlock: the threads did not finish"),
    }
}

#[test]
fn every_operation_at_once_on_the_interpreter() {
    hammer(interp_device());
}

#[test]
fn every_operation_at_once_on_the_cpu_device() {
    let options = OpenOptions { threads: Some(2), ..OpenOptions::default() };
    let Some(dev) =
        kiln_ir::testing::require("KILN_REQUIRE_TOOLS", registry::open("cpu", &options))
    else {
        return;
    };
    hammer(dev);
}

#[test]
fn every_operation_at_once_on_vulkan() {
    // The Vulkan device's own locks (pipelines, launch slots, queue) are ranked too: they are
    // taken under buffers' contents and the caches, never the other way round.
    let found = registry::open("vulkan", &OpenOptions::default());
    let Some(dev) = kiln_ir::testing::require("KILN_REQUIRE_TOOLS", found) else {
        return;
    };
    hammer(dev);
}
