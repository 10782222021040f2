//! Adversarial review (session 11, issue 24) of two x86 8-lane features: ranges of batches
//! fixed for the call for `if`s bounding `global_id(0)` (`backends/src/x86/spmd/hoist.rs`,
//! their unmasked, unchecked copies) and vector values split into per-lane statements
//! (`backends/src/x86/spmd/vectors.rs`). Kernels written the way users write them; each
//! runs three ways (interpreter, scalar code, 8-lane code plain and `-O`), errors word for
//! word, and where the feature should apply the kernel must get 8-lane code (a kernel that
//! silently falls back to the scalar code would prove nothing).
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{avx2, f32s, fallback, kernel, three_ways, vector_listing};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::results_match;
use kiln_ir::{Imm, Scalar};
use kiln_runtime::device::cpu::{CpuRun, CpuRunOptions};

/// Runs `k` three ways and requires 8-lane code (where AVX2 is there).
fn agree(k: &kiln_ir::Kernel, r: &NdRange, args: &[Arg], bufs: &[Buffer], what: &str) {
    assert_eq!(three_ways(k, r, args, bufs), avx2(), "{what}\n{k}");
}

/// How many `if`s of `k` take their unmasked copy by a range fixed for the call (lane 0's
/// id compared with the range's top, `cmp rbx,[r15+..]` then `jle`); 0 without AVX2.
fn ranges(k: &kiln_ir::Kernel) -> usize {
    if !avx2() {
        return 0;
    }
    let code = vector_listing(k);
    code.windows(2)
        .filter(|w| w[0].starts_with("cmp rbx,[r15+") && w[1].starts_with("jle "))
        .count()
}

/// Requires `n` ranges in `k` (where AVX2 is there): the kernels below test what they
/// mean to only while the ranges are taken.
fn expect_ranges(k: &kiln_ir::Kernel, n: usize) {
    if avx2() {
        assert_eq!(ranges(k), n, "{k}");
    }
}

/// `len` elements of `ty`: small distinct values (wrapping in narrow types).
fn iota(ty: Scalar, len: usize, seed: u32) -> Buffer {
    let mut b = Buffer::zeroed(ty, len);
    for i in 0..len {
        let v = (i as u32 * 7 + seed) % 97;
        let x = if ty.is_float() {
            Imm::float(ty, f64::from(v) * 0.25 - 3.0)
        } else if ty.is_signed() {
            Imm::int(ty, i128::from(v) - 40)
        } else {
            Imm::int(ty, i128::from(v))
        };
        b.set(i, x).expect("an element of the buffer's type");
    }
    b
}

/// The example the cpu suite runs (`examples/stencil2d.kir`).
const STENCIL: &str = include_str!("../../examples/stencil2d.kir");

/// The stencil with global offsets in both dimensions (ids start past the grid, so `c`
/// indexes with the offset in it), its source and destination windows of one buffer
/// (disjoint, and the source window shorter than the grid so that the proof's length is
/// the window's, not the buffer's); global sizes and groups not multiples of 8 too (those
/// groups run on the scalar code).
#[test]
fn stencil_with_offsets_and_windows_of_one_buffer() {
    let k = kernel(STENCIL);
    expect_ranges(&k, 2);
    // (offset x, offset y, w, h, src window offset, src window len)
    let cases: &[(u32, u32, u32, u32, usize, usize)] = &[
        (8, 1, 40, 6, 0, 240),
        (8, 1, 40, 6, 3, 240),
        (8, 1, 40, 6, 3, 200),
        (16, 2, 33, 7, 5, 231),
        (16, 2, 33, 7, 5, 230),
        (0, 0, 17, 5, 1, 85),
        (24, 0, 30, 5, 7, 149),
        (8, 3, 24, 4, 0, 96),
    ];
    for &(ox, oy, w, h, so, sl) in cases {
        let n = (w * h) as usize;
        let total = so + sl + n + 16;
        let args = [
            Arg::Range { buffer: 0, offset: so, len: sl },
            Arg::Range { buffer: 0, offset: so + sl + 3, len: n },
            Arg::scalar(w),
            Arg::scalar(h),
        ];
        let bufs = [f32s(total, w ^ h)];
        for (gw, lw) in [(32u32, 8u32), (24, 8), (48, 16), (20, 20), (40, 20), (36, 12)] {
            let r = NdRange::new(&[gw, h]).with_local(&[lw, 1]).with_offset(&[ox, oy]);
            agree(&k, &r, &args, &bufs, &format!("offset {ox},{oy} w {w} h {h} window {so}+{sl}"));
        }
    }
}

