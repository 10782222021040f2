//! Vector code that runs every row of its work-group in one call (`SpmdCode::rows`: kernels
//! without barriers that read an id of dimension 1 or 2, such as a transpose): the rows in
//! the interpreter's order, each with its own hoisted values, and the ids the fault reports
//! name. Each case compares results and errors (kernel, work-item, message) with the
//! interpreter and the scalar code: guarded kernels of odd sizes, 2-D and 3-D ranges,
//! faults in a later row of a group, racing stores.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{avx2, f32s, kernel, three_ways};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Kernel;
use kiln_runtime::device::cpu::{lane_groups_on_this_thread, CpuRun};

const TRANSPOSE: &str =
    "kernel transpose(src: ptr<global, f32>, dst: ptr<global, f32>, w: u32, h: u32) {
  let x: u32 = global_id(0);
  let y: u32 = global_id(1);
  if x < w && y < h {
    dst[x * h + y] = src[y * w + x];
  }
}";

/// `k`'s 8-lane code (plain and `-O`) runs whole groups per call; and `k` agrees three
/// ways on `range` (8-lane code there, where AVX2 is).
fn rows_agree(k: &Kernel, range: &NdRange, args: &[Arg], bufs: &[Buffer]) {
    if avx2() {
        for optimize in [false, true] {
            let p = compile(k, &X86Options { optimize, ..X86Options::default() }).unwrap();
            let v = p.vector_code().unwrap_or_else(|| panic!("no 8-lane code:\n{k}"));
            assert!(v.rows, "code that runs one row a call:\n{k}");
        }
    }
    assert_eq!(three_ways(k, range, args, bufs), avx2(), "{k}");
}

/// The transpose's arguments for a `w` x `h` source.
fn transpose_case(w: usize, h: usize, dst_len: usize) -> (Vec<Arg>, Vec<Buffer>) {
    let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(w as u32), Arg::scalar(h as u32)];
    (args, vec![f32s(w * h, 3), Buffer::zeroed(kiln_ir::Scalar::F32, dst_len)])
}

#[test]
fn a_transpose_of_odd_sizes_matches_the_interpreter() {
    let k = kernel(TRANSPOSE);
    for (w, h, local) in [
        (37usize, 29usize, [16usize, 16]),
        (45, 19, [8, 4]),
        (13, 50, [8, 3]),
        (64, 64, [32, 2]),
        (9, 9, [8, 1]),
    ] {
        let global = [w.next_multiple_of(local[0]), h.next_multiple_of(local[1])];
        let range = NdRange::new(&[global[0] as u32, global[1] as u32])
            .with_local(&[local[0] as u32, local[1] as u32]);
        let (args, bufs) = transpose_case(w, h, w * h);
        rows_agree(&k, &range, &args, &bufs);
    }
}

#[test]
fn the_vector_code_runs_the_groups_of_a_two_d_launch() {
    if !avx2() {
        kiln_ir::testing::skip("this CPU has no AVX2");
        return;
    }
    let k = kernel(TRANSPOSE);
    let p = compile(&k, &X86Options { optimize: true, ..X86Options::default() }).unwrap();
    let (args, mut bufs) = transpose_case(37, 29, 37 * 29);
    let range = NdRange::new(&[48, 32]).with_local(&[16, 16]);
    let mut want = bufs.clone();
    run(&k, &range, &args, &mut want).unwrap();
    let before = lane_groups_on_this_thread();
    p.run(&range, &args, &mut bufs).unwrap();
    assert_eq!(lane_groups_on_this_thread() - before, 6, "every group on the 8-lane code");
    assert_eq!(want, bufs);
}

#[test]
fn a_fault_in_a_later_row_names_its_work_item() {
    let k = kernel(TRANSPOSE);
    // dst too short: the first work-item in the interpreter's order whose `x * h + y` is
    // past the end is in a group's later row.
    for (w, h, local, short) in
        [(37usize, 29usize, [16usize, 16], 5), (40, 24, [8, 8], 3), (21, 30, [8, 4], 1)]
    {
        let global = [w.next_multiple_of(local[0]), h.next_multiple_of(local[1])];
        let range = NdRange::new(&[global[0] as u32, global[1] as u32])
            .with_local(&[local[0] as u32, local[1] as u32]);
        let (args, bufs) = transpose_case(w, h, w * h - short);
        let mut want = bufs.clone();
        let e = run(&k, &range, &args, &mut want).expect_err("a fault");
        let item = e.work_item.expect("a work-item");
        assert!(!item[1].is_multiple_of(local[1] as u32), "{e:?}: not a later row");
        rows_agree(&k, &range, &args, &bufs);
    }
}

#[test]
fn three_d_groups_run_their_rows_in_order_with_their_own_ids() {
    // Every id of every dimension lands in the output, and a row's condition and hoisted
    // values depend on its ids.
    let k = kernel(
        "kernel k(o: ptr<global, u32>, q: ptr<global, f32>, w: u32, h: u32) {
           let x: u32 = global_id(0);
           let y: u32 = global_id(1);
           let z: u32 = global_id(2);
           let row: u32 = (z * h + y) * w;
           if y % 3u32 != 1u32 && x < w {
             o[row + x] = x + 1000u32 * local_id(1) + 100000u32 * local_id(2)
               + 10000000u32 * (group_id(1) + 7u32 * group_id(2));
             q[row + x] = q[row + x] + (y as f32) * 0.5;
           }
         }",
    );
    let (w, h, d) = (21u32, 12u32, 6u32);
    let n = (w.next_multiple_of(8) * h * d) as usize;
    let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(w), Arg::scalar(h)];
    let bufs = vec![Buffer::zeroed(kiln_ir::Scalar::U32, n), f32s(n, 5)];
    for local in [[8, 4, 3], [8, 2, 2], [16, 3, 1], [8, 1, 2]] {
        let range = NdRange::new(&[w.next_multiple_of(local[0]), h, d]).with_local(&local);
        rows_agree(&k, &range, &args, &bufs);
    }
    // A fault in a later row and layer of a group: `q` one element short.
    let bufs = vec![Buffer::zeroed(kiln_ir::Scalar::U32, n), f32s((w * h * d) as usize - 1, 5)];
    let range = NdRange::new(&[24, h, d]).with_local(&[8, 4, 3]);
    rows_agree(&k, &range, &args, &bufs);
}

#[test]
fn racing_stores_of_several_rows_leave_the_last_work_items_value() {
    // Every work-item of a group's rows stores to a few elements: the interpreter's last
    // work-item (the last row's) must win, also where several rows share an element.
    let k = kernel(
        "kernel k(o: ptr<global, u32>, m: u32) {
           let x: u32 = global_id(0);
           let y: u32 = global_id(1);
           o[(x * 3u32 + y * 5u32) % m] = x * 100u32 + y;
           o[y % m] = x + 7u32 * y;
         }",
    );
    for (m, local) in [(7u32, [8u32, 4u32]), (13, [16, 3]), (64, [8, 8])] {
        let range = NdRange::new(&[32, 12]).with_local(&local);
        let args = vec![Arg::Buffer(0), Arg::scalar(m)];
        rows_agree(&k, &range, &args, &[Buffer::zeroed(kiln_ir::Scalar::U32, m as usize)]);
    }
}
