//! The x86-64 JIT against the interpreter: the examples, hand cases for every operator, cast
//! and intrinsic at its edge values, barriers, local memory and atomics, bad inputs (out of
//! bounds, division by zero, wild indices, runaway loops), and random kernels from the shared
//! generator. Buffers must match bit-exactly (NaN payloads aside) and errors exactly.
//!
//! `X86_CASES=N` and `X86_BIG_CASES=N` raise the number of random kernels (default 256 small
//! and 32 bigger ones) for soak runs.
#![cfg(target_arch = "x86_64")]

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::interp::run;
use kiln_ir::launch::LaunchError;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::{arb_kernel_with, results_match, GenConfig};
use kiln_ir::{Imm, Kernel, Scalar};
use kiln_runtime::device::cpu::{CpuRun, CpuRunOptions};
use proptest::prelude::*;

fn kernel(src: &str) -> Kernel {
    let m = kiln_ir::parse_module(src).unwrap_or_else(|e| panic!("{e:?}\n{src}"));
    m.kernels[0].clone()
}

/// Runs `k` on the interpreter and on x86 (unoptimized, and optimized when `opt`), asserting
/// the same outcome; returns the interpreter's.
fn diff_opts(
    k: &Kernel,
    range: &NdRange,
    args: &[Arg],
    bufs: &[Buffer],
    opt: bool,
) -> (Result<(), LaunchError>, Vec<Buffer>) {
    let mut want = bufs.to_vec();
    let want_r = run(k, range, args, &mut want);
    let mut variants = vec![X86Options::default()];
    if opt {
        variants.push(X86Options { optimize: true, ..X86Options::default() });
    }
    for o in variants {
        let p = compile(k, &o).unwrap_or_else(|e| panic!("{e}\n{k}"));
        let mut got = bufs.to_vec();
        let got_r = p.run(range, args, &mut got);
        match (&want_r, &got_r) {
            (Ok(()), Ok(())) => {
                if let Err(m) = results_match(&want, &got) {
                    panic!("{m}\n{k}\n{}", p.disassemble());
                }
            }
            (Err(w), Err(g)) => {
                assert_eq!(w, g, "\n{k}");
                if let Err(m) = results_match(&want, &got) {
                    panic!("after the error: {m}\n{k}");
                }
            }
            _ => panic!("interpreter: {want_r:?}, x86: {got_r:?}\n{k}\n{}", p.disassemble()),
        }
    }
    (want_r, want)
}

fn diff(k: &Kernel, range: &NdRange, args: &[Arg], bufs: &[Buffer]) -> Result<(), LaunchError> {
    diff_opts(k, range, args, bufs, true).0
}

fn f32s(n: usize, seed: u32) -> Buffer {
    Buffer::from_slice(
        &(0..n).map(|i| ((i as u32 * 7 + seed) % 23) as f32 * 0.37 - 3.0).collect::<Vec<_>>(),
    )
}

