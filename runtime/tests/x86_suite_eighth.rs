//! The eighth cpu suite set (`runtime/benches/cpu_suite_eighth.kir`) on the cpu device
//! against the interpreter: every kernel of the set at small odd sizes (partial work-groups
//! and batches, several groups, a 2-D launch with rows rounded up), run three ways
//! (interpreter, scalar code, 8-lane code plain, `-O` and compiled for every group size) and
//! through the device on three threads, results and errors bit for bit; special values (NaN,
//! -0.0, inf, i32 extremes that wrap, singular matrices, words of one letter) and faults in
//! later batches, groups and rows (outputs one element short, an input row short, a word
//! longer than the private row). Every kernel of the file must have its cases here.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use std::collections::BTreeSet;

use x86_common::{avx2, three_ways};

use half::f16;
use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::results_match;
use kiln_ir::{Kernel, Scalar};
use kiln_runtime::device::cpu::CpuDevice;
use kiln_runtime::device::registry::OpenOptions;
use kiln_runtime::Device;

const SET: &str = include_str!("../benches/cpu_suite_eighth.kir");

/// One launch of a kernel of the set; `fault` says the interpreter must report an error.
struct Launch {
    kernel: &'static str,
    range: NdRange,
    args: Vec<Arg>,
    bufs: Vec<Buffer>,
    fault: bool,
}

/// Deterministic words: `n` values of an integer hash.
fn keys(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| (i ^ seed.wrapping_mul(0x9e37_79b9)).wrapping_mul(2_654_435_761))
        .collect()
}

/// `n` floats in `[lo, lo + span)`.
fn floats(n: usize, seed: u32, lo: f32, span: f32) -> Vec<f32> {
    keys(n, seed).iter().map(|k| lo + (k >> 8) as f32 / 16_777_216.0 * span).collect()
}

/// A 1-D range of `n` rounded up to groups of `l`.
fn range(n: usize, l: usize) -> NdRange {
    NdRange::new(&[n.div_ceil(l) as u32 * l as u32]).with_local(&[l as u32])
}

fn u(v: usize) -> Arg {
    Arg::scalar(v as u32)
}

fn bufs(n: usize) -> Vec<Arg> {
    (0..n).map(Arg::Buffer).collect()
}

/// The launch with its `out`-th buffer one element short (the fault of the last work-item
/// that writes it).
fn short(mut l: Launch, out: usize) -> Launch {
    let b = &l.bufs[out];
    l.bufs[out] = Buffer::zeroed(b.elem(), b.len() - 1);
    l.fault = true;
    l
}

fn compact(n: usize) -> Launch {
    let groups = n.div_ceil(256);
    let mut x = floats(n, 1, -10.0, 30.0);
    x[3] = f32::NAN;
    x[n - 1] = 7.0;
    Launch {
        kernel: "compact",
        range: range(n, 256),
        args: [bufs(3), vec![Arg::scalar(5.0f32), u(n)]].concat(),
        bufs: vec![
            Buffer::from_slice(&x),
            Buffer::zeroed(Scalar::F32, 256 * groups),
            Buffer::zeroed(Scalar::U32, groups),
        ],
        fault: false,
    }
}

fn base64(len: usize) -> Launch {
    let groups = len.div_ceil(3);
    let src: Vec<u8> = keys(len, 2).iter().map(|k| (k >> 11) as u8).collect();
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    Launch {
        kernel: "base64",
        range: range(groups, 32),
        args: [bufs(3), vec![u(len), u(groups)]].concat(),
        bufs: vec![
            Buffer::from_slice(&src),
            Buffer::from_slice(alphabet),
            Buffer::zeroed(Scalar::U8, 4 * groups),
        ],
        fault: false,
    }
}

