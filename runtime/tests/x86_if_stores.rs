//! Stores on both sides of an `if` merged into one store of a select on the 8-lane code
//! (backends/src/x86/spmd/ifstore.rs): the seventh cpu suite set's ROT13 (an `else if`
//! chain of u8 stores), the same shape on every storable width, several stores per side
//! into aliased buffers, a loading condition, and faults of the stores and of the condition
//! in later batches, against the interpreter and the scalar code bit for bit; and the
//! sides the merge must leave alone (a division by a value, a load past the end, only in
//! lanes that do not take that side), which must still agree.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vals, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

/// A 1-D range of `n` rounded up to groups of `l`.
fn range(n: usize, l: usize) -> NdRange {
    NdRange::new(&[n.div_ceil(l) as u32 * l as u32]).with_local(&[l as u32])
}

/// The per-lane narrow stores of the listing (a masked store of 8/16-bit elements writes
/// each active lane's element from `r11b` or `r11w`).
fn lane_stores(k: &kiln_ir::Kernel) -> usize {
    let narrow = |l: &String| l.ends_with(",r11b") || l.ends_with(",r11w");
    vector_listing(k).iter().filter(|l| l.starts_with("mov [") && narrow(l)).count()
}

#[test]
fn rot13_of_the_seventh_set_agrees() {
    let set = include_str!("../benches/cpu_suite_seventh.kir");
    let m = kiln_ir::parse_module(set).expect("the seventh set parses");
    let k = m.kernel("rot13").expect("rot13 in the seventh set").clone();
    if avx2() {
        // One store of the merged value: eight per-lane byte stores for partial masks, not
        // eight for each of the three sides.
        assert!(lane_stores(&k) <= 8, "{:#?}", vector_listing(&k));
    }
    for (n, l) in [(1000usize, 64usize), (37, 8), (8, 8), (9, 16), (300, 256)] {
        let text: Vec<u8> =
            (0..n as u32).map(|i| (i.wrapping_mul(2654435761) >> 9) as u8).collect();
        let bufs = [Buffer::from_slice(&text), Buffer::zeroed(Scalar::U8, n)];
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n as u32)];
        agree(&k, &range(n, l), &args, &bufs, &format!("rot13 n={n} l={l}"));
    }
}

#[test]
fn chains_of_every_width_agree() {
    for (ty, scalar) in [
        ("u8", Scalar::U8),
        ("i8", Scalar::I8),
        ("i16", Scalar::I16),
        ("u16", Scalar::U16),
        ("i32", Scalar::I32),
        ("u32", Scalar::U32),
        ("f32", Scalar::F32),
        ("f64", Scalar::F64),
        ("u64", Scalar::U64),
        ("i64", Scalar::I64),
    ] {
        let k = kernel(&format!(
            "kernel k(x: ptr<global, {ty}>, o: ptr<global, {ty}>, t: {ty}, n: u32) {{
               let i: u32 = global_id(0);
               if i < n {{
                 let v: {ty} = x[i];
                 if v > t {{
                   o[i] = v - t;
                 }} else if v == t {{
                   o[i] = max(v, t) * 3;
                 }} else {{
                   o[i] = v;
                 }}
               }}
             }}"
        ));
        if avx2() && matches!(scalar, Scalar::U8 | Scalar::I8 | Scalar::I16 | Scalar::U16) {
            assert!(lane_stores(&k) <= 8, "{ty}: {:#?}", vector_listing(&k));
        }
        for (n, l) in [(45usize, 16usize), (64, 64), (13, 8)] {
            let bufs = [vals(scalar, n, 3), Buffer::zeroed(scalar, n)];
            let t = vals(scalar, 1, 11).get(0).expect("one value");
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Scalar(t), Arg::scalar(n as u32)];
            agree(&k, &range(n, l), &args, &bufs, &format!("{ty} n={n}"));
        }
    }
}

