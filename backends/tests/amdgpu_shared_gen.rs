//! The AMDGPU backend against the shared kernel generator (`kiln_ir::testing`): every
//! generated kernel (all scalar types, f16, private arrays, atomics, generic pointers,
//! divergent control flow, several work-groups; only the approximate intrinsics off) must
//! compile, assemble with llvm-mc, and run in the simulator to the interpreter's exact
//! buffers.

use kiln_backends::amdgpu::{compile, sim};
use kiln_ir::testing::{arb_kernel_with, results_match, GenConfig};
use proptest::prelude::*;

mod amdgpu_common;
use amdgpu_common::assert_assembles;

fn config() -> GenConfig {
    GenConfig { approx_intrinsics: false, ..GenConfig::default() }
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
    use kiln_ir::launch::{Arg, Buffer, NdRange};
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
    use kiln_ir::launch::{Arg, Buffer, NdRange};
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

/// Every atomic operation on global and local memory, 32 and 64 bits, with contended and
/// private slots, old values kept; f32 add through the compare-and-swap loop.
#[test]
fn atomics_match_the_interpreter() {
    use kiln_ir::launch::{Arg, Buffer, NdRange};
    use kiln_ir::testing::TestCase;
    let k = amdgpu_common::kernel(
        "kernel a(c: ptr<global, u32>, d: ptr<global, i64>, f: ptr<global, f32>, o: ptr<global, u32>, p: ptr<global, i64>) {
            local t: i32[64];
            local u: u64[64];
            let i: u32 = global_id(0);
            t[local_id(0)] = i as i32 - 20;
            u[local_id(0)] = i as u64 * 3;
            barrier(local);
            atomic_add(c, 0, i);
            let o1: u32 = atomic_max(c, 1 + i % 2, i * 7 % 13);
            let o2: u32 = atomic_min(c, 3, i + 5);
            let o3: u32 = atomic_xor(c, 4, i);
            let o4: u32 = atomic_cmpxchg(c, 5 + i, i, 100);
            let o5: i64 = atomic_sub(d, i, i as i64 * -5);
            let o6: i64 = atomic_cmpxchg(d, 128 + i, 7, i as i64);
            let o7: i64 = atomic_min(d, 256, i as i64 - 30);
            atomic_add(f, 128 + i % 3, 0.25 * i as f32);
            let o8: f32 = atomic_add(f, i, 0.5);
            let o9: i32 = atomic_max(t, i % 64, 3);
            let o10: u64 = atomic_or(u, i % 64, 256);
            let o11: u64 = atomic_xchg(u, i % 64, 9);
            let o12: i32 = atomic_and(t, i % 64, 6);
            o[i * 6] = o1 + o2 + o3;
            o[i * 6 + 1] = o4;
            o[i * 6 + 2] = o9 as u32;
            o[i * 6 + 3] = o12 as u32;
            o[i * 6 + 4] = o8 as u32;
            o[i * 6 + 5] = (o10 + o11) as u32;
            p[i * 3] = o5;
            p[i * 3 + 1] = o6;
            p[i * 3 + 2] = o7;
            barrier(local);
            o[i * 6 + 5] = o[i * 6 + 5] + t[i % 64] as u32 + u[i % 64] as u32;
        }",
    );
    let n = 64usize;
    let dvals: Vec<i64> =
        (0..257).map(|j| if j >= 128 && j % 2 == 0 { 7 } else { j * 11 - 40 }).collect();
    let case = TestCase {
        kernel: k,
        range: NdRange::new(&[128]).with_local(&[64]),
        args: (0..5).map(Arg::Buffer).collect(),
        buffers: vec![
            Buffer::from_slice(&(0..140u32).map(|j| j * 3 % 17).collect::<Vec<_>>()),
            Buffer::from_slice(&dvals),
            Buffer::from_slice(&(0..131).map(|j| j as f32 * 0.75 - 9.0).collect::<Vec<_>>()),
            Buffer::zeroed(kiln_ir::Scalar::U32, 6 * 2 * n),
            Buffer::zeroed(kiln_ir::Scalar::I64, 3 * 2 * n),
        ],
    };
    let c = compile(&case.kernel).unwrap();
    assert_assembles(&c.asm);
    for needle in
        ["global_atomic_cmpswap_x2", "ds_max_rtn_i32", "ds_wrxchg_rtn_b64", "global_atomic_smin_x2"]
    {
        assert!(c.asm.contains(needle), "missing {needle}");
    }
    let want = case.run().unwrap();
    let mut got = case.buffers.clone();
    sim::run(&c, &case.kernel, &case.range, &case.args, &mut got).unwrap();
    results_match(&want, &got).unwrap();
}
