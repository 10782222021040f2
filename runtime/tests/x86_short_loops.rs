//! Short `for` loops with constant bounds unrolled in the 8-lane code
//! (backends/src/x86/spmd/short.rs), and the `var`s of barrier-free blocks of barrier kernels
//! in registers (`V::block`): the interpreter, the scalar code and the 8-lane code agree,
//! errors included (faults in a copy, a division by zero at one counter value, lanes all
//! ending mid-loop), in ordinary and region-loop code, guarded kernels at odd sizes, and the
//! loop iteration limit stops both codes where it stops the ordinary loop.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, f32s, kernel, vector_listing};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;
use kiln_runtime::device::cpu::{CpuRun, CpuRunOptions};

fn conv7() -> kiln_ir::Kernel {
    let m = kiln_ir::parse_module(include_str!("../benches/cpu_suite_more.kir")).unwrap();
    m.kernels.iter().find(|k| k.name() == "conv7").expect("conv7").clone()
}

/// The held-out suite's 7-tap convolution (local tile and taps, a barrier, then the short
/// loop in region code) at odd sizes, and with its inputs too short (faults before and
/// after the barrier).
#[test]
fn conv7_agrees() {
    let k = conv7();
    for n in [1usize, 7, 255, 256, 517, 1000] {
        let global = n.div_ceil(256) * 256;
        let r = NdRange::new(&[global as u32]).with_local(&[256]);
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n as u32)];
        for (xlen, tlen) in [(n, 7), (n.saturating_sub(2), 7), (n, 5)] {
            let bufs = [f32s(xlen, 3), f32s(tlen, 1), Buffer::zeroed(Scalar::F32, n)];
            agree(&k, &r, &args, &bufs, &format!("n {n}, x {xlen}, taps {tlen}"));
        }
    }
    if avx2() {
        // The copies: the taps at constant displacements, the sum in a register, one
        // subtraction of the budget for the seven back-edges.
        let text = compile(&k, &X86Options { optimize: true, ..X86Options::default() })
            .unwrap()
            .disassemble();
        let region = &text[text.find("; 8-lane region loops").expect("region code")..];
        assert!(region.contains("sub qword ptr [r12+0A8h],7"), "{region}");
        assert!(region.contains("vbroadcastss ymm0,[rdx+18h]"), "{region}");
    }
}

