//! Accesses at `global_id(0)` plus a loop-varying uniform offset on the 8-lane code: a `var`
//! stepped by a uniform value (`-O`'s `t_iv0` of `x[t * m + i]`, or written so) kept as its
//! offset (backends/src/x86/spmd/offsetvars.rs), so its accesses are contiguous vector ones,
//! and 64-bit elements at such indices as two vector halves (spmd/contig64.rs). Every
//! element width, guards over ranges rounded up to the group, partial batches, spans past
//! the end in later trips and rows (the interpreter's fault, of the right work-item),
//! indices wrapping around 2^32 inside a batch, aliasing, and the `var`s the rewrite must
//! leave alone (a divergent step, a step that is not an addition, a division by the
//! variable, whose message quotes the source), against the interpreter and the scalar code
//! bit for bit.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vals, vector_listing};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::launch::{Arg, NdRange};
use kiln_ir::Scalar;

/// Every element type the lanes store, with its name in the source.
const TYPES: [(&str, Scalar); 8] = [
    ("f64", Scalar::F64),
    ("i64", Scalar::I64),
    ("u64", Scalar::U64),
    ("f32", Scalar::F32),
    ("i32", Scalar::I32),
    ("u32", Scalar::U32),
    ("u16", Scalar::U16),
    ("u8", Scalar::U8),
];

/// A 1-D range of `n` rounded up to groups of `l`.
fn range(n: u32, l: u32) -> NdRange {
    NdRange::new(&[n.div_ceil(l) * l]).with_local(&[l])
}

/// The listing's gathers and per-lane stores (each lane's index sign-extended into `r10`).
fn lane_accesses(lines: &[String]) -> usize {
    lines.iter().filter(|l| l.starts_with("vgather") || l.starts_with("vpgather")).count()
        + lines.iter().filter(|l| l.starts_with("movsxd r10")).count()
}

/// The listing's whole-batch accesses at lane 0's index in `rax` of elements of `bytes`
/// bytes: vector moves and extending loads whose address is `base + rax * bytes`.
fn span_accesses(lines: &[String], bytes: usize) -> usize {
    let at = if bytes == 1 { "+rax]".to_string() } else { format!("+rax*{bytes}]") };
    let wide = ["vmovupd", "vmovups", "vmovdqu", "vmovq", "vpmovzx", "vpmovsx"];
    lines.iter().filter(|l| wide.iter().any(|w| l.starts_with(w)) && l.contains(&at)).count()
}

/// `ewma`'s shape on element type `ty`: a running value along a time-major series,
/// `x[t * m + i]` read and `y[t * m + i]` written in each trip (as written; `-O` makes the
/// index a stepped `var`).
fn series(ty: &str) -> kiln_ir::Kernel {
    kernel(&format!(
        "kernel series(x: ptr<global, {ty}>, y: ptr<global, {ty}>, steps: u32, m: u32) {{
           let i: u32 = global_id(0);
           if i < m {{
             var s: {ty} = x[i];
             y[i] = s;
             for t: u32 in 1 .. steps {{
               s = s + x[t * m + i] - x[i];
               y[t * m + i] = s;
             }}
           }}
         }}"
    ))
}

/// The same walk with the stepped index written as a `var` (what `-O` makes of `series`),
/// one more offset read, and a second `var` derived from the first.
fn stepped(ty: &str) -> kiln_ir::Kernel {
    kernel(&format!(
        "kernel stepped(x: ptr<global, {ty}>, y: ptr<global, {ty}>, steps: u32, m: u32) {{
           let i: u32 = global_id(0);
           if i < m {{
             var s: {ty} = x[i];
             var j: u32 = m + i;
             var k: u32 = i;
             for t: u32 in 1 .. steps {{
               k = j - m;
               s = s + x[j] - x[k];
               y[j] = s;
               j = j + m;
             }}
           }}
         }}"
    ))
}

