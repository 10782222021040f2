//! Property test: random command sequences over shared buffers (kernels, in place or not,
//! guarded by `i < n` for a random `n` or not, copies, fills, host tasks, explicit event
//! dependencies), recorded into a graph, finalized with and
//! without `fuse_chains` and replayed twice, leave the buffers exactly as the same
//! sequence submitted eagerly twice, on the interpreter (and replayed on Vulkan too, when
//! there is a device: recorded command buffers and device-resident buffers).

use kiln_ir::parse_module;
use kiln_runtime::graph::{Graph, GraphProperties};
use kiln_runtime::QueueGraph;
use kiln_runtime::{
    interp_device, AnyBuffer, Arg, Buffer, Context, ContextConfig, Event, KernelHandle, NdRange,
    Queue, QueueOrder,
};
use proptest::prelude::*;

const KERNELS: &str = "
kernel add(a: ptr<global, u32>, b: ptr<global, u32>, out: ptr<global, u32>) {
  let i: u32 = global_id(0);
  out[i] = a[i] + b[i];
}
kernel mul(a: ptr<global, u32>, b: ptr<global, u32>, out: ptr<global, u32>) {
  let i: u32 = global_id(0);
  out[i] = a[i] * b[i] + 1u32;
}
kernel scale(x: ptr<global, u32>, s: u32) {
  let i: u32 = global_id(0);
  x[i] = x[i] * s;
}
kernel rotate(a: ptr<global, u32>, out: ptr<global, u32>) {
  let i: u32 = global_id(0);
  out[i] = a[(i + 1u32) % 16u32];
}
kernel gadd(a: ptr<global, u32>, b: ptr<global, u32>, out: ptr<global, u32>, n: u32) {
  let i: u32 = global_id(0);
  let inside: bool = i < n;
  if inside {
    out[i] = a[i] + b[i] * 3u32;
  }
}
";

const N: usize = 16;
const BUFS: usize = 5;

#[derive(Clone, Debug)]
enum Op {
    Add(usize, usize, usize),
    Mul(usize, usize, usize),
    Scale(usize, u32),
    Rotate(usize, usize),
    /// `out[i] = a[i] + 3 * b[i]` for `i < n` only (a guard through a `let`).
    GuardedAdd(usize, usize, usize, u32),
    Fill(usize, u32),
    Copy(usize, usize),
    Host(usize),
}

fn op() -> impl Strategy<Value = Op> {
    let b = || 0..BUFS;
    prop_oneof![
        3 => (b(), b(), b()).prop_map(|(a, c, o)| Op::Add(a, c, o)),
        3 => (b(), b(), b()).prop_map(|(a, c, o)| Op::Mul(a, c, o)),
        2 => (b(), 0u32..5).prop_map(|(x, s)| Op::Scale(x, s)),
        1 => (b(), b()).prop_filter("rotate in place races", |(a, o)| a != o).prop_map(|(a, o)| Op::Rotate(a, o)),
        2 => (b(), b(), b(), 0u32..=N as u32).prop_map(|(a, c, o, n)| Op::GuardedAdd(a, c, o, n)),
        1 => (b(), any::<u32>()).prop_map(|(o, v)| Op::Fill(o, v)),
        1 => (b(), b()).prop_map(|(a, o)| Op::Copy(a, o)),
        1 => b().prop_map(Op::Host),
    ]
}

struct K {
    add: KernelHandle,
    mul: KernelHandle,
    scale: KernelHandle,
    rotate: KernelHandle,
    gadd: KernelHandle,
}

