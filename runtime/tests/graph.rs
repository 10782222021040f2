//! Command graphs: the scenarios of DPC++'s command-graph design (its CommandGraph.md, for
//! SYCL's `sycl_ext_oneapi_graph`), each compared with the same commands submitted eagerly,
//! on the interpreter and (when one is found, as in vulkan_diff.rs) on Vulkan.

use kiln_runtime::{QueueFusion, QueueGraph};
use std::sync::Arc;

use kiln_ir::parse_module;
use kiln_runtime::device::cuda::CudaDevice;
use kiln_runtime::device::vulkan::VulkanDevice;
use kiln_runtime::graph::{ExecGraph, Graph, GraphError, GraphProperties, Node, NodeId};
use kiln_runtime::{
    interp_device, AccessMode, AnyBuffer, Arg, Buffer, Context, ContextConfig, Device,
    KernelHandle, NdRange, Queue, QueueOrder, RuntimeError,
};

const KERNELS: &str = "
kernel add(a: ptr<global, u32>, b: ptr<global, u32>, out: ptr<global, u32>) {
  let i: u32 = global_id(0);
  out[i] = a[i] + b[i];
}
kernel mul(a: ptr<global, u32>, b: ptr<global, u32>, out: ptr<global, u32>) {
  let i: u32 = global_id(0);
  out[i] = a[i] * b[i];
}
kernel scale(x: ptr<global, u32>, s: u32) {
  let i: u32 = global_id(0);
  x[i] = x[i] * s;
}
kernel inc(x: ptr<global, u32>) {
  let i: u32 = global_id(0);
  x[i] = x[i] + 1u32;
}
kernel rotate(a: ptr<global, u32>, out: ptr<global, u32>) {
  let i: u32 = global_id(0);
  out[i] = a[(i + 1u32) % 16u32];
}
";

const N: usize = 16;

struct K {
    add: KernelHandle,
    mul: KernelHandle,
    scale: KernelHandle,
    inc: KernelHandle,
    rotate: KernelHandle,
}

fn kernels(ctx: &Context) -> K {
    let m = parse_module(KERNELS).unwrap();
    let k = |n: &str| ctx.get_kernel(&m, n).unwrap();
    K { add: k("add"), mul: k("mul"), scale: k("scale"), inc: k("inc"), rotate: k("rotate") }
}

fn interp() -> Context {
    Context::with_config(interp_device(), ContextConfig { workers: 3, ..Default::default() })
}

/// Each available device: the interpreter, and Vulkan when there is one.
fn contexts() -> Vec<Context> {
    let mut v = vec![interp()];
    // The interpreter always runs, so a missing GPU device is not a skip of the test.
    let vulkan = kiln_ir::testing::optional("KILN_REQUIRE_TOOLS", VulkanDevice::open());
    // CUDA on the GPU machine (no driver in CI): its command graphs become CUDA graphs.
    let cuda = kiln_ir::testing::optional("KILN_REQUIRE_CUDA", CudaDevice::open());
    let gpus = [vulkan.map(|d| Arc::new(d) as Arc<dyn Device>), cuda.map(|d| Arc::new(d) as _)];
    for d in gpus.into_iter().flatten() {
        v.push(Context::with_config(d, ContextConfig { workers: 2, ..Default::default() }));
    }
    v
}

/// On a device with memory of its own (Vulkan, CUDA), the device partitions' launches are
/// recorded command lists; elsewhere none is.
fn assert_recordings(ctx: &Context, exec: &ExecGraph, device_partitions: usize) {
    let want = if ctx.device().memory_space().is_some() { device_partitions } else { 0 };
    assert_eq!(exec.device_recordings(), want, "{}", ctx.device().name());
}

fn bufs(n: usize) -> Vec<Buffer<u32>> {
    (0..n)
        .map(|b| {
            Buffer::from_slice(&(0..N as u32).map(|i| i * 3 + b as u32 + 1).collect::<Vec<_>>())
        })
        .collect()
}

fn r() -> NdRange {
    NdRange::new(&[N as u32])
}

fn launch3(q: &Queue, k: &KernelHandle, a: &Buffer<u32>, b: &Buffer<u32>, out: &Buffer<u32>) {
    q.submit(|h| {
        let (a, b, o) = (h.read(a), h.read(b), h.write(out));
        h.parallel_for(k, r(), vec![a.into(), b.into(), o.into()]);
    });
}

fn scale(q: &Queue, k: &K, x: &Buffer<u32>, s: u32) {
    q.submit(|h| {
        let x = h.read_write(x);
        h.parallel_for(&k.scale, r(), vec![x.into(), Arg::scalar(s)]);
    });
}

fn inc(q: &Queue, k: &K, x: &Buffer<u32>) {
    q.submit(|h| {
        let x = h.read_write(x);
        h.parallel_for(&k.inc, r(), vec![x.into()]);
    });
}

fn imm(v: u32) -> kiln_ir::Imm {
    kiln_ir::launch::Element::to_imm(v)
}

fn contents(b: &[Buffer<u32>]) -> Vec<Vec<u32>> {
    b.iter().map(|b| b.read().unwrap()).collect()
}