#[test]
fn examples_match() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");
    let src = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).unwrap();
    // saxpy: n below the global size exercises the guard.
    let k = kernel(&src("saxpy.kir"));
    let bufs = [f32s(100, 1), f32s(100, 2)];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(1.5f32), Arg::scalar(97u32)];
    assert!(diff(&k, &NdRange::new(&[100]), &args, &bufs).is_ok());
    // reduce: barriers in a loop, local memory.
    let k = kernel(&src("reduce.kir"));
    let bufs = [f32s(256, 3), Buffer::zeroed(Scalar::F32, 4)];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(250u32)];
    let (r, out) = diff_opts(&k, &NdRange::new(&[256]), &args, &bufs, true);
    assert!(r.is_ok());
    assert!(out[1].to_vec::<f32>().unwrap().iter().any(|&v| v != 0.0));
    // stencil2d: two dimensions.
    let k = kernel(&src("stencil2d.kir"));
    let bufs = [f32s(12 * 9, 4), Buffer::zeroed(Scalar::F32, 12 * 9)];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(12u32), Arg::scalar(9u32)];
    let r = NdRange::new(&[12, 9]).with_local(&[4, 3]);
    assert!(diff(&k, &r, &args, &bufs).is_ok());
    // divergent: data-dependent while loops, id-dependent for loops.
    let k = kernel(&src("divergent.kir"));
    let data: Vec<u32> = (0..64).map(|i| i * 37 % 101 + 1).collect();
    let bufs = [
        Buffer::from_slice(&data),
        Buffer::zeroed(Scalar::U32, 64),
        Buffer::zeroed(Scalar::I32, 64),
    ];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(60u32)];
    assert!(diff(&k, &NdRange::new(&[64]), &args, &bufs).is_ok());
    // fusion/chain: three kernels, each on its own.
    let m = kiln_ir::parse_module(&src("fusion/chain.kir")).unwrap();
    for k in &m.kernels {
        let bufs = [f32s(64, 5), f32s(64, 6), Buffer::zeroed(Scalar::F32, 64)];
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
        assert!(diff(k, &NdRange::new(&[64]), &args, &bufs).is_ok());
    }
}

/// Edge values of a type, as immediates.
fn edges(t: Scalar) -> Vec<Imm> {
    if t.is_int() {
        let (lo, hi) = (t.int_min().unwrap(), t.int_max().unwrap());
        let mut v = vec![0, 1, 2, 3, 7, hi, hi - 1, lo, lo + 1, 100, 31, 32, 63, 64];
        if t.is_signed() {
            v.extend([-1, -2, -7, -100, -31, -64]);
        }
        v.into_iter().map(|x| Imm::int(t, x)).collect()
    } else {
        let v = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            1.5,
            2.5,
            -2.5,
            1e10,
            -1e10,
            3e38,
            1e-40,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            65504.0,
            65520.0,
            4294967295.5,
            9.3e18,
            -9.3e18,
            1.8e19,
            2147483647.9,
            -2147483648.7,
            255.9,
            -128.5,
        ];
        v.into_iter().map(|x| Imm::float(t, x)).collect()
    }
}

const ARITH_OPS: [&str; 18] = [
    "+", "-", "*", "/", "%", "&", "|", "^", "<<", ">>", "==", "!=", "<", "<=", ">", ">=", "min",
    "max",
];

#[test]
fn every_operator_at_edge_values() {
    for t in Scalar::ARITH {
        let e = edges(t);
        let (xs, ys): (Vec<Imm>, Vec<Imm>) =
            e.iter().flat_map(|&x| e.iter().map(move |&y| (x, y))).unzip();
        let n = xs.len() as u32;
        for op in ARITH_OPS {
            let int_only = matches!(op, "%" | "&" | "|" | "^" | "<<" | ">>");
            if t.is_float() && int_only {
                continue;
            }
            let cmp = matches!(op, "==" | "!=" | "<" | "<=" | ">" | ">=");
            let (out_t, value) = match op {
                "min" | "max" => (t.name(), format!("{op}(a[i], b[i])")),
                _ if cmp => ("u8", format!("(a[i] {op} b[i]) as u8")),
                _ => (t.name(), format!("a[i] {op} b[i]")),
            };
            let src = format!(
                "kernel k(a: ptr<global, {t}>, b: ptr<global, {t}>, o: ptr<global, {out_t}>) {{
                   let i: u32 = global_id(0); o[i] = {value}; }}"
            );
            let k = kernel(&src);
            let out = Scalar::from_name(out_t).unwrap();
            // Division by zero stops at the first zero divisor: also run without them.
            let mut cases = vec![(xs.clone(), ys.clone())];
            if matches!(op, "/" | "%") && t.is_int() {
                let keep: Vec<usize> = (0..ys.len()).filter(|&i| !ys[i].is_zero()).collect();
                cases.push((
                    keep.iter().map(|&i| xs[i]).collect(),
                    keep.iter().map(|&i| ys[i]).collect(),
                ));
            }
            for (xs, ys) in cases {
                let m = xs.len() as u32;
                let bufs = [
                    Buffer::from_imms(t, &xs).unwrap(),
                    Buffer::from_imms(t, &ys).unwrap(),
                    Buffer::zeroed(out, m as usize),
                ];
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
                let _ = diff_opts(&k, &NdRange::new(&[m]).with_local(&[1]), &args, &bufs, false);
            }
            let _ = n;
        }
        // Unary operators and intrinsics.
        let mut unary = vec!["-a[i]", "abs(a[i])", "select(a[i] > b[i], a[i], b[i])"];
        if t.is_int() {
            unary.extend(["~a[i]", "mad(a[i], b[i], a[i])", "add3(a[i], b[i], b[i])"]);
        } else {
            unary.extend([
                "sqrt(a[i])",
                "floor(a[i])",
                "ceil(a[i])",
                "trunc(a[i])",
                "fma(a[i], b[i], a[i])",
                "exp(a[i])",
                "log(a[i])",
                "sin(a[i])",
                "cos(a[i])",
            ]);
        }
        for value in unary {
            let src = format!(
                "kernel k(a: ptr<global, {t}>, b: ptr<global, {t}>, o: ptr<global, {t}>) {{
                   let i: u32 = global_id(0); o[i] = {value}; }}"
            );
            let k = kernel(&src);
            let bufs = [
                Buffer::from_imms(t, &xs).unwrap(),
                Buffer::from_imms(t, &ys).unwrap(),
                Buffer::zeroed(t, xs.len()),
            ];
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
            assert!(diff(&k, &NdRange::new(&[n]).with_local(&[1]), &args, &bufs).is_ok());
        }
    }
}

