//! Differential tests of the CUDA device against the interpreter: the examples, hand cases
//! for IEEE and integer edge cases, and random kernels, compared bit for bit (NaN payloads
//! aside). Without a CUDA driver and device they skip with a message, unless
//! `KILN_REQUIRE_CUDA=1`, when they fail. `KILN_CUDA_CASES` sets the number of random
//! kernels (default 300).

use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::{arb_kernel, results_match};
use kiln_ir::{parse_module, Kernel};
use kiln_runtime::device::cuda::CudaDevice;
use kiln_runtime::{Device, DeviceError};

mod common;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;

fn device() -> Option<CudaDevice> {
    // A driver that is there but fails is a failure, not a reason to skip.
    let found = CudaDevice::open()
        .inspect_err(|e| assert!(matches!(e, DeviceError::Unavailable { .. }), "{e}"));
    let d = kiln_ir::testing::require("KILN_REQUIRE_CUDA", found)?;
    eprintln!("CUDA device: {} (sm_{})", d.name(), d.sm());
    Some(d)
}

fn example(name: &str) -> Kernel {
    kiln_ir::testing::example_kernel(name)
}

fn f32s(n: usize, seed: u32) -> Buffer {
    let v: Vec<f32> = (0..n as u32)
        .map(|i| ((i.wrapping_mul(2654435761).wrapping_add(seed) >> 8) % 2000) as f32 / 7.0 - 100.0)
        .collect();
    Buffer::from_slice(&v)
}

fn check(dev: &CudaDevice, k: &Kernel, range: &NdRange, args: &[Arg], bufs: Vec<Buffer>) {
    let mut expected = bufs.clone();
    run(k, range, args, &mut expected).unwrap();
    let mut actual = bufs;
    dev.build_and_run(k, range, args, &mut actual).unwrap_or_else(|e| panic!("{}: {e}", k.name()));
    results_match(&expected, &actual).unwrap_or_else(|e| panic!("{}: {e}", k.name()));
}

#[test]
fn examples_match_the_interpreter() {
    let Some(dev) = device() else { return };
    let s = |v: u32| Arg::scalar(v);
    check(
        &dev,
        &example("saxpy"),
        &NdRange::new(&[1024]).with_offset(&[3]),
        &[Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(2.5f32), s(1000)],
        vec![f32s(1030, 1), f32s(1030, 2)],
    );
    check(
        &dev,
        &example("reduce"),
        &NdRange::new(&[1024]).with_local(&[64]),
        &[Arg::Buffer(0), Arg::Buffer(1), s(1000)],
        vec![f32s(1024, 3), Buffer::zeroed(kiln_ir::Scalar::F32, 16)],
    );
    check(
        &dev,
        &example("stencil2d"),
        &NdRange::new(&[32, 16]).with_local(&[8, 4]),
        &[Arg::Buffer(0), Arg::Buffer(1), s(30), s(16)],
        vec![f32s(512, 4), f32s(512, 5)],
    );
    let data: Vec<u32> = (1..=256).collect();
    check(
        &dev,
        &example("divergent"),
        &NdRange::new(&[256]),
        &[Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), s(250)],
        vec![
            Buffer::from_slice(&data),
            Buffer::from_slice(&[0u32; 256]),
            Buffer::from_slice(&[0i32; 256]),
        ],
    );
}