/// Submits the sequence; `deps[i]` = Some(j): command i also waits for command j's event.
fn submit(q: &Queue, k: &K, b: &[Buffer<u32>], ops: &[Op], deps: &[Option<usize>]) {
    let r = NdRange::new(&[N as u32]);
    let mut events: Vec<Event> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let dep =
            deps.get(i).copied().flatten().filter(|&j| j < events.len()).map(|j| events[j].clone());
        let e = q.submit(|h| {
            if let Some(d) = &dep {
                h.depends_on(d);
            }
            match *op {
                Op::Add(a, c, o) | Op::Mul(a, c, o) => {
                    let kernel = if matches!(op, Op::Add(..)) { &k.add } else { &k.mul };
                    let (a, c, o) = (h.read(&b[a]), h.read(&b[c]), h.write(&b[o]));
                    h.parallel_for(kernel, r, vec![a.into(), c.into(), o.into()]);
                }
                Op::Scale(x, s) => {
                    let x = h.read_write(&b[x]);
                    h.parallel_for(&k.scale, r, vec![x.into(), Arg::scalar(s)]);
                }
                Op::Rotate(a, o) => {
                    let (a, o) = (h.read(&b[a]), h.write(&b[o]));
                    h.parallel_for(&k.rotate, r, vec![a.into(), o.into()]);
                }
                Op::GuardedAdd(a, c, o, n) => {
                    let (a, c, o) = (h.read(&b[a]), h.read(&b[c]), h.read_write(&b[o]));
                    let args = vec![a.into(), c.into(), o.into(), Arg::scalar(n)];
                    h.parallel_for(&k.gadd, r, args);
                }
                Op::Fill(o, v) => {
                    h.fill(&AnyBuffer::from(&b[o]), kiln_ir::launch::Element::to_imm(v))
                }
                Op::Copy(a, o) => h.copy(&AnyBuffer::from(&b[a]), &AnyBuffer::from(&b[o])),
                Op::Host(x) => {
                    let acc = h.read_write(&b[x]);
                    h.host_task_fn(move |c| {
                        let v: Vec<u32> = c
                            .read::<u32>(&acc)
                            .unwrap()
                            .iter()
                            .map(|x| x.wrapping_add(7))
                            .collect();
                        c.write(&acc, &v)
                    });
                }
            }
        });
        events.push(e);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn replayed_graphs_equal_eager_runs(
        init in proptest::collection::vec(proptest::collection::vec(any::<u32>(), N), BUFS),
        ops in proptest::collection::vec(op(), 1..10),
        deps in proptest::collection::vec(proptest::option::weighted(0.2, 0usize..10), 10),
        in_order in any::<bool>(),
    ) {
        let ctx = Context::with_config(interp_device(), ContextConfig { workers: 2, ..Default::default() });
        let m = parse_module(KERNELS).unwrap();
        let kk = |n: &str| ctx.get_kernel(&m, n).unwrap();
        let k = K {
            add: kk("add"),
            mul: kk("mul"),
            scale: kk("scale"),
            rotate: kk("rotate"),
            gadd: kk("gadd"),
        };
        let order = if in_order { QueueOrder::InOrder } else { QueueOrder::OutOfOrder };
        let q = Queue::new(&ctx, order);
        let fresh = || init.iter().map(|v| Buffer::from_slice(v)).collect::<Vec<_>>();
        let eager = fresh();
        submit(&q, &k, &eager, &ops, &deps);
        submit(&q, &k, &eager, &ops, &deps);
        q.wait().unwrap();
        let want: Vec<Vec<u32>> = eager.iter().map(|b| b.read().unwrap()).collect();
        for fuse_chains in [false, true] {
            let b = fresh();
            let g = Graph::new(&ctx, GraphProperties { fuse_chains, ..Default::default() });
            q.begin_recording(&g).unwrap();
            submit(&q, &k, &b, &ops, &deps);
            q.end_recording().unwrap();
            let exec = g.finalize().unwrap();
            q.submit_graph(&exec);
            q.submit_graph(&exec).wait().unwrap();
            let got: Vec<Vec<u32>> = b.iter().map(|b| b.read().unwrap()).collect();
            prop_assert_eq!(&got, &want, "fuse_chains {} schedule {:?}", fuse_chains, exec.schedule());
        }
        // The same graph on Vulkan, where its partitions are recorded command buffers (the
        // copies and fills in them too; split by host tasks) and the buffers stay in device
        // memory between them.
        if let Some((vctx, vk)) = vulkan() {
            let vq = Queue::new(vctx, order);
            for fuse_chains in [false, true] {
                let b = fresh();
                let g = Graph::new(vctx, GraphProperties { fuse_chains, ..Default::default() });
                vq.begin_recording(&g).unwrap();
                submit(&vq, vk, &b, &ops, &deps);
                vq.end_recording().unwrap();
                let exec = g.finalize().unwrap();
                vq.submit_graph(&exec);
                vq.submit_graph(&exec).wait().unwrap();
                let got: Vec<Vec<u32>> = b.iter().map(|b| b.read().unwrap()).collect();
                prop_assert_eq!(&got, &want, "vulkan fuse_chains {} schedule {:?}", fuse_chains, exec.schedule());
            }
        }
    }
}

