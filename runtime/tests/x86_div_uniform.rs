//! i32/u32 `/` and `%` of lanes by a divisor fixed for the call
//! (`backends/src/x86/spmd/divuniform.rs`: a magic number and two shifts computed once per
//! call in scalar code, then a multiply-high and shifts per batch): results and errors
//! against the interpreter and the scalar code for divisors that are parameters, constants,
//! row ids of a 2-D launch (hundreds of divisors in one launch, so the scalar code that
//! computes the magic numbers meets every class) and hoisted `let`s; every divisor class (1,
//! powers of two, 3, 7, 0x8000_0001, `u32::MAX`, i32 negatives, `i32::MIN`, -1 with
//! `i32::MIN / -1`), dividends over the whole range (multiples of the divisor, its
//! neighbours, the extremes), zero divisors with and without active lanes, guarded and
//! unguarded, guards, odd sizes, ranges rounded up, and `/`–`%` pairs of `let`s and of
//! assignments.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Imm, Scalar};

/// The divisors the tests try: small, powers of two and their neighbours, large, the top.
const DIVISORS: [u32; 16] = [
    1,
    2,
    3,
    7,
    10,
    255,
    256,
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

/// Dividends around the multiples of `d` and across the range, `n` of them.
fn dividends(d: u32, n: usize) -> Vec<u32> {
    let mut v = Vec::with_capacity(n);
    let mut s = 0x9e37_79b9u32 ^ d;
    for i in 0..n as u32 {
        s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        let k = s >> (i % 32);
        v.push(match i % 6 {
            0 => k.wrapping_mul(d),
            1 => k.wrapping_mul(d).wrapping_sub(1),
            2 => k.wrapping_mul(d).wrapping_add(1),
            3 => u32::MAX - (i / 6),
            4 => i / 6,
            _ => s,
        });
    }
    v
}

const BY_PARAM: &str =
    "kernel k(x: ptr<global, u32>, q: ptr<global, u32>, r: ptr<global, u32>, d: u32, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    q[i] = x[i] / d;
    r[i] = x[i] % d;
  }
}";

fn bufs(x: &[u32]) -> Vec<Buffer> {
    let z = vec![0u32; x.len()];
    vec![Buffer::from_slice(x), Buffer::from_slice(&z), Buffer::from_slice(&z)]
}

#[test]
fn a_divisor_parameter_divides_every_lane_exactly() {
    let k = kernel(BY_PARAM);
    if avx2() {
        let l = vector_listing(&k);
        assert!(l.iter().any(|l| l.starts_with("vpmuludq")), "the magic number");
        assert!(!l.iter().any(|l| l.starts_with("vdivpd") || l.starts_with("vcvt")), "no f64");
    }
    for (j, &d) in DIVISORS.iter().enumerate() {
        let n = 1000 + 37 * j;
        let x = dividends(d, n);
        let range = NdRange::new(&[n.next_multiple_of(64) as u32]).with_local(&[64]);
        let args =
            [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(d), Arg::scalar(n as u32)];
        agree(&k, &range, &args, &bufs(&x), &format!("d = {d}"));
    }
}

#[test]
fn a_zero_divisor_is_the_first_active_lanes_error_and_none_without_one() {
    let k = kernel(BY_PARAM);
    let x = dividends(3, 100);
    let range = NdRange::new(&[128]).with_local(&[64]);
    for n in [100u32, 5, 1, 0] {
        let args =
            [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(0u32), Arg::scalar(n)];
        agree(&k, &range, &args, &bufs(&x), &format!("n = {n}"));
    }
}

#[test]
fn constant_divisors_divide_every_lane_exactly() {
    for d in [1u32, 3, 7, 10, 1000, 0x8000_0001, 0xffff_ffff] {
        let src = format!(
            "kernel k(x: ptr<global, u32>, q: ptr<global, u32>, r: ptr<global, u32>, n: u32) {{
  let i: u32 = global_id(0);
  if i < n {{
    q[i] = x[i] / {d}u32;
    r[i] = x[i] % {d}u32;
  }}
}}"
        );
        let k = kernel(&src);
        let n = 777;
        let x = dividends(d, n);
        let range = NdRange::new(&[800]).with_local(&[32]);
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n as u32)];
        agree(&k, &range, &args, &bufs(&x), &format!("d = {d}"));
    }
}

#[test]
fn a_divisor_from_the_row_id_is_computed_again_for_every_row() {
    // `y + 1` and a hoisted `let` of it: fixed for a row, different in each row of a group
    // (whose rows one call runs), zero in row u32::MAX... here in the row where `s` is 0.
    let k = kernel(
        "kernel k(x: ptr<global, u32>, q: ptr<global, u32>, w: u32, s: u32) {
  let y: u32 = global_id(1);
  let dv: u32 = y * s + 1;
  let i: u32 = global_id(0);
  if i < w {
    q[y * w + i] = x[y * w + i] / dv + x[y * w + i] % (y + 1);
  }
}",
    );
    let (w, h) = (29usize, 12usize);
    let x = dividends(7, w * h);
    for s in [3u32, 0x1000_0000, 0xffff_ffff] {
        let range = NdRange::new(&[32, h as u32]).with_local(&[16, 4]);
        let bufs = vec![Buffer::from_slice(&x), Buffer::from_slice(&vec![0u32; w * h])];
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(w as u32), Arg::scalar(s)];
        agree(&k, &range, &args, &bufs, &format!("s = {s}"));
    }
}

