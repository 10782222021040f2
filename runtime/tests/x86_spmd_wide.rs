//! The x86 JIT's 8-lane code on 8- and 16-bit integers (`i8`, `u8`, `i16`, `u16`, kept
//! extended in 32-bit lanes): loads and stores of every shape (at `global_id(0)`, at a
//! computed index with bounds faults, colliding per-lane stores), wrapping `+ - *`, shifts
//! by counts at and past the width, `& | ^ ~`, negation, `min`/`max`/`abs` (wrapping at
//! MIN), comparisons, `select`, `var`s, and the casts to and from every 32-bit type and
//! bool (saturating from f32, NaN to 0), `/` and `%` per lane (zero divisors, MIN / -1) —
//! against the scalar code and the interpreter, bits and errors compared: hand cases over
//! edge values and random kernels. Each kernel must get vector code (a fall back to the
//! scalar code fails here). A ledger of one kernel per type and family of operations pins
//! down which fall back (64-bit and f16 values) and that they say why.
//!
//! `X86_SPMD_WIDE_CASES=N` raises the number of random kernels (default 64).
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{avx2, fallback, kernel, three_ways};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Kernel, Scalar};
use kiln_runtime::device::cpu::CpuRun;
use proptest::prelude::*;

const PARAMS: &str = "c8: ptr<global, i8>, e8: ptr<global, i8>, d8: ptr<global, u8>, \
     g8: ptr<global, u8>, c16: ptr<global, i16>, d16: ptr<global, u16>, a: ptr<global, f32>, \
     o8: ptr<global, i8>, ou8: ptr<global, u8>, o16: ptr<global, i16>, ou16: ptr<global, u16>, \
     of: ptr<global, f32>, oi: ptr<global, i32>, n: i32, flag: bool";

/// 64 values cycling through `base` with stride `k`.
fn cyc<T: Copy>(base: &[T], k: usize) -> Vec<T> {
    (0..64).map(|i| base[(i * k) % base.len()]).collect()
}

/// The buffers of [`PARAMS`]: edge values (MIN, MAX, -1, 0, shift counts at and past the
/// width, f32 NaNs, infinities and values past every narrow range), then zeroed outputs.
fn bufs() -> Vec<Buffer> {
    let i8s = [0i8, 1, -1, 7, 8, 9, -128, 127, -127, 100, -100, 15, 16, 31, 33, 3];
    let u8s = [0u8, 1, 255, 7, 8, 9, 128, 127, 200, 100, 15, 16, 17, 254, 63, 3];
    let i16s = [0i16, 1, -1, 15, 16, 17, i16::MIN, i16::MAX, -300, 300, 255, -256, 31, 32, 5];
    let u16s = [0u16, 1, u16::MAX, 15, 16, 17, 0x8000, 0x7fff, 300, 255, 256, 31, 32, 5];
    let fs = [
        0.0f32,
        -0.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        127.5,
        128.0,
        -128.9,
        -129.0,
        255.9,
        256.0,
        -1.5,
        32767.9,
        -32769.0,
        65535.5,
        1e10,
        -1e10,
        0.7,
    ];
    vec![
        Buffer::from_slice(&cyc(&i8s, 1)),
        Buffer::from_slice(&cyc(&i8s, 5)),
        Buffer::from_slice(&cyc(&u8s, 1)),
        Buffer::from_slice(&cyc(&u8s, 3)),
        Buffer::from_slice(&cyc(&i16s, 1)),
        Buffer::from_slice(&cyc(&u16s, 7)),
        Buffer::from_slice(&cyc(&fs, 1)),
        Buffer::zeroed(Scalar::I8, 64),
        Buffer::zeroed(Scalar::U8, 64),
        Buffer::zeroed(Scalar::I16, 64),
        Buffer::zeroed(Scalar::U16, 64),
        Buffer::zeroed(Scalar::F32, 64),
        Buffer::zeroed(Scalar::I32, 64),
    ]
}