/// One Vulkan context and its kernels for every case (pipelines are made once), when there
/// is a Vulkan device.
fn vulkan() -> Option<&'static (Context, K)> {
    static VK: std::sync::OnceLock<Option<(Context, K)>> = std::sync::OnceLock::new();
    VK.get_or_init(|| {
        // One device of two (the interpreter's run is checked everywhere).
        let found = kiln_runtime::device::vulkan::VulkanDevice::open();
        let d = kiln_ir::testing::optional("KILN_REQUIRE_TOOLS", found)?;
        let ctx = Context::with_config(
            std::sync::Arc::new(d),
            ContextConfig { workers: 2, ..Default::default() },
        );
        let m = parse_module(KERNELS).unwrap();
        let kk = |n: &str| ctx.get_kernel(&m, n).unwrap();
        let k = K {
            add: kk("add"),
            mul: kk("mul"),
            scale: kk("scale"),
            rotate: kk("rotate"),
            gadd: kk("gadd"),
        };
        Some((ctx, k))
    })
    .as_ref()
}

mod random_kernels {
    //! Random kernels from the shared generator (`kiln_ir::testing`), their buffers shared
    //! at random between them where element type and length agree: a graph of them (edges
    //! from the buffers, each pointer counted as read and written) replayed with and without
    //! `fuse_chains` leaves every buffer bit for bit as the eager run.

    use kiln_ir::launch::Arg;
    use kiln_ir::testing::{arb_kernel_with, GenConfig, TestCase};
    use kiln_ir::Module;
    use kiln_runtime::graph::{Graph, GraphProperties};
    use kiln_runtime::QueueGraph;
    use kiln_runtime::{
        AccessMode, AnyBuffer, Context, ContextConfig, Interp, IrDevice, Queue, QueueOrder,
    };
    use proptest::prelude::*;