/// Runs `work` eagerly on fresh buffers and as a recorded graph (submitted `runs` times,
/// eager work repeated as often) on other fresh buffers: the contents must be equal.
fn eager_vs_graph(
    ctx: &Context,
    props: GraphProperties,
    nbufs: usize,
    runs: usize,
    work: impl Fn(&Queue, &[Buffer<u32>]),
) -> (Graph, ExecGraph) {
    let q = Queue::new(ctx, QueueOrder::OutOfOrder);
    let eager = bufs(nbufs);
    for _ in 0..runs {
        work(&q, &eager);
    }
    q.wait().unwrap();
    let replay = bufs(nbufs);
    let g = Graph::new(ctx, props);
    q.begin_recording(&g).unwrap();
    work(&q, &replay);
    q.end_recording().unwrap();
    let exec = g.finalize().unwrap();
    let mut last = None;
    for _ in 0..runs {
        last = Some(q.submit_graph(&exec));
    }
    last.unwrap().wait().unwrap();
    assert_eq!(contents(&replay), contents(&eager), "{}", ctx.device().name());
    (g, exec)
}

fn diamond(q: &Queue, k: &K, b: &[Buffer<u32>]) {
    scale(q, k, &b[0], 3); // A writes x
    launch3(q, &k.add, &b[0], &b[1], &b[2]); // B: x + y -> p
    launch3(q, &k.mul, &b[0], &b[1], &b[3]); // C: x * y -> q
    launch3(q, &k.add, &b[2], &b[3], &b[4]); // D: p + q -> out
}

#[test]
fn diamond_records_accessor_edges_and_replays_like_eager() {
    for ctx in contexts() {
        let k = kernels(&ctx);
        let (g, exec) =
            eager_vs_graph(&ctx, GraphProperties::default(), 5, 1, |q, b| diamond(q, &k, b));
        assert_recordings(&ctx, &exec, 1);
        let mut e = g.edges();
        e.sort();
        let n = NodeId::index;
        let edges: Vec<(usize, usize)> = e.iter().map(|(a, b)| (n(*a), n(*b))).collect();
        assert_eq!(edges, [(0, 1), (0, 2), (1, 3), (2, 3)]);
    }
}

#[test]
fn recording_derives_raw_war_waw_edges_and_refuses_waits() {
    let ctx = interp();
    let k = kernels(&ctx);
    let q = Queue::new(&ctx, QueueOrder::OutOfOrder);
    let b = bufs(3);
    let g = Graph::new(&ctx, GraphProperties::default());
    q.begin_recording(&g).unwrap();
    launch3(&q, &k.add, &b[0], &b[1], &b[2]); // 0 reads b0 b1, writes b2
    launch3(&q, &k.mul, &b[2], &b[2], &b[1]); // 1: RAW on b2 (0), WAR on b1 (0)
    let e2 = q.submit(|h| {
        let x = h.read_write(&b[2]); // 2: WAW + WAR on b2 (0, 1)
        h.parallel_for(&k.inc, r(), vec![x.into()]);
    });
    q.submit(|h| {
        h.depends_on(&e2); // 3: explicit event edge only
        let x = h.read_write(&b[0]);
        h.parallel_for(&k.inc, r(), vec![x.into()]);
    });
    // 3 also writes b0, which 0 read: WAR.
    let err = e2.wait().unwrap_err();
    assert!(err.to_string().contains("recorded into a command graph as node 2"), "{err}");
    let err = q.wait().unwrap_err();
    assert!(err.to_string().contains("recording into a command graph"), "{err}");
    q.end_recording().unwrap();
    let mut edges: Vec<(usize, usize)> =
        g.edges().iter().map(|(a, b)| (a.index(), b.index())).collect();
    edges.sort();
    assert_eq!(edges, [(0, 1), (0, 2), (0, 3), (1, 2), (2, 3)]);
    assert!(q.end_recording().is_err());
    q.wait().unwrap();
}

#[test]
fn node_ordering_is_reverse_dfs_and_topological() {
    let ctx = interp();
    let k = kernels(&ctx);
    let b = bufs(4);
    let g = Graph::new(&ctx, GraphProperties::default());
    let rw = |i: usize| Arg::from(b[i].access(AccessMode::ReadWrite));
    let a = g.add(Node::kernel(&k.inc, r(), vec![rw(0)]).named("a"), &[]).unwrap();
    let x = g.add(Node::kernel(&k.inc, r(), vec![rw(1)]).named("b"), &[a]).unwrap();
    let y = g.add(Node::kernel(&k.inc, r(), vec![rw(2)]).named("c"), &[a]).unwrap();
    let z = g.add(Node::kernel(&k.inc, r(), vec![rw(3)]).named("d"), &[x, y]).unwrap();
    let lone = g.add(Node::empty().named("e"), &[]).unwrap();
    g.make_edge(lone, y).unwrap();
    let _ = z;
    let exec = g.finalize().unwrap();
    let s = exec.schedule();
    assert_eq!(s, [["node 0 `a`", "node 1 `b`", "node 4 `e`", "node 2 `c`", "node 3 `d`"]]);
    // Every edge goes forward in the schedule.
    let pos = |i: usize| s[0].iter().position(|l| l.starts_with(&format!("node {i} "))).unwrap();
    for (p, q) in g.edges() {
        assert!(pos(p.index()) < pos(q.index()));
    }
}

#[test]
fn cycles_are_errors_naming_the_cycle() {
    let ctx = interp();
    let g = Graph::new(&ctx, GraphProperties::default());
    let a = g.add(Node::empty().named("a"), &[]).unwrap();
    let b = g.add(Node::empty().named("b"), &[a]).unwrap();
    let c = g.add(Node::empty().named("c"), &[b]).unwrap();
    let e = g.make_edge(c, a).unwrap_err();
    assert_eq!(
        e.to_string(),
        "make_edge(node 2 `c`, node 0 `a`) would create the cycle node 2 `c` -> node 0 `a` -> node 1 `b` -> node 2 `c`"
    );
    assert_eq!(g.edges().len(), 2);
    // Opted out of the check: make_edge takes it, finalize refuses it.
    let g = Graph::new(&ctx, GraphProperties { no_cycle_check: true, ..Default::default() });
    let a = g.add(Node::empty(), &[]).unwrap();
    let b = g.add(Node::empty(), &[a]).unwrap();
    g.make_edge(b, a).unwrap();
    let e = g.finalize().unwrap_err();
    assert!(matches!(&e, GraphError::Cycle { .. }), "{e}");
    assert!(
        e.to_string().contains("node 0 -> node 1 -> node 0")
            || e.to_string().contains("node 1 -> node 0 -> node 1"),
        "{e}"
    );
}

