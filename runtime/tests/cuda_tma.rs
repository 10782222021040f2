//! Kernels that copy tiles with `tma_load` on the CUDA device: the device encodes the tensor
//! maps the PTX names (`cuTensorMapEncodeTiled`) for the buffers of each launch and passes
//! them as the hidden parameters. The sm_90 GEMM from `kiln_gen::tc90`, every transposition
//! (K-major and MN-major factors), odd sizes and a fused epilogue, one work-group per tile
//! and persistent tiles with the register budgets (`setmaxnreg`), gives the interpreter's
//! bits (values whose sums are exact in f32, whatever the order). The build half needs no
//! GPU (`build_ptx_program` is the device's build); the launch half skips without a CUDA
//! driver and an sm_90 device, unless `KILN_REQUIRE_CUDA=1` (no driver or device: fails).

use half::{bf16, f16};
use kiln_backends::options::BuildOptions;
use kiln_gen::tc90::{generate, Tc90Config};
use kiln_gen::{EpOp, Epilogue, TcGemmProblem};
use kiln_ir::launch::{Arg, Buffer};
use kiln_ir::{Module, Scalar, Verified};
use kiln_runtime::device::cuda::{build_ptx_program, CudaDevice};
use kiln_runtime::graph::{Graph, GraphProperties};
use kiln_runtime::{Context, ContextConfig, Device, DeviceError, Queue, QueueGraph, QueueOrder};

/// Values exact in f16 and bf16 (multiples of 1/8 in [-2, 2)).
fn vals(n: usize, seed: u32) -> Vec<f32> {
    (0..n as u32)
        .map(|i| {
            let h = i.wrapping_mul(2654435761).wrapping_add(seed.wrapping_mul(40503)) >> 7;
            (h % 32) as f32 / 8.0 - 2.0
        })
        .collect()
}

fn buffer(ty: Scalar, v: &[f32]) -> Buffer {
    match ty {
        Scalar::F16 => Buffer::from_slice(&v.iter().map(|&x| f16::from_f32(x)).collect::<Vec<_>>()),
        Scalar::BF16 => {
            Buffer::from_slice(&v.iter().map(|&x| bf16::from_f32(x)).collect::<Vec<_>>())
        }
        _ => Buffer::from_slice(v),
    }
}

fn problem(ta: bool, tb: bool, ty: Scalar, out: Scalar) -> TcGemmProblem {
    // M, N and K past whole blocks (128 x 128) and stages (64): masked stores, zero-filled
    // copies; every stored row a multiple of 8 elements, as each transposition needs.
    TcGemmProblem { trans_a: ta, trans_b: tb, out, ..TcGemmProblem::new(136, 200, 88, ty) }
}

#[test]
fn sm_90_gemm_builds_with_its_tensor_maps() {
    let g =
        generate(&problem(true, false, Scalar::BF16, Scalar::F32), &Tc90Config::default()).unwrap();
    let m = Verified::new(Module { kernels: vec![g.kernel] }).unwrap();
    let bin = build_ptx_program(&m, &BuildOptions::default(), 90).unwrap();
    let has = |s: &str| bin.windows(s.len()).any(|w| w == s.as_bytes());
    assert!(has("tmap tc90_gemm_tn_bf16_f32_136x200x88 a bf16 136 88 136 64 64 sw128\n"));
    assert!(has("tmap tc90_gemm_tn_bf16_f32_136x200x88 b bf16 200 88 200 64 64 sw128\n"));
}

fn sm_90() -> Option<CudaDevice> {
    let found = CudaDevice::open()
        .inspect_err(|e| assert!(matches!(e, DeviceError::Unavailable { .. }), "{e}"));
    let dev = kiln_ir::testing::require("KILN_REQUIRE_CUDA", found)?;
    if dev.sm() != 90 {
        kiln_ir::testing::skip(&format!(
            "the sm_90 GEMM needs an sm_90 GPU, found sm_{}",
            dev.sm()
        ));
        return None;
    }
    Some(dev)
}