    fn submit(
        q: &Queue,
        ctx: &Context,
        cases: &[TestCase],
        map: &[Vec<usize>],
        bufs: &[AnyBuffer],
    ) {
        for (c, case) in cases.iter().enumerate() {
            let k = ctx
                .get_kernel(&Module::new(vec![case.kernel.clone()]), case.kernel.name())
                .expect("generated kernels build");
            q.submit(|h| {
                let args = case
                    .args
                    .iter()
                    .map(|a| match a {
                        Arg::Scalar(v) => Arg::Scalar(*v),
                        Arg::Buffer(i) => {
                            h.access_any(&bufs[map[c][*i]], AccessMode::ReadWrite).into()
                        }
                        Arg::Range { buffer, offset, len } => h
                            .access_any(&bufs[map[c][*buffer]], AccessMode::ReadWrite)
                            .with_range(*offset, *len)
                            .expect("generated ranges fit")
                            .into(),
                    })
                    .collect();
                h.parallel_for(&k, case.range, args);
            });
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        #[test]
        fn random_kernel_graphs_equal_eager_runs(
            mut cases in proptest::collection::vec(
                arb_kernel_with(GenConfig { atomics: false, ..GenConfig::default() }), 2..5),
            share in proptest::collection::vec(any::<bool>(), 32),
        ) {
            // Buffer j of case c is `map[c][j]` of the shared list: when `share` says so, an
            // earlier buffer of the same element type and at least its length (generated
            // kernels reduce every index modulo the length they were made for).
            // Equal nd-ranges make chains: launch kernels without a local size over the first
            // one's range, as `share` says (their indices stay in bounds).
            let first = cases[0].range;
            for (c, case) in cases.iter_mut().enumerate() {
                if first.local.is_none() && case.range.local.is_none() && share[c] {
                    case.range = first;
                }
            }
            let mut shapes: Vec<(kiln_ir::Scalar, usize)> = Vec::new();
            let mut inits = Vec::new();
            let mut map = Vec::new();
            let mut s = share.iter().cycle();
            for case in &cases {
                let mut m = Vec::new();
                for b in &case.buffers {
                    let shape = (b.elem(), b.len());
                    let earlier = shapes.iter().position(|x| x.0 == shape.0 && x.1 >= shape.1);
                    match earlier {
                        Some(i) if *s.next().unwrap_or(&false) => m.push(i),
                        _ => {
                            shapes.push(shape);
                            inits.push(b.clone());
                            m.push(shapes.len() - 1);
                        }
                    }
                }
                map.push(m);
            }
            let dev = IrDevice(Interp { max_steps: Some(2_000_000), timeout: None });
            let ctx = Context::with_config(std::sync::Arc::new(dev), ContextConfig { workers: 2, ..Default::default() });
            let q = Queue::new(&ctx, QueueOrder::OutOfOrder);
            let fresh = || inits.iter().map(|b| AnyBuffer::new(b.clone())).collect::<Vec<_>>();
            let eager = fresh();
            submit(&q, &ctx, &cases, &map, &eager);
            submit(&q, &ctx, &cases, &map, &eager);
            // A kernel that fails on shared data (a step limit) fails both ways alike, but
            // what runs after a failure differs: such sequences are not compared.
            prop_assume!(q.wait().is_ok());
            let want: Vec<Vec<u8>> = eager.iter().map(|b| b.contents().unwrap().as_bytes().to_vec()).collect();
            for fuse_chains in [false, true] {
                let b = fresh();
                let g = Graph::new(&ctx, GraphProperties { fuse_chains, ..Default::default() });
                q.begin_recording(&g).unwrap();
                submit(&q, &ctx, &cases, &map, &b);
                q.end_recording().unwrap();
                let exec = g.finalize().unwrap();
                q.submit_graph(&exec);
                q.submit_graph(&exec).wait().unwrap();
                let got: Vec<Vec<u8>> = b.iter().map(|b| b.contents().unwrap().as_bytes().to_vec()).collect();
                prop_assert!(got == want, "fuse_chains {}: buffers differ; schedule {:?}", fuse_chains, exec.schedule());
            }
        }
    }
}

mod fusable_chains {
    //! Random chains of elementwise kernels over one 1-D nd-range: each kernel computes a
    //! random expression of the previous kernel's output, earlier intermediates, the inputs
    //! and a scalar, into a fresh intermediate. Recorded as a graph with `fuse_chains` (and
    //! `internalize` at random) they must fuse (the chain is legal by construction) and
    //! leave every buffer that someone outside the chain can see as the eager run does;
    //! sometimes a kernel after the chain (a rotation) reads one intermediate, which must
    //! then stay materialized. Fusion is counted: it must happen in every case.