fn args(n: i32, flag: bool) -> Vec<Arg> {
    let mut v: Vec<Arg> = (0..13).map(Arg::Buffer).collect();
    v.extend([Arg::scalar(n), Arg::scalar(flag)]);
    v
}

/// A kernel over [`PARAMS`] with `body` after `let i: u32 = global_id(0);`.
fn wide_kernel(body: &str) -> Kernel {
    kernel(&format!("kernel k({PARAMS}) {{ let i: u32 = global_id(0); {body} }}"))
}

/// `body` gets vector code and agrees three ways over several group sizes and arguments.
fn run_cases(body: &str) {
    let k = wide_kernel(body);
    assert_eq!(fallback(&k), None, "{k}");
    for local in [8u32, 16, 64] {
        for (n, flag) in [(3, true), (-1, false)] {
            let r = NdRange::new(&[64]).with_local(&[local]);
            assert_eq!(three_ways(&k, &r, &args(n, flag), &bufs()), avx2(), "{k}");
        }
    }
}

/// Stores at `global_id(0)` of a whole batch pack the eight lanes' low bytes or words into one
/// store (a partial batch, under `i < n`, keeps one store per active lane): values with high
/// bits set are cut as the interpreter's wrapping casts cut them, in either path.
#[test]
fn narrow_stores_of_whole_batches_pack_the_lanes() {
    let k = wide_kernel(
        "let w: u32 = (d8[i] as u32) * 16843009u32 + (c16[i] as u32) * 65599u32;
         if (i as i32) < n {
           o8[i] = w as i8; ou8[i] = (w >> 3u32) as u8;
           o16[i] = w as i16; ou16[i] = (w >> 5u32) as u16;
         }",
    );
    assert_eq!(fallback(&k), None, "{k}");
    if avx2() {
        let listing = compile(&k, &X86Options::default()).unwrap().disassemble();
        assert!(listing.contains("vpackuswb") && listing.contains("vpermq"), "{listing}");
    }
    for local in [8u32, 16, 64] {
        for n in [64, 61, 13, 3, -1] {
            let r = NdRange::new(&[64]).with_local(&[local]);
            assert_eq!(three_ways(&k, &r, &args(n, true), &bufs()), avx2(), "{k}");
        }
    }
}

#[test]
fn narrow_arithmetic_wraps_as_the_interpreter() {
    run_cases(
        "o8[i] = c8[i] + e8[i] * 3i8 - 100i8;
         ou8[i] = d8[i] * g8[i] + 7u8 - d8[i];
         o16[i] = c16[i] * c16[i] - 30000i16;
         ou16[i] = d16[i] * 300u16 + d16[i];",
    );
    run_cases(
        "o8[i] = -c8[i] ^ (e8[i] & 15i8);
         ou8[i] = ~d8[i] | (g8[i] & 7u8);
         o16[i] = ~c16[i] + -c16[i];
         ou16[i] = -d16[i];",
    );
}

#[test]
fn narrow_shifts_take_counts_modulo_the_width() {
    run_cases(
        "o8[i] = c8[i] << e8[i];
         ou8[i] = d8[i] >> g8[i];
         o16[i] = c16[i] >> (c16[i] & 31i16);
         ou16[i] = d16[i] << (d16[i] & 31u16);",
    );
    run_cases("o8[i] = c8[i] >> e8[i]; ou8[i] = d8[i] << g8[i];");
}

#[test]
fn narrow_min_max_abs_compare_and_select() {
    run_cases(
        "o8[i] = abs(c8[i]) + min(c8[i], e8[i]);
         ou8[i] = max(d8[i], g8[i]) - min(d8[i], 9u8);
         o16[i] = abs(c16[i]);
         ou16[i] = max(d16[i], 300u16);",
    );
    run_cases(
        "var x: i8 = c8[i];
         if x < e8[i] { x = e8[i] - x; }
         let p: bool = d8[i] >= g8[i];
         o8[i] = select(p, x, -x);
         ou8[i] = p ? d8[i] : g8[i];
         ou16[i] = (c16[i] > -2i16) != flag ? d16[i] : 1u16;",
    );
}

