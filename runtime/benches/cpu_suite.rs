//! Issue 24's cpu benchmark suite: twelve kinds of kernels a CPU user writes
//! (`cpu_suite.kir`, `examples/reduce.kir`, `examples/stencil2d.kir`), each run on the `cpu`
//! device with one thread and with all of them, against the same computation written as plain
//! Rust loops (single-threaded, compiled with this bench, in the same run). Every kernel's
//! result is checked against its loop before anything is timed: bit for bit, except where
//! `exp`/`log` are involved (option pricing, softmax: relative error at most 1e-4, as kiln's
//! transcendentals are its own algorithms, not the host libm's).
//!
//! Criterion measures each kernel (`cpu_suite/<kernel>/{rust_1t,kiln_1t,kiln_all}`); then a
//! closing table gives, from medians of 7 runs of each in this same run, the ratio kiln
//! 1 thread : rust (above 1: kiln is faster), their geometric mean, and for the memory-bound
//! kernels the bandwidth kiln reaches on all threads as a fraction of the machine's copy
//! bandwidth, measured here on as many threads kept parked between copies (the faster of
//! `memcpy` and a vectorized loop).
//!
//! `cargo bench -p kiln-runtime --bench cpu_suite -- --warm-up-time 1 --measurement-time 3`
//! (`KILN_CPU_SUITE_LOG2N`, default 22, sets the elements of the 1-D kernels and the points
//! of the 2-D ones; 24 gives issue 24's 4096^2 stencil; `KILN_CPU_SUITE_ONLY=reduce,histogram`
//! runs only the kernels named, the geometric mean then being theirs;
//! `KILN_CPU_SUITE_THREADS=N` sets the threads of `all` and of the copy, one per core by
//! default).
//!
//! `KILN_CPU_SUITE_SET=more` runs instead a second, held-out set of kernels written after kiln
//! was tuned on the first (`cpu_suite_more.kir`, `cpu_suite/more.rs`: transpose, GELU, a
//! 7-tap convolution in local memory, argmax, a work-group scan, bilinear resize, n-body, bit
//! tricks, f64 axpy and gemv, 8-bit thresholding, CSR SpMV), with its own table;
//! `KILN_CPU_SUITE_SET=third` runs a third set written after those two (`cpu_suite_third.kir`,
//! `cpu_suite/third.rs`: layer norm, RGB to gray, an NCHW to NHWC permute by `/` and `%`, a
//! clamped 3x3 blur, int8 quantization, complex multiply, `vload4` premultiplied alpha, per-bin
//! `atomic_min`/`atomic_max`, f16 scaling, u32 row sums in u64, a sigmoid-tanh gate, an
//! embedding gather, bit reversal and a local-memory tiled matrix-vector product);
//! `KILN_CPU_SUITE_SET=fourth` a fourth, written after the three (`cpu_suite_fourth.kir`,
//! `cpu_suite/fourth.rs`: Collatz steps, k-means assignment, splitmix64, a Horner loop in f64,
//! Sobel edges, a rotation by `sin`/`cos`, YUV to RGB, i16 audio mixing, digit sums, a
//! triangular matrix-vector product, a bitonic compare-exchange step, a permutation scatter
//! and 4x4 matrices in private arrays); `KILN_CPU_SUITE_SET=rows64` runs the class of
//! `rowsum64`, row reductions of 32-bit data in 64 bits (`cpu_suite_rows64.kir`,
//! `cpu_suite/rows64.rs`: f64 moments, i64 sums, u64 dot products); `KILN_CPU_SUITE_SET=fifth`
//! a fifth, written after the fourth (`cpu_suite_fifth.kir`, `cpu_suite/fifth.rs`: u8 alpha
//! blending in u16, CRC-32 by table, ray-sphere hits, 2x2 max pooling, Conway's life wrapped by
//! `%`, batch-norm inference, Newton cube roots, Monte-Carlo pi with a local atomic, pairwise
//! squared distances, a Floyd-Warshall step, softplus and an FIR filter);
//! `KILN_CPU_SUITE_SET=sixth` a sixth, written after the fifth (`cpu_suite_sixth.kir`,
//! `cpu_suite/sixth.rs`: run-length decoding by binary search, a smoothstep colour ramp, a 3x3
//! median of u8 pixels, FNV-1a of variable-length records in u64, Thomas tridiagonal solves in
//! f64, sparse dot products merged by a `while`, a particle step on a struct of arrays, a
//! transpose through a local tile, Bayer dithering, piecewise-linear table lookup, a bitmap by
//! `atomic_or` and Q16.16 products saturated through i64);
//! `KILN_CPU_SUITE_SET=seventh` a seventh, written after the sixth (`cpu_suite_seventh.kir`,
//! `cpu_suite/seventh.rs`: an early-exit byte search in text records, u64 Hamming distances,
//! a breadth-first search step by `atomic_min`, f64 moving averages, a 3-D heat stencil, point
//! in polygon with a bool, block min-max normalization in local memory, ROT13 on u8, polar
//! coordinates, a trimmed mean by insertion sort in a private array, modular exponentiation in
//! u64 and RGB565 packing to u16);
//! `KILN_CPU_SUITE_SET=eighth` an eighth, written after the seventh (`cpu_suite_eighth.kir`,
//! `cpu_suite/eighth.rs`: stream compaction by a local atomic counter, base64 encoding, edit
//! distances with a private row, 4x4 matrix inverses, cubic roots by bisection, a CDF 5/3
//! wavelet step on i32 rows, f16 dot products, integer square roots by Newton's iteration,
//! quaternion slerp, logistic regression in f64, days to civil dates and a bitonic sort in
//! local memory);
//! `KILN_CPU_SUITE_SET=all` runs the nine.
//!
//! Where `python3` imports the `halide` package, a second table sets the same kernels written
//! as Halide pipelines (`cpu_suite/halide.py`, results checked against NumPy) beside kiln, on
//! one thread and on all (`KILN_CPU_SUITE_HALIDE=0` skips it).

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{parse_module, Module, Scalar, Verified};
use kiln_runtime::device::cpu::CpuDevice;
use kiln_runtime::device::registry::OpenOptions;
use kiln_runtime::{Device, Handle};

