//! The x86 JIT's 8-lane code on f64 values (four lanes per YMM register, two registers a
//! value): `+ - * /`, `-`, `abs`, `sqrt`, `fma`, `floor`/`ceil`/`trunc`, `min`/`max` with
//! the interpreter's NaN and signed-zero rules, comparisons, `select`, `let`s and `var`s
//! (blended under divergent control), scalar parameters, loads and stores of every shape
//! (at `global_id(0)`, gathers and per-lane stores with bounds faults) and the casts to and
//! from f32, i32, u32, the 8/16-bit integers and bool (saturating, NaN to 0) — against the
//! scalar code and the interpreter, bits and errors compared, over edge values (NaNs with
//! payloads, infinities, signed zeros, subnormals, values past every integer range) and
//! random kernels. Each kernel must get vector code.
//!
//! `X86_SPMD_WIDE64_CASES=N` raises the number of random kernels (default 64).
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{avx2, fallback, kernel, three_ways};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Kernel, Scalar};
use proptest::prelude::*;

const PARAMS: &str = "x: ptr<global, f64>, y: ptr<global, f64>, a: ptr<global, f32>, \
     c: ptr<global, i32>, u: ptr<global, u32>, o: ptr<global, f64>, of: ptr<global, f32>, \
     oi: ptr<global, i32>, ou: ptr<global, u32>, o8: ptr<global, i8>, s: f64, flag: bool";

fn edge_f64() -> Vec<f64> {
    let base = [
        0.0,
        -0.0,
        1.0,
        -1.5,
        2.5,
        f64::NAN,
        -f64::NAN,
        f64::from_bits(0x7ff4_0000_0000_0001),
        f64::from_bits(0xfff8_0000_0000_1234),
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MAX,
        f64::MIN_POSITIVE,
        5e-324,
        -5e-324,
        2147483647.5,
        2147483648.0,
        -2147483648.9,
        -2147483649.0,
        4294967295.9,
        4294967296.0,
        1e300,
        3.4028235677973366e38,
        1.401298464324817e-45,
        0.1,
        -7.75,
        127.5,
        -300.0,
    ];
    (0..64).map(|i| base[(i * 5) % base.len()]).collect()
}

fn bufs() -> Vec<Buffer> {
    let f = edge_f64();
    let g: Vec<f64> = f.iter().cycle().skip(3).take(64).copied().collect();
    let fs: Vec<f32> =
        [0.0f32, -0.0, f32::NAN, f32::from_bits(0x7fa0_0001), f32::INFINITY, 1e-45, 3.5, -1e30]
            .iter()
            .cycle()
            .take(64)
            .copied()
            .collect();
    let is: Vec<i32> =
        (0..64).map(|j| [0, -1, i32::MIN, i32::MAX, 7, -100, 63, 64][j % 8]).collect();
    let us: Vec<u32> =
        (0..64).map(|j| [0, 1, u32::MAX, 0x8000_0000, 63, 70, 5, 1000][j % 8]).collect();
    vec![
        Buffer::from_slice(&f),
        Buffer::from_slice(&g),
        Buffer::from_slice(&fs),
        Buffer::from_slice(&is),
        Buffer::from_slice(&us),
        Buffer::zeroed(Scalar::F64, 64),
        Buffer::zeroed(Scalar::F32, 64),
        Buffer::zeroed(Scalar::I32, 64),
        Buffer::zeroed(Scalar::U32, 64),
        Buffer::zeroed(Scalar::I8, 64),
    ]
}

fn args(s: f64, flag: bool) -> Vec<Arg> {
    let mut v: Vec<Arg> = (0..10).map(Arg::Buffer).collect();
    v.extend([Arg::scalar(s), Arg::scalar(flag)]);
    v
}

fn wide_kernel(body: &str) -> Kernel {
    kernel(&format!("kernel k({PARAMS}) {{ let i: u32 = global_id(0); {body} }}"))
}