    use kiln_ir::parse_module;
    use kiln_runtime::graph::{Graph, GraphProperties};
    use kiln_runtime::QueueGraph;
    use kiln_runtime::{
        interp_device, Arg, Buffer, Context, ContextConfig, NdRange, Queue, QueueOrder,
    };
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    /// A random u32 expression over `leaves` (already spelled), depth at most `depth`.
    fn expr(leaves: Vec<String>, depth: u32) -> BoxedStrategy<String> {
        let leaf = proptest::sample::select(leaves.clone()).boxed();
        if depth == 0 {
            return leaf;
        }
        let sub = || expr(leaves.clone(), depth - 1);
        prop_oneof![
            2 => leaf,
            4 => (sub(), proptest::sample::select(vec!["+", "-", "*", "^", "&", "|"]), sub())
                .prop_map(|(a, op, b)| format!("({a} {op} {b})")),
            1 => (sub(), sub()).prop_map(|(a, b)| format!("min({a}, {b})")),
            1 => (sub(), sub()).prop_map(|(a, b)| format!("max({a}, {b})")),
            1 => (sub(), 0u32..32).prop_map(|(a, s)| format!("({a} >> {s}u32)")),
        ]
        .boxed()
    }

    /// A chain: per kernel its source text; the nd-range size; whether a rotation after the
    /// chain reads intermediate `tail` (when Some).
    #[derive(Debug, Clone)]
    struct Chain {
        kernels: Vec<String>,
        n: usize,
        inputs: usize,
        tail: Option<usize>,
        internalize: bool,
        scalars: Vec<u32>,
    }

    fn chain() -> impl Strategy<Value = Chain> {
        (2usize..5, 1usize..3, proptest::sample::select(vec![16usize, 48, 64]))
            .prop_flat_map(|(len, inputs, n)| {
                // Kernel c reads `prev` (the previous intermediate, or input 0 for the
                // first), every input, the earlier intermediates, and its scalar.
                let bodies: Vec<BoxedStrategy<String>> = (0..len)
                    .map(|c| {
                        let mut leaves = vec!["prev[i]".to_string(), "s".into(), "3u32".into()];
                        leaves.extend((0..inputs).map(|j| format!("in{j}[i]")));
                        leaves.extend((0..c.saturating_sub(1)).map(|j| format!("t{j}[i]")));
                        // Every body reads `prev`, so each kernel follows the previous one.
                        (expr(leaves, 3), proptest::sample::select(vec!["+", "^", "*"]))
                            .prop_map(|(e, op)| format!("prev[i] {op} {e}"))
                            .boxed()
                    })
                    .collect();
                (
                    bodies,
                    Just(n),
                    Just(inputs),
                    proptest::option::of(0..len - 1),
                    any::<bool>(),
                    proptest::collection::vec(any::<u32>(), len),
                )
            })
            .prop_map(|(bodies, n, inputs, tail, internalize, scalars)| {
                let kernels = bodies
                    .iter()
                    .enumerate()
                    .map(|(c, body)| {
                        let mut params: Vec<String> =
                            (0..inputs).map(|j| format!("in{j}: ptr<global, u32>")).collect();
                        params.extend((0..c.saturating_sub(1)).map(|j| format!("t{j}: ptr<global, u32>")));
                        params.push("prev: ptr<global, u32>".into());
                        params.push("out: ptr<global, u32>".into());
                        params.push("s: u32".into());
                        format!(
                            "kernel k{c}({}) {{\n  let i: u32 = global_id(0);\n  out[i] = {body};\n}}\n",
                            params.join(", ")
                        )
                    })
                    .collect();
                Chain { kernels, n, inputs, tail, internalize, scalars }
            })
    }