#[path = "cpu_suite/eighth.rs"]
mod eighth;
#[path = "cpu_suite/fifth.rs"]
mod fifth;
#[path = "cpu_suite/fourth.rs"]
mod fourth;
#[path = "cpu_suite/halide.rs"]
mod halide;
#[path = "cpu_suite/more.rs"]
mod more;
#[path = "cpu_suite/rows64.rs"]
mod rows64;
#[path = "cpu_suite/seventh.rs"]
mod seventh;
#[path = "cpu_suite/sixth.rs"]
mod sixth;
#[path = "cpu_suite/third.rs"]
mod third;

const SUITE: &str = include_str!("cpu_suite.kir");
const REDUCE: &str = include_str!("../../examples/reduce.kir");
const STENCIL: &str = include_str!("../../examples/stencil2d.kir");

fn log2n() -> u32 {
    std::env::var("KILN_CPU_SUITE_LOG2N").ok().and_then(|s| s.parse().ok()).unwrap_or(22)
}

/// Whether `KILN_CPU_SUITE_SET` (`first`, the default; `more`, the held-out kernels of
/// `cpu_suite/more.rs`; `third`, those of `cpu_suite/third.rs`; `fourth`, those of
/// `cpu_suite/fourth.rs`; `rows64`, those of `cpu_suite/rows64.rs`; `fifth`, those of
/// `cpu_suite/fifth.rs`; `sixth`, those of `cpu_suite/sixth.rs`; `seventh`, those of
/// `cpu_suite/seventh.rs`; `eighth`, those of `cpu_suite/eighth.rs`; or `all`) selects the set
/// `set`.
fn set_wanted(set: &str) -> bool {
    let chosen = std::env::var("KILN_CPU_SUITE_SET").unwrap_or_else(|_| "first".into());
    chosen == "all" || chosen == set
}

/// The kernels `KILN_CPU_SUITE_ONLY` names (comma-separated), or all of them.
fn wanted(name: &str) -> bool {
    std::env::var("KILN_CPU_SUITE_ONLY")
        .map_or(true, |only| only.split(',').any(|n| n.trim() == name))
}