#[test]
fn a_hundred_submits_run_in_order() {
    for ctx in contexts() {
        let k = kernels(&ctx);
        let (_, exec) = eager_vs_graph(&ctx, GraphProperties::default(), 2, 100, |q, b| {
            inc(q, &k, &b[0]);
            launch3(q, &k.add, &b[0], &b[0], &b[1]);
        });
        assert_recordings(&ctx, &exec, 1);
    }
}

/// A host task doubling every element of `b` (its accessor says read-write).
fn host_double(q: &Queue, b: &Buffer<u32>) {
    q.submit(|h| {
        let acc = h.read_write(b);
        h.host_task_fn(move |c| {
            let v: Vec<u32> = c.read::<u32>(&acc).unwrap().iter().map(|x| x * 2).collect();
            c.write(&acc, &v)
        });
    });
}

#[test]
fn host_tasks_split_partitions_device_host_device_host_device() {
    for ctx in contexts() {
        let k = kernels(&ctx);
        let work = |q: &Queue, b: &[Buffer<u32>]| {
            inc(q, &k, &b[0]);
            launch3(q, &k.add, &b[0], &b[1], &b[1]); // reads b0 before the host task writes it
            host_double(q, &b[0]);
            launch3(q, &k.add, &b[0], &b[1], &b[2]);
            host_double(q, &b[2]);
            launch3(q, &k.mul, &b[2], &b[0], &b[3]);
        };
        let (g, exec) = eager_vs_graph(&ctx, GraphProperties::default(), 4, 3, work);
        assert_recordings(&ctx, &exec, 3);
        // A second graph of the same nodes, to look at the partitions.
        let g2 = Graph::new(&ctx, GraphProperties::default());
        let q = Queue::new(&ctx, QueueOrder::OutOfOrder);
        q.begin_recording(&g2).unwrap();
        work(&q, &bufs(4));
        q.end_recording().unwrap();
        let s = g2.finalize().unwrap().schedule();
        let kinds: Vec<usize> = s.iter().map(Vec::len).collect();
        assert_eq!(kinds, [2, 1, 1, 1, 1], "{s:?}");
        assert_eq!(s[1], ["node 2"]);
        assert_eq!(s[3], ["node 4"]);
        assert_eq!(g.node_count(), 6);
    }
}

#[test]
fn backward_edge_merges_partitions() {
    let ctx = interp();
    let k = kernels(&ctx);
    let b = bufs(6);
    let rw = |i: usize| Arg::from(b[i].access(AccessMode::ReadWrite));
    let host = |i: usize| {
        let acc = b[i].access(AccessMode::ReadWrite);
        let a2 = acc.clone();
        Node::host_task(vec![acc], move |c| {
            let v: Vec<u32> = c.read::<u32>(&a2).unwrap().iter().map(|x| x + 100).collect();
            c.write(&a2, &v)
        })
    };
    // A -> HT1 -> B ; C -> HT2 -> E ; then E -> HT1 (backward: HT1 was partitioned first).
    let build = |g: &Graph| {
        let a = g.add(Node::kernel(&k.inc, r(), vec![rw(0)]).named("A"), &[]).unwrap();
        let ht1 = g.add(host(0).named("HT1"), &[a]).unwrap();
        let bn = g.add(Node::kernel(&k.inc, r(), vec![rw(0)]).named("B"), &[ht1]).unwrap();
        let c = g.add(Node::kernel(&k.inc, r(), vec![rw(1)]).named("C"), &[]).unwrap();
        let ht2 = g.add(host(1).named("HT2"), &[c]).unwrap();
        let e = g.add(Node::kernel(&k.inc, r(), vec![rw(1)]).named("E"), &[ht2]).unwrap();
        g.make_edge(e, ht1).unwrap();
        let _ = bn;
    };
    let g = Graph::new(&ctx, GraphProperties::default());
    build(&g);
    let exec = g.finalize().unwrap();
    let s = exec.schedule();
    let part = |name: &str| {
        s.iter().position(|p| p.iter().any(|l| l.ends_with(&format!("`{name}`")))).unwrap()
    };
    for (x, y) in [("A", "HT1"), ("C", "HT2"), ("HT2", "E"), ("E", "HT1"), ("HT1", "B")] {
        assert!(part(x) < part(y), "{x} before {y}: {s:?}");
    }
    // A and C merge into the first partition, E waits for HT2.
    assert_eq!(s.len(), 5, "{s:?}");
    assert_eq!(part("A"), part("C"));
    let q = Queue::new(&ctx, QueueOrder::InOrder);
    q.submit_graph(&exec).wait().unwrap();
    let want: Vec<u32> = bufs(1)[0].read().unwrap().iter().map(|x| x + 1 + 100 + 1).collect();
    assert_eq!(b[0].read().unwrap(), want);
    let want1: Vec<u32> = bufs(2)[1].read().unwrap().iter().map(|x| x + 1 + 100 + 1).collect();
    assert_eq!(b[1].read().unwrap(), want1);
    // A node related to no host task but after a host task's predecessor: the annotation
    // would put it first; the partitions still keep every edge forward.
    let g = Graph::new(&ctx, GraphProperties::default());
    let a = g.add(Node::kernel(&k.inc, r(), vec![rw(3)]).named("P"), &[]).unwrap();
    g.add(host(3).named("H"), &[a]).unwrap();
    g.add(Node::kernel(&k.inc, r(), vec![rw(4)]).named("X"), &[a]).unwrap();
    let s = g.finalize().unwrap().schedule();
    assert_eq!(s, [vec!["node 0 `P`", "node 2 `X`"], vec!["node 1 `H`"]]);
}