#[test]
fn narrow_casts_extend_and_saturate_as_the_interpreter() {
    run_cases(
        "o8[i] = (a[i] as i8); ou8[i] = (a[i] as u8);
         o16[i] = (a[i] as i16); ou16[i] = (a[i] as u16);",
    );
    run_cases(
        "oi[i] = (c8[i] as i32) + (d8[i] as i32) * 1000 + (c16[i] as i32);
         of[i] = (c8[i] as f32) + (d16[i] as f32) * 0.5;
         ou8[i] = (c8[i] as u8) + (c16[i] as u8);
         o8[i] = (d16[i] as i8) - (d8[i] as i8);
         o16[i] = (c8[i] as i16) * (d8[i] as i16);
         ou16[i] = (c8[i] as u16) ^ ((oi[i] + n) as u16);",
    );
    // (The fuzz target's 8-lane case has this operation too.)
    run_cases(
        "let x: u32 = (oi[i] as u32) ^ i;
         of[i] = a[i] + ((((x as u8) * 37u8 + (x as u8)) >> 3u8) as f32)
           - (((a[i] * 100.0) as i16) as f32);",
    );
    run_cases(
        "o8[i] = (flag as i8) + ((a[i] > 0.5) as i8);
         oi[i] = ((c8[i] as u32) >> 24u32) as i32;",
    );
}

#[test]
fn narrow_accesses_at_computed_indices_fault_and_collide_as_the_interpreter() {
    // Indices from u8 data run past the 64 elements: the first faulting work-item's error.
    run_cases("o8[i] = c8[(d8[i] as u32)];");
    run_cases("ou16[(g8[i] as u32)] = d16[i];");
    // Reversed, strided and colliding stores (the last work-item wins), uniform loads.
    run_cases(
        "o8[63u32 - i] = e8[i];
         ou8[i >> 1u32] = d8[i];
         o16[(i * 7u32) & 63u32] = c16[3u32] + c16[i];",
    );
    // Inside divergent control, the stores masked.
    run_cases("if c8[i] < 0i8 { ou16[i] = d16[i] + 1u16; } else { o8[i] = e8[i]; }");
}

/// An f16 buffer of these bit patterns.
fn f16_buffer(bits: impl Iterator<Item = u16>) -> Buffer {
    Buffer::from_bytes(Scalar::F16, bits.flat_map(u16::to_le_bytes).collect()).unwrap()
}

#[test]
fn f16_loads_stores_and_casts_give_the_interpreters_bits() {
    if !std::arch::is_x86_feature_detected!("f16c") {
        kiln_ir::testing::skip("no F16C on this CPU: f16 stays on the scalar code");
        return;
    }
    // Every f16 bit pattern class: NaNs (quiet, signalling, payloads, both signs),
    // infinities, zeros, subnormals, the largest; f32s that round, overflow, underflow.
    let h: Vec<u16> = [
        0x0000u16, 0x8000, 0x0001, 0x83ff, 0x3c00, 0xbc00, 0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00,
        0xfe01, 0x7c01, 0xfd55, 0x3555, 0x0400,
    ]
    .iter()
    .cycle()
    .take(64)
    .copied()
    .collect();
    let k = kernel(
        "kernel k(x: ptr<global, f16>, y: ptr<global, f16>, a: ptr<global, f32>,
                  of: ptr<global, f32>, oi: ptr<global, i32>, ou8: ptr<global, u8>,
                  o: ptr<global, f16>, p: ptr<global, f16>) {
           let i: u32 = global_id(0);
           // (Checked accesses first: they need base registers, which go in first-use order.)
           p[(i * 3u32) & 63u32] = (((i as i32) * 1037 - 30000) as f16);
           let w: f16 = y[(i * 5u32) & 63u32];
           var v: f16 = x[i];
           if a[i] > 1.0 { v = (a[i] as f16); }
           of[i] = (v as f32) + (w as f32);
           oi[i] = (x[i] as i32) + ((oi[i] as f16) as i32);
           ou8[i] = (x[i] as u8);
           o[i] = ((a[i] * 3.0) as f16);
         }",
    );
    assert_eq!(fallback(&k), None, "{k}");
    let fs: Vec<f32> = [
        0.0f32,
        -0.0,
        1.0,
        65504.0,
        65519.9,
        65520.0,
        -70000.0,
        5.9604645e-8,
        2.9802322e-8,
        2.9802326e-8,
        f32::from_bits(0x3f80_1000), // 1 + 2^-11: a tie in f16
        1.0004883,
        f32::NAN,
        f32::from_bits(0x7fa0_1234),
        f32::from_bits(0xffc0_0001),
        f32::INFINITY,
        3.0e-5,
        -2.5,
    ]
    .iter()
    .cycle()
    .take(64)
    .copied()
    .collect();
    let bufs = vec![
        f16_buffer(h.iter().copied()),
        f16_buffer(h.iter().rev().copied()),
        Buffer::from_slice(&fs),
        Buffer::zeroed(Scalar::F32, 64),
        Buffer::from_slice(&(0..64).map(|j| j * 4099 - 70000).collect::<Vec<i32>>()),
        Buffer::zeroed(Scalar::U8, 64),
        Buffer::zeroed(Scalar::F16, 64),
        Buffer::zeroed(Scalar::F16, 64),
    ];
    let args: Vec<Arg> = (0..8).map(Arg::Buffer).collect();
    for local in [8u32, 64] {
        let r = NdRange::new(&[64]).with_local(&[local]);
        assert!(three_ways(&k, &r, &args, &bufs));
    }
}