/// The threads of `all` (and of the copy): `KILN_CPU_SUITE_THREADS`, else one per core.
fn threads() -> usize {
    std::env::var("KILN_CPU_SUITE_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Deterministic data in `[lo, lo + span)`, in steps of `span / 1000`.
fn data(n: usize, seed: u32, lo: f32, span: f32) -> Vec<f32> {
    (0..n as u32)
        .map(|i| lo + ((i.wrapping_mul(2654435761) ^ seed) % 1000) as f32 * (span / 1000.0))
        .collect()
}

fn keys(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32).map(|i| i.wrapping_mul(2654435761) ^ seed.wrapping_mul(0x9e3779b9)).collect()
}

fn round_up(n: usize, to: usize) -> u32 {
    n.div_ceil(to) as u32 * to as u32
}

/// A kernel built for both devices (one thread, all threads).
struct Built {
    one: (CpuDevice, Handle),
    all: (CpuDevice, Handle),
}

fn build(m: &Module, name: &str) -> Built {
    let k = m.kernel(name).unwrap_or_else(|| panic!("kernel `{name}`")).clone();
    let verified = Verified::kernel(k).expect("kernel verifies");
    let open = |threads| {
        let dev = CpuDevice::open(&OpenOptions { threads, ..OpenOptions::default() })
            .expect("the cpu device opens");
        let bin = dev.build(&verified, &Default::default()).expect("kernel builds");
        let program = dev.load(&bin).expect("program loads");
        let h = dev.kernel(&program, name).expect("kernel found");
        (dev, h)
    };
    Built { one: open(Some(1)), all: open(Some(threads())) }
}

/// One kernel of the suite: its launch and its plain-loop reference.
struct Case {
    name: &'static str,
    built: Built,
    range: NdRange,
    args: Vec<Arg>,
    bufs: Vec<Buffer>,
    /// The reference, into its own output (allocated once, as the kernel's buffers are);
    /// with `true`, a copy of that output.
    rust: Box<dyn FnMut(bool) -> Option<Out>>,
    /// The buffer holding the result.
    result: usize,
    /// Relative tolerance of the check, for f32 and f64 results (0: bit for bit).
    tolerance: f32,
    /// Bytes a launch reads and writes, for memory-bound kernels.
    bytes: Option<usize>,
    /// Whether the result buffer must be reset before each launch (accumulating kernels).
    reset: Option<Buffer>,
}

/// A case of the kernel `name` in the set written in `src` (a held-out set), with the fields
/// the sets share filled in.
#[allow(clippy::too_many_arguments)]
fn set_case(
    src: &str,
    name: &'static str,
    range: NdRange,
    args: Vec<Arg>,
    bufs: Vec<Buffer>,
    result: usize,
    tolerance: f32,
    bytes: Option<usize>,
    rust: Box<dyn FnMut(bool) -> Option<Out>>,
) -> Case {
    let m = parse_module(src).expect("the set's kernels parse");
    Case {
        name,
        built: build(&m, name),
        range,
        args,
        bufs,
        rust,
        result,
        tolerance,
        bytes,
        reset: None,
    }
}

/// One launch of the case's kernel, on all threads or on one.
fn run(c: &mut Case, all: bool) {
    if let Some(z) = &c.reset {
        c.bufs[c.result] = z.clone();
    }
    let (dev, k) = if all { &c.built.all } else { &c.built.one };
    dev.run(k, &c.range, &c.args, &mut c.bufs).expect("runs");
}

/// A result: the kernel's output buffer, or the reference's values.
#[derive(PartialEq)]
enum Out {
    F32(Vec<f32>),
    U32(Vec<u32>),
    F64(Vec<f64>),
    U8(Vec<u8>),
    I8(Vec<i8>),
    U64(Vec<u64>),
    I16(Vec<i16>),
    U16(Vec<u16>),
    I64(Vec<i64>),
    I32(Vec<i32>),
    /// f16 results, as their bits.
    F16(Vec<u16>),
}

/// Checks the kernel's result (after one launch on `dev`) against the reference.
fn check(c: &mut Case, want: &Out, all: bool) {
    let fresh = c.bufs.clone();
    run(c, all);
    let got = match want {
        Out::F32(_) => Out::F32(c.bufs[c.result].to_vec::<f32>().expect("f32 result")),
        Out::U32(_) => Out::U32(c.bufs[c.result].to_vec::<u32>().expect("u32 result")),
        Out::F64(_) => Out::F64(c.bufs[c.result].to_vec::<f64>().expect("f64 result")),
        Out::U8(_) => Out::U8(c.bufs[c.result].to_vec::<u8>().expect("u8 result")),
        Out::I8(_) => Out::I8(c.bufs[c.result].to_vec::<i8>().expect("i8 result")),
        Out::U64(_) => Out::U64(c.bufs[c.result].to_vec::<u64>().expect("u64 result")),
        Out::I16(_) => Out::I16(c.bufs[c.result].to_vec::<i16>().expect("i16 result")),
        Out::U16(_) => Out::U16(c.bufs[c.result].to_vec::<u16>().expect("u16 result")),
        Out::I64(_) => Out::I64(c.bufs[c.result].to_vec::<i64>().expect("i64 result")),
        Out::I32(_) => Out::I32(c.bufs[c.result].to_vec::<i32>().expect("i32 result")),
        Out::F16(_) => Out::F16(
            c.bufs[c.result]
                .to_vec::<half::f16>()
                .expect("f16 result")
                .iter()
                .map(|h| h.to_bits())
                .collect(),
        ),
    };
    c.bufs = fresh;
    let who = if all { "all threads" } else { "1 thread" };
    if c.tolerance == 0.0 {
        assert!(got == *want, "{} ({who}): not bit for bit the Rust loop's result", c.name);
        return;
    }
    // Float results, compared in f64 (which holds every f32 exactly).
    let widen = |o: &Out| match o {
        Out::F32(v) => Some(v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>()),
        Out::F64(v) => Some(v.clone()),
        _ => None,
    };
    let (Some(got), Some(want)) = (widen(&got), widen(want)) else {
        panic!("{}: a tolerance needs f32 or f64 results", c.name)
    };
    assert_eq!(got.len(), want.len(), "{}: result size", c.name);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let err = (g - w).abs() / w.abs().max(1e-6);
        assert!(
            err <= f64::from(c.tolerance),
            "{} ({who}): element {i} is {g}, the Rust loop's {w}",
            c.name
        );
    }
}

