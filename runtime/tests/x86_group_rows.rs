//! Work-groups of several rows with barriers on the 8-lane round code, which runs a whole
//! group per call, row after row and round after round (backends/src/x86/spmd/grouprows.rs):
//! results, faults and barrier divergence as the interpreter's and the scalar code's, in 2-D
//! and 3-D groups, with the rows' ids read before and after barriers, in loops around
//! barriers, and with faults and divergence in later rows and rounds.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, f32s, kernel};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

/// A scaled transpose through a 16 x 17 local tile (the sixth cpu suite set's `tiletrans`),
/// at sizes that are not multiples of the tile, and with groups of other shapes.
#[test]
fn tiled_transposes_agree() {
    let set = include_str!("../benches/cpu_suite_sixth.kir");
    let m = kiln_ir::parse_module(set).expect("the sixth set parses");
    let k = m.kernel("tiletrans").expect("tiletrans in the sixth set").clone();
    for (w, h) in [(37u32, 30u32), (16, 16), (33, 17), (5, 47)] {
        let args =
            [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(1.5f32), Arg::scalar(w), Arg::scalar(h)];
        let bufs = [f32s((w * h) as usize, 3), Buffer::zeroed(Scalar::F32, (w * h) as usize)];
        let r = NdRange::new(&[w.div_ceil(16) * 16, h.div_ceil(16) * 16]).with_local(&[16, 16]);
        agree(&k, &r, &args, &bufs, &format!("{w} x {h}"));
    }
    // The same without a fixed group size: 8 x 8 tiles in groups of 8 x 8 and 16 x 4 rows.
    let k = kernel(
        "kernel t(src: ptr<global, f32>, dst: ptr<global, f32>, w: u32, h: u32) {
           local tile: f32[272];
           let lx: u32 = local_id(0);
           let ly: u32 = local_id(1);
           let x: u32 = global_id(0);
           let y: u32 = global_id(1);
           if x < w && y < h { tile[ly * 17u32 + lx] = src[y * w + x]; }
           barrier(local);
           let n: u32 = local_size(1);
           let ox: u32 = group_id(1) * n + lx % n;
           let oy: u32 = group_id(0) * local_size(0) + ly + lx / n * n;
           if ox < h && oy < w { dst[oy * h + ox] = tile[(lx % n) * 17u32 + ly + lx / n * n]; }
         }",
    );
    for (l, (w, h)) in [([8u32, 8u32], (19u32, 13u32)), ([16, 4], (21, 9)), ([8, 2], (8, 6))] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(w), Arg::scalar(h)];
        let bufs = [f32s((w * h) as usize, 5), Buffer::zeroed(Scalar::F32, (w * h) as usize)];
        let g = [w.div_ceil(l[0]) * l[0], h.div_ceil(l[1]) * l[1]];
        let r = NdRange::new(&g).with_local(&l);
        agree(&k, &r, &args, &bufs, &format!("{l:?}: {w} x {h}"));
    }
}

/// Rows' ids of dimensions 1 and 2 read before and after barriers in a loop around them
/// (each round starts again from the group's first row), in 2-D and 3-D groups, with
/// offsets.
#[test]
fn ids_of_later_rows_and_rounds_agree() {
    let k = kernel(
        "kernel k(o: ptr<global, u32>, rounds: u32) {
           local t: u32[256];
           let me: u32 = (local_id(2) * local_size(1) + local_id(1)) * local_size(0) + local_id(0);
           let n: u32 = local_size(0) * local_size(1) * local_size(2);
           var acc: u32 = global_id(1) * 1000u32 + global_id(2) * 100000u32 + me;
           t[me] = acc;
           for r: u32 in 0u32 .. rounds {
             barrier(local);
             let v: u32 = t[(me * 7u32 + r + 1u32) % n];
             barrier(local);
             acc = acc * 3u32 + v + local_id(1) * 10u32 + local_id(2) + global_id(1);
             t[me] = acc;
           }
           let flat: u32 = (global_id(2) * global_size(1) + global_id(1)) * global_size(0) + global_id(0);
           o[flat] = acc + group_id(1) * 7u32 + group_id(2) * 11u32;
         }",
    );
    let shapes: [([u32; 3], [u32; 3]); 5] = [
        ([16, 8, 1], [16, 4, 1]),
        ([8, 6, 4], [8, 3, 2]),
        ([24, 4, 2], [8, 2, 2]),
        ([32, 2, 3], [32, 2, 1]),
        ([8, 1, 6], [8, 1, 3]),
    ];
    for (g, l) in shapes {
        for rounds in [0u32, 1, 3] {
            let total = (g[0] * g[1] * g[2]) as usize;
            let args = [Arg::Buffer(0), Arg::scalar(rounds)];
            let bufs = [Buffer::zeroed(Scalar::U32, total)];
            let r = NdRange::new(&g).with_local(&l);
            agree(&k, &r, &args, &bufs, &format!("{g:?} / {l:?}, {rounds} rounds"));
            let r = NdRange::new(&g).with_local(&l).with_offset(&[8, 3, 1]);
            let bufs = [Buffer::zeroed(Scalar::U32, 4 * total)];
            agree(&k, &r, &args, &bufs, &format!("{g:?} / {l:?} offset, {rounds} rounds"));
        }
    }
}

