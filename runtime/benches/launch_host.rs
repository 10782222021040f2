//! The runtime's own host cost per launch (issue 25 item 1), with the driver taken out: a
//! stand-in device with memory of its own (as CUDA and Vulkan have) that runs the `inc`
//! kernel natively on host memory, so what is timed is the queue, the scheduler, the events,
//! the buffers' bookkeeping and the argument packing above a device, and nothing of a driver.
//!
//! * `host100/eager`: 100 dependent launches of `inc` submitted on an in-order queue and
//!   waited for (what `launch.rs` times on CUDA and Vulkan, less the driver's cost);
//! * `host100/replay`: the same recorded as a command graph and replayed (the device records
//!   the launches once; a replay runs them natively in one call);
//! * `fusion5/host_path`: a queue's fusion of the five guarded-chain kernels
//!   (`tests/guarded_chain.kir`, 256 work-items): `start_fusion`, five submissions and
//!   `complete_fusion`, the host work only (the fused kernel then runs on the cpu device,
//!   waited for outside the timing); every iteration after the first is a fusion-cache hit.
//!
//! Every result is checked before anything is timed. The closing `host cost:` line gives
//! the medians per kernel, per node and per fused list.
//!
//! `cargo bench -p kiln-runtime --bench launch_host -- --warm-up-time 1 --measurement-time 3`

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kiln_ir::launch::NdRange;
use kiln_ir::parse_module;
use kiln_runtime::device::registry::{self, OpenOptions};
use kiln_runtime::graph::{Graph, GraphProperties};
use kiln_runtime::{
    AccessMode, AccessProps, Arg, Buffer, Context, ContextConfig, FusionProps, FusionStatus,
    PromoteTo, Queue, QueueFusion, QueueGraph, QueueOrder,
};

#[path = "../tests/common/host_device.rs"]
mod host_device;
use host_device::{Dev, HostNative, INC};

const ITEMS: u32 = 256;
const NODES: usize = 100;

fn range() -> NdRange {
    NdRange::new(&[ITEMS]).with_local(&[32])
}

fn expected(runs: u32) -> Vec<u32> {
    (0..ITEMS).map(|i| runs.wrapping_mul(i + 1)).collect()
}

/// The median of `runs` timings of `f`.
fn median(runs: usize, mut f: impl FnMut() -> Duration) -> Duration {
    let mut t: Vec<Duration> = (0..runs).map(|_| f()).collect();
    t.sort();
    t[runs / 2]
}

