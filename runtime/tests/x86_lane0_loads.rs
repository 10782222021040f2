//! Contiguous loads at `u + global_id(0)` that no proof covers, with `u` scalar arithmetic
//! whose loads need no check (embed's `table[ids[r] * dim + d]`, `ids[r]` proven in bounds
//! for its row): lane 0's index computed by scalar code (`mov`, `imul`, `add eax,ebx`), the
//! lanes' indices only where the batch's span is not in bounds (`lane0.rs`). Each case
//! compares results and errors (kernel, work-item, message) with the interpreter and the
//! scalar code, bit for bit: odd sizes, ranges rounded up past the guards, partial
//! batches, ids past the table in later rows, the table short, the output, the table and
//! the ids in one buffer (race-free), offsets that wrap.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, f32s, kernel, vector_listing};

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

/// The embedding on one `u32` buffer type, so that the output may be the ids' or the
/// table's buffer too.
const EMBED_U32: &str = "kernel embed(table: ptr<global, u32>, ids: ptr<global, u32>,
    out: ptr<global, u32>, dim: u32, rows: u32) {
  let d: u32 = global_id(0);
  let r: u32 = global_id(1);
  if d < dim && r < rows {
    out[r * dim + d] = table[ids[r] * dim + d] + r;
  }
}";

/// A 1-D load at a parameter offset, under no guard: every batch's span is tested.
const SHIFTED: &str = "kernel shifted(x: ptr<global, f32>, y: ptr<global, f32>, off: u32) {
  let i: u32 = global_id(0);
  y[i] = x[off + i] * 2.0;
}";

/// A `w` x `h` launch rounded up to `local`.
fn range2(w: usize, h: usize, local: [usize; 2]) -> NdRange {
    NdRange::new(&[w.next_multiple_of(local[0]) as u32, h.next_multiple_of(local[1]) as u32])
        .with_local(&[local[0] as u32, local[1] as u32])
}

fn embed_args(table: usize, ids: usize, out: usize, dim: usize, rows: usize) -> Vec<Arg> {
    vec![
        Arg::Buffer(table),
        Arg::Buffer(ids),
        Arg::Buffer(out),
        Arg::scalar(dim as u32),
        Arg::scalar(rows as u32),
    ]
}

/// `rows` ids below `vocab`.
fn ids(rows: usize, vocab: usize) -> Vec<u32> {
    (0..rows as u32).map(|i| (i * 7919 + 13) % vocab as u32).collect()
}

#[test]
fn the_gathers_index_is_scalar_code_in_the_listing() {
    if !avx2() {
        kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
        return;
    }
    for src in [EMBED, EMBED_U32] {
        let l = vector_listing(&kernel(src));
        let text = l.join("\n");
        // `ids[r]` loaded by scalar code, times `dim`, plus lane 0's `d` from `ebx`, then
        // the span's one compare and the whole-batch load at that index.
        let at = l.windows(4).position(|w| {
            w[0].starts_with("mov eax,[")
                && w[0].ends_with("+rax*4]")
                && w[1].starts_with("imul eax,")
                && w[2] == "add eax,ebx"
                && w[3].starts_with("cmp rax,[r15+")
        });
        let at = at.unwrap_or_else(|| panic!("no scalar lane-0 index:\n{text}"));
        assert!(
            l[at + 4].starts_with("jg ") && l[at + 5].starts_with("vmovups ymm0,["),
            "no whole-batch load after the scalar index:\n{text}"
        );
    }
    let l = vector_listing(&kernel(SHIFTED));
    let text = l.join("\n");
    assert!(
        l.windows(2).any(|w| w[0].starts_with("mov eax,[r13+") && w[1] == "add eax,ebx"),
        "no scalar lane-0 index of `off + i`:\n{text}"
    );
}

#[test]
fn gathers_of_odd_sizes_match_the_interpreter() {
    let k = kernel(EMBED);
    for (dim, rows, local) in [
        (100usize, 37usize, [16usize, 16usize]),
        (16, 16, [16, 16]),
        (13, 21, [8, 4]),
        (33, 9, [32, 2]),
        (8, 40, [8, 8]),
        (7, 5, [8, 8]),
        (41, 3, [16, 16]),
    ] {
        let bufs = vec![
            f32s(50 * dim, 11),
            Buffer::from_slice(&ids(rows, 50)),
            Buffer::zeroed(Scalar::F32, rows * dim),
        ];
        let what = format!("{dim}x{rows} {local:?}");
        agree(&k, &range2(dim, rows, local), &embed_args(0, 1, 2, dim, rows), &bufs, &what);
    }
}

