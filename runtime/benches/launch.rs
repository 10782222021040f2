//! Launch overhead per device (issue 24's targets for the cpu device, issue 25's for Vulkan
//! and CUDA): one 256-work-item launch on one thread and on all of them (cpu), 100 tiny
//! dependent kernels submitted eagerly on an in-order queue and waited for, and the same 100
//! kernels recorded into a command graph and replayed, on the cpu device and on Vulkan and
//! CUDA where they open. Every result is checked against values computed here before
//! anything is timed.
//!
//! * `launch256/{1-thread,N-threads}`: one `Device::run` of a built kernel over 256
//!   work-items (groups of 32), buffers on the host;
//! * `launch256/queue`: the same launch submitted on an in-order queue of a `Context` (all
//!   threads) and waited for, as `kiln run --time` times a launch (the runtime's hand-off to
//!   its worker and back included);
//! * `chain100[-vulkan|-cuda]/{eager,replay}`: submission and completion of 100 dependent
//!   launches of 256 work-items each (criterion's throughput is kernels per second); the
//!   wait is `Queue::wait`, which waits for the device too;
//! * closing `per kernel:` lines: the median cost of one kernel in each case, per device,
//!   and the ratio of eager submission to replay. The references to hold them against
//!   (cupy's eager launches and a hand-built CUDA graph on the same GPU) come from
//!   `benches/gpu/launch_ref.py`; `benches/gpu/run_launch.sh` runs both.
//!
//! `cargo bench -p kiln-runtime --bench launch -- --warm-up-time 1 --measurement-time 3`

use kiln_runtime::QueueGraph;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kiln_ir::launch::{self, Arg, NdRange};
use kiln_ir::{parse_module, Scalar};
use kiln_runtime::device::cpu::CpuDevice;
use kiln_runtime::device::cuda::CudaDevice;
use kiln_runtime::device::registry::OpenOptions;
use kiln_runtime::device::vulkan::VulkanDevice;
use kiln_runtime::graph::{ExecGraph, Graph, GraphProperties};
use kiln_runtime::{Buffer, Context, Device, KernelHandle, Queue, QueueOrder};

const ITEMS: u32 = 256;
const LOCAL: u32 = 32;
const NODES: usize = 100;

const SOURCE: &str = "kernel inc(x: ptr<global, u32>) {
    let i: u32 = global_id(0); x[i] = x[i] + i + 1u32; }";

fn range() -> NdRange {
    NdRange::new(&[ITEMS]).with_local(&[LOCAL])
}

/// The buffer after `runs` launches of `inc` on zeros.
fn expected(runs: u32) -> Vec<u32> {
    (0..ITEMS).map(|i| runs.wrapping_mul(i + 1)).collect()
}

fn open(threads: Option<usize>) -> Option<CpuDevice> {
    match CpuDevice::open(&OpenOptions { threads, ..OpenOptions::default() }) {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("launch overhead not measured: {e}");
            None
        }
    }
}

/// A closure running one launch of `inc` on `dev`, its result checked once first.
fn one_launch(dev: CpuDevice) -> impl FnMut() {
    let m = parse_module(SOURCE).expect("kernel parses");
    let module = kiln_ir::Verified::kernel(m.kernels[0].clone()).expect("kernel verifies");
    let bin = dev.build(&module, &Default::default()).expect("kernel builds");
    let program = dev.load(&bin).expect("program loads");
    let k = dev.kernel(&program, "inc").expect("kernel found");
    let mut bufs = vec![launch::Buffer::zeroed(Scalar::U32, ITEMS as usize)];
    let args = [Arg::Buffer(0)];
    dev.run(&k, &range(), &args, &mut bufs).expect("runs");
    assert_eq!(bufs[0].to_vec::<u32>(), Some(expected(1)), "the launch's result");
    move || dev.run(&k, &range(), &args, &mut bufs).expect("runs")
}

fn chain(q: &Queue, k: &KernelHandle, b: &Buffer<u32>) {
    for _ in 0..NODES {
        q.submit(|h| {
            let x = h.read_write(b);
            h.parallel_for(k, range(), vec![Arg::from(x)]);
        });
    }
}