/// IEEE and integer edge cases where PTX instructions could differ from kiln's rules.
#[test]
fn edge_cases_match_the_interpreter() {
    let Some(dev) = device() else { return };
    let src = r#"
kernel nan64(x: ptr<global, f64>, n: ptr<global, i64>) {
  let g: u32 = global_id(0);
  n[g * 6] = x[g] as i32 as i64;
  n[g * 6 + 1] = x[g] as i64;
  n[g * 6 + 2] = x[g] as u64 as i64;
  n[g * 6 + 3] = (x[g] as f16) as i8 as i64;
  n[g * 6 + 4] = (x[g] as f32) as i64;
  n[g * 6 + 5] = (x[g] as f16) as u64 as i64;
}
kernel edges(x: ptr<global, f32>, y: ptr<global, f32>, i: ptr<global, i32>, o: ptr<global, f32>, n: ptr<global, i32>) {
  let g: u32 = global_id(0);
  let a: f32 = x[g];
  let b: f32 = y[g];
  o[g * 8] = min(a, b);
  o[g * 8 + 1] = max(a, b);
  o[g * 8 + 2] = a / b;
  o[g * 8 + 3] = sqrt(a);
  o[g * 8 + 4] = fma(a, b, a);
  o[g * 8 + 5] = (a as f16) as f32;
  o[g * 8 + 6] = select(a != b, 1.0, 0.0);
  o[g * 8 + 7] = floor(a) + ceil(b);
  n[g * 8] = a as i32;
  n[g * 8 + 1] = (a as u8) as i32;
  n[g * 8 + 2] = (a as i8) as i32;
  n[g * 8 + 3] = (a as u64) as i32;
  n[g * 8 + 4] = i[g] / select(i[g + 16] == 0, 1, i[g + 16]);
  n[g * 8 + 5] = i[g] % select(i[g + 16] == 0, 1, i[g + 16]);
  n[g * 8 + 6] = (i[g] << i[g + 16]) ^ (i[g] >> i[g + 16]);
  n[g * 8 + 7] = (((i[g] as i8) * (i[g + 16] as i8)) as i32) + ((i[g] as u16) >> 3) as i32;
}
"#;
    let mut m = parse_module(src).unwrap().kernels;
    let k = m.remove(1);
    let xs = [f64::NAN, -f64::NAN, 1e300, -1e300, 2.5, -2.5, 0.0, -0.0];
    check(
        &dev,
        &m[0],
        &NdRange::new(&[8]),
        &[Arg::Buffer(0), Arg::Buffer(1)],
        vec![Buffer::from_slice(&xs), Buffer::from_slice(&[0i64; 48])],
    );
    let special = [
        0.0f32,
        -0.0,
        1.5,
        -2.5,
        f32::NAN,
        f32::INFINITY,
        -f32::INFINITY,
        3e9,
        -3e9,
        1e-40,
        255.9,
        -128.7,
        300.0,
        65504.0,
        7.0e4,
        -0.0,
    ];
    let other = [
        -0.0f32,
        0.0,
        -1.5,
        2.5,
        1.0,
        f32::NAN,
        2.0,
        0.5,
        -0.5,
        1e-38,
        3.0,
        -1.0,
        0.0,
        2.0,
        1.0,
        0.0,
    ];
    let ints: Vec<i32> = vec![
        i32::MIN,
        -7,
        7,
        1,
        -1,
        255,
        -128,
        40000,
        5,
        6,
        100,
        -100,
        0,
        1,
        2,
        3, // dividends
        -1,
        2,
        -2,
        33,
        31,
        -1,
        3,
        7,
        -3,
        0,
        64,
        32,
        1,
        -33,
        15,
        9, // divisors / shifts
    ];
    check(
        &dev,
        &k,
        &NdRange::new(&[16]),
        &[Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3), Arg::Buffer(4)],
        vec![
            Buffer::from_slice(&special),
            Buffer::from_slice(&other),
            Buffer::from_slice(&ints),
            Buffer::from_slice(&[0f32; 128]),
            Buffer::from_slice(&[0i32; 128]),
        ],
    );
}

#[test]
fn random_kernels_match_the_interpreter() {
    let Some(dev) = device() else { return };
    let cases: usize =
        std::env::var("KILN_CUDA_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    let mut runner = TestRunner::deterministic();
    let strategy = arb_kernel();
    let mut failures = Vec::new();
    for n in 0..cases {
        let case = strategy.new_tree(&mut runner).unwrap().current();
        let expected = case.run().unwrap();
        let mut actual = case.buffers.clone();
        let outcome = dev
            .build_and_run(&case.kernel, &case.range, &case.args, &mut actual)
            .map_err(|e| e.to_string())
            .and_then(|()| results_match(&expected, &actual));
        if let Err(e) = outcome {
            failures.push(format!("case {n}: {e}\n{}", case.kernel));
        }
    }
    eprintln!("{} of {cases} random kernels match the interpreter", cases - failures.len());
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n\n"));
}

/// The device through a `Context`, a `Queue` and the persistent cache: built PTX is stored,
/// and a second context loads it from disk (the cached cubin, or PTX if linking failed).
#[test]
fn context_queue_and_persistent_cache() {
    let Some(dev) = device() else { return };
    common::context_round_trip(std::sync::Arc::new(dev), "cuda");
}

/// A damaged program binary is a load error, never a panic or a launch of garbage.
#[test]
fn damaged_binaries_do_not_load() {
    let Some(dev) = device() else { return };
    common::damaged_binaries_do_not_load(&dev);
}

/// Issue 29 (W1): NaN payloads, signalling ones included, that a kernel only moves keep every
/// bit on the CUDA device, as on the interpreter.
#[test]
fn nan_payloads_are_copied_bit_for_bit() {
    let Some(dev) = device() else { return };
    for ty in [kiln_ir::Scalar::F16, kiln_ir::Scalar::F32, kiln_ir::Scalar::F64] {
        let (case, want) = kiln_ir::testing::nan_copy_case(ty);
        let mut got = case.buffers.clone();
        dev.build_and_run(&case.kernel, &case.range, &case.args, &mut got)
            .unwrap_or_else(|e| panic!("{ty}: {e}"));
        kiln_ir::testing::bits_match(&want, &got).unwrap_or_else(|e| panic!("{ty}: {e}"));
    }
}
