//! The x86 JIT's 8-lane code beyond elementwise kernels — loops (uniform and divergent),
//! `var`s, gathers, contiguous neighbour accesses, per-lane scatters, ids of other
//! dimensions — against its scalar code and the interpreter, errors compared word for
//! word: hand cases (the 2-D stencil example, faults in several lanes, a bad `for` step,
//! the loop limit) and random kernels with loops, branches and indirect accesses. Also
//! which kernels get vector code, so a fall back to the scalar code is caught.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{avx2, f32s, kernel, three_ways};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Kernel, Scalar};
use kiln_runtime::device::cpu::{CpuRun, CpuRunOptions};
use proptest::prelude::*;

#[test]
fn stencil_example_runs_on_the_lanes() {
    let k = kiln_ir::parse_module(include_str!("../../examples/stencil2d.kir")).unwrap().kernels[0]
        .clone();
    for (w, h, lw) in [(64u32, 12u32, 32u32), (40, 7, 8), (37, 5, 37)] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(w), Arg::scalar(h)];
        let bufs = [f32s((w * h) as usize, 3), Buffer::zeroed(Scalar::F32, (w * h) as usize)];
        let r = NdRange::new(&[w, h]).with_local(&[lw, 1]);
        assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "{w}x{h}");
    }
    // The grid past the buffers: out-of-bounds errors in the middle of a batch.
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(64u32), Arg::scalar(12u32)];
    let bufs = [f32s(64 * 12 - 3, 3), Buffer::zeroed(Scalar::F32, 64 * 12)];
    three_ways(&k, &NdRange::new(&[64, 12]).with_local(&[16, 2]), &args, &bufs);
}

/// 2-D and 3-D launches of one-row groups run a row of groups per call of the lanes (their
/// work-items are one run of `global_id(0)`): ids of the other dimensions, a fault in a
/// middle row of groups, and a buffer too short for the last groups of each row (those run
/// on the scalar code) agree with the interpreter.
#[test]
fn rows_of_groups_run_per_call_and_agree() {
    let k = kernel(
        "kernel k(a: ptr<global, f32>, o: ptr<global, f32>, w: u32) {
           let x: u32 = global_id(0);
           let y: u32 = global_id(1) + global_id(2) * 7u32;
           o[y * w + x] = a[x] * (y as f32) + (group_id(1) as f32) - a[y * w + x];
         }",
    );
    for (global, local) in [(vec![48u32, 5], vec![16u32, 1]), (vec![32, 3, 2], vec![16, 1, 1])] {
        let r = NdRange::new(&global).with_local(&local);
        let w = global[0];
        let cells = (w * 14) as usize;
        // In bounds; the checked access out of bounds from the third row; the access at
        // `global_id(0)` out of bounds in each row's last group.
        for len in [cells, 2 * w as usize + 5, w as usize - 8] {
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(w)];
            let bufs = [f32s(len, 3), Buffer::zeroed(Scalar::F32, cells)];
            assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "{global:?}, a: {len}");
        }
    }
}

#[test]
fn loops_run_on_the_lanes() {
    let r = NdRange::new(&[96]).with_local(&[32]);
    let kernels = [
        // Signed shifts by per-lane counts (taken modulo 32), in a uniform loop.
        "kernel k(o: ptr<global, f32>, a: ptr<global, f32>, n: u32) {
           let i: u32 = global_id(0);
           var v: i32 = 0i32 - 1000i32;
           for j: i32 in 0i32 .. 40i32 step 7i32 {
             v = (v >> (j - 3i32)) ^ (v << 2i32);
           }
           if v > 0i32 { o[i] = a[i & 63u32]; } else { o[i] = 2.0; }
         }",
        // A uniform `for` with a uniform `var` accumulator and a divergent one.
        "kernel k(o: ptr<global, f32>, a: ptr<global, f32>, n: u32) {
           let i: u32 = global_id(0);
           var acc: f32 = 0.0;
           var c: u32 = 0u32;
           for j: u32 in 0 .. n step 2 {
             acc = acc + a[(i + j) & 63u32];
             c = c + j;
           }
           o[i] = acc + a[c & 63u32];
         }",
        // A divergent `while` (different trip counts per lane) with a divergent `if`.
        "kernel k(o: ptr<global, f32>, a: ptr<global, f32>, n: u32) {
           let i: u32 = global_id(0);
           var x: u32 = i * 2654435761u32;
           var steps: u32 = 0u32;
           while (x & 7u32) != 0u32 && steps < n {
             if (x & 1u32) == 1u32 { x = x * 3u32 + 1u32; } else { x = x ^ ((x << 3u32) >> (steps + 30u32)); }
             steps = steps + 1u32;
           }
           o[i] = a[steps & 63u32] + 1.0;
         }",
        // A signed `for` with negative bounds and a uniform `while` inside.
        "kernel k(o: ptr<global, f32>, a: ptr<global, f32>, n: u32) {
           let i: u32 = global_id(0);
           var s: f32 = a[i & 63u32];
           for j: i32 in -5i32 .. 7i32 step 3i32 {
             var t: u32 = 0u32;
             while t < 3u32 { s = s * 0.5 + 1.0; t = t + 1u32; }
             if s > 1.5 { s = s - 0.25; }
           }
           o[i] = s;
         }",
    ];
    for src in kernels {
        let k = kernel(src);
        for n in [0u32, 1, 9] {
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
            let bufs = [Buffer::zeroed(Scalar::F32, 96), f32s(64, 1)];
            assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "{k}");
        }
    }
}

#[test]
fn gathers_scatters_and_faults_agree() {
    let r = NdRange::new(&[64]).with_local(&[16]);
    // A permutation through an index buffer (gather and scatter).
    let k = kernel(
        "kernel k(o: ptr<global, i32>, a: ptr<global, i32>, idx: ptr<global, u32>) {
           let i: u32 = global_id(0);
           let j: u32 = idx[i];
           o[j] = a[j] * 2i32 + a[(j + 3u32) & 63u32];
         }",
    );
    let perm: Vec<u32> = (0..64u32).map(|i| (i * 37 + 11) % 64).collect();
    let a = Buffer::from_slice(&(0..64).map(|i| i * 5 - 100).collect::<Vec<i32>>());
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
    let bufs = [Buffer::zeroed(Scalar::I32, 64), a.clone(), Buffer::from_slice(&perm)];
    assert_eq!(three_ways(&k, &r, &args, &bufs), avx2());
    // Lanes storing to the same element: the last work-item wins, as in the interpreter.
    let same: Vec<u32> = (0..64u32).map(|i| i / 16).collect();
    three_ways(
        &k,
        &r,
        &args,
        &[Buffer::zeroed(Scalar::I32, 64), a.clone(), Buffer::from_slice(&same)],
    );
    // Faults: lane 5 of a batch faults at the scatter, lane 2 earlier at the load; the
    // interpreter reports lane 2. Then a lone fault in the last lane of the launch.
    for (lane, bad) in [(2usize, 1000u32), (5, 64), (63, 4096)] {
        let mut ix = perm.clone();
        ix[lane] = bad;
        if lane == 5 {
            ix[2] = 100;
        }
        let bufs = [Buffer::zeroed(Scalar::I32, 64), a.clone(), Buffer::from_slice(&ix)];
        three_ways(&k, &r, &args, &bufs);
    }
    // Ranged arguments (a window of a bigger buffer): gathers, scatters and faults count
    // from the window's start, and errors name it as the interpreter does.
    for (off, len, bad) in [(5usize, 64usize, None), (3, 64, Some(9usize)), (0, 60, None)] {
        let mut ix = perm.clone();
        if let Some(at) = bad {
            ix[at] = 70;
        }
        let args = [
            Arg::Range { buffer: 0, offset: off, len },
            Arg::Range { buffer: 1, offset: 2, len: 64 },
            Arg::Buffer(2),
        ];
        let big = Buffer::from_slice(&(0..70).map(|i| i * 3 - 50).collect::<Vec<i32>>());
        let bufs = [Buffer::zeroed(Scalar::I32, 70), big, Buffer::from_slice(&ix)];
        three_ways(&k, &r, &args, &bufs);
    }
    // A signed index: a negative one is reported as negative.
    let k = kernel(
        "kernel k(o: ptr<global, f32>, a: ptr<global, f32>, ix: ptr<global, i32>, s: i32) {
           let i: i32 = ix[global_id(0)];
           o[global_id(0)] = a[i + s] + a[s];
         }",
    );
    let ix = Buffer::from_slice(&(0..64).map(|i| (i * 13) % 64).collect::<Vec<i32>>());
    for s in [0i32, -3, 5] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(s)];
        let bufs = [Buffer::zeroed(Scalar::F32, 64), f32s(64, 2), ix.clone()];
        assert_eq!(three_ways(&k, &r, &args, &bufs), avx2());
    }
}

