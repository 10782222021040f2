//! Groups of interleaved stores whose values load (`backends/src/x86/spmd/loading.rs`): the
//! fifth suite's `blend` (byte stores at stride 4 over a short loop's copies and a store
//! after it, computed from byte loads), 32-bit and 16-bit forms, consecutive stores that
//! swap pairs. Each case compares results and errors with the interpreter and the scalar
//! code, bit for bit: the stored buffer also passed as the loaded one (the group must then
//! store access by access), spans past the end of the stored buffer and of the loaded ones
//! (loads fault), odd sizes, guards, divergent masks.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vals, vector_listing};

use kiln_ir::launch::{Arg, NdRange};
use kiln_ir::Scalar;

/// Runs `src` (parameters `src`, `dst`, `out`, `n`) with `out` of `s * global + extra`
/// elements and the loaded buffers of `s * global + lextra`, also with `out` passed as
/// `src` or as `dst` (one buffer, read and written).
fn check(k: &kiln_ir::Kernel, ty: Scalar, s: u32, what: &str) {
    let sizes: [(u32, u32, i64, i64); 7] = [
        (37, 40, 0, 0),
        (64, 64, 0, 0),
        (64, 64, -1, 0),
        (64, 64, 0, -2),
        (61, 64, 9, 5),
        (8, 8, 0, 0),
        (9, 16, -3, 0),
    ];
    for (n, global, extra, lextra) in sizes {
        let len = (i64::from(s * global) + extra).max(1) as usize;
        let llen = (i64::from(s * global) + lextra).max(1) as usize;
        let r = NdRange::new(&[global]).with_local(&[8]);
        let bufs = vec![vals(ty, llen, 1), vals(ty, llen, 2), vals(ty, len, 3)];
        let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n)];
        agree(k, &r, &args, &bufs, &format!("{what} n={n} len={len} llen={llen}"));
        // One buffer read and written.
        let bufs = vec![vals(ty, len, 1), vals(ty, llen, 2)];
        for args in [
            vec![Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(0), Arg::scalar(n)],
            vec![Arg::Buffer(1), Arg::Buffer(0), Arg::Buffer(0), Arg::scalar(n)],
        ] {
            agree(k, &r, &args, &bufs, &format!("{what} aliased n={n} len={len}"));
        }
    }
}

#[test]
fn blend_agrees_with_the_interpreter() {
    let body = "let a: u16 = src[4 * i + 3] as u16;
        for c: u32 in 0 .. 3 {
          let t: u16 = src[4 * i + c] as u16 * a + dst[4 * i + c] as u16 * (255 - a) + 128;
          out[4 * i + c] = (t + (t >> 8) >> 8) as u8;
        }
        out[4 * i + 3] = 255;";
    let forms = [
        format!("if i < n {{ {body} }}"),
        body.to_string(),
        format!("if (i & 2u32) == 0u32 {{ {body} }}"),
    ];
    for (f, b) in forms.iter().enumerate() {
        let src = format!(
            "kernel blend(src: ptr<global, u8>, dst: ptr<global, u8>, out: ptr<global, u8>, n: u32) {{
               let i: u32 = global_id(0);
               {b}
             }}"
        );
        let k = kernel(&src);
        check(&k, Scalar::U8, 4, &format!("blend form={f}"));
        if f == 0 && avx2() {
            // The group's check that the buffers lie apart, and its one shuffle.
            let text = vector_listing(&k).join("\n");
            assert!(text.contains("vpshufb ymm0,ymm0"), "{text}");
        }
    }
}

#[test]
fn loading_groups_of_every_width_agree_with_the_interpreter() {
    for (ty, s) in [("f32", 3u32), ("u32", 4), ("i32", 12), ("u16", 2), ("i8", 3), ("u8", 2)] {
        let one = if ty == "f32" { "1.5f32".to_string() } else { format!("1{ty}") };
        // All in a loop's copies; the copies and a store after them; a plain pair.
        let last = s - 1;
        let bodies = [
            format!(
                "for c: u32 in 0 .. {s} {{ let p: u32 = {s}u32 * i + c;
                   out[p] = src[p] + dst[p] * {one}; }}"
            ),
            format!(
                "for c: u32 in 0 .. {last} {{ let p: u32 = {s}u32 * i + c;
                   let v: {ty} = src[p];
                   out[p] = v * {one} + dst[p]; }}
                 out[{s}u32 * i + {last}u32] = src[{s}u32 * i] + {one};"
            ),
        ];
        for (f, body) in bodies.iter().enumerate() {
            let src = format!(
                "kernel k(src: ptr<global, {ty}>, dst: ptr<global, {ty}>, out: ptr<global, {ty}>, n: u32) {{
                   let i: u32 = global_id(0);
                   if i < n {{ {body} }}
                 }}"
            );
            check(&kernel(&src), elem(ty), s, &format!("{ty} s={s} form={f}"));
        }
    }
    // Pairs swapped, in place where `out` is `src` or `dst`: the second store's value then
    // reads what the first wrote (each work-item its own elements: no race between them).
    let src =
        "kernel k(src: ptr<global, f32>, dst: ptr<global, f32>, out: ptr<global, f32>, n: u32) {
      let i: u32 = global_id(0);
      if i < n {
        out[2 * i] = src[2 * i + 1] + dst[2 * i + 1];
        out[2 * i + 1] = src[2 * i] * 2.0 + dst[2 * i];
      }
    }";
    check(&kernel(src), Scalar::F32, 2, "swap");
    if avx2() {
        // The group's test that the loaded buffers lie apart from the stored one.
        let text = vector_listing(&kernel(src)).join("\n");
        assert!(text.contains("lea r11,[r10+r11*4]"), "{text}");
    }
}

fn elem(ty: &str) -> Scalar {
    Scalar::ALL.iter().copied().find(|e| e.to_string() == ty).unwrap()
}