/// `n` pairs of words of 1 to 16 letters of a 3-letter alphabet; `long` makes the second
/// word of pair `long` 17 letters (past the private row).
fn levenshtein(n: usize, long: Option<usize>) -> Launch {
    let letters = |seed| keys(16 * n + 1, seed).iter().map(|k| b'a' + (k >> 9) as u8 % 3).collect();
    let (a, b): (Vec<u8>, Vec<u8>) = (letters(3), letters(4));
    let la: Vec<u32> = keys(n, 5).iter().map(|k| (k >> 7) % 16 + 1).collect();
    let mut lb: Vec<u32> = keys(n, 6).iter().map(|k| (k >> 7) % 16 + 1).collect();
    if let Some(i) = long {
        lb[i] = 17;
    }
    Launch {
        kernel: "levenshtein",
        range: range(n, 16),
        args: [bufs(5), vec![u(n)]].concat(),
        bufs: vec![
            Buffer::from_slice(&a),
            Buffer::from_slice(&la),
            Buffer::from_slice(&b),
            Buffer::from_slice(&lb),
            Buffer::zeroed(Scalar::U32, n),
        ],
        fault: long.is_some(),
    }
}

fn inv4(n: usize) -> Launch {
    let mut m = floats(16 * n, 7, -2.0, 4.0);
    // A matrix with two equal rows (singular: its determinant is exactly 0), a zero matrix,
    // the identity and one with a NaN.
    let row0: Vec<f32> = m[16..20].to_vec();
    m[20..24].copy_from_slice(&row0);
    m[32..48].fill(0.0);
    for (e, x) in m[48..64].iter_mut().enumerate() {
        *x = if e % 5 == 0 { 1.0 } else { 0.0 };
    }
    m[70] = f32::NAN;
    Launch {
        kernel: "inv4",
        range: range(n, 8),
        args: [bufs(2), vec![u(n)]].concat(),
        bufs: vec![Buffer::from_slice(&m), Buffer::zeroed(Scalar::F32, 16 * n)],
        fault: false,
    }
}

fn bisect(n: usize) -> Launch {
    let mut c = floats(4 * n, 8, -1.5, 3.0);
    c[5] = f32::NAN;
    c[11] = f32::INFINITY;
    c[12..16].fill(0.0);
    Launch {
        kernel: "bisect",
        range: range(n, 64),
        args: [bufs(2), vec![Arg::scalar(-2.0f32), Arg::scalar(2.0f32), u(n)]].concat(),
        bufs: vec![Buffer::from_slice(&c), Buffer::zeroed(Scalar::F32, n)],
        fault: false,
    }
}

/// A `w` x `rows` image (`w` even) in groups of 8 x 2 (the rows rounded up).
fn lift53(w: usize, rows: usize) -> Launch {
    let mut x: Vec<i32> = keys(w * rows, 9).iter().map(|&k| k as i32 >> 15).collect();
    x[1] = i32::MAX;
    x[2] = i32::MIN;
    Launch {
        kernel: "lift53",
        range: NdRange::new(&[(w / 2).div_ceil(8) as u32 * 8, rows.div_ceil(2) as u32 * 2])
            .with_local(&[8, 2]),
        args: [bufs(2), vec![u(w), u(rows)]].concat(),
        bufs: vec![Buffer::from_slice(&x), Buffer::zeroed(Scalar::I32, w * rows)],
        fault: false,
    }
}

fn hdot(cols: usize, rows: usize) -> Launch {
    let half = |v: Vec<f32>| v.into_iter().map(f16::from_f32).collect::<Vec<_>>();
    let mut a = half(floats(rows * cols, 10, -4.0, 8.0));
    a[cols + 2] = f16::NAN;
    a[3 * cols] = f16::INFINITY;
    Launch {
        kernel: "hdot",
        range: range(rows, 16),
        args: [bufs(3), vec![u(cols), u(rows)]].concat(),
        bufs: vec![
            Buffer::from_slice(&a),
            Buffer::from_slice(&half(floats(cols, 11, -1.0, 2.0))),
            Buffer::zeroed(Scalar::F32, rows),
        ],
        fault: false,
    }
}

