//! `exp`, `log`, `sin` and `cos` on the cpu device: kernels using them get 8-lane code, and
//! every lane's result has the interpreter's bits (kiln_ir::eval::math), NaN payloads
//! included, like the scalar code's, over special values, random bit patterns of the whole
//! f32 range (so huge `sin`/`cos` arguments mixed with ordinary ones in a batch) and dense
//! runs where the functions switch paths; alone, nested in expressions (other registers in
//! use), under divergent control and after `-O`.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{avx2, kernel};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Kernel, Scalar};
use kiln_runtime::device::cpu::{lane_groups_on_this_thread, CpuRun};
use proptest::prelude::*;

/// Special values and the edges of each function's paths.
fn specials() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::from_bits(0x7fc0_0000),
        f32::from_bits(0xffc0_1234),
        f32::from_bits(0x7f80_0001),
        f32::from_bits(0xff80_4321),
        f32::MIN_POSITIVE,
        -f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::from_bits(0x8000_0001),
        f32::from_bits(0x007f_ffff),
        f32::MAX,
        f32::MIN,
        1.0,
        -1.0,
        88.72283,
        88.72284,
        89.0,
        -87.5,
        -103.0,
        -103.97,
        -104.0,
        -150.0,
        std::f32::consts::FRAC_PI_2,
        std::f32::consts::FRAC_PI_4,
        std::f32::consts::PI,
        268_435_456.0,
        -268_435_456.0,
        268_435_440.0,
        16_367_173.0 * 2f32.powi(72),
        -16_367_173.0 * 2f32.powi(72),
    ];
    // Around the sin/cos switch to the table, both ways.
    let h = 268_435_456f32.to_bits();
    v.extend((h - 20..h + 20).map(f32::from_bits));
    v.extend((h - 20..h + 20).map(|b| -f32::from_bits(b)));
    v
}

/// Random bit patterns (xorshift), every exponent equally likely.
fn random_bits(n: usize, mut s: u32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            f32::from_bits(s)
        })
        .collect()
}

/// Ordinary arguments: [-20, 20) in small steps.
fn ordinary(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32 * (40.0 / n as f32) - 20.0).collect()
}

/// The arguments of the tests, a whole number of work-groups of 64.
fn inputs() -> Vec<f32> {
    let mut v = specials();
    v.extend(random_bits(6000, 0x9e37_79b9));
    v.extend(ordinary(2000));
    v.resize(v.len().next_multiple_of(64), 0.5);
    v
}

fn bits(b: &Buffer) -> Vec<u32> {
    b.to_vec::<f32>().unwrap().into_iter().map(f32::to_bits).collect()
}

/// Runs `k(x, o)` (one work-item per element of `x`, groups of 64) on the interpreter, the
/// scalar code and the default and `-O` programs: the outputs must be the same bits.
/// Returns whether both programs ran every group on the 8-lane code.
fn bit_exact(k: &Kernel, x: &[f32]) -> bool {
    let n = x.len();
    let range = NdRange::new(&[n as u32]).with_local(&[64]);
    let args = [Arg::Buffer(0), Arg::Buffer(1)];
    let bufs = vec![Buffer::from_slice(x), Buffer::zeroed(Scalar::F32, n)];
    let mut want = bufs.clone();
    run(k, &range, &args, &mut want).unwrap();
    let want = bits(&want[1]);
    let mut vector = true;
    for opts in [
        X86Options { scalar: true, ..X86Options::default() },
        X86Options::default(),
        X86Options { optimize: true, ..X86Options::default() },
    ] {
        let p = compile(k, &opts).unwrap();
        let mut got = bufs.clone();
        let before = lane_groups_on_this_thread();
        p.run(&range, &args, &mut got).unwrap();
        if !opts.scalar {
            vector &= p.has_spmd() && lane_groups_on_this_thread() - before == n as u64 / 64;
        }
        let got = bits(&got[1]);
        for (i, (w, g)) in want.iter().zip(&got).enumerate() {
            assert_eq!(
                w,
                g,
                "{k}\nx[{i}] = {:e} ({:#010x}): interpreter {:#010x} ({:e}), program {:#010x} ({:e}) \
                 (scalar: {}, -O: {})",
                x[i],
                x[i].to_bits(),
                w,
                f32::from_bits(*w),
                g,
                f32::from_bits(*g),
                opts.scalar,
                opts.optimize
            );
        }
    }
    vector
}

