//! Property test: random submission sequences on two queues (kernels, copies, fills, host
//! tasks, explicit event dependencies), with random fusion-mode boundaries (start, complete
//! with or without barriers, cancel) and random synchronization points (queue and event
//! waits, host reads), leave the buffers exactly as the same sequence without fusion mode,
//! on the interpreter.

use kiln_ir::parse_module;
use kiln_runtime::{
    interp_device, AnyBuffer, Buffer, Context, ContextConfig, Event, FusionProps, KernelArg,
    KernelHandle, NdRange, Queue, QueueOrder,
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
kernel rotate_group(a: ptr<global, u32>, out: ptr<global, u32>) {
  let l: u32 = local_id(0);
  let base: u32 = group_id(0) * local_size(0);
  out[base + l] = a[base + (local_size(0) - 1u32 - l)];
}
kernel rotate(a: ptr<global, u32>, out: ptr<global, u32>) {
  let i: u32 = global_id(0);
  out[i] = a[(i + 1u32) % 16u32];
}
";

const N: usize = 16;
const BUFS: usize = 5;

#[derive(Clone, Debug)]
enum Cmd {
    Add(usize, usize, usize),
    Mul(usize, usize, usize),
    Scale(usize, u32),
    RotateGroup(usize, usize),
    Rotate(usize, usize),
    Fill(usize, u32),
    Copy(usize, usize),
    Host(usize),
}

#[derive(Clone, Debug)]
enum Op {
    /// A command on queue `q`, depending on the event of an earlier submission if given.
    Submit {
        q: usize,
        cmd: Cmd,
        dep: Option<usize>,
    },
    Start(usize),
    Complete(usize, bool),
    Cancel(usize),
    WaitQueue(usize),
    WaitEvent(usize),
    Read(usize),
}

fn cmd() -> impl Strategy<Value = Cmd> {
    let b = || 0..BUFS;
    let apart = |(a, o): &(usize, usize)| a != o;
    prop_oneof![
        3 => (b(), b(), b()).prop_map(|(a, c, o)| Cmd::Add(a, c, o)),
        3 => (b(), b(), b()).prop_map(|(a, c, o)| Cmd::Mul(a, c, o)),
        2 => (b(), 0u32..5).prop_map(|(x, s)| Cmd::Scale(x, s)),
        1 => (b(), b()).prop_filter("rotating in place races", apart).prop_map(|(a, o)| Cmd::RotateGroup(a, o)),
        1 => (b(), b()).prop_filter("rotating in place races", apart).prop_map(|(a, o)| Cmd::Rotate(a, o)),
        1 => (b(), any::<u32>()).prop_map(|(o, v)| Cmd::Fill(o, v)),
        1 => (b(), b()).prop_map(|(a, o)| Cmd::Copy(a, o)),
        1 => b().prop_map(Cmd::Host),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let q = || 0usize..2;
    prop_oneof![
        14 => (q(), cmd(), proptest::option::weighted(0.15, 0usize..16))
            .prop_map(|(q, cmd, dep)| Op::Submit { q, cmd, dep }),
        5 => q().prop_map(Op::Start),
        3 => (q(), any::<bool>()).prop_map(|(q, nb)| Op::Complete(q, nb)),
        1 => q().prop_map(Op::Cancel),
        1 => q().prop_map(Op::WaitQueue),
        1 => (0usize..16).prop_map(Op::WaitEvent),
        1 => (0..BUFS).prop_map(Op::Read),
    ]
}

struct K {
    add: KernelHandle,
    mul: KernelHandle,
    scale: KernelHandle,
    rotate_group: KernelHandle,
    rotate: KernelHandle,
}

fn submit(q: &Queue, k: &K, b: &[Buffer<u32>], cmd: &Cmd, dep: Option<&Event>) -> Event {
    let r = NdRange::new(&[N as u32]);
    q.submit(|h| {
        if let Some(d) = dep {
            h.depends_on(d);
        }
        match *cmd {
            Cmd::Add(a, c, o) | Cmd::Mul(a, c, o) => {
                let kernel = if matches!(cmd, Cmd::Add(..)) { &k.add } else { &k.mul };
                let (a, c, o) = (h.read(&b[a]), h.read(&b[c]), h.write(&b[o]));
                h.parallel_for(kernel, r.clone(), vec![a.into(), c.into(), o.into()]);
            }
            Cmd::Scale(x, s) => {
                let x = h.read_write(&b[x]);
                h.parallel_for(&k.scale, r.clone(), vec![x.into(), KernelArg::scalar(s)]);
            }
            Cmd::RotateGroup(a, o) | Cmd::Rotate(a, o) => {
                let (kernel, range) = match cmd {
                    Cmd::Rotate(..) => (&k.rotate, r.clone()),
                    _ => (&k.rotate_group, r.clone().with_local(&[4])),
                };
                let (a, o) = (h.read(&b[a]), h.write(&b[o]));
                h.parallel_for(kernel, range, vec![a.into(), o.into()]);
            }
            Cmd::Fill(o, v) => h.fill(&AnyBuffer::from(&b[o]), kiln_ir::launch::Element::to_imm(v)),
            Cmd::Copy(a, o) => h.copy(&AnyBuffer::from(&b[a]), &AnyBuffer::from(&b[o])),
            Cmd::Host(x) => {
                let acc = h.read_write(&b[x]);
                h.host_task(move |c| {
                    let v: Vec<u32> =
                        c.read::<u32>(&acc).unwrap().iter().map(|x| x.wrapping_add(7)).collect();
                    c.write(&acc, &v)
                });
            }
        }
    })
}

/// Runs `ops` on fresh buffers; fusion operations only when `fusion`.
fn run(
    ctx: &Context,
    k: &K,
    init: &[Vec<u32>],
    ops: &[Op],
    orders: [QueueOrder; 2],
    fusion: bool,
) -> Vec<Vec<u32>> {
    let qs = [Queue::new(ctx, orders[0]), Queue::new(ctx, orders[1])];
    let b: Vec<Buffer<u32>> = init.iter().map(|v| Buffer::from_slice(v)).collect();
    let mut events: Vec<Event> = Vec::new();
    for op in ops {
        match op {
            Op::Submit { q, cmd, dep } => {
                let dep = dep.and_then(|j| events.get(j).cloned());
                events.push(submit(&qs[*q], k, &b, cmd, dep.as_ref()));
            }
            Op::Start(q) if fusion && !qs[*q].is_in_fusion_mode() => qs[*q].start_fusion().unwrap(),
            Op::Complete(q, no_barriers) if fusion => {
                qs[*q].complete_fusion(FusionProps { no_barriers: *no_barriers });
            }
            Op::Cancel(q) if fusion => {
                qs[*q].cancel_fusion();
            }
            Op::WaitQueue(q) => qs[*q].wait().unwrap(),
            Op::WaitEvent(i) => {
                if let Some(e) = events.get(*i) {
                    e.wait().unwrap();
                }
            }
            Op::Read(i) => drop(b[*i].read().unwrap()),
            _ => {}
        }
    }
    for q in &qs {
        if q.is_in_fusion_mode() {
            q.complete_fusion(FusionProps::default());
        }
        q.wait().unwrap();
    }
    b.iter().map(|b| b.read().unwrap()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn fusion_mode_leaves_the_buffers_as_plain_submission(
        init in proptest::collection::vec(proptest::collection::vec(any::<u32>(), N), BUFS),
        ops in proptest::collection::vec(op(), 4..32),
        in_order in any::<[bool; 2]>(),
    ) {
        let ctx = Context::with_config(interp_device(), ContextConfig { workers: 2, ..Default::default() });
        let m = parse_module(KERNELS).unwrap();
        let g = |n: &str| ctx.get_kernel(&m, n).unwrap();
        let k = K { add: g("add"), mul: g("mul"), scale: g("scale"), rotate_group: g("rotate_group"), rotate: g("rotate") };
        let order = |i: bool| if i { QueueOrder::InOrder } else { QueueOrder::OutOfOrder };
        let orders = [order(in_order[0]), order(in_order[1])];
        let want = run(&ctx, &k, &init, &ops, orders, false);
        let got = run(&ctx, &k, &init, &ops, orders, true);
        prop_assert_eq!(got, want);
    }
}
