//! 2-D kernels whose rows are short (group widths 8 to 32): an embedding gather through an
//! index, row-wise scales and copies at `mad(y, w, x)`. Their 8-lane code resets the alive
//! lanes once per row, not per batch, decides a hoisted row condition (`y < h`) on lane 0
//! in scalar code, and computes a proven `mad(y, w, x)` index's lane 0 in scalar code.
//! Each case compares results and errors (kernel, work-item, message) with the interpreter
//! and the scalar code, bit for bit: odd sizes, rows and columns not multiples of the
//! group, ranges rounded up past the guards, faults in a later row or a later batch.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, f32s, kernel, vals};

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

/// A `w` x `h` launch rounded up to `local`.
fn range2(w: usize, h: usize, local: [usize; 2]) -> NdRange {
    NdRange::new(&[w.next_multiple_of(local[0]) as u32, h.next_multiple_of(local[1]) as u32])
        .with_local(&[local[0] as u32, local[1] as u32])
}

/// The embedding's arguments: `rows` ids into a table of `vocab` rows of `dim`, the
/// table `short` elements short, the output `out_short` elements short.
fn embed_case(
    dim: usize,
    rows: usize,
    vocab: usize,
    short: usize,
    out_short: usize,
) -> Vec<Buffer> {
    let ids: Vec<u32> = (0..rows as u32).map(|i| (i * 7919 + 13) % vocab as u32).collect();
    vec![
        f32s(vocab * dim - short, 11),
        Buffer::from_slice(&ids),
        Buffer::zeroed(Scalar::F32, rows * dim - out_short),
    ]
}

fn embed_args(dim: usize, rows: usize) -> Vec<Arg> {
    vec![
        Arg::Buffer(0),
        Arg::Buffer(1),
        Arg::Buffer(2),
        Arg::scalar(dim as u32),
        Arg::scalar(rows as u32),
    ]
}

#[test]
fn an_embedding_gather_of_odd_sizes_matches_the_interpreter() {
    let k = kernel(EMBED);
    for (dim, rows, local) in [
        (100usize, 37usize, [16usize, 16usize]),
        (16, 16, [16, 16]),
        (13, 21, [8, 4]),
        (33, 9, [32, 2]),
        (8, 40, [8, 8]),
        (27, 3, [16, 16]),
    ] {
        let range = range2(dim, rows, local);
        let bufs = embed_case(dim, rows, 50, 0, 0);
        agree(&k, &range, &embed_args(dim, rows), &bufs, &format!("{dim}x{rows} {local:?}"));
    }
}

#[test]
fn an_embedding_gathers_faults_name_the_interpreters_work_item() {
    let k = kernel(EMBED);
    // The output short (a fault in the last row's last batch), the table short (the row
    // of the highest id), an id past the table (a later row), the ids short (the rows past
    // their end: a uniform load's fault).
    for (dim, rows, short, out_short) in [(37usize, 29usize, 0usize, 3usize), (20, 18, 5, 0)] {
        let range = range2(dim, rows, [16, 16]);
        let bufs = embed_case(dim, rows, 40, short, out_short);
        let mut want = bufs.clone();
        assert!(run(&k, &range, &embed_args(dim, rows), &mut want).is_err());
        agree(&k, &range, &embed_args(dim, rows), &bufs, "a fault");
    }
    let (dim, rows) = (24usize, 30usize);
    let mut bufs = embed_case(dim, rows, 40, 0, 0);
    bufs[1].set(19, kiln_ir::Imm::int(Scalar::U32, 40)).unwrap();
    agree(&k, &range2(dim, rows, [16, 8]), &embed_args(dim, rows), &bufs, "an id past the table");
    let mut bufs = embed_case(dim, rows, 40, 0, 0);
    bufs[1] = Buffer::from_slice(&(0..rows as u32 - 4).collect::<Vec<u32>>());
    agree(&k, &range2(dim, rows, [8, 4]), &embed_args(dim, rows), &bufs, "the ids short");
}

#[test]
fn row_scales_and_copies_at_a_rows_product_match_the_interpreter() {
    // Row-wise scale by a per-row factor, a copy between rows through signed indices, a
    // row condition that is not the range's (every other row).
    let scale = kernel(
        "kernel scale(a: ptr<global, f32>, s: ptr<global, f32>, o: ptr<global, f32>,
             w: u32, h: u32) {
           let x: u32 = global_id(0);
           let y: u32 = global_id(1);
           if x < w && y < h {
             o[y * w + x] = a[y * w + x] * s[y];
           }
         }",
    );
    let copy = kernel(
        "kernel copy(a: ptr<global, i32>, o: ptr<global, i32>, w: i32, h: i32) {
           let x: i32 = global_id(0) as i32;
           let y: i32 = global_id(1) as i32;
           if x < w && y < h && y % 2 == 0 {
             o[y * w + x] = a[(h - 1 - y) * w + x] + y;
           }
         }",
    );
    for (w, h, local) in [(19usize, 11usize, [8usize, 4usize]), (32, 7, [16, 16]), (9, 30, [8, 8])]
    {
        let range = range2(w, h, local);
        let args = vec![
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::Buffer(2),
            Arg::scalar(w as u32),
            Arg::scalar(h as u32),
        ];
        let bufs = vec![f32s(w * h, 3), f32s(h, 7), Buffer::zeroed(Scalar::F32, w * h)];
        agree(&scale, &range, &args, &bufs, "scale");
        // The output one short: a fault in the last row.
        let bufs = vec![f32s(w * h, 3), f32s(h, 7), Buffer::zeroed(Scalar::F32, w * h - 1)];
        agree(&scale, &range, &args, &bufs, "scale, a fault");
        let args =
            vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(w as i32), Arg::scalar(h as i32)];
        let bufs = vec![vals(Scalar::I32, w * h, 5), Buffer::zeroed(Scalar::I32, w * h)];
        agree(&copy, &range, &args, &bufs, "copy");
        let bufs = vec![vals(Scalar::I32, w * h - 2, 5), Buffer::zeroed(Scalar::I32, w * h)];
        agree(&copy, &range, &args, &bufs, "copy, a fault");
    }
}