#[test]
fn sub_graphs_run_inside_the_graph() {
    for ctx in contexts() {
        let k = kernels(&ctx);
        let b = bufs(3);
        let sub = Graph::new(&ctx, GraphProperties::default());
        let q = Queue::new(&ctx, QueueOrder::InOrder);
        q.begin_recording(&sub).unwrap();
        launch3(&q, &k.add, &b[0], &b[1], &b[2]);
        scale(&q, &k, &b[2], 5);
        q.end_recording().unwrap();
        let g = Graph::new(&ctx, GraphProperties::default());
        let rw = |i: usize| Arg::from(b[i].access(AccessMode::ReadWrite));
        let first = g.add(Node::kernel(&k.inc, r(), vec![rw(0)]), &[]).unwrap();
        let s = g.add(Node::sub_graph(&sub), &[first]).unwrap();
        g.add(Node::kernel(&k.inc, r(), vec![rw(2)]), &[s]).unwrap();
        let exec = g.finalize().unwrap();
        assert_eq!(exec.schedule(), [["node 0", "node 1 > node 0", "node 1 > node 1", "node 2"]]);
        q.submit_graph(&exec).wait().unwrap();
        let eager = bufs(3);
        let q2 = Queue::new(&ctx, QueueOrder::InOrder);
        inc(&q2, &k, &eager[0]);
        launch3(&q2, &k.add, &eager[0], &eager[1], &eager[2]);
        scale(&q2, &k, &eager[2], 5);
        inc(&q2, &k, &eager[2]);
        assert_eq!(contents(&b), contents(&eager));
    }
}

#[test]
fn a_finalized_graph_cannot_change() {
    let ctx = interp();
    let g = Graph::new(&ctx, GraphProperties::default());
    let a = g.add(Node::empty(), &[]).unwrap();
    let b = g.add(Node::empty(), &[]).unwrap();
    g.finalize().unwrap();
    let e = g.add(Node::empty(), &[a]).unwrap_err();
    assert_eq!(e.to_string(), "add: the graph was finalized and can no longer be modified");
    assert!(matches!(g.make_edge(a, b), Err(GraphError::Finalized { .. })));
    let q = Queue::new(&ctx, QueueOrder::InOrder);
    assert!(matches!(q.begin_recording(&g), Err(GraphError::Finalized { .. })));
    // A node id of another graph is refused by name.
    let g2 = Graph::new(&ctx, GraphProperties::default());
    assert_eq!(
        g2.add(Node::empty(), &[NodeId::clone(&b)]).unwrap_err().to_string(),
        "node 1 is not a node of this graph"
    );
}

#[test]
fn updates_change_arguments_without_finalizing_again() {
    let ctx = interp();
    let k = kernels(&ctx);
    let build = |b: &[Buffer<u32>], s: u32| {
        let g = Graph::new(&ctx, GraphProperties::default());
        let x = g
            .add(
                Node::kernel(
                    &k.scale,
                    r(),
                    vec![b[0].access(AccessMode::ReadWrite).into(), Arg::scalar(s)],
                ),
                &[],
            )
            .unwrap();
        let args = vec![
            b[0].access(AccessMode::Read).into(),
            b[1].access(AccessMode::Read).into(),
            b[2].access(AccessMode::Write).into(),
        ];
        g.add(Node::kernel(&k.add, r(), args), &[x]).unwrap();
        g
    };
    let (b1, b2) = (bufs(3), bufs(3));
    let g1 = build(&b1, 2);
    let exec = g1.finalize().unwrap();
    let q = Queue::new(&ctx, QueueOrder::InOrder);
    q.submit_graph(&exec);
    // Whole-graph update: the same topology over other buffers and another scalar.
    exec.update(&build(&b2, 7)).unwrap();
    q.submit_graph(&exec).wait().unwrap();
    let want = |b: &[Buffer<u32>], s: u32| -> Vec<u32> {
        let (x, y) = (bufs(3)[0].read().unwrap(), b[1].read().unwrap());
        x.iter().zip(&y).map(|(x, y)| x * s + y).collect()
    };
    assert_eq!(b1[2].read().unwrap(), want(&b1, 2));
    assert_eq!(b2[2].read().unwrap(), want(&b2, 7));
    // Per node: a new scalar for node 0 (on b2 again: scaled twice now).
    exec.update_node(
        NodeId::clone(&g1.edges()[0].0),
        vec![b2[0].access(AccessMode::ReadWrite).into(), Arg::scalar(10u32)],
    )
    .unwrap();
    q.submit_graph(&exec).wait().unwrap();
    let x: Vec<u32> = bufs(3)[0].read().unwrap().iter().map(|x| x * 70).collect();
    let sum: Vec<u32> = x.iter().zip(b2[1].read().unwrap()).map(|(x, y)| x + y).collect();
    assert_eq!(b2[2].read().unwrap(), sum);
    // Refused: a scalar of another type, another buffer for one use of a shared buffer, another topology.
    let n0 = g1.edges()[0].0;
    let e = exec
        .update_node(n0, vec![b2[0].access(AccessMode::ReadWrite).into(), Arg::scalar(1.0f32)])
        .unwrap_err();
    assert!(e.to_string().contains("does not match the old"), "{e}");
    let other = Buffer::<u32>::zeroed(N);
    let e = exec
        .update_node(n0, vec![other.access(AccessMode::ReadWrite).into(), Arg::scalar(1u32)])
        .unwrap_err();
    assert!(e.to_string().contains("changes which nodes share a buffer"), "{e}");
    let g3 = Graph::new(&ctx, GraphProperties::default());
    g3.add(Node::empty(), &[]).unwrap();
    assert!(exec.update(&g3).unwrap_err().to_string().contains("another number of nodes"));
    // Still the last good state.
    q.submit_graph(&exec).wait().unwrap();
}