/// `&&` and `||` evaluate both sides (kiln_ir's semantics, the interpreter's): a load on the
/// right runs in every lane, also where the left side decides, so the lane code is exact and
/// an out-of-bounds load there is an error on every path.
#[test]
fn logic_operators_with_loads_on_the_right_run_on_the_lanes() {
    let r = NdRange::new(&[64]).with_local(&[16]);
    let k = kernel(
        "kernel k(o: ptr<global, u32>, a: ptr<global, f32>, idx: ptr<global, u32>, n: u32) {
           let i: u32 = global_id(0);
           if i + 1u32 < n && a[i + 1u32] > a[i] {
             o[i] = o[i] + 1u32;
           }
           if i < 8u32 || a[idx[i]] < 0.0 {
             o[i] = o[i] + 10u32;
           } else {
             o[i] = o[i] + 100u32;
           }
           if !(a[i] > 1.0 && (i > 60u32 || a[(i * 5u32) & 63u32] > 0.5)) {
             o[i] = o[i] + 1000u32;
           }
         }",
    );
    let perm: Vec<u32> = (0..64u32).map(|i| (i * 37 + 11) % 64).collect();
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(64u32)];
    // In bounds (`a` has 65 elements): the results.
    let bufs = [Buffer::zeroed(Scalar::U32, 64), f32s(65, 4), Buffer::from_slice(&perm)];
    assert_eq!(three_ways(&k, &r, &args, &bufs), avx2());
    // `a[64]` on the right of a false `i + 1 < n`, for work-item 63: the interpreter's
    // error, on the lanes too.
    let bufs = [Buffer::zeroed(Scalar::U32, 64), f32s(64, 4), Buffer::from_slice(&perm)];
    assert_eq!(three_ways(&k, &r, &args, &bufs), avx2());
    let mut want = bufs.to_vec();
    let e = kiln_ir::interp::run(&k, &r, &args, &mut want).unwrap_err().to_string();
    assert!(e.contains("work-item (63, 0, 0)") && e.contains("out of bounds"), "{e}");
    // An index on the right of a true `i < 8` that is out of bounds (work-item 3).
    let mut ix = perm.clone();
    ix[3] = 500;
    let bufs = [Buffer::zeroed(Scalar::U32, 64), f32s(65, 4), Buffer::from_slice(&ix)];
    assert_eq!(three_ways(&k, &r, &args, &bufs), avx2());
}

#[test]
fn for_step_errors_and_limits() {
    let k = kernel(
        "kernel k(o: ptr<global, u32>, n: u32, s: i32) {
           let i: u32 = global_id(0);
           if i > 3u32 {
             for j: i32 in 0i32 .. 10i32 step s { o[i] = o[i] + 1u32; }
           }
           var x: u32 = i + n;
           var c: u32 = 0u32;
           while x != 0u32 { x = x & (x - 1u32); c = c + 1u32; }
           o[i] = c;
         }",
    );
    let r = NdRange::new(&[32]).with_local(&[16]);
    for (n, s) in [(0u32, 1i32), (0, 0), (0, -2), (1u32 << 31, 3)] {
        let args = [Arg::Buffer(0), Arg::scalar(n), Arg::scalar(s)];
        three_ways(&k, &r, &args, &[Buffer::zeroed(Scalar::U32, 32)]);
    }
    // A loop that never ends (n = 0 for odd i) stops at the iteration limit on both codes.
    let k = kernel(
        "kernel k(o: ptr<global, u32>, n: u32) {
           var x: u32 = global_id(0);
           while x != 0u32 { x = x + n; }
           o[global_id(0)] = x;
         }",
    );
    let args = [Arg::Buffer(0), Arg::scalar(0u32)];
    let opts = CpuRunOptions { max_loop_iterations: Some(10_000), ..CpuRunOptions::default() };
    for scalar in [true, false] {
        let p = compile(&k, &X86Options { scalar, ..X86Options::default() }).unwrap();
        let mut bufs = [Buffer::zeroed(Scalar::U32, 32)];
        let e = p.run_with(&r, &args, &mut bufs, &opts).unwrap_err();
        assert!(e.message.contains("loop iteration limit"), "{e}");
    }
}

#[test]
fn barriers_and_local_memory_run_on_the_lanes() {
    let k = kiln_ir::parse_module(include_str!("../../examples/reduce.kir")).unwrap().kernels[0]
        .clone();
    for (n, global) in [(256u32, 256u32), (200, 256), (64, 64)] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
        let bufs = [f32s(global as usize, 4), Buffer::zeroed(Scalar::F32, (global / 64) as usize)];
        let r = NdRange::new(&[global]).with_local(&[64]);
        assert_eq!(three_ways(&k, &r, &args, &bufs), avx2());
    }
    // A 2-D group, a barrier in a uniform loop, a uniform branch around a barrier that
    // differs between rows (barrier divergence, reported as the interpreter does), and a
    // local out-of-bounds access.
    let k = kernel(
        "kernel k(o: ptr<global, u32>, m: u32) {
           local t: u32[64];
           let x: u32 = local_id(0);
           let y: u32 = local_id(1);
           let me: u32 = y * 16u32 + x;
           t[me] = me * 3u32;
           for r: u32 in 0u32 .. 3u32 {
             barrier(local);
             let v: u32 = t[(me + r + 1u32) & 63u32];
             barrier(local);
             t[me] = v + t[me];
           }
           barrier(local);
           if y < m { barrier(local); }
           o[global_id(1) * 16u32 + global_id(0)] = t[(me * 5u32) & 63u32] + t[me + m * 60u32];
         }",
    );
    // Rows disagree about a barrier and a later row faults after its first lanes finished:
    // the interpreter reports the divergence it meets first.
    let k2 = kernel(
        "kernel k(o: ptr<global, u32>, ix: ptr<global, u32>) {
           if global_id(1) == 0u32 { barrier(local); }
           o[ix[global_id(1) * 8u32 + global_id(0)]] = 1u32;
         }",
    );
    for bad in [10usize, 8, 3] {
        let mut ix: Vec<u32> = (0..16).collect();
        ix[bad] = 99;
        let bufs = [Buffer::zeroed(Scalar::U32, 16), Buffer::from_slice(&ix)];
        let r = NdRange::new(&[8, 2]).with_local(&[8, 2]);
        assert_eq!(three_ways(&k2, &r, &[Arg::Buffer(0), Arg::Buffer(1)], &bufs), avx2());
    }
    for m in [0u32, 4, 2, 1] {
        let args = [Arg::Buffer(0), Arg::scalar(m)];
        let bufs = [Buffer::zeroed(Scalar::U32, 16 * 8)];
        let r = NdRange::new(&[16, 8]).with_local(&[16, 4]);
        assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "m = {m}");
    }
}

