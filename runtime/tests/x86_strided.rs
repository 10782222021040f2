//! Loads at a constant stride of the work-item id (`x[2 * i + 1]`, `img[3 * i + k]`, the
//! elements of a `vload4(p, 4 * i)`), which the 8-lane code reads as a span of contiguous
//! vector loads, permuted and blended, when the whole span is in bounds, and gathers
//! otherwise. Each case compares results and errors with the interpreter and the scalar
//! code: spans running past the end where the lanes' own elements are in bounds (no
//! fault), lanes' elements past the end (the interpreter's fault), odd sizes, guards,
//! uniform offsets, `let`-bound indices (the `-O` pipeline's common subexpressions).
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vals, vector_listing};

use kiln_ir::launch::{Arg, NdRange};
use kiln_ir::Scalar;

fn elem(ty: &str) -> Scalar {
    Scalar::ALL.iter().copied().find(|e| e.to_string() == ty).unwrap()
}

#[test]
fn strided_loads_agree_with_the_interpreter() {
    for ty in ["f32", "u32", "i32"] {
        for s in [2u32, 3, 4, 5, 8] {
            // Inline, `let`-bound and shifted forms, a constant and a uniform offset.
            let forms = [
                format!("x[{s}u32 * i + k] + x[{s}u32 * i]"),
                format!("x[i * {s}u32 + (k + 1u32)]"),
            ];
            for (f, load) in forms.iter().enumerate() {
                let k = kernel(&format!(
                    "kernel k(o: ptr<global, {ty}>, x: ptr<global, {ty}>, n: u32, k: u32) {{
                       let i: u32 = global_id(0);
                       if i < n {{
                         let p: u32 = {s}u32 * i;
                         let q: u32 = p + {last}u32;
                         o[i] = {load} + x[q] + x[p];
                       }}
                     }}",
                    last = s - 1
                ));
                for (n, global, extra) in
                    [(37u32, 40u32, 0i64), (64, 64, 0), (64, 64, -1), (61, 64, 5), (8, 8, 0)]
                {
                    for off in [0u32, 1, s - 1] {
                        let len = (i64::from(s * n) + extra).max(1) as usize;
                        let args =
                            vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(off)];
                        let bufs = vec![vals(elem(ty), n as usize, 1), vals(elem(ty), len, 2)];
                        let what = format!("{ty} s={s} form={f} n={n} len={len} k={off}");
                        agree(&k, &NdRange::new(&[global]).with_local(&[8]), &args, &bufs, &what);
                    }
                }
            }
        }
    }
}

#[test]
fn strided_loads_without_a_guard_fault_as_the_interpreter() {
    // Signed indices, a negative offset (the first lanes fault), a span past the end.
    let k = kernel(
        "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, b: i32) {
           let i: i32 = global_id(0) as i32;
           o[i] = x[3 * i + b] * 2.0 + x[i << 1];
         }",
    );
    for (b, len) in [(0i32, 96usize), (2, 96), (3, 96), (-1, 96), (-20, 200), (0, 90), (5, 300)] {
        let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(b)];
        let bufs = vec![vals(Scalar::F32, 32, 1), vals(Scalar::F32, len, 2)];
        agree(&k, &NdRange::new(&[32]), &args, &bufs, &format!("b={b} len={len}"));
    }
}

#[test]
fn interleaved_pairs_and_vload4_agree_and_load_spans() {
    let cmul = kernel(
        "kernel cmul(a: ptr<global, f32>, b: ptr<global, f32>, c: ptr<global, f32>, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             let ar: f32 = a[2 * i];
             let ai: f32 = a[2 * i + 1];
             let br: f32 = b[2 * i];
             let bi: f32 = b[2 * i + 1];
             c[2 * i] = ar * br - ai * bi;
             c[2 * i + 1] = ar * bi + ai * br;
           }
         }",
    );
    let premul = kernel(
        "kernel premul(px: ptr<global, f32>, out: ptr<global, f32>, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             let p: f32x4 = vload4(px, 4 * i);
             let a: f32 = extract(p, 3);
             vstore(out, 4 * i, p * f32x4(a, a, a, 1.0));
           }
         }",
    );
    for n in [1u32, 7, 8, 9, 33, 100] {
        let r = NdRange::new(&[n.div_ceil(8) * 8]).with_local(&[8]);
        let f = |len: u32, s| vals(Scalar::F32, len as usize, s);
        let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n)];
        agree(&cmul, &r, &args, &[f(2 * n, 1), f(2 * n, 2), f(2 * n, 3)], &format!("cmul {n}"));
        let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
        agree(&premul, &r, &args, &[f(4 * n, 1), f(4 * n, 2)], &format!("premul {n}"));
    }
    if avx2() {
        for k in [&cmul, &premul] {
            let text = vector_listing(k).join("\n");
            assert!(text.contains("vpermps"), "{text}");
        }
    } else {
        kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
    }
}