#[test]
fn copies_fills_and_recorded_once_host_tasks() {
    let ctx = interp();
    let k = kernels(&ctx);
    let work = |q: &Queue, b: &[Buffer<u32>]| {
        q.submit(|h| h.fill(&AnyBuffer::from(&b[0]), imm(9u32)));
        q.submit(|h| h.copy(&AnyBuffer::from(&b[0]), &AnyBuffer::from(&b[1])));
        launch3(q, &k.add, &b[0], &b[1], &b[2]);
    };
    eager_vs_graph(&ctx, GraphProperties::default(), 3, 2, work);
    // A `host_task` (run once) cannot be replayed: finalize names the node.
    let g = Graph::new(&ctx, GraphProperties::default());
    let q = Queue::new(&ctx, QueueOrder::InOrder);
    q.begin_recording(&g).unwrap();
    q.submit(|h| h.host_task(|_| Ok(())));
    q.end_recording().unwrap();
    let e = g.finalize().unwrap_err();
    assert!(
        e.to_string().starts_with("node 0: a host task submitted with `host_task` runs once"),
        "{e}"
    );
}

#[test]
fn chains_fuse_at_finalize_and_give_the_eager_results() {
    for ctx in contexts() {
        let k = kernels(&ctx);
        let chain = |q: &Queue, b: &[Buffer<u32>]| {
            launch3(q, &k.add, &b[0], &b[1], &b[2]); // t = a + b
            launch3(q, &k.mul, &b[2], &b[1], &b[3]); // u = t * b
            scale(q, &k, &b[3], 3); // u *= 3
            launch3(q, &k.add, &b[3], &b[0], &b[4]); // out = u + a
        };
        for internalize in [false, true] {
            let props = GraphProperties { fuse_chains: true, internalize, ..Default::default() };
            let g = Graph::new(&ctx, props);
            let q = Queue::new(&ctx, QueueOrder::InOrder);
            let b = bufs(5);
            q.begin_recording(&g).unwrap();
            chain(&q, &b);
            q.end_recording().unwrap();
            let exec = g.finalize().unwrap();
            assert_eq!(exec.fused_chains(), 1);
            assert_eq!(exec.schedule()[0].len(), 1, "{:?}", exec.schedule());
            q.submit_graph(&exec);
            q.submit_graph(&exec).wait().unwrap();
            let eager = bufs(5);
            chain(&q, &eager);
            chain(&q, &eager);
            q.wait().unwrap();
            let got = contents(&b);
            let want = contents(&eager);
            assert_eq!(got[4], want[4]);
            assert_eq!(got[0..2], want[0..2]);
            if internalize {
                // The intermediates stay on chip: the graph leaves those buffers as they were.
                assert_eq!(got[2..4], contents(&bufs(5))[2..4]);
            } else {
                assert_eq!(got, want);
            }
        }
        // Not provably per work-item (rotate reads another work-item's element): not fused.
        let work = |q: &Queue, b: &[Buffer<u32>]| {
            launch3(q, &k.add, &b[0], &b[1], &b[2]);
            q.submit(|h| {
                let (a, o) = (h.read(&b[2]), h.write(&b[3]));
                h.parallel_for(&k.rotate, r(), vec![a.into(), o.into()]);
            });
        };
        let props = GraphProperties { fuse_chains: true, internalize: true, ..Default::default() };
        let (_, exec) = eager_vs_graph(&ctx, props, 4, 1, work);
        assert_eq!(exec.fused_chains(), 0);
        assert_eq!(exec.schedule(), [["node 0", "node 1"]]);
        // And says why, as a fusion-aware queue does.
        let refused = exec.refused_chains();
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(refused[0].nodes, ["node 0", "node 1"]);
        let why = &refused[0].reason;
        assert!(why.starts_with("fusing would change the result: a buffer one kernel writes and another uses is not provably accessed per work-item: "), "{why}");
        assert!(why.contains("(`rotate`)"), "{why}");
    }
}

#[test]
fn kernel_errors_name_the_node_and_the_graph() {
    let ctx = interp();
    let m = parse_module(
        "kernel oob(x: ptr<global, u32>) { let i: u32 = global_id(0); x[i + 100u32] = 1u32; }",
    )
    .unwrap();
    let pm = ctx.prepare(&m, &[], "");
    let b = Buffer::<u32>::zeroed(4);
    let g = Graph::new(&ctx, GraphProperties::default());
    g.add(
        Node::kernel_of(&pm, "oob", NdRange::new(&[4]), vec![b.access(AccessMode::Write).into()])
            .named("bad"),
        &[],
    )
    .unwrap();
    let exec = g.finalize().unwrap();
    let q = Queue::new(&ctx, QueueOrder::InOrder);
    let e = q.submit_graph(&exec).wait().unwrap_err();
    assert!(
        matches!(&e, RuntimeError::Kernel { command, .. } if command.ends_with("node 0 `bad`")),
        "{e}"
    );
    // A kernel name the module does not have: finalize names the node.
    let g = Graph::new(&ctx, GraphProperties::default());
    g.add(Node::kernel_of(&pm, "nope", NdRange::new(&[4]), vec![]), &[]).unwrap();
    let e = g.finalize().unwrap_err();
    assert!(e.to_string().starts_with("node 0: the program has no kernel `nope`"), "{e}");
}

