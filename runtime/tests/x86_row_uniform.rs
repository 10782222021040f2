//! Row-uniform work once per row in the 8-lane code (`backends/src/x86/spmd/rowwise.rs`):
//! nested `let`s fixed for the row hoisted out of the batch loop, and loads at indices
//! fixed for the row whose bounds are compared once per row (a failed compare sends the
//! row's batches to the masked code, which reports the fault). Each case compares results
//! and errors (kernel, work-item, message) with the interpreter and the scalar code, bit
//! for bit: a row-uniform load past the end in the middle of a launch (the first row whose
//! index is out, at the first work-item that reaches it), odd widths, guards false in some
//! lanes or rows, ranges rounded up past the guards, signed indices below 0, 3-D launches.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vals, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

const FLOYD: &str = "kernel floyd(dist: ptr<global, f32>, k: u32, n: u32) {
  let j: u32 = global_id(0);
  let i: u32 = global_id(1);
  if i < n && j < n {
    let via: f32 = dist[i * n + k] + dist[k * n + j];
    dist[i * n + j] = min(dist[i * n + j], via);
  }
}";

const EMBED: &str = "kernel embed(table: ptr<global, f32>, ids: ptr<global, u32>,
    out: ptr<global, f32>, dim: u32, rows: u32) {
  let d: u32 = global_id(0);
  let r: u32 = global_id(1);
  if d < dim && r < rows {
    out[r * dim + d] = table[ids[r] * dim + d];
  }
}";

/// Whether a listing compares a scalar index with a buffer's length and jumps when below
/// it (the row's bound: a batch's uniform load jumps when not below).
fn row_bound(lines: &[String]) -> bool {
    lines.windows(2).any(|w| w[0].starts_with("cmp rax,[r14+") && w[1].starts_with("jb "))
}

#[test]
fn floyd_rows_agree_with_the_interpreter() {
    let k = kernel(FLOYD);
    // (n, k, global x, global y, local x, dist's length): a short matrix makes
    // `dist[i * n + k]` fault in a middle row (at its first work-item). Race-free data (as
    // Floyd-Warshall's): no negative distance and `dist[k][k]` 0, so row and column `k`
    // keep their values; signed zeros and NaNs off column `k`, so that `min`'s rules show.
    for (n, kk, gx, gy, lx, len) in [
        (37u32, 5u32, 40u32, 37u32, 8u32, 37 * 37usize),
        (37, 36, 48, 40, 16, 37 * 37),
        (64, 0, 64, 64, 64, 64 * 64),
        (13, 12, 16, 13, 16, 13 * 13),
        (21, 3, 24, 21, 8, 21 * 14 + 2),
        (21, 20, 24, 21, 8, 21 * 14 + 2),
        (9, 4, 16, 9, 8, 9 * 9 - 1),
        (8, 7, 8, 8, 8, 64),
    ] {
        let args = vec![Arg::Buffer(0), Arg::scalar(kk), Arg::scalar(n)];
        let mut d: Vec<f32> = (0..len as u32).map(|p| ((p * 7 + 3) % 29) as f32 * 0.5).collect();
        for (p, v) in d.iter_mut().enumerate() {
            let (i, j) = (p as u32 / n, p as u32 % n);
            if j == kk {
                *v = if i == kk { 0.0 } else { *v };
            } else if p % 11 == 4 {
                *v = -0.0;
            } else if p % 13 == 6 {
                *v = f32::NAN;
            }
        }
        let what = format!("n={n} k={kk} len={len}");
        let r = NdRange::new(&[gx, gy]).with_local(&[lx, 1]);
        agree(&k, &r, &args, &[Buffer::from_slice(&d)], &what);
    }
    if avx2() {
        // The row-uniform index compared with the length once per row, and the branch's
        // copy for the range loading it with no test.
        assert!(row_bound(&vector_listing(&k)), "no row-uniform bound");
    } else {
        kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
    }
}