#[test]
fn narrow_parameters_private_arrays_and_bool_casts() {
    let k = kernel(
        "kernel k(c8: ptr<global, i8>, d16: ptr<global, u16>, h: ptr<global, f16>,
                  o8: ptr<global, i8>, oi: ptr<global, i32>, of: ptr<global, f64>,
                  p8: i8, q16: u16, r: f16) {
           let i: u32 = global_id(0);
           private t: i8[8];
           private w: f16[2];
           t[i & 7u32] = c8[i] - p8;
           w[i & 1u32] = h[i];
           o8[i] = t[(i + 3u32) & 7u32] + t[i & 7u32];
           oi[i] = ((d16[i] > q16) as i32) + ((c8[i] as bool) as i32) * 2 + ((h[i] as bool) as i32) * 4
             + ((r as f32) as i32) * 8;
           of[i] = (w[i & 1u32] as f64) + (r as f64);
         }",
    );
    assert_eq!(fallback(&k), None, "{k}");
    let b = bufs();
    let h: Vec<u16> = [0x3c00u16, 0x8000, 0x0000, 0x7e00, 0xfc00, 0x0001, 0x7bff, 0xc500]
        .iter()
        .cycle()
        .take(64)
        .copied()
        .collect();
    let bufs = vec![
        b[0].clone(),
        b[5].clone(),
        f16_buffer(h.into_iter()),
        Buffer::zeroed(Scalar::I8, 64),
        Buffer::zeroed(Scalar::I32, 64),
        Buffer::zeroed(Scalar::F64, 64),
    ];
    for (p8, q16, r) in [(-128i8, 300u16, 0x4500u16), (7, 0, 0xfe00)] {
        let mut args: Vec<Arg> = (0..6).map(Arg::Buffer).collect();
        let r = kiln_ir::Imm::Float(Scalar::F16, f16_value(r));
        args.extend([Arg::scalar(p8), Arg::scalar(q16), Arg::Scalar(r)]);
        for local in [8u32, 64] {
            let range = NdRange::new(&[64]).with_local(&[local]);
            assert!(three_ways(&k, &range, &args, &bufs), "{k}");
        }
    }
}

/// The value of f16 bits, as an f16 immediate holds it.
fn f16_value(bits: u16) -> f64 {
    let b = f16_buffer(std::iter::once(bits));
    match b.get(0) {
        Some(kiln_ir::Imm::Float(_, v)) => v,
        _ => unreachable!("an f16 buffer holds floats"),
    }
}

