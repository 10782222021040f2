//! 64-bit integer products by constants on the 8-lane code (backends/src/x86/spmd/
//! mul64const.rs): every form (the constant below 2^32, with a widened `u32` factor too,
//! its high half a power of two, 1 included, its low half 0, shift-and-add chains: powers
//! of two, products of up to three `1 + 2^k`) and the general product beside them, the constant on
//! either side, u64 and i64, against the interpreter and the scalar code bit for bit, at
//! values around every half's edges; and the FNV-1a loop of the sixth cpu suite set.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

/// Values around the edges of both halves, and some mixed ones.
fn edges(n: usize) -> Vec<u64> {
    let base = [
        0u64,
        1,
        2,
        0xffff_ffff,
        0x1_0000_0000,
        0x1_ffff_ffff,
        0x7fff_ffff_ffff_ffff,
        0x8000_0000_0000_0000,
        u64::MAX,
        u64::MAX - 1,
        0x8000_0000,
        0xdead_beef_0bad_f00d,
    ];
    (0..n as u64)
        .map(|i| base[i as usize % base.len()] ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (i % 61))
        .collect()
}

const CONSTANTS: [&str; 23] = [
    "0",
    "1",
    "3",
    "1000003",
    "4294967295",
    "1099511628211",
    "4294967296",
    "8589934591",
    "4294967297",
    "9223372041149743103",
    "47244640256",
    "9223372036854775808",
    "18446744069414584320",
    "18446744073709551615",
    "11400714819323198485",
    "6364136223846793005",
    // Chains: 2^s * (1 + 2^k1) * .. (0x0101010101010101, 2^63 + 1, 3 * 2^62, 45, 9 * 4096,
    // 0x0001000100010001, 7 = 1 + 2 + 4 not one).
    "72340172838076673",
    "9223372036854775809",
    "13835058055282163712",
    "45",
    "36864",
    "281479271743489",
    "7",
];

#[test]
fn products_by_constants_agree() {
    let n = 45usize;
    let range = NdRange::new(&[48]).with_local(&[16]);
    for ty in ["u64", "i64"] {
        for c in CONSTANTS {
            // (An i64 literal must fit: the top constants as their two's complement.)
            let lit = if ty == "i64" {
                format!("{}", c.parse::<u64>().unwrap() as i64)
            } else {
                c.to_string()
            };
            for body in [
                format!("o[i] = x[i] * {lit};"),
                format!("o[i] = {lit} * x[i];"),
                format!("o[i] = y[i] as {ty} * {lit};"),
                format!("o[i] = {lit} * y[i] as {ty} + x[i];"),
                format!("var h: {ty} = x[i]; for k: u32 in 0u32 .. y[i] & 7u32 {{ h = (h ^ k as {ty}) * {lit}; }} o[i] = h;"),
            ] {
                let k = kernel(&format!(
                    "kernel k(x: ptr<global, {ty}>, y: ptr<global, u32>, o: ptr<global, {ty}>, n: u32) {{
                       let i: u32 = global_id(0);
                       if i < n {{ {body} }}
                     }}"
                ));
                let xs = edges(48);
                let ys: Vec<u32> = xs.iter().map(|&v| (v >> 17) as u32 ^ v as u32).collect();
                let x = if ty == "u64" {
                    Buffer::from_slice(&xs)
                } else {
                    Buffer::from_slice(&xs.iter().map(|&v| v as i64).collect::<Vec<_>>())
                };
                let st = if ty == "u64" { Scalar::U64 } else { Scalar::I64 };
                let bufs = [x, Buffer::from_slice(&ys), Buffer::zeroed(st, 48)];
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n as u32)];
                agree(&k, &range, &args, &bufs, &format!("{ty}: {body}"));
            }
        }
    }
}

/// The forms take fewer multiplies than the general product (three per four lanes).
#[test]
fn forms_take_fewer_multiplies() {
    if !avx2() {
        return kiln_ir::testing::skip("the 8-lane code needs AVX2, which this CPU lacks");
    }
    let muls = |c: &str, rhs: &str| {
        let k = kernel(&format!(
            "kernel k(x: ptr<global, u64>, y: ptr<global, u32>, o: ptr<global, u64>) {{
               let i: u32 = global_id(0);
               o[i] = {rhs} * {c};
             }}"
        ));
        vector_listing(&k).iter().filter(|l| l.starts_with("vpmuludq")).count()
    };
    assert_eq!(muls("6364136223846793005", "x[i]"), 6);
    assert_eq!(muls("1000003", "x[i]"), 4);
    assert_eq!(muls("1099511628211", "x[i]"), 4);
    // 2^32 + 1 and the popcount's byte sum: shifts and adds.
    assert_eq!(muls("4294967297", "x[i]"), 0);
    assert_eq!(muls("72340172838076673", "x[i]"), 0);
    assert_eq!(muls("4096", "y[i] as u64"), 0);
    assert_eq!(muls("47244640256", "x[i]"), 2);
    assert_eq!(muls("1000003", "y[i] as u64"), 2);
}
