//! `/` and `%` of lanes by a constant (`backends/src/x86/spmd/divconst.rs`: a multiply by a
//! magic number, a shift, `a - q * c`): results and errors against the interpreter and the
//! scalar code for u32, i32 and the 8/16-bit types, constants of every kind (1, -1, powers
//! of two and their negatives, small and large, `i32::MIN`, the top of the u32 range),
//! dividends over the whole range (multiples of the constant and their neighbours, the
//! extremes), `/`–`%` pairs of `let`s, a constant 0 (the interpreter's fault, as before),
//! odd sizes and guards, and digit sums by `% 10` and `/ 10` in a loop.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Imm, Scalar};

/// `n` dividends of type `ty` (as i64 values) around the multiples of `c`, the extremes of
/// the type and random ones.
fn dividends(ty: Scalar, c: i64, n: usize) -> Vec<i64> {
    let (lo, hi) = match ty {
        Scalar::U32 => (0, u32::MAX as i64),
        Scalar::I32 => (i32::MIN as i64, i32::MAX as i64),
        Scalar::U16 => (0, u16::MAX as i64),
        Scalar::I16 => (i16::MIN as i64, i16::MAX as i64),
        Scalar::U8 => (0, u8::MAX as i64),
        _ => (i8::MIN as i64, i8::MAX as i64),
    };
    let mut v = vec![lo, lo + 1, hi, hi - 1, 0, 1, -1, c, -c, c + 1, c - 1, 2 * c, -2 * c];
    let mut s = 0x9e37_79b9u64 ^ c as u64;
    let span = (hi - lo + 1) as u64;
    while v.len() < n {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let r = lo + ((s >> 16) % span) as i64;
        let q = if c != 0 { r / c * c } else { r };
        v.extend([r, q, q - 1, q + 1, q + c.abs() - 1]);
    }
    v.truncate(n);
    v.into_iter().map(|x| x.clamp(lo, hi)).collect()
}

fn buffer(ty: Scalar, v: &[i64]) -> Buffer {
    let imms: Vec<Imm> = v.iter().map(|&x| Imm::int(ty, x as i128)).collect();
    Buffer::from_imms(ty, &imms).unwrap()
}

/// `q[i] = x[i] / C; r[i] = x[i] % C` on type `ty`, as a `/`–`%` pair of `let`s
/// (`pair`) or two stores of their own.
fn by_const(ty: Scalar, c: i64, pair: bool) -> kiln_ir::Kernel {
    let body = if pair {
        format!("let a: {ty} = x[i] / {c}{ty};\n    let b: {ty} = x[i] % {c}{ty};\n    q[i] = a;\n    r[i] = b;")
    } else {
        format!("q[i] = x[i] / {c}{ty};\n    r[i] = x[i] % {c}{ty};")
    };
    kernel(&format!(
        "kernel k(x: ptr<global, {ty}>, q: ptr<global, {ty}>, r: ptr<global, {ty}>, n: u32) {{
  let i: u32 = global_id(0);
  if i < n {{
    {body}
  }}
}}"
    ))
}

/// Runs [`by_const`] on `n` dividends (a launch rounded up to groups of 32).
fn check(ty: Scalar, c: i64, pair: bool, n: usize) {
    let k = by_const(ty, c, pair);
    let x = dividends(ty, c, n);
    let bufs = vec![buffer(ty, &x), Buffer::zeroed(ty, n), Buffer::zeroed(ty, n)];
    let range = NdRange::new(&[n.next_multiple_of(32) as u32]).with_local(&[32]);
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n as u32)];
    agree(&k, &range, &args, &bufs, &format!("{ty} by {c} (pair {pair}, n {n})"));
}

const U32S: [i64; 22] = [
    1,
    2,
    3,
    5,
    6,
    7,
    9,
    10,
    11,
    25,
    100,
    256,
    641,
    1000,
    12345,
    65537,
    0x7fff_ffff,
    0x8000_0000,
    0x8000_0001,
    0xb504_f333,
    0xffff_fffe,
    0xffff_ffff,
];

const I32S: [i64; 22] = [
    1,
    -1,
    2,
    -2,
    3,
    -3,
    7,
    -7,
    10,
    -10,
    16,
    -16,
    641,
    -1000,
    65537,
    -65537,
    0x4000_0000,
    -0x4000_0000,
    0x7fff_ffff,
    -0x7fff_ffff,
    -0x8000_0000,
    0x5555_5555,
];