#[test]
fn print_dot_writes_every_node_and_edge() {
    let ctx = interp();
    let k = kernels(&ctx);
    let q = Queue::new(&ctx, QueueOrder::OutOfOrder);
    let g = Graph::new(&ctx, GraphProperties::default());
    q.begin_recording(&g).unwrap();
    diamond(&q, &k, &bufs(5));
    q.end_recording().unwrap();
    let dir = std::env::temp_dir().join(format!("kiln-graph-dot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    g.print_dot(dir.join("g.dot"), true).unwrap();
    let text = std::fs::read_to_string(dir.join("g.dot")).unwrap();
    assert!(text.starts_with("digraph kiln_graph {"), "{text}");
    for edge in ["n0 -> n1;", "n0 -> n2;", "n1 -> n3;", "n2 -> n3;"] {
        assert!(text.contains(edge), "{text}");
    }
    assert!(text.contains("kernel `scale`\\nglobal [16]\\nargs: buffer #"), "{text}");
    assert!(!g.to_dot(false).contains("args:"));
    let e = g.print_dot(dir.join("no/such/dir/g.dot"), false).unwrap_err();
    assert!(e.to_string().starts_with("cannot write"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn copies_and_fills_that_do_not_fit_fail_naming_the_command() {
    let ctx = interp();
    let q = Queue::new(&ctx, QueueOrder::OutOfOrder);
    let (small, big) = (Buffer::<u32>::zeroed(2), Buffer::<u32>::zeroed(4));
    let floats = Buffer::<f32>::zeroed(4);
    let e = q.submit(|h| h.copy(&AnyBuffer::from(&big), &AnyBuffer::from(&small)));
    let err = e.wait().unwrap_err();
    assert!(err.to_string().contains("destination must be at least as long"), "{err}");
    let e = q.submit(|h| h.fill(&AnyBuffer::from(&floats), imm(1)));
    let err = e.wait().unwrap_err();
    assert!(
        matches!(&err, RuntimeError::Invalid { command, .. } if command.starts_with("fill #")),
        "{err}"
    );
    assert!(err.to_string().contains("with a value of type u32"), "{err}");
    // The same in a graph: the error names the graph's node.
    let g = Graph::new(&ctx, GraphProperties::default());
    let other = Buffer::<f32>::zeroed(4);
    g.add(Node::fill(&AnyBuffer::from(&other), imm(1)).named("f"), &[]).unwrap();
    let err = q.submit_graph(&g.finalize().unwrap()).wait().unwrap_err();
    assert!(err.command().ends_with("node 0 `f`"), "{err}");
    let _ = q.wait();
}

/// Stress for a fixed race: a dependency finishing while a command was being wired up
/// released the command early, so it ran twice and the context's shutdown waited forever
/// (seen once, in a release-build benchmark). The window is narrow: this rarely hits it,
/// but checks that every command runs once and the context shuts down.
#[test]
fn dependencies_finishing_during_submission_run_each_command_once() {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let ctx = interp();
        let k = kernels(&ctx);
        let q = Queue::new(&ctx, QueueOrder::OutOfOrder);
        let b = Buffer::<u32>::zeroed(1);
        let mut last: Option<kiln_runtime::Event> = None;
        for _ in 0..2000 {
            let dep = last.clone();
            last = Some(q.submit(|h| {
                if let Some(d) = &dep {
                    h.depends_on(d);
                }
                let x = h.read_write(&b);
                h.parallel_for(&k.inc, NdRange::new(&[1]), vec![x.into()]);
            }));
        }
        q.wait().unwrap();
        let v = b.read().unwrap();
        drop((q, ctx));
        let _ = tx.send(v);
    });
    // Generous: only a hang (the bug) takes this long.
    let v = rx.recv_timeout(std::time::Duration::from_secs(300)).expect("the context shut down");
    assert_eq!(v, [2000]);
}

/// Records `work` into a graph and finalizes it on another thread, failing if that takes
/// longer than `limit_s`: a hang limit far beyond what finalizing takes (chain search was
/// cubic in the chain's length: 290 s for 1000 kernels in a release build).
fn finalize_within(
    ctx: &Context,
    props: GraphProperties,
    limit_s: u64,
    work: impl Fn(&Queue),
) -> ExecGraph {
    let q = Queue::new(ctx, QueueOrder::OutOfOrder);
    let g = Graph::new(ctx, props);
    q.begin_recording(&g).unwrap();
    work(&q);
    q.end_recording().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(g.finalize());
    });
    let limit = std::time::Duration::from_secs(limit_s);
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("finalize still runs after {limit:?}"))
        .unwrap()
}

