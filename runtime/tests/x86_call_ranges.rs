//! 2-D and 3-D kernels whose 8-lane code runs every row of a multi-row group in one call
//! (`SpmdCode::rows`): the bounds of a guard's proving range that no row changes
//! (`x < w`, `x > 0`, `x < w - 1`: comparisons of `global_id(0)` with parameters and
//! constants) are computed once per call, and each row's range starts from a copy of them;
//! the buffer bases, the alive lanes and the row's end are set once per call, not per row.
//! Each case compares results and errors (kernel, work-item, message) with the interpreter
//! and the scalar code, bit for bit: odd widths (the last partial batch), ranges rounded up
//! past the guards (whole rows and batches outside), faults in a middle row and in a row's
//! last batch, empty ranges, 3-D groups.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, f32s, kernel, vals, vector_listing};

use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

const EMBED: &str = "kernel embed(table: ptr<global, f32>, ids: ptr<global, u32>,
    out: ptr<global, f32>, dim: u32, rows: u32) {
  let d: u32 = global_id(0);
  let r: u32 = global_id(1);
  if d < dim && r < rows {
    out[r * dim + d] = table[ids[r] * dim + d];
  }
}";

/// A 3x1 stencil inside a border, the columns' bounds `lo <= x` and `x < w - 1` fixed for
/// the call, the rows' `y > 0 && y < h - 1` not.
const STENCIL: &str = "kernel stencil(a: ptr<global, f32>, o: ptr<global, f32>, lo: u32,
    w: u32, h: u32) {
  let x: u32 = global_id(0);
  let y: u32 = global_id(1);
  if lo <= x && x < w - 1 && y > 0 && y < h - 1 {
    o[y * w + x] = a[y * w + x - 1] + 2.0 * a[y * w + x] - a[y * w + x + 1];
  }
}";

/// A row copy over three dimensions: planes of rows, `x < w` fixed for the call.
const PLANES: &str = "kernel planes(a: ptr<global, i32>, o: ptr<global, i32>, w: u32, h: u32,
    d: u32) {
  let x: u32 = global_id(0);
  let y: u32 = global_id(1);
  let z: u32 = global_id(2);
  if x < w && y < h && z < d {
    o[(z * h + y) * w + x] = a[(z * h + y) * w + x] * 3 - (y as i32);
  }
}";

/// A launch of `size` rounded up to `local`.
fn range(size: &[usize], local: &[usize]) -> NdRange {
    let global: Vec<u32> =
        size.iter().zip(local).map(|(&s, &l)| s.next_multiple_of(l) as u32).collect();
    NdRange::new(&global).with_local(&local.iter().map(|&l| l as u32).collect::<Vec<_>>())
}

fn u(v: usize) -> Arg {
    Arg::scalar(v as u32)
}

/// The listing of a call that runs its group's rows: the bounds fixed for the call copied
/// into the row's range (a 16-byte move), the row's end (`[r15+20h]`) and the buffer
/// bases written once.
fn expect_call_ranges(src: &str) {
    if !avx2() {
        kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
        return;
    }
    let l = vector_listing(&kernel(src));
    let text = l.join("\n");
    assert!(l.iter().any(|i| i.starts_with("vmovups xmm0,[r15+")), "no copied bounds:\n{text}");
    let ends = l.iter().filter(|i| i.starts_with("mov [r15+20h],")).count();
    assert_eq!(ends, 1, "the row's end written per row:\n{text}");
    assert!(l.iter().any(|i| i.starts_with("inc qword ptr [r12+20h]")), "not by rows:\n{text}");
}

#[test]
fn the_listings_take_the_calls_bounds() {
    expect_call_ranges(EMBED);
    expect_call_ranges(STENCIL);
    expect_call_ranges(PLANES);
}