#[test]
fn u32_lanes_divided_by_constants_match_the_interpreter() {
    for (j, &c) in U32S.iter().enumerate() {
        check(Scalar::U32, c, j % 2 == 0, 999 + 2 * j);
    }
}

#[test]
fn i32_lanes_divided_by_constants_truncate_like_the_interpreter() {
    for (j, &c) in I32S.iter().enumerate() {
        check(Scalar::I32, c, j % 2 == 1, 1001 + 2 * j);
    }
}

#[test]
fn narrow_lanes_divided_by_constants_match_the_interpreter() {
    for (ty, cs) in [
        (Scalar::I8, &[1i64, -1, 3, -3, 7, -8, 10, 127, -128][..]),
        (Scalar::U8, &[1, 3, 7, 10, 128, 255]),
        (Scalar::I16, &[1, -1, 3, -7, 10, 1000, -32768, 32767]),
        (Scalar::U16, &[1, 3, 10, 641, 65535]),
    ] {
        for (j, &c) in cs.iter().enumerate() {
            check(ty, c, j % 2 == 0, 301 + 2 * j);
        }
    }
}

#[test]
fn a_constant_zero_divisor_is_still_the_first_active_lanes_error() {
    for ty in [Scalar::U32, Scalar::I32, Scalar::I16] {
        let k = by_const(ty, 0, false);
        let x = dividends(ty, 3, 100);
        let range = NdRange::new(&[128]).with_local(&[32]);
        for n in [100u32, 33, 1, 0] {
            let bufs = vec![buffer(ty, &x), Buffer::zeroed(ty, 100), Buffer::zeroed(ty, 100)];
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n)];
            agree(&k, &range, &args, &bufs, &format!("{ty} by 0, n = {n}"));
        }
    }
}

#[test]
fn constant_divisors_take_no_floating_point_division() {
    if !avx2() {
        return kiln_ir::testing::skip("no AVX2: no 8-lane code to look at");
    }
    for (ty, c) in [(Scalar::U32, 10), (Scalar::U32, 7), (Scalar::I32, -10), (Scalar::I16, 3)] {
        let l = vector_listing(&by_const(ty, c, false));
        assert!(l.iter().any(|l| l.starts_with("vpmul")), "{ty} by {c}:\n{}", l.join("\n"));
        assert!(
            !l.iter().any(|l| l.starts_with("vdivpd") || l.starts_with("vcvtdq2pd")),
            "{ty} by {c}:\n{}",
            l.join("\n")
        );
    }
}

#[test]
fn digit_sums_by_rem_and_div_in_a_loop_match_the_interpreter() {
    let k = kernel(
        "kernel digitsum(keys: ptr<global, u32>, out: ptr<global, u32>, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    var v: u32 = keys[i];
    var s: u32 = 0;
    while v != 0 {
      s = s + v % 10;
      v = v / 10;
    }
    out[i] = s;
  }
}",
    );
    let x: Vec<i64> = dividends(Scalar::U32, 10, 2001);
    let n = x.len();
    let bufs = vec![buffer(Scalar::U32, &x), Buffer::zeroed(Scalar::U32, n)];
    let range = NdRange::new(&[n.next_multiple_of(64) as u32]).with_local(&[64]);
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n as u32)];
    agree(&k, &range, &args, &bufs, "digitsum");
    // Signed digits of i32 values: negative remainders.
    let k = kernel(
        "kernel digits(keys: ptr<global, i32>, out: ptr<global, i32>, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    var v: i32 = keys[i];
    var s: i32 = 0;
    while v != 0 {
      let d: i32 = v % -10;
      v = v / -10;
      s = s * 3 + d;
    }
    out[i] = s;
  }
}",
    );
    let x: Vec<i64> = dividends(Scalar::I32, 10, 1999);
    let n = x.len();
    let bufs = vec![buffer(Scalar::I32, &x), Buffer::zeroed(Scalar::I32, n)];
    let range = NdRange::new(&[n.next_multiple_of(64) as u32]).with_local(&[64]);
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n as u32)];
    agree(&k, &range, &args, &bufs, "signed digits");
}