fn timed(mut f: impl FnMut()) -> impl FnMut() -> Duration {
    move || {
        let s = Instant::now();
        f();
        s.elapsed()
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn chains(c: &mut Criterion) -> (f64, f64) {
    let dev = Arc::new(HostNative::default());
    let ctx = Context::new(Arc::new(Dev(dev.clone())));
    let m = parse_module(INC).expect("kernel parses");
    let k = ctx.get_kernel(&m, "inc").expect("kernel builds");
    let q = Queue::new(&ctx, QueueOrder::InOrder);
    let b = Buffer::<u32>::zeroed(ITEMS as usize);
    let chain = || {
        for _ in 0..NODES {
            q.submit(|h| {
                let x = h.read_write(&b);
                h.parallel_for(&k, range(), vec![Arg::from(x)]);
            });
        }
    };
    let g = Graph::new(&ctx, GraphProperties::default());
    q.begin_recording(&g).expect("recording starts");
    chain();
    q.end_recording().expect("recording ends");
    let exec = g.finalize().expect("graph finalizes");
    chain();
    q.wait().expect("chain runs");
    assert_eq!(b.read().expect("reads"), expected(NODES as u32), "the eager chain's result");
    q.submit_graph(&exec).wait().expect("graph runs");
    assert_eq!(b.read().expect("reads"), expected(2 * NODES as u32), "the replay's result");
    assert_eq!(dev.launches.load(Ordering::Relaxed), 2 * NODES as u64, "launches on the device");

    let eager = || {
        chain();
        q.wait().expect("chain runs");
    };
    let replay = || q.submit_graph(&exec).wait().expect("graph runs");
    let mut g = c.benchmark_group("host100");
    g.throughput(Throughput::Elements(NODES as u64));
    g.bench_function("eager", |bench| bench.iter(eager));
    g.bench_function("replay", |bench| bench.iter(replay));
    g.finish();
    let (e, r) = (median(201, timed(eager)), median(201, timed(replay)));
    let runs = dev.launches.load(Ordering::Relaxed) / NODES as u64;
    assert_eq!(b.read().expect("reads"), expected(runs as u32 * NODES as u32), "timed result");
    (us(e) / NODES as f64, us(r) / NODES as f64)
}

/// The guarded chain's five submissions in fusion mode and `complete_fusion`.
fn fusion(c: &mut Criterion) -> f64 {
    const N: u32 = ITEMS - 7;
    let dev = registry::open("cpu", &OpenOptions::default()).expect("the cpu device opens");
    let ctx = Context::with_config(dev, ContextConfig { workers: 2, ..Default::default() });
    let m = parse_module(include_str!("../tests/guarded_chain.kir")).expect("kernels parse");
    let names = ["shift_exp", "poly", "clamp_low", "root", "scale"];
    let k: Vec<_> = names.iter().map(|n| ctx.get_kernel(&m, n).expect("kernel builds")).collect();
    let x: Vec<f32> = (0..N).map(|i| (i % 1013) as f32).collect();
    let zeros = || Buffer::from_slice(&vec![0f32; N as usize]);
    let b = [Buffer::from_slice(&x), zeros(), zeros(), zeros()];
    let q = Queue::new(&ctx, QueueOrder::InOrder);
    let p = AccessProps { promote: Some(PromoteTo::Private), no_init: false };
    let r = NdRange::new(&[ITEMS]).with_local(&[ITEMS]);
    let n = Arg::scalar(N);
    let submit = |fused: bool| {
        if fused {
            q.start_fusion().expect("fusion starts");
        }
        q.submit(|h| {
            let (x, e) = (h.read(&b[0]), h.access_with(&b[1], AccessMode::Write, p));
            h.parallel_for(&k[0], r, vec![x.into(), e.into(), n.clone()]);
        });
        q.submit(|h| {
            let (e, y) = (
                h.access_with(&b[1], AccessMode::Read, p),
                h.access_with(&b[2], AccessMode::Write, p),
            );
            h.parallel_for(&k[1], r, vec![e.into(), y.into(), n.clone()]);
        });
        q.submit(|h| {
            let y = h.access_with(&b[2], AccessMode::ReadWrite, p);
            h.parallel_for(&k[2], r, vec![y.into(), Arg::scalar(0.25f32), n.clone()]);
        });
        q.submit(|h| {
            let (y, z) = (h.access_with(&b[2], AccessMode::Read, p), h.write(&b[3]));
            h.parallel_for(&k[3], r, vec![y.into(), z.into(), n.clone()]);
        });
        q.submit(|h| {
            let z = h.read_write(&b[3]);
            h.parallel_for(&k[4], r, vec![z.into(), Arg::scalar(1.5f32), n.clone()]);
        });
        if fused {
            q.complete_fusion(FusionProps::default());
        }
    };
    let bits = || -> Vec<u32> { b[3].read().expect("reads").iter().map(|v| v.to_bits()).collect() };
    submit(false);
    q.wait().expect("unfused chain runs");
    let want = bits();
    b[3].write(&vec![0f32; N as usize]).expect("writes");
    for _ in 0..2 {
        submit(true);
        q.wait().expect("fused chain runs");
        match q.fusion_status() {
            Some(FusionStatus::Completed { kernels: 5, ref warnings, .. })
                if warnings.is_empty() => {}
            s => panic!("the fusion did not complete cleanly: {s:?}"),
        }
        assert_eq!(bits(), want, "the fused chain gives the unfused chain's bits");
    }
    let host_path = || {
        let s = Instant::now();
        submit(true);
        let t = s.elapsed();
        q.wait().expect("fused chain runs");
        t
    };
    c.benchmark_group("fusion5").bench_function("host_path", |bench| {
        bench.iter_custom(|iters| (0..iters).map(|_| host_path()).sum())
    });
    let t = median(201, host_path);
    assert!(
        matches!(q.fusion_status(), Some(FusionStatus::Completed { cache_hit: true, .. })),
        "the timed fusions hit the fusion cache"
    );
    assert_eq!(bits(), want, "the timed fused chains give the unfused chain's bits");
    us(t)
}

fn bench(c: &mut Criterion) {
    let (e, r) = chains(c);
    let f = fusion(c);
    println!(
        "host cost: eager {e:.2} us per kernel, replay {r:.3} us per node, fusion of 5 kernels \
         {f:.1} us per list (start_fusion, 5 submissions, complete_fusion)"
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