#[test]
fn strided_bytes_agree_with_the_interpreter() {
    // 8-bit elements at strides 2 to 4 (one `vpshufb` span), signed and unsigned, and a
    // 16-bit one (per-lane loads), guarded and unguarded, spans past the end.
    for ty in ["u8", "i8", "u16"] {
        for s in [2u32, 3, 4, 5] {
            let k = kernel(&format!(
                "kernel k(o: ptr<global, i32>, x: ptr<global, {ty}>, n: u32, k: u32) {{
                   let i: u32 = global_id(0);
                   if i < n {{
                     let p: u32 = {s}u32 * i;
                     o[i] = (x[p] as i32) * 3 + (x[p + k] as i32) - (x[{s}u32 * i + {last}u32] as i32);
                   }}
                 }}",
                last = s - 1
            ));
            for (n, global, extra) in [(37u32, 40u32, 0i64), (64, 64, 0), (64, 64, -1), (61, 64, 9)]
            {
                for off in [0u32, 1, s - 1, s] {
                    let len = (i64::from(s * n) + extra).max(1) as usize;
                    let args =
                        vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(off)];
                    let bufs = vec![vals(Scalar::I32, n as usize, 1), vals(elem(ty), len, 2)];
                    let what = format!("{ty} s={s} n={n} len={len} k={off}");
                    agree(&k, &NdRange::new(&[global]).with_local(&[8]), &args, &bufs, &what);
                }
            }
        }
    }
    let rgb = kernel(
        "kernel rgb2gray(rgb: ptr<global, u8>, gray: ptr<global, u8>, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             let r: u32 = rgb[3 * i] as u32;
             let g: u32 = rgb[3 * i + 1] as u32;
             let b: u32 = rgb[3 * i + 2] as u32;
             gray[i] = (77 * r + 150 * g + 29 * b + 128 >> 8) as u8;
           }
         }",
    );
    for n in [1u32, 5, 8, 11, 16, 40, 99] {
        let r = NdRange::new(&[n.div_ceil(8) * 8]).with_local(&[8]);
        let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
        let bufs = [vals(Scalar::U8, 3 * n as usize, 4), vals(Scalar::U8, n as usize, 5)];
        agree(&rgb, &r, &args, &bufs, &format!("rgb2gray {n}"));
    }
    if avx2() {
        let text = vector_listing(&rgb).join("\n");
        assert!(text.contains("vpshufb"), "{text}");
    } else {
        kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
    }
}

#[test]
fn strided_stores_agree_with_the_interpreter() {
    // 32-bit stores at strides 2 to 8: one component per store statement (the others keep
    // their values), guarded (masked), unguarded, spans and lanes past the end.
    for ty in ["f32", "u32"] {
        for s in [2u32, 3, 4, 8] {
            let k = kernel(&format!(
                "kernel k(o: ptr<global, {ty}>, x: ptr<global, {ty}>, n: u32, k: u32) {{
                   let i: u32 = global_id(0);
                   if i < n {{
                     let p: u32 = {s}u32 * i;
                     o[p + k] = x[i];
                     if (i & 2u32) == 0u32 {{
                       o[{s}u32 * i] = x[i] + x[i];
                     }}
                   }}
                   o[i * {s}u32 + {last}u32] = x[i];
                 }}",
                last = s - 1
            ));
            for (n, global, extra) in [(37u32, 40u32, 0i64), (64, 64, 0), (64, 64, -1), (61, 64, 9)]
            {
                for off in [0u32, 1, s - 1, s] {
                    let len = (i64::from(s * global) + extra).max(1) as usize;
                    let args =
                        vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(off)];
                    let bufs = vec![vals(elem(ty), len, 1), vals(elem(ty), global as usize, 2)];
                    let what = format!("{ty} s={s} n={n} len={len} k={off}");
                    agree(&k, &NdRange::new(&[global]).with_local(&[8]), &args, &bufs, &what);
                }
            }
            if s == 3 && avx2() {
                let text = vector_listing(&k).join("\n");
                assert!(text.contains("vmaskmovps [") && text.contains("vpermps"), "{text}");
            }
        }
    }
}