/// A load out of bounds in one work-item (`ix[ix[g]]` where `ix[g]` is too large) of a later
/// row, before the first barrier, between two in either round, or after the last: the
/// interpreter's error (its work-item and message).
#[test]
fn faults_in_later_rows_and_rounds_are_the_interpreters() {
    let k = kernel(
        "kernel k(o: ptr<global, u32>, ix: ptr<global, u32>, at: u32) {
           local t: u32[128];
           let me: u32 = local_id(1) * local_size(0) + local_id(0);
           let g: u32 = global_id(1) * global_size(0) + global_id(0);
           var acc: u32 = me;
           if at == 0u32 { acc = acc + ix[ix[g]]; }
           t[me] = acc;
           for r: u32 in 0u32 .. 2u32 {
             barrier(local);
             if at == 1u32 + r { acc = acc + ix[ix[g]]; }
             acc = acc + t[(me + 5u32) % 128u32];
             barrier(local);
             t[me] = acc;
           }
           if at == 3u32 { acc = acc + ix[ix[g]]; }
           o[g] = acc;
         }",
    );
    let (g, l) = ([16u32, 16u32], [16u32, 8u32]);
    let total = 256usize;
    for bad in [0usize, 7, 8, 17, 130, 135, 200, 255] {
        for at in 0u32..4 {
            let mut ix: Vec<u32> = (0..total as u32).collect();
            ix[bad] = 1 << 20;
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(at)];
            let bufs = [Buffer::zeroed(Scalar::U32, total), Buffer::from_slice(&ix)];
            let r = NdRange::new(&g).with_local(&l);
            agree(&k, &r, &args, &bufs, &format!("bad {bad}, at {at}"));
        }
    }
    // `ix` shorter than the launch: the first work-item past its end faults (in a later
    // row of the group).
    for len in [130usize, 136, 200, 255] {
        for at in 0u32..4 {
            let ix: Vec<u32> = (0..len as u32).collect();
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(at)];
            let bufs = [Buffer::zeroed(Scalar::U32, total), Buffer::from_slice(&ix)];
            let r = NdRange::new(&g).with_local(&l);
            agree(&k, &r, &args, &bufs, &format!("ix of {len}, at {at}"));
        }
    }
}

/// Rows that disagree about a barrier (control uniform within a row, so the 8-lane code
/// runs it): barrier divergence reported as the interpreter reports it, in whichever row
/// and round it first shows, also where a row faults after disagreeing.
#[test]
fn divergence_between_rows_is_the_interpreters() {
    let k = kernel(
        "kernel k(o: ptr<global, u32>, ix: ptr<global, u32>, row: u32, round: u32) {
           let g: u32 = (global_id(2) * global_size(1) + global_id(1)) * global_size(0) + global_id(0);
           let y: u32 = local_id(2) * local_size(1) + local_id(1);
           for r: u32 in 0u32 .. 3u32 {
             if y != row || r != round { barrier(local); }
           }
           o[ix[g]] = y;
         }",
    );
    let shapes: [([u32; 3], [u32; 3]); 3] =
        [([16, 4, 1], [16, 4, 1]), ([8, 2, 3], [8, 2, 3]), ([24, 3, 1], [8, 3, 1])];
    for (g, l) in shapes {
        let total = (g[0] * g[1] * g[2]) as usize;
        let rows = l[1] * l[2];
        for row in [0, 1, rows - 1, rows] {
            for round in [0u32, 2] {
                for bad in [None, Some(total - 1), Some(9)] {
                    let mut ix: Vec<u32> = (0..total as u32).collect();
                    if let Some(b) = bad {
                        ix[b] = 1 << 20;
                    }
                    let args =
                        [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(row), Arg::scalar(round)];
                    let bufs = [Buffer::zeroed(Scalar::U32, total), Buffer::from_slice(&ix)];
                    let r = NdRange::new(&g).with_local(&l);
                    let what = format!("{g:?} / {l:?}: row {row}, round {round}, bad {bad:?}");
                    agree(&k, &r, &args, &bufs, &what);
                }
            }
        }
    }
}