#[test]
fn a_divisor_parameter_in_a_kernel_with_barriers_matches_the_interpreter() {
    let k = kernel(
        "kernel k(x: ptr<global, u32>, q: ptr<global, u32>, d: u32, n: u32) #reqd_work_group_size(64, 1, 1) {
  local t: u32[64];
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
    for d in [1u32, 3, 1000, 0xffff_ffff, 0] {
        let n = 300usize;
        let x = dividends(d.max(1), n);
        let range = NdRange::new(&[320]).with_local(&[64]);
        let bufs = vec![Buffer::from_slice(&x), Buffer::from_slice(&vec![0u32; n])];
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(d), Arg::scalar(n as u32)];
        agree(&k, &range, &args, &bufs, &format!("d = {d}"));
    }
}

/// i32 divisors of every class: ±1, ±powers of two, small and large, `i32::MIN`, `i32::MAX`.
const I32_DIVISORS: [i32; 20] = [
    1,
    -1,
    2,
    -2,
    3,
    -3,
    7,
    -7,
    16,
    -1000,
    65537,
    -65537,
    0x4000_0000,
    -0x4000_0000,
    0x5555_5555,
    i32::MAX,
    -i32::MAX,
    i32::MIN,
    i32::MIN + 1,
    0x7fff_0001,
];

/// i32 dividends: the extremes, around the multiples of `d` on both sides, and random ones.
fn i32_dividends(d: i32, n: usize) -> Vec<i32> {
    let mut v = vec![i32::MIN, i32::MIN + 1, i32::MAX, i32::MAX - 1, 0, 1, -1, d, d.wrapping_neg()];
    v.extend(dividends(d.unsigned_abs(), n).into_iter().map(|x| x as i32));
    v.truncate(n);
    v
}

fn i32_bufs(x: &[i32]) -> Vec<Buffer> {
    let z = vec![0i32; x.len()];
    vec![Buffer::from_slice(x), Buffer::from_slice(&z), Buffer::from_slice(&z)]
}

const I32_BY_PARAM: &str =
    "kernel k(x: ptr<global, i32>, q: ptr<global, i32>, r: ptr<global, i32>, d: i32, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    q[i] = x[i] / d;
    r[i] = x[i] % d;
  }
}";

#[test]
fn an_i32_divisor_parameter_truncates_and_wraps_like_the_interpreter() {
    let k = kernel(I32_BY_PARAM);
    if avx2() {
        let l = vector_listing(&k);
        assert!(l.iter().any(|l| l.starts_with("vpmuludq")), "the magic number");
        assert!(!l.iter().any(|l| l.starts_with("vdivpd")), "no f64");
    }
    for (j, &d) in I32_DIVISORS.iter().enumerate() {
        let n = 999 + 2 * j;
        let x = i32_dividends(d, n);
        let range = NdRange::new(&[n.next_multiple_of(64) as u32]).with_local(&[64]);
        let args =
            [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(d), Arg::scalar(n as u32)];
        agree(&k, &range, &args, &i32_bufs(&x), &format!("d = {d}"));
    }
}

#[test]
fn an_i32_zero_divisor_is_the_first_active_lanes_error_guarded_or_not() {
    let unguarded =
        "kernel k(x: ptr<global, i32>, q: ptr<global, i32>, r: ptr<global, i32>, d: i32, n: u32) {
  let i: u32 = global_id(0);
  q[i] = x[i] / d;
  r[i] = x[i] % d;
}";
    let x = i32_dividends(3, 128);
    for src in [I32_BY_PARAM, unguarded] {
        let k = kernel(src);
        for (global, n) in [(128u32, 100u32), (128, 5), (64, 1), (64, 0), (24, 24)] {
            let range = NdRange::new(&[global]).with_local(&[8]);
            let args =
                [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(0i32), Arg::scalar(n)];
            agree(&k, &range, &args, &i32_bufs(&x), &format!("n = {n}, global {global}"));
        }
    }
}

