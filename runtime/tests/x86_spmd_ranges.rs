//! The x86 JIT's 8-lane code for `if`s whose condition is a conjunction of comparisons of
//! `global_id(0)` with values fixed for the call and of comparisons fixed for the call (a
//! stencil's `x > 0 && x < w - 1 && y > 0 && y < h - 1`): each call computes the range of
//! batches whose eight lanes all take the branch, and those batches run its unmasked copy
//! after two compares of lane 0's id (`backends/src/x86/spmd/hoist.rs`, `hoist_ranges`),
//! its contiguous accesses at `global_id(0)` plus a value fixed for the call proven in
//! bounds for the range (so unchecked there).
//! Every kernel runs three ways (interpreter, scalar code, 8-lane code, plain and `-O`) and
//! must agree, errors included: bounds at, one before and one after batch edges, bounds
//! that wrap (`w - 1` with `w` 0), empty ranges, global offsets, faults inside the branch.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{avx2, f32s, kernel, three_ways, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

/// Whether the vector listing tests lane 0's id against a range (`cmp rbx,[r15+..]` then
/// `jle`), how many times.
fn range_tests(k: &kiln_ir::Kernel) -> usize {
    let code = vector_listing(k);
    code.windows(2)
        .filter(|w| w[0].starts_with("cmp rbx,[r15+") && w[1].starts_with("jle "))
        .count()
}

/// The example the cpu suite runs (`examples/stencil2d.kir`).
const STENCIL: &str = include_str!("../../examples/stencil2d.kir");

/// The 2-D stencil as the benchmark writes it, over grids whose width is not a multiple of
/// 8, narrower and wider than the launch, one column wide, empty, and with a buffer one row
/// short of `h` (the last interior row's `src[c + w]` faults).
#[test]
fn stencil_interiors_run_unmasked_and_agree() {
    let k = kernel(STENCIL);
    if avx2() {
        assert_eq!(range_tests(&k), 2);
        // The interior's five loads and its store, proven for the range, are plain vector
        // accesses at lane 0's index (`c - 1` at a displacement from `c`'s) with no
        // whole-batch test before them.
        let code = vector_listing(&k);
        let plain = code
            .windows(2)
            .filter(|w| {
                (w[1].contains(",[rcx+rax*4]")
                    || w[1].contains(",[rcx+rax*4-")
                    || w[1].starts_with("vmovups [rdx+rax*4]"))
                    && w[1].starts_with("vmovups")
                    && !w[0].starts_with("jg ")
            })
            .count();
        assert!(plain >= 6, "{}", code.join("\n"));
    }
    let cases: &[(u32, u32, u32, u32, usize)] = &[
        // (launch width, launch height, w, h, buffer rows)
        (32, 6, 32, 6, 6),
        (24, 5, 17, 5, 5),
        (24, 5, 16, 5, 5),
        (24, 5, 15, 4, 5),
        (24, 4, 9, 4, 4),
        (24, 4, 8, 4, 4),
        (16, 4, 1, 4, 4),
        (16, 4, 2, 3, 4),
        (16, 3, 0, 3, 3),
        (16, 3, 40, 3, 3),
        (40, 5, 33, 5, 4),
        (40, 5, 31, 6, 5),
    ];
    for &(gw, gh, w, h, rows) in cases {
        let n = (w.max(1) as usize) * rows;
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(w), Arg::scalar(h)];
        let bufs = [f32s(n, w + h), Buffer::zeroed(Scalar::F32, n)];
        for local in [8u32, 16] {
            if gw % local != 0 {
                continue;
            }
            let r = NdRange::new(&[gw, gh]).with_local(&[local, 1]);
            assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "{gw}x{gh} w {w} h {h}");
        }
    }
}

/// Every comparison form on either side (`<`, `<=`, `>`, `>=`, through a `let` of
/// `global_id(0)` and directly), with a fixed comparison among them and an `else`, over
/// bounds around batch edges, 0, and `u32::MAX`, with and without a global offset.
#[test]
fn every_bound_form_agrees_at_batch_edges() {
    let k = kernel(
        "kernel k(o: ptr<global, u32>, a: u32, b: u32, c: u32) {
           let i: u32 = global_id(0);
           if i >= a && i < b { o[i - 64u32] = o[i - 64u32] + 1u32; }
           if a < i && b >= i && c > 2u32 { o[i - 64u32] = o[i - 64u32] * 3u32; }
           if global_id(0) <= b && c <= global_id(0) {
             o[i - 64u32] = o[i - 64u32] + 7u32;
           } else {
             o[i - 64u32] = o[i - 64u32] ^ 5u32;
           }
           if i > b - 9u32 && i < c + a { o[i - 64u32] = o[i - 64u32] + 100u32; }
         }",
    );
    if avx2() {
        assert_eq!(range_tests(&k), 4);
    }
    let vals = [0u32, 1, 63, 64, 65, 71, 72, 73, 79, 80, 81, 95, 96, 100, u32::MAX - 3, u32::MAX];
    for (j, &a) in vals.iter().enumerate() {
        for &b in vals.iter().skip(j % 3).step_by(3) {
            for &c in [0u32, 3, 70, 80, 88, u32::MAX].iter() {
                let args = [Arg::Buffer(0), Arg::scalar(a), Arg::scalar(b), Arg::scalar(c)];
                let bufs = [Buffer::zeroed(Scalar::U32, 40)];
                let r = NdRange::new(&[40]).with_local(&[8]).with_offset(&[64]);
                assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "a {a} b {b} c {c}");
            }
        }
    }
}