/// The same stencil on several threads (a launch over the inline limit, so that it is
/// split over the pool): each thread's call computes its own range.
#[test]
fn stencil_on_several_threads() {
    let k = kernel(STENCIL);
    assert_eq!(fallback(&k), None);
    let p = compile(&k, &X86Options::default()).unwrap();
    for (gw, gh, w, h) in [(128u32, 48u32, 121u32, 47u32), (96, 64, 96, 64), (136, 40, 130, 33)] {
        let n = (w * h) as usize;
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(w), Arg::scalar(h)];
        let bufs = vec![f32s(n, w), Buffer::zeroed(Scalar::F32, n)];
        let mut want = bufs.clone();
        let r = NdRange::new(&[gw, gh]).with_local(&[8, 2]);
        run(&k, &r, &args, &mut want).unwrap();
        for threads in [2, 3, 4] {
            let mut got = bufs.clone();
            p.run_parallel(&r, &args, &mut got, threads, &CpuRunOptions::default()).unwrap();
            if let Err(m) = results_match(&want, &got) {
                panic!("{threads} threads, {gw}x{gh} w {w} h {h}: {m}");
            }
        }
        // The source one row short: the last interior row's `src[c + w]` faults in every
        // thread's groups of that row; the error is the interpreter's (the lowest group's).
        let short = vec![f32s(n - w as usize, w), Buffer::zeroed(Scalar::F32, n)];
        let want = run(&k, &r, &args, &mut short.clone());
        assert!(want.is_err());
        for threads in [2, 3] {
            let got = p.run_parallel(&r, &args, &mut short.clone(), threads, &Default::default());
            assert_eq!(want, got, "{threads} threads, {gw}x{gh} w {w} h {h}");
        }
    }
}

/// Bounds that are not fixed for the call though uniform in a batch: a `for` counter, a
/// `var` changed before the `if`, a `let` of a load. A range computed once per call from
/// any of them would be wrong. A `let` inside another block of values fixed for the call
/// (`n - m`) is computed once per row before the ranges (`rowwise.rs`): its `if` takes the
/// one range, which the runs below check.
#[test]
fn bounds_that_change_during_the_call() {
    let k = kernel(
        "kernel k(o: ptr<global, u32>, a: ptr<global, u32>, n: u32, m: u32) {
           let i: u32 = global_id(0);
           for j: u32 in 0u32 .. m {
             if i > j * 8u32 && i < n - j { o[i] = o[i] + a[i] + j; }
           }
           var b: u32 = 3u32;
           b = b + m;
           if i >= b && i < n { o[i] = o[i] * 3u32; }
           let q: u32 = a[0];
           if i > q && i <= n { o[i] = o[i] + 1000u32; }
           if m > 1u32 {
             let e: u32 = n - m;
             if i < e && i > 1u32 { o[i] = o[i] ^ 77u32; }
           }
         }",
    );
    expect_ranges(&k, 1);
    for (n, m, a0) in [(40u32, 0u32, 0u32), (40, 3, 9), (33, 5, 16), (64, 2, 40), (7, 8, 1)] {
        for len in [64usize, 50] {
            let mut a = iota(Scalar::U32, 64, 3);
            a.set(0, Imm::int(Scalar::U32, i128::from(a0))).unwrap();
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(m)];
            let bufs = [Buffer::zeroed(Scalar::U32, len), a];
            let r = NdRange::new(&[64]).with_local(&[16]);
            agree(&k, &r, &args, &bufs, &format!("n {n} m {m} a0 {a0} len {len}"));
        }
    }
}

/// Fixed comparisons of other dimensions' ids inside the conjunction: `local_id(1)`,
/// `group_id(1)`, `global_id(2)` and sizes, with groups of several rows and 3-D launches,
/// so that a call's row is not the group's first.
#[test]
fn fixed_comparisons_of_other_dimensions() {
    let k = kernel(
        "kernel k(o: ptr<global, f32>, a: ptr<global, f32>, n: u32) {
           let x: u32 = global_id(0);
           let c: u32 = (global_id(2) * global_size(1) + global_id(1)) * global_size(0) + x;
           if x >= 3u32 && local_id(1) > 0u32 && x < global_size(0) - 2u32 && group_id(1) < n {
             o[c] = a[c] + a[c + 1u32] * 2.0;
           }
           if global_id(2) != 1u32 && x > 1u32 && x <= n * 8u32 {
             o[c] = o[c] + a[c - 1u32];
           }
         }",
    );
    expect_ranges(&k, 2);
    for (dims, local) in [
        (vec![32u32, 4], vec![8u32, 2]),
        (vec![24, 6], vec![8, 3]),
        (vec![32, 2, 3], vec![16, 2, 1]),
        (vec![16, 3, 2], vec![8, 1, 2]),
    ] {
        let total: u32 = dims.iter().product();
        for n in [0u32, 1, 2, 3] {
            for len in [total as usize + 1, total as usize] {
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
                let bufs = [Buffer::zeroed(Scalar::F32, len), f32s(len, n)];
                let r = NdRange::new(&dims).with_local(&local);
                agree(&k, &r, &args, &bufs, &format!("{dims:?}/{local:?} n {n} len {len}"));
            }
        }
    }
}

