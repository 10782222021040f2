//! DPC++'s kernel-fusion end-to-end tests (intel/llvm `sycl/test-e2e/KernelFusion`) that need
//! path-sensitive legality or several elements per work-item, translated to kiln's queue API
//! with DPC++'s expected values: each must fuse and internalize where DPC++ does, on every
//! device found (interp, cpu, Vulkan, CUDA). Structs and `sycl::vec`s become flat buffers with
//! the same element offsets.

use kiln_runtime::QueueFusion;
use std::sync::Arc;

use kiln_ir::parse_module;
use kiln_runtime::device::cpu::CpuDevice;
use kiln_runtime::device::cuda::CudaDevice;
use kiln_runtime::device::registry::OpenOptions;
use kiln_runtime::device::vulkan::VulkanDevice;
use kiln_runtime::{
    interp_device, AccessMode, AccessProps, Buffer, Context, ContextConfig, Device, FusionProps,
    FusionStatus, NdRange, PromoteTo, Queue, QueueOrder,
};

/// Each device found: the interpreter, the cpu device, Vulkan and CUDA.
fn contexts() -> Vec<Context> {
    let mut devs: Vec<Arc<dyn Device>> = vec![interp_device()];
    if cfg!(target_arch = "x86_64") {
        if let Some(d) = kiln_ir::testing::optional(
            "KILN_REQUIRE_TOOLS",
            CpuDevice::open(&OpenOptions::default()),
        ) {
            devs.push(Arc::new(d));
        }
    }
    if let Some(d) = kiln_ir::testing::optional("KILN_REQUIRE_TOOLS", VulkanDevice::open()) {
        devs.push(Arc::new(d));
    }
    if let Some(d) = kiln_ir::testing::optional("KILN_REQUIRE_CUDA", CudaDevice::open()) {
        devs.push(Arc::new(d));
    }
    devs.into_iter()
        .map(|d| {
            Context::with_config(
                d,
                ContextConfig { workers: 2, warning_level: 1, ..Default::default() },
            )
        })
        .collect()
}

fn private() -> AccessProps {
    AccessProps { promote: Some(PromoteTo::Private), no_init: false }
}

fn assert_fused(q: &Queue, kernels: usize, dev: &str) {
    match q.fusion_status() {
        Some(FusionStatus::Completed { kernels: k, warnings, .. }) => {
            assert_eq!(k, kernels, "{dev}");
            assert!(warnings.is_empty(), "{dev}: not internalized: {warnings:?}");
        }
        s => panic!("{dev}: not fused: {s:?}"),
    }
}

/// `internalize_array_wrapper.cpp`: each work-item owns a 2 x 2 array of `int2` (8 ints:
/// `t[id * 8 + i * 4 + j * 2 + lane]`), written and read in nested loops; `tmp` private,
/// `no_barriers`. Expected: `out = 20 * id * id` everywhere, `tmp` never written (-1).
#[test]
fn internalize_array_wrapper() {
    let m = parse_module(
        "kernel one(in1: ptr<global, i32>, in2: ptr<global, i32>, tmp: ptr<global, i32>) {
  let id: u32 = global_id(0);
  for i: u32 in 0u32 .. 2u32 step 1u32 {
    for j: u32 in 0u32 .. 2u32 step 1u32 {
      for l: u32 in 0u32 .. 2u32 step 1u32 {
        let e: u32 = id * 8u32 + i * 4u32 + j * 2u32 + l;
        tmp[e] = in1[e] + in2[e];
      }
    }
  }
}
kernel two(tmp: ptr<global, i32>, in3: ptr<global, i32>, out: ptr<global, i32>) {
  let id: u32 = global_id(0);
  for i: u32 in 0u32 .. 2u32 step 1u32 {
    for j: u32 in 0u32 .. 2u32 step 1u32 {
      for l: u32 in 0u32 .. 2u32 step 1u32 {
        let e: u32 = id * 8u32 + i * 4u32 + j * 2u32 + l;
        out[e] = tmp[e] * in3[e];
      }
    }
  }
}",
    )
    .unwrap();
    const DATA: usize = 2;
    for ctx in contexts() {
        let dev = ctx.device().name().to_string();
        let (k1, k2) = (ctx.get_kernel(&m, "one").unwrap(), ctx.get_kernel(&m, "two").unwrap());
        let fill = |f: &dyn Fn(i32) -> i32| {
            Buffer::from_slice(&(0..DATA * 8).map(|e| f((e / 8) as i32)).collect::<Vec<i32>>())
        };
        let (in1, in2, in3) = (fill(&|id| id * 2), fill(&|id| id * 3), fill(&|id| id * 4));
        let (tmp, out) = (fill(&|_| -1), fill(&|_| -1));
        let q = Queue::new(&ctx, QueueOrder::InOrder);
        q.start_fusion().unwrap();
        let range = NdRange::new(&[DATA as u32]);
        q.submit(|h| {
            let (a, b) = (h.read(&in1), h.read(&in2));
            let t = h.access_with(&tmp, AccessMode::Write, private());
            h.parallel_for(&k1, range, vec![a.into(), b.into(), t.into()]);
        });
        q.submit(|h| {
            let t = h.access_with(&tmp, AccessMode::Read, private());
            let (c, o) = (h.read(&in3), h.write(&out));
            h.parallel_for(&k2, range, vec![t.into(), c.into(), o.into()]);
        });
        q.complete_fusion(FusionProps { no_barriers: true }).wait().unwrap();
        assert_fused(&q, 2, &dev);
        let want: Vec<i32> = (0..DATA * 8).map(|e| 20 * ((e / 8) as i32).pow(2)).collect();
        assert_eq!(out.read().unwrap(), want, "{dev}: computation error");
        assert_eq!(tmp.read().unwrap(), vec![-1; DATA * 8], "{dev}: not internalizing");
    }
}