#[test]
fn embedding_rows_agree_with_the_interpreter() {
    let k = kernel(EMBED);
    // (dim, rows, global x, global y, local x, vocab, ids' length, an id past the table
    // at this row): ids too short for the rows (a fault at `ids[r]` in a middle row), an
    // id past the table (a fault at the table's load, its first lane).
    for (dim, rows, gx, gy, lx, vocab, idlen, bad) in [
        (100u32, 9u32, 112u32, 16u32, 16u32, 13u32, 9usize, None),
        (37, 5, 40, 5, 8, 7, 5, None),
        (8, 12, 8, 16, 8, 3, 12, None),
        (3, 7, 8, 8, 8, 5, 7, None),
        (37, 9, 48, 9, 16, 7, 6, None),
        (19, 6, 24, 6, 8, 4, 6, Some(3usize)),
        (16, 4, 16, 4, 16, 4, 4, Some(0)),
    ] {
        let mut ids: Vec<u32> = (0..idlen as u32).map(|r| (r * 5 + 1) % vocab).collect();
        if let Some(b) = bad {
            ids[b] = vocab;
        }
        let args = vec![
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::Buffer(2),
            Arg::scalar(dim),
            Arg::scalar(rows),
        ];
        let bufs = vec![
            vals(Scalar::F32, (vocab * dim) as usize, 3),
            Buffer::from_slice(&ids),
            Buffer::zeroed(Scalar::F32, (rows * dim) as usize),
        ];
        let what = format!("dim={dim} rows={rows} ids={idlen} bad={bad:?}");
        agree(&k, &NdRange::new(&[gx, gy]).with_local(&[lx, 1]), &args, &bufs, &what);
    }
}

#[test]
fn nested_fixed_lets_and_signed_row_loads_agree_with_the_interpreter() {
    // Nested `let`s fixed for the row (integer, float, in a loop, under an inner if) and
    // loads at row-uniform indices: an `i32` one below 0 in the first rows, one past the
    // end in the last ones; 3-D launches (the row is `y` and `z`).
    let src = "kernel k(x: ptr<global, f32>, w: ptr<global, f32>, o: ptr<global, f32>,
        cols: u32, h: u32, d: u32, s: f32, lo: i32) {
      let p: u32 = global_id(0);
      let y: u32 = global_id(1);
      let z: u32 = global_id(2);
      if p < cols && y < h && z < d {
        let row: u32 = (z * h + y) * cols;
        let sy: i32 = y as i32 - lo;
        let f: f32 = sqrt(s * (y as f32) + 1.0);
        var acc: f32 = x[row + p] * f + w[sy] + w[z * h + y + 1];
        for t: u32 in 0 .. 3 {
          let q: u32 = y * 3 + t;
          acc = acc + w[q] * 0.5;
        }
        if (p & 1) == 0 {
          let half: f32 = f * 0.5;
          acc = acc * half;
        }
        o[row + p] = acc;
      }
    }";
    let k = kernel(src);
    // (cols, h, d, global, local x, w's length, lo)
    for (cols, h, d, g, lx, wlen, lo) in [
        (21u32, 5u32, 2u32, [24u32, 5u32, 2u32], 8u32, 40usize, 0i32),
        (21, 5, 2, [24, 5, 2], 8, 40, 2),
        (37, 4, 3, [40, 4, 3], 8, 14, 0),
        (37, 4, 3, [40, 4, 3], 8, 10, 0),
        (8, 6, 1, [8, 8, 1], 8, 9, 0),
        (13, 3, 2, [16, 3, 2], 16, 8, 0),
        (5, 7, 2, [8, 7, 2], 8, 30, 1),
        (64, 2, 2, [64, 2, 2], 32, 20, -3),
    ] {
        let args = vec![
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::Buffer(2),
            Arg::scalar(cols),
            Arg::scalar(h),
            Arg::scalar(d),
            Arg::scalar(0.75f32),
            Arg::scalar(lo),
        ];
        let n = (cols * h * d) as usize;
        let bufs = vec![
            vals(Scalar::F32, n, 1),
            vals(Scalar::F32, wlen, 2),
            Buffer::zeroed(Scalar::F32, n),
        ];
        let what = format!("cols={cols} h={h} d={d} w={wlen} lo={lo}");
        agree(&k, &NdRange::new(&g).with_local(&[lx, 1, 1]), &args, &bufs, &what);
    }
    if avx2() {
        // `w[z * h + y + 1]` (in the `var`'s value) compared with the length once per row.
        assert!(row_bound(&vector_listing(&k)), "no row-uniform bound");
    } else {
        kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
    }
}