fn expect_vector(has: bool, k: &Kernel) -> bool {
    if !avx2() || !std::arch::is_x86_feature_detected!("fma") {
        kiln_ir::testing::skip("no AVX2+FMA on this CPU: only the scalar code ran");
        return false;
    }
    assert!(has, "not every group ran on the 8-lane code:\n{k}");
    true
}

#[test]
fn each_function_gets_lanes_with_the_interpreters_bits() {
    let x = inputs();
    for f in ["exp", "log", "sin", "cos"] {
        let k = kernel(&format!(
            "kernel m(x: ptr<global, f32>, o: ptr<global, f32>) {{
                let i: u32 = global_id(0);
                o[i] = {f}(x[i]);
            }}"
        ));
        let has = bit_exact(&k, &x);
        if !expect_vector(has, &k) {
            return;
        }
    }
}

/// Calls nested in expressions (evaluated with other temporaries live), in `let`s, under
/// divergent branches, and a batch where only some lanes are huge.
#[test]
fn nested_and_divergent_calls_keep_the_bits() {
    let x = inputs();
    let srcs = [
        "kernel a(x: ptr<global, f32>, o: ptr<global, f32>) {
            let i: u32 = global_id(0);
            let v: f32 = x[i];
            o[i] = v * 0.5 + exp(v * 0.01) - sin(v * 3.0) * cos(log(v * v + 1.0));
        }",
        "kernel b(x: ptr<global, f32>, o: ptr<global, f32>) {
            let i: u32 = global_id(0);
            let v: f32 = x[i];
            if v > 0.0 {
                o[i] = log(v) + cos(v);
            } else {
                let e: f32 = exp(v);
                o[i] = e * sin(e + v);
            }
        }",
        "kernel c(x: ptr<global, f32>, o: ptr<global, f32>) {
            let i: u32 = global_id(0);
            o[i] = x[i] + x[i] * (1.0 - exp(x[i]));
        }",
    ];
    for src in srcs {
        let k = kernel(src);
        let has = bit_exact(&k, &x);
        if !expect_vector(has, &k) {
            return;
        }
    }
}