/// `i32` ids and bounds (not taken as a range: signed), `!=`, and bounds of 0, huge or
/// making the range empty or reversed; an `else` and an `if` nested in the branch, and an
/// access at an offset of `-w` or `+w` that leaves the buffer in some lanes.
#[test]
fn signed_ids_odd_bounds_and_nesting() {
    let k = kernel(
        "kernel k(o: ptr<global, i32>, a: ptr<global, i32>, lo: u32, hi: u32, s: i32, w: u32) {
           let i: u32 = global_id(0);
           let si: i32 = global_id(0) as i32;
           if si > s && si < s + 20 { o[i] = o[i] + a[i]; }
           if i > lo && i < hi {
             o[i] = o[i] + a[i + w] - a[i - w];
             if i != lo + 5u32 && i < hi - 3u32 { o[i] = o[i] * 2; } else { o[i] = o[i] - 1; }
           } else {
             o[i] = o[i] + 7;
           }
         }",
    );
    expect_ranges(&k, 1);
    let bounds =
        [(0u32, 0u32), (0, 1), (0, 64), (8, 17), (9, 16), (30, 10), (7, u32::MAX), (u32::MAX, 3)];
    for (lo, hi) in bounds {
        for (s, w) in [(-5i32, 0u32), (3, 1), (-1, 8), (40, 9), (i32::MIN, 63), (0, 64)] {
            let args = [
                Arg::Buffer(0),
                Arg::Buffer(1),
                Arg::scalar(lo),
                Arg::scalar(hi),
                Arg::scalar(s),
                Arg::scalar(w),
            ];
            let bufs = [Buffer::zeroed(Scalar::I32, 64), iota(Scalar::I32, 64, 5)];
            let r = NdRange::new(&[64]).with_local(&[32]);
            agree(&k, &r, &args, &bufs, &format!("lo {lo} hi {hi} s {s} w {w}"));
        }
    }
}

/// A store in the branch to the buffer its loads read, race-free (each work-item reads
/// only what it writes, or what no one writes: a window of the same buffer past the
/// written one), and windows overlapping the written one read only at the lane's own
/// element.
#[test]
fn stores_aliasing_loads_in_the_branch() {
    let k = kernel(
        "kernel k(o: ptr<global, f32>, a: ptr<global, f32>, n: u32, t: u32) {
           let i: u32 = global_id(0);
           if i >= 2u32 && i < n {
             o[i] = o[i] * 2.0 + a[i + t];
             o[i] = o[i] + a[i + t];
           }
         }",
    );
    expect_ranges(&k, 1);
    for (n, t, a_off, a_len) in [
        (40u32, 0u32, 0usize, 40usize),
        (40, 0, 64, 40),
        (40, 3, 64, 43),
        (40, 3, 64, 42),
        (33, 8, 48, 41),
        (48, 0, 0, 48),
    ] {
        // `a` is the same elements as `o` when `a_off` is 0 (o[i] read through both).
        let args = [
            Arg::Range { buffer: 0, offset: 0, len: 48 },
            Arg::Range { buffer: 0, offset: a_off, len: a_len },
            Arg::scalar(n),
            Arg::scalar(t),
        ];
        let bufs = [f32s(128, n + t)];
        let r = NdRange::new(&[48]).with_local(&[8]);
        agree(&k, &r, &args, &bufs, &format!("n {n} t {t} a {a_off}+{a_len}"));
    }
}