#[test]
fn gathers_faults_name_the_interpreters_work_item() {
    let k = kernel(EMBED);
    let (dim, rows, vocab) = (27usize, 30usize, 40usize);
    let args = embed_args(0, 1, 2, dim, rows);
    let case = |table_short: usize| {
        vec![
            f32s(vocab * dim - table_short, 5),
            Buffer::from_slice(&ids(rows, vocab)),
            Buffer::zeroed(Scalar::F32, rows * dim),
        ]
    };
    for local in [[16usize, 16usize], [8, 4], [32, 2]] {
        let range = range2(dim, rows, local);
        // The table short: the rows of the highest ids fault in their last batch.
        for short in [1usize, 5, 8, 9] {
            let bufs = case(short);
            assert!(run(&k, &range, &args, &mut bufs.clone()).is_err());
            agree(&k, &range, &args, &bufs, &format!("table {short} short, {local:?}"));
        }
        // An id past the table in a later row, one whose first batch is in bounds (the
        // table's last row, and a row starting inside it).
        for (row, id) in [(19usize, vocab as u32), (23, vocab as u32 - 1), (29, u32::MAX / 3)] {
            let mut bufs = case(0);
            bufs[1].set(row, kiln_ir::Imm::int(Scalar::U32, i128::from(id))).unwrap();
            bufs[0] = f32s(vocab * dim - 3, 5);
            agree(&k, &range, &args, &bufs, &format!("id {id} in row {row}, {local:?}"));
        }
    }
}

#[test]
fn gathers_through_overlapping_buffers_match_the_interpreter() {
    // The output in the table's buffer, and the ids there too, race-free (no work-item
    // reads what another writes, the only kind with a defined result): rows updated in
    // place, rows gathered from past the written part, ids read from past it.
    let k = kernel(EMBED_U32);
    let at = kernel(
        "kernel embed(buf: ptr<global, u32>, dim: u32, rows: u32, ib: u32) {
           let d: u32 = global_id(0);
           let r: u32 = global_id(1);
           if d < dim && r < rows {
             buf[r * dim + d] = buf[buf[r + ib] * dim + d] ^ r;
           }
         }",
    );
    for (dim, rows, local) in [(12usize, 20usize, [8usize, 4usize]), (19, 17, [16, 16])] {
        let vocab = 9usize;
        let range = range2(dim, rows, local);
        let table: Vec<u32> = (0..((rows + vocab) * dim) as u32).map(|i| i * 31 + 7).collect();
        // In place: `ids[r] = r`, each work-item reads the element it writes.
        let own: Vec<u32> = (0..rows as u32).collect();
        let bufs = vec![Buffer::from_slice(&table), Buffer::from_slice(&own)];
        agree(&k, &range, &embed_args(0, 1, 0, dim, rows), &bufs, "in place");
        // Rows gathered from past the rows written.
        let past: Vec<u32> = ids(rows, vocab).iter().map(|i| i + rows as u32).collect();
        let bufs = vec![Buffer::from_slice(&table), Buffer::from_slice(&past)];
        agree(&k, &range, &embed_args(0, 1, 0, dim, rows), &bufs, "past the rows written");
        // One buffer: the rows written, then the ids, then the table's rows; an id past
        // the end in a later row.
        let ib = rows * dim;
        let first = (ib + rows).div_ceil(dim);
        let mut one: Vec<u32> = (0..((first + vocab) * dim) as u32).map(|i| i % 1000).collect();
        for (r, id) in ids(rows, vocab).iter().enumerate() {
            one[ib + r] = id + first as u32;
        }
        let args = [
            Arg::Buffer(0),
            Arg::scalar(dim as u32),
            Arg::scalar(rows as u32),
            Arg::scalar(ib as u32),
        ];
        agree(&at, &range, &args, &[Buffer::from_slice(&one)], "one buffer");
        one[ib + rows - 2] = (first + vocab) as u32;
        agree(&at, &range, &args, &[Buffer::from_slice(&one)], "one buffer, a fault");
    }
}

#[test]
fn loads_at_an_offset_match_the_interpreter() {
    let k = kernel(SHIFTED);
    for (n, local, off, x_len) in [
        (37usize, 8usize, 0u32, 37usize),
        (64, 16, 5, 69),
        (61, 8, 3, 64),
        // Past the end in a later batch, in the first, and an offset that wraps.
        (64, 8, 9, 70),
        (40, 8, 1000, 50),
        (24, 8, u32::MAX - 3, 30),
    ] {
        let range = NdRange::new(&[n as u32]).with_local(&[local as u32]);
        let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(off)];
        let bufs = vec![f32s(x_len, 3), Buffer::zeroed(Scalar::F32, n)];
        agree(&k, &range, &args, &bufs, &format!("n {n} off {off} len {x_len}"));
    }
}
