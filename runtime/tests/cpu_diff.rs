//! The cpu device (x86-64 machine code through the runtime) against the interpreter: the
//! examples, random kernels of the shared generator (barriers and local memory included)
//! with and without `-O`, on several threads, through a context and its caches, with the
//! interpreter's errors; a runaway kernel stops at the device's timeout. `KILN_CPU_CASES`
//! sets the number of random kernels (default 96).

mod common;

use std::sync::Arc;
use std::time::Duration;

use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::{example_kernel, results_match, seeded_cases, GenConfig};
use kiln_ir::{parse_module, Kernel};
use kiln_runtime::device::cpu::CpuDevice;
use kiln_runtime::device::registry::OpenOptions;
use kiln_runtime::{Device, DeviceError};

fn device(threads: usize) -> Option<CpuDevice> {
    let options = OpenOptions { threads: Some(threads), ..OpenOptions::default() };
    kiln_ir::testing::require("KILN_REQUIRE_TOOLS", CpuDevice::open(&options))
}

fn compare(dev: &CpuDevice, k: &Kernel, range: &NdRange, args: &[Arg], bufs: &[Buffer]) {
    let mut want = bufs.to_vec();
    let expected = run(k, range, args, &mut want).map_err(|e| e.to_string());
    let mut got = bufs.to_vec();
    let actual = dev.build_and_run(k, range, args, &mut got).map_err(|e| e.to_string());
    match (expected, actual) {
        (Ok(()), Ok(())) => {
            results_match(&want, &got).unwrap_or_else(|e| panic!("{}: {e}", k.name()))
        }
        // The device's launch error is the interpreter's message, word for word.
        (Err(w), Err(g)) => assert!(g.ends_with(&w), "{}: `{g}` is not `{w}`", k.name()),
        (w, g) => panic!("{}: interpreter {w:?}, cpu {g:?}", k.name()),
    }
}

fn floats(n: usize, seed: f32) -> Buffer {
    Buffer::from_slice(&(0..n).map(|i| (i as f32 * 0.37 + seed).sin() * 10.0).collect::<Vec<_>>())
}

#[test]
fn examples_match_the_interpreter() {
    let Some(dev) = device(3) else { return };
    let saxpy = example_kernel("saxpy");
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(2.5f32), Arg::scalar(1000u32)];
    compare(&dev, &saxpy, &NdRange::new(&[1024]), &args, &[floats(1024, 0.0), floats(1024, 1.0)]);
    let reduce = example_kernel("reduce");
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(250u32)];
    let r = NdRange::new(&[256]).with_local(&[64]);
    compare(&dev, &reduce, &r, &args, &[floats(256, 2.0), Buffer::zeroed(kiln_ir::Scalar::F32, 4)]);
    // Too short an output: the interpreter's out-of-bounds error, naming the work-item.
    compare(&dev, &reduce, &r, &args, &[floats(256, 2.0), Buffer::zeroed(kiln_ir::Scalar::F32, 2)]);
    let stencil = example_kernel("stencil2d");
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(16u32), Arg::scalar(12u32)];
    let bufs = [floats(192, 3.0), Buffer::zeroed(kiln_ir::Scalar::F32, 192)];
    compare(&dev, &stencil, &NdRange::new(&[16, 12]), &args, &bufs);
    let div = example_kernel("divergent");
    let u32s = |n: u32| Buffer::from_slice(&(0..n).map(|i| i * 7 + 3).collect::<Vec<_>>());
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(60u32)];
    let bufs = [u32s(64), Buffer::zeroed(kiln_ir::Scalar::U32, 64), u32s(64)];
    compare(&dev, &div, &NdRange::new(&[64]), &args, &bufs);
}

#[test]
fn random_kernels_match_the_interpreter() {
    let Some(dev) = device(2) else { return };
    let cfg = GenConfig::default();
    let cases: usize =
        std::env::var("KILN_CPU_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(96);
    for case in seeded_cases(0x6a09_e667_f3bc_c908, &cfg).take(cases) {
        compare(&dev, &case.kernel, &case.range, &case.args, &case.buffers);
        // The optimized kernel, as a context builds it by default, means the same.
        let optimized = kiln_passes::pipeline::optimize(&case.kernel);
        compare(&dev, &optimized, &case.range, &case.args, &case.buffers);
    }
}

#[test]
fn through_a_context_and_the_persistent_cache() {
    let Some(dev) = device(2) else { return };
    common::context_round_trip(Arc::new(dev), "cpu");
    let Some(dev) = device(1) else { return };
    common::damaged_binaries_do_not_load(&dev);
}

#[test]
fn a_runaway_kernel_stops_at_the_timeout() {
    let options =
        OpenOptions { timeout: Some(Duration::from_millis(200)), ..OpenOptions::default() };
    let Some(dev) = kiln_ir::testing::require("KILN_REQUIRE_TOOLS", CpuDevice::open(&options))
    else {
        return;
    };
    let k = parse_module(
        "kernel spin(x: ptr<global, u32>) { var i: u32 = 0; while i < 10 { x[0] = x[0] + 1; } }",
    )
    .unwrap()
    .kernels
    .remove(0);
    let mut bufs = vec![Buffer::zeroed(kiln_ir::Scalar::U32, 1)];
    let e = dev.build_and_run(&k, &NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs).unwrap_err();
    assert!(matches!(e, DeviceError::Launch(_)), "{e}");
    assert!(e.to_string().contains("spin"), "{e}");
}

/// Issue 29 (W1): NaN payloads, signalling ones included, that a kernel only moves keep every
/// bit on the cpu device (scalar and 8-lane code, plain and `-O` through the device's build).
#[test]
fn nan_payloads_are_copied_bit_for_bit() {
    let Some(dev) = device(2) else { return };
    for dev in [dev, device(1).unwrap().scalar_only()] {
        for ty in [kiln_ir::Scalar::F16, kiln_ir::Scalar::F32, kiln_ir::Scalar::F64] {
            let (case, want) = kiln_ir::testing::nan_copy_case(ty);
            let mut got = case.buffers.clone();
            dev.build_and_run(&case.kernel, &case.range, &case.args, &mut got)
                .unwrap_or_else(|e| panic!("{ty}: {e}"));
            kiln_ir::testing::bits_match(&want, &got).unwrap_or_else(|e| panic!("{ty}: {e}"));
        }
    }
}
