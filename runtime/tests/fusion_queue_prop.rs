//! Property test: random submission sequences on two queues (kernels, copies, fills, host
//! tasks, explicit event dependencies), with random fusion-mode boundaries (start, complete
//! with or without barriers, cancel) and random synchronization points (queue and event
//! waits, host reads), leave the buffers exactly as the same sequence without fusion mode,
//! on the interpreter. Kernels bind random ranged accessors, and pairs of kernels pass an
//! intermediate through a scratch buffer with random promotion properties (private, local
//! or none; `no_init`; on the buffer or the accessor; whole or ranged): the scratch buffer,
//! whose contents promotion leaves as they were, is the one buffer not compared. Guarded
//! pairs do the same the way GPU programs are written: `if i < n` (and `i >= k`, through a
//! `bool` let) over `n` rounded up to a random work-group size.

use kiln_ir::parse_module;
use kiln_runtime::QueueFusion;
use kiln_runtime::{
    interp_device, AccessMode, AccessProps, AnyBuffer, Arg, Buffer, Context, ContextConfig, Event,
    FusionProps, Handler, KernelHandle, NdRange, PromoteTo, Queue, QueueOrder,
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
kernel gadd(a: ptr<global, u32>, b: ptr<global, u32>, out: ptr<global, u32>, n: u32) {
  let i: u32 = global_id(0);
  if i < n { out[i] = a[i] + b[i]; }
}
kernel gmul(a: ptr<global, u32>, b: ptr<global, u32>, out: ptr<global, u32>, n: u32, k: u32) {
  let i: u32 = global_id(0);
  let ok: bool = i >= k && i < n;
  if ok { out[i] = a[i] * b[i] + 1u32; }
}
";

const N: usize = 16;
const BUFS: usize = 5;

/// Where a kernel's accessors start, and how many elements each covers (`N`: whole buffers,
/// no range).
#[derive(Clone, Copy, Debug)]
struct Ranges {
    len: usize,
    offsets: [usize; 3],
}

/// A promotion request: promote to private (`Some(false)`), local (`Some(true)`) or none,
/// `no_init`, and whether the buffer (else each accessor) carries it.
#[derive(Clone, Copy, Debug)]
struct Promo {
    to: Option<bool>,
    no_init: bool,
    on_buffer: bool,
}

#[derive(Clone, Debug)]
enum Cmd {
    Add(usize, usize, usize, Ranges),
    Mul(usize, usize, usize, Ranges),
    /// `add(a, a) -> scratch` then `mul(scratch, a) -> o`, one after another on one queue,
    /// the scratch accessors asking for `Promo`, over `Ranges` (the scratch range is
    /// `offsets[2]`).
    Through(usize, usize, Promo, Ranges),
    /// `gadd(a, a) -> scratch` then `gmul(scratch, a) -> o` under `i < n` (and `i >= k`),
    /// over `n` rounded up to the local size `ls`, the scratch accessors asking for `Promo`.
    Guarded {
        a: usize,
        o: usize,
        promo: Promo,
        n: u32,
        ls: u32,
        k: u32,
    },
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

fn ranges() -> impl Strategy<Value = Ranges> {
    prop_oneof![
        1 => Just(Ranges { len: N, offsets: [0; 3] }),
        2 => (prop_oneof![Just(4usize), Just(8)], [0usize..9, 0..9, 0..9]).prop_map(|(len, o)| {
            Ranges { len, offsets: o.map(|x| x.min(N - len)) }
        }),
    ]
}

fn promo() -> impl Strategy<Value = Promo> {
    (prop_oneof![Just(None), Just(Some(false)), Just(Some(true))], any::<bool>(), any::<bool>())
        .prop_map(|(to, no_init, on_buffer)| Promo { to, no_init, on_buffer })
}

/// A kernel whose output buffer is also an input reads and writes it at the same elements
/// only (anything else races between its work-items).
fn no_race(a: usize, c: usize, o: usize, r: &mut Ranges) {
    if a == o {
        r.offsets[0] = r.offsets[2];
    }
    if c == o {
        r.offsets[1] = r.offsets[2];
    }
}

fn cmd() -> impl Strategy<Value = Cmd> {
    let b = || 0..BUFS;
    let apart = |(a, o): &(usize, usize)| a != o;
    prop_oneof![
        3 => (b(), b(), b(), ranges()).prop_map(|(a, c, o, mut r)| { no_race(a, c, o, &mut r); Cmd::Add(a, c, o, r) }),
        3 => (b(), b(), b(), ranges()).prop_map(|(a, c, o, mut r)| { no_race(a, c, o, &mut r); Cmd::Mul(a, c, o, r) }),
        3 => (b(), b(), promo(), ranges()).prop_map(|(a, o, p, mut r)| { no_race(a, a, o, &mut r); Cmd::Through(a, o, p, r) }),
        3 => (b(), b(), promo(), 1u32..=N as u32, prop_oneof![Just(1u32), Just(4), Just(8), Just(16)], 0u32..4)
            .prop_map(|(a, o, promo, n, ls, k)| Cmd::Guarded { a, o, promo, n, ls, k }),
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
    gadd: KernelHandle,
    gmul: KernelHandle,
    add: KernelHandle,
    mul: KernelHandle,
    scale: KernelHandle,
    rotate_group: KernelHandle,
    rotate: KernelHandle,
}

/// An accessor of `b` as `r` says (ranged unless it covers the whole buffer).
fn access(
    h: &mut Handler,
    b: &Buffer<u32>,
    mode: AccessMode,
    r: &Ranges,
    i: usize,
    props: AccessProps,
) -> Arg {
    let a = if r.len == N {
        h.access_with(b, mode, props)
    } else {
        h.access_range(b, mode, r.offsets[i], r.len, props).unwrap()
    };
    a.into()
}

/// `kernel` over `r.len` items reading `a` and `c` and writing `o` through `r`'s ranges.
#[allow(clippy::too_many_arguments)]
fn launch(
    h: &mut Handler,
    kernel: &KernelHandle,
    b: &[&Buffer<u32>; 3],
    r: &Ranges,
    props: [AccessProps; 3],
    out_mode: AccessMode,
) {
    let args = vec![
        access(h, b[0], AccessMode::Read, r, 0, props[0]),
        access(h, b[1], AccessMode::Read, r, 1, props[1]),
        access(h, b[2], out_mode, r, 2, props[2]),
    ];
    h.parallel_for(kernel, NdRange::new(&[r.len as u32]), args);
}

fn submit(
    q: &Queue,
    k: &K,
    b: &[Buffer<u32>],
    scratch: &Buffer<u32>,
    cmd: &Cmd,
    dep: Option<&Event>,
) -> Event {
    let r = NdRange::new(&[N as u32]);
    let none = AccessProps::default();
    if let Cmd::Guarded { a, o, promo: p, n, ls, k: lo } = *cmd {
        let to = p.to.map(|l| if l { PromoteTo::Local } else { PromoteTo::Private });
        scratch.set_promote(if p.on_buffer { to } else { None });
        let acc = AccessProps { promote: if p.on_buffer { None } else { to }, no_init: p.no_init };
        let range = NdRange::new(&[n.div_ceil(ls) * ls]).with_local(&[ls]);
        q.submit(|h| {
            if let Some(d) = dep {
                h.depends_on(d);
            }
            let (x, y) = (h.read(&b[a]), h.read(&b[a]));
            let t = h.access_with(scratch, AccessMode::Write, acc);
            let args = vec![x.into(), y.into(), t.into(), Arg::scalar(n)];
            h.parallel_for(&k.gadd, range, args);
        });
        return q.submit(|h| {
            let (t, x) = (h.access_with(scratch, AccessMode::Read, acc), h.read(&b[a]));
            let out = h.write(&b[o]);
            let args = vec![t.into(), x.into(), out.into(), Arg::scalar(n), Arg::scalar(lo)];
            h.parallel_for(&k.gmul, range, args);
        });
    }
    if let Cmd::Through(a, o, p, ranges) = *cmd {
        let to = p.to.map(|l| if l { PromoteTo::Local } else { PromoteTo::Private });
        scratch.set_promote(if p.on_buffer { to } else { None });
        let acc = |no_init| AccessProps {
            promote: if p.on_buffer { None } else { to },
            no_init: no_init && p.no_init,
        };
        // The scratch range is the output's (offsets[2]) in both kernels.
        let r2 = Ranges {
            len: ranges.len,
            offsets: [ranges.offsets[2], ranges.offsets[0], ranges.offsets[2]],
        };
        q.submit(|h| {
            if let Some(d) = dep {
                h.depends_on(d);
            }
            // Written only (or no_init): a promoted scratch starts empty.
            let mode = if p.no_init { AccessMode::ReadWrite } else { AccessMode::Write };
            launch(h, &k.add, &[&b[a], &b[a], scratch], &ranges, [none, none, acc(true)], mode);
        });
        return q.submit(|h| {
            launch(
                h,
                &k.mul,
                &[scratch, &b[a], &b[o]],
                &r2,
                [acc(false), none, none],
                AccessMode::Write,
            );
        });
    }
    q.submit(|h| {
        if let Some(d) = dep {
            h.depends_on(d);
        }
        match *cmd {
            Cmd::Add(a, c, o, ref ranges) | Cmd::Mul(a, c, o, ref ranges) => {
                let kernel = if matches!(cmd, Cmd::Add(..)) { &k.add } else { &k.mul };
                launch(h, kernel, &[&b[a], &b[c], &b[o]], ranges, [none; 3], AccessMode::Write);
            }
            Cmd::Through(..) | Cmd::Guarded { .. } => unreachable!("submitted above"),
            Cmd::Scale(x, s) => {
                let x = h.read_write(&b[x]);
                h.parallel_for(&k.scale, r, vec![x.into(), Arg::scalar(s)]);
            }
            Cmd::RotateGroup(a, o) | Cmd::Rotate(a, o) => {
                let (kernel, range) = match cmd {
                    Cmd::Rotate(..) => (&k.rotate, r),
                    _ => (&k.rotate_group, r.with_local(&[4])),
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
    let scratch = Buffer::from_slice(&[0u32; N]);
    let mut events: Vec<Event> = Vec::new();
    for op in ops {
        match op {
            Op::Submit { q, cmd, dep } => {
                let dep = dep.and_then(|j| events.get(j).cloned());
                events.push(submit(&qs[*q], k, &b, &scratch, cmd, dep.as_ref()));
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
        let k = K { gadd: g("gadd"), gmul: g("gmul"), add: g("add"), mul: g("mul"), scale: g("scale"), rotate_group: g("rotate_group"), rotate: g("rotate") };
        let order = |i: bool| if i { QueueOrder::InOrder } else { QueueOrder::OutOfOrder };
        let orders = [order(in_order[0]), order(in_order[1])];
        let want = run(&ctx, &k, &init, &ops, orders, false);
        let got = run(&ctx, &k, &init, &ops, orders, true);
        prop_assert_eq!(got, want);
    }
}