/// Global offsets near the top of `u32`: lane ids and bounds near 2^32.
#[test]
fn ids_near_the_top_of_u32() {
    let k = kernel(
        "kernel k(o: ptr<global, u32>, lo: u32, hi: u32, base: u32) {
           let i: u32 = global_id(0);
           if i > lo && i <= hi { o[i - base] = o[i - base] + i; }
         }",
    );
    expect_ranges(&k, 1);
    let top = u32::MAX - 63;
    for (lo, hi) in [(top, u32::MAX), (top + 7, u32::MAX - 8), (0, u32::MAX), (top + 9, top + 20)] {
        let args = [Arg::Buffer(0), Arg::scalar(lo), Arg::scalar(hi), Arg::scalar(top)];
        let bufs = [Buffer::zeroed(Scalar::U32, 64)];
        let r = NdRange::new(&[64]).with_local(&[16]).with_offset(&[top]);
        if let Ok(()) = run(&k, &r, &args, &mut bufs.to_vec()) {
            agree(&k, &r, &args, &bufs, &format!("lo {lo} hi {hi}"));
        } else {
            three_ways(&k, &r, &args, &bufs);
        }
    }
}

/// Vectors of every element width the lanes keep: u8, i16, f16, f64, i64 (2, 4 and 8
/// lanes), guarded and with the last work-items' accesses past the end.
#[test]
fn vectors_of_narrow_and_wide_elements() {
    for (ty, lanes, lit) in [
        ("u8", 8u8, "3u8"),
        ("u8", 4, "250u8"),
        ("i16", 8, "-7i16"),
        ("i16", 2, "300i16"),
        ("f16", 4, "1.5"),
        ("f64", 2, "0.25"),
        ("f64", 4, "-2.0"),
        ("i64", 2, "-3i64"),
        ("u64", 4, "5u64"),
    ] {
        let is_f16 = ty == "f16";
        // f16 is storage only: arithmetic through f32.
        let (lhs, rhs) = if is_f16 {
            (
                "(extract(v, 0) as f32 + extract(v, 1) as f32) as f16".to_string(),
                format!("({lit} as f16)"),
            )
        } else {
            (format!("extract(v, 0) + extract(v, 1) * {lit}"), lit.to_string())
        };
        let src = format!(
            "kernel k(x: ptr<global, {ty}>, o: ptr<global, {ty}>, n: u32) {{
               let i: u32 = global_id(0);
               if i < n {{
                 let v: {ty}x{lanes} = vload{lanes}(x, i * {lanes}u32);
                 let s: {ty} = {lhs};
                 vstore(o, i * {lanes}u32, {ty}x{lanes}(s));
                 o[i * {lanes}u32 + 1u32] = {rhs};
               }}
             }}"
        );
        let k = kernel(&src);
        let scalar = Scalar::from_name(ty).unwrap();
        assert_eq!(fallback(&k), None, "{k}");
        for len in [16 * lanes as usize, 16 * lanes as usize - 1, 9 * lanes as usize] {
            for n in [16u32, 10, 9] {
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
                let bufs = [iota(scalar, len, 1), Buffer::zeroed(scalar, len)];
                let r = NdRange::new(&[16]).with_local(&[8]);
                agree(&k, &r, &args, &bufs, &format!("{ty}x{lanes} len {len} n {n}"));
            }
        }
    }
}