#[test]
fn narrow_local_arrays_across_a_barrier() {
    run_cases(
        "local s8: i8[64];
         local s16: u16[64];
         let l: u32 = local_id(0);
         s8[l] = c8[i] * 3i8;
         s16[l] = d16[i] ^ 255u16;
         barrier(local);
         let r: u32 = (local_size(0) - 1u32) - l;
         o8[i] = s8[r] + s8[l];
         ou16[i] = s16[r];",
    );
}

#[test]
fn narrow_division_per_lane_wraps_and_faults_as_the_interpreter() {
    // e8 and g8 have zeroes: the lowest such work-item's error; `| 1` divisors: MIN / -1
    // wraps to MIN, `%` gives 0.
    run_cases("o8[i] = c8[i] / e8[i];");
    run_cases("ou8[i] = d8[i] % g8[i];");
    run_cases(
        "o8[i] = c8[i] / (e8[i] | 1i8) + c8[i] % (e8[i] | 1i8);
         ou8[i] = d8[i] / (g8[i] | 1u8);
         o16[i] = c16[i] / ((c16[i] & 7i16) - 1i16 | 1i16) - c16[i] % -1i16;
         ou16[i] = d16[i] % (d16[i] >> 4u16 | 1u16) + d16[i] / 3u16;",
    );
    run_cases("o8[i] = -128i8 / (e8[i] | -1i8);");
}

/// A random expression of narrow type `t` (divisors made odd, so nonzero).
fn arb(t: &'static str, depth: u32) -> BoxedStrategy<String> {
    let leaf: BoxedStrategy<String> = match t {
        "i8" => prop::sample::select(vec!["c8[i]", "e8[i]", "(-128i8)", "127i8", "(-1i8)", "9i8"]),
        "u8" => prop::sample::select(vec!["d8[i]", "g8[i]", "255u8", "0u8", "8u8"]),
        "i16" => prop::sample::select(vec!["c16[i]", "(-32768i16)", "16i16", "(-1i16)"]),
        _ => prop::sample::select(vec!["d16[i]", "65535u16", "17u16", "1u16"]),
    }
    .prop_map(String::from)
    .boxed();
    if depth == 0 {
        return leaf;
    }
    let sub = |u: &'static str| arb(u, depth - 1);
    let cast = prop_oneof![
        sub("i8").prop_map(|x| format!("({x} as T)")),
        sub("u8").prop_map(|x| format!("({x} as T)")),
        sub("i16").prop_map(|x| format!("({x} as T)")),
        sub("u16").prop_map(|x| format!("({x} as T)")),
        Just("(a[i] as T)".to_string()),
        Just("((n * 77) as T)".to_string()),
    ]
    .prop_map(move |x| x.replace("as T", &format!("as {t}")));
    let cmp = (sub(t), prop::sample::select(vec!["<", "<=", "==", "!=", ">", ">="]), sub(t))
        .prop_map(|(x, o, y)| format!("({x} {o} {y})"));
    prop_oneof![
        1 => leaf,
        3 => (sub(t), prop::sample::select(vec!["+", "-", "*", "&", "|", "^", "<<", ">>"]), sub(t))
            .prop_map(|(x, o, y)| format!("({x} {o} {y})")),
        1 => (sub(t), prop::sample::select(vec!["/", "%"]), sub(t))
            .prop_map(move |(x, o, y)| format!("({x} {o} ({y} | 1{t}))")),
        1 => (prop::sample::select(vec!["min", "max"]), sub(t), sub(t))
            .prop_map(|(f, x, y)| format!("{f}({x}, {y})")),
        1 => (prop::sample::select(vec!["abs", "-", "~"]), sub(t)).prop_map(|(f, x)| format!("{f}({x})")),
        2 => cast,
        1 => (cmp, sub(t), sub(t)).prop_map(|(c, x, y)| format!("select({c}, {x}, {y})")),
    ]
    .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("X86_SPMD_WIDE_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(64),
        ..ProptestConfig::default()
    })]
    #[test]
    fn random_narrow_kernels_agree(
        x8 in arb("i8", 2),
        xu8 in arb("u8", 2),
        x16 in arb("i16", 2),
        xu16 in arb("u16", 2),
        local in prop::sample::select(vec![8u32, 16, 64]),
        n in prop::sample::select(vec![0i32, -1, 1000]),
    ) {
        let k = wide_kernel(&format!(
            "o8[i] = {x8}; ou8[i] = {xu8}; o16[i] = {x16}; ou16[i] = {xu16};
             oi[i] = ({x8} as i32) + ({xu16} as i32);"
        ));
        prop_assert_eq!(fallback(&k), None, "{}", k);
        let r = NdRange::new(&[64]).with_local(&[local]);
        prop_assert_eq!(three_ways(&k, &r, &args(n, n > 0), &bufs()), avx2(), "{}", k);
    }
}