#[test]
fn hoisting_shadowing_divisions_and_local_arrays_without_barriers() {
    let r = NdRange::new(&[128]).with_local(&[16]);
    let kernels = [
        // A let of a divergent let is not hoisted; a uniform division (by zero for n = 5).
        "kernel k(o: ptr<global, u32>, n: u32) {
           let a0: u32 = n * 2u32;
           let a: u32 = global_id(0) + a0;
           let b: u32 = a * 3u32;
           o[global_id(0)] = (b >> 1u32) + a0 / (n - 5u32);
         }",
        // A local array without barriers or local ids: it starts zeroed in every group.
        // (One work-item per group touches it: no race.)
        "kernel k(o: ptr<global, u32>, n: u32) {
           local t: u32[4];
           if (global_id(0) & 15u32) == (n & 7u32) {
             t[n & 3u32] = t[n & 3u32] + global_id(0);
             o[global_id(0)] = t[n & 3u32] + t[2];
           }
         }",
    ];
    for src in kernels {
        let k = kernel(src);
        for n in [5u32, 6, 1] {
            let args = [Arg::Buffer(0), Arg::scalar(n)];
            assert_eq!(three_ways(&k, &r, &args, &[Buffer::zeroed(Scalar::U32, 128)]), avx2());
        }
    }
}

#[test]
fn which_kernels_have_vector_code() {
    if !avx2() {
        kiln_ir::testing::skip("no AVX2 on this CPU");
        return;
    }
    let examples = [
        (include_str!("../../examples/stencil2d.kir"), true),
        (include_str!("../../examples/reduce.kir"), true),
    ];
    for (src, want) in examples {
        let k = kiln_ir::parse_module(src).unwrap().kernels[0].clone();
        // As written and after `-O` (what the devices and the benchmark build).
        for optimize in [false, true] {
            let p = compile(&k, &X86Options { optimize, ..X86Options::default() }).unwrap();
            let d = p.disassemble();
            assert_eq!(p.has_spmd(), want, "{}", &d[d.find("; no 8-lane").unwrap_or(0)..]);
        }
    }
    // And the launches run on the lanes: every group of these launches (2-D rows of 64,
    // groups of 64 with barriers, a loop kernel) is counted.
    let stencil = kiln_ir::parse_module(include_str!("../../examples/stencil2d.kir")).unwrap();
    let reduce = kiln_ir::parse_module(include_str!("../../examples/reduce.kir")).unwrap();
    let looped = kernel(
        "kernel k(o: ptr<global, f32>, n: u32) {
           var s: f32 = 0.0;
           for j: u32 in 0u32 .. n { s = s + 0.5; }
           while s > 1.0 { s = s - 0.75; }
           o[global_id(0)] = s;
         }",
    );
    /// (kernel, range, arguments, buffers, groups expected on the lanes)
    type Case<'a> = (&'a Kernel, NdRange, Vec<Arg>, Vec<Buffer>, u64);
    let cases: [Case; 3] = [
        (
            &stencil.kernels[0],
            NdRange::new(&[128, 4]).with_local(&[64, 1]),
            vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(128u32), Arg::scalar(4u32)],
            vec![f32s(512, 1), Buffer::zeroed(Scalar::F32, 512)],
            8,
        ),
        (
            &reduce.kernels[0],
            NdRange::new(&[256]).with_local(&[64]),
            vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(256u32)],
            vec![f32s(256, 1), Buffer::zeroed(Scalar::F32, 4)],
            4,
        ),
        (
            &looped,
            NdRange::new(&[64]).with_local(&[16]),
            vec![Arg::Buffer(0), Arg::scalar(7u32)],
            vec![Buffer::zeroed(Scalar::F32, 64)],
            4,
        ),
    ];
    for (k, range, args, bufs, groups) in cases {
        for optimize in [false, true] {
            let p = compile(k, &X86Options { optimize, ..X86Options::default() }).unwrap();
            let before = kiln_runtime::device::cpu::lane_groups_on_this_thread();
            p.run(&range, &args, &mut bufs.clone()).unwrap();
            let ran = kiln_runtime::device::cpu::lane_groups_on_this_thread() - before;
            assert_eq!(ran, groups, "groups on the lanes\n{k}");
        }
    }
}

/// A guard `global_id(0) < e` (also `<=`, mirrored, `e` wrapping) sends a batch to the
/// unmasked copy by one scalar compare of its last lane: bounds at and around the batch
/// edges, the grid's end and `u32::MAX`, with lanes that fault before the guard.
#[test]
fn gid_guards_agree_at_batch_edges() {
    for cond in ["i < n", "i <= n", "n > i", "n >= i", "i < n + 3u32"] {
        let k = kernel(&format!(
            "kernel k(o: ptr<global, f32>, a: ptr<global, f32>, n: u32) {{
               let i: u32 = global_id(0);
               let x: f32 = a[(i * 7u32) & 31u32];
               if {cond} {{ o[i] = x + a[i + 1u32]; }} else {{ o[i] = 0.0 - x; }}
             }}"
        ));
        for n in [0u32, 6, 7, 8, 9, 15, 16, 31, 32, 33, 62, 63, 64, u32::MAX - 1, u32::MAX] {
            for len in [20usize, 65] {
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
                let bufs = [Buffer::zeroed(Scalar::F32, 64), f32s(len, 3)];
                let r = NdRange::new(&[64]).with_local(&[32]);
                assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "{cond}, n = {n}, {len}");
            }
        }
    }
}