/// Vector `let`s of one name in sibling blocks (the IR has no shadowing: by another load,
/// and by a vector not loaded), used after and between those blocks, a vector `var`,
/// `extract` in an index, a `vstore` of a `select` of vectors, vectors read in a `while`
/// condition, and a 2-D kernel.
#[test]
fn vector_scopes_selects_whiles_and_2d() {
    let shadow = kernel(
        "kernel k(x: ptr<global, u32>, o: ptr<global, u32>, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             let v: u32x4 = vload4(x, (i + 1u32) * 4u32);
             o[i * 4u32] = extract(v, 0);
           } else {
             let v: u32x4 = u32x4(9u32, 8u32, 7u32, 6u32) + u32x4(i);
             o[i * 4u32 + 1u32] = extract(v, 1);
           }
           {
             let v: u32x4 = vload4(x, i * 4u32);
             o[i * 4u32 + 2u32] = extract(v, 2);
           }
           let v: u32x4 = vload4(x, 60u32 - i * 4u32);
           o[i * 4u32 + 3u32] = extract(v, 3) + x[extract(v, 0) % 16u32];
           var acc: u32x4 = vload4(x, i * 4u32);
           acc = acc * u32x4(3u32);
           if extract(acc, 0) > 40u32 { acc = vload4(x, 60u32 - i * 4u32); }
           vstore(o, 64u32 + i * 4u32, acc);
         }",
    );
    for (n, len) in [(8u32, 68usize), (3, 64), (16, 64)] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
        let bufs = [iota(Scalar::U32, len, 2), Buffer::zeroed(Scalar::U32, 128)];
        let r = NdRange::new(&[16]).with_local(&[8]);
        agree(&shadow, &r, &args, &bufs, &format!("n {n} len {len}"));
    }
    let sel = kernel(
        "kernel k(x: ptr<global, f32>, o: ptr<global, f32>, n: u32) {
           let i: u32 = global_id(0);
           let a: f32x4 = vload4(x, i * 4u32);
           let b: f32x4 = vload4(x, n * 4u32);
           vstore(o, i * 4u32, select(extract(a, 0) > extract(b, 1), a, b));
           var j: u32 = 0u32;
           while extract(vload4(x, j * 4u32), 0) < 4.0 && j < n {
             j = j + 1u32;
           }
           o[i * 4u32 + 1u32] = j as f32;
         }",
    );
    for (n, len) in [(0u32, 64usize), (3, 64), (15, 64), (16, 64), (2, 60)] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
        let bufs = [f32s(len, 4), Buffer::zeroed(Scalar::F32, 64)];
        let r = NdRange::new(&[16]).with_local(&[8]);
        three_ways(&sel, &r, &args, &bufs);
    }
    let two_d = kernel(
        "kernel k(x: ptr<global, f32>, o: ptr<global, f32>, w: u32) {
           let c: u32 = global_id(1) * w + global_id(0) * 4u32;
           let v: f32x4 = vload4(x, c);
           let u: f32x4 = vload4(x, c + w);
           vstore(o, c, v + u * f32x4(extract(v, 3)));
         }",
    );
    assert_eq!(fallback(&two_d), None, "{two_d}");
    for (w, rows, gw) in [(32u32, 4u32, 8u32), (64, 3, 16), (36, 3, 8), (34, 2, 8)] {
        let len = (w * (rows + 1)) as usize;
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(w)];
        let bufs = [f32s(len, w), Buffer::zeroed(Scalar::F32, len)];
        let r = NdRange::new(&[gw, rows]).with_local(&[8, 1]);
        agree(&two_d, &r, &args, &bufs, &format!("w {w} rows {rows} gw {gw}"));
    }
}

/// Vector loads from a local array filled before a barrier, a vector access to a private
/// array (the lanes refuse it; the scalar code must agree), and indices whose `u32`
/// arithmetic wraps (`i * 4 + off` past 2^32, as a huge `off` makes it).
#[test]
fn vectors_in_local_and_private_memory_and_wrapping_indices() {
    let local = kernel(
        "kernel k(x: ptr<global, f32>, o: ptr<global, f32>, n: u32) {
           local t: f32[64];
           let l: u32 = local_id(0);
           t[l] = x[global_id(0)];
           t[l + 32u32] = x[global_id(0)] * 2.0;
           barrier(local);
           let v: f32x4 = vload4(t, (l % 16u32) * 4u32);
           let w: f32x2 = vload2(t, (l % 32u32) * 2u32);
           o[global_id(0)] = extract(v, 0) + extract(v, 3) + extract(w, 1);
         }",
    );
    assert_eq!(fallback(&local), None, "{local}");
    for g in [32u32, 64, 96] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(0u32)];
        let bufs = [f32s(96, g), Buffer::zeroed(Scalar::F32, 96)];
        let r = NdRange::new(&[g]).with_local(&[32]);
        agree(&local, &r, &args, &bufs, &format!("global {g}"));
    }
    let private = kernel(
        "kernel k(x: ptr<global, u32>, o: ptr<global, u32>, n: u32) {
           private p: u32[8];
           let i: u32 = global_id(0);
           p[i % 8u32] = x[i];
           let v: u32x4 = vload4(p, (i % 2u32) * 4u32 + n);
           o[i] = extract(v, 0) + extract(v, 3);
         }",
    );
    assert!(fallback(&private).is_some() || !avx2(), "{private}");
    for n in [0u32, 4, 1, 8] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
        let bufs = [iota(Scalar::U32, 16, 1), Buffer::zeroed(Scalar::U32, 16)];
        three_ways(&private, &NdRange::new(&[16]).with_local(&[8]), &args, &bufs);
    }
    let wrap = kernel(
        "kernel k(x: ptr<global, u32>, o: ptr<global, u32>, off: u32) {
           let i: u32 = global_id(0);
           let v: u32x4 = vload4(x, i * 4u32 + off);
           vstore(o, i * 4u32 - off, v);
         }",
    );
    assert_eq!(fallback(&wrap), None, "{wrap}");
    for off in [0u32, 4, u32::MAX - 3, u32::MAX - 31, 1 << 31, u32::MAX] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(off)];
        let bufs = [iota(Scalar::U32, 64, 1), Buffer::zeroed(Scalar::U32, 64)];
        let r = NdRange::new(&[16]).with_local(&[8]);
        agree(&wrap, &r, &args, &bufs, &format!("off {off}"));
    }
}

