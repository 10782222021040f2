//! Row-blocked loops with loads at exactly the counter (`backends/src/x86/spmd/blockio.rs`):
//! one work-item per row, a `for j in 0 .. cols` loop reading `x[r * cols + j]` and a
//! per-iteration element every lane shares (`gamma[j]`, `y[j]`), as a layer norm and a
//! row-by-vector dot product do. The shared loads are checked once per loop and broadcast
//! in the chunk's copies, which lets a loop with stores run blocked too. Each case compares
//! results and errors (kernel, work-item, message) with the interpreter and the scalar
//! code, bit for bit: columns 0, 1, 7, 8, 9 and odd ones, rows not a multiple of 8, ranges
//! rounded up past the guard, a shared vector too short (the blocked check fails and the
//! ordinary loop faults in a middle column), rows too short, NaNs and signed zeros in f32
//! sums (no reassociation), a signed counter starting below 0, and a stored buffer that is
//! also the shared one (the ordinary loop). A row softmax's three loops over one row
//! prefetch it in the first loop only (and the stored rows in the third).
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vals, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

/// The third suite set's layer norm: three row loops, the last one storing with
/// `gamma[j]` and `beta[j]`.
const LAYERNORM: &str = "kernel k(x: ptr<global, f32>, gamma: ptr<global, f32>,
    beta: ptr<global, f32>, y: ptr<global, f32>, rows: u32, cols: u32, eps: f32) {
  let r: u32 = global_id(0);
  if r < rows {
    let base: u32 = r * cols;
    var s: f32 = 0.0;
    for j: u32 in 0 .. cols {
      s = s + x[base + j];
    }
    let mean: f32 = s / cols as f32;
    var q: f32 = 0.0;
    for j: u32 in 0 .. cols {
      let d: f32 = x[base + j] - mean;
      q = q + d * d;
    }
    let inv: f32 = 1.0 / sqrt(q / cols as f32 + eps);
    for j: u32 in 0 .. cols {
      y[base + j] = (x[base + j] - mean) * inv * gamma[j] + beta[j];
    }
  }
}";

/// The rows64 set's dot product: `u32` rows by a `u32` vector in `u64` (wrapping), plus an
/// `f32` weighted sum that also reads the counter (the copies step it one by one).
const ROWDOT: &str = "kernel k(x: ptr<global, u32>, w: ptr<global, u32>, f: ptr<global, f32>,
    out: ptr<global, u64>, fo: ptr<global, f32>, rows: u32, cols: u32) {
  let r: u32 = global_id(0);
  if r < rows {
    var s: u64 = 0;
    var t: f32 = 0.0;
    for j: u32 in 0 .. cols {
      s = s + (x[r * cols + j] as u64) * (w[j] as u64);
      t = t + f[j] * (x[r * cols + j] & 255u32) as f32 + j as f32;
    }
    out[r] = s;
    fo[r] = t;
  }
}";

/// The first suite set's row softmax: three loops over `x`'s row (the first from column
/// 1), the last storing `y`'s.
const SOFTMAX: &str = "kernel k(x: ptr<global, f32>, y: ptr<global, f32>, rows: u32, cols: u32) {
  let r: u32 = global_id(0);
  if r < rows {
    let base: u32 = r * cols;
    var m: f32 = x[base];
    for j: u32 in 1 .. cols {
      m = max(m, x[base + j]);
    }
    var s: f32 = 0.0;
    for j: u32 in 0 .. cols {
      s = s + exp(x[base + j] - m);
    }
    for j: u32 in 0 .. cols {
      y[base + j] = exp(x[base + j] - m) / s;
    }
  }
}";

/// A signed counter from `lo` (below 0 faults at `g[j]`), rows at a signed base.
const SIGNED: &str = "kernel k(x: ptr<global, i32>, g: ptr<global, i32>, y: ptr<global, i32>,
    rows: i32, lo: i32, hi: i32, off: i32) {
  let r: i32 = global_id(0) as i32;
  if r < rows {
    let base: i32 = r * (hi - lo) + off;
    for j: i32 in lo .. hi {
      y[base + j] = x[base + j] * g[j] - 3;
    }
  }
}";

/// Rows and columns: none, one chunk, chunks with a tail, a tail alone; rows not a
/// multiple of 8.
const SIZES: [(u32, u32); 9] =
    [(13, 0), (13, 1), (9, 7), (16, 8), (21, 9), (11, 17), (5, 97), (24, 64), (1, 33)];

/// The range of `rows` work-items rounded up to groups of 8 (the kernels' guards).
fn range(rows: u32) -> NdRange {
    NdRange::new(&[rows.div_ceil(8).max(1) * 8]).with_local(&[8])
}

