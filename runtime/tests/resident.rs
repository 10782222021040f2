//! Buffers kept in device memory between launches (Vulkan on lavapipe in CI, CUDA by hand):
//! every way the host can touch a buffer (read, partial write, host task, copy, fill, a
//! launch on another device) sees the device's writes, and the device sees the host's;
//! recorded command lists (a Vulkan command buffer, a CUDA graph) order dependent launches.
//! Each scenario runs on the interpreter too, which is the oracle.

use kiln_runtime::QueueGraph;
use std::sync::Arc;

use kiln_ir::parse_module;
use kiln_runtime::device::cuda::CudaDevice;
use kiln_runtime::device::vulkan::VulkanDevice;
use kiln_runtime::graph::{Graph, GraphProperties, Node};
use kiln_runtime::{
    interp_device, AccessMode, Arg, Buffer, Context, ContextConfig, Device, KernelHandle, NdRange,
    Queue, QueueOrder,
};

const KERNELS: &str = "
kernel inc(x: ptr<global, u32>) {
  let i: u32 = global_id(0);
  x[i] = x[i] + 1u32;
}
kernel axpy(x: ptr<global, u32>, y: ptr<global, u32>, a: u32) {
  let i: u32 = global_id(0);
  y[i] = a * x[i] + y[i];
}
";

const N: usize = 64;

fn ctx(d: Arc<dyn Device>) -> Context {
    Context::with_config(d, ContextConfig { workers: 2, ..Default::default() })
}

/// The devices with memory of their own found here (the test is recorded as skipped when
/// there is none).
fn devices() -> Vec<Arc<dyn Device>> {
    let mut v: Vec<Arc<dyn Device>> = Vec::new();
    if let Some(d) = kiln_ir::testing::optional("KILN_REQUIRE_TOOLS", VulkanDevice::open()) {
        v.push(Arc::new(d));
    }
    if let Some(d) = kiln_ir::testing::optional("KILN_REQUIRE_CUDA", CudaDevice::open()) {
        v.push(Arc::new(d));
    }
    for d in &v {
        assert!(d.memory_space().is_some(), "{} keeps no buffers", d.name());
    }
    if v.is_empty() {
        // Each test compares such devices with the interpreter: without one it checks nothing.
        kiln_ir::testing::skip("no device with memory of its own (Vulkan or CUDA)");
    }
    v
}

fn kernel(c: &Context, name: &str) -> KernelHandle {
    c.get_kernel(&parse_module(KERNELS).unwrap(), name).unwrap()
}

fn inc(q: &Queue, k: &KernelHandle, x: &Buffer<u32>) {
    q.submit(|h| {
        let x = h.read_write(x);
        h.parallel_for(k, NdRange::new(&[N as u32]), vec![x.into()]);
    });
}

fn axpy(q: &Queue, k: &KernelHandle, x: &Buffer<u32>, y: &Buffer<u32>, a: u32) {
    q.submit(|h| {
        let (x, y) = (h.read(x), h.read_write(y));
        h.parallel_for(k, NdRange::new(&[N as u32]), vec![x.into(), y.into(), Arg::scalar(a)]);
    });
}

fn iota(s: u32) -> Vec<u32> {
    (0..N as u32).map(|i| i * 7 + s).collect()
}