fn f32_buf(v: &[f32]) -> Buffer {
    Buffer::from_slice(v)
}

fn u32_buf(v: &[u32]) -> Buffer {
    Buffer::from_slice(v)
}

#[inline(never)]
fn mandel(cx: f32, cy: f32, max_iter: u32) -> u32 {
    let (mut x, mut y, mut it) = (0f32, 0f32, 0u32);
    while it < max_iter && x * x + y * y <= 4.0 {
        let xt = x * x - y * y + cx;
        y = 2.0 * x * y + cy;
        x = xt;
        it += 1;
    }
    it
}

fn cnd(d: f32) -> f32 {
    let l = d.abs();
    let k = 1.0 / (1.0 + 0.2316419 * l);
    let p =
        k * (0.31938153 + k * (-0.35656378 + k * (1.7814779 + k * (-1.821256 + k * 1.3302745))));
    let w = 1.0 - 0.3989423 * (-0.5 * l * l).exp() * p;
    if d < 0.0 {
        1.0 - w
    } else {
        w
    }
}

fn cases() -> Vec<Case> {
    let suite = parse_module(SUITE).expect("the suite parses");
    let reduce = parse_module(REDUCE).expect("reduce.kir parses");
    let stencil = parse_module(STENCIL).expect("stencil2d.kir parses");
    let big = 1usize << log2n();
    // Not a multiple of the work-group size: the guards and the rounded-up ranges matter.
    let n = big - 37;
    let range1 = |n: usize| NdRange::new(&[round_up(n, 256)]).with_local(&[256]);
    let mut v = Vec::new();

    // saxpy: y = a * x + y, in place (y's checked value is after one launch).
    let (x, y) = (data(n, 1, -5.0, 10.0), data(n, 2, -5.0, 10.0));
    let a = 1.5f32;
    let (xr, yr) = (x.clone(), y.clone());
    v.push(Case {
        name: "saxpy",
        built: build(&suite, "saxpy"),
        range: range1(n),
        args: vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(a), Arg::scalar(n as u32)],
        bufs: vec![f32_buf(&x), f32_buf(&y)],
        rust: {
            let mut y = yr.clone();
            Box::new(move |keep| {
                for i in 0..y.len() {
                    y[i] += a * xr[i];
                }
                keep.then(|| Out::F32(y.clone()))
            })
        },
        result: 1,
        tolerance: 0.0,
        bytes: Some(3 * 4 * n),
        reset: None,
    });

    // The two elementwise chains.
    let (ca, cb, cc) = (data(n, 3, -5.0, 10.0), data(n, 4, -5.0, 10.0), data(n, 5, -5.0, 10.0));
    for (name, with_max) in [("chain_max", true), ("chain_if", false)] {
        let (a, b, c) = (ca.clone(), cb.clone(), cc.clone());
        let s = 0.75f32;
        v.push(Case {
            name,
            built: build(&suite, name),
            range: range1(n),
            args: vec![
                Arg::Buffer(0),
                Arg::Buffer(1),
                Arg::Buffer(2),
                Arg::Buffer(3),
                Arg::scalar(s),
                Arg::scalar(n as u32),
            ],
            bufs: vec![f32_buf(&a), f32_buf(&b), f32_buf(&c), Buffer::zeroed(Scalar::F32, n)],
            rust: {
                let mut o = vec![0f32; a.len()];
                Box::new(move |keep| {
                    for i in 0..o.len() {
                        let mut t = a[i] * b[i] + c[i];
                        if with_max {
                            t = t.max(0.0);
                        } else if t < 0.0 {
                            t = 0.0;
                        }
                        o[i] = t * s - b[i];
                    }
                    keep.then(|| Out::F32(o.clone()))
                })
            },
            result: 3,
            tolerance: 0.0,
            bytes: Some(4 * 4 * n),
            reset: None,
        });
    }

    // The 2-D 5-point stencil (examples/stencil2d.kir) over a w x h grid.
    let w = 1usize << log2n().div_ceil(2);
    let h = big / w;
    let src = data(w * h, 6, -5.0, 10.0);
    let s2 = src.clone();
    v.push(Case {
        name: "stencil2d",
        built: build(&stencil, "stencil2d"),
        range: NdRange::new(&[w as u32, h as u32]).with_local(&[64, 1]),
        args: vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(w as u32), Arg::scalar(h as u32)],
        bufs: vec![f32_buf(&src), Buffer::zeroed(Scalar::F32, w * h)],
        rust: {
            let mut dst = vec![0f32; w * h];
            Box::new(move |keep| {
                for yy in 0..h {
                    for xx in 0..w {
                        let c = yy * w + xx;
                        dst[c] = if xx > 0 && xx < w - 1 && yy > 0 && yy < h - 1 {
                            0.5 * s2[c] + 0.125 * (s2[c - 1] + s2[c + 1] + s2[c - w] + s2[c + w])
                        } else {
                            s2[c]
                        };
                    }
                }
                keep.then(|| Out::F32(dst.clone()))
            })
        },
        result: 1,
        tolerance: 0.0,
        bytes: Some(2 * 4 * w * h),
        reset: None,
    });

    // Work-group tree reduction in local memory (examples/reduce.kir), groups of 64.
    let xs = data(n, 7, -5.0, 10.0);
    let groups = (n as u32).div_ceil(64) as usize;
    let xr = xs.clone();
    v.push(Case {
        name: "reduce",
        built: build(&reduce, "reduce"),
        range: NdRange::new(&[round_up(n, 64)]).with_local(&[64]),
        args: vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n as u32)],
        bufs: vec![f32_buf(&xs), Buffer::zeroed(Scalar::F32, groups)],
        rust: {
            let mut partial = vec![0f32; groups];
            Box::new(move |keep| {
                for (g, p) in partial.iter_mut().enumerate() {
                    let mut tile = [0f32; 64];
                    for (l, t) in tile.iter_mut().enumerate() {
                        *t = xr.get(g * 64 + l).copied().unwrap_or(0.0);
                    }
                    let mut stride = 32;
                    while stride > 0 {
                        for i in 0..stride {
                            tile[i] += tile[i + stride];
                        }
                        stride /= 2;
                    }
                    *p = tile[0];
                }
                keep.then(|| Out::F32(partial.clone()))
            })
        },
        result: 1,
        tolerance: 0.0,
        bytes: Some(4 * n),
        reset: None,
    });

    // Option pricing.
    let (price, strike) = (data(n, 8, 10.0, 90.0), data(n, 9, 10.0, 90.0));
    let years = data(n, 10, 0.25, 4.75);
    let (r, vol) = (0.02f32, 0.3f32);
    let (p, k, t) = (price.clone(), strike.clone(), years.clone());
    v.push(Case {
        name: "options",
        built: build(&suite, "options"),
        range: range1(n),
        args: vec![
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::Buffer(2),
            Arg::Buffer(3),
            Arg::scalar(r),
            Arg::scalar(vol),
            Arg::scalar(n as u32),
        ],
        bufs: vec![
            f32_buf(&price),
            f32_buf(&strike),
            f32_buf(&years),
            Buffer::zeroed(Scalar::F32, n),
        ],
        rust: {
            let mut call = vec![0f32; p.len()];
            Box::new(move |keep| {
                for i in 0..call.len() {
                    let (s, k, t) = (p[i], k[i], t[i]);
                    let sq = t.sqrt();
                    let d1 = ((s / k).ln() + (r + 0.5 * vol * vol) * t) / (vol * sq);
                    let d2 = d1 - vol * sq;
                    call[i] = s * cnd(d1) - k * (-r * t).exp() * cnd(d2);
                }
                keep.then(|| Out::F32(call.clone()))
            })
        },
        result: 3,
        tolerance: 1e-4,
        bytes: None,
        reset: None,
    });

    // Mandelbrot, both ways, on a w x h image (a quarter of the points: it is compute-bound).
    let (mw, mh) = (w / 2, h / 2);
    let max_iter = 64u32;
    let (x0, y0, dx, dy) = (-2.0f32, -1.25f32, 2.5 / mw as f32, 2.5 / mh as f32);
    let mrange = NdRange::new(&[mw as u32, mh as u32]).with_local(&[64, 1]);
    v.push(Case {
        name: "mandel_cast",
        built: build(&suite, "mandel_cast"),
        range: mrange,
        args: vec![
            Arg::Buffer(0),
            Arg::scalar(mw as u32),
            Arg::scalar(mh as u32),
            Arg::scalar(x0),
            Arg::scalar(y0),
            Arg::scalar(dx),
            Arg::scalar(dy),
            Arg::scalar(max_iter),
        ],
        bufs: vec![Buffer::zeroed(Scalar::U32, mw * mh)],
        rust: {
            let mut o = vec![0u32; mw * mh];
            Box::new(move |keep| {
                for py in 0..mh {
                    for px in 0..mw {
                        let cx = x0 + px as f32 * dx;
                        let cy = y0 + py as f32 * dy;
                        o[py * mw + px] = mandel(cx, cy, max_iter);
                    }
                }
                keep.then(|| Out::U32(o.clone()))
            })
        },
        result: 0,
        tolerance: 0.0,
        bytes: None,
        reset: None,
    });
    let tx: Vec<f32> = (0..mw).map(|i| x0 + i as f32 * dx).collect();
    let ty: Vec<f32> = (0..mh).map(|i| y0 + i as f32 * dy).collect();
    let (txr, tyr) = (tx.clone(), ty.clone());
    v.push(Case {
        name: "mandel_table",
        built: build(&suite, "mandel_table"),
        range: mrange,
        args: vec![
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::Buffer(2),
            Arg::scalar(mw as u32),
            Arg::scalar(mh as u32),
            Arg::scalar(max_iter),
        ],
        bufs: vec![Buffer::zeroed(Scalar::U32, mw * mh), f32_buf(&tx), f32_buf(&ty)],
        rust: {
            let mut o = vec![0u32; mw * mh];
            Box::new(move |keep| {
                for py in 0..mh {
                    for px in 0..mw {
                        o[py * mw + px] = mandel(txr[px], tyr[py], max_iter);
                    }
                }
                keep.then(|| Out::U32(o.clone()))
            })
        },
        result: 0,
        tolerance: 0.0,
        bytes: None,
        reset: None,
    });

    // Histogram with local and global atomics.
    let hd = keys(n, 11);
    let hr = hd.clone();
    v.push(Case {
        name: "histogram",
        built: build(&suite, "histogram"),
        range: range1(n),
        args: vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n as u32)],
        bufs: vec![u32_buf(&hd), Buffer::zeroed(Scalar::U32, 256)],
        rust: {
            let mut bins = vec![0u32; 256];
            Box::new(move |keep| {
                bins.fill(0);
                for &d in &hr {
                    bins[(d & 255) as usize] += 1;
                }
                keep.then(|| Out::U32(bins.clone()))
            })
        },
        result: 1,
        tolerance: 0.0,
        bytes: None,
        reset: Some(Buffer::zeroed(Scalar::U32, 256)),
    });

    // Naive GEMM, one work-item per element of C (n^3 = 2^(3/8 log2n) multiply-adds).
    let gn = 1usize << (3 * log2n() / 8);
    let (ga, gb) = (data(gn * gn, 12, -1.0, 2.0), data(gn * gn, 13, -1.0, 2.0));
    let (gar, gbr) = (ga.clone(), gb.clone());
    v.push(Case {
        name: "gemm_naive",
        built: build(&suite, "gemm_naive"),
        range: NdRange::new(&[gn as u32, gn as u32]).with_local(&[16, 16]),
        args: vec![Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(gn as u32)],
        bufs: vec![f32_buf(&ga), f32_buf(&gb), Buffer::zeroed(Scalar::F32, gn * gn)],
        rust: {
            let mut c = vec![0f32; gn * gn];
            Box::new(move |keep| {
                for row in 0..gn {
                    for col in 0..gn {
                        let mut acc = 0f32;
                        for k in 0..gn {
                            acc += gar[row * gn + k] * gbr[k * gn + col];
                        }
                        c[row * gn + col] = acc;
                    }
                }
                keep.then(|| Out::F32(c.clone()))
            })
        },
        result: 2,
        tolerance: 0.0,
        bytes: None,
        reset: None,
    });

    // Row softmax over rows x 256.
    let cols = 256usize;
    let rows = big / cols / 4 - 3;
    let sx = data(rows * cols, 14, -4.0, 8.0);
    let sxr = sx.clone();
    v.push(Case {
        name: "softmax",
        built: build(&suite, "softmax"),
        range: NdRange::new(&[round_up(rows, 64)]).with_local(&[64]),
        args: vec![
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::scalar(rows as u32),
            Arg::scalar(cols as u32),
        ],
        bufs: vec![f32_buf(&sx), Buffer::zeroed(Scalar::F32, rows * cols)],
        rust: {
            let mut y = vec![0f32; rows * cols];
            Box::new(move |keep| {
                for r in 0..rows {
                    let row = &sxr[r * cols..(r + 1) * cols];
                    let mut m = row[0];
                    for &x in &row[1..] {
                        m = m.max(x);
                    }
                    let mut s = 0f32;
                    for &x in row {
                        s += (x - m).exp();
                    }
                    for (j, &x) in row.iter().enumerate() {
                        y[r * cols + j] = (x - m).exp() / s;
                    }
                }
                keep.then(|| Out::F32(y.clone()))
            })
        },
        result: 1,
        tolerance: 1e-4,
        bytes: Some(2 * 4 * rows * cols),
        reset: None,
    });

    // Integer hashing.
    let hk = keys(n, 15);
    let hkr = hk.clone();
    v.push(Case {
        name: "hash",
        built: build(&suite, "hash"),
        range: range1(n),
        args: vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n as u32)],
        bufs: vec![u32_buf(&hk), Buffer::zeroed(Scalar::U32, n)],
        rust: {
            let mut o = vec![0u32; hkr.len()];
            Box::new(move |keep| {
                for (o, &k) in o.iter_mut().zip(&hkr) {
                    let mut h = k;
                    h ^= h >> 16;
                    h = h.wrapping_mul(2246822507);
                    h ^= h >> 13;
                    h = h.wrapping_mul(3266489909);
                    h ^= h >> 16;
                    *o = h;
                }
                keep.then(|| Out::U32(o.clone()))
            })
        },
        result: 1,
        tolerance: 0.0,
        bytes: Some(2 * 4 * n),
        reset: None,
    });
    v
}

