//! Per-lane stores at computed indices (scatters) of the 8-lane code, which with every lane
//! active take each lane's index and value straight from the registers: 32-, 16- and 8-bit
//! elements, private arrays, colliding lanes (the interpreter's last work-item wins), lane
//! strides other than 1 and faults. Each case compares results and errors with the
//! interpreter and the scalar code.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, kernel, vals};

use kiln_ir::launch::{Arg, NdRange};
use kiln_ir::Scalar;

#[test]
fn scatters_of_every_width_leave_the_last_work_items_values() {
    for ty in ["u32", "f32", "i16", "u16", "i8", "u8"] {
        let k = kernel(&format!(
            "kernel k(o: ptr<global, {ty}>, x: ptr<global, {ty}>, s: u32, m: u32) {{
               let i: u32 = global_id(0);
               o[(i * s) % m] = x[i];
             }}"
        ));
        let elem = Scalar::ALL.iter().copied().find(|e| e.to_string() == ty).unwrap();
        // Strides that spread the lanes, make them collide within a batch, or across.
        for (s, m) in [(3u32, 200u32), (5, 7), (0, 9), (1, 64), (64, 37)] {
            let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(s), Arg::scalar(m)];
            let bufs = vec![vals(elem, m as usize, 1), vals(elem, 40, 2)];
            agree(&k, &NdRange::new(&[40]), &args, &bufs, &format!("{ty} s={s} m={m}"));
        }
    }
}

#[test]
fn a_scatter_past_the_end_reports_the_first_faulting_work_item() {
    let k = kernel(
        "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, s: u32) {
           let i: u32 = global_id(0);
           o[i * s + 1u32] = x[i];
         }",
    );
    for (s, len) in [(3u32, 50usize), (1, 20), (7, 100), (2, 2)] {
        let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(s)];
        let bufs = vec![vals(Scalar::F32, len, 1), vals(Scalar::F32, 32, 2)];
        agree(&k, &NdRange::new(&[32]), &args, &bufs, &format!("s={s} len={len}"));
    }
}

#[test]
fn private_array_stores_at_per_lane_indices() {
    let k = kernel(
        "kernel k(o: ptr<global, i32>, n: u32) {
           private p: i32[8];
           let i: u32 = global_id(0);
           for j: u32 in 0 .. 8 {
             p[(i + j * 3u32) % 8u32] = ((i * 10u32 + j) as i32);
           }
           o[i] = p[i % 8u32] + p[(i + 5u32) % n];
         }",
    );
    for n in [8u32, 9] {
        let args = vec![Arg::Buffer(0), Arg::scalar(n)];
        agree(&k, &NdRange::new(&[24]), &args, &[vals(Scalar::I32, 24, 3)], &format!("n={n}"));
    }
}
