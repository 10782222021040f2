//! Row reductions in 64 bits (`blocked.rs`): each lane sums its own row of 32-bit data into
//! a `u64`, `i64` or `f64` accumulator (`s = s + x[r * cols + j] as u64`, which `-O` writes
//! as `mad(r, cols, j)`), eight iterations at a time from transposed row segments. Each case
//! compares results and errors with the interpreter and the scalar code, bit for bit: odd
//! rows and columns, rounded-up ranges, short buffers (the blocked check fails and the
//! ordinary loop faults where the interpreter does), negative and wrapping indices, wrapping
//! `u64` sums and `f64` sums with NaN and infinities (no reassociation).
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{avx2, kernel, three_ways};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Kernel, Scalar};

/// The row sum of the third suite set: `u32` data, `u64` sums, the index `r * cols + j`.
const ROWSUM64: &str =
    "kernel k(x: ptr<global, u32>, out: ptr<global, u64>, rows: u32, cols: u32) {
  let r: u32 = global_id(0);
  if r < rows {
    var s: u64 = 0u64;
    for j: u32 in 0u32 .. cols {
      s = s + x[r * cols + j] as u64;
    }
    out[r] = s;
  }
}";

/// A wrapping `u64` hash of a row (multiplies past 2^64) and a dot product of two rows.
const HASH64: &str = "kernel k(x: ptr<global, u32>, y: ptr<global, u32>, out: ptr<global, u64>, rows: u32, cols: u32) {
  let r: u32 = global_id(0);
  if r < rows {
    var h: u64 = 1469598103934665603u64;
    var d: u64 = 0u64;
    for j: u32 in 0u32 .. cols {
      h = h * 1099511628211u64 + x[r * cols + j] as u64;
      d = d + (x[r * cols + j] as u64) * (y[j + r * cols] as u64);
    }
    out[2u32 * r] = h;
    out[2u32 * r + 1u32] = d;
  }
}";

/// Sums of `f32` data in `f64`, and of squares (a row's mean and variance).
const MOMENTS64: &str =
    "kernel k(x: ptr<global, f32>, out: ptr<global, f64>, rows: u32, cols: u32) {
  let r: u32 = global_id(0);
  if r < rows {
    var s: f64 = 0.0f64;
    var q: f64 = 0.0f64;
    for j: u32 in 0u32 .. cols {
      let v: f64 = x[r * cols + j] as f64;
      s = s + v;
      q = q + v * v;
    }
    out[2u32 * r] = s / (cols as f64);
    out[2u32 * r + 1u32] = q;
  }
}";

/// Signed rows: `i32` data summed in `i64` from a `let` base that may be negative.
const SIGNED64: &str =
    "kernel k(x: ptr<global, i32>, out: ptr<global, i64>, rows: i32, cols: i32, off: i32) {
  let r: i32 = global_id(0) as i32;
  if r < rows {
    let base: i32 = r * cols + off;
    var s: i64 = 0i64;
    for j: i32 in 0i32 .. cols {
      s = s + x[base + j] as i64 * 3i64;
    }
    out[r] = s;
  }
}";

/// `n` `u32` values spread over the whole range (sums past 2^32).
fn u32s(n: usize, seed: u32) -> Buffer {
    Buffer::from_slice(
        &(0..n as u32)
            .map(|i| (i ^ seed).wrapping_mul(2654435761).rotate_left(7))
            .collect::<Vec<_>>(),
    )
}

/// `n` `f32` values with NaN, infinities, huge and tiny ones for odd seeds.
fn f32s(n: usize, seed: u32) -> Buffer {
    let special = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 3.0e38, 1.0e-30, -0.0];
    Buffer::from_slice(
        &(0..n as u32)
            .map(|i| match (i.wrapping_mul(2654435761) ^ seed) % 97 {
                v @ 0..=5 if seed % 2 == 1 => special[v as usize],
                v => v as f32 * 0.37 - 17.3,
            })
            .collect::<Vec<_>>(),
    )
}

/// Odd and exact sizes: no chunk, one, several with a tail; rows not a multiple of 8.
const SIZES: [(u32, u32); 7] = [(13, 7), (16, 8), (21, 9), (9, 37), (24, 64), (5, 129), (1, 1)];

/// The range of `rows` work-items rounded up to groups of 8 (the kernel's guard).
fn range(rows: u32) -> NdRange {
    NdRange::new(&[rows.div_ceil(8) * 8]).with_local(&[8])
}

/// The full batches' loop of `k` runs blocked (transposed row segments), plain and `-O`.
fn runs_blocked(k: &Kernel) {
    if !avx2() {
        kiln_ir::testing::skip("this CPU has no AVX2: the listing has no 8-lane code");
        return;
    }
    for optimize in [false, true] {
        let d =
            compile(k, &X86Options { optimize, ..X86Options::default() }).unwrap().disassemble();
        let lanes = &d[d.find("; 8-lane AVX2 code").expect("vector code")..];
        // (Row segments of 32-bit elements: two halves per register; 64-bit: 4x4 qword
        // transposes.)
        let n =
            lanes.lines().filter(|l| l.contains("vinsertf128") || l.contains("vperm2f128")).count();
        assert!(n >= 8, "not blocked (optimize: {optimize}):\n{lanes}");
    }
}

