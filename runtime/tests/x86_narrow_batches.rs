//! The 8-lane code's whole batches of 8- and 16-bit data (issue 24's thresholding): a store at
//! `global_id(0)` in a batch whose lanes are all active, known as the code is generated (the
//! unmasked copy of a guard `i < n`), is one packed store with no lane test; shifts by
//! constant counts are immediate shifts (counts at and past the width taken modulo it);
//! comparisons and `select`s read `let` registers, parameters, constants and loads at
//! `global_id(0)` where they are. Against the scalar code and the interpreter, bits and
//! errors compared: `i8`, `u8`, `i16`, `u16` (and `f32`/`i32`/`u32` through the same
//! comparison and shift code), odd sizes, guards, ranges rounded up to the group size, and
//! faults of loads and stores past the buffers.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{avx2, fallback, kernel, three_ways};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Imm, Kernel, Scalar};
use proptest::prelude::*;

/// The thresholding kernel of the held-out suite, on element type `t`.
fn threshold(t: &str) -> Kernel {
    kernel(&format!(
        "kernel threshold(img: ptr<global, {t}>, out: ptr<global, {t}>, lo: {t}, hi: {t}, n: u32) {{
           let i: u32 = global_id(0);
           if i < n {{
             let v: {t} = img[i];
             out[i] = v > hi ? 100{t} : v < lo ? 0{t} : v / 2{t};
           }}
         }}"
    ))
}

/// `len` elements of type `t` spread over its whole range (the edges and zero included;
/// f32: signed values, zeros, a NaN, infinities).
fn data(t: Scalar, len: usize, seed: u32) -> Buffer {
    let mut b = Buffer::zeroed(t, len);
    for i in 0..len {
        let h = (i as u64 * 0x9e37_79b9 + u64::from(seed) * 0x85eb_ca6b) >> 7;
        let x = match (t, i % 9) {
            (Scalar::F32, 0) => Imm::float(t, f64::NAN),
            (Scalar::F32, 1) => {
                Imm::float(t, if h.is_multiple_of(2) { f64::INFINITY } else { -0.0 })
            }
            (Scalar::F32, _) => Imm::float(t, (h % 2001) as f64 * 0.25 - 250.0),
            (_, 0) => scalar_of(t, i128::MIN),
            (_, 1) => scalar_of(t, i128::MAX),
            (_, 2) => scalar_of(t, 0),
            _ => scalar_of(t, h as i128),
        };
        b.set(i, x).expect("an element of the buffer's type");
    }
    b
}

/// `v` as an integer of type `t`, saturated for the edges (`i128::MIN`/`MAX`), else wrapped.
fn scalar_of(t: Scalar, v: i128) -> Imm {
    let bits = 8 * t.size_bytes() as u32;
    let signed = t.is_signed();
    let (min, max) = if signed {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    };
    let x = match v {
        i128::MIN => min,
        i128::MAX => max,
        _ => {
            let w = v.rem_euclid(1i128 << bits);
            if signed && w > max {
                w - (1i128 << bits)
            } else {
                w
            }
        }
    };
    if t == Scalar::F32 {
        Imm::float(t, x as f64)
    } else {
        Imm::int(t, x)
    }
}

/// Launches of `k` (buffers `img`, `out` of `len` elements, then the scalars) over `items`
/// work-items rounded up to `local`, agreeing three ways, with vector code.
fn check(k: &Kernel, t: Scalar, len: usize, items: usize, scalars: &[Arg]) {
    assert_eq!(fallback(k), None, "{k}");
    for local in [8usize, 16, 64, 256] {
        let global = items.div_ceil(local) * local;
        let r = NdRange::new(&[global as u32]).with_local(&[local as u32]);
        let bufs = vec![data(t, len, 7), Buffer::zeroed(t, len)];
        let mut args = vec![Arg::Buffer(0), Arg::Buffer(1)];
        args.extend_from_slice(scalars);
        assert_eq!(three_ways(k, &r, &args, &bufs), avx2(), "{k}");
    }
}

