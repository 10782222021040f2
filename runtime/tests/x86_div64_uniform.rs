//! i64/u64 `/` and `%` of lanes by a divisor fixed for the call
//! (`backends/src/x86/spmd/divuniform64.rs`: a magic number and two shifts computed once per
//! call in scalar code, then a multiply-high from `vpmuludq` partial products per batch, no
//! `div` per lane): results and errors against the interpreter and the scalar code for
//! divisors that are parameters, nested `let`s of them (`modpow`'s `md as u64`) and row ids
//! of a 2-D launch (hundreds of divisors in one launch); every divisor class (1, 2, powers
//! of two, 3, 7, 2^32 and its neighbours, 2^63, `u64::MAX`, i64 negatives, `i64::MIN`, -1
//! with `i64::MIN / -1`), dividends at both ends of runs of one quotient and across the
//! range, zero divisors with and without active lanes (also faulting first in a later
//! batch), guards, odd sizes and ranges rounded up.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Imm, Kernel, Scalar};

/// u64 divisors of every class.
const U64_DIVISORS: [u64; 20] = [
    1,
    2,
    3,
    7,
    10,
    1 << 20,
    1_000_000_007,
    0x7fff_ffff,
    0xffff_ffff,
    1 << 32,
    (1 << 32) + 1,
    0x5555_5555_5555_5555,
    (1 << 63) - 1,
    1 << 63,
    (1 << 63) + 1,
    0xb504_f333_f9de_6484,
    u64::MAX - 1,
    u64::MAX,
    12_345_678_901,
    641,
];

/// i64 divisors of every class.
const I64_DIVISORS: [i64; 16] = [
    1,
    -1,
    2,
    -2,
    3,
    -7,
    10,
    -(1 << 32),
    (1 << 32) + 1,
    1_000_000_007,
    -1_000_000_007,
    i64::MAX,
    i64::MIN,
    i64::MIN + 1,
    1 << 62,
    -(1 << 40) - 3,
];

/// `n` dividends (bits) for `d`: the extremes, both ends of runs of one quotient (`k d - 1`,
/// `k d`, `k d + d - 1`), random ones of every width.
fn dividends(signed: bool, d: u64, n: usize) -> Vec<u64> {
    let mut v = vec![0, 1, u64::MAX, u64::MAX - 1, 1 << 63, (1 << 63) - 1, d, d.wrapping_neg()];
    let mut s = 0x2545_f491_4f6c_dd1du64 ^ d;
    while v.len() < n {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let r = s ^ (s >> 29);
        let r = r >> (r % 64);
        let (q, last) = if d == 0 {
            (r, r)
        } else if signed {
            let (x, c) = (r as i64, d as i64);
            let q = x.wrapping_div(c).wrapping_mul(c) as u64;
            // The run's other end, away from zero (truncation keeps the dividend's side).
            let far = c.unsigned_abs() - 1;
            (q, if x < 0 { q.wrapping_sub(far) } else { q.wrapping_add(far) })
        } else {
            let q = r / d * d;
            (q, q.wrapping_add(d - 1))
        };
        v.extend([r, q, q.wrapping_sub(1), last, last.wrapping_add(1), q.wrapping_neg()]);
    }
    v.truncate(n);
    v
}

fn buffer(ty: Scalar, x: &[u64]) -> Buffer {
    let imms: Vec<Imm> = x.iter().map(|&v| Imm::Int(ty, v)).collect();
    Buffer::from_imms(ty, &imms).unwrap()
}

/// The divisor parameter's kernel: `q[i] = x[i] / d`, `r[i] = x[i] % d` under the guard.
fn by_param(ty: Scalar) -> Kernel {
    kernel(&format!(
        "kernel k(x: ptr<global, {ty}>, q: ptr<global, {ty}>, r: ptr<global, {ty}>, d: {ty}, n: u32) {{
  let i: u32 = global_id(0);
  if i < n {{
    q[i] = x[i] / d;
    r[i] = x[i] % d;
  }}
}}"
    ))
}

