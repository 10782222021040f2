//! Fusion-mode loop benchmark, Codeplay's 4-kernel shape: three inputs `a`, `b`, `c` and an
//! elementwise chain `t1 = a + b; t2 = t1 * c; t3 = t2 - a; out = t3 * s` over 2^20 f32,
//! submitted per iteration on an in-order queue, waited for at the end of each iteration:
//!
//! * `chain4/unfused`: the four kernels as they are (the intermediates `t1..t3` go through
//!   global memory);
//! * `chain4/fused`: the same four submissions between `start_fusion` and `complete_fusion`,
//!   the intermediates' accessors asking for private promotion: one fused kernel per
//!   iteration, from the fusion cache after the first;
//! * `chain4/fused_no_barriers`: the same with `FusionProps { no_barriers: true }` (no
//!   work-group barrier between the fused kernels, which per-element kernels do not need).
//!
//! The device is `KILN_BENCH_DEVICE` (default `cpu`; `benches/gpu/fusion_queue.sh` runs it
//! with `cuda`). Compare the two lines of one run (fused / unfused).
//!
//! `cargo bench -p kiln-runtime --bench fusion_queue -- --warm-up-time 1 --measurement-time 3`

use criterion::{criterion_group, criterion_main, Criterion};
use kiln_ir::parse_module;
use kiln_runtime::device::registry::{self, OpenOptions};
use kiln_runtime::QueueFusion;
use kiln_runtime::{
    AccessMode, AccessProps, Arg, Buffer, Context, ContextConfig, FusionProps, FusionStatus,
    KernelHandle, NdRange, PromoteTo, Queue, QueueOrder,
};

const N: usize = 1 << 20;

const KERNELS: &str = "
kernel add(a: ptr<global, f32>, b: ptr<global, f32>, out: ptr<global, f32>) {
  let i: u32 = global_id(0); out[i] = a[i] + b[i];
}
kernel mul(a: ptr<global, f32>, b: ptr<global, f32>, out: ptr<global, f32>) {
  let i: u32 = global_id(0); out[i] = a[i] * b[i];
}
kernel sub(a: ptr<global, f32>, b: ptr<global, f32>, out: ptr<global, f32>) {
  let i: u32 = global_id(0); out[i] = a[i] - b[i];
}
kernel scale(a: ptr<global, f32>, s: f32, out: ptr<global, f32>) {
  let i: u32 = global_id(0); out[i] = a[i] * s;
}
";

struct Chain {
    add: KernelHandle,
    mul: KernelHandle,
    sub: KernelHandle,
    scale: KernelHandle,
    /// a, b, c, t1, t2, t3, out
    b: Vec<Buffer<f32>>,
}

impl Chain {
    /// Submits the four kernels; with `promote`, the intermediates' accessors ask for
    /// private promotion (the first use of each writes it only).
    fn submit(&self, q: &Queue, promote: bool) {
        let r = NdRange::new(&[N as u32]);
        let p = AccessProps { promote: promote.then_some(PromoteTo::Private), no_init: false };
        let b = &self.b;
        let step = |k: &KernelHandle, x: usize, y: usize, t: usize| {
            q.submit(|h| {
                let x =
                    if x >= 3 { h.access_with(&b[x], AccessMode::Read, p) } else { h.read(&b[x]) };
                let y = h.read(&b[y]);
                let o =
                    if t < 6 { h.access_with(&b[t], AccessMode::Write, p) } else { h.write(&b[t]) };
                h.parallel_for(k, r, vec![x.into(), y.into(), o.into()]);
            });
        };
        step(&self.add, 0, 1, 3);
        step(&self.mul, 3, 2, 4);
        step(&self.sub, 4, 0, 5);
        q.submit(|h| {
            let x = h.access_with(&b[5], AccessMode::Read, p);
            let o = h.write(&b[6]);
            h.parallel_for(&self.scale, r, vec![x.into(), Arg::scalar(0.5f32), o.into()]);
        });
    }
}

fn bench(c: &mut Criterion) {
    let name = std::env::var("KILN_BENCH_DEVICE").unwrap_or_else(|_| "cpu".into());
    let dev = registry::open(&name, &OpenOptions::default()).expect("the benchmark's device opens");
    let ctx = Context::with_config(dev, ContextConfig { workers: 2, ..Default::default() });
    let m = parse_module(KERNELS).expect("kernels parse");
    let k = |n: &str| ctx.get_kernel(&m, n).expect("kernel builds");
    let init =
        |s: f32| Buffer::from_slice(&(0..N).map(|i| (i % 97) as f32 * s).collect::<Vec<_>>());
    let chain = Chain {
        add: k("add"),
        mul: k("mul"),
        sub: k("sub"),
        scale: k("scale"),
        b: vec![init(1.0), init(0.5), init(0.25), init(0.0), init(0.0), init(0.0), init(0.0)],
    };
    let q = Queue::new(&ctx, QueueOrder::InOrder);
    // The fused chain computes what the unfused one does (and is fused, not cancelled).
    chain.submit(&q, false);
    let want = chain.b[6].read().expect("unfused chain runs");
    chain.b[6].write(&vec![0.0; N]).unwrap();
    q.start_fusion().expect("fusion starts");
    chain.submit(&q, true);
    q.complete_fusion(FusionProps::default()).wait().expect("fused chain runs");
    match q.fusion_status() {
        Some(FusionStatus::Completed { kernels: 4, warnings, .. }) if warnings.is_empty() => {}
        s => panic!("the chain was not fused with its promotions: {s:?}"),
    }
    assert!(chain.b[6].read().expect("read") == want, "fused and unfused results differ");

    let mut group = c.benchmark_group(format!("chain4_{name}"));
    group.sample_size(20);
    group.bench_function("unfused", |bench| {
        bench.iter(|| {
            chain.submit(&q, false);
            q.wait().expect("chain runs");
        })
    });
    for (label, props) in [
        ("fused", FusionProps::default()),
        ("fused_no_barriers", FusionProps { no_barriers: true }),
    ] {
        group.bench_function(label, |bench| {
            bench.iter(|| {
                q.start_fusion().expect("fusion starts");
                chain.submit(&q, true);
                q.complete_fusion(props).wait().expect("fused chain runs");
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
