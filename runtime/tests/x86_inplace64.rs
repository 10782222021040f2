//! i64/u64 operations with an operand read in place (backends/src/x86/spmd/inplace64.rs):
//! shifts by constant counts as immediates (every count class, 64 and above taken modulo
//! 64, i64 `>>` from dword halves), `+ - & | ^ *` with a constant on either side or a name
//! (in `let` registers or a slot) read where it is; random 64-bit values against the
//! interpreter and the scalar code bit for bit, odd sizes, guards, and the popcount of the
//! seventh cpu suite set with a fault in a later batch.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

/// `n` random 64-bit values (an LCG's high bits, shifted by random amounts so small ones
/// come too) with the extremes first.
fn randoms(n: usize, seed: u64) -> Vec<u64> {
    let mut v = vec![0, 1, u64::MAX, 1 << 63, (1 << 63) - 1, 0xffff_ffff, 1 << 32];
    let mut s = seed;
    while v.len() < n {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let r = s ^ (s >> 31);
        v.push(r >> (r % 7 * 9));
    }
    v.truncate(n);
    v
}

fn buf(ty: &str, xs: &[u64]) -> Buffer {
    if ty == "u64" {
        Buffer::from_slice(xs)
    } else {
        Buffer::from_slice(&xs.iter().map(|&v| v as i64).collect::<Vec<_>>())
    }
}

fn scalar(ty: &str) -> Scalar {
    if ty == "u64" {
        Scalar::U64
    } else {
        Scalar::I64
    }
}

/// `body` (over `x`, `y` of `ty` and `i`) on 45 work-items in groups of 16.
fn check(ty: &str, body: &str, seed: u64) {
    let k = kernel(&format!(
        "kernel k(x: ptr<global, {ty}>, y: ptr<global, {ty}>, o: ptr<global, {ty}>, n: u32) {{
           let i: u32 = global_id(0);
           if i < n {{ {body} }}
         }}"
    ));
    let n = 45usize;
    let bufs = [
        buf(ty, &randoms(48, seed)),
        buf(ty, &randoms(48, seed ^ 0x5555)),
        Buffer::zeroed(scalar(ty), 48),
    ];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n as u32)];
    let range = NdRange::new(&[48]).with_local(&[16]);
    agree(&k, &range, &args, &bufs, &format!("{ty}: {body}"));
}

const COUNTS: [u32; 13] = [0, 1, 2, 7, 8, 31, 32, 33, 40, 56, 63, 64, 100];

#[test]
fn shifts_by_constants_agree() {
    for ty in ["u64", "i64"] {
        for c in COUNTS {
            for body in [
                format!("o[i] = x[i] >> {c}{ty};"),
                format!("o[i] = x[i] << {c}{ty};"),
                format!("let a: {ty} = x[i] + y[i]; o[i] = (a >> {c}{ty}) ^ (a << {c}{ty}) + a;"),
            ] {
                check(ty, &body, u64::from(c) * 7 + 1);
            }
        }
    }
}

#[test]
fn operands_in_place_agree() {
    let ks = ["0", "1", "255", "6148914691236517205", "1085102592571150095", "4294967296"];
    for ty in ["u64", "i64"] {
        let neg = ["-1", "-9223372036854775808", "-4294967296"];
        let more: &[&str] = if ty == "i64" { &neg } else { &["18446744073709551615"] };
        for (j, k) in ks.iter().chain(more).enumerate() {
            for op in ["+", "-", "&", "|", "^", "*"] {
                for body in [
                    format!("o[i] = x[i] {op} {k}{ty};"),
                    format!("o[i] = {k}{ty} {op} x[i];"),
                    // A name in registers on either side, and a `var` updated in a loop.
                    format!("let a: {ty} = x[i] ^ y[i]; o[i] = (y[i] {op} a) + (a {op} {k}{ty});"),
                    format!(
                        "var h: {ty} = x[i]; for q: u32 in 0u32 .. i % 5u32 {{ h = y[i] {op} h {op} {k}{ty}; }} o[i] = h;"
                    ),
                ] {
                    check(ty, &body, j as u64 * 31 + op.len() as u64);
                }
            }
        }
    }
}