#[test]
fn full_batches_run_unmasked_and_agree() {
    // Batches wholly inside or outside the guard take the unmasked copies (both sides of an
    // `if`/`else`, nested `if`s, loops, a divergent `var` set on either side); the guard's
    // last batch is split, a fault at `a[i + 1]` lands in a middle batch (a = 43: lane 2 of
    // 40..47, a full batch of the guard), in the last batch (64: lane 7) or nowhere (65),
    // and a fault before the branch leaves one lane of a batch alive (a = 20: lane 1 of
    // 16..23).
    let k = kernel(
        "kernel k(o: ptr<global, f32>, a: ptr<global, f32>, n: u32) {
           let i: u32 = global_id(0);
           var s: f32 = 1.0 + a[(i + 3u32) & 23u32];
           if i < n {
             var t: f32 = a[i + 1u32] * 2.0;
             if t < 0.0 { t = 0.0 - t; } else { t = t + a[(i * 5u32) & 15u32]; }
             for j: u32 in 0u32 .. 3u32 { s = s + t * a[(i + j) & 15u32]; }
             var c: u32 = 0u32;
             while c < (i & 3u32) { s = s * 0.5; c = c + 1u32; }
             o[i] = s;
           } else {
             s = a[i - n];
             if s > 1.0 { o[i] = s + a[(i * 3u32) & 15u32]; }
           }
           o[i] = o[i] + s;
         }",
    );
    let r = NdRange::new(&[64]).with_local(&[32]);
    for n in [64u32, 61, 20, 0] {
        for len in [43usize, 64, 65, 20] {
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
            let bufs = [Buffer::zeroed(Scalar::F32, 64), f32s(len, 5)];
            assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "n = {n}, a: {len}");
        }
    }
    if !avx2() {
        kiln_ir::testing::skip("no AVX2 on this CPU");
        return;
    }
    // The guarded store's unmasked copy: a plain store at `global_id(0)` (`rbx`) next to
    // the masked one.
    let k = kernel(
        "kernel k(o: ptr<global, f32>, a: ptr<global, f32>, n: u32) {
           let i: u32 = global_id(0);
           if i < n { o[i] = a[i] * 2.0; }
         }",
    );
    let d = compile(&k, &X86Options::default()).unwrap().disassemble();
    let lanes = &d[d.find("; 8-lane AVX2 code").expect("vector code")..];
    let stores =
        |op: &str| lanes.lines().filter(|l| l.contains(op) && l.contains("+rbx*4],ymm")).count();
    assert_eq!((stores("vmovups ["), stores("vmaskmovps [")), (1, 1), "{lanes}");
}

#[test]
fn deep_operand_chains_run_on_the_lanes() {
    // Horner chains nest to the right: computed deeper operand first, they need two
    // registers at any depth (the option pricing kernel of the cpu suite had no vector code
    // before); a load that faults (a shorter `a`) sits at the bottom of one, and a chain on
    // each side of one product.
    let k = kernel(
        "kernel k(o: ptr<global, f32>, a: ptr<global, f32>, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             let x: f32 = a[i] * 0.5;
             let p: f32 = x * (1.5 + x * (0.5 - x * (2.0 + x * (a[i + 3u32] - x * (1.0 + x * (3.0 - x * (0.25 + x * (7.0 - x))))))));
             let q: f32 = (x * (1.0 + x * (2.0 - x * (3.0 + x * (4.0 - x))))) * (x - (3.0 - x * (1.0 + x * (5.0 - x * (0.125 + x)))));
             o[i] = p + q;
           }
         }",
    );
    let r = NdRange::new(&[64]).with_local(&[32]);
    for (n, len) in [(64u32, 67usize), (61, 64), (64, 50)] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
        let bufs = [Buffer::zeroed(Scalar::F32, 64), f32s(len, 2)];
        assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "n = {n}, a: {len}");
    }
    let m = kiln_ir::parse_module(include_str!("../../runtime/benches/cpu_suite.kir")).unwrap();
    let options = m.kernel("options").unwrap();
    let pos = |seed: u32| {
        Buffer::from_slice(
            &(0..64u32).map(|i| 0.25 + ((i * 7 + seed) % 23) as f32 * 0.37).collect::<Vec<_>>(),
        )
    };
    for n in [64u32, 61] {
        let args = [0, 1, 2, 3].map(Arg::Buffer).into_iter().chain([
            Arg::scalar(0.02f32),
            Arg::scalar(0.3f32),
            Arg::scalar(n),
        ]);
        let bufs = [pos(1), pos(5), pos(9), Buffer::zeroed(Scalar::F32, 64)];
        let args: Vec<Arg> = args.collect();
        assert_eq!(three_ways(options, &r, &args, &bufs), avx2(), "options, n = {n}");
    }
}

#[test]
fn labels_in_loops_cost_no_nops() {
    if !avx2() {
        kiln_ir::testing::skip("no AVX2 on this CPU");
        return;
    }
    // A `nop` only where two labels meet (it took an issue slot per label per iteration):
    // naive GEMM's 8-lane code had 36. (Three now: the third joins the plain and the
    // checked paths of a contiguous store, before the end of a branch.)
    let m = kiln_ir::parse_module(include_str!("../../runtime/benches/cpu_suite.kir")).unwrap();
    let d = compile(m.kernel("gemm_naive").unwrap(), &X86Options::default()).unwrap().disassemble();
    let lanes = &d[d.find("; 8-lane AVX2 code").expect("vector code")..];
    let nops = lanes.lines().filter(|l| l.ends_with("  nop")).count();
    assert!(nops <= 3, "{nops} nops\n{lanes}");
}

#[test]
fn vars_live_in_registers() {
    // A loop-carried accumulator, set unmasked and under a divergent `if` (a blend), in
    // a let register: the same bits and faults (a shorter `a`) as the interpreter.
    let k = kernel(
        "kernel k(o: ptr<global, f32>, a: ptr<global, f32>, n: u32) {
           let i: u32 = global_id(0);
           var s: f32 = 0.0;
           for j: u32 in 0u32 .. n {
             s = s + a[(i + j) & 63u32];
             if s > 4.0 { s = s * 0.5; }
           }
           o[i] = s;
         }",
    );
    let r = NdRange::new(&[64]).with_local(&[16]);
    for (n, len) in [(9u32, 64usize), (0, 64), (5, 40)] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
        let bufs = [Buffer::zeroed(Scalar::F32, 64), f32s(len, 7)];
        assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "n = {n}, a: {len}");
    }
    if !avx2() {
        kiln_ir::testing::skip("no AVX2 on this CPU");
        return;
    }
    let d = compile(&k, &X86Options::default()).unwrap().disassemble();
    let lanes = &d[d.find("; 8-lane AVX2 code").expect("vector code")..];
    let count = |ins: &str| lanes.lines().filter(|l| l.ends_with(ins)).count();
    assert!(count("vmovaps ymm8,ymm0") >= 2, "{lanes}");
    // (The branch's mask in the next let register: `x86_branch_masks.rs`.)
    assert_eq!(count("vblendvps ymm8,ymm8,ymm0,ymm9"), 1, "{lanes}");
}

#[test]
fn let_registers_are_operands_in_place() {
    // `x * x - y * y + cx` with `x`, `y`, `cx` in let registers: each product reads its
    // registers as they are (`vmulps ymm0,ymm11,ymm11`), with no copy into the temporary
    // first (`vmovaps ymm0,ymm11` before `vmulps ymm0,ymm0,ymm11`).
    let m = kiln_ir::parse_module(include_str!("../../runtime/benches/cpu_suite.kir")).unwrap();
    let k = m.kernel("mandel_table").unwrap();
    let args = [
        Arg::Buffer(0),
        Arg::Buffer(1),
        Arg::Buffer(2),
        Arg::scalar(20u32),
        Arg::scalar(3u32),
        Arg::scalar(50u32),
    ];
    let xs = Buffer::from_slice(&(0..20).map(|i| i as f32 * 0.15 - 2.0).collect::<Vec<_>>());
    let ys = Buffer::from_slice(&[-0.5f32, 0.1, 0.7]);
    let bufs = [Buffer::zeroed(Scalar::U32, 60), xs, ys];
    let r = NdRange::new(&[24, 3]).with_local(&[8, 1]);
    assert_eq!(three_ways(k, &r, &args, &bufs), avx2());
    if !avx2() {
        kiln_ir::testing::skip("no AVX2 on this CPU");
        return;
    }
    let d = compile(k, &X86Options::default()).unwrap().disassemble();
    let lanes = &d[d.find("; 8-lane AVX2 code").expect("vector code")..];
    let ins: Vec<Vec<&str>> = lanes
        .lines()
        .filter_map(|l| l.split_once("  ").map(|x| x.1.trim()))
        .filter_map(|l| l.split_once("  ").map(|x| x.1))
        .map(|l| l.split([' ', ',']).collect())
        .collect();
    let let_reg = |r: &str| {
        r.strip_prefix("ymm").and_then(|n| n.parse::<usize>().ok()).is_some_and(|n| n >= 8)
    };
    let copies = ins
        .windows(2)
        .filter(|w| {
            w[0].len() == 3
                && w[0][0] == "vmovaps"
                && let_reg(w[0][2])
                && w[1].len() == 4
                && w[1][0] == "vmulps"
                && w[1][1] == w[0][1]
                && w[1][2] == w[0][1]
        })
        .count();
    assert_eq!(copies, 0, "{lanes}");
    assert!(lanes.contains("vmulps ymm0,ymm11,ymm11") || lanes.contains("vmulps ymm1,ymm11,ymm11"));
}

