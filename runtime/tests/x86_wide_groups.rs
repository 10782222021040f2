//! Groups of interleaved 32-bit accesses at strides 9 to 16 (row chunks and 8x8 transposes,
//! `backends/src/x86/spmd/rows.rs`), and load groups whose loads feed private elements (a
//! short loop's copies `m[e] = a[16 * i + e]`) at every stride. Each case compares results
//! and errors with the interpreter and the scalar code, bit for bit: spans past the end
//! (the last lanes fault), odd sizes, guards, divergent masks, uniform offsets, wrapping
//! bases, the same buffer read and written.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vals, vector_listing};

use kiln_ir::launch::{Arg, NdRange};
use kiln_ir::Scalar;

fn elem(ty: &str) -> Scalar {
    Scalar::ALL.iter().copied().find(|e| e.to_string() == ty).unwrap()
}

/// The launches: (n, global size, extra elements past `s * global`).
const SIZES: [(u32, u32, i64); 6] =
    [(37, 40, 0), (64, 64, 0), (64, 64, -1), (61, 64, 9), (8, 8, 0), (9, 16, -3)];

/// Runs `src` (parameters `o`, `x`, `n`, `b`: `o` of `s * global + extra` elements) at every
/// size and offset.
fn check(src: &str, ty: &str, s: u32, what: &str) {
    let k = kernel(src);
    for (n, global, extra) in SIZES {
        for b in [0u32, 1, u32::MAX - 2] {
            let len = (i64::from(s * global) + extra).max(1) as usize;
            let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(b)];
            let bufs = vec![vals(elem(ty), len, 1), vals(elem(ty), 2 * global as usize, 2)];
            let r = NdRange::new(&[global]).with_local(&[8]);
            agree(&k, &r, &args, &bufs, &format!("{what} n={n} len={len} b={b}"));
        }
    }
}

#[test]
fn wide_store_groups_agree_with_the_interpreter() {
    for ty in ["f32", "u32", "i32"] {
        for s in 9..=16u32 {
            let st = |base: &str, rev: bool| -> String {
                let mut ks: Vec<u32> = (0..s).collect();
                if rev {
                    ks.reverse();
                }
                ks.iter()
                    .map(|k| format!("o[{base} + {k}u32] = xv * {}{ty} + {k}{ty};\n", k + 2))
                    .collect()
            };
            let bodies = [
                format!("if i < n {{ let p: u32 = {s}u32 * i;\n{} }}", st("p", false)),
                st(&format!("i * {s}u32"), true),
                format!("if i < n {{ {} }}", st(&format!("{s}u32 * i + b"), false)),
                format!("if (i & 2u32) == 0u32 {{ {} }}", st(&format!("{s}u32 * i"), true)),
            ];
            for (f, body) in bodies.iter().enumerate() {
                let src = format!(
                    "kernel k(o: ptr<global, {ty}>, x: ptr<global, {ty}>, n: u32, b: u32) {{
                       let i: u32 = global_id(0);
                       let xv: {ty} = x[i];
                       {body}
                     }}"
                );
                check(&src, ty, s, &format!("store {ty} s={s} form={f}"));
                if f == 1 && avx2() {
                    let text = vector_listing(&kernel(&src)).join("\n");
                    assert!(text.contains("vextractf128"), "{text}");
                }
            }
        }
    }
}

#[test]
fn wide_load_groups_agree_with_the_interpreter() {
    for ty in ["f32", "u32", "i32"] {
        for s in 9..=16u32 {
            // `let`s in a shuffled order, summed with weights (each value's place shows).
            let order: Vec<u32> = (0..s).map(|k| (2 * s + 2 - k) % s).collect();
            let lets: String =
                order.iter().map(|k| format!("let v{k}: {ty} = o[p + {k}u32];\n")).collect();
            let sum: String =
                (0..s).map(|k| format!(" + v{k} * {}{ty}", k + 1)).collect::<String>();
            let bodies = [
                format!("if i < n {{ let p: u32 = {s}u32 * i;\n{lets} x[i] = x[i]{sum}; }}"),
                format!("let p: u32 = {s}u32 * i + b;\n{lets} x[i] = x[i]{sum};"),
                format!(
                    "if (i & 2u32) == 0u32 {{ let p: u32 = i * {s}u32;\n{lets} x[i] = x[i]{sum}; }}"
                ),
            ];
            for (f, body) in bodies.iter().enumerate() {
                let src = format!(
                    "kernel k(o: ptr<global, {ty}>, x: ptr<global, {ty}>, n: u32, b: u32) {{
                       let i: u32 = global_id(0);
                       {body}
                     }}"
                );
                check(&src, ty, s, &format!("load {ty} s={s} form={f}"));
                if f == 0 && avx2() {
                    let text = vector_listing(&kernel(&src)).join("\n");
                    assert!(text.contains("vinsertf128"), "{text}");
                }
            }
        }
    }
}