#[test]
fn every_cast_at_edge_values() {
    // bf16 is refused by name by the x86 backend (backends/tests/matrix_refusals.rs).
    let all: Vec<Scalar> =
        Scalar::ALL.into_iter().filter(|&s| s != Scalar::Bool && s != Scalar::BF16).collect();
    for &from in &all {
        let mut xs = if from == Scalar::F16 {
            [0.0, -0.0, 1.0, -2.5, 65504.0, -65504.0, f64::INFINITY, f64::NAN, 6e-8, 300.0]
                .into_iter()
                .map(|v| Imm::float(from, v))
                .collect()
        } else {
            edges(from)
        };
        xs.truncate(64);
        for &to in &all {
            for value in
                ["a[i] as {to}", "((a[i] as bool) as {to})", "select(a[i] as bool, 1, 0) as {to}"]
            {
                let value = value.replace("{to}", to.name());
                let value =
                    value.replace("select(a[i] as bool, 1, 0)", "select(a[i] as bool, 1i32, 0i32)");
                let src = format!(
                    "kernel k(a: ptr<global, {from}>, o: ptr<global, {to}>) {{
                       let i: u32 = global_id(0); o[i] = {value}; }}"
                );
                let k = kernel(&src);
                let bufs = [Buffer::from_imms(from, &xs).unwrap(), Buffer::zeroed(to, xs.len())];
                let args = [Arg::Buffer(0), Arg::Buffer(1)];
                let r = NdRange::new(&[xs.len() as u32]).with_local(&[1]);
                assert!(diff_opts(&k, &r, &args, &bufs, false).0.is_ok());
            }
        }
    }
}

