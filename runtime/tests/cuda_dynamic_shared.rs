//! Kernels whose local arrays need dynamic shared memory (past 48 KiB; the PTX backend puts
//! them in one `.extern` window) build for the CUDA device, which raises the function's
//! dynamic shared memory limit and passes the window's size at each launch: a 3-stage
//! tensor-core GEMM from `kiln_gen` gives the interpreter's bits. The build half needs no GPU
//! (`build_ptx_program` is the device's build); the launch half skips without a CUDA driver
//! and device, unless `KILN_REQUIRE_CUDA=1`, when it fails.

use half::bf16;
use kiln_backends::options::BuildOptions;
use kiln_gen::{TcConfig, TcGemmProblem};
use kiln_ir::launch::{Arg, Buffer};
use kiln_ir::{parse_module, Scalar, Verified};
use kiln_runtime::device::cuda::{build_ptx_program, CudaDevice};
use kiln_runtime::{Device, DeviceError};

fn verified(src: &str) -> Verified {
    Verified::new(parse_module(src).unwrap()).unwrap()
}

#[test]
fn dynamic_shared_memory_kernels_build_with_their_window() {
    let big = verified(
        "kernel big(o: ptr<global, f32>) { local t: f32[16384]; t[0] = 1.0; barrier(local); \
         o[0] = t[16383]; }",
    );
    // The binary names the window the launch must pass: 16384 floats (and that the
    // kernel waits for its producers, as every sm_90 kernel does).
    let bin = build_ptx_program(&big, &BuildOptions::default(), 90).unwrap();
    assert!(bin.windows(12).any(|w| w == b"big 65536 1\n"), "no window size in the binary");
    // At the static limit nothing is named.
    let fits = verified(
        "kernel fits(o: ptr<global, f32>) { local t: f32[12288]; t[0] = 1.0; barrier(local); \
         o[0] = t[12287]; }",
    );
    let bin = build_ptx_program(&fits, &BuildOptions::default(), 90).unwrap();
    assert!(bin.windows(9).any(|w| w == b"fits 0 1\n"), "a window for a static kernel");
}

/// Values exact in bf16 (multiples of 1/8 in [-2, 2)): every sum over k = 96 is exact in
/// f32, whatever the order, so device and interpreter agree bit for bit.
fn vals(n: usize, seed: u32) -> Vec<bf16> {
    (0..n as u32)
        .map(|i| {
            let h = i.wrapping_mul(2654435761).wrapping_add(seed.wrapping_mul(40503)) >> 7;
            bf16::from_f32((h % 32) as f32 / 8.0 - 2.0)
        })
        .collect()
}

#[test]
fn three_stage_tc_gemm_runs_with_dynamic_shared_memory() {
    let p = TcGemmProblem::new(128, 128, 96, Scalar::BF16);
    let cfg = TcConfig { stages: 3, ..TcConfig::default() };
    let g = p.generate(&cfg).unwrap();
    let window = kiln_backends::ptx::dynamic_shared_bytes(&g.kernel);
    assert!(window > 48 * 1024, "{cfg}: {window} bytes fit static shared memory");
    let [ea, eb, ec] = g.buffer_elems;
    let bufs = vec![
        Buffer::from_slice(&vals(ea, 1)),
        Buffer::from_slice(&vals(eb, 2)),
        Buffer::zeroed(Scalar::F32, ec),
    ];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
    let mut want = bufs.clone();
    kiln_ir::interp::run(&g.kernel, &g.range(), &args, &mut want).unwrap();
    let found = CudaDevice::open()
        .inspect_err(|e| assert!(matches!(e, DeviceError::Unavailable { .. }), "{e}"));
    let Some(dev) = kiln_ir::testing::require("KILN_REQUIRE_CUDA", found) else { return };
    let mut got = bufs;
    dev.build_and_run(&g.kernel, &g.range(), &args, &mut got).unwrap();
    let (w, d) = (want[2].to_vec::<f32>().unwrap(), got[2].to_vec::<f32>().unwrap());
    for (i, (x, y)) in w.iter().zip(&d).enumerate() {
        assert_eq!(x.to_bits(), y.to_bits(), "element {i}: device {y}, interpreter {x}");
    }
}