/// Every host access point after device writes, and device launches after host writes, on
/// `dev` and on the interpreter: the same contents at every step.
fn host_and_device_agree(dev: Arc<dyn Device>) -> Vec<Vec<u32>> {
    let c = ctx(dev);
    let q = Queue::new(&c, QueueOrder::InOrder);
    let (ki, ka) = (kernel(&c, "inc"), kernel(&c, "axpy"));
    let (x, y) = (Buffer::from_slice(&iota(1)), Buffer::from_slice(&iota(100)));
    let mut seen = Vec::new();
    // Launches back to back (no host access between): y = 3x + y, x + 2.
    inc(&q, &ki, &x);
    axpy(&q, &ka, &x, &y, 3);
    inc(&q, &ki, &x);
    seen.push(x.read().unwrap());
    seen.push(y.read().unwrap());
    // A partial host write after device writes keeps the rest of the device's contents.
    y.write(&[5, 6, 7]).unwrap();
    seen.push(y.read().unwrap());
    // The device sees the host's write.
    axpy(&q, &ka, &x, &y, 2);
    // A host task reads the device's write and writes x.
    q.submit(|h| {
        let (ry, wx) = (h.read(&y), h.read_write(&x));
        h.host_task(move |t| {
            let v: Vec<u32> = t.read(&ry).ok_or("read")?;
            t.write(&wx, &v.iter().map(|e| e / 2).collect::<Vec<_>>())
        });
    });
    inc(&q, &ki, &x);
    seen.push(x.read().unwrap());
    // Copy and fill between device-written buffers.
    let z = Buffer::<u32>::zeroed(N);
    inc(&q, &ki, &x);
    q.submit(|h| h.copy(&(&x).into(), &(&z).into()));
    inc(&q, &ki, &z);
    q.submit(|h| h.fill(&(&x).into(), kiln_ir::launch::Element::to_imm(9u32)));
    inc(&q, &ki, &x);
    seen.push(z.read().unwrap());
    seen.push(x.read().unwrap());
    q.wait().unwrap();
    seen
}

#[test]
fn host_access_sees_device_writes_and_launches_see_host_writes() {
    let want = host_and_device_agree(interp_device());
    for d in devices() {
        let name = d.name();
        assert_eq!(host_and_device_agree(d), want, "{name}");
    }
}

/// One buffer used alternately by a device with memory of its own and the interpreter:
/// each sees the other's writes.
#[test]
fn a_buffer_moves_between_devices() {
    let interp = ctx(interp_device());
    let qi = Queue::new(&interp, QueueOrder::InOrder);
    let ki = kernel(&interp, "inc");
    for d in devices() {
        let c = ctx(d);
        let q = Queue::new(&c, QueueOrder::InOrder);
        let k = kernel(&c, "inc");
        let x = Buffer::from_slice(&iota(0));
        for round in 0..3 {
            inc(&q, &k, &x);
            q.wait().unwrap();
            inc(&qi, &ki, &x);
            qi.wait().unwrap();
            inc(&q, &k, &x);
            q.wait().unwrap();
            let want: Vec<u32> = iota(3 * (round + 1));
            assert_eq!(x.read().unwrap(), want, "{} round {round}", c.device().name());
        }
    }
}

/// A recorded chain of 100 dependent launches on one buffer, and independent branches
/// joined at the end: the command list's barriers (or graph edges) order them.
#[test]
fn recorded_lists_order_dependent_launches() {
    for d in devices() {
        let c = ctx(d);
        let q = Queue::new(&c, QueueOrder::OutOfOrder);
        let (ki, ka) = (kernel(&c, "inc"), kernel(&c, "axpy"));
        let (x, y, z) = (
            Buffer::from_slice(&iota(0)),
            Buffer::from_slice(&iota(1)),
            Buffer::from_slice(&iota(2)),
        );
        let g = Graph::new(&c, GraphProperties::default());
        q.begin_recording(&g).unwrap();
        for _ in 0..100 {
            inc(&q, &ki, &x);
        }
        inc(&q, &ki, &y); // independent of x's chain
        axpy(&q, &ka, &x, &z, 2); // after the chain
        axpy(&q, &ka, &y, &z, 1); // after both
        q.end_recording().unwrap();
        let exec = g.finalize().unwrap();
        assert_eq!(exec.device_recordings(), 1, "{}", c.device().name());
        for run in 1..=3u32 {
            q.submit_graph(&exec).wait().unwrap();
            let xs: Vec<u32> = iota(0).iter().map(|v| v + 100 * run).collect();
            assert_eq!(x.read().unwrap(), xs, "{} run {run}", c.device().name());
        }
        // Oracle: the same on the interpreter.
        let ci = ctx(interp_device());
        let qi = Queue::new(&ci, QueueOrder::InOrder);
        let (ii, ia) = (kernel(&ci, "inc"), kernel(&ci, "axpy"));
        let (xi, yi, zi) = (
            Buffer::from_slice(&iota(0)),
            Buffer::from_slice(&iota(1)),
            Buffer::from_slice(&iota(2)),
        );
        for _ in 0..3 {
            for _ in 0..100 {
                inc(&qi, &ii, &xi);
            }
            inc(&qi, &ii, &yi);
            axpy(&qi, &ia, &xi, &zi, 2);
            axpy(&qi, &ia, &yi, &zi, 1);
        }
        assert_eq!(z.read().unwrap(), zi.read().unwrap(), "{}", c.device().name());
        assert_eq!(y.read().unwrap(), yi.read().unwrap(), "{}", c.device().name());
    }
}