/// The 8-lane code divides through the magic number: one `bsr` and one `div` (the scalar
/// code computing it, once per divisor) in each of its programs (the batch loop, region
/// loops) and no other `div`/`idiv`.
fn assert_magic(k: &Kernel, divisors: usize) {
    if !avx2() {
        return kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
    }
    let l = vector_listing(k);
    let count = |p: &str| l.iter().filter(|l| l.starts_with(p)).count();
    let n = divisors * count("; kernel `");
    assert_eq!(count("bsr "), n, "the magic numbers' code\n{}", l.join("\n"));
    assert_eq!(count("div "), n, "no division per lane\n{}", l.join("\n"));
    assert_eq!(count("idiv "), 0, "no division per lane\n{}", l.join("\n"));
    assert!(count("vpmuludq ") >= 4, "the partial products");
}

fn check_param(ty: Scalar, d: u64, n: usize) {
    let k = by_param(ty);
    let x = dividends(ty == Scalar::I64, d, n);
    let bufs = vec![buffer(ty, &x), Buffer::zeroed(ty, n), Buffer::zeroed(ty, n)];
    let range = NdRange::new(&[n.next_multiple_of(64) as u32]).with_local(&[64]);
    let dv = Arg::Scalar(Imm::Int(ty, d));
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), dv, Arg::scalar(n as u32)];
    agree(&k, &range, &args, &bufs, &format!("{ty} by {d:#x}, n {n}"));
}

#[test]
fn u64_lanes_divided_by_a_parameter_match_the_interpreter() {
    assert_magic(&by_param(Scalar::U64), 1);
    for (j, &d) in U64_DIVISORS.iter().enumerate() {
        check_param(Scalar::U64, d, 501 + 3 * j);
    }
}

#[test]
fn i64_lanes_divided_by_a_parameter_truncate_and_wrap_like_the_interpreter() {
    assert_magic(&by_param(Scalar::I64), 1);
    for (j, &d) in I64_DIVISORS.iter().enumerate() {
        check_param(Scalar::I64, d as u64, 499 + 3 * j);
    }
}

#[test]
fn a_zero_divisor_is_the_first_active_lanes_error_and_none_without_one() {
    for ty in [Scalar::U64, Scalar::I64] {
        let k = by_param(ty);
        let x = dividends(false, 3, 100);
        let range = NdRange::new(&[128]).with_local(&[64]);
        for n in [100u32, 5, 1, 0] {
            let bufs = vec![buffer(ty, &x), Buffer::zeroed(ty, 100), Buffer::zeroed(ty, 100)];
            let dv = Arg::Scalar(Imm::Int(ty, 0));
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), dv, Arg::scalar(n)];
            agree(&k, &range, &args, &bufs, &format!("{ty}, n = {n}"));
        }
    }
}

#[test]
fn a_zero_divisor_faults_first_in_a_later_batch_after_earlier_stores() {
    // Only work-items whose flag is set divide; the first such is in a later batch.
    let k = kernel(
        "kernel k(f: ptr<global, u32>, x: ptr<global, u64>, q: ptr<global, u64>, d: u64, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    q[i] = x[i] + 1;
    if f[i] != 0 {
      q[i] = x[i] % d;
    }
  }
}",
    );
    assert_magic(&k, 1);
    let n = 203usize;
    let x = dividends(false, 5, n);
    for (first, d) in [(37usize, 0u64), (150, 0), (150, 9), (202, 0)] {
        let f: Vec<u32> = (0..n).map(|i| (i >= first && i % 3 != 1) as u32).collect();
        let bufs =
            vec![Buffer::from_slice(&f), buffer(Scalar::U64, &x), Buffer::zeroed(Scalar::U64, n)];
        let range = NdRange::new(&[256]).with_local(&[64]);
        let args =
            [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(d), Arg::scalar(n as u32)];
        agree(&k, &range, &args, &bufs, &format!("first {first}, d {d}"));
    }
}