/// `internalize_non_unit_localsize.cpp`: 128 work-items each own three elements (`3 * i + k`)
/// of a struct buffer (`MyStruct { int pad; int3 v; }`, 32 bytes: `v.y()` is int 5 of 8) and
/// of an `i8` buffer, written and read permuted; both private, `no_barriers`. Expected:
/// `out[i] = i * i + (char)(i ^ 0xAA)`, both buffers never written.
#[test]
fn internalize_non_unit_localsize() {
    let m = parse_module(
        "kernel one(inp: ptr<global, i32>, tmp: ptr<global, i32>, tmp2: ptr<global, i8>) {
  let i: u32 = global_id(0);
  tmp[(3u32 * i) * 8u32 + 5u32] = inp[3u32 * i];
  tmp[(3u32 * i + 1u32) * 8u32 + 5u32] = inp[3u32 * i + 1u32];
  tmp[(3u32 * i + 2u32) * 8u32 + 5u32] = inp[3u32 * i + 2u32];
  tmp2[3u32 * i + 2u32] = (inp[3u32 * i] ^ 170) as i8;
  tmp2[3u32 * i + 1u32] = (inp[3u32 * i + 1u32] ^ 170) as i8;
  tmp2[3u32 * i] = (inp[3u32 * i + 2u32] ^ 170) as i8;
}
kernel two(tmp: ptr<global, i32>, tmp2: ptr<global, i8>, inp: ptr<global, i32>, out: ptr<global, i32>) {
  let i: u32 = global_id(0);
  out[3u32 * i] = tmp[(3u32 * i) * 8u32 + 5u32] * inp[3u32 * i] + (tmp2[3u32 * i + 2u32] as i32);
  out[3u32 * i + 1u32] = tmp[(3u32 * i + 1u32) * 8u32 + 5u32] * inp[3u32 * i + 1u32] + (tmp2[3u32 * i + 1u32] as i32);
  out[3u32 * i + 2u32] = tmp[(3u32 * i + 2u32) * 8u32 + 5u32] * inp[3u32 * i + 2u32] + (tmp2[3u32 * i] as i32);
}",
    )
    .unwrap();
    const DATA: usize = 384;
    for ctx in contexts() {
        let dev = ctx.device().name().to_string();
        let (k1, k2) = (ctx.get_kernel(&m, "one").unwrap(), ctx.get_kernel(&m, "two").unwrap());
        let inp = Buffer::from_slice(&(0..DATA as i32).collect::<Vec<_>>());
        let tmp = Buffer::from_slice(&vec![-1i32; DATA * 8]);
        let tmp2 = Buffer::from_slice(&vec![-1i8; DATA]);
        let out = Buffer::from_slice(&vec![-1i32; DATA]);
        let q = Queue::new(&ctx, QueueOrder::InOrder);
        q.start_fusion().unwrap();
        let range = NdRange::new(&[DATA as u32 / 3]);
        q.submit(|h| {
            let a = h.read(&inp);
            let t = h.access_with(&tmp, AccessMode::Write, private());
            let t2 = h.access_with(&tmp2, AccessMode::Write, private());
            h.parallel_for(&k1, range, vec![a.into(), t.into(), t2.into()]);
        });
        q.submit(|h| {
            let t = h.access_with(&tmp, AccessMode::Read, private());
            let t2 = h.access_with(&tmp2, AccessMode::Read, private());
            let (a, o) = (h.read(&inp), h.write(&out));
            h.parallel_for(&k2, range, vec![t.into(), t2.into(), a.into(), o.into()]);
        });
        q.complete_fusion(FusionProps { no_barriers: true }).wait().unwrap();
        assert_fused(&q, 2, &dev);
        let want: Vec<i32> = (0..DATA as i32).map(|i| i * i + ((i ^ 0xAA) as i8) as i32).collect();
        assert_eq!(out.read().unwrap(), want, "{dev}: computation error");
        assert_eq!(tmp.read().unwrap(), vec![-1; DATA * 8], "{dev}: not internalized");
        assert_eq!(tmp2.read().unwrap(), vec![-1; DATA], "{dev}: not internalized");
    }
}