/// How long copying `src` into `dst` takes on `t` threads that stay parked between copies (as
/// the cpu device's workers do, so that no copy pays for starting threads), each copying its
/// share: the median of 7 copies (after one untimed) by `memcpy` (`copy_from_slice`, which
/// uses non-temporal stores at these sizes), and by an element loop the compiler vectorizes
/// with ordinary stores (`x + 0.0` keeps it from becoming `memcpy`).
fn copy_times(src: &[f32], dst: &mut [f32], t: usize) -> [Duration; 2] {
    const ROUNDS: usize = 8;
    let per = dst.len().div_ceil(t);
    let parts = dst.len().div_ceil(per);
    let barrier = std::sync::Barrier::new(parts + 1);
    let mut times = [Vec::new(), Vec::new()];
    std::thread::scope(|sc| {
        for (k, d) in dst.chunks_mut(per).enumerate() {
            let s = &src[k * per..k * per + d.len()];
            let barrier = &barrier;
            sc.spawn(move || {
                for way in 0..2 {
                    for _ in 0..ROUNDS {
                        barrier.wait();
                        if way == 0 {
                            d.copy_from_slice(s);
                        } else {
                            for (x, y) in d.iter_mut().zip(s) {
                                *x = *y + 0.0;
                            }
                        }
                        barrier.wait();
                    }
                }
            });
        }
        for way in &mut times {
            for round in 0..ROUNDS {
                barrier.wait();
                let start = Instant::now();
                barrier.wait();
                if round > 0 {
                    way.push(start.elapsed());
                }
            }
        }
    });
    times.map(|mut v| {
        v.sort();
        v[v.len() / 2]
    })
}

