//! `sin` and `cos` of one argument, `let`s of one block (`backends/src/x86/spmd/math.rs`,
//! paired by `near.rs`): the first computes both from one reduction, the second reads its
//! value. Every lane must keep the interpreter's bits (kiln_ir::eval::math), NaN payloads
//! included, over special values (±0, ±inf, NaNs, subnormals, arguments at and above 2^28
//! where the reduction switches to the table), random bit patterns and ordinary arguments;
//! in either order, with other work between the two, under divergent control, in a loop,
//! with odd sizes and guards, plain and after `-O`; and a pair must cost one reduction.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{avx2, kernel, vector_listing};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Kernel, Scalar};
use kiln_runtime::device::cpu::{lane_groups_on_this_thread, CpuRun};

/// Special values, the edges of the paths, random bit patterns and ordinary arguments.
fn inputs() -> Vec<f32> {
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
        std::f32::consts::FRAC_PI_2,
        std::f32::consts::FRAC_PI_4,
        std::f32::consts::PI,
        -std::f32::consts::PI,
        268_435_456.0,
        -268_435_456.0,
        268_435_440.0,
        1e30,
        -1e38,
        16_367_173.0 * 2f32.powi(72),
        -16_367_173.0 * 2f32.powi(72),
    ];
    let h = 268_435_456f32.to_bits();
    v.extend((h - 20..h + 20).map(f32::from_bits));
    v.extend((h - 20..h + 20).map(|b| -f32::from_bits(b)));
    let mut s = 0x9e37_79b9u32;
    v.extend((0..5000).map(|_| {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        f32::from_bits(s)
    }));
    v.extend((0..2000).map(|i| i as f32 * 0.02 - 20.0));
    // An odd size: the last batch is partial (the kernels guard with `n`).
    v.truncate(v.len() / 8 * 8 - 3);
    v
}

/// Runs `k(x, o, n)` (`o` holds `outs` results per element, planar) on the interpreter, the
/// scalar code and the default and `-O` programs: every output must be the same bits.
/// Returns whether both programs ran every group on the 8-lane code.
fn bit_exact(k: &Kernel, x: &[f32], outs: usize) -> bool {
    let n = x.len();
    let range = NdRange::new(&[n.next_multiple_of(64) as u32]).with_local(&[64]);
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n as u32)];
    // (`x` padded to whole groups, so that the last one may run on the lanes too.)
    let mut padded = x.to_vec();
    padded.resize(n.next_multiple_of(64), 0.0);
    let bufs = vec![Buffer::from_slice(&padded), Buffer::zeroed(Scalar::F32, outs * n)];
    let mut want = bufs.clone();
    run(k, &range, &args, &mut want).unwrap();
    let bits = |b: &Buffer| b.to_vec::<f32>().unwrap().into_iter().map(f32::to_bits).collect();
    let want: Vec<u32> = bits(&want[1]);
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
            let groups = n.div_ceil(64) as u64;
            vector &= p.has_spmd() && lane_groups_on_this_thread() - before == groups;
        }
        let got: Vec<u32> = bits(&got[1]);
        for (j, (w, g)) in want.iter().zip(&got).enumerate() {
            let i = j % n;
            assert_eq!(
                w,
                g,
                "{k}\noutput {} of x[{i}] = {:e} ({:#010x}): interpreter {w:#010x}, program \
                 {g:#010x} (scalar: {}, -O: {})",
                j / n,
                x[i],
                x[i].to_bits(),
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

const ROTATE: &str = "kernel rotate(x: ptr<global, f32>, o: ptr<global, f32>, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    let t: f32 = x[i];
    let c: f32 = cos(t);
    let s: f32 = sin(t);
    o[i] = c;
    o[n + i] = s;
    o[2 * n + i] = 0.75 * c - 1.5 * s;
  }
}";

#[test]
fn a_sin_and_a_cos_of_one_let_keep_the_interpreters_bits() {
    let x = inputs();
    let k = kernel(ROTATE);
    if !expect_vector(bit_exact(&k, &x, 3), &k) {
        return;
    }
    // The other order, and an argument that is an expression of a `let`.
    let k = kernel(
        "kernel k(x: ptr<global, f32>, o: ptr<global, f32>, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    let t: f32 = x[i];
    let s: f32 = sin(t * 3.0 - 1.0);
    let c: f32 = cos(t * 3.0 - 1.0);
    o[i] = s;
    o[n + i] = c;
  }
}",
    );
    expect_vector(bit_exact(&k, &x, 2), &k);
}

#[test]
fn pairs_with_work_between_under_divergence_and_in_loops_keep_the_bits() {
    let x = inputs();
    let srcs = [
        // Other math between them (registers and slots in use), and a branch.
        "kernel a(x: ptr<global, f32>, o: ptr<global, f32>, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    let t: f32 = x[i];
    let s: f32 = sin(t);
    let e: f32 = exp(t * 0.01) + log(t * t + 1.0);
    if t > 0.5 {
      o[2 * n + i] = e * s;
    } else {
      o[2 * n + i] = cos(e);
    }
    let c: f32 = cos(t);
    o[i] = s + e;
    o[n + i] = c;
  }
}",
        // The pair inside a divergent branch, its argument from the other side's `let`.
        "kernel b(x: ptr<global, f32>, o: ptr<global, f32>, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    let t: f32 = x[i];
    o[i] = 0.0;
    o[n + i] = 0.0;
    if t < 100.0 && t > -3.0e9 {
      let c: f32 = cos(t);
      let s: f32 = sin(t);
      o[i] = c;
      o[n + i] = s;
    }
  }
}",
        // Pairs in a loop: of a loop-varying value, and of a fixed one.
        "kernel c(x: ptr<global, f32>, o: ptr<global, f32>, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    let t: f32 = x[i];
    var acc: f32 = 0.0;
    var acc2: f32 = 0.0;
    for k: u32 in 0 .. 3 {
      let a: f32 = t + k as f32;
      let s: f32 = sin(a);
      let c: f32 = cos(a);
      let s2: f32 = sin(t);
      let c2: f32 = cos(t);
      acc = acc + s * c;
      acc2 = acc2 + s2 - c2;
    }
    o[i] = acc;
    o[n + i] = acc2;
  }
}",
        // Two pairs of one argument, and a lone sin of it.
        "kernel d(x: ptr<global, f32>, o: ptr<global, f32>, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    let t: f32 = x[i];
    let c: f32 = cos(t);
    let s: f32 = sin(t);
    let c2: f32 = cos(t);
    let s2: f32 = sin(t);
    let s3: f32 = sin(t);
    o[i] = c - c2;
    o[n + i] = s * s2 + s3;
  }
}",
    ];
    for src in srcs {
        let k = kernel(src);
        if !expect_vector(bit_exact(&k, &x, 3), &k) {
            return;
        }
    }
}

#[test]
fn a_pair_costs_one_reduction() {
    if !avx2() || !std::arch::is_x86_feature_detected!("fma") {
        return kiln_ir::testing::skip("no AVX2+FMA on this CPU: no 8-lane math to look at");
    }
    // Each reduction of four lanes gathers three table rows for its huge lanes.
    let gathers = |src: &str| {
        vector_listing(&kernel(src)).iter().filter(|l| l.starts_with("vgatherdpd")).count()
    };
    let lone = gathers(&ROTATE.replace("let s: f32 = sin(t);", "let s: f32 = t;"));
    let pair = gathers(ROTATE);
    assert!(lone > 0);
    assert_eq!(pair, lone, "sin and cos of one `let` reduce it twice");
}
