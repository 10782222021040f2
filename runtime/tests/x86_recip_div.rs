//! u32 `/` and `%` of lanes by a divisor fixed for the call (`backends/src/x86/spmd/recip.rs`:
//! a reciprocal computed once, then a multiply and one correction per batch): results and
//! errors against the interpreter and the scalar code for divisors that are parameters,
//! constants, row ids of a 2-D launch and hoisted `let`s, dividends over the whole u32 range
//! (multiples of the divisor, its neighbours, 0, `u32::MAX`), zero divisors with and without
//! active lanes, guards and odd sizes; and the arithmetic itself checked in plain Rust.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, kernel, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};

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

/// The recurrence the code computes, in plain Rust: the f64 reciprocal, the truncated
/// product, one correction.
fn by_recip(a: u32, b: u32) -> (u32, u32) {
    let r = 1.0 / b as f64;
    let t = (a as f64 * r).trunc() as u32;
    let rem = a.wrapping_sub(t.wrapping_mul(b));
    if rem >= b {
        (t + 1, rem - b)
    } else {
        (t, rem)
    }
}

#[test]
fn the_reciprocal_and_one_correction_give_the_quotient() {
    let mut s = 12345u64;
    let mut next = || {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (s >> 32) as u32
    };
    for &b in &DIVISORS {
        for a in dividends(b, 20_000) {
            assert_eq!(by_recip(a, b), (a / b, a % b), "{a} / {b}");
        }
    }
    for _ in 0..2_000_000 {
        let (x, y) = (next(), next());
        // Divisors of every magnitude, dividends around their multiples and anywhere.
        let b = (y >> (x % 32)).max(1);
        for a in [x, (x / b).wrapping_mul(b), (x / b).wrapping_mul(b).wrapping_sub(1)] {
            assert_eq!(by_recip(a, b), (a / b, a % b), "{a} / {b}");
        }
    }
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
    assert!(!vector_listing(&k).iter().any(|l| l.starts_with("vdivpd")), "the reciprocal");
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
fn an_index_decomposed_by_sizes_matches_the_interpreter() {
    // NCHW to NHWC from a 1-D launch: six divisions by three parameters.
    let k = kernel(
        "kernel permute(src: ptr<global, f32>, dst: ptr<global, f32>, c: u32, h: u32, w: u32, total: u32) {
  let i: u32 = global_id(0);
  if i < total {
    let ch: u32 = i % c;
    let p: u32 = i / c;
    let x: u32 = p % w;
    let q: u32 = p / w;
    let y: u32 = q % h;
    let b: u32 = q / h;
    dst[i] = src[((b * c + ch) * h + y) * w + x];
  }
}",
    );
    for (c, h, w, nb) in [(3u32, 7u32, 11u32, 2u32), (4, 5, 9, 3), (1, 13, 3, 1), (5, 1, 1, 7)] {
        let total = (c * h * w * nb) as usize;
        let src: Vec<f32> = (0..total).map(|v| v as f32).collect();
        let bufs = vec![Buffer::from_slice(&src), Buffer::from_slice(&vec![0f32; total])];
        let range = NdRange::new(&[total.next_multiple_of(16) as u32]).with_local(&[16]);
        let args = [
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::scalar(c),
            Arg::scalar(h),
            Arg::scalar(w),
            Arg::scalar(total as u32),
        ];
        agree(&k, &range, &args, &bufs, &format!("{c}x{h}x{w}x{nb}"));
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
