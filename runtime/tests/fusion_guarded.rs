//! Fusion-aware queues on kernels written the way GPU programs are written (issue 28):
//! `if i < n` over a range rounded up to the work-group size, guarded intermediates promoted
//! to private memory, a work-group permutation promoted to local memory, work-items that
//! own several elements. Each scenario runs in fusion mode and without it on fresh buffers,
//! on every device found (interp, cpu, Vulkan, CUDA), and the buffers must be bit-identical.

use kiln_runtime::{QueueFusion, QueueGraph};
use std::sync::Arc;

use kiln_ir::parse_module;
use kiln_runtime::device::cpu::CpuDevice;
use kiln_runtime::device::cuda::CudaDevice;
use kiln_runtime::device::registry::OpenOptions;
use kiln_runtime::device::vulkan::VulkanDevice;
use kiln_runtime::graph::{Graph, GraphProperties};
use kiln_runtime::{
    interp_device, AccessMode, AccessProps, AnyBuffer, Arg, Buffer, Context, ContextConfig, Device,
    FusionProps, FusionStatus, KernelHandle, NdRange, PromoteTo, Queue, QueueOrder,
};

const KERNELS: &str = concat!(
    include_str!("guarded_chain.kir"),
    "
kernel reverse_block(a: ptr<global, f32>, t: ptr<global, f32>) {
  let l: u32 = local_id(0);
  t[group_id(0) * local_size(0) + local_size(0) - 1u32 - l] = a[global_id(0)] + 1.0;
}
kernel read_block(t: ptr<global, f32>, out: ptr<global, f32>) {
  let i: u32 = global_id(0);
  out[i] = t[i] * 3.0;
}
kernel quad_write(a: ptr<global, f32>, t: ptr<global, f32>) {
  let i: u32 = global_id(0);
  for j: u32 in 0u32 .. 4u32 step 1u32 { t[i * 4u32 + j] = a[i] + (j as f32); }
}
kernel quad_sum(t: ptr<global, f32>, out: ptr<global, f32>) {
  let i: u32 = global_id(0);
  var acc: f32 = 0.0;
  for j: u32 in 0u32 .. 4u32 step 1u32 { acc = acc + t[i * 4u32 + j]; }
  out[i] = acc;
}
",
);

struct Env {
    ctx: Context,
    module: kiln_ir::Module,
}

impl Env {
    fn k(&self, name: &str) -> KernelHandle {
        self.ctx.get_kernel(&self.module, name).unwrap()
    }
}

