//! Two things of the 8-lane code found by the cpu suite's fifth set, each compared with the
//! interpreter and the scalar code (results and errors: kernel, work-item, message):
//!
//! * `let`s fixed for a call that can fault (`memo.rs`): batch-norm's per-channel scale
//!   `gamma[q % c] / sqrt(variance[q % c] + eps)` under the element guard, computed by the
//!   first batch of the row that has an active lane there and reused by the others. Cases:
//!   rows whose guard is false in every lane, a first batch with no active lane at the
//!   `let`, a division by zero and a load past the end (the interpreter's work-item), a
//!   division in a loop, a store to the buffer the value's loads read (race-free).
//! * Gathers of 8-bit elements (`gather8.rs`): one `vpgatherdd` of the aligned dwords around
//!   the bytes. Cases: indices from a buffer (every place in a dword, the last byte of
//!   the buffer, odd lengths), strided rows (a CRC-style loop), signed and unsigned, under
//!   divergent ifs, and indices past the end (the fault of the right work-item).
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vals, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

const NORM: &str = "kernel k(x: ptr<global, f32>, y: ptr<global, f32>, g: ptr<global, f32>, v: ptr<global, f32>, hw: u32, planes: u32, c: u32, lo: u32) {
  let p: u32 = global_id(0);
  let q: u32 = global_id(1);
  if p < hw && q < planes {
    if p >= lo {
      let ch: u32 = q % c;
      let s: f32 = g[ch] / sqrt(v[ch] + 0.5);
      y[q * hw + p] = x[q * hw + p] * s + g[ch + 1];
    } else {
      y[q * hw + p] = 0.25;
    }
  }
}";

#[test]
fn fixed_lets_that_can_fault_agree_with_the_interpreter() {
    let k = kernel(NORM);
    // (hw, planes, global x, global y, local x, channels, lo, g's length)
    for (hw, planes, gx, gy, lx, c, lo, glen) in [
        (37u32, 5u32, 40u32, 6u32, 8u32, 3u32, 0u32, 4usize),
        (37, 5, 48, 8, 16, 3, 9, 4),
        (64, 3, 64, 3, 64, 2, 20, 3),
        (13, 7, 16, 7, 16, 4, 13, 5),
        (13, 7, 16, 7, 16, 4, 15, 5),
        (29, 4, 32, 4, 8, 0, 3, 5),
        (29, 4, 32, 4, 8, 0, 40, 5),
        (29, 6, 32, 6, 32, 5, 2, 4),
        (29, 6, 32, 6, 32, 3, 2, 3),
        (8, 2, 8, 2, 8, 1, 7, 2),
    ] {
        let args = vec![
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::Buffer(2),
            Arg::Buffer(3),
            Arg::scalar(hw),
            Arg::scalar(planes),
            Arg::scalar(c),
            Arg::scalar(lo),
        ];
        let n = (hw * planes) as usize;
        let bufs = vec![
            vals(Scalar::F32, n, 1),
            vals(Scalar::F32, n, 2),
            vals(Scalar::F32, glen, 3),
            Buffer::from_slice(&(0..glen).map(|i| i as f32 * 0.75 + 0.25).collect::<Vec<_>>()),
        ];
        let what = format!("hw={hw} planes={planes} c={c} lo={lo} g={glen}");
        let r = NdRange::new(&[gx, gy]).with_local(&[lx, 1]);
        agree(&k, &r, &args, &bufs, &what);
    }
    if avx2() {
        // The value kept: an active lane's, broadcast from the frame.
        let text = vector_listing(&k).join("\n");
        assert!(text.contains("vmovd xmm1,r10d"), "no kept value\n{text}");
    } else {
        kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
    }
}

#[test]
fn fixed_divisions_in_loops_and_in_place_stores_agree_with_the_interpreter() {
    // `w` divides in a loop (no load: every iteration computes the same); `s` loads from
    // the buffer the kernel stores to, each work-item its own element (race-free).
    let src = "kernel k(x: ptr<global, u32>, t: ptr<global, u32>, w: u32, n: u32, c: u32) {
      let p: u32 = global_id(0);
      let q: u32 = global_id(1);
      if p < w && q < n {
        let s: u32 = t[q / c] % (c + 1);
        var acc: u32 = x[q * w + p];
        for j: u32 in 0 .. 3 {
          let d: u32 = (q + 1) / c;
          acc = acc * 3 + d + s + j;
        }
        x[q * w + p] = acc;
        t[q + 8] = s;
      }
    }";
    let k = kernel(src);
    for (w, n, gx, lx, c, tlen) in [
        (21u32, 5u32, 24u32, 8u32, 2u32, 16usize),
        (21, 5, 24, 8, 0, 16),
        (40, 3, 48, 16, 1, 11),
        (40, 3, 48, 16, 1, 10),
        (7, 4, 8, 8, 3, 12),
    ] {
        let args =
            vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(w), Arg::scalar(n), Arg::scalar(c)];
        let bufs = vec![vals(Scalar::U32, (w * n) as usize, 4), vals(Scalar::U32, tlen, 5)];
        let what = format!("w={w} n={n} c={c} t={tlen}");
        let r = NdRange::new(&[gx, n]).with_local(&[lx, 1]);
        agree(&k, &r, &args, &bufs, &what);
    }
}