#[test]
fn barriers_local_memory_and_atomics() {
    // Barriers inside a for loop and a uniform if; values live across barriers; atomics on
    // global and local memory of every atomic type.
    let k = kernel(
        "kernel k(x: ptr<global, i32>, o: ptr<global, i32>, c: ptr<global, u64>, f: ptr<global, f32>, n: u32) {
           local t: i32[16];
           local cnt: u32[1];
           let l: u32 = local_id(0);
           var acc: i32 = x[global_id(0)];
           for r: u32 in 0 .. n {
             t[l] = acc;
             barrier(local);
             acc = acc + t[(l + 1) % 16] * 3 - t[(l + 15) % 16];
             barrier(local);
           }
           if n > 1 {
             let old: u32 = atomic_add(cnt, 0, 1u32);
             barrier(local);
             o[global_id(0)] = acc + (old as i32) * 0 + (cnt[0] as i32);
           }
           let p: u64 = atomic_max(c, 0, acc as u64);
           atomic_min(c, 1, acc as u64);
           atomic_xor(c, 2, l as u64);
           atomic_and(c, 3, (acc as u64) | 1u64);
           atomic_or(c, 4, l as u64);
           atomic_sub(c, 5, 3u64);
           atomic_xchg(c, 6, 9u64);
           atomic_cmpxchg(c, 7, 0u64, l as u64 + 1u64);
           atomic_add(f, 0, 0.5f32);
           atomic_max(x, 0, -5i32);
           atomic_min(x, 1, -5i32);
         }",
    );
    let x: Vec<i32> = (0..64).map(|i| i * 13 % 29 - 14).collect();
    let bufs = [
        Buffer::from_slice(&x),
        Buffer::zeroed(Scalar::I32, 64),
        Buffer::from_slice(&[0u64, u64::MAX, 0, u64::MAX, 0, 1000, 0, 0]),
        Buffer::zeroed(Scalar::F32, 1),
    ];
    for n in [0u32, 1, 3] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3), Arg::scalar(n)];
        let r = diff(&k, &NdRange::new(&[64]).with_local(&[16]), &args, &bufs);
        assert!(r.is_ok(), "{r:?}");
    }
}

#[test]
fn barrier_divergence_and_bad_steps_are_reported() {
    let k = kernel(
        "kernel k(o: ptr<global, u32>) {
           if local_id(0) < 3u32 { barrier(local); }
           o[global_id(0)] = 1u32;
         }",
    );
    let bufs = [Buffer::zeroed(Scalar::U32, 8)];
    let e = diff(&k, &NdRange::new(&[8]).with_local(&[8]), &[Arg::Buffer(0)], &bufs).unwrap_err();
    assert!(e.message.contains("barrier divergence"), "{e}");
    let k = kernel(
        "kernel k(o: ptr<global, i32>, s: i32) {
           for j: i32 in 0 .. 10 step s { o[0] = j; }
         }",
    );
    let bufs = [Buffer::zeroed(Scalar::I32, 1)];
    for s in [0, -3, 4] {
        let _ = diff(&k, &NdRange::new(&[2]), &[Arg::Buffer(0), Arg::scalar(s)], &bufs);
    }
    let e = diff(&k, &NdRange::new(&[2]), &[Arg::Buffer(0), Arg::scalar(-3)], &bufs).unwrap_err();
    assert!(e.message.contains("step -3 is not positive"), "{e}");
}

#[test]
fn wild_indices_never_touch_host_memory() {
    // Loads, stores and atomics on global, local and private memory with indices far outside,
    // negative and at the end: each is an error naming the access, and no byte outside the
    // bound buffers changes (the neighbours and a canary allocation keep their contents).
    let canary = vec![0x5au8; 1 << 16];
    let kinds = [
        "o[idx] = 1i64;",
        "o[0] = x[idx];",
        "atomic_add(o, idx, 1i64);",
        "t[idx] = 1i64;",
        "o[0] = t[idx];",
        "p[idx] = 2i64; o[1] = p[0];",
        "o[0] = p[idx];",
    ];
    let idxs = [i64::MIN, -1, 4, 5, 1 << 20, i64::MAX, 1 << 40];
    for body in kinds {
        let k = kernel(&format!(
            "kernel k(x: ptr<global, i64>, o: ptr<global, i64>, idx: i64) {{
               local t: i64[4];
               private p: i64[4];
               {body}
             }}"
        ));
        for idx in idxs {
            let bufs = [Buffer::from_slice(&[1i64, 2, 3, 4]), Buffer::from_slice(&[5i64, 6, 7, 8])];
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(idx)];
            let r = diff(&k, &NdRange::new(&[4]), &args, &bufs);
            let e = r.unwrap_err();
            assert!(e.message.contains("out of bounds"), "{e}");
            assert_eq!(e.work_item, Some([0, 0, 0]));
        }
    }
    assert!(canary.iter().all(|&b| b == 0x5a));
}