/// A random f32 expression over `a[i]`, `b[i]` and constants, with `exp`, `log`, `sin` and
/// `cos` anywhere in it.
fn arb_value(depth: u32) -> BoxedStrategy<String> {
    let leaf = prop_oneof![
        Just("a[i]".to_string()),
        Just("b[i]".to_string()),
        (-100f32..100.0).prop_map(|v| format!("{v:?}")),
    ];
    if depth == 0 {
        return leaf.boxed();
    }
    prop_oneof![
        1 => leaf,
        2 => (arb_value(depth - 1), prop::sample::select(vec!["+", "-", "*", "/"]), arb_value(depth - 1))
            .prop_map(|(a, op, b)| format!("({a} {op} {b})")),
        2 => (prop::sample::select(vec!["exp", "log", "sin", "cos"]), arb_value(depth - 1))
            .prop_map(|(f, a)| format!("{f}({a})")),
    ]
    .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("X86_MATH_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(48),
        ..ProptestConfig::default()
    })]
    /// Random expressions (math calls at every depth, so with other temporaries live) in a
    /// `let` and under a divergent `if`: the interpreter's bits, except that a NaN made by
    /// `+ - * /` may carry either operand's payload (unspecified in the IR).
    #[test]
    fn random_expressions_agree(v in arb_value(3), w in arb_value(2), seed in any::<u32>()) {
        let k = kernel(&format!(
            "kernel r(a: ptr<global, f32>, b: ptr<global, f32>, o: ptr<global, f32>) {{
                let i: u32 = global_id(0);
                let v: f32 = {v};
                if a[i] < b[i] {{ o[i] = v; }} else {{ o[i] = {w} + v; }}
            }}"
        ));
        let mut a = specials();
        a.extend(random_bits(40, seed | 1));
        a.extend(ordinary(40));
        a.resize(a.len().next_multiple_of(16), 2.0);
        let n = a.len();
        let mut b = ordinary(n);
        b.rotate_left(seed as usize % n);
        let range = NdRange::new(&[n as u32]).with_local(&[16]);
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
        let bufs = vec![Buffer::from_slice(&a), Buffer::from_slice(&b), Buffer::zeroed(Scalar::F32, n)];
        let mut want = bufs.clone();
        run(&k, &range, &args, &mut want).unwrap();
        let want = bits(&want[2]);
        for opts in [X86Options::default(), X86Options { optimize: true, ..X86Options::default() }] {
            let p = compile(&k, &opts).unwrap();
            let mut got = bufs.clone();
            p.run(&range, &args, &mut got).unwrap();
            for (i, (w, g)) in want.iter().zip(&bits(&got[2])).enumerate() {
                let (fw, fg) = (f32::from_bits(*w), f32::from_bits(*g));
                prop_assert!(
                    w == g || (fw.is_nan() && fg.is_nan()),
                    "{k}\nelement {i}: interpreter {w:#010x}, program {g:#010x} (-O: {})",
                    opts.optimize
                );
            }
        }
    }
}

/// `exp` at the edges of its lanes' clamp and bias: dense runs of bit patterns around
/// ±88.72 (overflow), ±87.34 (the smallest normal result), ±103.28 and ±103.97 (the last
/// denormal results), ±104 and ±150, NaN payloads of both signs, quiet and signalling,
/// each beside ordinary lanes of the same batch, and ±inf: the interpreter's bits.
#[test]
fn exp_at_its_clamp_edges_keeps_the_bits() {
    let mut x = Vec::new();
    for c in [88.72283f32, 87.33654, 103.27893, 103.972_08, 104.0, 150.0, 126.0, 0.0] {
        for s in [c, -c] {
            let b = s.to_bits();
            x.extend((b.saturating_sub(300)..b + 300).map(f32::from_bits));
        }
    }
    for p in [0x7fc0_0000u32, 0x7f80_0001, 0x7fbf_ffff, 0x7fff_ffff, 0x7fc0_0001, 0x7f81_2345] {
        for s in [p, p | 0x8000_0000] {
            // The NaN in every lane position, among ordinary arguments and extremes.
            for lane in 0..8 {
                let mut batch = [1.5f32, -100.0, 88.8, -104.0, 0.25, f32::INFINITY, -0.0, 3.0];
                batch[lane] = f32::from_bits(s);
                x.extend(batch);
            }
        }
    }
    x.extend([f32::INFINITY, f32::NEG_INFINITY, f32::MAX, f32::MIN, f32::from_bits(1)]);
    x.resize(x.len().next_multiple_of(64), f32::NAN);
    let k = kernel(
        "kernel m(x: ptr<global, f32>, o: ptr<global, f32>) {
            let i: u32 = global_id(0);
            let v: f32 = x[i];
            o[i] = exp(v) + exp(v * 0.5) * 0.0;
        }",
    );
    let plain = kernel(
        "kernel m(x: ptr<global, f32>, o: ptr<global, f32>) {
            let i: u32 = global_id(0);
            o[i] = exp(x[i]);
        }",
    );
    for k in [plain, k] {
        let has = bit_exact(&k, &x);
        if !expect_vector(has, &k) {
            return;
        }
    }
}