fn run_cases(body: &str) {
    let k = wide_kernel(body);
    assert_eq!(fallback(&k), None, "{k}");
    for local in [8u32, 16, 64] {
        for (s, flag) in [(0.5, true), (f64::NAN, false), (-0.0, true)] {
            let r = NdRange::new(&[64]).with_local(&[local]);
            assert_eq!(three_ways(&k, &r, &args(s, flag), &bufs()), avx2(), "{k}");
        }
    }
}

#[test]
fn f64_arithmetic_and_rounding_give_the_interpreters_bits() {
    run_cases("o[i] = x[i] + y[i] * s - x[i] / y[i];");
    run_cases("o[i] = -x[i] + abs(y[i]) * sqrt(x[i]);");
    run_cases("o[i] = floor(x[i]) + ceil(y[i]) - trunc(x[i] * 0.75);");
    run_cases("o[i] = fma(x[i], y[i], s) - fma(s, x[i], y[i]);");
}

#[test]
fn f64_exp_gives_the_interpreters_bits_over_its_whole_range() {
    run_cases("o[i] = exp(x[i]) + exp(y[i] * s);");
    run_cases("o[i] = s * exp(x[i] - y[i]);");
    // A sweep of [-750, 712] (overflow, subnormal results, underflow to 0) with specials.
    let k = wide_kernel("o[i] = exp(x[i]); of[i] = (exp(y[i]) as f32);");
    assert_eq!(fallback(&k), None, "{k}");
    let mut b = bufs();
    for run in 0..8 {
        let xs: Vec<f64> = (0..64).map(|j| -750.0 + (run * 64 + j) as f64 * 2.857_123).collect();
        b[0] = Buffer::from_slice(&xs);
        b[1] = Buffer::from_slice(&xs.iter().map(|v| v * 1e-3 + 709.78).collect::<Vec<_>>());
        let r = NdRange::new(&[64]).with_local(&[64]);
        assert_eq!(three_ways(&k, &r, &args(0.5, true), &b), avx2());
    }
}

#[test]
fn f64_log_gives_the_interpreters_bits_over_its_whole_range() {
    run_cases("o[i] = log(x[i]) + log(y[i] * s);");
    // Subnormals, around 1, powers of two, huge values, negatives, with specials.
    let k = wide_kernel("o[i] = log(x[i]); of[i] = (log(y[i]) as f32);");
    assert_eq!(fallback(&k), None, "{k}");
    let mut b = bufs();
    for run in 0..8u64 {
        let xs: Vec<f64> = (0..64u64)
            .map(|j| {
                f64::from_bits(((run * 64 + j) * 0x0020_0a3d_70a3_d70b) % 0x7ff0_0000_0000_0000)
            })
            .collect();
        b[0] = Buffer::from_slice(&xs);
        b[1] = Buffer::from_slice(
            &(0..64).map(|j| 1.0 + (j as f64 - 32.0) * 1e-9).collect::<Vec<_>>(),
        );
        let r = NdRange::new(&[64]).with_local(&[64]);
        assert_eq!(three_ways(&k, &r, &args(0.5, true), &b), avx2());
    }
}

#[test]
fn f64_min_max_keep_the_interpreters_nan_and_zero_rules() {
    run_cases("o[i] = min(x[i], y[i]) + max(y[i], s);");
    run_cases("o[i] = max(min(x[i], -0.0), 0.0) - min(max(s, y[i]), x[i]);");
}

#[test]
fn f64_comparisons_selects_and_vars() {
    run_cases(
        "let p: bool = x[i] < y[i];
         var v: f64 = x[i];
         if p || (y[i] != y[i]) { v = v * 2.0 + s; } else { v = select(x[i] >= s, y[i], -v); }
         o[i] = v;
         oi[i] = (p as i32) + ((x[i] == y[i]) as i32) + ((x[i] <= s) as i32) * 4;",
    );
    run_cases(
        "let t: f64 = s * 2.0;
         var acc: f64 = 0.0;
         for k: u32 in 0u32 .. (i & 3u32) { acc = acc + t + (k as f64); }
         o[i] = flag ? acc : x[i];",
    );
}

