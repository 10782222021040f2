//! The default optimization pipeline's output on the CUDA device: random kernels (which
//! use integer `mad`/`add3`) and loop nests, optimized with `-O` (peephole `mad`/`add3`
//! fusion, induction variables, CSE lets), must give the interpreter's results for the
//! original kernel, bit for bit. Without a CUDA driver and device the tests skip with a
//! message, unless `KILN_REQUIRE_CUDA=1`, when they fail. `KILN_CUDA_CASES` sets the number
//! of random kernels (default 300).

use kiln_ir::testing::{arb_kernel, results_match};
use kiln_ir::{parse_module, Kernel};
use kiln_passes::pipeline::optimize;
use kiln_runtime::device::cuda::CudaDevice;
use kiln_runtime::{Device, DeviceError};
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

#[test]
fn optimized_random_kernels_match_the_interpreter() {
    let Some(dev) = device() else { return };
    let cases: usize =
        std::env::var("KILN_CUDA_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(300);
    let mut runner = TestRunner::deterministic();
    let mut failures = Vec::new();
    for n in 0..cases {
        let case = arb_kernel().new_tree(&mut runner).unwrap().current();
        let expected = case.run().unwrap();
        let k: Kernel = optimize(&case.kernel);
        let mut actual = case.buffers.clone();
        let outcome = dev
            .build_and_run(&k, &case.range, &case.args, &mut actual)
            .map_err(|e| e.to_string())
            .and_then(|()| results_match(&expected, &actual));
        if let Err(e) = outcome {
            failures.push(format!("case {n}: {e}\n{k}"));
        }
    }
    eprintln!("{} of {cases} optimized random kernels match", cases - failures.len());
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n\n"));
}

/// Wrapping edge cases of `mad`/`add3` (as written and as fused by the peephole) and of a
/// reduced induction variable, on every integer width PTX computes in.
#[test]
fn fused_integer_arithmetic_wraps_like_the_interpreter() {
    let src = "kernel k(o: ptr<global, i8>, p: ptr<global, u16>, q: ptr<global, i32>, r: ptr<global, u64>, s: u64) {
      let i: u32 = global_id(0);
      o[i] = mad(o[i], 127i8, -128i8) + add3(o[i], 100i8, 100i8);
      p[i] = p[i] * 65535u16 + p[i] + (p[i] + 7u16);
      q[i] = mad(q[i], 2147483647, q[i]) + add3(q[i], -2147483648, q[i]);
      var acc: u64 = 0u64;
      for j: u64 in 18446744073709551600u64 .. 18446744073709551615u64 step 3u64 {
        acc = acc ^ (j * s + r[i]);
      }
      r[i] = acc;
    }";
    let k = parse_module(src).unwrap().kernels.remove(0);
    use kiln_ir::launch::{Arg, Buffer, NdRange};
    let n = 64usize;
    let bufs = vec![
        Buffer::from_slice(&(0..n).map(|i| (i as i8).wrapping_mul(37)).collect::<Vec<_>>()),
        Buffer::from_slice(&(0..n).map(|i| (i as u16).wrapping_mul(4099)).collect::<Vec<_>>()),
        Buffer::from_slice(
            &(0..n).map(|i| (i as i32).wrapping_mul(0x2345_6789)).collect::<Vec<_>>(),
        ),
        Buffer::from_slice(
            &(0..n).map(|i| (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect::<Vec<_>>(),
        ),
    ];
    let range = NdRange::new(&[n as u32]);
    let args = [
        Arg::Buffer(0),
        Arg::Buffer(1),
        Arg::Buffer(2),
        Arg::Buffer(3),
        Arg::scalar(0xfedc_ba98_7654_3211u64),
    ];
    let mut expected = bufs.clone();
    kiln_ir::interp::run(&k, &range, &args, &mut expected).unwrap();
    // The optimized kernel (fused, with an induction variable) on the interpreter first.
    let opt = optimize(&k);
    let text = opt.to_string();
    assert!(text.contains("mad(") && text.contains("_iv0"), "{opt}");
    let mut on_interp = bufs.clone();
    kiln_ir::interp::run(&opt, &range, &args, &mut on_interp).unwrap();
    results_match(&expected, &on_interp).unwrap_or_else(|e| panic!("{e}\n{opt}"));
    let Some(dev) = device() else { return };
    for kernel in [k.clone(), opt] {
        let mut actual = bufs.clone();
        dev.build_and_run(&kernel, &range, &args, &mut actual)
            .unwrap_or_else(|e| panic!("{e}\n{kernel}"));
        results_match(&expected, &actual).unwrap_or_else(|e| panic!("{e}\n{kernel}"));
    }
}
