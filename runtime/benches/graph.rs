//! Command-graph benchmark: a chain of 100 tiny kernels (one work-item each), submitted
//! eagerly (100 submissions on an in-order queue) against one replay of the same chain
//! recorded into a graph, in the same run, on the interpreter device, the cpu device (x86-64
//! code) and, when one is found, on Vulkan (lavapipe here), where the replay is one recorded
//! command buffer.
//!
//! * `chain100[-cpu|-vulkan]/{eager,graph}/submit`: host time of the submission calls only (the
//!   run is waited for outside the measured time);
//! * `chain100[-cpu|-vulkan]/{eager,graph}/submit_wait`: submission and completion.
//!
//! `cargo bench -p kiln-runtime --bench graph -- --warm-up-time 1 --measurement-time 3`

use kiln_runtime::QueueGraph;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use kiln_ir::parse_module;
use kiln_runtime::device::registry::{self, OpenOptions};
use kiln_runtime::device::vulkan::VulkanDevice;
use kiln_runtime::graph::{Graph, GraphProperties};
use kiln_runtime::{
    interp_device, Arg, Buffer, Context, ContextConfig, Device, KernelHandle, NdRange, Queue,
    QueueOrder,
};

const NODES: usize = 100;

fn chain(q: &Queue, k: &KernelHandle, b: &Buffer<u32>) {
    for _ in 0..NODES {
        q.submit(|h| {
            let x = h.read_write(b);
            h.parallel_for(k, NdRange::new(&[1]), vec![Arg::from(x)]);
        });
    }
}

fn bench(c: &mut Criterion) {
    bench_on(c, "chain100", interp_device());
    match registry::open("cpu", &OpenOptions::default()) {
        Ok(d) => bench_on(c, "chain100-cpu", d),
        Err(e) => eprintln!("chain100-cpu not measured: {e}"),
    }
    match VulkanDevice::open() {
        Ok(d) => bench_on(c, "chain100-vulkan", Arc::new(d)),
        Err(e) => eprintln!("chain100-vulkan not measured: {e}"),
    }
}

fn bench_on(c: &mut Criterion, group: &str, device: Arc<dyn Device>) {
    let ctx = Context::with_config(device, ContextConfig { workers: 2, ..Default::default() });
    let m = parse_module(
        "kernel inc(x: ptr<global, u32>) { let i: u32 = global_id(0); x[i] = x[i] + 1u32; }",
    )
    .expect("kernel parses");
    let k = ctx.get_kernel(&m, "inc").expect("kernel builds");
    let q = Queue::new(&ctx, QueueOrder::InOrder);
    let b = Buffer::<u32>::zeroed(1);
    let g = Graph::new(&ctx, GraphProperties::default());
    q.begin_recording(&g).expect("recording starts");
    chain(&q, &k, &b);
    q.end_recording().expect("recording ends");
    let exec = g.finalize().expect("graph finalizes");

    let mut group = c.benchmark_group(group);
    group.bench_function("eager/submit", |bench| {
        bench.iter_custom(|iters| {
            let mut t = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                chain(&q, &k, &b);
                t += start.elapsed();
                q.wait().expect("chain runs");
            }
            t
        })
    });
    group.bench_function("graph/submit", |bench| {
        bench.iter_custom(|iters| {
            let mut t = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let e = q.submit_graph(&exec);
                t += start.elapsed();
                e.wait().expect("graph runs");
            }
            t
        })
    });
    group.bench_function("eager/submit_wait", |bench| {
        bench.iter(|| {
            chain(&q, &k, &b);
            q.wait().expect("chain runs");
        })
    });
    group.bench_function("graph/submit_wait", |bench| {
        bench.iter(|| q.submit_graph(&exec).wait().expect("graph runs"))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