/// The fixed kernels of the fallback ledger: for each scalar type, one kernel per family of
/// operations (`o[i] = ...` over buffers `x`, `y` of that type).
fn ledger_kernels() -> Vec<(String, &'static str, Kernel)> {
    const INT: [(&str, &str); 7] = [
        ("arith", "x[i] + y[i] * x[i] - y[i]"),
        ("bits", "(x[i] & y[i]) | (x[i] ^ ~y[i])"),
        ("shift", "(x[i] << y[i]) + (x[i] >> y[i])"),
        ("neg", "-x[i]"),
        ("minmax", "max(x[i], y[i]) - min(abs(x[i]), y[i])"),
        ("select", "x[i] < y[i] ? x[i] : y[i]"),
        ("div", "x[i] / (y[i] | 1) + x[i] % (y[i] | 1)"),
    ];
    const FLOAT: [(&str, &str); 6] = [
        ("arith", "x[i] + y[i] * x[i] / y[i]"),
        ("minmax", "max(x[i], y[i]) - min(abs(x[i]), y[i])"),
        ("round", "sqrt(x[i]) + floor(y[i]) - ceil(x[i]) + trunc(y[i])"),
        ("fma", "fma(x[i], y[i], x[i])"),
        ("select", "x[i] < y[i] ? -x[i] : y[i]"),
        ("math", "exp(x[i]) + log(y[i]) + sin(x[i]) * cos(y[i])"),
    ];
    let mut v = Vec::new();
    for t in ["i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "f32", "f64"] {
        let fams: &[(&str, &str)] = if t.starts_with('f') { &FLOAT } else { &INT };
        let one = if t.starts_with('f') { "1.0".to_string() } else { format!("1{t}") };
        let casts = format!(
            "of[i] = (x[i] as f32); oi[i] = (y[i] as i32) + ((a[i] as {t}) as i32); o[i] = x[i]"
        );
        for (fam, e) in fams.iter().chain(&[("casts", casts.as_str())]) {
            let e = e.replace("| 1)", &format!("| {one})"));
            let body = if *fam == "casts" { e.clone() } else { format!("o[i] = {e}") };
            let src = format!(
                "kernel k(x: ptr<global, {t}>, y: ptr<global, {t}>, o: ptr<global, {t}>, \
                   of: ptr<global, f32>, oi: ptr<global, i32>, a: ptr<global, f32>) {{
                   let i: u32 = global_id(0);
                   {body};
                 }}"
            );
            v.push((t.to_string(), *fam, kernel(&src)));
        }
    }
    // f16, a storage type: loads, stores and casts.
    let f16 = "kernel k(x: ptr<global, f16>, o: ptr<global, f16>, of: ptr<global, f32>) {
                 let i: u32 = global_id(0); of[i] = (x[i] as f32); o[i] = ((of[i] * 2.0) as f16); }";
    v.push(("f16".to_string(), "storage", kernel(f16)));
    v
}