/// The median of 7 timings of `f`.
fn median7(mut f: impl FnMut()) -> Duration {
    let mut t: Vec<Duration> = (0..7)
        .map(|_| {
            let s = Instant::now();
            f();
            s.elapsed()
        })
        .collect();
    t.sort();
    t[3]
}

/// One row of a closing table: kernel, bytes, and the medians of rust, kiln 1t and kiln all.
type Row = (&'static str, Option<usize>, Duration, Duration, Duration);

/// Checks and times the cases of one set, returning their table rows.
fn measure(c: &mut Criterion, cases: &mut [Case]) -> Vec<Row> {
    for case in cases.iter_mut() {
        let want = (case.rust)(true).expect("the reference's result");
        check(case, &want, false);
        check(case, &want, true);
    }
    let mut summary = Vec::new();
    for case in cases.iter_mut() {
        let mut g = c.benchmark_group(format!("cpu_suite/{}", case.name));
        g.sample_size(10);
        g.bench_function("rust_1t", |b| b.iter(|| black_box((case.rust)(false))));
        g.bench_function("kiln_1t", |b| b.iter(|| run(case, false)));
        g.bench_function("kiln_all", |b| b.iter(|| run(case, true)));
        g.finish();
        let rust = median7(|| {
            black_box((case.rust)(false));
        });
        let one = median7(|| run(case, false));
        let all = median7(|| run(case, true));
        summary.push((case.name, case.bytes, rust, one, all));
    }
    summary
}

/// Prints one set's table; bandwidths are fractions of `copy_bw` (bytes per second).
fn table(title: &str, summary: &[Row], copy_bw: f64, t: usize) {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("\n{title}, 2^{} elements, medians of 7 ({t} threads for `all`):", log2n());
    println!(
        "{:<14} {:>10} {:>10} {:>10} {:>14} {:>16}",
        "kernel", "rust ms", "kiln 1t ms", "kiln all", "kiln 1t : rust", "all : copy bw"
    );
    let mut log_sum = 0.0;
    for (name, bytes, rust, one, all) in summary {
        let ratio = rust.as_secs_f64() / one.as_secs_f64();
        log_sum += ratio.ln();
        let bw = bytes.map_or(String::from("-"), |b| {
            format!("{:.2}", b as f64 / all.as_secs_f64() / copy_bw)
        });
        println!(
            "{name:<14} {:>10.3} {:>10.3} {:>10.3} {ratio:>13.3}x {bw:>16}",
            ms(*rust),
            ms(*one),
            ms(*all)
        );
    }
    println!(
        "geometric mean of kiln 1 thread : rust: {:.3}x",
        (log_sum / summary.len() as f64).exp()
    );
}

fn suite(c: &mut Criterion) {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    let t = threads();
    let mut sets = Vec::new();
    if set_wanted("first") {
        sets.push(("cpu suite", cases()));
    }
    if set_wanted("more") {
        sets.push(("cpu suite, held-out kernels", more::cases()));
    }
    if set_wanted("third") {
        sets.push(("cpu suite, third set", third::cases()));
    }
    if set_wanted("fourth") {
        sets.push(("cpu suite, fourth set", fourth::cases()));
    }
    if set_wanted("rows64") {
        sets.push(("cpu suite, row reductions in 64 bits", rows64::cases()));
    }
    if set_wanted("fifth") {
        sets.push(("cpu suite, fifth set", fifth::cases()));
    }
    if set_wanted("sixth") {
        sets.push(("cpu suite, sixth set", sixth::cases()));
    }
    if set_wanted("seventh") {
        sets.push(("cpu suite, seventh set", seventh::cases()));
    }
    if set_wanted("eighth") {
        sets.push(("cpu suite, eighth set", eighth::cases()));
    }
    for (_, cases) in &mut sets {
        cases.retain(|c| wanted(c.name));
    }
    sets.retain(|(_, cases)| !cases.is_empty());
    assert!(!sets.is_empty(), "KILN_CPU_SUITE_ONLY/SET name no kernel of the suite");
    let summaries: Vec<_> =
        sets.iter_mut().map(|(title, cases)| (*title, measure(c, cases))).collect();
    let copy_len = (1usize << log2n()) * 2;
    let src = data(copy_len, 16, 0.0, 1.0);
    let mut dst = vec![0f32; copy_len];
    // The machine's copy bandwidth: the faster of the two ways.
    let [memcpy, by_loop] = copy_times(&src, &mut dst, t);
    let bw = |d: Duration| (2 * 4 * copy_len) as f64 / d.as_secs_f64();
    let copy_bw = bw(memcpy).max(bw(by_loop));
    for (title, summary) in &summaries {
        table(title, summary, copy_bw, t);
    }
    println!(
        "copy bandwidth {:.1} GB/s on {t} threads (memcpy {:.1}, loop {:.1})",
        copy_bw / 1e9,
        bw(memcpy) / 1e9,
        bw(by_loop) / 1e9
    );
    // Halide's pipelines are the first set's kernels.
    if let Some((_, first)) = summaries.iter().find(|(title, _)| *title == "cpu suite") {
        let kiln: Vec<_> =
            first.iter().map(|&(name, _, _, one, all)| halide::Kiln { name, one, all }).collect();
        halide::compare(&kiln, log2n(), t);
    }
}

criterion_group!(benches, suite);
criterion_main!(benches);