/// Short loops in kernels without barriers, under a guard, at sizes that leave partial
/// batches, with accesses that fault at some counter values only.
#[test]
fn short_loops_agree() {
    let bodies = [
        // An accumulator over a window that runs past `x` in the last lanes.
        "var acc: f32 = 0.0; for k: u32 in 0u32 .. 5u32 { acc = acc + x[i + k] * w[k]; } y[i] = acc;",
        // Signed counter, negative start, step 3 (counter values -3, 0, 3).
        "var acc: f32 = 1.0;
         for k: i32 in -3i32 .. 4i32 step 3i32 { acc = acc * 0.5 + x[((i as i32) + k + 3i32) as u32]; }
         y[i] = acc;",
        // A division by zero at one counter value: the loop's text in the report.
        "var acc: u32 = 0u32; for k: u32 in 0u32 .. 4u32 { acc = acc + (i + 9u32) / (k - n); } y[i] = acc as f32;",
        // Nested short loops, the inner one unrolled in each copy of the outer.
        "var acc: f32 = 0.0;
         for a: u32 in 0u32 .. 3u32 { for b: u32 in 0u32 .. 4u32 { acc = acc + w[a * 4u32 + b] * x[i + a]; } }
         y[i] = acc;",
        // Divergent control and lets in the body, a var declared per iteration.
        "var acc: f32 = 0.0;
         for k: u32 in 1u32 .. 7u32 {
           let t: f32 = x[i] * (k as f32);
           var u: f32 = t;
           if t > 2.0 { acc = acc + t; u = u * 2.0; } else { acc = acc * 0.5; }
           acc = acc + u;
         }
         y[i] = acc;",
        // A store at a uniform index per iteration (the last active lane's value wins).
        "for k: u32 in 0u32 .. 4u32 { y[k] = x[i] + (k as f32); }",
        // Sixteen iterations (unrolled) and seventeen (not).
        "var acc: f32 = 0.0; for k: u32 in 0u32 .. 16u32 { acc = acc + w[k]; } y[i] = acc + x[i];",
        "var acc: f32 = 0.0; for k: u32 in 0u32 .. 17u32 { acc = acc + w[k]; } y[i] = acc + x[i];",
        // Every active lane faulting at once (a uniform index past the end): the copies
        // after it leave, as the ordinary loop does, and a copy's statement after the load.
        "var acc: f32 = 0.0; for k: u32 in 0u32 .. 6u32 { acc = acc + x[n + k]; y[i] = acc; } y[i] = acc * 2.0;",
        // Empty and one-iteration loops.
        "var acc: f32 = 2.0; for k: u32 in 5u32 .. 5u32 { acc = 0.0; } for k: u32 in 5u32 .. 6u32 { acc = acc + w[k]; } y[i] = acc;",
    ];
    for body in bodies {
        let k = kernel(&format!(
            "kernel k(x: ptr<global, f32>, w: ptr<global, f32>, y: ptr<global, f32>, n: u32) {{
               let i: u32 = global_id(0);
               if i < n {{ {body} }}
             }}"
        ));
        for (n, global, xlen, wlen) in
            [(13u32, 16usize, 20usize, 20usize), (37, 40, 39, 20), (37, 40, 37, 20), (2, 8, 9, 6)]
        {
            let r = NdRange::new(&[global as u32]).with_local(&[8]);
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n)];
            let bufs = [f32s(xlen, 2), f32s(wlen, 5), Buffer::zeroed(Scalar::F32, global)];
            agree(&k, &r, &args, &bufs, &format!("{body}\nn {n}, x {xlen}, w {wlen}"));
        }
    }
    if avx2() {
        let k = kernel(
            "kernel k(x: ptr<global, f32>, w: ptr<global, f32>, y: ptr<global, f32>, n: u32) {
               let i: u32 = global_id(0);
               if i < n { var acc: f32 = 0.0; for k: u32 in 0u32 .. 5u32 { acc = acc + x[i + k] * w[k]; } y[i] = acc; }
             }",
        );
        let lines = vector_listing(&k);
        assert!(lines.iter().any(|l| l == "sub qword ptr [r12+0A8h],5"), "{}", lines.join("\n"));
    }
}

/// Region code: a short loop after a barrier whose local accesses run past the tile in the
/// last batches (the proof fails and the copies check), and vars in a barrier-free block
/// between two barriers, read by nothing after it.
#[test]
fn short_loops_in_regions_agree() {
    for (taps, tile) in [(5u32, 68u32), (7, 68), (7, 70)] {
        let k = kernel(&format!(
            "kernel k(x: ptr<global, f32>, y: ptr<global, f32>, n: u32) #reqd_work_group_size(64, 1, 1) {{
               local t: f32[{tile}];
               let l: u32 = local_id(0);
               let g: u32 = global_id(0);
               if g < n {{ t[l] = x[g]; }} else {{ t[l] = 0.0; }}
               if l < 6u32 {{ t[64u32 + l] = 1.0; }}
               barrier(local);
               if g < n {{
                 var acc: f32 = 0.0;
                 var m: f32 = -1.0;
                 for k: u32 in 0u32 .. {taps}u32 {{
                   let v: f32 = t[l + k];
                   acc = acc + v * (k as f32 + 0.5);
                   if v > m {{ m = v; }}
                 }}
                 y[g] = acc + m;
               }}
               barrier(local);
               if l == 0u32 {{ y[g] = y[g] + t[3]; }}
             }}"
        ));
        for n in [5u32, 64, 100, 128] {
            let global = (n as usize).div_ceil(64) * 64;
            let r = NdRange::new(&[global as u32]).with_local(&[64]);
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
            let bufs = [f32s(n as usize, 4), Buffer::zeroed(Scalar::F32, global)];
            agree(&k, &r, &args, &bufs, &format!("taps {taps}, tile {tile}, n {n}"));
        }
    }
}