const HAMMING: &str = "kernel hamming(db: ptr<global, u64>, queries: ptr<global, u64>, dist: ptr<global, u32>, m: u32, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    let f: u64 = db[i];
    var best: u64 = 64;
    for q: u32 in 0 .. m {
      let x: u64 = f ^ queries[q + i / 40];
      let a: u64 = x - (x >> 1 & 0x5555555555555555);
      let b: u64 = (a & 0x3333333333333333) + (a >> 2 & 0x3333333333333333);
      let c: u64 = b + (b >> 4) & 0x0f0f0f0f0f0f0f0f;
      best = min(best, c * 0x0101010101010101 >> 56);
    }
    dist[i] = best as u32;
  }
}";

/// The seventh set's popcount (each work-item from query `i / 40` on): all in bounds, and
/// with the queries one short, where work-item 80's last query (a later batch) faults.
#[test]
fn popcount_agrees_and_faults_in_order() {
    let k = kernel(HAMMING);
    for (n, nq) in [(101usize, 10usize), (117, 9), (83, 9)] {
        let range = NdRange::new(&[n.next_multiple_of(16) as u32]).with_local(&[16]);
        let bufs = [
            Buffer::from_slice(&randoms(n, 3)),
            Buffer::from_slice(&randoms(nq, 4)),
            Buffer::zeroed(Scalar::U32, n),
        ];
        let args = [
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::Buffer(2),
            Arg::scalar(8u32),
            Arg::scalar(n as u32),
        ];
        let mut want = bufs.to_vec();
        let faults = kiln_ir::interp::run(&k, &range, &args, &mut want).is_err();
        assert_eq!(faults, nq < 10, "n {n}, {nq} queries");
        agree(&k, &range, &args, &bufs, &format!("hamming n {n}, {nq} queries"));
    }
}

/// The new forms are in the code: shifts by immediates, constants and names as memory
/// operands, no multiply for the byte sum, `i64 >>` by dword halves.
#[test]
fn listing_reads_operands_in_place() {
    if !avx2() {
        return kiln_ir::testing::skip("the 8-lane code needs AVX2, which this CPU lacks");
    }
    let l = vector_listing(&kernel(HAMMING));
    assert!(!l.iter().any(|l| l.starts_with("vpsrlvq")), "{l:#?}");
    // (The byte sum: `x + (x << k)` for k = 8, 16, 32.)
    let chain = ["vpsllq ymm4,ymm2,8", "vpsllq ymm4,ymm2,10h", "vpsllq ymm4,ymm2,20h"];
    for shift in ["vpsrlq ymm2,ymm2,1", "vpsrlq ymm2,ymm2,2"].iter().chain(&chain) {
        assert!(l.iter().any(|l| l == shift), "{shift}: {l:#?}");
    }
    // The masks from their slots: no register is loaded with a constant.
    assert!(l.iter().filter(|l| l.starts_with("vpand ymm2,ymm2,[r15+")).count() >= 2, "{l:#?}");
    assert!(!l.iter().any(|l| l.starts_with("vmovupd ymm4,[r15+")), "{l:#?}");
    let sar = |c: u32| {
        vector_listing(&kernel(&format!(
            "kernel k(x: ptr<global, i64>, o: ptr<global, i64>) {{
               let i: u32 = global_id(0);
               o[i] = x[i] >> {c}i64;
             }}"
        )))
    };
    for c in [5, 40] {
        let l = sar(c);
        assert!(l.iter().any(|l| l.starts_with("vpsrad")), "{c}: {l:#?}");
        assert!(l.iter().any(|l| l.starts_with("vpblendd")), "{c}: {l:#?}");
        assert!(!l.iter().any(|l| l.starts_with("vpsrlvq")), "{c}: {l:#?}");
    }
}