/// Host writes between replays reach the recorded command list, and an update to new
/// buffers and scalars re-records it.
#[test]
fn replays_see_host_writes_and_updates_rerecord() {
    for d in devices() {
        let c = ctx(d);
        let name = c.device().name();
        let q = Queue::new(&c, QueueOrder::InOrder);
        let ka = kernel(&c, "axpy");
        let (x, y) = (Buffer::from_slice(&iota(1)), Buffer::<u32>::zeroed(N));
        let g = Graph::new(&c, GraphProperties::default());
        let args = |x: &Buffer<u32>, y: &Buffer<u32>, a: u32| {
            vec![
                Arg::from(x.access(AccessMode::Read)),
                Arg::from(y.access(AccessMode::ReadWrite)),
                Arg::scalar(a),
            ]
        };
        let range = NdRange::new(&[N as u32]);
        let n0 = g.add(Node::kernel(&ka, range, args(&x, &y, 2)), &[]).unwrap();
        let exec = g.finalize().unwrap();
        q.submit_graph(&exec).wait().unwrap();
        x.write(&[1000]).unwrap();
        y.write(&[0; N]).unwrap();
        q.submit_graph(&exec).wait().unwrap();
        let mut want: Vec<u32> = iota(1).iter().map(|v| 2 * v).collect();
        want[0] = 2000;
        assert_eq!(y.read().unwrap(), want, "{name}");
        // New buffers and a new scalar for node 0.
        let (x2, y2) = (Buffer::from_slice(&iota(5)), Buffer::from_slice(&iota(6)));
        exec.update_node(n0, args(&x2, &y2, 3)).unwrap();
        assert_eq!(exec.device_recordings(), 1, "{name}");
        q.submit_graph(&exec).wait().unwrap();
        let want2: Vec<u32> = iota(5).iter().zip(iota(6)).map(|(a, b)| 3 * a + b).collect();
        assert_eq!(y2.read().unwrap(), want2, "{name}");
        assert_eq!(y.read().unwrap(), want, "{name}: the old buffer is left alone");
    }
}

/// A launch the device refuses (here a work-group larger than any device allows) fails when
/// the partition is recorded, at finalize, naming its node among the chain's.
#[test]
fn a_launch_the_device_refuses_fails_at_finalize_naming_its_node() {
    for d in devices() {
        let c = ctx(d);
        let ki = kernel(&c, "inc");
        let x = Buffer::<u32>::zeroed(1 << 16);
        let g = Graph::new(&c, GraphProperties::default());
        let rw = || vec![Arg::from(x.access(AccessMode::ReadWrite))];
        let a = g.add(Node::kernel(&ki, NdRange::new(&[64]), rw()).named("fine"), &[]).unwrap();
        let big = NdRange::new(&[1 << 16]).with_local(&[1 << 16]);
        g.add(Node::kernel(&ki, big, rw()).named("huge"), &[a]).unwrap();
        let e = g.finalize().unwrap_err().to_string();
        assert!(e.starts_with("node 1 `huge`: "), "{}: {e}", c.device().name());
    }
}

