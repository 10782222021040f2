//! Fusion-aware queues: the original's end-to-end scenarios (KernelFusionJIT.md's scheduler
//! integration and the DPC++ kernel-fusion tests), each run twice on fresh buffers, in
//! fusion mode and without it, and the buffers compared; on the interpreter, the cpu device,
//! Vulkan (lavapipe here) and CUDA (skipped without a driver, required with
//! `KILN_REQUIRE_CUDA`).

use kiln_runtime::{QueueFusion, QueueGraph};
use std::sync::Arc;

use kiln_ir::parse_module;
use kiln_runtime::device::cpu::CpuDevice;
use kiln_runtime::device::cuda::CudaDevice;
use kiln_runtime::device::registry::OpenOptions;
use kiln_runtime::device::vulkan::VulkanDevice;
use kiln_runtime::{
    interp_device, AccessMode, AccessProps, AnyBuffer, Arg, Buffer, Context, ContextConfig, Device,
    Event, FusionProps, FusionStatus, KernelHandle, NdRange, PromoteTo, Queue, QueueOrder,
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
kernel reverse_group(a: ptr<global, u32>, out: ptr<global, u32>) {
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

struct K {
    add: KernelHandle,
    mul: KernelHandle,
    scale: KernelHandle,
    inc: KernelHandle,
    reverse_group: KernelHandle,
    rotate: KernelHandle,
}

struct Env {
    ctx: Context,
    k: K,
}

fn env(dev: Arc<dyn Device>) -> Env {
    let ctx = Context::with_config(
        dev,
        ContextConfig { workers: 2, warning_level: 1, ..Default::default() },
    );
    let m = parse_module(KERNELS).unwrap();
    let k = |n: &str| ctx.get_kernel(&m, n).unwrap();
    let k = K {
        add: k("add"),
        mul: k("mul"),
        scale: k("scale"),
        inc: k("inc"),
        reverse_group: k("reverse_group"),
        rotate: k("rotate"),
    };
    Env { ctx, k }
}

/// Each device found: the interpreter, the cpu device, Vulkan and CUDA.
fn envs() -> Vec<Env> {
    let mut v = vec![env(interp_device())];
    if cfg!(target_arch = "x86_64") {
        if let Some(d) = kiln_ir::testing::optional(
            "KILN_REQUIRE_TOOLS",
            CpuDevice::open(&OpenOptions::default()),
        ) {
            v.push(env(Arc::new(d)));
        }
    }
    if let Some(d) = kiln_ir::testing::optional("KILN_REQUIRE_TOOLS", VulkanDevice::open()) {
        v.push(env(Arc::new(d)));
    }
    if let Some(d) = kiln_ir::testing::optional("KILN_REQUIRE_CUDA", CudaDevice::open()) {
        v.push(env(Arc::new(d)));
    }
    v
}

fn bufs(n: usize) -> Vec<Buffer<u32>> {
    (0..n)
        .map(|b| {
            Buffer::from_slice(&(0..N as u32).map(|i| i * 3 + b as u32 + 1).collect::<Vec<_>>())
        })
        .collect()
}

fn contents(b: &[Buffer<u32>]) -> Vec<Vec<u32>> {
    b.iter().map(|b| b.read().unwrap()).collect()
}

fn r() -> NdRange {
    NdRange::new(&[N as u32])
}

fn launch3(
    q: &Queue,
    k: &KernelHandle,
    a: &Buffer<u32>,
    b: &Buffer<u32>,
    out: &Buffer<u32>,
) -> Event {
    launch3_at(q, k, r(), a, b, out)
}

fn launch3_at(
    q: &Queue,
    k: &KernelHandle,
    range: NdRange,
    a: &Buffer<u32>,
    b: &Buffer<u32>,
    out: &Buffer<u32>,
) -> Event {
    q.submit(|h| {
        let (a, b, o) = (h.read(a), h.read(b), h.write(out));
        h.parallel_for(k, range, vec![a.into(), b.into(), o.into()]);
    })
}

fn scale(q: &Queue, k: &K, x: &Buffer<u32>, s: u32) -> Event {
    q.submit(|h| {
        let x = h.read_write(x);
        h.parallel_for(&k.scale, r(), vec![x.into(), Arg::scalar(s)]);
    })
}

fn inc(q: &Queue, k: &K, x: &Buffer<u32>) -> Event {
    q.submit(|h| {
        let x = h.read_write(x);
        h.parallel_for(&k.inc, r(), vec![x.into()]);
    })
}

/// Runs `work` on fresh buffers twice: once with `fusion` false (the reference: the same
/// submissions, no fusion mode) and once with it true. Buffers listed in `skip` (promoted
/// ones, whose contents fusion leaves as they were) are not compared. Returns the fused
/// run's buffers.
fn fused_vs_plain(
    e: &Env,
    nbufs: usize,
    order: QueueOrder,
    skip: &[usize],
    work: impl Fn(&Queue, &[Buffer<u32>], bool),
) -> Vec<Vec<u32>> {
    let run = |fusion: bool| {
        let q = Queue::new(&e.ctx, order);
        let b = bufs(nbufs);
        work(&q, &b, fusion);
        q.wait().unwrap();
        assert!(!q.is_in_fusion_mode());
        contents(&b)
    };
    let (plain, fused) = (run(false), run(true));
    for (i, (p, f)) in plain.iter().zip(&fused).enumerate() {
        if !skip.contains(&i) {
            assert_eq!(f, p, "buffer {i} on {}", e.ctx.device().name());
        }
    }
    fused
}

fn start(q: &Queue, fusion: bool) {
    if fusion {
        q.start_fusion().unwrap();
    }
}

fn complete(q: &Queue, fusion: bool, props: FusionProps) -> Option<Event> {
    fusion.then(|| q.complete_fusion(props))
}

fn completed(q: &Queue) -> (usize, bool, Vec<String>) {
    match q.fusion_status() {
        Some(FusionStatus::Completed { kernels, cache_hit, warnings }) => {
            (kernels, cache_hit, warnings)
        }
        s => panic!("not completed: {s:?}"),
    }
}

fn aborted(q: &Queue) -> String {
    match q.fusion_status() {
        Some(FusionStatus::Aborted { reason }) => reason,
        s => panic!("not aborted early: {s:?}"),
    }
}

#[test]
fn complete_fuses_a_chain_like_unfused_runs() {
    for e in envs() {
        for order in [QueueOrder::InOrder, QueueOrder::OutOfOrder] {
            fused_vs_plain(&e, 5, order, &[], |q, b, fusion| {
                start(q, fusion);
                launch3(q, &e.k.add, &b[0], &b[1], &b[2]);
                launch3(q, &e.k.mul, &b[2], &b[1], &b[3]);
                scale(q, &e.k, &b[3], 7);
                inc(q, &e.k, &b[3]);
                if let Some(ev) = complete(q, fusion, FusionProps::default()) {
                    ev.wait().unwrap();
                    assert_eq!(completed(q).0, 4);
                }
            });
        }
    }
}

#[test]
fn cancel_runs_the_kernels_unfused() {
    for e in envs() {
        fused_vs_plain(&e, 4, QueueOrder::InOrder, &[], |q, b, fusion| {
            start(q, fusion);
            launch3(q, &e.k.add, &b[0], &b[1], &b[2]);
            let ev = scale(q, &e.k, &b[2], 3);
            if fusion {
                assert!(q.is_in_fusion_mode());
                let c = q.cancel_fusion();
                assert!(c.same_event(&ev), "submissions return the fusion's event");
                assert_eq!(q.fusion_status(), Some(FusionStatus::Cancelled));
                assert!(!q.is_in_fusion_mode());
                // Valid after cancel; complete now only warns and returns it.
                ev.wait().unwrap();
                assert!(q.complete_fusion(FusionProps::default()).same_event(&ev));
            }
        });
    }
}

#[test]
fn internalization_private_keeps_intermediates_out_of_global_memory() {
    for e in envs() {
        let before = bufs(4)[2].read().unwrap();
        let fused = fused_vs_plain(&e, 4, QueueOrder::InOrder, &[2], |q, b, fusion| {
            start(q, fusion);
            q.submit(|h| {
                let props = AccessProps { promote: Some(PromoteTo::Private), no_init: false };
                let (x, y) = (h.read(&b[0]), h.read(&b[1]));
                let t = h.access_with(&b[2], AccessMode::Write, props);
                h.parallel_for(&e.k.add, r(), vec![x.into(), y.into(), t.into()]);
            });
            q.submit(|h| {
                let props = AccessProps { promote: Some(PromoteTo::Private), no_init: false };
                let t = h.access_with(&b[2], AccessMode::Read, props);
                let (y, o) = (h.read(&b[1]), h.write(&b[3]));
                h.parallel_for(&e.k.mul, r(), vec![t.into(), y.into(), o.into()]);
            });
            if let Some(ev) = complete(q, fusion, FusionProps::default()) {
                ev.wait().unwrap();
                let (n, _, warnings) = completed(q);
                assert_eq!((n, warnings), (2, vec![]));
            }
        });
        // The fused kernel neither read nor wrote the promoted buffer.
        assert_eq!(fused[2], before, "{}", e.ctx.device().name());
    }
}

#[test]
fn internalization_from_the_buffer_property_and_local() {
    for e in envs() {
        let local = NdRange::new(&[N as u32]).with_local(&[4]);
        let before = bufs(4)[2].read().unwrap();
        let fused = fused_vs_plain(&e, 4, QueueOrder::InOrder, &[2], |q, b, fusion| {
            b[2].set_promote(Some(PromoteTo::Local));
            start(q, fusion);
            q.submit(|h| {
                let (x, y) = (h.read(&b[0]), h.read(&b[1]));
                let t = h.access_with(
                    &b[2],
                    AccessMode::ReadWrite,
                    AccessProps { promote: None, no_init: true },
                );
                h.parallel_for(&e.k.add, local, vec![x.into(), y.into(), t.into()]);
            });
            q.submit(|h| {
                let (t, o) = (h.read(&b[2]), h.write(&b[3]));
                h.parallel_for(&e.k.reverse_group, local, vec![t.into(), o.into()]);
            });
            if let Some(ev) = complete(q, fusion, FusionProps::default()) {
                ev.wait().unwrap();
                assert_eq!(completed(q).2, Vec::<String>::new());
            }
        });
        assert_eq!(fused[2], before, "{}", e.ctx.device().name());
    }
}

#[test]
fn promotion_conflicts_and_reads_of_old_contents_are_refused_with_warnings() {
    let e = env(interp_device());
    // The accessor asks private, the buffer local: a conflict; the second kernel's accessor
    // on another buffer reads what the first left there: not promoted.
    fused_vs_plain(&e, 5, QueueOrder::InOrder, &[], |q, b, fusion| {
        b[2].set_promote(Some(PromoteTo::Local));
        start(q, fusion);
        q.submit(|h| {
            let props = AccessProps { promote: Some(PromoteTo::Private), no_init: true };
            let (x, y) = (h.read(&b[0]), h.read(&b[1]));
            let t = h.access_with(&b[2], AccessMode::Write, props);
            h.parallel_for(&e.k.add, r(), vec![x.into(), y.into(), t.into()]);
        });
        q.submit(|h| {
            let props = AccessProps { promote: Some(PromoteTo::Private), no_init: false };
            let x = h.access_with(&b[3], AccessMode::ReadWrite, props);
            h.parallel_for(&e.k.inc, r(), vec![x.into()]);
        });
        q.submit(|h| {
            let props = AccessProps { promote: Some(PromoteTo::Private), no_init: false };
            let y = h.access_with(&b[3], AccessMode::Read, props);
            let (x, o) = (h.read(&b[2]), h.write(&b[4]));
            h.parallel_for(&e.k.mul, r(), vec![x.into(), y.into(), o.into()]);
        });
        if let Some(ev) = complete(q, fusion, FusionProps::default()) {
            ev.wait().unwrap();
            let w = completed(q).2;
            assert_eq!(w.len(), 2, "{w:?}");
            assert!(w[0].contains("asks `private` but the buffer `local`"), "{w:?}");
            assert!(w[1].contains("reads its contents"), "{w:?}");
        }
    });
}

#[test]
fn barriers_keep_work_group_exchanges_and_no_barriers_refuses_them() {
    for e in envs() {
        let local = NdRange::new(&[N as u32]).with_local(&[4]);
        for no_barriers in [false, true] {
            fused_vs_plain(&e, 4, QueueOrder::InOrder, &[], |q, b, fusion| {
                start(q, fusion);
                launch3_at(q, &e.k.add, local, &b[0], &b[1], &b[2]);
                q.submit(|h| {
                    let (t, o) = (h.read(&b[2]), h.write(&b[3]));
                    h.parallel_for(&e.k.reverse_group, local, vec![t.into(), o.into()]);
                });
                if let Some(ev) = complete(q, fusion, FusionProps { no_barriers }) {
                    ev.wait().unwrap();
                    match q.fusion_status().unwrap() {
                        FusionStatus::Completed { .. } => assert!(!no_barriers),
                        FusionStatus::Failed { reason } => {
                            assert!(no_barriers);
                            assert!(reason.contains("fusing would change the result"), "{reason}");
                        }
                        s => panic!("{s:?}"),
                    }
                }
            });
        }
        // Per-item kernels fuse without barriers.
        fused_vs_plain(&e, 3, QueueOrder::InOrder, &[], |q, b, fusion| {
            start(q, fusion);
            launch3(q, &e.k.add, &b[0], &b[1], &b[2]);
            inc(q, &e.k, &b[2]);
            if let Some(ev) = complete(q, fusion, FusionProps { no_barriers: true }) {
                ev.wait().unwrap();
                completed(q);
            }
        });
    }
}

#[test]
fn a_global_exchange_is_not_fused() {
    let e = env(interp_device());
    fused_vs_plain(&e, 3, QueueOrder::InOrder, &[], |q, b, fusion| {
        start(q, fusion);
        launch3(q, &e.k.add, &b[0], &b[1], &b[2]);
        q.submit(|h| {
            let (t, o) = (h.read(&b[2]), h.write(&b[0]));
            h.parallel_for(&e.k.rotate, r(), vec![t.into(), o.into()]);
        });
        if let Some(ev) = complete(q, fusion, FusionProps::default()) {
            ev.wait().unwrap();
            assert!(matches!(q.fusion_status(), Some(FusionStatus::Failed { .. })));
        }
    });
}

#[test]
fn diamond_fuses_like_unfused() {
    for e in envs() {
        fused_vs_plain(&e, 5, QueueOrder::OutOfOrder, &[], |q, b, fusion| {
            start(q, fusion);
            scale(q, &e.k, &b[0], 3);
            launch3(q, &e.k.add, &b[0], &b[1], &b[2]);
            launch3(q, &e.k.mul, &b[0], &b[1], &b[3]);
            launch3(q, &e.k.add, &b[2], &b[3], &b[4]);
            if let Some(ev) = complete(q, fusion, FusionProps::default()) {
                ev.wait().unwrap();
                assert_eq!(completed(q).0, 4);
            }
        });
    }
}

#[test]
fn different_nd_ranges_fuse_with_guards() {
    for e in envs() {
        fused_vs_plain(&e, 5, QueueOrder::InOrder, &[], |q, b, fusion| {
            start(q, fusion);
            launch3(q, &e.k.add, &b[0], &b[1], &b[2]);
            launch3_at(q, &e.k.mul, NdRange::new(&[8]), &b[0], &b[1], &b[3]);
            launch3_at(q, &e.k.add, NdRange::new(&[4, 2]), &b[1], &b[0], &b[4]);
            if let Some(ev) = complete(q, fusion, FusionProps::default()) {
                ev.wait().unwrap();
                assert_eq!(completed(q).0, 3);
            }
        });
    }
}

#[test]
fn jit_cache_hits_and_misses_as_the_seed_says() {
    let e = env(interp_device());
    let q = Queue::new(&e.ctx, QueueOrder::InOrder);
    let b = bufs(6);
    // (range of the second kernel, scalar, output of the second kernel, promote, no_barriers)
    let run = |n: u32, s: u32, out: usize, promote: bool, no_barriers: bool| {
        q.start_fusion().unwrap();
        q.submit(|h| {
            let props =
                AccessProps { promote: promote.then_some(PromoteTo::Private), no_init: true };
            let (x, y) = (h.read(&b[0]), h.read(&b[1]));
            let t = h.access_with(&b[2], AccessMode::Write, props);
            h.parallel_for(&e.k.add, r(), vec![x.into(), y.into(), t.into()]);
        });
        q.submit(|h| {
            let props =
                AccessProps { promote: promote.then_some(PromoteTo::Private), no_init: false };
            let t = h.access_with(&b[2], AccessMode::Read, props);
            let (y, o) = (h.read(&b[1]), h.write(&b[out]));
            h.parallel_for(&e.k.mul, NdRange::new(&[n]), vec![t.into(), y.into(), o.into()]);
        });
        q.submit(|h| {
            let x = h.read_write(&b[out]);
            h.parallel_for(&e.k.scale, NdRange::new(&[n]), vec![x.into(), Arg::scalar(s)]);
        });
        q.complete_fusion(FusionProps { no_barriers }).wait().unwrap();
        completed(&q).1
    };
    assert!(!run(16, 2, 3, false, false), "first: a miss");
    assert!(run(16, 2, 3, false, false), "the same sequence: a hit");
    assert!(run(16, 2, 4, false, false), "another buffer, same identities: a hit");
    assert!(!run(16, 3, 3, false, false), "another scalar (a constant): a miss");
    assert!(!run(8, 2, 3, false, false), "another nd-range: a miss");
    assert!(!run(16, 2, 1, false, false), "other identical arguments: a miss");
    assert!(!run(16, 2, 3, true, false), "a promotion: a miss");
    assert!(!run(16, 2, 3, false, true), "no_barriers: a miss");
    assert!(run(16, 2, 3, true, false), "the promoted sequence again: a hit");
    let st = e.ctx.fusion_cache_stats();
    assert_eq!((st.builds, st.hits), (6, 3));
}

/// One abort cause: `cause` runs while `q` holds `add(b0, b1 -> b2)`; the fusion must end
/// early with a reason containing `phrase`, and give the same buffers as without fusion.
fn abort_case(
    e: &Env,
    order: QueueOrder,
    phrase: &str,
    cause: impl Fn(&Queue, &[Buffer<u32>], &Event),
) {
    fused_vs_plain(e, 4, order, &[], |q, b, fusion| {
        start(q, fusion);
        let ev = launch3(q, &e.k.add, &b[0], &b[1], &b[2]);
        cause(q, b, &ev);
        if fusion {
            let reason = aborted(q);
            assert!(reason.contains(phrase), "{reason:?} should say {phrase:?}");
            assert!(!q.is_in_fusion_mode());
            // complete after an early end: the fusion's event, still valid.
            let c = q.complete_fusion(FusionProps::default());
            assert!(c.same_event(&ev));
            c.wait().unwrap();
            assert_eq!(aborted(q), reason);
        }
    });
}

#[test]
fn each_abort_cause_cancels_early_with_its_reason() {
    for e in envs() {
        abort_case(&e, QueueOrder::OutOfOrder, "host read of buffer", |_, b, _| {
            b[2].read().unwrap();
        });
        abort_case(&e, QueueOrder::OutOfOrder, "host write of buffer", |_, b, _| {
            b[0].write(&[5, 6]).unwrap();
        });
        abort_case(&e, QueueOrder::OutOfOrder, "a wait on queue", |q, _, _| q.wait().unwrap());
        abort_case(&e, QueueOrder::OutOfOrder, "a wait on the event of fusion", |_, _, ev| {
            ev.wait().unwrap()
        });
        abort_case(&e, QueueOrder::OutOfOrder, "host task", |q, b, _| {
            let t = b[2].clone();
            let s = b[3].clone();
            q.submit(|h| {
                let (x, o) = (h.read(&t), h.write(&s));
                h.host_task(move |c| {
                    let v: Vec<u32> = c.read::<u32>(&x).unwrap().iter().map(|v| v * 2).collect();
                    c.write(&o, &v)
                });
            });
        });
        abort_case(&e, QueueOrder::OutOfOrder, "copy", |q, b, _| {
            q.submit(|h| h.copy(&AnyBuffer::from(&b[2]), &AnyBuffer::from(&b[3])));
        });
        abort_case(&e, QueueOrder::OutOfOrder, "fill", |q, b, _| {
            q.submit(|h| h.fill(&AnyBuffer::from(&b[1]), kiln_ir::launch::Element::to_imm(9u32)));
        });
        abort_case(&e, QueueOrder::InOrder, "same queue", |q, _, _| {
            // A barrier on an in-order queue follows the held kernel.
            q.submit(|_| {});
        });
        abort_case(
            &e,
            QueueOrder::OutOfOrder,
            "depends on a kernel in the fusion list",
            |q, b, _| {
                let q2 = Queue::new(q.context(), QueueOrder::InOrder);
                inc(&q2, &e.k, &b[2]);
                q2.wait().unwrap();
            },
        );
        abort_case(&e, QueueOrder::OutOfOrder, "a dependency between two fusions", |q, b, ev| {
            // A kernel held in another queue's fusion list depending on this fusion's event.
            let q2 = Queue::new(q.context(), QueueOrder::InOrder);
            q2.start_fusion().unwrap();
            q2.submit(|h| {
                h.depends_on(ev);
                let x = h.read_write(&b[3]);
                h.parallel_for(&e.k.inc, r(), vec![x.into()]);
            });
            q2.complete_fusion(FusionProps::default()).wait().unwrap();
            assert!(matches!(q2.fusion_status(), Some(FusionStatus::Completed { .. })));
        });
    }
}

#[test]
fn two_queues_in_fusion_mode_depending_on_each_other_both_cancel() {
    for e in envs() {
        let q1_fused = std::cell::RefCell::new(None);
        let plain_and_fused = |fusion: bool| {
            let q1 = Queue::new(&e.ctx, QueueOrder::OutOfOrder);
            let q2 = Queue::new(&e.ctx, QueueOrder::OutOfOrder);
            let b = bufs(5);
            start(&q1, fusion);
            start(&q2, fusion);
            launch3(&q1, &e.k.add, &b[0], &b[1], &b[2]); // q1 writes b2
            launch3(&q2, &e.k.mul, &b[2], &b[1], &b[3]); // q2 reads it: q1 ends early
            launch3(&q1, &e.k.add, &b[3], &b[0], &b[4]); // q1 reads q2's b3: q2 ends early
            if fusion {
                assert!(aborted(&q1).contains("two fusions"), "{}", aborted(&q1));
                assert!(aborted(&q2).contains("depends on a kernel in the fusion list"));
                *q1_fused.borrow_mut() = Some(());
                q1.complete_fusion(FusionProps::default()).wait().unwrap();
                q2.complete_fusion(FusionProps::default()).wait().unwrap();
            }
            q1.wait().unwrap();
            q2.wait().unwrap();
            contents(&b)
        };
        assert_eq!(plain_and_fused(true), plain_and_fused(false));
        assert!(q1_fused.borrow().is_some());
    }
}

#[test]
fn sync_after_complete_by_event_queue_and_host_access() {
    for e in envs() {
        for sync in 0..3 {
            fused_vs_plain(&e, 4, QueueOrder::OutOfOrder, &[], |q, b, fusion| {
                start(q, fusion);
                let ev = launch3(q, &e.k.add, &b[0], &b[1], &b[2]);
                launch3(q, &e.k.mul, &b[2], &b[1], &b[3]);
                let done = complete(q, fusion, FusionProps::default());
                match sync {
                    0 => done.unwrap_or(ev).wait().unwrap(),
                    1 => q.wait().unwrap(),
                    _ => drop(b[3].read().unwrap()),
                }
                if fusion {
                    completed(q);
                }
            });
        }
    }
}

#[test]
fn non_kernel_commands_run_unfused_and_independent_queues_go_on() {
    for e in envs() {
        fused_vs_plain(&e, 6, QueueOrder::OutOfOrder, &[], |q, b, fusion| {
            let q2 = Queue::new(q.context(), QueueOrder::InOrder);
            start(q, fusion);
            launch3(q, &e.k.add, &b[0], &b[1], &b[2]);
            // Independent of the held kernel: run now, unfused, on this and another queue.
            q.submit(|h| h.fill(&AnyBuffer::from(&b[4]), kiln_ir::launch::Element::to_imm(4u32)));
            let (x, o) = (b[4].clone(), b[5].clone());
            let ht = q.submit(|h| {
                let (x, o) = (h.read(&x), h.write(&o));
                h.host_task(move |c| c.write(&o, &c.read::<u32>(&x).unwrap()));
            });
            ht.wait().unwrap();
            inc(&q2, &e.k, &b[3]).wait().unwrap();
            launch3(q, &e.k.mul, &b[2], &b[1], &b[3]);
            if let Some(ev) = complete(q, fusion, FusionProps::default()) {
                ev.wait().unwrap();
                assert_eq!(completed(q).0, 2);
            }
        });
    }
}

#[test]
fn jit_failure_falls_back_to_cancel_and_events_stay_valid() {
    let e = env(interp_device());
    fused_vs_plain(&e, 4, QueueOrder::InOrder, &[], |q, b, fusion| {
        start(q, fusion);
        launch3_at(q, &e.k.add, NdRange::new(&[16]).with_local(&[4]), &b[0], &b[1], &b[2]);
        let ev = launch3_at(q, &e.k.mul, NdRange::new(&[16]).with_local(&[8]), &b[0], &b[1], &b[3]);
        if let Some(c) = complete(q, fusion, FusionProps::default()) {
            assert!(c.same_event(&ev));
            c.wait().unwrap();
            match q.fusion_status() {
                Some(FusionStatus::Failed { reason }) => {
                    assert!(reason.contains("local sizes agree"), "{reason}")
                }
                s => panic!("{s:?}"),
            }
            // The event stays valid until the next start_fusion.
            ev.wait().unwrap();
            q.start_fusion().unwrap();
            assert_eq!(q.fusion_status(), Some(FusionStatus::Active));
            assert!(q.start_fusion().is_err(), "already in fusion mode");
            q.cancel_fusion().wait().unwrap();
        }
    });
}

#[test]
fn a_dropped_queue_in_fusion_mode_runs_its_kernels() {
    let e = env(interp_device());
    let b = bufs(3);
    {
        let q = Queue::new(&e.ctx, QueueOrder::InOrder);
        q.start_fusion().unwrap();
        launch3(&q, &e.k.add, &b[0], &b[1], &b[2]);
    }
    let want: Vec<u32> = (0..N as u32).map(|i| (i * 3 + 1) + (i * 3 + 2)).collect();
    assert_eq!(b[2].read().unwrap(), want);
}

#[test]
fn failed_kernels_in_a_fusion_report_at_the_fusion_event() {
    let e = env(interp_device());
    let q = Queue::new(&e.ctx, QueueOrder::InOrder);
    let small = Buffer::<u32>::zeroed(4);
    let b = bufs(2);
    q.start_fusion().unwrap();
    // Out of bounds on the interpreter: the fused kernel fails, and so does the fusion.
    launch3(&q, &e.k.add, &b[0], &b[1], &small);
    let err = q.complete_fusion(FusionProps::default()).wait().unwrap_err();
    assert!(err.to_string().contains("fused kernel") || err.to_string().contains("add"), "{err}");
}

#[test]
fn fusion_mode_and_graph_recording_exclude_each_other() {
    use kiln_runtime::graph::{Graph, GraphProperties};
    let e = env(interp_device());
    let q = Queue::new(&e.ctx, QueueOrder::InOrder);
    let g = Graph::new(&e.ctx, GraphProperties::default());
    q.start_fusion().unwrap();
    let err = q.begin_recording(&g).unwrap_err();
    assert!(err.to_string().contains("fusion mode"), "{err}");
    q.cancel_fusion();
    q.begin_recording(&g).unwrap();
    let err = q.start_fusion().unwrap_err();
    assert!(err.to_string().contains("recording into a command graph"), "{err}");
    q.end_recording().unwrap();
}

#[test]
fn the_warning_level_is_a_setting() {
    let c =
        kiln_runtime::Config::from_lookup(|n| (n == "KILN_RT_WARNING_LEVEL").then(|| "1".into()))
            .unwrap();
    assert_eq!((c.rt_warning_level, c.context_config().warning_level), (1, 1));
    let e = kiln_runtime::Config::from_lookup(|n| {
        (n == "KILN_RT_WARNING_LEVEL").then(|| "loud".into())
    })
    .unwrap_err();
    assert!(e.to_string().starts_with("KILN_RT_WARNING_LEVEL=\"loud\""), "{e}");
}

#[test]
fn dependencies_inside_the_list_are_internal_and_outside_ones_kept() {
    for e in envs() {
        fused_vs_plain(&e, 5, QueueOrder::OutOfOrder, &[], |q, b, fusion| {
            let q2 = Queue::new(q.context(), QueueOrder::OutOfOrder);
            // Outside the list, before it: the fused kernel waits for it.
            let outside = inc(&q2, &e.k, &b[4]);
            start(q, fusion);
            let first = launch3(q, &e.k.add, &b[0], &b[1], &b[2]);
            q.submit(|h| {
                // On the fusion's own event (internal) and on the outside command.
                h.depends_on(&first);
                h.depends_on(&outside);
                let (x, y, o) = (h.read(&b[2]), h.read(&b[4]), h.write(&b[3]));
                h.parallel_for(&e.k.mul, r(), vec![x.into(), y.into(), o.into()]);
            });
            if let Some(ev) = complete(q, fusion, FusionProps::default()) {
                ev.wait().unwrap();
                assert_eq!(completed(q).0, 2);
            }
        });
    }
}

/// `kernel` over `n` work-items with three ranged accessors `(buffer, offset)` of `n`
/// elements each: two read, the last written; accessors of buffer `promoted` ask for
/// promotion to private memory.
#[allow(clippy::too_many_arguments)]
fn launch3_ranged(
    q: &Queue,
    k: &KernelHandle,
    n: usize,
    b: &[Buffer<u32>],
    a: (usize, usize),
    x: (usize, usize),
    out: (usize, usize),
    promoted: Option<usize>,
) -> Event {
    let props = |i: usize| AccessProps {
        promote: (promoted == Some(i)).then_some(PromoteTo::Private),
        no_init: false,
    };
    q.submit(|h| {
        let a = h.access_range(&b[a.0], AccessMode::Read, a.1, n, props(a.0)).unwrap();
        let x = h.access_range(&b[x.0], AccessMode::Read, x.1, n, props(x.0)).unwrap();
        let o = h.access_range(&b[out.0], AccessMode::Write, out.1, n, props(out.0)).unwrap();
        h.parallel_for(k, NdRange::new(&[n as u32]), vec![a.into(), x.into(), o.into()]);
    })
}

/// The original's "ranged accessors" scenario: kernels over sub-ranges of their buffers,
/// one range written and read again through the same range (an identical argument, here
/// promoted to private memory, its copy sized by the range), another buffer read through
/// two disjoint ranges (two arguments); then a list writing one buffer through overlapping
/// ranges, which fusion cannot prove independent: cancelled, never fused wrongly.
#[test]
fn ranged_accessors_fuse_like_unfused() {
    for e in envs() {
        // b[5] is promoted: fusion leaves its contents as they were.
        let fused = fused_vs_plain(&e, 7, QueueOrder::InOrder, &[5], |q, b, fusion| {
            start(q, fusion);
            let p = Some(5);
            launch3_ranged(q, &e.k.add, 8, b, (0, 4), (1, 0), (2, 8), p);
            launch3_ranged(q, &e.k.add, 8, b, (3, 0), (3, 8), (5, 4), p);
            launch3_ranged(q, &e.k.mul, 8, b, (2, 8), (5, 4), (4, 2), p);
            launch3_ranged(q, &e.k.add, 8, b, (5, 4), (1, 8), (6, 8), p);
            if let Some(ev) = complete(q, fusion, FusionProps::default()) {
                ev.wait().unwrap();
                let (kernels, _, warnings) = completed(q);
                assert_eq!(kernels, 4, "{}", e.ctx.device().name());
                assert!(warnings.is_empty(), "{warnings:?}");
            }
        });
        // Its range lived in private memory: the buffer was never written.
        assert_eq!(fused[5], contents(&bufs(7))[5], "{}", e.ctx.device().name());
        fused_vs_plain(&e, 3, QueueOrder::InOrder, &[], |q, b, fusion| {
            start(q, fusion);
            launch3_ranged(q, &e.k.add, 8, b, (0, 0), (1, 0), (2, 0), None);
            launch3_ranged(q, &e.k.add, 8, b, (2, 4), (1, 8), (2, 8), None);
            if let Some(ev) = complete(q, fusion, FusionProps::default()) {
                ev.wait().unwrap();
                match q.fusion_status() {
                    Some(FusionStatus::Failed { reason }) => {
                        assert!(reason.contains("overlapping accessors"), "{reason}")
                    }
                    s => panic!("overlapping written ranges were fused: {s:?}"),
                }
            }
        });
    }
}

/// A second identical ranged sequence is a cache hit; the same kernels over other ranges are
/// a miss (the ranges are part of the fusion key).
#[test]
fn ranges_are_part_of_the_fusion_key() {
    let e = env(interp_device());
    let q = Queue::new(&e.ctx, QueueOrder::InOrder);
    let b = bufs(3);
    let mut hits = Vec::new();
    for off in [0, 0, 8] {
        q.start_fusion().unwrap();
        launch3_ranged(&q, &e.k.add, 8, &b, (0, off), (1, 0), (2, 0), None);
        launch3_ranged(&q, &e.k.mul, 8, &b, (2, 0), (1, 8), (0, 8), None);
        q.complete_fusion(FusionProps::default()).wait().unwrap();
        hits.push(completed(&q).1);
    }
    assert_eq!(hits, [false, true, false]);
}

/// The fusion cache keys constants by their bits: lists that differ only in a NaN's
/// payload, or in the sign of a zero, are different fused kernels, each fused (a miss, where
/// a hit's constant failed the binding check and the list ran unfused) and each writing its
/// own bits.
#[test]
fn constants_differing_only_in_bits_fuse_apart() {
    let m = parse_module(
        "kernel put(t: ptr<global, f32>, v: f32) { let i: u32 = global_id(0); t[i] = v; }
         kernel copy(t: ptr<global, f32>, out: ptr<global, f32>) {
           let i: u32 = global_id(0); out[i] = t[i]; }",
    )
    .unwrap();
    for e in envs() {
        let (put, copy) =
            (e.ctx.get_kernel(&m, "put").unwrap(), e.ctx.get_kernel(&m, "copy").unwrap());
        let q = Queue::new(&e.ctx, QueueOrder::InOrder);
        let (t, out) = (Buffer::<f32>::zeroed(N), Buffer::<f32>::zeroed(N));
        let before = e.ctx.fusion_cache_stats();
        // Two quiet NaNs with different payloads, 0.0 and -0.0, then the first NaN again.
        for (bits, hit) in [
            (0x7fc0_0001u32, false),
            (0x7fc0_0002, false),
            (0, false),
            (0x8000_0000, false),
            (0x7fc0_0001, true),
        ] {
            q.start_fusion().unwrap();
            q.submit(|h| {
                let t = h.write(&t);
                h.parallel_for(&put, r(), vec![t.into(), Arg::scalar(f32::from_bits(bits))]);
            });
            q.submit(|h| {
                let (t, o) = (h.read(&t), h.write(&out));
                h.parallel_for(&copy, r(), vec![t.into(), o.into()]);
            });
            q.complete_fusion(FusionProps::default()).wait().unwrap();
            let (kernels, cache_hit, _) = completed(&q);
            assert_eq!((kernels, cache_hit), (2, hit), "{bits:#x} on {}", e.ctx.device().name());
            let got: Vec<u32> = out.read().unwrap().iter().map(|v| v.to_bits()).collect();
            assert_eq!(got, vec![bits; N], "{}", e.ctx.device().name());
        }
        let st = e.ctx.fusion_cache_stats();
        assert_eq!((st.builds - before.builds, st.hits - before.hits), (4, 1));
    }
}

/// A list with a kernel given an argument of the wrong type is not fused, and the reason is
/// that argument, naming the kernel, the parameter and both types (it was "a buffer one
/// kernel writes and another uses is not provably accessed per work-item"); the kernels run
/// unfused, and the fusion's event fails with the kernel's launch.
#[test]
fn an_argument_of_the_wrong_type_is_the_reason_a_fusion_fails() {
    let e = env(interp_device());
    let floats = Buffer::<f32>::zeroed(N);
    let wrong = [
        (Arg::scalar(2.0f32), "argument 1 (`s`) is a u32 but the value given is a f32"),
        (
            Arg::from(floats.access(AccessMode::Read)),
            "argument 1 (`s`) is a u32 but a buffer was given",
        ),
    ];
    for (arg, why) in wrong {
        let b = bufs(3);
        let q = Queue::new(&e.ctx, QueueOrder::InOrder);
        q.start_fusion().unwrap();
        launch3(&q, &e.k.add, &b[0], &b[1], &b[2]);
        q.submit(|h| {
            let x = h.read_write(&b[2]);
            h.parallel_for(&e.k.scale, r(), vec![x.into(), arg.clone()]);
        });
        let fused = q.complete_fusion(FusionProps::default()).wait().unwrap_err();
        assert!(fused.to_string().contains("kernel `scale`"), "{fused}");
        let reason = match q.fusion_status() {
            Some(FusionStatus::Failed { reason }) => reason,
            s => panic!("not failed: {s:?}"),
        };
        assert!(reason.contains(&format!("kernel `scale`: {why}")), "{reason}");
        assert!(!reason.contains("per work-item"), "{reason}");
    }
}