#[test]
fn f64_casts_saturate_and_round_as_the_interpreter() {
    run_cases(
        "of[i] = (x[i] as f32); o[i] = (a[i] as f64) + (c[i] as f64) + (u[i] as f64);
         ou[i] = (y[i] as u32); oi[i] = (x[i] as i32);",
    );
    run_cases(
        "o8[i] = (x[i] as i8); oi[i] = ((x[i] as bool) as i32) + ((o8[i] as f64) as i32);
         o[i] = (flag as f64) + ((c[i] as i8) as f64);",
    );
}

#[test]
fn f64_accesses_at_computed_indices_fault_and_collide_as_the_interpreter() {
    // u values run past the 64 elements: the first faulting work-item's error.
    run_cases("o[i] = x[u[i]];");
    run_cases("o[u[i] & 127u32] = y[i];");
    run_cases(
        "of[63u32 - i] = (x[(i * 7u32) & 63u32] as f32);
         o[i >> 1u32] = x[3u32] + y[i];",
    );
    // Masked: a vector store at `global_id(0)` and a checked per-lane one.
    run_cases("if c[i] < 0 { o[i] = x[i]; } else { o[i ^ 0u32] = y[i] + s; }");
}

/// A random f64 expression.
fn arb(depth: u32) -> BoxedStrategy<String> {
    let leaf = prop::sample::select(vec![
        "x[i]",
        "y[i]",
        "s",
        "(-0.0)",
        "0.0",
        "inf",
        "nan",
        "1.5",
        "(a[i] as f64)",
        "(c[i] as f64)",
    ])
    .prop_map(String::from)
    .boxed();
    if depth == 0 {
        return leaf;
    }
    let sub = || arb(depth - 1);
    prop_oneof![
        1 => leaf,
        3 => (sub(), prop::sample::select(vec!["+", "-", "*", "/"]), sub())
            .prop_map(|(x, o, y)| format!("({x} {o} {y})")),
        2 => (prop::sample::select(vec!["min", "max"]), sub(), sub())
            .prop_map(|(f, x, y)| format!("{f}({x}, {y})")),
        2 => (prop::sample::select(vec!["abs", "sqrt", "floor", "ceil", "trunc", "-", "exp", "log"]), sub())
            .prop_map(|(f, x)| format!("{f}({x})")),
        // (Each later operand takes two more registers: the last two are leaves.)
        1 => (sub(), arb(0), arb(0)).prop_map(|(x, y, z)| format!("fma({x}, {y}, {z})")),
        // (Branches of leaves: a select of deeper ones can need more than eight registers.)
        1 => (sub(), prop::sample::select(vec!["<", "<=", "==", "!=", ">", ">="]), sub(), arb(0), arb(0))
            .prop_map(|(p, o, q, x, y)| format!("select({p} {o} {q}, {x}, {y})")),
        1 => sub().prop_map(|x| format!("(({x} as f32) as f64)")),
    ]
    .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("X86_SPMD_WIDE64_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(64),
        ..ProptestConfig::default()
    })]
    #[test]
    fn random_f64_kernels_agree(
        e in arb(2),
        f in arb(2),
        local in prop::sample::select(vec![8u32, 16, 64]),
        s in prop::sample::select(vec![0.5f64, -0.0, f64::NAN, 3.0e9]),
    ) {
        let k = wide_kernel(&format!(
            "o[i] = {e}; oi[i] = ({f} as i32); ou[i] = ({e} as u32); of[i] = ({f} as f32);"
        ));
        prop_assert_eq!(fallback(&k), None, "{}", k);
        let r = NdRange::new(&[64]).with_local(&[local]);
        prop_assert_eq!(three_ways(&k, &r, &args(s, true), &bufs()), avx2(), "{}", k);
    }
}

const INT_PARAMS: &str = "p: ptr<global, i64>, q: ptr<global, u64>, c: ptr<global, i32>, \
     u: ptr<global, u32>, op: ptr<global, i64>, oq: ptr<global, u64>, o: ptr<global, f64>, \
     oi: ptr<global, i32>, o8: ptr<global, i8>, n: i64";