#[test]
fn stepped_series_of_every_width_agree() {
    for (ty, scalar) in TYPES {
        for k in [series(ty), stepped(ty)] {
            for (m, steps, l, extra) in [
                (37u32, 5u32, 8u32, 0usize),
                (64, 4, 64, 0),
                (61, 3, 16, 0),
                (8, 9, 8, 0),
                (5, 2, 8, 0),
                // Spans past the end in a later trip: `y` or `x` one element short.
                (37, 5, 8, usize::MAX),
                (64, 3, 32, usize::MAX - 1),
            ] {
                let n = (m * steps) as usize;
                let (xn, yn) = match extra {
                    usize::MAX => (n, n - 1),
                    e if e == usize::MAX - 1 => (n - 1, n),
                    _ => (n, n),
                };
                let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(steps), Arg::scalar(m)];
                let bufs = vec![vals(scalar, xn, 3), vals(scalar, yn, 5)];
                let what = format!("{} {ty} m={m} steps={steps} l={l} x={xn} y={yn}", k.name());
                agree(&k, &range(m, l), &args, &bufs, &what);
                // `y` the same buffer as `x` (each trip reads and writes one row).
                let alias =
                    vec![Arg::Buffer(0), Arg::Buffer(0), Arg::scalar(steps), Arg::scalar(m)];
                agree(&k, &range(m, l), &alias, &bufs[..1], &format!("{what} aliased"));
            }
        }
        if avx2() {
            // The `var` form, as written, and `series` after `-O`: no gathers, no per-lane
            // stores, and whole-batch accesses of the element's width at lane 0's index.
            let bytes = (scalar.bits() / 8) as usize;
            let opt = X86Options { optimize: true, ..X86Options::default() };
            let p = compile(&series(ty), &opt).unwrap();
            let text = p.disassemble();
            let at = text.find("; 8-lane AVX2 code").expect("8-lane code");
            let optimized: Vec<String> = text[at..]
                .lines()
                .map(|l| l.trim().split_once("  ").map_or(l.trim(), |(_, i)| i.trim()).to_string())
                .collect();
            for (what, lines) in [("stepped", vector_listing(&stepped(ty))), ("-O", optimized)] {
                let narrow = bytes < 4;
                // (8/16-bit elements keep per-lane stores for partial batches' masks.)
                if !narrow {
                    assert_eq!(lane_accesses(&lines), 0, "{ty} {what}:\n{}", lines.join("\n"));
                }
                assert!(span_accesses(&lines, bytes) >= 2, "{ty} {what}:\n{}", lines.join("\n"));
            }
        } else {
            kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
        }
    }
}

#[test]
fn indices_wrapping_inside_a_batch_agree() {
    // `j = j + m` with `m` near 2^32 steps the lanes' indices down: in a batch, lanes whose
    // index wrapped below 0 are far out of bounds while the others are in, so the access at
    // lane 0's index must place each lane in bounds at its own element.
    for (ty, scalar) in TYPES {
        let guarded = kernel(&format!(
            "kernel wrap(x: ptr<global, {ty}>, y: ptr<global, {ty}>, steps: u32, m: u32, len: u32) {{
               let i: u32 = global_id(0);
               var j: u32 = i;
               for t: u32 in 0 .. steps {{
                 if j < len {{
                   y[j] = x[j] - y[j];
                 }}
                 j = j + m;
               }}
             }}"
        ));
        let bare = kernel(&format!(
            "kernel wrap(x: ptr<global, {ty}>, y: ptr<global, {ty}>, steps: u32, m: u32, len: u32) {{
               let i: u32 = global_id(0);
               var j: u32 = i + m;
               for t: u32 in 0 .. steps {{
                 y[j] = x[j] - y[j];
                 j = j + 1;
               }}
             }}"
        ));
        for (k, m, steps, global) in [
            (&guarded, 3u32.wrapping_neg(), 6u32, 24u32),
            (&guarded, 5u32.wrapping_neg(), 4, 16),
            (&guarded, 1u32.wrapping_neg(), 9, 8),
            // Lanes 0..4 at 2^32 - 5 .. 2^32 - 1: work-item 0's fault.
            (&bare, 5u32.wrapping_neg(), 2, 8),
            // In bounds after the wrap at work-item 8's batch: no fault until `len`.
            (&bare, 0, 3, 32),
        ] {
            let len = 40u32;
            let args = vec![
                Arg::Buffer(0),
                Arg::Buffer(1),
                Arg::scalar(steps),
                Arg::scalar(m),
                Arg::scalar(len),
            ];
            let bufs = vec![vals(scalar, len as usize, 2), vals(scalar, len as usize, 7)];
            let what = format!("{} {ty} m={m} steps={steps} global={global}", k.name());
            agree(k, &NdRange::new(&[global]).with_local(&[8]), &args, &bufs, &what);
        }
        if !avx2() {
            kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
        } else if scalar.bits() >= 32 {
            // Contiguous (masked) accesses, not gathers and per-lane stores (8/16-bit
            // elements keep those under a mask).
            let lines = vector_listing(&guarded);
            assert_eq!(lane_accesses(&lines), 0, "{ty}:\n{}", lines.join("\n"));
        }
    }
}