#[test]
fn threshold_on_every_narrow_type_agrees_with_the_interpreter() {
    let cases: [(&str, Scalar, Arg, Arg); 4] = [
        ("u8", Scalar::U8, Arg::scalar(40u8), Arg::scalar(200u8)),
        ("i8", Scalar::I8, Arg::scalar(-90i8), Arg::scalar(70i8)),
        ("u16", Scalar::U16, Arg::scalar(1000u16), Arg::scalar(60000u16)),
        ("i16", Scalar::I16, Arg::scalar(-20000i16), Arg::scalar(30000i16)),
    ];
    for (name, t, lo, hi) in cases {
        let k = threshold(name);
        for (len, n) in [(1usize, 1u32), (7, 7), (8, 8), (61, 61), (300, 299), (1001, 1001)] {
            check(&k, t, len, n as usize, &[lo.clone(), hi.clone(), Arg::scalar(n)]);
        }
        // A bound past the buffers: the first lane past the end faults, as the interpreter's
        // work-item does (the load at `global_id(0)` of a span the driver checks).
        check(&k, t, 61, 64, &[lo.clone(), hi.clone(), Arg::scalar(64u32)]);
    }
}

/// The whole batches' stores (the guard's unmasked copy) have no per-lane stores left: the
/// only byte stores are the partial batch's, once; the shift by a constant is immediate.
#[test]
fn whole_batch_narrow_stores_have_no_lane_test() {
    if !avx2() {
        kiln_ir::testing::skip("this CPU has no AVX2");
        return;
    }
    // (With `-O`, as devices build: `v / 2` is then `v >> 1`, an immediate shift. Without
    // it the division has a fault site, so no lane is known to be alive.)
    let k = threshold("u8");
    let listing =
        compile(&k, &X86Options { optimize: true, ..X86Options::default() }).unwrap().disassemble();
    let vector = &listing[listing.find("8-lane").expect("vector code")..];
    assert_eq!(vector.matches("r11b").count(), 8, "{vector}");
    assert!(!vector.contains("vpsrlvd"), "{vector}");
}

/// Unguarded: every batch is whole but the last, which runs past the buffers (the range is
/// rounded up) and faults at its first lane past the end; and stores of signed values whose
/// packs must not saturate.
#[test]
fn unguarded_narrow_batches_fault_as_the_interpreter() {
    for (t, s) in
        [("u8", Scalar::U8), ("i8", Scalar::I8), ("i16", Scalar::I16), ("u16", Scalar::U16)]
    {
        let k = kernel(&format!(
            "kernel k(img: ptr<global, {t}>, out: ptr<global, {t}>, lo: {t}, hi: {t}) {{
               let i: u32 = global_id(0);
               let v: {t} = img[i];
               out[i] = select(v >= lo, v, hi) + (v << 3{t}) - (v >> 9{t});
             }}"
        ));
        let (lo, hi) = match s {
            Scalar::U8 => (Arg::scalar(3u8), Arg::scalar(255u8)),
            Scalar::I8 => (Arg::scalar(-3i8), Arg::scalar(-128i8)),
            Scalar::I16 => (Arg::scalar(-3i16), Arg::scalar(i16::MIN)),
            _ => (Arg::scalar(3u16), Arg::scalar(u16::MAX)),
        };
        for (len, items) in [(64usize, 64usize), (61, 61), (13, 13), (1, 1)] {
            check(&k, s, len, items, &[lo.clone(), hi.clone()]);
        }
    }
}

/// Comparisons with an operand in a register and the other a parameter, constant or load
/// at `global_id(0)`, on every lane type, each order and predicate; selects of leaves.
#[test]
fn comparisons_and_selects_read_operands_in_place() {
    for (t, s, c) in [
        ("f32", Scalar::F32, "0.5"),
        ("i32", Scalar::I32, "-7i32"),
        ("u32", Scalar::U32, "7u32"),
        ("u8", Scalar::U8, "7u8"),
        ("i8", Scalar::I8, "-7i8"),
        ("u16", Scalar::U16, "700u16"),
        ("i16", Scalar::I16, "-700i16"),
    ] {
        for op in ["<", "<=", "==", "!=", ">", ">="] {
            let k = kernel(&format!(
                "kernel k(img: ptr<global, {t}>, out: ptr<global, {t}>, p: {t}, n: u32) {{
                   let i: u32 = global_id(0);
                   if i < n {{
                     let v: {t} = img[i];
                     let w: {t} = out[i];
                     let a: bool = v {op} p;
                     let b: bool = p {op} v;
                     let c: bool = v {op} {c};
                     let d: bool = img[i] {op} w;
                     let e: bool = w {op} img[i];
                     out[i] = a ? (b ? p : v) : (c != d ? {c} : e ? w : v);
                   }}
                 }}"
            ));
            check(&k, s, 67, 67, &[Arg::Scalar(scalar_of(s, 3)), Arg::scalar(67u32)]);
        }
    }
}