fn int_bufs() -> Vec<Buffer> {
    let ps = [
        0i64,
        1,
        -1,
        i64::MIN,
        i64::MAX,
        63,
        64,
        65,
        -64,
        1 << 40,
        -(1 << 53) - 1,
        3,
        0x1234_5678_9abc_def0,
    ];
    let qs =
        [0u64, 1, u64::MAX, 1 << 63, 63, 64, 127, (1 << 53) + 1, 0xdead_beef_0000_0001, 5, 1 << 32];
    let is = [0i32, -1, i32::MIN, i32::MAX, 7, -100, 63, 64];
    let us = [0u32, 1, u32::MAX, 0x8000_0000, 63, 70, 5, 1000];
    vec![
        Buffer::from_slice(&(0..64).map(|j| ps[(j * 5) % ps.len()]).collect::<Vec<_>>()),
        Buffer::from_slice(&(0..64).map(|j| qs[(j * 3) % qs.len()]).collect::<Vec<_>>()),
        Buffer::from_slice(&(0..64).map(|j| is[j % is.len()]).collect::<Vec<_>>()),
        Buffer::from_slice(&(0..64).map(|j| us[(j * 7) % us.len()]).collect::<Vec<_>>()),
        Buffer::zeroed(Scalar::I64, 64),
        Buffer::zeroed(Scalar::U64, 64),
        Buffer::zeroed(Scalar::F64, 64),
        Buffer::zeroed(Scalar::I32, 64),
        Buffer::zeroed(Scalar::I8, 64),
    ]
}

fn int_cases(body: &str) {
    let k = kernel(&format!("kernel k({INT_PARAMS}) {{ let i: u32 = global_id(0); {body} }}"));
    assert_eq!(fallback(&k), None, "{k}");
    for local in [8u32, 64] {
        for n in [3i64, -1, i64::MIN] {
            let mut args: Vec<Arg> = (0..9).map(Arg::Buffer).collect();
            args.push(Arg::scalar(n));
            let r = NdRange::new(&[64]).with_local(&[local]);
            assert_eq!(three_ways(&k, &r, &args, &int_bufs()), avx2(), "{k}");
        }
    }
}

#[test]
fn i64_u64_arithmetic_wraps_and_shifts_modulo_64() {
    int_cases(
        "op[i] = p[i] * p[i] + (p[i] - n) * 3i64;
         oq[i] = q[i] * q[i] - q[i] * 0xffffffffffu64 + (q[i] ^ ~q[i]);",
    );
    int_cases(
        "op[i] = (p[i] << p[i]) + (p[i] >> (p[i] & 127i64)) - -p[i];
         oq[i] = (q[i] >> q[i]) | (q[i] << 65u64) & (q[i] >> 1u64);",
    );
}

#[test]
fn i64_u64_compare_min_max_abs_select_and_vars() {
    int_cases(
        "op[i] = max(p[i], n) - min(abs(p[i]), 5i64);
         oq[i] = max(q[i], 64u64) + min(q[i], (p[i] as u64));
         oi[i] = ((p[i] < n) as i32) + ((q[i] >= 64u64) as i32) * 2 + ((p[i] != 3i64) as i32) * 4
           + ((q[i] > (n as u64)) as i32) * 8 + ((p[i] <= -1i64) as i32) * 16;",
    );
    int_cases(
        "var v: i64 = p[i];
         if v < 0i64 { v = -v; } else { v = v * 2i64; }
         op[i] = select(q[i] == 1u64, n, v);
         oq[i] = (p[i] as bool) ? q[i] : 7u64;",
    );
}

#[test]
fn i64_u64_casts_to_and_from_every_supported_type() {
    int_cases(
        "op[i] = (c[i] as i64) + (u[i] as i64) + ((c[i] as i8) as i64) + ((c[i] > 0) as i64);
         oq[i] = (c[i] as u64) ^ (u[i] as u64);
         oi[i] = (p[i] as i32) + ((q[i] as u32) as i32);
         o8[i] = (p[i] as i8) + (q[i] as i8);
         o[i] = (p[i] as f64) - (q[i] as f64);",
    );
}