/// A chain of 1000 kernels, each reading the previous one's output, the last reading a
/// neighbour's element: the 999 before it fuse into one node at finalize (their
/// intermediates internalized), and the graph replays with the eager result. (The whole
/// chain fails the check; every suffix of it was then tried: finalize took minutes.)
#[test]
fn a_chain_of_a_thousand_kernels_fuses_its_longest_legal_prefix() {
    const LEN: usize = 1000;
    let ctx = interp();
    let k = kernels(&ctx);
    // t[i + 1] = t[i] + c for t = b[0..LEN] and c = b[LEN + 1]; then b[LEN] = rotate(t[LEN - 1]).
    let work = |q: &Queue, b: &[Buffer<u32>]| {
        for i in 0..LEN - 1 {
            launch3(q, &k.add, &b[i], &b[LEN + 1], &b[i + 1]);
        }
        q.submit(|h| {
            let (a, o) = (h.read(&b[LEN - 1]), h.write(&b[LEN]));
            h.parallel_for(&k.rotate, r(), vec![a.into(), o.into()]);
        });
    };
    let props = GraphProperties { fuse_chains: true, internalize: true, ..Default::default() };
    let b = bufs(LEN + 2);
    let exec = finalize_within(&ctx, props, 240, |q| work(q, &b));
    assert_eq!(exec.fused_chains(), 1);
    let prefix: Vec<String> = (0..LEN - 1).map(|i| format!("node {i}")).collect();
    let fused = format!("fused chain [{}]", prefix.join(", "));
    assert_eq!(exec.schedule(), [[fused, format!("node {}", LEN - 1)]]);
    assert_eq!(exec.fused_chain_nodes(), [prefix]);
    let refused = exec.refused_chains();
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].nodes.len(), LEN);
    assert!(refused[0].reason.contains("not provably accessed per work-item"), "{refused:?}");
    let q = Queue::new(&ctx, QueueOrder::OutOfOrder);
    q.submit_graph(&exec).wait().unwrap();
    let eager = bufs(LEN + 2);
    work(&q, &eager);
    q.wait().unwrap();
    // The intermediates before the last are internal to the fused chain.
    for i in [0, LEN - 1, LEN, LEN + 1] {
        assert_eq!(b[i].read().unwrap(), eager[i].read().unwrap(), "buffer {i}");
    }
}

/// A chain of 1000 kernels that cannot be fused (each reads the neighbour of an element the
/// previous one wrote: another work-item's) finalizes without trying its 1000 suffixes, and
/// replays with the eager result.
#[test]
fn a_chain_of_a_thousand_unfusable_kernels_finalizes() {
    const LEN: usize = 1000;
    let ctx = interp();
    let k = kernels(&ctx);
    let props = GraphProperties { fuse_chains: true, ..Default::default() };
    let work = |q: &Queue, b: &[Buffer<u32>]| {
        for i in 0..LEN {
            let (from, to) = (&b[i % 2], &b[1 - i % 2]);
            q.submit(|h| {
                let (a, o) = (h.read(from), h.write(to));
                h.parallel_for(&k.rotate, r(), vec![a.into(), o.into()]);
            });
        }
    };
    let b = bufs(2);
    let exec = finalize_within(&ctx, props, 240, |q| work(q, &b));
    assert_eq!(exec.fused_chains(), 0);
    assert_eq!(exec.schedule()[0].len(), LEN);
    let q = Queue::new(&ctx, QueueOrder::OutOfOrder);
    q.submit_graph(&exec).wait().unwrap();
    let eager = bufs(2);
    work(&q, &eager);
    q.wait().unwrap();
    assert_eq!(contents(&b), contents(&eager));
}

/// A kernel node given an argument of the wrong type is refused when the graph is finalized
/// (the runtime's one argument check), naming the node, the argument and both types: it
/// neither joins a chain (it joined, and the fused kernel's launch failed naming a parameter
/// of the fused kernel) nor fails only at replay.
#[test]
fn a_node_with_an_argument_of_the_wrong_type_is_refused_at_finalize() {
    let ctx = interp();
    let k = kernels(&ctx);
    let b = bufs(3);
    let props = GraphProperties { fuse_chains: true, ..Default::default() };
    let q = Queue::new(&ctx, QueueOrder::OutOfOrder);
    let g = Graph::new(&ctx, props);
    q.begin_recording(&g).unwrap();
    launch3(&q, &k.add, &b[0], &b[1], &b[2]);
    q.submit(|h| {
        let x = h.read_write(&b[2]);
        h.parallel_for(&k.scale, r(), vec![x.into(), Arg::scalar(2.0f32)]);
    });
    q.end_recording().unwrap();
    let err = g.finalize().unwrap_err();
    assert!(matches!(err, GraphError::Argument { .. }), "{err:?}");
    assert_eq!(err.to_string(), "node 1: argument 1 (`s`) is a u32 but the value given is a f32",);
}

/// A chain of kernels that each update the same buffer in place (`x[i] = x[i] + 1`): every
/// work-item touches only its own element, so the whole chain fuses (the queue's rule; the
/// promotion-based check graphs used refused it, since the first kernel reads the buffer).
#[test]
fn a_chain_of_in_place_updates_fuses() {
    const LEN: usize = 64;
    let ctx = interp();
    let k = kernels(&ctx);
    // With `internalize`, the buffer (used by the chain alone) is not promoted: the first
    // kernel reads what was there before, which private memory would not hold.
    for internalize in [false, true] {
        let props = GraphProperties { fuse_chains: true, internalize, ..Default::default() };
        let b = bufs(1);
        let exec = finalize_within(&ctx, props, 240, |q| (0..LEN).for_each(|_| inc(q, &k, &b[0])));
        assert_eq!(exec.fused_chains(), 1, "{:?}", exec.refused_chains());
        let report = exec.explain()[0].to_string();
        let promotion = if internalize {
            "promotion to private: refused: "
        } else {
            "promotion: not requested"
        };
        assert!(report.contains(promotion), "{report}");
        let q = Queue::new(&ctx, QueueOrder::OutOfOrder);
        q.submit_graph(&exec).wait().unwrap();
        let want: Vec<u32> = contents(&bufs(1))[0].iter().map(|v| v + LEN as u32).collect();
        assert_eq!(b[0].read().unwrap(), want);
    }
}