#[test]
fn uniform_loads_under_a_mask_reach_uniform_division() {
    // A load at a uniform index inside a divergent `if` whose batch has lane 0 inactive,
    // divided by a constant: the division runs once, in a general-purpose register, on one
    // lane's value. An 8-, 16- or 64-bit element was loaded into the active lanes only, and
    // the division read inactive lane 0 (0 instead of the element). Every element width.
    for t in ["i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "f16", "f32", "f64"] {
        let k = kernel(&format!(
            "kernel k(c: ptr<global, {t}>, x: ptr<global, f32>, o: ptr<global, u32>) {{
               let i: u32 = global_id(0);
               if x[i] > 0.0 {{ o[i] = (c[1] as u32) % 3u32 + (c[1] as u32) / 4u32 * 10u32; }}
             }}"
        ));
        let s = Scalar::from_name(t).unwrap();
        let c = if s.is_float() {
            [Imm::float(s, 3.0), Imm::float(s, 17.0)]
        } else {
            [Imm::int(s, 3), Imm::int(s, 17)]
        };
        let x: Vec<f32> =
            (0..16).map(|i| if i % 8 == 0 || i % 3 == 0 { -1.0 } else { 1.0 }).collect();
        let bufs = [
            Buffer::from_imms(s, &c).unwrap(),
            Buffer::from_slice(&x),
            Buffer::zeroed(Scalar::U32, 16),
        ];
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
        let (r, want) = diff_opts(&k, &NdRange::new(&[16]).with_local(&[8]), &args, &bufs, true);
        r.unwrap();
        // 17 % 3 + 17 / 4 * 10 where the lane's `x` is positive.
        let o = &want[2];
        assert_eq!(o.get(1), Some(Imm::int(Scalar::U32, 42)), "{t}");
        assert_eq!(o.get(10), Some(Imm::int(Scalar::U32, 42)), "{t}");
        assert_eq!(o.get(0), Some(Imm::int(Scalar::U32, 0)), "{t}");
    }
}

#[test]
fn division_by_zero_and_min_by_minus_one() {
    for t in ["i8", "i16", "i32", "i64", "u8", "u32", "u64"] {
        for op in ["/", "%"] {
            let k = kernel(&format!(
                "kernel k(a: ptr<global, {t}>, b: ptr<global, {t}>, o: ptr<global, {t}>) {{
                   let i: u32 = global_id(0); o[i] = a[i] {op} b[i]; }}"
            ));
            let s = Scalar::from_name(t).unwrap();
            let min = Imm::int(s, s.int_min().unwrap());
            let m1 = Imm::int(s, -1);
            let bufs = [
                Buffer::from_imms(s, &[min, min, Imm::int(s, 5)]).unwrap(),
                Buffer::from_imms(s, &[m1, Imm::int(s, 1), Imm::int(s, 0)]).unwrap(),
                Buffer::zeroed(s, 3),
            ];
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
            let e = diff(&k, &NdRange::new(&[3]).with_local(&[1]), &args, &bufs).unwrap_err();
            assert!(e.message.contains("by zero"), "{e}");
            assert_eq!(e.work_item, Some([2, 0, 0]));
        }
    }
}