/// The queue, kernel, buffer and recorded graph of the 100-kernel chain, both ways
/// checked once.
fn chain_setup(dev: Arc<dyn Device>) -> (Queue, KernelHandle, Buffer<u32>, ExecGraph) {
    let ctx = Context::new(dev);
    let m = parse_module(SOURCE).expect("kernel parses");
    let k = ctx.get_kernel(&m, "inc").expect("kernel builds");
    let q = Queue::new(&ctx, QueueOrder::InOrder);
    let b = Buffer::<u32>::zeroed(ITEMS as usize);
    let g = Graph::new(&ctx, GraphProperties::default());
    q.begin_recording(&g).expect("recording starts");
    chain(&q, &k, &b);
    q.end_recording().expect("recording ends");
    let exec = g.finalize().expect("graph finalizes");
    chain(&q, &k, &b);
    q.wait().expect("chain runs");
    assert_eq!(b.read().expect("reads"), expected(NODES as u32), "the eager chain's result");
    q.submit_graph(&exec).wait().expect("graph runs");
    assert_eq!(b.read().expect("reads"), expected(2 * NODES as u32), "the replay's result");
    (q, k, b, exec)
}

/// The median of `runs` timings of `f`.
fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut t: Vec<Duration> = (0..runs)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed()
        })
        .collect();
    t.sort();
    t[runs / 2]
}

fn bench(c: &mut Criterion) {
    let (Some(one), Some(all)) = (open(Some(1)), open(None)) else { return };
    let threads = all.threads();
    let mut g = c.benchmark_group("launch256");
    let mut run1 = one_launch(one);
    g.bench_function("1-thread", |b| b.iter(&mut run1));
    let mut run_all = one_launch(all);
    g.bench_function(format!("{threads}-threads"), |b| b.iter(&mut run_all));
    g.finish();

    let Some(dev) = open(None) else { return };
    let (q, k, b, exec) = chain_setup(Arc::new(dev));
    let (eager, replay) = chain_bench(c, "chain100", &q, &k, &b, &exec);
    let queued = || {
        q.submit(|h| {
            let x = h.read_write(&b);
            h.parallel_for(&k, range(), vec![Arg::from(x)]);
        });
        q.wait().expect("launch runs");
    };
    c.benchmark_group("launch256").bench_function("queue", |bench| bench.iter(queued));

    let l1 = us(median(2001, &mut run1));
    let ln = us(median(2001, &mut run_all));
    let (e, r) = (us(eager) / NODES as f64, us(replay) / NODES as f64);
    let lq = us(median(2001, queued));
    println!(
        "per kernel: launch256 {l1:.2} us on 1 thread, {ln:.2} us on {threads}, {lq:.2} us \
         through a queue; 100 kernels eager {e:.2} us, graph replay {r:.2} us (eager/replay \
         {:.1}x)",
        e / r
    );

    // The GPU devices, where they open: the same chain, eager and replayed.
    type Opened = Result<Arc<dyn Device>, String>;
    let gpus: [(&str, Opened); 2] = [
        ("vulkan", VulkanDevice::open().map(|d| Arc::new(d) as _).map_err(|e| e.to_string())),
        ("cuda", CudaDevice::open().map(|d| Arc::new(d) as _).map_err(|e| e.to_string())),
    ];
    for (kind, dev) in gpus {
        let dev = match dev {
            Ok(d) => d,
            Err(e) => {
                println!("per kernel: {kind} not measured: {e}");
                continue;
            }
        };
        let name = dev.name();
        let (q, k, b, exec) = chain_setup(dev);
        let (eager, replay) = chain_bench(c, &format!("chain100-{kind}"), &q, &k, &b, &exec);
        let (e, r) = (us(eager) / NODES as f64, us(replay) / NODES as f64);
        println!(
            "per kernel: {kind} ({name}): 100 dependent kernels eager {e:.2} us, graph replay \
             {r:.2} us per node (eager/replay {:.1}x)",
            e / r
        );
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Criterion's measurement of the chain eager (100 submissions, then a wait on the queue)
/// and replayed (one graph submission and its wait), in `group`; then the median of 101
/// runs of each, checked afterwards to have computed the chain.
fn chain_bench(
    c: &mut Criterion,
    group: &str,
    q: &Queue,
    k: &KernelHandle,
    b: &Buffer<u32>,
    exec: &ExecGraph,
) -> (Duration, Duration) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(NODES as u64));
    let eager = || {
        chain(q, k, b);
        q.wait().expect("chain runs");
    };
    let replay = || q.submit_graph(exec).wait().expect("graph runs");
    g.bench_function("eager", |bench| bench.iter(eager));
    g.bench_function("replay", |bench| bench.iter(replay));
    g.finish();
    let before = b.read().expect("reads");
    let (e, r) = (median(101, eager), median(101, replay));
    // 202 more runs of the chain: each element grows by 202 * NODES * (i + 1).
    let runs = 202 * NODES as u32;
    let want: Vec<u32> =
        before.iter().zip(expected(runs)).map(|(v, add)| v.wrapping_add(add)).collect();
    assert_eq!(b.read().expect("reads"), want, "{group}: the timed chains' result");
    (e, r)
}

criterion_group!(benches, bench);
criterion_main!(benches);