#[test]
fn i64_u64_division_per_lane_wraps_and_faults_as_the_interpreter() {
    // p and q have zeroes: the lowest such work-item's error.
    int_cases("op[i] = p[i] / p[(i + 3u32) & 63u32];");
    int_cases("oq[i] = q[i] % q[(i * 5u32) & 63u32];");
    // Nonzero divisors: MIN / -1 wraps to MIN, MIN % -1 is 0; under divergent control.
    int_cases(
        "op[i] = p[i] / (p[(i + 1u32) & 63u32] | 1i64) + p[i] % ((p[i] & 3i64) - 2i64 | 1i64);
         if c[i] > 0 { oq[i] = q[i] / (q[i] >> 3u64 | 1u64) - q[i] % 7u64; }
         o8[i] = ((-9223372036854775808i64 / n) as i8) + ((n % -1i64) as i8);",
    );
    // Of uniform values by a constant: computed once per call, before the batch loop.
    int_cases(
        "let w: i64 = n / -1i64; let v: u64 = (n as u64) % 10u64; op[i] = w + p[i]; oq[i] = v;",
    );
}

#[test]
fn i64_accesses_at_computed_indices_fault_as_the_interpreter() {
    int_cases("op[i] = p[u[i]];");
    int_cases("oq[(c[i] as u32) & 127u32] = q[i];");
    int_cases("if c[i] < 0 { op[i] = p[i]; } else { oq[i ^ 0u32] = q[i] + 1u64; }");
}

/// A random expression of type `t` (i64 or u64; divisors made odd, so nonzero).
fn arb_int(t: &'static str, depth: u32) -> BoxedStrategy<String> {
    let leaf: BoxedStrategy<String> = if t == "i64" {
        prop::sample::select(vec![
            "p[i]",
            "n",
            "(-1i64)",
            "(-9223372036854775808i64)",
            "63i64",
            "(c[i] as i64)",
        ])
    } else {
        prop::sample::select(vec![
            "q[i]",
            "18446744073709551615u64",
            "64u64",
            "0u64",
            "(u[i] as u64)",
        ])
    }
    .prop_map(String::from)
    .boxed();
    if depth == 0 {
        return leaf;
    }
    let sub = move || arb_int(t, depth - 1);
    let other = if t == "i64" { "u64" } else { "i64" };
    prop_oneof![
        1 => leaf,
        3 => (sub(), prop::sample::select(vec!["+", "-", "*", "&", "|", "^", "<<", ">>"]), arb_int(t, 0))
            .prop_map(|(x, o, y)| format!("({x} {o} {y})")),
        1 => (sub(), prop::sample::select(vec!["/", "%"]), arb_int(t, 0))
            .prop_map(move |(x, o, y)| format!("({x} {o} ({y} | 1{t}))")),
        1 => (prop::sample::select(vec!["min", "max"]), sub(), arb_int(t, 0))
            .prop_map(|(f, x, y)| format!("{f}({x}, {y})")),
        1 => (prop::sample::select(vec!["abs", "-", "~"]), sub()).prop_map(|(f, x)| format!("{f}({x})")),
        1 => arb_int(other, depth - 1).prop_map(move |x| format!("({x} as {t})")),
        1 => (sub(), prop::sample::select(vec!["<", "==", ">="]), arb_int(t, 0), arb_int(t, 0), arb_int(t, 0))
            .prop_map(|(p, o, q, x, y)| format!("select({p} {o} {q}, {x}, {y})")),
    ]
    .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("X86_SPMD_WIDE64_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(64),
        ..ProptestConfig::default()
    })]
    #[test]
    fn random_i64_u64_kernels_agree(
        e in arb_int("i64", 3),
        f in arb_int("u64", 3),
        local in prop::sample::select(vec![8u32, 64]),
        n in prop::sample::select(vec![0i64, -1, i64::MIN, 1 << 33]),
    ) {
        let k = kernel(&format!(
            "kernel k({INT_PARAMS}) {{ let i: u32 = global_id(0);
               op[i] = {e}; oq[i] = {f}; oi[i] = ({e} as i32) ^ (({f} as u32) as i32);
               o[i] = ({e} as f64) + ({f} as f64); }}"
        ));
        // (A 64-bit value takes two registers: deep expressions spill them, `spill.rs`.)
        prop_assert_eq!(fallback(&k), None, "{}", k);
        let mut args: Vec<Arg> = (0..9).map(Arg::Buffer).collect();
        args.push(Arg::scalar(n));
        let r = NdRange::new(&[64]).with_local(&[local]);
        prop_assert_eq!(three_ways(&k, &r, &args, &int_bufs()), avx2(), "{}", k);
    }
}