/// A vector load and store inside a range's branch (the branch's element accesses are
/// at a per-lane index, so not proven), and a scalar access beside them that is proven.
#[test]
fn vectors_inside_a_ranged_branch() {
    let k = kernel(
        "kernel k(x: ptr<global, f32>, o: ptr<global, f32>, q: ptr<global, f32>, n: u32, s: u32) {
           let i: u32 = global_id(0);
           if i > 0u32 && i < n {
             let v: f32x4 = vload4(x, i * 4u32 + s);
             q[i + s] = extract(v, 1) + x[i - 1u32];
             vstore(o, i * 4u32, v * f32x4(2.0));
           }
         }",
    );
    expect_ranges(&k, 1);
    for (n, s, len) in [(16u32, 0u32, 64usize), (16, 4, 64), (16, 2, 80), (12, 0, 50), (9, 8, 60)] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n), Arg::scalar(s)];
        let q = Buffer::zeroed(Scalar::F32, 20);
        let bufs = [f32s(len, s), Buffer::zeroed(Scalar::F32, len), q];
        let r = NdRange::new(&[16]).with_local(&[8]);
        agree(&k, &r, &args, &bufs, &format!("n {n} s {s} len {len}"));
    }
}

/// Inside a range's branch, accesses at the proven index again under a nested divergent
/// `if` and in a loop (not covered by the proof, and under a mask: masked-off lanes must
/// not store), the index a `let` used at every access (which `-O` may share).
#[test]
fn proven_index_reused_under_a_mask_in_the_branch() {
    let k = kernel(
        "kernel k(o: ptr<global, f32>, a: ptr<global, f32>, n: u32, m: u32) {
           let x: u32 = global_id(0);
           let c: u32 = x + m;
           if x > 0u32 && x < n {
             o[c] = a[c] + 1.0;
             if a[c] > 0.5 { o[c] = o[c] * 2.0; } else { o[c] = o[c] - 7.0; }
             for j: u32 in 0u32 .. m { if a[c - 1u32] < 0.0 { o[c] = o[c] + a[c - 1u32]; } }
           }
         }",
    );
    expect_ranges(&k, 1);
    for (n, m, len) in [(32u32, 0u32, 34usize), (32, 2, 34), (31, 3, 33), (20, 1, 40), (32, 3, 34)]
    {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(m)];
        let bufs = [Buffer::zeroed(Scalar::F32, len), f32s(len, n + m)];
        let r = NdRange::new(&[32]).with_local(&[8]);
        agree(&k, &r, &args, &bufs, &format!("n {n} m {m} len {len}"));
    }
}