#[test]
fn several_stores_per_side_into_aliased_buffers_agree() {
    // Two stores a side, to `o` and `p` (the same buffer in the second launch: the later
    // store wins in every lane, as in the interpreter), and a nested `if` in the else side.
    let k = kernel(
        "kernel k(x: ptr<global, u8>, o: ptr<global, u8>, p: ptr<global, u8>, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             let c: u8 = x[i];
             if (c & 1) == 1 {
               o[i] = c / 3;
               p[i] = c + 1;
             } else {
               if c > 9 {
                 o[i] = c % 7;
                 p[i] = 200;
               } else {
                 o[i] = 7;
                 p[i] = c;
               }
             }
           }
         }",
    );
    if avx2() {
        assert!(lane_stores(&k) <= 16, "{:#?}", vector_listing(&k));
    }
    for (n, l) in [(45usize, 16usize), (100, 32)] {
        let bufs =
            [vals(Scalar::U8, n, 5), Buffer::zeroed(Scalar::U8, n), Buffer::zeroed(Scalar::U8, n)];
        for alias in [2usize, 1] {
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(alias), Arg::scalar(n as u32)];
            agree(&k, &range(n, l), &args, &bufs, &format!("n={n} alias={alias}"));
        }
    }
}

#[test]
fn faults_of_the_stores_and_of_a_loading_condition_agree() {
    // The condition loads `x[i + 3]` (past the end for the last lanes) and the store goes to
    // `o[2 * i]` (past the end from the middle on): each fault is the interpreter's, in a
    // later batch, with what earlier lanes stored.
    let k = kernel(
        "kernel k(x: ptr<global, i16>, o: ptr<global, i16>, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             if x[i + 3] > 4 {
               o[2 * i] = 1;
             } else {
               o[2 * i] = -1;
             }
           }
         }",
    );
    if avx2() {
        // A strided 16-bit store is per lane in both of the guard's copies: 16 lane stores
        // for the one merged store (32 for two sides).
        assert!(lane_stores(&k) <= 16, "{:#?}", vector_listing(&k));
    }
    let n = 53usize;
    for (xlen, olen) in [(n + 3, 2 * n), (n, 2 * n), (n + 3, 70), (40, 70)] {
        let bufs = [vals(Scalar::I16, xlen, 1), Buffer::zeroed(Scalar::I16, olen)];
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n as u32)];
        agree(&k, &range(n, 16), &args, &bufs, &format!("x {xlen} o {olen}"));
    }
}

#[test]
fn sides_that_would_fault_elsewhere_stay_apart() {
    // A division by `d` only where `d` is not 0, a load of `y[i]` only where `i < m` (y has
    // m elements), a quotient on only one side of an `else if`: merged, each would fault in
    // lanes the interpreter never runs it in.
    let k = kernel(
        "kernel k(x: ptr<global, u32>, y: ptr<global, u32>, o: ptr<global, u32>, m: u32, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             let d: u32 = x[i] % 4;
             if d != 0 {
               o[i] = 100 / d;
             } else {
               o[i] = 0;
             }
             if i < m {
               o[n + i] = y[i];
             } else {
               o[n + i] = 1;
             }
             if d == 0 {
               o[2 * n + i] = 5;
             } else if d > 1 {
               o[2 * n + i] = 9 / (d - 1);
             } else {
               o[2 * n + i] = 6;
             }
           }
         }",
    );
    let (n, m) = (45usize, 20usize);
    let bufs =
        [vals(Scalar::U32, n, 2), vals(Scalar::U32, m, 4), Buffer::zeroed(Scalar::U32, 3 * n)];
    let args = [
        Arg::Buffer(0),
        Arg::Buffer(1),
        Arg::Buffer(2),
        Arg::scalar(m as u32),
        Arg::scalar(n as u32),
    ];
    agree(&k, &range(n, 16), &args, &bufs, "apart");
}