/// The loop iteration limit: the copies count their back-edges at once only where the
/// budget outlasts them (else the ordinary loop runs and meets the limit at its
/// back-edge), so both codes stop at a limit the loops pass and neither below it.
#[test]
fn iteration_limit_applies_to_short_loops() {
    let k = kernel(
        "kernel k(x: ptr<global, f32>, y: ptr<global, f32>) {
           let i: u32 = global_id(0);
           var acc: f32 = 0.0;
           for k: u32 in 0u32 .. 7u32 { acc = acc + x[i + k]; }
           y[i] = acc;
         }",
    );
    let r = NdRange::new(&[256]).with_local(&[64]);
    let args = [Arg::Buffer(0), Arg::Buffer(1)];
    for (limit, stops) in [(20u64, true), (100, true), (1_000_000, false)] {
        let opts = CpuRunOptions { max_loop_iterations: Some(limit), ..CpuRunOptions::default() };
        for scalar in [true, false] {
            let p = compile(&k, &X86Options { scalar, ..X86Options::default() }).unwrap();
            let mut bufs = [f32s(263, 0), Buffer::zeroed(Scalar::F32, 256)];
            match p.run_with(&r, &args, &mut bufs, &opts) {
                Err(e) => assert!(stops && e.message.contains("loop iteration limit"), "{e}"),
                Ok(()) => assert!(!stops, "limit {limit}, scalar: {scalar}"),
            }
        }
    }
}

/// f64 accumulators (`acc = acc op e`, the name's registers read in place) and f64 loads
/// at a batch-uniform index (a scalar compare and a broadcast): the held-out suite's
/// `dgemv` at odd sizes, with `x` too short (the uniform load faults in every active lane,
/// the lowest reported), and every arithmetic operator with NaNs in both operands (the
/// operand order decides which NaN).
#[test]
fn f64_accumulators_and_uniform_loads_agree() {
    let m = kiln_ir::parse_module(include_str!("../benches/cpu_suite_more.kir")).unwrap();
    let k = m.kernels.iter().find(|k| k.name() == "dgemv").expect("dgemv").clone();
    let f64s = |n: usize, seed: u64| {
        let v: Vec<f64> =
            (0..n as u64).map(|i| ((i * 7 + seed) % 19) as f64 * 0.25 - 2.0).collect();
        Buffer::from_slice(&v)
    };
    for (rows, cols, xlen) in [(13u32, 5u32, 5usize), (37, 3, 3), (37, 6, 4), (8, 1, 1)] {
        let global = rows.div_ceil(8) * 8;
        let r = NdRange::new(&[global]).with_local(&[8]);
        let args =
            [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(rows), Arg::scalar(cols)];
        let bufs = [
            f64s((rows * cols) as usize, 1),
            f64s(xlen, 2),
            Buffer::zeroed(Scalar::F64, rows as usize),
        ];
        agree(&k, &r, &args, &bufs, &format!("dgemv {rows}x{cols}, x {xlen}"));
    }
    for op in ["+", "-", "*", "/"] {
        let k = kernel(&format!(
            "kernel k(a: ptr<global, f64>, x: ptr<global, f64>, y: ptr<global, f64>, n: u32) {{
               let i: u32 = global_id(0);
               if i < n {{
                 var acc: f64 = a[i];
                 for j: u32 in 0u32 .. n {{ acc = acc {op} (a[i] * x[j] + x[j]); }}
                 y[i] = acc;
               }}
             }}"
        ));
        // NaNs of distinct payloads in `a` and `x`.
        let nan_a = f64::from_bits(0x7ff8_0000_0000_00a1);
        let nan_x = f64::from_bits(0x7ff8_0000_0000_00b2);
        let a: Vec<f64> =
            (0..16).map(|i| if i % 5 == 2 { nan_a } else { i as f64 * 0.75 - 3.0 }).collect();
        let x: Vec<f64> = (0..16).map(|i| if i == 3 { nan_x } else { 1.5 - i as f64 }).collect();
        for n in [5u32, 11, 16] {
            let r = NdRange::new(&[16]).with_local(&[8]);
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n)];
            let bufs =
                [Buffer::from_slice(&a), Buffer::from_slice(&x), Buffer::zeroed(Scalar::F64, 16)];
            agree(&k, &r, &args, &bufs, &format!("op {op}, n {n}"));
        }
    }
}