fn isqrt(n: usize) -> Launch {
    let mut x: Vec<u32> = keys(n, 12).iter().map(|&k| k >> (k % 29)).collect();
    let special = [0, 1, 2, 3, 4, 8, 9, 15, 16, 65_535, 65_536, u32::MAX, u32::MAX - 1];
    x[..special.len()].copy_from_slice(&special);
    x[n - 1] = 0xfffe_0001; // 65535^2
    Launch {
        kernel: "isqrt",
        range: range(n, 64),
        args: [bufs(2), vec![u(n)]].concat(),
        bufs: vec![Buffer::from_slice(&x), Buffer::zeroed(Scalar::U32, n)],
        fault: false,
    }
}

fn slerp(n: usize) -> Launch {
    let unit = |seed| {
        let mut q = floats(4 * n, seed, -1.0, 2.0);
        for c in q.chunks_mut(4) {
            let len = (c[0] * c[0] + c[1] * c[1] + c[2] * c[2] + c[3] * c[3]).sqrt();
            c.iter_mut().for_each(|x| *x /= len);
        }
        q
    };
    let (q0, mut q1) = (unit(13), unit(14));
    // Equal pairs (the lerp side) and an opposite pair (the shorter arc flips it back).
    for p in [0, 9, 10] {
        let q: Vec<f32> = q0[4 * p..4 * p + 4].to_vec();
        q1[4 * p..4 * p + 4].copy_from_slice(&q);
    }
    let opposite: Vec<f32> = q0[20..24].iter().map(|x| -x).collect();
    q1[20..24].copy_from_slice(&opposite);
    Launch {
        kernel: "slerp",
        range: range(n, 8),
        args: [bufs(4), vec![u(n)]].concat(),
        bufs: vec![
            Buffer::from_slice(&q0),
            Buffer::from_slice(&q1),
            Buffer::from_slice(&floats(n, 15, 0.0, 1.0)),
            Buffer::zeroed(Scalar::F32, 4 * n),
        ],
        fault: false,
    }
}

fn logistic(d: usize, n: usize) -> Launch {
    let mut x: Vec<f64> = floats(d * n, 16, -3.0, 6.0).iter().map(|&v| f64::from(v)).collect();
    x[d] = 1e6; // exp(-z) overflows: a score of 0 or 1
    x[2 * d] = -1e6;
    x[3 * d] = f64::NAN;
    let w: Vec<f64> = floats(d, 17, -1.0, 2.0).iter().map(|&v| f64::from(v)).collect();
    Launch {
        kernel: "logistic",
        range: range(n, 8),
        args: [bufs(3), vec![Arg::scalar(0.25f64), u(d), u(n)]].concat(),
        bufs: vec![Buffer::from_slice(&x), Buffer::from_slice(&w), Buffer::zeroed(Scalar::F64, n)],
        fault: false,
    }
}

fn civil(n: usize) -> Launch {
    let mut days: Vec<i32> =
        keys(n, 18).iter().map(|&k| (k % 2_000_000) as i32 - 1_000_000).collect();
    // The eras' edges, day 0, and extremes whose `+ 719468` and products wrap.
    let special = [-719_468, -719_469, -719_468 - 146_097, 0, -1, 59, 60, i32::MAX, i32::MIN];
    days[..special.len()].copy_from_slice(&special);
    Launch {
        kernel: "civil",
        range: range(n, 32),
        args: [bufs(2), vec![u(n)]].concat(),
        bufs: vec![Buffer::from_slice(&days), Buffer::zeroed(Scalar::I32, n)],
        fault: false,
    }
}

fn bsort(n: usize) -> Launch {
    let mut x: Vec<f32> = floats(n, 19, -50.0, 100.0).iter().map(|v| v.round()).collect();
    x[4] = -0.0;
    x[7] = 0.0;
    x[100] = f32::NAN;
    x[n - 1] = -f32::INFINITY;
    Launch {
        kernel: "bsort",
        range: range(n, 256),
        args: [bufs(2), vec![u(n)]].concat(),
        bufs: vec![Buffer::from_slice(&x), Buffer::zeroed(Scalar::F32, n)],
        fault: false,
    }
}