#[test]
fn an_embedding_over_short_rows_matches_the_interpreter() {
    let k = kernel(EMBED);
    let args = |dim: usize, rows: usize| {
        vec![Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), u(dim), u(rows)]
    };
    for (dim, rows, local) in
        [(100usize, 21usize, [16usize, 16usize]), (7, 19, [8, 4]), (41, 5, [16, 8]), (0, 9, [8, 2])]
    {
        let ids: Vec<u32> = (0..rows as u32).map(|i| (i * 31 + 3) % 13).collect();
        let bufs = vec![
            f32s(13 * dim.max(1), 5),
            Buffer::from_slice(&ids),
            Buffer::zeroed(Scalar::F32, (rows * dim).max(1)),
        ];
        let r = range(&[dim.max(1), rows], &local);
        agree(&k, &r, &args(dim, rows), &bufs, &format!("{dim}x{rows}"));
        // An id past the table in a middle row, then the output short by one (the last
        // row's last, partial batch).
        let mut bad = bufs.clone();
        bad[1].set(rows / 2, kiln_ir::Imm::int(Scalar::U32, 13)).unwrap();
        agree(&k, &r, &args(dim, rows), &bad, "an id past the table");
        if dim > 0 {
            let mut short = bufs.clone();
            short[2] = Buffer::zeroed(Scalar::F32, rows * dim - 1);
            let mut want = short.clone();
            assert!(run(&k, &r, &args(dim, rows), &mut want).is_err());
            agree(&k, &r, &args(dim, rows), &short, "the output short");
        }
    }
}

#[test]
fn a_stencil_with_column_bounds_fixed_for_the_call_matches_the_interpreter() {
    let k = kernel(STENCIL);
    for (w, h, lo, local) in [
        (37usize, 11usize, 1usize, [16usize, 4usize]),
        (18, 9, 3, [8, 8]),
        (9, 6, 12, [8, 2]),
        (64, 5, 0, [32, 4]),
        (23, 30, 7, [16, 16]),
    ] {
        let r = range(&[w, h], &local);
        let args = vec![Arg::Buffer(0), Arg::Buffer(1), u(lo), u(w), u(h)];
        let bufs = vec![f32s(w * h, 9), Buffer::zeroed(Scalar::F32, w * h)];
        agree(&k, &r, &args, &bufs, &format!("{w}x{h} from {lo}"));
        // The input short: the fault in a middle row's last batch (`x + 1` past the end).
        let mid = h / 2;
        let bufs = vec![f32s(mid * w + w - 1, 9), Buffer::zeroed(Scalar::F32, w * h)];
        agree(&k, &r, &args, &bufs, "the input short");
    }
}

#[test]
fn column_sums_between_two_bounds_match_the_interpreter() {
    // Rows added in order into one row of sums, the guard's columns `lo <= x < w` fixed
    // for the call and its only bounds: no row part of the range has a lower bound.
    let k = kernel(
        "kernel colsum(a: ptr<global, f32>, o: ptr<global, f32>, lo: u32, w: u32) {
           let x: u32 = global_id(0);
           let y: u32 = global_id(1);
           if lo <= x && x < w {
             o[x] = o[x] * 0.5 + a[x] * (y as f32);
           }
         }",
    );
    for (w, h, lo, local) in
        [(29usize, 6usize, 9usize, [8usize, 2usize]), (40, 4, 17, [16, 4]), (12, 3, 13, [8, 3])]
    {
        let r = range(&[w, h], &local);
        let args = vec![Arg::Buffer(0), Arg::Buffer(1), u(lo), u(w)];
        let bufs = vec![f32s(w, 2), f32s(w, 6)];
        agree(&k, &r, &args, &bufs, &format!("{w}x{h} from {lo}"));
        // The sums short: a fault in the first row's last batch.
        let bufs = vec![f32s(w, 2), f32s(w - 3, 6)];
        agree(&k, &r, &args, &bufs, "the sums short");
    }
}

#[test]
fn planes_of_short_rows_match_the_interpreter() {
    let k = kernel(PLANES);
    for (size, local) in [
        ([13usize, 5usize, 3usize], [8usize, 2usize, 2usize]),
        ([16, 3, 4], [16, 4, 2]),
        ([9, 7, 2], [8, 1, 4]),
    ] {
        let [w, h, d] = size;
        let r = range(&size, &local);
        let args = vec![Arg::Buffer(0), Arg::Buffer(1), u(w), u(h), u(d)];
        let n = w * h * d;
        let bufs = vec![vals(Scalar::I32, n, 4), Buffer::zeroed(Scalar::I32, n)];
        agree(&k, &r, &args, &bufs, &format!("{size:?}"));
        // The output ends inside the last plane's middle row.
        let cut = (d - 1) * h * w + (h / 2) * w + w / 2;
        let bufs = vec![vals(Scalar::I32, n, 4), Buffer::zeroed(Scalar::I32, cut)];
        agree(&k, &r, &args, &bufs, "the output short");
    }
}