#[test]
fn nan_chains_and_launch_errors() {
    let k = kernel(
        "kernel k(a: ptr<global, f32>, o: ptr<global, f32>) {
           let i: u32 = global_id(0);
           let z: f32 = a[i] - a[i];
           o[i] = sqrt(z / z * -1.0) + log(z) * max(z / z, 1.0) + (z / z) as i32 as f32;
         }",
    );
    let bufs = [
        Buffer::from_slice(&[0.0f32, f32::INFINITY, f32::NAN, -1.0]),
        Buffer::zeroed(Scalar::F32, 4),
    ];
    assert!(diff(&k, &NdRange::new(&[4]), &[Arg::Buffer(0), Arg::Buffer(1)], &bufs).is_ok());
    // Launch errors: wrong argument count and types, bad ranges.
    let args = [Arg::Buffer(0), Arg::Buffer(1)];
    let huge = [
        NdRange::new(&[5]).with_local(&[2]),
        NdRange::new(&[]),
        NdRange::new(&[0]),
        NdRange::new(&[u32::MAX]).with_offset(&[2]),
        NdRange::new(&[4, 1, 1, 1]),
        NdRange::new(&[4]).with_local(&[0]),
    ];
    for r in huge {
        assert!(diff(&k, &r, &args, &bufs).is_err());
    }
    assert!(diff(&k, &NdRange::new(&[4]), &[Arg::Buffer(0)], &bufs).is_err());
    assert!(diff(&k, &NdRange::new(&[4]), &[Arg::Buffer(0), Arg::Buffer(7)], &bufs).is_err());
    assert!(diff(&k, &NdRange::new(&[4]), &[Arg::Buffer(0), Arg::scalar(1u32)], &bufs).is_err());
}

#[test]
fn oversized_arrays_and_deep_nesting_are_refused() {
    // 2^28 f64 per work-item: more than the 1 GiB launch limit, refused before running.
    let k = kernel(
        "kernel k(o: ptr<global, f64>) { private p: f64[268435456]; p[7] = 1.0; o[0] = p[7]; }",
    );
    let p = compile(&k, &X86Options::default()).unwrap();
    let mut bufs = vec![Buffer::zeroed(Scalar::F64, 1)];
    let e = p.run(&NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs).unwrap_err();
    assert!(e.message.contains("bytes"), "{e}");
    assert!(run(&k, &NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs).is_err());
    let k = kernel(
        "kernel k(o: ptr<global, f64>) { local t: f64[268435456]; t[7] = 1.0; o[0] = t[7]; }",
    );
    let p = compile(&k, &X86Options::default()).unwrap();
    let e = p.run(&NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs).unwrap_err();
    assert!(e.message.contains("bytes"), "{e}");
    // 600 nested ifs.
    use kiln_ir::{AddrSpace, Expr, Stmt, Type, Var};
    let o = Var::new("o", Type::ptr(AddrSpace::Global, Scalar::U32));
    let mut s = Stmt::store(&o, Expr::u32(0), Expr::u32(1));
    for _ in 0..600 {
        s = Stmt::if_(Expr::bool(true), s);
    }
    let k = Kernel::new("deep", vec![o], Stmt::block([s]));
    let e = compile(&k, &X86Options::default()).unwrap_err();
    assert!(e.to_string().contains("nested more than 512"), "{e}");
}

#[test]
fn runaway_kernels_are_stopped() {
    let k =
        kernel("kernel k(o: ptr<global, u32>) { var x: u32 = 0; while x < 1u32 { o[0] = x; } }");
    let p = compile(&k, &X86Options::default()).unwrap();
    let mut bufs = vec![Buffer::zeroed(Scalar::U32, 1)];
    let opts = CpuRunOptions { max_loop_iterations: Some(100_000), ..CpuRunOptions::default() };
    let e = p.run_with(&NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs, &opts).unwrap_err();
    assert!(e.message.contains("limit"), "{e}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(50);
    let opts = CpuRunOptions { deadline: Some(deadline), ..CpuRunOptions::default() };
    let e = p.run_with(&NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs, &opts).unwrap_err();
    assert!(e.message.contains("time limit"), "{e}");
    let flag = Arc::new(AtomicBool::new(false));
    let opts = CpuRunOptions { cancel: Some(flag.clone()), ..CpuRunOptions::default() };
    let setter = {
        let flag = flag.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            flag.store(true, std::sync::atomic::Ordering::Relaxed);
        })
    };
    let e = p.run_with(&NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs, &opts).unwrap_err();
    setter.join().unwrap();
    assert_eq!(e.message, "launch cancelled");
}