/// A short loop copying a work-item's record into a private array (the copies are a load
/// group whose members are private stores), then reading it back in another order; also
/// with the record in the buffer the result goes to (the same buffer read and written).
#[test]
fn private_load_groups_agree_with_the_interpreter() {
    for ty in ["f32", "u32", "i32"] {
        for s in [2u32, 3, 4, 5, 8, 9, 12, 16] {
            let back: String =
                (0..s).map(|k| format!(" + m[{}u32] * {}{ty}", (k * 3 + 1) % s, k + 1)).collect();
            let fill = |base: &str| format!("for e: u32 in 0 .. {s} {{ m[e] = o[{base} + e]; }}");
            let bodies = [
                format!("if i < n {{ {} x[i] = x[i]{back}; }}", fill(&format!("{s}u32 * i"))),
                format!("{} x[i] = x[i]{back};", fill(&format!("i * {s}u32 + b"))),
                format!(
                    "if (i & 2u32) == 0u32 {{ {} x[i] = x[i]{back}; }}",
                    fill(&format!("{s}u32 * i"))
                ),
                // Filled by some lanes only: the others read the zeros of the declaration.
                format!(
                    "if (i & 2u32) == 0u32 {{ {} }} x[i] = x[i]{back};",
                    fill(&format!("{s}u32 * i"))
                ),
                // The record's first element written from it: the group's loads are before.
                format!(
                    "if i < n {{ {} o[{s}u32 * i] = x[i]{back}; }}",
                    fill(&format!("{s}u32 * i"))
                ),
            ];
            for (f, body) in bodies.iter().enumerate() {
                let src = format!(
                    "kernel k(o: ptr<global, {ty}>, x: ptr<global, {ty}>, n: u32, b: u32) {{
                       private m: {ty}[{s}];
                       let i: u32 = global_id(0);
                       {body}
                     }}"
                );
                check(&src, ty, s, &format!("private {ty} s={s} form={f}"));
                if f == 0 && s >= 9 && avx2() {
                    let text = vector_listing(&kernel(&src)).join("\n");
                    assert!(text.contains("vinsertf128"), "{text}");
                }
            }
        }
    }
}

/// The fourth suite's `mat4` (a 4x4 matrix per work-item through a private array): its
/// record loads are one group.
#[test]
fn mat4_agrees_with_the_interpreter() {
    let src = "kernel mat4(a: ptr<global, f32>, c: ptr<global, f32>, n: u32, b: u32) {
      private m: f32[16];
      let i: u32 = global_id(0);
      if i < n {
        for e: u32 in 0 .. 16 { m[e] = a[16 * i + e]; }
        for r: u32 in 0 .. 4 {
          for col: u32 in 0 .. 4 {
            var acc: f32 = 0.0;
            for e: u32 in 0 .. 4 { acc = acc + m[4 * r + e] * m[4 * e + col]; }
            c[16 * i + 4 * r + col] = acc;
          }
        }
      }
    }";
    let k = kernel(src);
    for (n, global, extra) in SIZES {
        let len = (i64::from(16 * global) + extra).max(1) as usize;
        let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(0u32)];
        for out in [len, 16 * global as usize] {
            let bufs = vec![vals(Scalar::F32, len, 1), vals(Scalar::F32, out, 2)];
            let r = NdRange::new(&[global]).with_local(&[8]);
            agree(&k, &r, &args, &bufs, &format!("mat4 n={n} len={len} out={out}"));
        }
    }
}