/// Index expressions of every shape (contiguous, uniform, gathered, out of bounds); `j`
/// only inside the loop.
fn arb_index(in_loop: bool) -> BoxedStrategy<String> {
    let j = if in_loop { "(i + j)" } else { "(i + n)" };
    prop::sample::select(vec![
        j,
        "i",
        "(i + 1u32)",
        "(i - 2u32)",
        "x",
        "(x & 31u32)",
        "ix[i]",
        "ix[i & 15u32]",
        "(i * 3u32)",
        "n",
        "(ix[x & 63u32] + 2u32)",
    ])
    .prop_map(String::from)
    .boxed()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]
    #[test]
    fn random_control_kernels_agree(
        i1 in arb_index(false), i2 in arb_index(false), i3 in arb_index(true), i4 in arb_index(false),
        trips in 0u32..5,
        uniform_loop in any::<bool>(),
        n in prop::sample::select(vec![0u32, 3, 40, 63, 64, 1000]),
        local in prop::sample::select(vec![8u32, 16, 32, 64]),
        rot in 0u32..9,
    ) {
        let cond = if uniform_loop { "t < n" } else { "t < (x & 3u32) + n" };
        let k = kernel(&format!(
            "kernel k(o: ptr<global, f32>, a: ptr<global, f32>, ix: ptr<global, u32>, n: u32) {{
               local sh: f32[64];
               let i: u32 = global_id(0);
               let l: u32 = local_id(0);
               var x: u32 = i ^ 5u32;
               x = ix[{i1}];
               var acc: f32 = a[{i2}];
               sh[l] = acc;
               barrier(local);
               acc = acc + sh[(l + {rot}u32) & (local_size(0) - 1u32)];
               for j: u32 in 0u32 .. {trips}u32 {{
                 var t: u32 = 0u32;
                 while {cond} && t < 4u32 {{
                   if (x & 1u32) == 0u32 {{ acc = acc + a[{i3}]; }} else {{ x = x + 7u32; }}
                   t = t + 1u32;
                 }}
                 x = x * 5u32 + j;
               }}
               if acc > 0.0 {{ o[{i4}] = acc; }}
             }}"
        ));
        let ix: Vec<u32> = (0..64u32).map(|i| (i * 29 + 3) % 70).collect();
        let bufs = [Buffer::zeroed(Scalar::F32, 64), f32s(64, 5), Buffer::from_slice(&ix)];
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n)];
        let has = three_ways(&k, &NdRange::new(&[64]).with_local(&[local]), &args, &bufs);
        prop_assert_eq!(has, avx2());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]
    /// Barrier-heavy kernels at random: a tree reduction in local memory (a barrier in a
    /// uniform loop, possibly under a uniform `if`, or one that differs between rows:
    /// barrier divergence), local atomics at data-dependent indices, global atomics at a
    /// contiguous index (in bounds or not), 1-D and 2-D groups, on the interpreter, the
    /// scalar code and the lanes: results and errors the same.
    #[test]
    fn random_barrier_kernels_agree(
        load in prop::sample::select(vec!["i", "(i & 63u32)", "(i + n)"]),
        op in prop::sample::select(vec!["+", "^", "|"]),
        aop in prop::sample::select(vec!["add", "or", "xor", "max", "min"]),
        // Every work-item takes the barrier (the kernels stay race-free), except that in
        // groups of two rows the second skips it: barrier divergence.
        bar in prop::sample::select(vec![
            "barrier(local);",
            "if s0 > 0u32 { barrier(local); }",
            "if (group_id(0) & 1u32) == 0u32 || s > 0u32 { barrier(local); }",
            "if global_id(1) % 2u32 == 0u32 { barrier(local); }",
        ]),
        s0 in prop::sample::select(vec![0u32, 1, 4, 8, 32, 33]),
        hoff in prop::sample::select(vec![0u32, 8, 17, 40]),
        n in prop::sample::select(vec![0u32, 5, 64, 1000]),
        shape in prop::sample::select(vec![
            ([128u32, 1], [8u32, 1]),
            ([128, 1], [32, 1]),
            ([128, 1], [64, 1]),
            ([32, 4], [16, 2]),
            ([64, 2], [8, 2]),
        ]),
    ) {
        let k = kernel(&format!(
            "kernel k(o: ptr<global, u32>, a: ptr<global, u32>, h: ptr<global, u32>, n: u32, s0: u32) {{
               local sh: u32[64];
               local cnt: u32[64];
               let l: u32 = local_id(0);
               let i: u32 = global_id(0) + global_id(1) * global_size(0);
               sh[l] = a[{load}];
               cnt[l] = 0u32;
               barrier(local);
               var s: u32 = s0;
               while s > 0u32 {{
                 if l < s {{ sh[l] = sh[l] {op} sh[(l + s) & 63u32]; }}
                 {bar}
                 s = s / 2u32;
               }}
               atomic_{aop}(cnt, sh[l] & 63u32, i);
               barrier(local);
               atomic_{aop}(h, l + {hoff}u32, cnt[l]);
               if l == 0u32 {{ o[group_id(0) + group_id(1) * 16u32] = sh[0]; }}
             }}"
        ));
        let a: Vec<u32> = (0..130u32).map(|i| i.wrapping_mul(0x9e37_79b9) >> 5).collect();
        let bufs = [Buffer::zeroed(Scalar::U32, 64), Buffer::from_slice(&a), Buffer::zeroed(Scalar::U32, 80)];
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n), Arg::scalar(s0)];
        let (global, local) = shape;
        let r = NdRange::new(&global).with_local(&local);
        let has = three_ways(&k, &r, &args, &bufs);
        prop_assert_eq!(has, avx2());
    }
}

/// A row softmax's loops: each lane walks its own row (`x[base + j]`, `base` lane-varying),
/// which the 8-lane code runs eight iterations at a time, the rows' segments transposed
/// in registers (`blocked.rs`), stores collected and written as row segments.
fn row_kernel(ty: &str, lo: u32, store: &str) -> Kernel {
    kernel(&format!(
        "kernel k(x: ptr<global, f32>, y: ptr<global, f32>, rows: {ty}, cols: {ty}) {{
           let r: {ty} = global_id(0) as {ty};
           if r < rows {{
             let base: {ty} = r * cols;
             var m: f32 = x[base];
             for j: {ty} in {lo}{ty} .. cols {{
               m = max(m, x[base + j]);
             }}
             var s: f32 = 0.0;
             for j: {ty} in 0{ty} .. cols {{
               let e: f32 = exp(x[j + base] - m);
               s = s + e;
             }}
             for j: {ty} in 0{ty} .. cols {{
               {store}
             }}
           }}
         }}"
    ))
}

