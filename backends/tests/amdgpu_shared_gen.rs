//! The AMDGPU backend against the shared kernel generator (`kiln_ir::testing`): every
//! generated kernel (all scalar types, f16, private arrays, divergent control flow, several
//! work-groups; atomics off, which the backend does not lower yet) must compile, assemble
//! with llvm-mc, and run in the simulator to the interpreter's exact buffers.

use kiln_backends::amdgpu::{compile, sim};
use kiln_ir::testing::{arb_kernel_with, results_match, GenConfig};
use proptest::prelude::*;

mod amdgpu_common;
use amdgpu_common::assert_assembles;

fn config() -> GenConfig {
    GenConfig { atomics: false, approx_intrinsics: false, ..GenConfig::default() }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("AMDGPU_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(48),
        ..ProptestConfig::default()
    })]
    #[test]
    fn shared_generator_kernels_compile_and_match(case in arb_kernel_with(config())) {
        let c = compile(&case.kernel);
        prop_assert!(c.is_ok(), "{:?}\n{}", c.as_ref().err(), case.kernel);
        let c = c.unwrap();
        assert_assembles(&c.asm);
        let want = case.run().unwrap();
        let mut got = case.buffers.clone();
        let r = sim::run(&c, &case.kernel, &case.range, &case.args, &mut got);
        prop_assert!(r.is_ok(), "{:?}\n{}\n{}", r, case.kernel, c.asm);
        let m = results_match(&want, &got);
        prop_assert!(m.is_ok(), "{:?}\n{}\n{}", m, case.kernel, c.asm);
    }
}

/// Edge inputs of the f32/f64 division and square-root sequences.
#[test]
fn division_and_sqrt_edges() {
    use kiln_ir::interp::{Arg, Buffer, NdRange};
    use kiln_ir::testing::TestCase;
    let k = amdgpu_common::kernel(
        "kernel d(x: ptr<global, f32>, y: ptr<global, f32>, o: ptr<global, f32>, p: ptr<global, f64>, q: ptr<global, f64>, r: ptr<global, f64>) {
            let i: u32 = local_id(0);
            o[i * 2] = x[i] / y[i];
            o[i * 2 + 1] = sqrt(x[i]);
            r[i * 2] = p[i] / q[i];
            r[i * 2 + 1] = sqrt(p[i]);
        }",
    );
    let xs: Vec<f32> = vec![
        -10.0,
        1.0,
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NAN,
        3.0,
        1e-40,
        7.0,
        f32::MAX,
        1e-45,
        2.0,
        10.0,
        0.1,
        5.5,
        1e30,
    ];
    let ys: Vec<f32> = vec![
        3.0,
        3.0,
        0.0,
        2.0,
        f32::INFINITY,
        1.0,
        0.0,
        3.0,
        1e-40,
        0.5,
        3.0,
        1e38,
        7.0,
        0.3,
        -2.5,
        1e-10,
    ];
    let ps: Vec<f64> = xs
        .iter()
        .map(|&v| v as f64 * 1.37)
        .chain([f64::MIN_POSITIVE, 5e-324, 1e308, -2.0])
        .collect();
    let qs: Vec<f64> = ys.iter().map(|&v| v as f64 * 0.71).chain([3.0, 3.0, 1e-308, 3.0]).collect();
    let n = ps.len();
    let mut xs = xs;
    let mut ys = ys;
    xs.resize(n, 1.5);
    ys.resize(n, 2.5);
    let case = TestCase {
        kernel: k,
        range: NdRange::new(&[n as u32]).with_local(&[n as u32]),
        args: (0..6).map(Arg::Buffer).collect(),
        buffers: vec![
            Buffer::from_slice(&xs),
            Buffer::from_slice(&ys),
            Buffer::zeroed(kiln_ir::Scalar::F32, 2 * n),
            Buffer::from_slice(&ps),
            Buffer::from_slice(&qs),
            Buffer::zeroed(kiln_ir::Scalar::F64, 2 * n),
        ],
    };
    let c = compile(&case.kernel).unwrap();
    assert_assembles(&c.asm);
    let want = case.run().unwrap();
    let mut got = case.buffers.clone();
    sim::run(&c, &case.kernel, &case.range, &case.args, &mut got).unwrap();
    results_match(&want, &got).unwrap();
}

/// A NaN from `sqrt` of a negative in a uniform loop condition (found by the generator).
#[test]
fn nan_condition_in_uniform_loop() {
    use kiln_ir::interp::{Arg, Buffer, NdRange};
    use kiln_ir::testing::TestCase;
    let k = amdgpu_common::kernel(
        "kernel k(out0: ptr<global, u32>) {
            var w0: i32 = 0;
            while w0 < 2 && -sqrt(-10.0) > 17.0 {
                w0 = w0 + 1;
            }
            out0[local_id(0)] = w0 as u32;
        }",
    );
    let case = TestCase {
        kernel: k,
        range: NdRange::new(&[4]).with_local(&[4]),
        args: vec![Arg::Buffer(0)],
        buffers: vec![Buffer::zeroed(kiln_ir::Scalar::U32, 4)],
    };
    let c = compile(&case.kernel).unwrap();
    let want = case.run().unwrap();
    let mut got = case.buffers.clone();
    sim::run(&c, &case.kernel, &case.range, &case.args, &mut got).unwrap();
    results_match(&want, &got).unwrap();
}
