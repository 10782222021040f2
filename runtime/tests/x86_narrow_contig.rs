//! Loads and stores of 8- and 16-bit elements (and f16's bits) at `global_id(0)` plus a
//! uniform value, outside any control mask: the 8-lane code reads the batch's eight elements
//! by one extending load (`vpmovzxbd`, ...) and writes them packed by one store when the
//! span is in bounds (a proof, or one compare of lane 0's index), and per lane, checked,
//! otherwise. Each case compares results and errors with the interpreter and the scalar
//! code: odd sizes, guards, spans past the end (the interpreter's fault, of the right
//! work-item), negative offsets of signed indices, 2-D filters with a border guard.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vals, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

fn elem(ty: &str) -> Scalar {
    Scalar::ALL.iter().copied().find(|e| e.to_string() == ty).unwrap()
}

#[test]
fn offset_loads_and_stores_agree_with_the_interpreter() {
    for ty in ["u8", "i8", "u16", "i16"] {
        // Guarded (the unmasked copy of full batches, a masked last one) and unguarded
        // (spans past the end fault where the interpreter does).
        for guarded in [true, false] {
            let body = format!(
                "let v: {ty} = x[i + k] * 9 + x[i + k + 1] - x[k + i + 2];
                 o[i + k] = v;
                 p[i + 1] = x[i + k] >> 1;"
            );
            let src = if guarded {
                format!(
                    "kernel k(o: ptr<global, {ty}>, x: ptr<global, {ty}>, p: ptr<global, {ty}>, n: u32, k: u32) {{
                       let i: u32 = global_id(0);
                       if i < n {{ {body} }}
                     }}"
                )
            } else {
                format!(
                    "kernel k(o: ptr<global, {ty}>, x: ptr<global, {ty}>, p: ptr<global, {ty}>, n: u32, k: u32) {{
                       let i: u32 = global_id(0);
                       {body}
                     }}"
                )
            };
            let k = kernel(&src);
            for (n, global, olen, xlen) in [
                (37u32, 40u32, 41usize, 42usize),
                (64, 64, 80, 80),
                (61, 64, 66, 63),
                (64, 64, 64, 66),
                (8, 8, 9, 10),
                (5, 8, 16, 16),
            ] {
                for off in [0u32, 1, 3] {
                    let args = vec![
                        Arg::Buffer(0),
                        Arg::Buffer(1),
                        Arg::Buffer(2),
                        Arg::scalar(n),
                        Arg::scalar(off),
                    ];
                    let e = elem(ty);
                    let bufs = vec![vals(e, olen, 1), vals(e, xlen, 2), vals(e, olen - 1, 3)];
                    let what = format!("{ty} guarded={guarded} n={n} k={off} x={xlen} o={olen}");
                    agree(&k, &NdRange::new(&[global]).with_local(&[8]), &args, &bufs, &what);
                }
            }
            if avx2() {
                let text = vector_listing(&k).join("\n");
                let ext = if ty.starts_with('u') { "vpmovzx" } else { "vpmovsx" };
                assert!(text.contains(ext), "{ty}: no extending load\n{text}");
                assert!(text.contains("vpack"), "{ty}: no packed store\n{text}");
            } else {
                kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
            }
        }
    }
}

#[test]
fn signed_offsets_and_half_bits_agree() {
    // A negative offset (lane 0's index below 0: the lanes' check, the interpreter's fault),
    // and f16 moved as its bits.
    let k = kernel(
        "kernel k(o: ptr<global, f16>, x: ptr<global, f16>, b: i32) {
           let i: i32 = global_id(0) as i32;
           o[i + b + 2] = x[i + b];
         }",
    );
    for (b, xlen, olen) in [(0i32, 40usize, 42usize), (3, 48, 48), (-1, 40, 40), (0, 30, 40)] {
        let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(b)];
        let bufs = vec![vals(Scalar::F16, olen, 1), vals(Scalar::F16, xlen, 2)];
        agree(&k, &NdRange::new(&[32]), &args, &bufs, &format!("b={b} x={xlen} o={olen}"));
    }
}

#[test]
fn a_sobel_filter_on_bytes_agrees() {
    let k = kernel(
        "kernel sobel(src: ptr<global, u8>, dst: ptr<global, u8>, w: u32, h: u32) {
           let x: u32 = global_id(0);
           let y: u32 = global_id(1);
           if x < w && y < h {
             if x > 0 && x < w - 1 && y > 0 && y < h - 1 {
               let up: u32 = (y - 1) * w + x;
               let mid: u32 = y * w + x;
               let dn: u32 = (y + 1) * w + x;
               let gx: i32 = src[up + 1] as i32 - src[up - 1] as i32 + 2 * (src[mid + 1] as i32 - src[mid - 1] as i32) + src[dn + 1] as i32 - src[dn - 1] as i32;
               let gy: i32 = src[dn - 1] as i32 - src[up - 1] as i32 + 2 * (src[dn] as i32 - src[up] as i32) + src[dn + 1] as i32 - src[up + 1] as i32;
               dst[mid] = min(sqrt((gx * gx + gy * gy) as f32), 255.0) as u8;
             } else {
               dst[y * w + x] = 0;
             }
           }
         }",
    );
    for (w, h) in [(19u32, 7u32), (8, 3), (33, 5), (9, 9), (40, 4)] {
        let gw = w.div_ceil(8) * 8;
        let r = NdRange::new(&[gw, h.div_ceil(2) * 2]).with_local(&[8, 2]);
        let mut img = Buffer::zeroed(Scalar::U8, (w * h) as usize);
        for i in 0..img.len() {
            img.set(i, kiln_ir::Imm::int(Scalar::U8, ((i * 97 + 13) % 256) as i128)).unwrap();
        }
        let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(w), Arg::scalar(h)];
        let bufs = vec![img, Buffer::zeroed(Scalar::U8, (w * h) as usize)];
        agree(&k, &r, &args, &bufs, &format!("{w}x{h}"));
        // A destination one row short: the interpreter's fault.
        let short = vec![bufs[0].clone(), Buffer::zeroed(Scalar::U8, (w * (h - 1)) as usize)];
        agree(&k, &r, &args, &short, &format!("{w}x{h} short"));
    }
}