/// Row data with NaN, infinities and values exp over- and underflows on.
fn row_data(n: usize, seed: u32) -> Buffer {
    let special = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 89.0, -104.0, -0.0];
    Buffer::from_slice(
        &(0..n as u32)
            .map(|i| match (i.wrapping_mul(2654435761) ^ seed) % 97 {
                v @ 0..=5 if seed % 2 == 1 => special[v as usize],
                v => v as f32 * 0.11 - 5.0,
            })
            .collect::<Vec<_>>(),
    )
}

#[test]
fn row_loops_run_blocked_and_agree() {
    let plain = "y[base + j] = exp(x[base + j] - m) / s;";
    for (ty, lo) in [("u32", 1u32), ("i32", 1), ("u32", 0), ("i32", 3)] {
        let k = row_kernel(ty, lo, plain);
        // Odd and exact sizes: no chunk, one, several with a tail; rows not a multiple of 8
        // (a guarded, rounded-up range); data with NaN and infinities.
        for (rows, cols, seed) in
            [(13u32, 7u32, 0u32), (16, 8, 1), (21, 9, 3), (9, 37, 1), (24, 64, 2)]
        {
            let n = (rows * cols) as usize;
            let r = NdRange::new(&[rows.div_ceil(8) * 8]).with_local(&[8]);
            let (rs, cs) = if ty == "u32" {
                (Arg::scalar(rows), Arg::scalar(cols))
            } else {
                (Arg::scalar(rows as i32), Arg::scalar(cols as i32))
            };
            let args = [Arg::Buffer(0), Arg::Buffer(1), rs, cs];
            let bufs = [row_data(n, seed), Buffer::zeroed(Scalar::F32, n)];
            assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "{ty} {rows}x{cols}");
            // A short output (the last rows fault, the lowest work-item reported) and a
            // short input (the blocked loads' check fails: the ordinary loop faults).
            let short = [row_data(n, seed), Buffer::zeroed(Scalar::F32, n - 3)];
            three_ways(&k, &r, &args, &short);
            let short = [row_data(n - 10, seed), Buffer::zeroed(Scalar::F32, n)];
            three_ways(&k, &r, &args, &short);
        }
    }
    // In place, and through windows of one buffer: the same memory runs blocked;
    // overlapping windows (y one element past x: each store feeds the lane's next load)
    // must not. Rows 8 elements apart, so that no work-item reads another's stores.
    let k = kernel(
        "kernel k(x: ptr<global, f32>, y: ptr<global, f32>, cols: u32, stride: u32) {
           let base: u32 = global_id(0) * stride;
           for j: u32 in 0u32 .. cols { y[base + j] = x[base + j] * 0.5 + 1.0; }
         }",
    );
    let r = NdRange::new(&[16]).with_local(&[8]);
    let cols = 27u32;
    let n = (16 * (cols + 8)) as usize;
    for (xo, yo) in [(0usize, 0usize), (0, 1), (1, 0), (0, 8), (8, 0)] {
        let args = [
            Arg::Range { buffer: 0, offset: xo, len: n },
            Arg::Range { buffer: 0, offset: yo, len: n },
            Arg::scalar(cols),
            Arg::scalar(cols + 8),
        ];
        assert_eq!(three_ways(&k, &r, &args, &[row_data(n + 8, 2)]), avx2(), "{xo} {yo}");
    }
    // A negative i32 base (the check fails; the ordinary loop reports the index).
    let k = kernel(
        "kernel k(x: ptr<global, f32>, y: ptr<global, f32>, off: i32) {
           let base: i32 = (global_id(0) as i32) * 16i32 + off;
           var s: f32 = 0.0;
           for j: i32 in 0i32 .. 16i32 { s = s + x[base + j]; }
           y[global_id(0)] = s;
         }",
    );
    for off in [0i32, -5, 3] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(off)];
        let bufs = [row_data(16 * 16, 0), Buffer::zeroed(Scalar::F32, 16)];
        three_ways(&k, &NdRange::new(&[16]).with_local(&[16]), &args, &bufs);
    }
    // The loop iteration limit: a chunk counts its eight back-edges at once only where
    // the budget outlasts them; both codes stop at a limit the loops pass, neither below.
    let k = row_kernel("u32", 1, plain);
    let r = NdRange::new(&[16]).with_local(&[16]);
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(16u32), Arg::scalar(200u32)];
    for (limit, stops) in [(1000u64, true), (2_000_000, false)] {
        let opts = CpuRunOptions { max_loop_iterations: Some(limit), ..CpuRunOptions::default() };
        for scalar in [true, false] {
            let p = compile(&k, &X86Options { scalar, ..X86Options::default() }).unwrap();
            let mut bufs = [row_data(3200, 0), Buffer::zeroed(Scalar::F32, 3200)];
            match p.run_with(&r, &args, &mut bufs, &opts) {
                Err(e) => assert!(stops && e.message.contains("loop iteration limit"), "{e}"),
                Ok(()) => assert!(!stops, "limit {limit}, scalar: {scalar}"),
            }
        }
    }
    if !avx2() {
        kiln_ir::testing::skip("no AVX2 on this CPU");
        return;
    }
    // The full batches' loops: transposed row segments, no gathers or per-lane stores.
    let d = compile(&row_kernel("u32", 1, plain), &X86Options::default()).unwrap().disassemble();
    let lanes = &d[d.find("; 8-lane AVX2 code").expect("vector code")..];
    let count = |ins: &str| lanes.lines().filter(|l| l.contains(ins)).count();
    assert_eq!(count("vinsertf128"), 3 * 8, "{lanes}");
    assert_eq!(count("vextractf128"), 8, "{lanes}");
    // Also after `-O`, whose CSE names the stored index (`let cse0: u32 = base + j;`):
    // read only as a row index, it is not computed in the copies, which then need no
    // counter of their own (no `inc` of it per iteration).
    let opts = X86Options { optimize: true, ..X86Options::default() };
    let d = compile(&row_kernel("u32", 1, plain), &opts).unwrap().disassemble();
    let lanes = &d[d.find("; 8-lane AVX2 code").expect("vector code")..];
    let count = |ins: &str| lanes.lines().filter(|l| l.contains(ins)).count();
    assert_eq!(count("vinsertf128"), 3 * 8, "{lanes}");
    assert_eq!(count("vextractf128"), 8, "{lanes}");
    assert_eq!(count("inc qword ptr"), 0, "{lanes}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]
    /// Row loops at random (`blocked.rs`): bodies with and without stores, the counter
    /// read outside the row accesses or not, two bases, odd rows and columns, rounded-up
    /// ranges, short buffers (faults), NaN and infinities, windows of one buffer.
    #[test]
    fn random_row_loops_agree(
        body in prop::sample::select(vec![
            "s = max(s, x[base + j]);",
            "s = s + exp(x[base + j] - 1.0) * x[j + base];",
            "let t: f32 = x[base + j] * 2.0; y[base + j] = t + s; s = s + t;",
            "y[base + j] = x[base + j] - (j as f32);",
            "s = s + x[base + j] * x[other + j];",
            "s = s + x[base + j] + x[base + j + 1u32];",
            "y[base + j] = x[base + j] + x[other + j];",
            "let k: u32 = base + j; y[k] = x[k] * 2.0 + s; s = s + x[k];",
            "let k: u32 = j + base; s = s + x[k] * x[other + j];",
            "let k: u32 = base + j; s = s + x[k] + (k as f32);",
        ]),
        rows in 1u32..24,
        cols in 1u32..40,
        lo in 0u32..3,
        pad in 0u32..9,
        short in prop::sample::select(vec![0usize, 0, 1, 9]),
        window in prop::sample::select(vec![None, None, Some((0usize, 0usize)), Some((0, 1)), Some((2, 0))]),
        seed in 0u32..4,
        signed in any::<bool>(),
    ) {
        let ty = if signed { "i32" } else { "u32" };
        let body = body.replace("u32", ty);
        let k = kernel(&format!(
            "kernel k(x: ptr<global, f32>, y: ptr<global, f32>, rows: {ty}, cols: {ty}, stride: {ty}) {{
               let r: {ty} = global_id(0) as {ty};
               if r < rows {{
                 let base: {ty} = r * stride;
                 let other: {ty} = (rows - 1{ty} - r) * stride;
                 var s: f32 = 0.0;
                 for j: {ty} in {lo}{ty} .. cols {{ {body} }}
                 y[base] = s;
               }}
             }}"
        ));
        // (Race-free: with windows of one buffer, rows far enough apart that no work-item
        // touches another's row, and no reads of the other rows.)
        let window = window.filter(|_| !body.contains("other"));
        let pad = if window.is_some() { pad.max(3) } else { pad };
        let stride = cols + pad;
        let n = (rows * stride) as usize + 1;
        let short = short.min(n - 1);
        let r = NdRange::new(&[rows.div_ceil(8) * 8]).with_local(&[8]);
        let arg = |v: u32| if signed { Arg::scalar(v as i32) } else { Arg::scalar(v) };
        let sizes = [arg(rows), arg(cols), arg(stride)];
        let has = match window {
            None => {
                let args = [Arg::Buffer(0), Arg::Buffer(1), sizes[0].clone(), sizes[1].clone(), sizes[2].clone()];
                let bufs = [row_data(n, seed), Buffer::zeroed(Scalar::F32, n - short)];
                three_ways(&k, &r, &args, &bufs)
            }
            Some((xo, yo)) => {
                let args = [
                    Arg::Range { buffer: 0, offset: xo, len: n },
                    Arg::Range { buffer: 0, offset: yo, len: n - short },
                    sizes[0].clone(), sizes[1].clone(), sizes[2].clone(),
                ];
                three_ways(&k, &r, &args, &[row_data(n + 2, seed)])
            }
        };
        prop_assert_eq!(has, avx2());
    }
}