/// Shifts of 32-bit lanes by constant counts, past 31 included (taken modulo 32).
#[test]
fn constant_shift_counts_of_32_bit_lanes() {
    for (t, s) in [("i32", Scalar::I32), ("u32", Scalar::U32)] {
        let k = kernel(&format!(
            "kernel k(img: ptr<global, {t}>, out: ptr<global, {t}>, n: u32) {{
               let i: u32 = global_id(0);
               if i < n {{
                 let v: {t} = img[i];
                 out[i] = (v >> 3{t}) ^ (v << 33{t}) ^ (img[i] >> 31{t}) ^ ((v + 1{t}) >> 40{t}) ^ (v << 0{t});
               }}
             }}"
        ));
        check(&k, s, 99, 99, &[Arg::scalar(99u32)]);
    }
}

/// A random threshold-like kernel of narrow type `t`: `select`s of comparisons of the
/// pixel, parameters and constants, and shifts by constants.
fn arb_pixel(t: &'static str, depth: u32) -> BoxedStrategy<String> {
    let leaf = prop::sample::select(vec!["v", "p", "q", "img[i]", "C"])
        .prop_map(move |x| x.replace('C', &format!("9{t}")))
        .boxed();
    if depth == 0 {
        return leaf;
    }
    let sub = move || arb_pixel(t, depth - 1);
    prop_oneof![
        1 => leaf,
        2 => (sub(), prop::sample::select(vec!["<", "<=", "==", "!=", ">", ">="]), sub(), sub(), sub())
            .prop_map(|(a, o, b, x, y)| format!("({a} {o} {b} ? {x} : {y})")),
        2 => (sub(), prop::sample::select(vec!["<<", ">>"]), 0u32..20)
            .prop_map(move |(a, o, c)| format!("({a} {o} {c}{t})")),
        1 => (sub(), prop::sample::select(vec!["+", "-", "/", "&"]), sub())
            .prop_map(move |(a, o, b)| if o == "/" {
                format!("({a} / ({b} | 1{t}))")
            } else {
                format!("({a} {o} {b})")
            }),
    ]
    .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("X86_NARROW_BATCHES_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(32),
        ..ProptestConfig::default()
    })]
    #[test]
    fn random_pixel_kernels_agree(
        e in prop::sample::select(vec!["u8", "i8", "u16", "i16"]).prop_flat_map(|t| arb_pixel(t, 3).prop_map(move |e| (t, e))),
        n in prop::sample::select(vec![0u32, 5, 61, 64, 70]),
    ) {
        let (t, e) = e;
        let s = match t { "u8" => Scalar::U8, "i8" => Scalar::I8, "u16" => Scalar::U16, _ => Scalar::I16 };
        let k = kernel(&format!(
            "kernel k(img: ptr<global, {t}>, out: ptr<global, {t}>, p: {t}, q: {t}, n: u32) {{
               let i: u32 = global_id(0);
               if i < n {{
                 let v: {t} = img[i];
                 out[i] = {e};
               }}
             }}"
        ));
        prop_assert_eq!(fallback(&k), None, "{}", k);
        let r = NdRange::new(&[72]).with_local(&[8]);
        let bufs = vec![data(s, 64, 3), Buffer::zeroed(s, 64)];
        let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::Scalar(scalar_of(s, 40)), Arg::Scalar(scalar_of(s, -2)), Arg::scalar(n)];
        prop_assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "{}", k);
    }
}