#[test]
fn disassembly_names_statements() {
    let k = kernel(
        "kernel k(x: ptr<global, f32>) { let i: u32 = global_id(0); barrier(local); x[i] = x[i] * 2.0; }",
    );
    let p = compile(&k, &X86Options::default()).unwrap();
    let d = p.disassemble();
    assert!(d.contains("; let i: u32 = global_id(0);"), "{d}");
    assert!(d.contains("region 1"), "{d}");
    assert!(d.contains("mulss"), "{d}");
    // The bytes do not depend on where the code is mapped (no absolute addresses).
    let q = compile(&k, &X86Options::default()).unwrap();
    assert_eq!(p.code_bytes(), q.code_bytes());
    assert!(!d.contains(&format!("{:x}", p.code_bytes().as_ptr() as usize)));
}

#[test]
fn unchecked_builds_agree_on_correct_kernels_and_programs_are_send_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<kiln_backends::x86::X86Program>();
    let src =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/reduce.kir"))
            .unwrap();
    let k = kernel(&src);
    let bufs = vec![f32s(256, 3), Buffer::zeroed(Scalar::F32, 4)];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(256u32)];
    let mut want = bufs.clone();
    run(&k, &NdRange::new(&[256]), &args, &mut want).unwrap();
    let p = compile(&k, &X86Options { unchecked: true, optimize: true, ..X86Options::default() })
        .unwrap();
    let mut got = bufs.clone();
    p.run(&NdRange::new(&[256]), &args, &mut got).unwrap();
    results_match(&want, &got).unwrap();
    // Four threads, one group each.
    let mut par = bufs;
    p.run_parallel(&NdRange::new(&[256]), &args, &mut par, 4, &CpuRunOptions::default()).unwrap();
    results_match(&want, &par).unwrap();
}

fn gen_config() -> GenConfig {
    GenConfig { approx_intrinsics: true, ..GenConfig::default() }
}

/// Bigger kernels and launches: more work-groups with barriers, deeper expressions.
fn big_config() -> GenConfig {
    GenConfig {
        max_work_items: 256,
        max_stmts: 14,
        max_block_stmts: 4,
        max_expr_depth: 5,
        approx_intrinsics: true,
        ..GenConfig::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("X86_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(256),
        ..ProptestConfig::default()
    })]
    #[test]
    fn random_kernels_match_the_interpreter(case in arb_kernel_with(gen_config())) {
        check_case(&case)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("X86_BIG_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(32),
        ..ProptestConfig::default()
    })]
    #[test]
    fn bigger_random_kernels_match_the_interpreter(case in arb_kernel_with(big_config())) {
        check_case(&case)?;
    }
}

/// One random case on x86, unoptimized and optimized, sequential and on three threads.
fn check_case(case: &kiln_ir::testing::TestCase) -> Result<(), TestCaseError> {
    {
        let want = case.run().unwrap();
        for opts in [X86Options::default(), X86Options { optimize: true, ..X86Options::default() }]
        {
            let p = compile(&case.kernel, &opts);
            prop_assert!(p.is_ok(), "{:?}\n{}", p.err(), case.kernel);
            let p = p.unwrap();
            let mut got = case.buffers.clone();
            let r = p.run(&case.range, &case.args, &mut got);
            prop_assert!(r.is_ok(), "{:?}\n{}", r, case.kernel);
            let m = results_match(&want, &got);
            prop_assert!(m.is_ok(), "{:?}\n{}\n{}", m, case.kernel, p.disassemble());
            let mut par = case.buffers.clone();
            let r = p.run_parallel(&case.range, &case.args, &mut par, 3, &CpuRunOptions::default());
            prop_assert!(r.is_ok(), "{:?}", r);
            // Groups run concurrently: only the atomic counters' order may differ, and the
            // generator's kernels use atomics order-independently.
            let m = results_match(&want, &par);
            prop_assert!(m.is_ok(), "parallel: {:?}\n{}", m, case.kernel);
        }
    }
    Ok(())
}