fn env(dev: Arc<dyn Device>) -> Env {
    let ctx = Context::with_config(
        dev,
        ContextConfig { workers: 2, warning_level: 1, ..Default::default() },
    );
    Env { ctx, module: parse_module(KERNELS).unwrap() }
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

/// `count` buffers of `len` distinct values each.
fn bufs(count: usize, len: usize) -> Vec<Buffer<f32>> {
    (0..count)
        .map(|b| {
            let v: Vec<f32> =
                (0..len).map(|i| (i as f32) * 0.75 + b as f32 * 100.0 + 1.0).collect();
            Buffer::from_slice(&v)
        })
        .collect()
}

/// Runs `work` twice on fresh buffers, without and with fusion mode, and returns the fusion
/// status and the buffers of both runs as bits.
fn twice(
    e: &Env,
    count: usize,
    len: usize,
    work: impl Fn(&Queue, &[Buffer<f32>]),
    props: FusionProps,
) -> (FusionStatus, Vec<Vec<u32>>, Vec<Vec<u32>>) {
    let run = |fusion: bool| {
        let q = Queue::new(&e.ctx, QueueOrder::InOrder);
        let b = bufs(count, len);
        if fusion {
            q.start_fusion().unwrap();
        }
        work(&q, &b);
        let status = fusion.then(|| {
            q.complete_fusion(props).wait().unwrap();
            q.fusion_status().expect("a fusion status")
        });
        q.wait().unwrap();
        let bits: Vec<Vec<u32>> =
            b.iter().map(|b| b.read().unwrap().iter().map(|x| x.to_bits()).collect()).collect();
        (status, bits)
    };
    let (_, plain) = run(false);
    let (status, fused) = run(true);
    (status.expect("fusion ran"), plain, fused)
}

fn completed(s: &FusionStatus, dev: &str) -> (usize, Vec<String>) {
    match s {
        FusionStatus::Completed { kernels, warnings, .. } => (*kernels, warnings.clone()),
        s => panic!("{dev}: not fused: {s:?}"),
    }
}

/// The five guarded kernels in two chains over `n = 1000` (launched over 1024
/// work-items in groups of 64); with `promote`, the intermediate `e` asks for private memory.
/// Buffers: 0 = x, 1 = e, 2 = y, 3 = z.
fn guarded_five(e: &Env, q: &Queue, b: &[Buffer<f32>], promote: bool) {
    const N: u32 = 1000;
    let range = || NdRange::new(&[1024]).with_local(&[64]);
    let (k1, k2, k3, k4, k5) =
        (e.k("shift_exp"), e.k("poly"), e.k("clamp_low"), e.k("root"), e.k("scale"));
    let props = AccessProps { promote: promote.then_some(PromoteTo::Private), no_init: false };
    q.submit(|h| {
        let (x, t) = (h.read(&b[0]), h.access_with(&b[1], AccessMode::Write, props));
        h.parallel_for(&k1, range(), vec![x.into(), t.into(), Arg::scalar(N)]);
    });
    q.submit(|h| {
        let t = h.access_with(&b[1], AccessMode::Read, props);
        let y = h.write(&b[2]);
        h.parallel_for(&k2, range(), vec![t.into(), y.into(), Arg::scalar(N)]);
    });
    q.submit(|h| {
        let y = h.read_write(&b[2]);
        let args = vec![y.into(), Arg::scalar(0.25f32), Arg::scalar(N)];
        h.parallel_for(&k3, range(), args);
    });
    q.submit(|h| {
        let (y, z) = (h.read(&b[2]), h.write(&b[3]));
        h.parallel_for(&k4, range(), vec![y.into(), z.into(), Arg::scalar(N)]);
    });
    q.submit(|h| {
        let z = h.read_write(&b[3]);
        let args = vec![z.into(), Arg::scalar(1.5f32), Arg::scalar(N)];
        h.parallel_for(&k5, range(), args);
    });
}

/// The scenario in a fusion-aware queue, without and with `e` promoted.
#[test]
fn guarded_chains_over_rounded_up_ranges_fuse() {
    const N: usize = 1000;
    for e in envs() {
        let dev = e.ctx.device().name().to_string();
        for promote in [false, true] {
            let work = |q: &Queue, b: &[Buffer<f32>]| guarded_five(&e, q, b, promote);
            let (status, plain, fused) = twice(&e, 4, N, work, FusionProps::default());
            let (kernels, warnings) = completed(&status, &dev);
            assert_eq!(kernels, 5, "{dev}");
            assert!(warnings.is_empty(), "{dev}: {warnings:?}");
            for b in [0, 2, 3] {
                assert_eq!(plain[b], fused[b], "{dev}: buffer {b}, promote {promote}");
            }
            let untouched: Vec<u32> =
                bufs(4, N)[1].read().unwrap().iter().map(|x| x.to_bits()).collect();
            if promote {
                // Promoted: the fused run never wrote `e`.
                assert_eq!(fused[1], untouched, "{dev}");
            } else {
                assert_eq!(plain[1], fused[1], "{dev}");
            }
        }
    }
}

/// The same kernels recorded into a command graph with `fuse_chains`, then a copy of `z`
/// (buffer 4): the chain fuses at finalize (the scalar arguments are the fused kernel's
/// constants, so `i < n` bounds every access), and replays give the eager run's bits; with
/// `internalize`, `e` and `y`, which nothing outside the chain uses, are not written back.
#[test]
fn guarded_chains_fuse_in_command_graphs() {
    const N: usize = 1000;
    for e in envs() {
        let dev = e.ctx.device().name().to_string();
        let q = Queue::new(&e.ctx, QueueOrder::InOrder);
        let run = |q: &Queue, b: &[Buffer<f32>]| {
            guarded_five(&e, q, b, false);
            q.submit(|h| h.copy(&AnyBuffer::from(&b[3]), &AnyBuffer::from(&b[4])));
        };
        let eager = bufs(5, N);
        run(&q, &eager);
        q.wait().unwrap();
        let bits = |b: &Buffer<f32>| -> Vec<u32> {
            b.read().unwrap().iter().map(|x| x.to_bits()).collect()
        };
        for internalize in [false, true] {
            let replay = bufs(5, N);
            let g = Graph::new(
                &e.ctx,
                GraphProperties { fuse_chains: true, internalize, ..Default::default() },
            );
            q.begin_recording(&g).unwrap();
            run(&q, &replay);
            q.end_recording().unwrap();
            let exec = g.finalize().unwrap();
            assert_eq!(exec.fused_chain_nodes().len(), 1, "{dev}: {:?}", exec.refused_chains());
            assert_eq!(exec.fused_chain_nodes()[0].len(), 5, "{dev}");
            assert!(exec.refused_chains().is_empty(), "{dev}: {:?}", exec.refused_chains());
            for _ in 0..2 {
                q.submit_graph(&exec).wait().unwrap();
            }
            assert_eq!(bits(&replay[0]), bits(&eager[0]), "{dev}");
            assert_eq!(bits(&replay[3]), bits(&eager[3]), "{dev}: z, internalize {internalize}");
            assert_eq!(bits(&replay[4]), bits(&eager[4]), "{dev}: copy of z");
            if !internalize {
                assert_eq!(bits(&replay[1]), bits(&eager[1]), "{dev}");
                assert_eq!(bits(&replay[2]), bits(&eager[2]), "{dev}");
            }
        }
    }
}

/// A producer that writes its work-group's block reversed and a consumer that reads it in
/// order: the intermediate is promoted to local memory.
#[test]
fn a_work_group_permutation_is_promoted_to_local_memory() {
    let range = || NdRange::new(&[256]).with_local(&[64]);
    for e in envs() {
        let dev = e.ctx.device().name().to_string();
        let (w, r) = (e.k("reverse_block"), e.k("read_block"));
        let work = |q: &Queue, b: &[Buffer<f32>]| {
            let props = AccessProps { promote: Some(PromoteTo::Local), no_init: false };
            q.submit(|h| {
                let (a, t) = (h.read(&b[0]), h.access_with(&b[1], AccessMode::Write, props));
                h.parallel_for(&w, range(), vec![a.into(), t.into()]);
            });
            q.submit(|h| {
                let (t, o) = (h.access_with(&b[1], AccessMode::Read, props), h.write(&b[2]));
                h.parallel_for(&r, range(), vec![t.into(), o.into()]);
            });
        };
        let (status, plain, fused) = twice(&e, 3, 256, work, FusionProps::default());
        let (kernels, warnings) = completed(&status, &dev);
        assert_eq!((kernels, warnings), (2, vec![]), "{dev}");
        assert_eq!(plain[2], fused[2], "{dev}");
        assert_ne!(plain[1], fused[1], "{dev}: the promoted buffer was written");
    }
}

/// Work-item `i` writes `t[i * 4 + j]` for `j < 4` (DPC++'s internalization tests, local
/// size 8): promoted to private and to local memory.
#[test]
fn work_items_owning_several_elements_are_promoted() {
    let range = || NdRange::new(&[64]).with_local(&[8]);
    for e in envs() {
        let dev = e.ctx.device().name().to_string();
        let (w, r) = (e.k("quad_write"), e.k("quad_sum"));
        for to in [PromoteTo::Private, PromoteTo::Local] {
            let work = |q: &Queue, b: &[Buffer<f32>]| {
                let props = AccessProps { promote: Some(to), no_init: false };
                q.submit(|h| {
                    let (a, t) = (h.read(&b[0]), h.access_with(&b[1], AccessMode::Write, props));
                    h.parallel_for(&w, range(), vec![a.into(), t.into()]);
                });
                q.submit(|h| {
                    let (t, o) = (h.access_with(&b[1], AccessMode::Read, props), h.write(&b[2]));
                    h.parallel_for(&r, range(), vec![t.into(), o.into()]);
                });
            };
            let (status, plain, fused) = twice(&e, 3, 256, work, FusionProps::default());
            let (kernels, warnings) = completed(&status, &dev);
            assert_eq!((kernels, warnings), (2, vec![]), "{dev} {to:?}");
            assert_eq!(plain[2], fused[2], "{dev} {to:?}");
        }
    }
}