/// Every launch: each kernel at two or three sizes, and faults.
fn launches() -> Vec<Launch> {
    let mut row_short = lift53(38, 11);
    row_short.bufs[0] = Buffer::zeroed(Scalar::I32, 38 * 11 - 5);
    row_short.fault = true;
    let mut late_word = levenshtein(45, None);
    late_word.bufs[1] = Buffer::from_slice(&[16u32; 45]);
    late_word.bufs[0] = Buffer::zeroed(Scalar::U8, 16 * 45 - 1);
    late_word.fault = true;
    vec![
        compact(1337),
        compact(256),
        compact(37),
        short(compact(1337), 2),
        base64(100),
        base64(101),
        base64(99),
        short(base64(301), 2),
        levenshtein(45, None),
        levenshtein(9, None),
        levenshtein(45, Some(40)),
        late_word,
        inv4(21),
        short(inv4(21), 1),
        bisect(77),
        short(bisect(77), 1),
        lift53(38, 11),
        // A width of 2, below the kernel's 4: work-item 0's left detail reads x[o + 2], the
        // next row's first sample, past the end in the last row.
        Launch { fault: true, ..lift53(2, 5) },
        lift53(64, 3),
        row_short,
        hdot(13, 50),
        hdot(64, 9),
        short(hdot(13, 50), 2),
        isqrt(300),
        short(isqrt(300), 1),
        slerp(37),
        short(slerp(37), 3),
        logistic(5, 29),
        logistic(8, 8),
        short(logistic(5, 29), 0),
        civil(1000),
        short(civil(1000), 1),
        bsort(300),
        bsort(256),
        short(bsort(300), 1),
    ]
}

fn set_kernel(name: &str) -> Kernel {
    let m = kiln_ir::parse_module(SET).expect("the eighth set parses");
    m.kernels.iter().find(|k| k.name() == name).unwrap_or_else(|| panic!("{name}")).clone()
}

#[test]
fn every_kernel_agrees_three_ways() {
    let mut vector = BTreeSet::new();
    let mut covered = BTreeSet::new();
    for l in launches() {
        let k = set_kernel(l.kernel);
        let mut want = l.bufs.clone();
        let interp = run(&k, &l.range, &l.args, &mut want);
        assert_eq!(interp.is_err(), l.fault, "{}: {interp:?}", l.kernel);
        if three_ways(&k, &l.range, &l.args, &l.bufs) {
            vector.insert(l.kernel);
        }
        covered.insert(l.kernel);
    }
    let m = kiln_ir::parse_module(SET).expect("the eighth set parses");
    let all: BTreeSet<&str> = m.kernels.iter().map(|k| k.name()).collect();
    assert_eq!(covered, all, "every kernel of the set has its cases");
    // Each kernel has 8-lane code (with AVX2), so that those ran too.
    if avx2() {
        assert_eq!(vector, all, "the kernels with 8-lane code");
    }
}

#[test]
fn every_kernel_agrees_on_the_device() {
    let options = OpenOptions { threads: Some(3), ..OpenOptions::default() };
    let Some(dev) = kiln_ir::testing::require("KILN_REQUIRE_TOOLS", CpuDevice::open(&options))
    else {
        return;
    };
    for l in launches() {
        let k = set_kernel(l.kernel);
        let mut want = l.bufs.clone();
        let expected = run(&k, &l.range, &l.args, &mut want).map_err(|e| e.to_string());
        let mut got = l.bufs.clone();
        let actual = dev.build_and_run(&k, &l.range, &l.args, &mut got).map_err(|e| e.to_string());
        match (expected, actual) {
            (Ok(()), Ok(())) => {
                results_match(&want, &got).unwrap_or_else(|e| panic!("{}: {e}", l.kernel))
            }
            // The device's launch error is the interpreter's message, word for word.
            (Err(w), Err(g)) => assert!(g.ends_with(&w), "{}: `{g}` is not `{w}`", l.kernel),
            (w, g) => panic!("{}: interpreter {w:?}, cpu {g:?}", l.kernel),
        }
    }
}
