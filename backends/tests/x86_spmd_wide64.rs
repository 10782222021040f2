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

use x86_common::{avx2, kernel, three_ways};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Kernel, Scalar};
use proptest::prelude::*;

/// Why `k` has no 8-lane code (plain and `-O`), `None` if it has (or without AVX2).
fn fallback(k: &Kernel) -> Option<String> {
    if !avx2() {
        return None;
    }
    for optimize in [false, true] {
        let p = compile(k, &X86Options { optimize, ..X86Options::default() }).unwrap();
        if !p.has_spmd() {
            let d = p.disassemble();
            let why = d.lines().find(|l| l.starts_with("; no 8-lane")).unwrap_or("?");
            return Some(format!("{why} (optimize: {optimize})"));
        }
    }
    None
}

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
        2 => (prop::sample::select(vec!["abs", "sqrt", "floor", "ceil", "trunc", "-"]), sub())
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