/// A row loop storing through two windows of one buffer that overlap (`y` and `z` one
/// element apart): the second store of an iteration overwrites the first's element of the
/// next one, which chunks of eight stores written one buffer after the other would not
/// (`blocked.rs`: stored buffers must be the same memory or apart).
#[test]
fn row_loop_stores_through_overlapping_windows_agree() {
    // Two stores through overlapping windows of one buffer.
    let k = kernel(
        "kernel k(y: ptr<global, f32>, z: ptr<global, f32>, cols: u32, stride: u32) {
           let b: u32 = global_id(0) * stride;
           for j: u32 in 0u32 .. cols { y[b + j] = 1.0 + (j as f32); z[b + j] = 100.0 + (j as f32); }
         }",
    );
    assert!(has_blocked_loop(&k, "vextractf128"));
    let n = 16 * 40;
    for (yo, zo) in [(0usize, 1usize), (1, 0), (0, 0), (0, 8), (3, 0)] {
        let args = [
            Arg::Range { buffer: 0, offset: yo, len: n },
            Arg::Range { buffer: 0, offset: zo, len: n },
            Arg::scalar(27u32),
            Arg::scalar(40u32),
        ];
        three_ways(&k, &NdRange::new(&[16]).with_local(&[8]), &args, &[row_data(n + 8, 1)]);
    }
}

/// A row loop whose rows of different lanes overlap (a racy kernel: work-items read
/// and write each other's elements) runs as the ordinary loop, which stores and loads in
/// the interpreter's order here; chunks of eight would read elements before the lanes
/// below had stored them (`blocked.rs`: rows must be apart, in lane order).
#[test]
fn row_loops_over_overlapping_rows_agree() {
    // Rows overlapping by all but one or three elements, in place; and write-only (every
    // lane stores the same value into a shared element).
    for (body, stride) in [
        ("x[b + j] = x[b + j] + 1.0;", 1u32),
        ("x[b + j] = x[b + j] + 1.0;", 3),
        ("y[b + j] = x[b + j] * 2.0;", 1),
    ] {
        let k = kernel(&format!(
            "kernel k(x: ptr<global, f32>, y: ptr<global, f32>, cols: u32, stride: u32) {{
               let b: u32 = global_id(0) * stride;
               for j: u32 in 0u32 .. cols {{ {body} }}
             }}"
        ));
        let n = 16 * 40;
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(24u32), Arg::scalar(stride)];
        three_ways(
            &k,
            &NdRange::new(&[16]).with_local(&[8]),
            &args,
            &[row_data(n, 1), Buffer::zeroed(Scalar::F32, n)],
        );
    }
}

/// True if `k`'s 8-lane code (plain and `-O`) has a row-blocked loop, seen by `ins`: row
/// segments loaded into (`vinsertf128`) or stored from (`vextractf128`) upper halves;
/// true without AVX2, which has no such code.
fn has_blocked_loop(k: &Kernel, ins: &str) -> bool {
    [false, true].into_iter().all(|optimize| {
        let d =
            compile(k, &X86Options { optimize, ..X86Options::default() }).unwrap().disassemble();
        !avx2() || d.find("; 8-lane AVX2 code").is_some_and(|i| d[i..].contains(ins))
    })
}