#[test]
fn u64_row_sums_run_blocked_and_agree() {
    let k = kernel(ROWSUM64);
    runs_blocked(&k);
    for (i, (rows, cols)) in SIZES.into_iter().enumerate() {
        let n = (rows * cols) as usize;
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(rows), Arg::scalar(cols)];
        let bufs = [u32s(n, i as u32), Buffer::zeroed(Scalar::U64, rows as usize)];
        assert_eq!(three_ways(&k, &range(rows), &args, &bufs), avx2(), "{rows}x{cols}");
        // A short input: the blocked check fails and the ordinary loop faults.
        for short in [1usize, 9] {
            let bufs =
                [u32s(n.saturating_sub(short), 1), Buffer::zeroed(Scalar::U64, rows as usize)];
            three_ways(&k, &range(rows), &args, &bufs);
        }
    }
    // Rows whose `r * cols + j` wraps in 32 bits: the interpreter's index is the wrapped
    // one (in bounds for the first rows), which the blocked check must not take for a row.
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(16u32), Arg::scalar(0x2000_0000u32)];
    let bufs = [u32s(64, 3), Buffer::zeroed(Scalar::U64, 16)];
    three_ways(&k, &range(16), &args, &bufs);
}

#[test]
fn wrapping_u64_hashes_and_dot_products_agree() {
    let k = kernel(HASH64);
    runs_blocked(&k);
    for (i, (rows, cols)) in SIZES.into_iter().enumerate() {
        let n = (rows * cols) as usize;
        let args =
            [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(rows), Arg::scalar(cols)];
        let out = Buffer::zeroed(Scalar::U64, 2 * rows as usize);
        let bufs = [u32s(n, i as u32), u32s(n, 7 + i as u32), out.clone()];
        assert_eq!(three_ways(&k, &range(rows), &args, &bufs), avx2(), "{rows}x{cols}");
        let bufs = [u32s(n, 2), u32s(n - 1, 3), out];
        three_ways(&k, &range(rows), &args, &bufs);
    }
}

#[test]
fn f64_row_moments_of_f32_data_agree_bit_for_bit() {
    let k = kernel(MOMENTS64);
    runs_blocked(&k);
    for (i, (rows, cols)) in SIZES.into_iter().enumerate() {
        let n = (rows * cols) as usize;
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(rows), Arg::scalar(cols)];
        for seed in [i as u32 * 2, i as u32 * 2 + 1] {
            let bufs = [f32s(n, seed), Buffer::zeroed(Scalar::F64, 2 * rows as usize)];
            assert_eq!(three_ways(&k, &range(rows), &args, &bufs), avx2(), "{rows}x{cols}");
        }
        let bufs = [f32s(n - 1, 1), Buffer::zeroed(Scalar::F64, 2 * rows as usize)];
        three_ways(&k, &range(rows), &args, &bufs);
    }
}

#[test]
fn i64_sums_of_signed_rows_agree_with_negative_bases() {
    let k = kernel(SIGNED64);
    runs_blocked(&k);
    for (rows, cols) in SIZES {
        let n = (rows * cols) as usize + 8;
        for off in [0i32, 3, -5, -(cols as i32) * 3] {
            let args = [
                Arg::Buffer(0),
                Arg::Buffer(1),
                Arg::scalar(rows as i32),
                Arg::scalar(cols as i32),
                Arg::scalar(off),
            ];
            // (`u32` bits read as `i32` data: negative values too.)
            let x = u32s(n, off as u32).to_vec::<u32>().expect("u32 data");
            let x = Buffer::from_slice(&x.iter().map(|&v| v as i32).collect::<Vec<_>>());
            let bufs = [x, Buffer::zeroed(Scalar::I64, rows as usize)];
            three_ways(&k, &range(rows), &args, &bufs);
        }
    }
}

/// Rows of 64-bit data: an `f64` matrix-vector product (`x[j]` one element for all lanes)
/// and a wrapping `u64` sum with a product, `j` read outside the row access too.
const DGEMV: &str = "kernel k(a: ptr<global, f64>, x: ptr<global, f64>, y: ptr<global, f64>, rows: u32, cols: u32) {
  let r: u32 = global_id(0);
  if r < rows {
    var acc: f64 = 0.0f64;
    for j: u32 in 0u32 .. cols {
      acc = acc + a[r * cols + j] * x[j];
    }
    y[r] = acc;
  }
}";

/// `u64` and `i64` rows (the base a `let`), and a store of 32-bit results in the same loop.
const WIDE_DATA: &str = "kernel k(u: ptr<global, u64>, v: ptr<global, i64>, o: ptr<global, u64>, f: ptr<global, f32>, rows: u32, cols: u32) {
  let r: u32 = global_id(0);
  if r < rows {
    let base: u32 = r * cols;
    var s: u64 = 0u64;
    var t: i64 = 0i64;
    for j: u32 in 0u32 .. cols {
      s = s * 3u64 + u[base + j] + (j as u64);
      t = t + v[j + base];
      f[base + j] = (v[base + j] as f32) * 0.5;
    }
    o[2u32 * r] = s;
    o[2u32 * r + 1u32] = t as u64;
  }
}";

