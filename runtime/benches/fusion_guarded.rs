//! Guarded-chain fusion benchmark (issue 28): five kernels written the way GPU programs are
//! (`if i < n`, `max`, `sqrt`, `exp`), over `n = 2^20 - 37` elements launched on `n` rounded
//! up to 256, in two chains (`e`, `y` intermediates promoted to private memory):
//!
//! * `guarded5_<device>/unfused`: the five submissions and a wait;
//! * `guarded5_<device>/fused`: the same between `start_fusion` and `complete_fusion` (one
//!   fused kernel per iteration, from the fusion cache after the first).
//!
//! Before timing, the fused run must complete (five kernels, no refused promotion) and give
//! the unfused run's bits, or the benchmark fails. The device is `KILN_BENCH_DEVICE`
//! (default `cpu`; `benches/gpu/fusion_queue.sh` also runs it on `cuda` and `vulkan`).
//!
//! `cargo bench -p kiln-runtime --bench fusion_guarded -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, Criterion};
use kiln_ir::parse_module;
use kiln_runtime::device::registry::{self, OpenOptions};
use kiln_runtime::QueueFusion;
use kiln_runtime::{
    AccessMode, AccessProps, Arg, Buffer, Context, ContextConfig, FusionProps, FusionStatus,
    KernelHandle, NdRange, PromoteTo, Queue, QueueOrder,
};

const N: u32 = (1 << 20) - 37;
const LOCAL: u32 = 256;

/// The same five kernels as runtime/tests/fusion_guarded.rs.
const KERNELS: &str = include_str!("../tests/guarded_chain.kir");

struct Chain {
    k: Vec<KernelHandle>,
    /// x, e, y, z
    b: Vec<Buffer<f32>>,
}

impl Chain {
    fn submit(&self, q: &Queue, promote: bool) {
        let r = NdRange::new(&[N.div_ceil(LOCAL) * LOCAL]).with_local(&[LOCAL]);
        let p = AccessProps { promote: promote.then_some(PromoteTo::Private), no_init: false };
        let (b, k, n) = (&self.b, &self.k, Arg::scalar(N));
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
            let args = vec![y.into(), Arg::scalar(0.25f32), n.clone()];
            h.parallel_for(&k[2], r, args);
        });
        q.submit(|h| {
            let (y, z) = (h.access_with(&b[2], AccessMode::Read, p), h.write(&b[3]));
            h.parallel_for(&k[3], r, vec![y.into(), z.into(), n.clone()]);
        });
        q.submit(|h| {
            let z = h.read_write(&b[3]);
            h.parallel_for(&k[4], r, vec![z.into(), Arg::scalar(1.5f32), n.clone()]);
        });
    }

    fn bits(&self) -> Vec<u32> {
        self.b[3].read().expect("read").iter().map(|x| x.to_bits()).collect()
    }
}

fn bench(c: &mut Criterion) {
    let name = std::env::var("KILN_BENCH_DEVICE").unwrap_or_else(|_| "cpu".into());
    let dev = registry::open(&name, &OpenOptions::default()).expect("the benchmark's device opens");
    let ctx = Context::with_config(dev, ContextConfig { workers: 2, ..Default::default() });
    let m = parse_module(KERNELS).expect("kernels parse");
    let names = ["shift_exp", "poly", "clamp_low", "root", "scale"];
    let k = names.iter().map(|n| ctx.get_kernel(&m, n).expect("kernel builds")).collect();
    let x: Vec<f32> = (0..N).map(|i| (i % 1013) as f32).collect();
    let zeros = || Buffer::from_slice(&vec![0f32; N as usize]);
    let chain = Chain { k, b: vec![Buffer::from_slice(&x), zeros(), zeros(), zeros()] };
    let q = Queue::new(&ctx, QueueOrder::InOrder);
    chain.submit(&q, false);
    q.wait().expect("unfused chain runs");
    let want = chain.bits();
    chain.b[3].write(&vec![0.0; N as usize]).unwrap();
    q.start_fusion().expect("fusion starts");
    chain.submit(&q, true);
    q.complete_fusion(FusionProps::default()).wait().expect("fused chain runs");
    match q.fusion_status() {
        Some(FusionStatus::Completed { kernels: 5, warnings, .. }) if warnings.is_empty() => {}
        s => panic!("the guarded chain was not fused with its promotions: {s:?}"),
    }
    assert!(chain.bits() == want, "fused and unfused results differ");

    let mut group = c.benchmark_group(format!("guarded5_{name}"));
    group.sample_size(20);
    group.bench_function("unfused", |bench| {
        bench.iter(|| {
            chain.submit(&q, false);
            q.wait().expect("chain runs");
        })
    });
    group.bench_function("fused", |bench| {
        bench.iter(|| {
            q.start_fusion().expect("fusion starts");
            chain.submit(&q, true);
            q.complete_fusion(FusionProps::default()).wait().expect("fused chain runs");
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