/// Row loops at the edges the blocked form must leave to the ordinary loop or get right:
/// odd, empty and negative trips, negative starts, i32 bases near the limits, u32 indices
/// that wrap, a fault in the middle of a chunk, nested loops, the counter as a value,
/// atomics, barriers, other element types, partial batches (`blocked.rs`).
#[test]
fn row_loop_edges_agree() {
    // Bounds: odd, empty, negative trips, negative lo, i32 near MAX, u32 wrap.
    let k = kernel(
        "kernel k(x: ptr<global, f32>, y: ptr<global, i32>, lo: i32, hi: i32, off: i32) {
           let b: i32 = (global_id(0) as i32) * 20i32 + off;
           for j: i32 in lo .. hi { y[b + j] = (x[b + j] * 3.0) as i32 + j; }
         }",
    );
    assert!(has_blocked_loop(&k, "vinsertf128"));
    for (lo, hi, off) in [
        (0, 19, 0),
        (5, 5, 0),
        (7, 3, 0),
        (-4, 13, 4),
        (-4, 13, 3),
        (0, 16, i32::MAX - 100),
        (0, 16, i32::MAX - 400),
        (0, 16, i32::MIN + 5),
        (3, 20, -3),
    ] {
        let n = 16 * 20 + 4;
        let args =
            [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(lo), Arg::scalar(hi), Arg::scalar(off)];
        three_ways(
            &k,
            &NdRange::new(&[16]).with_local(&[16]),
            &args,
            &[row_data(n, 2), Buffer::zeroed(Scalar::I32, n)],
        );
    }
    let k = kernel(
        "kernel k(x: ptr<global, f32>, y: ptr<global, f32>, lo: u32, hi: u32, off: u32) {
           let b: u32 = global_id(0) * 16u32 + off;
           for j: u32 in lo .. hi { y[b + j] = x[b + j] + (j as f32); }
         }",
    );
    for (lo, hi, off) in
        [(32u32, 48u32, 0u32.wrapping_sub(32)), (8, 24, u32::MAX - 7), (0, 16, u32::MAX - 300)]
    {
        let n = 16 * 16 + 16;
        let args =
            [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(lo), Arg::scalar(hi), Arg::scalar(off)];
        three_ways(
            &k,
            &NdRange::new(&[16]).with_local(&[16]),
            &args,
            &[row_data(n, 2), Buffer::zeroed(Scalar::F32, n)],
        );
    }
    // A fault in the middle of a chunk (load-only body), a division by a lane value.
    let k = kernel(
        "kernel k(x: ptr<global, f32>, z: ptr<global, f32>, y: ptr<global, f32>, d: ptr<global, u32>) {
           let b: u32 = global_id(0) * 24u32;
           var s: f32 = 0.0;
           for j: u32 in 0u32 .. 24u32 { s = s + x[b + j] * z[j * 3u32 + global_id(0)]; }
           y[global_id(0)] = s;
           var t: u32 = 0u32;
           for j: u32 in 0u32 .. 24u32 { t = t + (x[b + j] as u32) / d[global_id(0)]; }
           y[global_id(0) + 16u32] = t as f32;
         }",
    );
    for (zn, d) in [(100usize, 1u32), (40, 1), (63, 1), (200, 0)] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3)];
        let dv: Vec<u32> = (0..16).map(|i| if i == 11 { d } else { 1 }).collect();
        three_ways(
            &k,
            &NdRange::new(&[16]).with_local(&[16]),
            &args,
            &[
                row_data(16 * 24, 3),
                row_data(zn, 1),
                Buffer::zeroed(Scalar::F32, 32),
                Buffer::from_slice(&dv),
            ],
        );
    }
    // Nested loops, counter as a value, an atomic, a barrier, other element types.
    let bodies = [
        ("for i: u32 in 0u32 .. 3u32 { let c: u32 = b + i * 8u32; for j: u32 in 0u32 .. 9u32 { y[c + j] = x[c + j] + (i as f32) + (j as f32); } }", "f32"),
        ("for j: u32 in 0u32 .. 17u32 { y[b + j] = x[b + j] * 2.0; atomic_add(cn, 0u32, 1u32); }", "f32"),
        ("for j: u32 in 0u32 .. 17u32 { let t: u32 = atomic_add(cn, j, 1u32); y[b + j] = x[b + j] + (t as f32); }", "f32"),
        ("sh[local_id(0)] = x[b]; barrier(local); let o: u32 = b + 1u32; for j: u32 in 0u32 .. 17u32 { y[b + j] = x[b + j] + sh[(local_id(0) + 1u32) & 15u32]; }", "f32"),
        ("for j: u32 in 0u32 .. 17u32 { y[b + j] = x[b + j] * 2.0; }", "f64"),
        ("for j: u32 in 0u32 .. 17u32 { y[b + j] = x[b + j] * 2i64; }", "i64"),
        ("for j: u32 in 0u32 .. 17u32 { y[b + j] = x[b + j] + 1u8; }", "u8"),
        ("for j: u32 in 0u32 .. 17u32 { y[b + j] = x[b + j] + 1i32; }", "i32"),
        ("var s: u32 = 0u32; for j: u32 in 0u32 .. 17u32 { s = s + j * (x[b + j] as u32); y[b + j] = x[b + j] + 1.0; } y[b] = s as f32;", "f32"),
        ("for j: u32 in 0u32 .. 17u32 { if x[b + j] > 1.0 { y[b + j] = 1.0; } }", "f32"),
        ("for j: u32 in 0u32 .. 17u32 { y[b + j] = x[b + j]; y[b + j] = y[b + j] + 1.0; }", "f32"),
        ("for j: u32 in 0u32 .. 17u32 { let t: f32 = x[b + j]; x[b + j] = t + 1.0; y[b + j] = x[b + j]; }", "f32"),
    ];
    for (body, ty) in bodies {
        let k = kernel(&format!(
            "kernel k(x: ptr<global, {ty}>, y: ptr<global, {ty}>, cn: ptr<global, u32>) {{
               local sh: f32[16];
               let b: u32 = global_id(0) * 30u32;
               {body}
             }}"
        ));
        let n = 16 * 30;
        let sc = match ty {
            "f32" => Scalar::F32,
            "f64" => Scalar::F64,
            "i64" => Scalar::I64,
            "u8" => Scalar::U8,
            _ => Scalar::I32,
        };
        let x = match ty {
            "f32" => row_data(n, 1),
            _ => Buffer::zeroed(sc, n),
        };
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
        for short in [0usize, 5] {
            three_ways(
                &k,
                &NdRange::new(&[16]).with_local(&[16]),
                &args,
                &[x.clone(), Buffer::zeroed(sc, n - short), Buffer::zeroed(Scalar::U32, 32)],
            );
        }
    }
    // A division by a row element (zero, or i32::MIN by -1) in the middle of a chunk: the
    // lowest faulting work-item reported, as the interpreter does.
    let k = kernel(
        "kernel k(x: ptr<global, i32>, y: ptr<global, i32>) {
           let b: u32 = global_id(0) * 24u32;
           var s: i32 = 1000i32;
           var t: i32 = -2147483648i32;
           for j: u32 in 0u32 .. 24u32 { s = s + 7000i32 / x[b + j]; t = t % x[j + b] + t / x[b + j]; }
           y[global_id(0)] = s + t;
         }",
    );
    for (at, v) in
        [(None, 0), (Some(13 * 24 + 11), 0), (Some(2 * 24 + 3), -1), (Some(6 * 24 + 20), 0)]
    {
        let mut x: Vec<i32> = (0..16 * 24).map(|i| ((i % 13) - 6) | 1).collect();
        if let Some(at) = at {
            x[at] = v;
            x[9 * 24 + 17] = v;
        }
        let args = [Arg::Buffer(0), Arg::Buffer(1)];
        let bufs = [Buffer::from_slice(&x), Buffer::zeroed(Scalar::I32, 16)];
        assert_eq!(three_ways(&k, &NdRange::new(&[16]).with_local(&[16]), &args, &bufs), avx2());
    }
    // Partial batches (ranges not a multiple of 8), no guard in the kernel.
    let k = kernel(
        "kernel k(x: ptr<global, f32>, y: ptr<global, f32>) {
           let b: u32 = global_id(0) * 20u32;
           for j: u32 in 0u32 .. 19u32 { y[b + j] = x[b + j] + 1.0; }
         }",
    );
    for (g, l) in [(13u32, 13u32), (13, 1), (21, 7), (5, 5), (12, 4)] {
        let args = [Arg::Buffer(0), Arg::Buffer(1)];
        three_ways(
            &k,
            &NdRange::new(&[g]).with_local(&[l]),
            &args,
            &[row_data(16 * 20, 1), Buffer::zeroed(Scalar::F32, 16 * 20)],
        );
    }
}