/// `n` `f64` values with NaN and infinities for odd seeds.
fn f64s(n: usize, seed: u32) -> Buffer {
    let special = [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 1.0e300, 1.0e-300, -0.0];
    Buffer::from_slice(
        &(0..n as u32)
            .map(|i| match (i.wrapping_mul(2654435761) ^ seed) % 97 {
                v @ 0..=5 if seed % 2 == 1 => special[v as usize],
                v => f64::from(v) * 0.37 - 17.3 + f64::from(i) * 1.0e-9,
            })
            .collect::<Vec<_>>(),
    )
}

/// `n` `u64` values over the whole range (sums that wrap).
fn u64s(n: usize, seed: u32) -> Vec<u64> {
    (0..n as u64).map(|i| (i ^ u64::from(seed)).wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect()
}

#[test]
fn f64_matrix_vector_rows_run_blocked_and_agree() {
    let k = kernel(DGEMV);
    runs_blocked(&k);
    for (i, (rows, cols)) in SIZES.into_iter().enumerate() {
        let n = (rows * cols) as usize;
        let args =
            [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(rows), Arg::scalar(cols)];
        for seed in [2 * i as u32, 2 * i as u32 + 1] {
            let bufs = [f64s(n, seed), f64s(cols as usize, 5), Buffer::zeroed(Scalar::F64, 64)];
            assert_eq!(three_ways(&k, &range(rows), &args, &bufs), avx2(), "{rows}x{cols}");
        }
        // Short matrix, short vector.
        let bufs = [f64s(n - 1, 0), f64s(cols as usize, 5), Buffer::zeroed(Scalar::F64, 64)];
        three_ways(&k, &range(rows), &args, &bufs);
        let bufs = [f64s(n, 0), f64s(cols as usize - 1, 5), Buffer::zeroed(Scalar::F64, 64)];
        three_ways(&k, &range(rows), &args, &bufs);
    }
}

#[test]
fn u64_and_i64_rows_with_stores_agree() {
    let k = kernel(WIDE_DATA);
    runs_blocked(&k);
    for (i, (rows, cols)) in SIZES.into_iter().enumerate() {
        let n = (rows * cols) as usize;
        let args = [
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::Buffer(2),
            Arg::Buffer(3),
            Arg::scalar(rows),
            Arg::scalar(cols),
        ];
        let u = Buffer::from_slice(&u64s(n, i as u32));
        let v: Vec<i64> = u64s(n, 9 + i as u32).iter().map(|&x| x as i64 >> 3).collect();
        let bufs = [
            u.clone(),
            Buffer::from_slice(&v),
            Buffer::zeroed(Scalar::U64, 2 * rows as usize),
            Buffer::zeroed(Scalar::F32, n),
        ];
        assert_eq!(three_ways(&k, &range(rows), &args, &bufs), avx2(), "{rows}x{cols}");
        // A short `i64` row buffer, then a short store buffer.
        let mut short = bufs.clone();
        short[1] = Buffer::from_slice(&v[..n - 1]);
        three_ways(&k, &range(rows), &args, &short);
        let mut short = bufs.clone();
        short[3] = Buffer::zeroed(Scalar::F32, n.saturating_sub(2));
        three_ways(&k, &range(rows), &args, &short);
    }
}

/// Products of 64-bit integers widened from 32 bits: from `u32` (the high halves zero: one
/// `vpmuludq`), from `i32` (sign-extended: the full product), and mixed.
const PRODUCTS: &str =
    "kernel k(x: ptr<global, u32>, z: ptr<global, i32>, out: ptr<global, u64>, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    let a: u32 = x[i];
    let b: u32 = x[n - 1u32 - i];
    let c: i32 = z[i];
    out[4u32 * i] = (a as u64) * (b as u64);
    out[4u32 * i + 1u32] = ((a as i64) * (b as i64)) as u64;
    out[4u32 * i + 2u32] = ((c as i64) * (a as i64)) as u64;
    out[4u32 * i + 3u32] = (c as u64) * (b as u64) + (a as u64) * ((b as u64) + 1u64);
  }
}";

#[test]
fn products_of_widened_32_bit_integers_agree() {
    let k = kernel(PRODUCTS);
    for n in [1u32, 7, 8, 37, 64] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n)];
        let x = u32s(n as usize, n).to_vec::<u32>().expect("u32 data");
        let mut x = x;
        // Extremes: the largest products.
        x[0] = u32::MAX;
        let z: Vec<i32> = x.iter().map(|&v| v as i32).collect();
        let bufs = [
            Buffer::from_slice(&x),
            Buffer::from_slice(&z),
            Buffer::zeroed(Scalar::U64, 4 * n as usize),
        ];
        assert_eq!(three_ways(&k, &range(n), &args, &bufs), avx2(), "{n}");
    }
}