#[test]
fn variables_the_rewrite_leaves_alone_agree() {
    // A divergent step (`j` stays per lane), a step that is not an addition, a variable
    // read by a division that faults (the message quotes the source's text), one assigned
    // under a divergent `if`, and 2-D rows.
    let cases = [
        "kernel a(x: ptr<global, f32>, y: ptr<global, f32>, n: u32, d: u32) {
           let i: u32 = global_id(0);
           if i < n {
             var j: u32 = i;
             for t: u32 in 0 .. 4 {
               y[j] = x[j] * 2.0;
               j = j + (x[i] as u32 & 1) + 1;
             }
           }
         }",
        "kernel b(x: ptr<global, f32>, y: ptr<global, f32>, n: u32, d: u32) {
           let i: u32 = global_id(0);
           if i < n {
             var j: u32 = i;
             for t: u32 in 0 .. 3 {
               y[j] = x[j];
               j = j * 2 + 1;
             }
           }
         }",
        "kernel c(x: ptr<global, u32>, y: ptr<global, u32>, n: u32, d: u32) {
           let i: u32 = global_id(0);
           if i < n {
             var j: u32 = i + 1;
             for t: u32 in 0 .. 3 {
               y[j - 1] = x[j - 1] / (j - d);
               j = j + n;
             }
           }
         }",
        "kernel e(x: ptr<global, f64>, y: ptr<global, f64>, n: u32, d: u32) {
           let i: u32 = global_id(0);
           var j: u32 = i;
           for t: u32 in 0 .. 3 {
             if x[i] > 0.0 {
               j = j + d;
             }
             y[j] = x[j];
           }
         }",
    ];
    for src in cases {
        let k = kernel(src);
        for (n, d, len) in [(21u32, 7u32, 80usize), (32, 33, 100), (16, 0, 70), (40, 3, 50)] {
            let scalar = match k.name() {
                "c" => Scalar::U32,
                "e" => Scalar::F64,
                _ => Scalar::F32,
            };
            let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(d)];
            let bufs = vec![vals(scalar, len, 4), vals(scalar, len, 9)];
            let what = format!("{} n={n} d={d} len={len}", k.name());
            agree(&k, &range(n, 8), &args, &bufs, &what);
        }
    }
    let rows = kernel(
        "kernel rows(x: ptr<global, f64>, y: ptr<global, f64>, w: u32, h: u32, steps: u32) {
           let c: u32 = global_id(0);
           let r: u32 = global_id(1);
           if c < w && r < h {
             var j: u32 = r * w + c;
             var s: f64 = 0.0;
             for t: u32 in 0 .. steps {
               s = s + x[j];
               y[j] = s;
               j = j + w * h;
             }
           }
         }",
    );
    for (w, h, steps, short) in [(19u32, 5u32, 3u32, 0usize), (16, 4, 2, 0), (13, 6, 3, 5)] {
        let n = (w * h * steps) as usize;
        let args = vec![
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::scalar(w),
            Arg::scalar(h),
            Arg::scalar(steps),
        ];
        let bufs = vec![vals(Scalar::F64, n, 1), vals(Scalar::F64, n - short, 2)];
        let r = NdRange::new(&[w.div_ceil(8) * 8, h.div_ceil(2) * 2]).with_local(&[8, 2]);
        agree(&rows, &r, &args, &bufs, &format!("rows {w}x{h} steps={steps} short={short}"));
    }
    if avx2() {
        let lines = vector_listing(&rows);
        assert_eq!(lane_accesses(&lines), 0, "{}", lines.join("\n"));
    }
}