/// `q[i] = x / dv`, `r[i] = x % dv` with `dv = y * s + t` (`y` the row): one divisor per
/// row, computed again for each, so one launch meets `rows` divisors. The dividends of a
/// row are its divisor's neighbourhood and the extremes.
fn per_row(ty: Scalar, rows: u32, s: u32, t: u32) {
    let k = kernel(&format!(
        "kernel k(x: ptr<global, {ty}>, q: ptr<global, {ty}>, r: ptr<global, {ty}>, w: u32, s: {ty}, t: {ty}) {{
  let y: u32 = global_id(1);
  let dv: {ty} = y as {ty} * s + t;
  let i: u32 = global_id(0);
  if i < w {{
    let a: {ty} = x[y * w + i];
    q[y * w + i] = a / dv;
    r[y * w + i] = a % dv;
  }}
}}"
    ));
    let w = 45u32;
    let mut x = Vec::new();
    for y in 0..rows {
        let d = (y.wrapping_mul(s).wrapping_add(t)) as i64;
        let d = if ty == Scalar::I32 { d as u32 as i32 as i64 } else { d };
        let mut row: Vec<i64> = vec![0, 1, -1, d, -d, d + 1, d - 1, 2 * d, 2 * d - 1, 3 * d + 1];
        row.extend([i64::MIN, i64::MAX, 0x7fff_ffff, 0x8000_0000, 0xffff_fffe]);
        let mut z = (y as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        while row.len() < w as usize {
            z = z.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let q = (z >> 40) as i64;
            row.extend([q * d, q * d - 1, (z >> 32) as i64]);
        }
        row.truncate(w as usize);
        x.extend(row);
    }
    let (lo, hi) =
        if ty == Scalar::I32 { (i32::MIN as i64, i32::MAX as i64) } else { (0, u32::MAX as i64) };
    let imms: Vec<Imm> = x.iter().map(|&v| Imm::int(ty, v.clamp(lo, hi) as i128)).collect();
    let len = imms.len();
    let bufs = vec![
        Buffer::from_imms(ty, &imms).unwrap(),
        Buffer::zeroed(ty, len),
        Buffer::zeroed(ty, len),
    ];
    let range = NdRange::new(&[48, rows]).with_local(&[16, 4]);
    // The parameters' bits, as the type's value.
    let imm = |v: u32| Imm::int(ty, if ty == Scalar::I32 { v as i32 as i128 } else { v as i128 });
    let args = [
        Arg::Buffer(0),
        Arg::Buffer(1),
        Arg::Buffer(2),
        Arg::scalar(w),
        Arg::Scalar(imm(s)),
        Arg::Scalar(imm(t)),
    ];
    agree(&k, &range, &args, &bufs, &format!("{ty} rows {rows}, s {s}, t {t}"));
}

#[test]
fn hundreds_of_divisors_in_one_launch_each_divide_exactly() {
    // Small divisors one by one, then strides over the range (a row's divisor wraps for
    // u32, and for i32 crosses to negatives), the last row's divisor at the top.
    for (s, t) in
        [(1u32, 1u32), (0x0111_1111, 7), (0x00ff_ffff, 0x8000_0001), (3, u32::MAX - 3 * 255)]
    {
        per_row(Scalar::U32, 256, s, t);
    }
    for (s, t) in
        [(1u32, 1u32), (1, (-128i32) as u32), (0x0111_1111, 7), (0x00ff_ffff, 0x8000_0000)]
    {
        per_row(Scalar::I32, 256, s, t);
    }
    // A zero divisor in one row: that row's first work-item faults, as in the interpreter.
    per_row(Scalar::U32, 8, 1, (-5i32) as u32);
    per_row(Scalar::I32, 8, (-1i32) as u32, 5);
}

#[test]
fn pairs_of_assignments_and_of_i32_lets_share_one_division() {
    if !avx2() {
        return kiln_ir::testing::skip("no AVX2: no 8-lane code to look at");
    }
    let src = |body: &str| {
        format!(
            "kernel k(x: ptr<global, i32>, q: ptr<global, i32>, r: ptr<global, i32>, d: i32, n: u32) {{
  let i: u32 = global_id(0);
  if i < n {{
    {body}
    q[i] = a;
    r[i] = b;
  }}
}}"
        )
    };
    let apart = src("let a: i32 = x[i] / d;\n    let t: i32 = x[i];\n    let b: i32 = t % d;");
    let lets = src("let t: i32 = x[i];\n    let a: i32 = t / d;\n    let b: i32 = t % d;");
    let assigns =
        src("let t: i32 = x[i];\n    var a: i32 = 0;\n    var b: i32 = 1;\n    b = t % d;\n    a = t / d;");
    let count =
        |s: &str| vector_listing(&kernel(s)).iter().filter(|l| l.starts_with("vpmuludq")).count();
    let (two, one) = (count(&apart), count(&lets));
    assert!(one > 0 && two == 2 * one, "{one} {two}");
    assert_eq!(count(&assigns), one);
    for s in [apart, lets, assigns] {
        let k = kernel(&s);
        for &d in &I32_DIVISORS[..6] {
            for d in [d, 0] {
                let n = 203;
                let x = i32_dividends(d.max(3), n);
                let range = NdRange::new(&[208]).with_local(&[16]);
                let args = [
                    Arg::Buffer(0),
                    Arg::Buffer(1),
                    Arg::Buffer(2),
                    Arg::scalar(d),
                    Arg::scalar(n as u32),
                ];
                agree(&k, &range, &args, &i32_bufs(&x), &format!("d = {d}\n{s}"));
            }
        }
    }
}