/// The conversions between i64/u64 and the floats in the lanes (`int64.rs`): from f32 and
/// f64 truncated and saturating (NaN 0, past either end the type's bound), to f32 rounded
/// once (also above 2^53, where the lanes round to odd first) and to f64 — on values at
/// every edge (2^53 and its neighbours, f32 ties and values just past them, ±2^63, 2^64,
/// the largest doubles below them) and on random bits, each kernel getting vector code.
fn conversion_cases(xs: &[f32], ds: &[f64], ps: &[i64], qs: &[u64]) {
    let k = kernel(
        "kernel k(x: ptr<global, f32>, d: ptr<global, f64>, p: ptr<global, i64>, q: ptr<global, u64>,
                  op: ptr<global, i64>, oq: ptr<global, u64>, of: ptr<global, f32>, o: ptr<global, f64>) {
           let i: u32 = global_id(0);
           op[i] = (x[i] as i64) ^ ((d[i] as i64) << 1i64);
           oq[i] = (x[i] as u64) ^ ((d[i] as u64) << 1u64);
           op[i + 64u32] = d[i] as i64;
           oq[i + 64u32] = d[i] as u64;
           of[i] = p[i] as f32;
           of[i + 64u32] = q[i] as f32;
           o[i] = (p[i] as f64) + ((q[i] as f32) as f64);
         }",
    );
    assert_eq!(fallback(&k), None, "{k}");
    let pick = |n: usize, j: usize| (j * 7 + j / 9) % n;
    let bufs = vec![
        Buffer::from_slice(&(0..64).map(|j| xs[pick(xs.len(), j)]).collect::<Vec<_>>()),
        Buffer::from_slice(&(0..64).map(|j| ds[pick(ds.len(), j)]).collect::<Vec<_>>()),
        Buffer::from_slice(&(0..64).map(|j| ps[pick(ps.len(), j)]).collect::<Vec<_>>()),
        Buffer::from_slice(&(0..64).map(|j| qs[pick(qs.len(), j)]).collect::<Vec<_>>()),
        Buffer::zeroed(Scalar::I64, 128),
        Buffer::zeroed(Scalar::U64, 128),
        Buffer::zeroed(Scalar::F32, 128),
        Buffer::zeroed(Scalar::F64, 64),
    ];
    let args: Vec<Arg> = (0..8).map(Arg::Buffer).collect();
    for local in [8u32, 64] {
        let r = NdRange::new(&[64]).with_local(&[local]);
        assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "{k}");
    }
}