/// `n` `f32` values with NaNs, infinities and signed zeros for odd seeds.
fn f32s(n: usize, seed: u32) -> Buffer {
    let special = [f32::NAN, f32::INFINITY, -0.0, 3.0e38, 1.0e-30];
    Buffer::from_slice(
        &(0..n as u32)
            .map(|i| match (i.wrapping_mul(2654435761) ^ seed) % 89 {
                v @ 0..=4 if seed % 2 == 1 => special[v as usize],
                v => v as f32 * 0.37 - 13.1,
            })
            .collect::<Vec<_>>(),
    )
}

/// How many shared elements the listing broadcasts straight from the counter's slot (no
/// bound check between: the loop checked them once).
fn unchecked_broadcasts(lines: &[String]) -> usize {
    lines
        .windows(2)
        .filter(|w| w[0].starts_with("mov rax,[r15+") && w[1].starts_with("vbroadcastss"))
        .count()
}

/// Whether the listing broadcasts a shared element at the chunk's counter plus an
/// iteration (`[base+rax*4+4]`: the copy of iteration 1 reads no counter of its own).
fn broadcasts_at_counter(lines: &[String]) -> bool {
    lines.iter().any(|l| l.starts_with("vbroadcastss") && l.ends_with("+rax*4+4]"))
}

/// Whether the listing writes transposed row segments (a blocked loop with stores).
fn stores_rows(lines: &[String]) -> bool {
    lines.iter().filter(|l| l.starts_with("vextractf128 [")).count() >= 4
}

#[test]
fn layer_norm_rows_run_blocked_and_agree() {
    let k = kernel(LAYERNORM);
    if avx2() {
        let lines = vector_listing(&k);
        assert!(broadcasts_at_counter(&lines), "gamma[j] not broadcast:\n{}", lines.join("\n"));
        assert!(unchecked_broadcasts(&lines) >= 16, "gamma[j], beta[j] checked per copy");
        assert!(stores_rows(&lines), "the storing loop is not blocked:\n{}", lines.join("\n"));
    } else {
        kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
    }
    for (i, (rows, cols)) in SIZES.into_iter().enumerate() {
        let n = (rows * cols) as usize;
        let seed = i as u32;
        // (gamma's length, beta's length, x's length): whole; gamma short (a fault at
        // gamma[c] in every row, first in row 0's column c); beta short; x short (a fault
        // in a later row).
        let c = cols as usize;
        for (gl, bl, xl) in [(c, c, n), (c + 5, c, n), (c / 2, c, n), (c, c.saturating_sub(1), n)]
            .into_iter()
            .chain(n.checked_sub(1).map(|m| (c, c, m)))
        {
            let args = [
                Arg::Buffer(0),
                Arg::Buffer(1),
                Arg::Buffer(2),
                Arg::Buffer(3),
                Arg::scalar(rows),
                Arg::scalar(cols),
                Arg::scalar(1.0e-5f32),
            ];
            let bufs = [
                f32s(xl, seed),
                f32s(gl, seed + 1),
                f32s(bl, seed + 2),
                Buffer::zeroed(Scalar::F32, n),
            ];
            let what = format!("{rows}x{cols} gamma={gl} beta={bl} x={xl}");
            agree(&k, &range(rows), &args, &bufs, &what);
        }
        // gamma and x one buffer (loads only: blocked), and y also beta (a stored buffer
        // shared by every lane: the ordinary loop).
        if n >= c {
            let args = [
                Arg::Buffer(0),
                Arg::Buffer(0),
                Arg::Buffer(1),
                Arg::Buffer(2),
                Arg::scalar(rows),
                Arg::scalar(cols),
                Arg::scalar(0.5f32),
            ];
            let bufs = [f32s(n, seed), f32s(c, seed + 3), Buffer::zeroed(Scalar::F32, n)];
            agree(&k, &range(rows), &args, &bufs, &format!("{rows}x{cols} gamma=x"));
            if rows == 1 {
                // (One row: y is beta with no other work-item to race with.)
                let args = [
                    Arg::Buffer(0),
                    Arg::Buffer(1),
                    Arg::Buffer(2),
                    Arg::Buffer(2),
                    Arg::scalar(rows),
                    Arg::scalar(cols),
                    Arg::scalar(0.5f32),
                ];
                let bufs = [f32s(n, seed), f32s(c, seed + 3), f32s(n, seed + 4)];
                agree(&k, &range(rows), &args, &bufs, &format!("{rows}x{cols} y=beta"));
            }
        }
    }
}