#[test]
fn sm_90_gemm_every_transpose_matches_the_interpreter() {
    // The interpreter's half runs everywhere; the device's where there is an sm_90 GPU.
    let dev = sm_90();
    let cases = [
        (false, false, Scalar::F16, Scalar::F32, false),
        (false, true, Scalar::BF16, Scalar::BF16, true),
        (true, false, Scalar::BF16, Scalar::F32, false),
        (true, true, Scalar::F16, Scalar::F16, true),
        (true, false, Scalar::F16, Scalar::BF16, true),
    ];
    // One work-group per tile; 4 tiles on at most 3 persistent work-groups (two rounds, so
    // two work-groups compute two tiles each, the ring running on), with the register
    // budgets.
    let configs = [
        Tc90Config { bn: 128, stages: 2, persistent: 0, ..Default::default() },
        Tc90Config { bn: 128, stages: 2, persistent: 3, setmaxnreg: true },
    ];
    for ((ta, tb, ty, out, epilogue), cfg) in
        cases.into_iter().flat_map(|c| configs.map(move |cfg| (c, cfg)))
    {
        let mut p = problem(ta, tb, ty, out);
        let mut bufs = vec![
            buffer(ty, &vals(136 * 88, 1)),
            buffer(ty, &vals(88 * 200, 2)),
            buffer(out, &vec![f32::NAN; 136 * 200]),
        ];
        let mut args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
        if epilogue {
            p.epilogue = Epilogue(vec![EpOp::Bias, EpOp::Relu]);
            bufs.push(Buffer::from_slice(&vals(200, 3)));
            args.push(Arg::Buffer(3));
        }
        let g = generate(&p, &cfg).unwrap();
        let name = format!("{} ({cfg})", g.kernel.name());
        let mut want = bufs.clone();
        kiln_ir::interp::run(&g.kernel, &g.range(), &args, &mut want).unwrap();
        // Every element of C is stored (none keeps the NaN it started with).
        let es = out.size_bytes();
        let nan = &bufs[2].as_bytes()[..es];
        assert!(want[2].as_bytes().chunks(es).all(|c| c != nan), "{name}: an element not stored");
        let Some(dev) = &dev else { continue };
        let mut got = bufs;
        dev.build_and_run(&g.kernel, &g.range(), &args, &mut got)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(got[2].as_bytes(), want[2].as_bytes(), "{name}: device and interpreter differ");
    }
}

#[test]
fn a_tensor_past_its_buffer_is_refused_by_name() {
    let Some(dev) = sm_90() else { return };
    let p = problem(false, true, Scalar::BF16, Scalar::F32);
    let g = generate(&p, &Tc90Config::default()).unwrap();
    // A holds one element fewer than its 136 x 88 tensor.
    let mut bufs = vec![
        buffer(Scalar::BF16, &vals(136 * 88 - 1, 1)),
        buffer(Scalar::BF16, &vals(200 * 88, 2)),
        Buffer::zeroed(Scalar::F32, 136 * 200),
    ];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
    let e = dev.build_and_run(&g.kernel, &g.range(), &args, &mut bufs).unwrap_err().to_string();
    assert!(e.contains("tensor map of `a`") && e.contains("needs 11968"), "{e}");
}

#[test]
fn recording_a_kernel_with_tensor_maps_into_a_cuda_graph_is_refused_by_name() {
    let Some(dev) = sm_90() else { return };
    let c = Context::with_config(
        std::sync::Arc::new(dev),
        ContextConfig { workers: 1, ..Default::default() },
    );
    let p = problem(false, true, Scalar::BF16, Scalar::F32);
    let g = generate(&p, &Tc90Config::default()).unwrap();
    let name = g.kernel.name().to_string();
    let k = c.get_kernel(&Module { kernels: vec![g.kernel.clone()] }, &name).unwrap();
    let a = kiln_runtime::Buffer::from_slice(&vec![bf16::ZERO; 136 * 88]);
    let b = kiln_runtime::Buffer::from_slice(&vec![bf16::ZERO; 200 * 88]);
    let out = kiln_runtime::Buffer::from_slice(&vec![0.0f32; 136 * 200]);
    let q = Queue::new(&c, QueueOrder::InOrder);
    let graph = Graph::new(&c, GraphProperties::default());
    q.begin_recording(&graph).unwrap();
    q.submit(|h| {
        let (a, b, out) = (h.read(&a), h.read(&b), h.read_write(&out));
        h.parallel_for(&k, g.range(), vec![a.into(), b.into(), out.into()]);
    });
    q.end_recording().unwrap();
    let Err(e) = graph.finalize() else { panic!("a kernel with tensor maps was recorded") };
    let e = e.to_string();
    assert!(e.contains("takes tensor maps") && e.contains(&name), "{e}");
}