/// Vector accesses through windows of one buffer (alignment is the window's index, not
/// the buffer's), eight lanes of 64-bit elements (sixteen halves), and the order of a
/// store's faults: its index's load, then its lanes' loads, then its own check, the
/// lowest work-item's first.
#[test]
fn vector_windows_wide_lanes_and_fault_order() {
    let k = kernel(
        "kernel k(x: ptr<global, f32>, o: ptr<global, f32>, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             let v: f32x4 = vload4(x, i * 4u32);
             vstore(o, i * 4u32, f32x4(extract(v, 3), extract(v, 2), extract(v, 1), 1.0));
           }
         }",
    );
    assert_eq!(fallback(&k), None, "{k}");
    for (xo, xl, oo, ol, n) in
        [(1usize, 64usize, 70usize, 64usize, 16u32), (3, 62, 67, 64, 16), (0, 64, 64, 63, 16)]
    {
        let args = [
            Arg::Range { buffer: 0, offset: xo, len: xl },
            Arg::Range { buffer: 0, offset: oo, len: ol },
            Arg::scalar(n),
        ];
        let bufs = [f32s(140, 9)];
        let r = NdRange::new(&[16]).with_local(&[8]);
        agree(&k, &r, &args, &bufs, &format!("x {xo}+{xl} o {oo}+{ol}"));
    }
    for ty in ["f64", "i64"] {
        let k = kernel(&format!(
            "kernel k(x: ptr<global, {ty}>, o: ptr<global, {ty}>, n: u32) {{
               let i: u32 = global_id(0);
               let v: {ty}x8 = vload8(x, i * 8u32);
               let s: {ty} = extract(v, 0) + extract(v, 1) + extract(v, 2) + extract(v, 3)
                 + extract(v, 4) + extract(v, 5) + extract(v, 6) + extract(v, 7);
               vstore(o, i * 8u32, {ty}x8(s) - v);
             }}"
        ));
        let scalar = Scalar::from_name(ty).unwrap();
        for len in [128usize, 127, 64] {
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(0u32)];
            let bufs = [iota(scalar, len, 4), Buffer::zeroed(scalar, len)];
            let r = NdRange::new(&[16]).with_local(&[8]);
            // (Sixteen halves in flight may be more than the lanes keep: agree either way.)
            three_ways(&k, &r, &args, &bufs);
        }
    }
    let order = kernel(
        "kernel k(x: ptr<global, f32>, o: ptr<global, f32>, p: ptr<global, u32>, t: u32) {
           let i: u32 = global_id(0);
           vstore(o, p[i], f32x4(x[i + t], 1.0, x[i * t], 2.0));
         }",
    );
    assert_eq!(fallback(&order), None, "{order}");
    for pl in [16usize, 12, 3] {
        for t in [0u32, 2, 5, 9, 30] {
            for (j, shift) in [(0usize, 0u32), (5, 2), (2, 1)] {
                let mut p = Buffer::zeroed(Scalar::U32, pl);
                for e in 0..pl {
                    let v = if e == j { e as u32 * 4 + shift } else { e as u32 * 4 };
                    p.set(e, Imm::int(Scalar::U32, i128::from(v))).unwrap();
                }
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(t)];
                let bufs = [f32s(40, t), Buffer::zeroed(Scalar::F32, 62), p];
                let r = NdRange::new(&[16]).with_local(&[8]);
                agree(&order, &r, &args, &bufs, &format!("pl {pl} t {t} j {j} shift {shift}"));
            }
        }
    }
}

/// Vector accesses in a row loop (`b + j` with `b` a lane's row, as the blocked loops
/// take: eight iterations at a time), aligned and misaligned, beside element loads of the
/// same rows, and with an `i64` index.
#[test]
fn vectors_in_row_loops_and_wide_indices() {
    let rows = kernel(
        "kernel k(x: ptr<global, f32>, o: ptr<global, f32>, m: u32, s: u32) {
           let r: u32 = global_id(0);
           let b: u32 = r * 64u32;
           var acc: f32 = 0.0;
           for j: u32 in 0u32 .. m {
             let e: f32 = x[b + j];
             let v: f32x2 = vload2(x, b + j * s);
             acc = acc + e * extract(v, 1) + extract(v, 0);
           }
           o[r] = acc;
         }",
    );
    assert_eq!(fallback(&rows), None, "{rows}");
    for (m, s, len) in [
        (0u32, 2u32, 1024usize),
        (16, 2, 1024),
        (9, 2, 1024),
        (24, 2, 1000),
        (8, 1, 1024),
        (3, 1, 1024),
    ] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(m), Arg::scalar(s)];
        let bufs = [f32s(len, m), Buffer::zeroed(Scalar::F32, 16)];
        let r = NdRange::new(&[16]).with_local(&[8]);
        agree(&rows, &r, &args, &bufs, &format!("m {m} s {s} len {len}"));
    }
    let wide = kernel(
        "kernel k(x: ptr<global, f32>, o: ptr<global, f32>, off: i64) {
           let i: i64 = global_id(0) as i64;
           let v: f32x4 = vload4(x, i * 4i64 + off);
           vstore(o, i * 4i64, v);
         }",
    );
    for off in [0i64, 4, -4, 2, 1 << 33, i64::MIN] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(off)];
        let bufs = [f32s(64, 1), Buffer::zeroed(Scalar::F32, 64)];
        three_ways(&wide, &NdRange::new(&[16]).with_local(&[8]), &args, &bufs);
    }
}