/// Two chains that are each contractible alone but not both (graph_prop's case): node 0
/// (`b2 = b3 + b2` in place) and node 2 (`b2 *= 2`, also after node 1 by an explicit
/// dependency) form one chain, node 1 (`b4 = b1 + b3`) and node 3 (`b3 = b3 + b4`, after
/// node 0, which reads `b3`) another; contracting both makes each wait for the other. The
/// first is fused, the second is not (finalize fell back to fusing nothing, with a
/// warning), and the replays give the eager result.
#[test]
fn chains_that_would_wait_for_each_other_are_not_both_fused() {
    let ctx = interp();
    let k = kernels(&ctx);
    let work = |q: &Queue, b: &[Buffer<u32>]| {
        launch3(q, &k.add, &b[3], &b[2], &b[2]);
        let e1 = q.submit(|h| {
            let (a, c, o) = (h.read(&b[1]), h.read(&b[3]), h.write(&b[4]));
            h.parallel_for(&k.add, r(), vec![a.into(), c.into(), o.into()]);
        });
        q.submit(|h| {
            h.depends_on(&e1);
            let x = h.read_write(&b[2]);
            h.parallel_for(&k.scale, r(), vec![x.into(), Arg::scalar(2u32)]);
        });
        launch3(q, &k.add, &b[3], &b[4], &b[3]);
    };
    let props = GraphProperties { fuse_chains: true, ..Default::default() };
    let (_, exec) = eager_vs_graph(&ctx, props, 5, 2, work);
    assert_eq!(exec.fused_chain_nodes(), [["node 0", "node 2"]], "{:?}", exec.schedule());
    assert_eq!(exec.schedule(), [["node 1", "fused chain [node 0, node 2]", "node 3"]]);
}

/// `explain` reports every chain considered, fused or not, with the verdict on each shared
/// buffer in the words of `kiln fuse --explain`.
#[test]
fn explain_reports_fused_and_refused_chains_per_buffer() {
    let ctx = interp();
    let k = kernels(&ctx);
    let work = |q: &Queue, b: &[Buffer<u32>]| {
        launch3(q, &k.add, &b[0], &b[1], &b[2]);
        scale(q, &k, &b[2], 3);
        q.submit(|h| {
            let (a, o) = (h.read(&b[2]), h.write(&b[3]));
            h.parallel_for(&k.rotate, r(), vec![a.into(), o.into()]);
        });
    };
    let props = GraphProperties { fuse_chains: true, ..Default::default() };
    let (_, exec) = eager_vs_graph(&ctx, props, 4, 1, work);
    let text: Vec<String> = exec.explain().iter().map(|c| c.to_string()).collect();
    assert_eq!(
        text[0],
        "fused chain [node 0, node 1]:\n\
         buffer `out` of `add` (parameter (0, 2)):\n  \
         entry 0 writes `out[i]` (every work-item): affine index, in bounds\n  \
         entry 1 reads `x[i]` (every work-item): affine index, in bounds\n  \
         entry 1 writes `x[i]` (every work-item): affine index, in bounds\n  \
         in global memory, per work-item: yes\n  \
         promotion: not requested"
    );
    assert_eq!(text.len(), 2, "{text:?}");
    assert!(
        text[1].starts_with(
            "chain [node 0, node 1, node 2] not fused as one kernel: fusing would change the \
             result: a buffer one kernel writes and another uses is not provably accessed per \
             work-item: "
        ),
        "{}",
        text[1]
    );
    assert!(text[1].contains("\nbuffer `out` of `add` (parameter (0, 2)):\n"), "{}", text[1]);
    assert!(text[1].contains("in global memory, per work-item: no: "), "{}", text[1]);
}

/// Graph chains and fusion-aware queues share one fusion front end and its cache: the same
/// chain finalized in a second graph, and fused by a queue with `no_barriers` (graph chains
/// have no barrier between their kernels), reuses the fused kernel.
#[test]
fn graph_chains_and_queue_fusions_share_the_fusion_cache() {
    let ctx = interp();
    let k = kernels(&ctx);
    let chain = |q: &Queue, b: &[Buffer<u32>]| {
        launch3(q, &k.add, &b[0], &b[1], &b[2]);
        scale(q, &k, &b[2], 3);
    };
    let props = GraphProperties { fuse_chains: true, ..Default::default() };
    for _ in 0..2 {
        let (_, exec) = eager_vs_graph(&ctx, props, 3, 1, chain);
        assert_eq!(exec.fused_chains(), 1);
    }
    let st = ctx.fusion_cache_stats();
    assert_eq!((st.builds, st.hits), (1, 1));
    let q = Queue::new(&ctx, QueueOrder::InOrder);
    let b = bufs(3);
    q.start_fusion().unwrap();
    chain(&q, &b);
    let props = kiln_runtime::fusion::FusionProps { no_barriers: true };
    q.complete_fusion(props).wait().unwrap();
    let status = q.fusion_status();
    assert!(
        matches!(
            status,
            Some(kiln_runtime::fusion::FusionStatus::Completed { cache_hit: true, .. })
        ),
        "{status:?}"
    );
    assert_eq!(ctx.fusion_cache_stats().builds, 1);
}