/// Every kernel of the ledger gets 8-lane code (docs/cpu.md: the last fallback, f64
/// `sin`/`cos`, has lanes now).
#[test]
fn fallback_ledger_every_type_and_operation_family() {
    if !avx2() {
        kiln_ir::testing::skip("no AVX2 on this CPU: every kernel falls back");
        return;
    }
    let mut wrong = Vec::new();
    for (t, fam, k) in ledger_kernels() {
        let why = fallback(&k);
        eprintln!("{t:>4} {fam:<7} {}", why.as_deref().unwrap_or("8-lane code"));
        if let Some(w) = why {
            wrong.push(format!("{t} {fam}: {w}"));
        }
    }
    assert!(wrong.is_empty(), "fallbacks:\n{}", wrong.join("\n"));
    // The ledger's kernels run the same three ways, fallback or not.
    for (t, _, k) in ledger_kernels() {
        if t == "f16" {
            continue;
        }
        let mut b = vec![
            ledger_buffer(&k, 0, 1),
            ledger_buffer(&k, 1, 5),
            ledger_buffer(&k, 2, 0),
            Buffer::zeroed(Scalar::F32, 64),
            Buffer::zeroed(Scalar::I32, 64),
        ];
        b.push(Buffer::from_slice(&(0..64).map(|j| j as f32 * 37.5 - 1000.0).collect::<Vec<_>>()));
        let args: Vec<Arg> = (0..6).map(Arg::Buffer).collect();
        let r = NdRange::new(&[64]).with_local(&[16]);
        three_ways(&k, &r, &args, &b);
    }
}

/// 64 elements of parameter `p`'s element type: small values with negatives, varied by
/// `seed` (0: zeroes).
fn ledger_buffer(k: &Kernel, p: usize, seed: i64) -> Buffer {
    let s = k.params()[p].ty().elem().unwrap();
    let vals: Vec<i64> =
        (0..64).map(|j| if seed == 0 { 0 } else { (j * seed * 13) % 41 - 20 }).collect();
    match s {
        Scalar::F32 => {
            Buffer::from_slice(&vals.iter().map(|&v| v as f32 * 0.75).collect::<Vec<_>>())
        }
        Scalar::F64 => {
            Buffer::from_slice(&vals.iter().map(|&v| v as f64 * 0.75).collect::<Vec<_>>())
        }
        Scalar::I8 => Buffer::from_slice(&vals.iter().map(|&v| v as i8).collect::<Vec<_>>()),
        Scalar::U8 => Buffer::from_slice(&vals.iter().map(|&v| v as u8).collect::<Vec<_>>()),
        Scalar::I16 => Buffer::from_slice(&vals.iter().map(|&v| v as i16).collect::<Vec<_>>()),
        Scalar::U16 => Buffer::from_slice(&vals.iter().map(|&v| v as u16).collect::<Vec<_>>()),
        Scalar::I32 => Buffer::from_slice(&vals.iter().map(|&v| v as i32).collect::<Vec<_>>()),
        Scalar::U32 => Buffer::from_slice(&vals.iter().map(|&v| v as u32).collect::<Vec<_>>()),
        Scalar::I64 => Buffer::from_slice(&vals),
        _ => Buffer::from_slice(&vals.iter().map(|&v| v as u64).collect::<Vec<_>>()),
    }
}

#[test]
fn f64_transcendentals_on_the_cpu_device_are_kilns_own() {
    use kiln_ir::eval::math64::{cos_f64, exp_f64, log_f64, sin_f64};
    // The first argument is where glibc's cos misses by 8 ulp: the host libm is not used.
    let xs: Vec<f64> = [f64::from_bits(0x7506_ac5b_262c_a1ff), -0.5, 1e22, 700.0, 5e-324, 2.5]
        .iter()
        .cycle()
        .take(64)
        .copied()
        .collect();
    let k = kernel(
        "kernel k(x: ptr<global, f64>, o: ptr<global, f64>) {
           let i: u32 = global_id(0);
           o[i * 4u32] = exp(x[i]); o[i * 4u32 + 1u32] = log(x[i]);
           o[i * 4u32 + 2u32] = sin(x[i]); o[i * 4u32 + 3u32] = cos(x[i]);
         }",
    );
    let bufs = vec![Buffer::from_slice(&xs), Buffer::zeroed(Scalar::F64, 256)];
    let args = [Arg::Buffer(0), Arg::Buffer(1)];
    let r = NdRange::new(&[64]).with_local(&[8]);
    three_ways(&k, &r, &args, &bufs);
    let p = compile(&k, &X86Options::default()).unwrap();
    let mut got = bufs.clone();
    p.run(&r, &args, &mut got).unwrap();
    let got = got[1].to_vec::<f64>().unwrap();
    for (i, &x) in xs.iter().enumerate() {
        let want = [exp_f64(x), log_f64(x), sin_f64(x), cos_f64(x)];
        for (j, w) in want.iter().enumerate() {
            assert_eq!(got[4 * i + j].to_bits(), w.to_bits(), "function {j} of {x:e}");
        }
    }
}