#[test]
fn i64_u64_float_conversions_round_and_saturate_as_the_interpreter() {
    let two = |e: i32| 2f64.powi(e);
    let xs = [
        0.0f32,
        -0.0,
        -0.5,
        -1.0,
        1.5,
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        9.223372e18,
        -9.223372e18,
        1.8446743e19,
        1.8446744e19,
        4294967296.0,
        -4294967296.0,
        16777217.0,
        3.4e38,
        -3.4e38,
        1e-40,
    ];
    let ds = [
        0.0,
        -0.0,
        -0.9,
        -1.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        two(63),
        two(63) - 1024.0,
        -two(63),
        -two(63) - 2048.0,
        two(64),
        two(64) - 2048.0,
        two(53) + 2.0,
        -two(53) - 2.0,
        4294967296.5,
        4294967295.9,
        -4294967297.0,
        2147483648.0,
        -2147483648.5,
        1e300,
        -1e300,
        123456789012.75,
    ];
    let ps = [
        0i64,
        1,
        -1,
        i64::MIN,
        i64::MAX,
        1 << 53,
        (1 << 53) + 1,
        -(1 << 53) - 1,
        -(1 << 53),
        (1 << 24) + 1,
        (1 << 60) + (1 << 36),
        (1 << 60) + (1 << 36) + 1,
        (1 << 60) + (1 << 36) - 1,
        (1 << 60) + (3 << 36),
        -(1 << 60) - (1 << 36),
        -(1 << 60) - (1 << 36) - 1,
        0x0123_4567_89ab_cdef,
        -0x0123_4567_89ab_cdef,
        (1 << 62) + 0x7ff,
        (1 << 62) + 0x800,
    ];
    let qs = [
        0u64,
        1,
        u64::MAX,
        u64::MAX - 0x7ff,
        1 << 63,
        (1 << 63) + (1 << 39),
        (1 << 63) + (1 << 39) + 1,
        (1 << 63) + (3 << 39),
        1 << 53,
        (1 << 53) + 1,
        (1 << 54) + 3,
        0xfedc_ba98_7654_3210,
        (1 << 24) + 1,
        (1 << 40) + (1 << 16),
    ];
    conversion_cases(&xs, &ds, &ps, &qs);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// The conversions on random bits (every exponent of the floats, every magnitude of the
    /// integers) and random values near the ranges' ends.
    #[test]
    fn random_i64_u64_float_conversions_agree(
        xb in prop::collection::vec(any::<u32>(), 16),
        db in prop::collection::vec(any::<u64>(), 16),
        dv in prop::collection::vec(-2e19f64..2e19, 8),
        pb in prop::collection::vec(any::<i64>(), 16),
        shift in 0u32..64,
    ) {
        let xs: Vec<f32> = xb.iter().map(|&b| f32::from_bits(b)).collect();
        let mut ds: Vec<f64> = db.iter().map(|&b| f64::from_bits(b)).collect();
        ds.extend(dv);
        let ps: Vec<i64> = pb.iter().map(|&v| v >> (shift % 64)).collect();
        let qs: Vec<u64> = pb.iter().map(|&v| (v as u64) >> (shift % 64)).collect();
        conversion_cases(&xs, &ds, &ps, &qs);
    }
}

#[test]
fn private_arrays_of_f64_live_on_the_lanes() {
    // Each lane its own elements: filled at lane-varying indices, read back at others,
    // under divergent control, in a loop, and past the end (u values up to u32::MAX: the
    // first faulting work-item's error, load and store).
    run_cases(
        "private t: f64[8];
         for j: u32 in 0 .. 8 { t[(j + i) & 7u32] = x[(i + j) & 63u32] * (j as f64); }
         if c[i] < 0 { t[i & 3u32] = y[i] + s; }
         o[i] = t[(i * 5u32) & 7u32] - t[i & 7u32];",
    );
    run_cases("private t: f64[70]; t[u[i] & 63u32] = x[i]; o[i] = t[(u[i] & 63u32) ^ 1u32];");
    run_cases("private t: f64[64]; t[i] = y[i]; o[i] = t[u[i]];");
    run_cases("private t: f64[64]; t[u[i]] = y[i]; o[i] = t[i];");
    // Signed indices: negative ones fault too. Zeroed at the declaration.
    run_cases("private t: f64[16]; if flag { t[c[i] & 15] = x[i]; } o[i] = t[c[i] % 16];");
}

#[test]
fn private_arrays_of_i64_and_u64_live_on_the_lanes() {
    int_cases(
        "private a: i64[4]; private b: u64[5];
         for j: u32 in 0 .. 4 { a[j] = p[(i + j) & 63u32] * n; b[j + 1u32] = q[i] >> (j as u64); }
         op[i] = a[(i + 1u32) & 3u32] + (b[u[i] % 5u32] as i64);
         oq[i] = b[u[i] & 7u32];",
    );
}
