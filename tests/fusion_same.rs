//! One fusion behaviour whichever API fuses: the facade (`Jit::fuse`), a queue's fusion list
//! and a command graph's chain fuse the same list of kernels into the same kernel (printed
//! IR compared), with a barrier between the entries only where a dependence needs one.

use kiln::runtime::graph::{Graph, GraphProperties};
use kiln::runtime::{interp_device, Arg, Buffer, Context, FusionProps, NdRange, Queue, QueueOrder};
use kiln::runtime::{QueueFusion, QueueGraph};
use kiln::{Device, FusionSpec, Jit, ParamRef, RangeSpec};

const SRC: &str = "\
kernel scale(a: ptr<global, f32>, t: ptr<global, f32>) {
  let i: u32 = global_id(0);
  t[i] = a[i] * 2.0f32;
}
kernel add1(t: ptr<global, f32>, o: ptr<global, f32>) {
  let i: u32 = global_id(0);
  o[i] = t[i] + 1.0f32;
}
kernel shift(t: ptr<global, f32>, o: ptr<global, f32>) {
  let i: u32 = global_id(0);
  o[i] = t[(i + 1u32) % 64u32];
}
";

const N: u32 = 64;

/// The spec the queue and the graph derive for `scale` then `second`: `t` shared.
fn spec(second: &str) -> FusionSpec {
    FusionSpec {
        name: format!("fused_scale_{second}"),
        kernels: vec!["scale".into(), second.into()],
        ndranges: vec![
            RangeSpec::new(&[N]).with_offset(&[0]),
            RangeSpec::new(&[N]).with_offset(&[0]),
        ],
        identical: vec![vec![ParamRef::new(0, 1), ParamRef::new(1, 0)]],
        ..Default::default()
    }
}

/// Submits `scale(a, t)` then `add1(t, o)` to `q`.
fn submit_pair(ctx: &Context, q: &Queue, bufs: &[Buffer<f32>; 3]) {
    let m = kiln::ir::parse_module(SRC).unwrap();
    let [a, t, o] = bufs;
    for (name, x, y) in [("scale", a, t), ("add1", t, o)] {
        let k = ctx.get_kernel(&m, name).unwrap();
        q.submit(|h| {
            let (x, y) = (h.read(x), h.write(y));
            h.parallel_for(&k, NdRange::new(&[N]), vec![Arg::from(x), Arg::from(y)]);
        });
    }
}

fn buffers() -> [Buffer<f32>; 3] {
    let a: Vec<f32> = (0..N).map(|i| i as f32).collect();
    [Buffer::from_slice(&a), Buffer::zeroed(N as usize), Buffer::zeroed(N as usize)]
}

/// The one kernel in `ctx`'s fusion cache, printed.
fn only_fused(ctx: &Context) -> String {
    let ks = kiln::runtime::fusion::fused_kernels(ctx);
    assert_eq!(ks.len(), 1, "{ks:?}");
    ks[0].to_string()
}

#[test]
fn facade_queue_and_graph_fuse_a_list_into_the_same_kernel() {
    let jit = Jit::new(Device::interp()).unwrap();
    let module = jit.compile_source("pair.kir", SRC).unwrap();
    let facade = jit.fuse(&module, &spec("add1")).unwrap().kernel().to_string();

    let ctx = Context::new(interp_device());
    let q = Queue::new(&ctx, QueueOrder::InOrder);
    let bufs = buffers();
    q.start_fusion().unwrap();
    submit_pair(&ctx, &q, &bufs);
    q.complete_fusion(FusionProps::default()).wait().unwrap();
    let queue = only_fused(&ctx);
    let want: Vec<f32> = (0..N).map(|i| i as f32 * 2.0 + 1.0).collect();
    assert_eq!(bufs[2].read().unwrap(), want);

    let ctx = Context::new(interp_device());
    let q = Queue::new(&ctx, QueueOrder::InOrder);
    let g = Graph::new(&ctx, GraphProperties { fuse_chains: true, ..Default::default() });
    let bufs = buffers();
    q.begin_recording(&g).unwrap();
    submit_pair(&ctx, &q, &bufs);
    q.end_recording().unwrap();
    let exec = g.finalize().unwrap();
    assert_eq!(exec.fused_chains(), 1);
    q.submit_graph(&exec).wait().unwrap();
    let graph = only_fused(&ctx);
    assert_eq!(bufs[2].read().unwrap(), want);

    // Every work-item reads only the element it wrote: no barrier orders anything.
    assert!(!facade.contains("barrier"), "{facade}");
    assert_eq!(facade, queue);
    assert_eq!(facade, graph);
}

#[test]
fn the_facade_keeps_the_barrier_where_a_dependence_needs_one() {
    let jit = Jit::new(Device::interp()).unwrap();
    let module = jit.compile_source("pair.kir", SRC).unwrap();
    // `shift` reads an element another work-item of `scale` wrote.
    let fused = jit.fuse(&module, &spec("shift")).unwrap();
    assert!(fused.kernel().to_string().contains("barrier"), "{}", fused.kernel());
}
