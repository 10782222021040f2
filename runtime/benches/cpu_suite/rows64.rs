//! Row reductions in 64 bits (`cpu_suite_rows64.kir`, `KILN_CPU_SUITE_SET=rows64|all`): the
//! class of the third set's `rowsum64` (one work-item per row, a 64-bit accumulator of 32-bit
//! data), each against its plain Rust loop, bit for bit (the f64 sums in the same order).

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

use super::{data, f32_buf, keys, log2n, round_up, set_case, u32_buf, Case, Out};

const ROWS64: &str = include_str!("../cpu_suite_rows64.kir");

/// The set's cases, sized by `KILN_CPU_SUITE_LOG2N` as the first set is.
pub(crate) fn cases() -> Vec<Case> {
    let big = 1usize << log2n();
    let rows64 = |rows: usize| NdRange::new(&[round_up(rows, 64)]).with_local(&[64]);
    let b = |i: usize| Arg::Buffer(i);
    let u = |v: usize| Arg::scalar(v as u32);
    let mut v = Vec::new();

    // Mean and variance sums in f64: rows x 131.
    let cols = 131usize;
    let rows = big / cols;
    let x = data(rows * cols, 81, -3.0, 7.0);
    let xr = x.clone();
    let mut o = vec![0f64; 2 * rows];
    v.push(set_case(
        ROWS64,
        "rowmoments",
        rows64(rows),
        vec![b(0), b(1), u(rows), u(cols)],
        vec![f32_buf(&x), Buffer::zeroed(Scalar::F64, 2 * rows)],
        1,
        0.0,
        Some(4 * rows * cols),
        Box::new(move |keep| {
            for (o, row) in o.chunks_exact_mut(2).zip(xr.chunks_exact(cols)) {
                let (mut s, mut q) = (0f64, 0f64);
                for &v in row {
                    let v = v as f64;
                    s += v;
                    q += v * v;
                }
                o[0] = s;
                o[1] = q;
            }
            keep.then(|| Out::F64(o.clone()))
        }),
    ));

    // i32 rows summed in i64: rows x 97.
    let cols = 97usize;
    let rows = big / cols;
    let x: Vec<i32> = keys(rows * cols, 82).iter().map(|&k| k as i32).collect();
    let xr = x.clone();
    let mut o = vec![0i64; rows];
    v.push(set_case(
        ROWS64,
        "rowsum_i64",
        rows64(rows),
        vec![b(0), b(1), u(rows), u(cols)],
        vec![Buffer::from_slice(&x), Buffer::zeroed(Scalar::I64, rows)],
        1,
        0.0,
        Some(4 * rows * cols),
        Box::new(move |keep| {
            for (o, row) in o.iter_mut().zip(xr.chunks_exact(cols)) {
                let mut s = 0i64;
                for &v in row {
                    s += v as i64;
                }
                *o = s;
            }
            keep.then(|| Out::I64(o.clone()))
        }),
    ));

    // u32 rows dotted with a u32 vector in u64: rows x 67.
    let cols = 67usize;
    let rows = big / cols;
    let (x, y) = (keys(rows * cols, 83), keys(cols, 84));
    let (xr, yr) = (x.clone(), y.clone());
    let mut o = vec![0u64; rows];
    v.push(set_case(
        ROWS64,
        "rowdot64",
        rows64(rows),
        vec![b(0), b(1), b(2), u(rows), u(cols)],
        vec![u32_buf(&x), u32_buf(&y), Buffer::zeroed(Scalar::U64, rows)],
        2,
        0.0,
        Some(4 * rows * cols),
        Box::new(move |keep| {
            for (o, row) in o.iter_mut().zip(xr.chunks_exact(cols)) {
                let mut s = 0u64;
                for (&a, &b) in row.iter().zip(&yr) {
                    s = s.wrapping_add(a as u64 * b as u64);
                }
                *o = s;
            }
            keep.then(|| Out::U64(o.clone()))
        }),
    ));
    v
}