#[test]
fn modular_exponentiation_by_a_nested_let_matches_the_interpreter() {
    // The cpu suite's `modpow`: the divisor `mm` a nested `let` of a u32 parameter.
    let k = kernel(
        "kernel modpow(base: ptr<global, u32>, expo: ptr<global, u32>, out: ptr<global, u32>, md: u32, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    let mm: u64 = md as u64;
    var b: u64 = base[i] as u64 % mm;
    var e: u32 = expo[i];
    var r: u64 = 1;
    while e > 0 {
      if (e & 1) == 1 {
        r = r * b % mm;
      }
      b = b * b % mm;
      e = e >> 1;
    }
    out[i] = r as u32;
  }
}",
    );
    assert_magic(&k, 1);
    let n = 333usize;
    let mut s = 77u32;
    let mut next = || {
        s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        s
    };
    let base: Vec<u32> = (0..n).map(|_| next()).collect();
    let expo: Vec<u32> =
        (0..n).map(|i| if i % 5 == 0 { i as u32 } else { next() >> (i % 32) }).collect();
    for md in [1u32, 2, 3, 1_000_000_007, 0x7fff_ffff, 0xffff_fffb, u32::MAX, 0] {
        let bufs = vec![
            Buffer::from_slice(&base),
            Buffer::from_slice(&expo),
            Buffer::from_slice(&vec![0u32; n]),
        ];
        let range = NdRange::new(&[n.next_multiple_of(32) as u32]).with_local(&[32]);
        let args = [
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::Buffer(2),
            Arg::scalar(md),
            Arg::scalar(n as u32),
        ];
        agree(&k, &range, &args, &bufs, &format!("md = {md}"));
    }
}

#[test]
fn a_divisor_from_the_row_id_is_computed_again_for_every_row() {
    // Fixed for a row, different in each: one launch runs the scalar magic-number code on
    // every row's divisor, of every width as `s` scales it (0 in row 0 where `t` is 0).
    for ty in [Scalar::U64, Scalar::I64] {
        let k = kernel(&format!(
            "kernel k(x: ptr<global, {ty}>, q: ptr<global, {ty}>, w: u32, s: {ty}, t: {ty}) {{
  let y: u32 = global_id(1);
  let dv: {ty} = (y as {ty}) * s + t;
  let i: u32 = global_id(0);
  if i < w {{
    q[y * w + i] = x[y * w + i] / dv + x[y * w + i] % dv;
  }}
}}"
        ));
        assert_magic(&k, 1);
        let (w, h) = (29usize, 200usize);
        let x = dividends(ty == Scalar::I64, 7, w * h);
        let scales: [u64; 4] = [3, 0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210, 1 << 57];
        let cases = scales.iter().map(|&s| (s, 1u64)).chain([(5, 0)]);
        for (s, t) in cases {
            let range = NdRange::new(&[32, h as u32]).with_local(&[16, 4]);
            let bufs = vec![buffer(ty, &x), Buffer::zeroed(ty, w * h)];
            let (sv, tv) = (Arg::Scalar(Imm::Int(ty, s)), Arg::Scalar(Imm::Int(ty, t)));
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(w as u32), sv, tv];
            agree(&k, &range, &args, &bufs, &format!("{ty}, s = {s:#x}, t = {t}"));
        }
    }
}

#[test]
fn a_divisor_parameter_in_a_kernel_with_barriers_matches_the_interpreter() {
    // Region code: the magic number computed where the region loops start.
    let k = kernel(
        "kernel k(x: ptr<global, i64>, q: ptr<global, i64>, d: i64, n: u32) #reqd_work_group_size(64, 1, 1) {
  local t: i64[64];
  let l: u32 = local_id(0);
  let i: u32 = global_id(0);
  t[l] = 0;
  if i < n {
    t[l] = x[i] % d;
  }
  barrier(local);
  if i < n {
    q[i] = t[63 - l] / d + x[i] / d;
  }
}",
    );
    assert_magic(&k, 1);
    for d in [1i64, -1, 3, -1000, i64::MIN, i64::MAX, 0] {
        let n = 300usize;
        let x = dividends(true, d as u64, n);
        let range = NdRange::new(&[320]).with_local(&[64]);
        let bufs = vec![buffer(Scalar::I64, &x), Buffer::zeroed(Scalar::I64, n)];
        let dv = Arg::Scalar(Imm::Int(Scalar::I64, d as u64));
        let args = [Arg::Buffer(0), Arg::Buffer(1), dv, Arg::scalar(n as u32)];
        agree(&k, &range, &args, &bufs, &format!("d = {d}"));
    }
}