/// A branch taken by whole batches after code that faulted in an earlier lane of the
/// batch, and a fault inside the branch's unmasked copy (a gather, and a contiguous access
/// whose proof narrows the range): the first error is the interpreter's.
#[test]
fn faults_before_and_inside_the_branch_agree() {
    let k = kernel(
        "kernel k(o: ptr<global, f32>, a: ptr<global, f32>, s: u32, n: u32, t: u32) {
           let i: u32 = global_id(0);
           let v: f32 = a[i + s];
           if i > 2u32 && i < n { o[i] = v + a[i * 2u32] + a[i + t]; }
         }",
    );
    if avx2() {
        assert_eq!(range_tests(&k), 1);
    }
    for (s, n, len) in
        [(0u32, 32u32, 64usize), (0, 32, 40), (9, 32, 40), (0, 17, 33), (30, 5, 40), (0, 0, 64)]
    {
        // `t` puts lane 7 of the batch at 24 one past the end, at the end, and before it.
        for t in [0u32, 7, 8, 9, 10, 24, 33] {
            let args =
                [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(s), Arg::scalar(n), Arg::scalar(t)];
            let bufs = [Buffer::zeroed(Scalar::F32, 32), f32s(len, 1)];
            let r = NdRange::new(&[32]).with_local(&[16]);
            assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "s {s} n {n} len {len} t {t}");
        }
    }
}

/// Offsets that are negative as `i32` (`i - 1u32`, `i - s`): proven where lane 0's id is
/// at least `-s` (so the interior of `i > 0 && i < n` runs plain loads), and where a lane's
/// index wraps the masked code reports the fault.
#[test]
fn negative_offsets_are_proven_where_in_bounds() {
    let k = kernel(
        "kernel k(o: ptr<global, f32>, a: ptr<global, f32>, s: u32, n: u32, m: u32) {
           let i: u32 = global_id(0);
           if i > 0u32 && i < n { o[i] = a[i - 1u32] + a[i + 1u32]; }
           if i > m && i < n { o[i] = o[i] + a[i - s]; }
         }",
    );
    if avx2() {
        assert_eq!(range_tests(&k), 2);
        let code = vector_listing(&k);
        let plain = code
            .windows(2)
            .filter(|w| {
                w[1].starts_with("vmovups ymm")
                    && (w[1].contains(",[rcx+rax*4]") || w[1].contains(",[rcx+rax*4-"))
            })
            .filter(|w| !w[0].starts_with("jg "))
            .count();
        assert!(plain >= 3, "{}", code.join("\n"));
    }
    // (`i > 15u32` starts the range at the batch of 16, whose lanes wrap for `s` 17 or 20.)
    for s in [0u32, 1, 2, 7, 8, 9, 16, 17, 20, 100, u32::MAX] {
        for n in [0u32, 1, 9, 31, 32, 33] {
            for m in [0u32, 7, 15] {
                let args = [
                    Arg::Buffer(0),
                    Arg::Buffer(1),
                    Arg::scalar(s),
                    Arg::scalar(n),
                    Arg::scalar(m),
                ];
                let bufs = [Buffer::zeroed(Scalar::F32, 32), f32s(33, 2)];
                let r = NdRange::new(&[32]).with_local(&[8]);
                assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "s {s} n {n} m {m}");
            }
        }
    }
}

/// Conditions the range does not cover keep the lane masks: a bound computed in the batch
/// (a load), `!=`, `||`, a signed comparison, and a name declared twice.
#[test]
fn other_conditions_keep_their_masks() {
    let k = kernel(
        "kernel k(o: ptr<global, u32>, p: ptr<global, u32>, a: u32, t: i32) {
           let i: u32 = global_id(0);
           if i < p[0] { o[i] = o[i] + 1u32; }
           if i != a && i < 20u32 { o[i] = o[i] + 2u32; }
           if i < a || i > 30u32 { o[i] = o[i] + 4u32; }
           if (i as i32) < t { o[i] = o[i] + 8u32; }
           if i != 3u32 { let q: u32 = 9u32; if i < q { o[i] = o[i] + 16u32; } }
           if i != 5u32 { let q: u32 = 33u32; if i < q { o[i] = o[i] + 32u32; } }
         }",
    );
    if avx2() {
        assert_eq!(range_tests(&k), 0);
    }
    for (a, t, p0) in [(0u32, 0i32, 0u32), (9, 12, 16), (40, -3, 40), (17, 40, 7)] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(a), Arg::scalar(t)];
        let bufs = [Buffer::zeroed(Scalar::U32, 40), Buffer::from_slice(&[p0])];
        let r = NdRange::new(&[40]).with_local(&[8]);
        assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "a {a} t {t} p0 {p0}");
    }
}