#[test]
fn byte_gathers_agree_with_the_interpreter() {
    for ty in ["u8", "i8"] {
        // Indices from a buffer (any place in a dword), a divergent if, an index past the
        // end in some cases.
        let src = format!(
            "kernel k(x: ptr<global, {ty}>, idx: ptr<global, u32>, o: ptr<global, i32>, n: u32) {{
               let i: u32 = global_id(0);
               if i < n {{
                 var v: i32 = x[idx[i]] as i32;
                 if (i & 3) != 1 {{
                   v = v * 5 + x[idx[i] ^ 1] as i32;
                 }}
                 o[i] = v;
               }}
             }}"
        );
        let k = kernel(&src);
        let e = Scalar::ALL.iter().copied().find(|s| s.to_string() == ty).unwrap();
        for (n, global, xlen, past) in [
            (37u32, 40u32, 23usize, false),
            (64, 64, 64, false),
            (5, 8, 1, false),
            (61, 64, 97, false),
            (37, 40, 23, true),
            (64, 64, 7, true),
        ] {
            // Every index below xlen, the last one among them; with `past`, one at xlen
            // (and the `^ 1` partner of the last may be too).
            let top = if past { xlen + 1 } else { xlen };
            let ids: Vec<u32> = (0..n as usize).map(|i| ((i * 13 + i / 3) % top) as u32).collect();
            let ids: Vec<u32> = ids
                .iter()
                .map(|&v| if !past && (v ^ 1) as usize >= xlen { v & !1 } else { v })
                .collect();
            let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n)];
            let mut x = vals(e, xlen, 6);
            // Values with the high bit set, so sign and zero extension differ.
            for j in (0..xlen).step_by(3) {
                x.set(j, kiln_ir::Imm::int(e, if ty == "u8" { 200 } else { -100 })).unwrap();
            }
            let bufs = vec![x, Buffer::from_slice(&ids), Buffer::zeroed(Scalar::I32, n as usize)];
            let what = format!("{ty} n={n} x={xlen} past={past}");
            agree(&k, &NdRange::new(&[global]).with_local(&[8]), &args, &bufs, &what);
        }
        if avx2() {
            let text = vector_listing(&k).join("\n");
            assert!(text.contains("vpgatherdd"), "{ty}: no byte gather\n{text}");
        } else {
            kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
        }
    }
}

#[test]
fn strided_byte_rows_agree_with_the_interpreter() {
    // Each work-item walks its own record of `len` bytes (CRC-32 by table).
    let src = "kernel k(data: ptr<global, u8>, table: ptr<global, u32>, crc: ptr<global, u32>, len: u32, n: u32) {
      let i: u32 = global_id(0);
      if i < n {
        var c: u32 = 0xffffffff;
        for k: u32 in 0 .. len {
          c = table[(c ^ data[i * len + k] as u32) & 255] ^ c >> 8;
        }
        crc[i] = ~c;
      }
    }";
    let k = kernel(src);
    let table: Vec<u32> = (0..256u32)
        .map(|mut c| {
            for _ in 0..8 {
                c = if c & 1 != 0 { 0xedb8_8320 ^ (c >> 1) } else { c >> 1 };
            }
            c
        })
        .collect();
    for (len, n, global, dlen) in [
        (5u32, 37u32, 40u32, 185usize),
        (1, 64, 64, 64),
        (20, 13, 16, 260),
        (3, 61, 64, 182),
        (7, 21, 24, 146),
    ] {
        let data: Vec<u8> =
            (0..dlen as u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        let args =
            vec![Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(len), Arg::scalar(n)];
        let bufs = vec![
            Buffer::from_slice(&data),
            Buffer::from_slice(&table),
            Buffer::zeroed(Scalar::U32, n as usize),
        ];
        let what = format!("len={len} n={n} data={dlen}");
        agree(&k, &NdRange::new(&[global]).with_local(&[8]), &args, &bufs, &what);
    }
}