/// f64 `sin` and `cos` in the lanes (`trig64.rs`) against `kiln_ir::eval::math64` bit for
/// bit: near multiples of pi/2, both sides of 2^28 (the huge-argument reduction, one lane
/// of a half or all of them), every binary exponent up to the largest finite values,
/// subnormals, signed zeros, infinities and NaNs with payloads.
#[test]
fn f64_sin_cos_lanes_give_the_interpreters_bits() {
    use kiln_ir::eval::math64::{cos_f64, sin_f64};
    let mut xs: Vec<f64> = vec![
        0.0,
        -0.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
        f64::from_bits(0xfff4_0000_0000_1234),
        5e-324,
        -2.2e-308,
        1e-9,
        std::f64::consts::FRAC_PI_4,
        -std::f64::consts::FRAC_PI_2,
        std::f64::consts::PI,
        4.712_388_980_384_69,
        268_435_455.9,
        268_435_456.0,
        -268_435_456.5,
        f64::MAX,
        -f64::MAX,
        1e22,
        f64::from_bits(0x7506_ac5b_262c_a1ff),
    ];
    // Multiples of pi/2 and their neighbours; every exponent from 2^-30 to 2^1023.
    for k in -40i32..40 {
        let v = f64::from(k) * std::f64::consts::FRAC_PI_2;
        xs.extend([
            v,
            f64::from_bits(v.to_bits() + 1),
            f64::from_bits(v.to_bits().wrapping_sub(1)),
        ]);
    }
    for e in -30i32..1024 {
        let v = 2f64.powi(e) * (1.0 + f64::from(e.rem_euclid(97)) / 97.0);
        xs.extend([v, -v * 1.000_000_1]);
    }
    // A pseudo-random spread of bit patterns.
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..512 {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        xs.push(f64::from_bits(s));
    }
    while !xs.len().is_multiple_of(64) {
        xs.push(1.0);
    }
    let k = kernel(
        "kernel k(x: ptr<global, f64>, o: ptr<global, f64>) {
           let i: u32 = global_id(0);
           o[i * 2u32] = sin(x[i]); o[i * 2u32 + 1u32] = cos(x[i]);
         }",
    );
    assert_eq!(fallback(&k), None, "{k}");
    let n = xs.len();
    let bufs = vec![Buffer::from_slice(&xs), Buffer::zeroed(Scalar::F64, 2 * n)];
    let args = [Arg::Buffer(0), Arg::Buffer(1)];
    let r = NdRange::new(&[n as u32]).with_local(&[64]);
    three_ways(&k, &r, &args, &bufs);
    let p = compile(&k, &X86Options::default()).unwrap();
    let mut got = bufs.clone();
    p.run(&r, &args, &mut got).unwrap();
    let got = got[1].to_vec::<f64>().unwrap();
    for (i, &x) in xs.iter().enumerate() {
        assert_eq!(got[2 * i].to_bits(), sin_f64(x).to_bits(), "sin({x:e}) [{:#x}]", x.to_bits());
        assert_eq!(
            got[2 * i + 1].to_bits(),
            cos_f64(x).to_bits(),
            "cos({x:e}) [{:#x}]",
            x.to_bits()
        );
    }
}
