//! Command-graph benchmark: a chain of 100 tiny kernels (one work-item each) on the
//! interpreter device, submitted eagerly (100 submissions on an in-order queue) against one
//! replay of the same chain recorded into a graph, in the same run.
//!
//! * `chain100/{eager,graph}/submit`: host time of the submission calls only (the run is
//!   waited for outside the measured time);
//! * `chain100/{eager,graph}/submit_wait`: submission and completion.
//!
//! `cargo bench -p kiln-runtime --bench graph -- --warm-up-time 1 --measurement-time 3`

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use kiln_ir::parse_module;
use kiln_runtime::graph::{Graph, GraphProperties};
use kiln_runtime::{
    interp_device, Buffer, Context, ContextConfig, KernelArg, KernelHandle, NdRange, Queue,
    QueueOrder,
};

const NODES: usize = 100;

fn chain(q: &Queue, k: &KernelHandle, b: &Buffer<u32>) {
    for _ in 0..NODES {
        q.submit(|h| {
            let x = h.read_write(b);
            h.parallel_for(k, NdRange::new(&[1]), vec![KernelArg::from(x)]);
        });
    }
}

fn bench(c: &mut Criterion) {
    let ctx =
        Context::with_config(interp_device(), ContextConfig { workers: 2, ..Default::default() });
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

    let mut group = c.benchmark_group("chain100");
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