    /// Buffers: inputs, then one intermediate per kernel (the last is the chain's output),
    /// then the rotation's output.
    fn submit(q: &Queue, ctx: &Context, ch: &Chain, b: &[Buffer<u32>]) {
        let src: String = ch.kernels.concat()
            + &format!(
                "kernel rot(a: ptr<global, u32>, o: ptr<global, u32>) {{\n  let i: u32 = global_id(0);\n  o[i] = a[(i + 1u32) % {}u32];\n}}\n",
                ch.n
            );
        let m = parse_module(&src).unwrap();
        let r = NdRange::new(&[ch.n as u32]);
        let t = |c: usize| &b[ch.inputs + c];
        for c in 0..ch.kernels.len() {
            let k = ctx.get_kernel(&m, &format!("k{c}")).unwrap();
            q.submit(|h| {
                let mut args: Vec<Arg> = (0..ch.inputs).map(|j| h.read(&b[j]).into()).collect();
                args.extend((0..c.saturating_sub(1)).map(|j| h.read(t(j)).into()));
                let prev = if c == 0 { &b[0] } else { t(c - 1) };
                args.push(h.read(prev).into());
                args.push(h.write(t(c)).into());
                args.push(Arg::scalar(ch.scalars[c]));
                h.parallel_for(&k, r, args);
            });
        }
        if let Some(j) = ch.tail {
            let k = ctx.get_kernel(&m, "rot").unwrap();
            let out = &b[ch.inputs + ch.kernels.len()];
            q.submit(|h| {
                let (a, o) = (h.read(t(j)), h.write(out));
                h.parallel_for(&k, r, vec![a.into(), o.into()]);
            });
        }
    }

    #[test]
    fn random_elementwise_chains_fuse_and_equal_eager_runs() {
        let cases = 24;
        let mut runner = TestRunner::new(Config { cases, ..Config::default() });
        let fused = std::cell::Cell::new(0u32);
        let internalized_cases = std::cell::Cell::new(0u32);
        runner
            .run(&(chain(), any::<u64>()), |(ch, seed)| {
                let ctx = Context::with_config(
                    interp_device(),
                    ContextConfig { workers: 2, ..Default::default() },
                );
                let q = Queue::new(&ctx, QueueOrder::OutOfOrder);
                let nbufs = ch.inputs + ch.kernels.len() + 1;
                let fresh = || {
                    (0..nbufs)
                        .map(|b| {
                            let v: Vec<u32> = (0..ch.n as u64)
                                .map(|i| {
                                    (seed ^ (b as u64 * 0x9e37_79b9 + i))
                                        .wrapping_mul(0x2545_f491_4f6c_dd1d)
                                        as u32
                                })
                                .collect();
                            Buffer::from_slice(&v)
                        })
                        .collect::<Vec<_>>()
                };
                let eager = fresh();
                submit(&q, &ctx, &ch, &eager);
                q.wait().unwrap();
                let g_bufs = fresh();
                let props = GraphProperties {
                    fuse_chains: true,
                    internalize: ch.internalize,
                    ..Default::default()
                };
                let g = Graph::new(&ctx, props);
                q.begin_recording(&g).unwrap();
                submit(&q, &ctx, &ch, &g_bufs);
                q.end_recording().unwrap();
                let exec = g.finalize().unwrap();
                q.submit_graph(&exec).wait().unwrap();
                prop_assert_eq!(exec.fused_chains(), 1, "schedule {:?}", exec.schedule());
                fused.set(fused.get() + 1);
                // Intermediates nobody outside the chain reads are not materialized when
                // internalized; everything else must be as eager.
                let last = ch.kernels.len() - 1;
                for (i, (e, got)) in eager.iter().zip(&g_bufs).enumerate() {
                    let t = i.checked_sub(ch.inputs).filter(|&c| c < last);
                    let hidden = ch.internalize && t.is_some_and(|c| Some(c) != ch.tail);
                    if hidden {
                        internalized_cases.set(internalized_cases.get() + 1);
                        continue;
                    }
                    prop_assert_eq!(got.read().unwrap(), e.read().unwrap(), "buffer {}", i);
                }
                Ok(())
            })
            .unwrap();
        // Every case fused (asserted per case); the count says the assertion ran.
        assert_eq!(fused.get(), cases, "cases that fused");
        assert!(internalized_cases.get() > 0, "no case internalized an intermediate");
    }
}