#[test]
fn row_dot_products_run_blocked_and_agree() {
    let k = kernel(ROWDOT);
    if avx2() {
        let lines = vector_listing(&k);
        let transposed = lines.iter().filter(|l| l.starts_with("vinsertf128")).count();
        assert!(transposed >= 8, "not blocked:\n{}", lines.join("\n"));
        // (Both loads at `j` broadcast in each copy with no check; the copies step the
        // counter, as the body reads it.)
        let n = unchecked_broadcasts(&lines);
        assert!(n >= 16, "w[j], f[j] not broadcast per copy ({n}):\n{}", lines.join("\n"));
    } else {
        kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
    }
    for (i, (rows, cols)) in SIZES.into_iter().enumerate() {
        let n = (rows * cols) as usize;
        let c = cols as usize;
        for (wl, fl) in [(c, c), (c + 3, c + 1), (c.saturating_sub(3), c), (c, c / 2)] {
            let args = [
                Arg::Buffer(0),
                Arg::Buffer(1),
                Arg::Buffer(2),
                Arg::Buffer(3),
                Arg::Buffer(4),
                Arg::scalar(rows),
                Arg::scalar(cols),
            ];
            let x: Vec<u32> =
                (0..n as u32).map(|v| (v ^ i as u32).wrapping_mul(2654435761)).collect();
            let w: Vec<u32> =
                (0..wl as u32).map(|v| v.wrapping_mul(40503).rotate_left(9)).collect();
            let bufs = [
                Buffer::from_slice(&x),
                Buffer::from_slice(&w),
                f32s(fl, i as u32),
                Buffer::zeroed(Scalar::U64, rows as usize),
                Buffer::zeroed(Scalar::F32, rows as usize),
            ];
            agree(&k, &range(rows), &args, &bufs, &format!("{rows}x{cols} w={wl} f={fl}"));
        }
    }
}

#[test]
fn signed_counters_from_below_zero_agree() {
    let k = kernel(SIGNED);
    if avx2() {
        let lines = vector_listing(&k);
        assert!(broadcasts_at_counter(&lines), "g[j] not broadcast:\n{}", lines.join("\n"));
        assert!(unchecked_broadcasts(&lines) >= 8, "g[j] checked per copy");
        assert!(stores_rows(&lines), "not blocked:\n{}", lines.join("\n"));
    } else {
        kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
    }
    // (rows, lo, hi, off, g's length): a counter from 0, from 2, from -1 (g[-1] faults in
    // row 0), rows offset so that base + lo is 0, g short (in a partial batch and in full
    // ones).
    for (rows, lo, hi, off, gl) in [
        (13i32, 0i32, 19i32, 0i32, 19usize),
        (9, 2, 27, 0, 27),
        (9, -1, 16, 1, 16),
        (7, 3, 11, 0, 10),
        (16, 3, 11, 0, 10),
        (16, -1, 15, 1, 15),
        (16, 0, 8, 0, 8),
        (5, 1, 1, 0, 4),
    ] {
        let span = (hi - lo).max(0);
        let n = (rows * span + off + hi.max(0)) as usize;
        let args = [
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::Buffer(2),
            Arg::scalar(rows),
            Arg::scalar(lo),
            Arg::scalar(hi),
            Arg::scalar(off),
        ];
        let bufs =
            [vals(Scalar::I32, n, 3), vals(Scalar::I32, gl, 5), Buffer::zeroed(Scalar::I32, n)];
        let what = format!("rows={rows} {lo}..{hi} off={off} g={gl}");
        agree(&k, &range(rows as u32), &args, &bufs, &what);
    }
}

#[test]
fn softmax_prefetches_a_row_in_its_first_loop_only() {
    let k = kernel(SOFTMAX);
    if avx2() {
        // (Per prefetched access, one prefetch per lane and chunk: x's rows in the first
        // loop, y's in the third; not x's again in the second and third.)
        let lines = vector_listing(&k);
        let mut per_base: Vec<(String, usize)> = Vec::new();
        for l in lines.iter().filter(|l| l.starts_with("prefetcht0 [")) {
            let reg = l["prefetcht0 [".len()..].split('+').next().unwrap_or("").to_string();
            match per_base.iter_mut().find(|p| p.0 == reg) {
                Some(p) => p.1 += 1,
                None => per_base.push((reg, 1)),
            }
        }
        let counts: Vec<usize> = per_base.iter().map(|p| p.1).collect();
        assert_eq!(counts, [8, 8], "{per_base:?}:\n{}", lines.join("\n"));
        assert!(stores_rows(&lines), "not blocked:\n{}", lines.join("\n"));
    } else {
        kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
    }
    // (Rows of 1 KB as the suite's, and x one element short: a fault in the last row.)
    for (i, (rows, cols)) in SIZES.into_iter().chain([(19, 256)]).enumerate() {
        let n = (rows * cols) as usize;
        for xl in [n.max(1), n.saturating_sub(1).max(1)] {
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(rows), Arg::scalar(cols)];
            let bufs = [f32s(xl, i as u32), Buffer::zeroed(Scalar::F32, n)];
            agree(&k, &range(rows), &args, &bufs, &format!("{rows}x{cols} x={xl}"));
        }
    }
}