/// A vector loaded from local memory before a barrier and read after the memory was
/// overwritten (its lanes must be saved across the barriers: region code for groups of one
/// row, batch-by-batch rounds for groups of two rows), and vector loads in a loop whose
/// trip count differs per lane.
#[test]
fn vectors_across_barriers_and_in_divergent_loops() {
    let k = kernel(
        "kernel k(x: ptr<global, f32>, o: ptr<global, f32>, n: u32) {
           local t: f32[64];
           let l: u32 = local_id(1) * local_size(0) + local_id(0);
           let g: u32 = global_id(1) * global_size(0) + global_id(0);
           t[l] = x[g];
           t[l + 32u32] = x[g] + 1.0;
           barrier(local);
           let v: f32x4 = vload4(t, (l % 16u32) * 4u32);
           barrier(local);
           t[l] = 0.0;
           t[l + 32u32] = -1.0;
           barrier(local);
           o[g] = extract(v, 0) + extract(v, 3) * 2.0 + t[(l + 1u32) % 32u32];
         }",
    );
    assert_eq!(fallback(&k), None, "{k}");
    for (global, local) in
        [(vec![32u32], vec![32u32]), (vec![64], vec![32]), (vec![16, 4], vec![16, 2])]
    {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(0u32)];
        let bufs = [f32s(64, 3), Buffer::zeroed(Scalar::F32, 64)];
        let r = NdRange::new(&global).with_local(&local);
        agree(&k, &r, &args, &bufs, &format!("{global:?}/{local:?}"));
    }
    let looped = kernel(
        "kernel k(x: ptr<global, f32>, o: ptr<global, f32>, n: u32) {
           let i: u32 = global_id(0);
           var j: u32 = 0u32;
           var acc: f32 = 0.0;
           while j < (i & 3u32) + n {
             let v: f32x4 = vload4(x, (i + j) * 4u32);
             acc = acc + extract(v, 1) - extract(v, 2);
             if extract(v, 0) > 0.0 { vstore(o, i * 4u32, v); }
             j = j + 1u32;
           }
           o[i * 4u32 + 1u32] = acc;
         }",
    );
    assert_eq!(fallback(&looped), None, "{looped}");
    for (n, len) in [(0u32, 96usize), (1, 96), (3, 96), (3, 80), (5, 90)] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
        let bufs = [f32s(len, n), Buffer::zeroed(Scalar::F32, 64)];
        let r = NdRange::new(&[16]).with_local(&[8]);
        agree(&looped, &r, &args, &bufs, &format!("n {n} len {len}"));
    }
}

/// Vector forms as written inline: a `vload` stored directly, a `vload` in an `if`
/// condition, vector comparisons in a `select`, `constant` memory, and f16 lanes rounded
/// from f32 values.
#[test]
fn inline_vector_forms() {
    let k = kernel(
        "kernel k(x: ptr<constant, f32>, o: ptr<global, f32>, h: ptr<global, f16>, n: u32) {
           let i: u32 = global_id(0);
           vstore(o, i * 4u32, vload4(x, i * 4u32 + n));
           if extract(vload2(x, i * 2u32), 1) > 0.0 {
             let a: f32x4 = vload4(x, i * 4u32);
             let b: f32x4 = vload4(x, 60u32 - i * 4u32);
             vstore(o, i * 4u32, select(a > b, a - b, b * f32x4(0.3)));
           }
           let q: f32x4 = vload4(x, i * 4u32);
           vstore(h, i * 4u32, f16x4(extract(q, 0) as f16, (extract(q, 1) * 1000.1) as f16,
             (extract(q, 2) / 3.0) as f16, (extract(q, 3) * 70000.0) as f16));
         }",
    );
    assert_eq!(fallback(&k), None, "{k}");
    for (n, len) in [(0u32, 64usize), (4, 68), (4, 64), (2, 68)] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n)];
        let bufs = [f32s(len, n), Buffer::zeroed(Scalar::F32, 64), Buffer::zeroed(Scalar::F16, 64)];
        let r = NdRange::new(&[16]).with_local(&[8]);
        three_ways(&k, &r, &args, &bufs);
    }
}

/// A triangle: bounds on `global_id(0)` from the row (`y < x && x < w - y`), the branch's
/// accesses at `y * w + x` and at offsets that reach the row before (`- y - 1`) and past
/// the buffer's end in the last rows.
#[test]
fn triangular_bounds_from_the_row() {
    let k = kernel(
        "kernel k(o: ptr<global, u32>, a: ptr<global, u32>, w: u32) {
           let x: u32 = global_id(0);
           let y: u32 = global_id(1);
           let c: u32 = mad(y, w, x);
           if y < x && x < w - y {
             o[c] = a[c - y - 1u32] + a[c + w] * 3u32;
           }
         }",
    );
    expect_ranges(&k, 1);
    for (gw, gh, w, len) in
        [(32u32, 6u32, 32u32, 224usize), (32, 6, 32, 192), (40, 5, 37, 222), (24, 8, 20, 160)]
    {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(w)];
        let bufs = [Buffer::zeroed(Scalar::U32, len), iota(Scalar::U32, len, w)];
        let r = NdRange::new(&[gw, gh]).with_local(&[8, 1]);
        agree(&k, &r, &args, &bufs, &format!("{gw}x{gh} w {w} len {len}"));
    }
}