/// A graph whose one device partition mixes launches, copies (into longer destinations,
/// whose tails stay) and fills of every element size (1-byte fills of lengths that are not
/// whole words, an 8-byte value whose halves differ) on `dev`: the contents after each of
/// three replays (the host writing between them) and the number of recordings.
fn copies_and_fills_in_a_partition(dev: Arc<dyn Device>) -> (Vec<Vec<u8>>, usize) {
    use kiln_ir::launch::Element;
    use kiln_runtime::AnyBuffer;
    let c = ctx(dev);
    let q = Queue::new(&c, QueueOrder::InOrder);
    let (ki, ka) = (kernel(&c, "inc"), kernel(&c, "axpy"));
    let (x, y) = (Buffer::from_slice(&iota(1)), Buffer::from_slice(&iota(2)));
    // Twice as long as x: a copy of x covers its first half only.
    let long = Buffer::from_slice(&(0..2 * N as u32).map(|i| 1000 + i).collect::<Vec<_>>());
    let b8 = Buffer::<u8>::from_slice(&[1, 2, 3, 4, 5, 6, 7]);
    let b8b = Buffer::<u8>::zeroed(9);
    let b16 = Buffer::<u16>::zeroed(5);
    let f32s = Buffer::<f32>::zeroed(6);
    let u64s = Buffer::<u64>::zeroed(3);
    let u64b = Buffer::<u64>::from_slice(&[1, 2, 3, 4, 5]);
    let i64s = Buffer::<i64>::zeroed(4);
    let bools = Buffer::<bool>::zeroed(3);
    let fill = |b: AnyBuffer, v: kiln_ir::Imm| q.submit(|h| h.fill(&b, v));
    let copy = |s: AnyBuffer, d: AnyBuffer| q.submit(|h| h.copy(&s, &d));
    let g = Graph::new(&c, GraphProperties::default());
    q.begin_recording(&g).unwrap();
    inc(&q, &ki, &x);
    copy((&x).into(), (&long).into()); // reads a launch's write, tail of `long` kept
    inc(&q, &ki, &x); // writes what the copy read
    fill((&y).into(), 5u32.to_imm());
    axpy(&q, &ka, &x, &y, 3); // reads the fill
    copy((&y).into(), (&x).into());
    copy((&x).into(), (&x).into()); // onto itself: nothing
    fill((&b8).into(), 0xabu8.to_imm());
    copy((&b8).into(), (&b8b).into());
    fill((&b16).into(), 0x1234u16.to_imm());
    fill((&f32s).into(), 1.5f32.to_imm());
    fill((&u64s).into(), 0x1122_3344_5566_7788u64.to_imm()); // halves differ
    copy((&u64s).into(), (&u64b).into());
    fill((&i64s).into(), (-1i64).to_imm()); // halves equal
    fill((&bools).into(), true.to_imm());
    inc(&q, &ki, &x);
    q.end_recording().unwrap();
    let exec = g.finalize().unwrap();
    let all: Vec<AnyBuffer> = vec![
        (&x).into(),
        (&y).into(),
        (&long).into(),
        (&b8).into(),
        (&b8b).into(),
        (&b16).into(),
        (&f32s).into(),
        (&u64s).into(),
        (&u64b).into(),
        (&i64s).into(),
        (&bools).into(),
    ];
    let mut seen = Vec::new();
    for run in 0..3u32 {
        q.submit_graph(&exec).wait().unwrap();
        for b in &all {
            seen.push(b.contents().unwrap().as_bytes().to_vec());
        }
        // Host writes between replays reach the next one.
        long.write(&[run; 3]).unwrap();
        b8b.write(&[9]).unwrap();
        u64b.write(&[7, 7, 7, 7, 7]).unwrap();
    }
    (seen, exec.device_recordings())
}

#[test]
fn copies_and_fills_are_recorded_with_the_launches_of_their_partition() {
    let (want, none) = copies_and_fills_in_a_partition(interp_device());
    assert_eq!(none, 0, "the interpreter records nothing");
    for d in devices() {
        let name = d.name();
        let (seen, recordings) = copies_and_fills_in_a_partition(d);
        assert_eq!(recordings, 1, "{name}: one command list for the whole partition");
        for (i, (s, w)) in seen.iter().zip(&want).enumerate() {
            assert_eq!(s, w, "{name}: buffer {} after run {}", i % 11, i / 11);
        }
        assert_eq!(seen.len(), want.len());
    }
}
