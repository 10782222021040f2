//! Products of integer lanes by a constant `2^k + 1` or `2^k - 1`, which the 8-lane code
//! computes by a shift and an add or subtract (`spmd/mulconst.rs`): every width of 32-bit
//! lanes and of narrow ones, the constant on either side, the other operand in a register
//! (a `let`, a `var`, `global_id(0)`) or computed (a load, an expression deep enough to
//! take the temporaries), values that wrap; and a Collatz `while` loop whose lanes leave
//! at different trips. Results and errors must be the interpreter's.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vals, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Imm, Scalar};

fn elem(ty: &str) -> Scalar {
    Scalar::ALL.iter().copied().find(|e| e.to_string() == ty).unwrap()
}

#[test]
fn products_by_shift_constants_agree() {
    for ty in ["u32", "i32", "u8", "i8", "u16", "i16"] {
        let wide = ty.ends_with("32");
        let consts: &[&str] = if wide {
            &["3", "5", "7", "9", "15", "17", "31", "33", "1025", "0x7fffffff", "0x80000001"]
        } else {
            &["3", "5", "7", "9", "15", "17", "31", "33", "127"]
        };
        for c in consts {
            let c =
                if c.starts_with("0x") && ty == "i32" { format!("{c}i32") } else { c.to_string() };
            let k = kernel(&format!(
                "kernel k(o: ptr<global, {ty}>, x: ptr<global, {ty}>, n: u32) {{
                   let i: u32 = global_id(0);
                   if i < n {{
                     let v: {ty} = x[i] + x[i];
                     var w: {ty} = x[i];
                     w = {c} * w + 1;
                     o[i] = v * {c} + w - x[i] * {c} + (v ^ x[i] * {c} + (x[i] - v) * {c}) * {c};
                   }}
                 }}"
            ));
            for n in [1u32, 8, 13, 37] {
                let mut x = vals(elem(ty), n as usize, 3);
                // Large values, so that the products wrap.
                for j in 0..n as usize {
                    let big = if wide { 0x7654_3210u32.wrapping_mul(j as u32 + 1) } else { 200 };
                    let v = i128::from(big) + j as i128;
                    let imm =
                        Imm::int(elem(ty), if elem(ty).is_signed() { v % 100 - 50 } else { v });
                    if j % 2 == 0 {
                        x.set(j, imm).unwrap();
                    }
                }
                let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
                let bufs = vec![Buffer::zeroed(elem(ty), n as usize), x];
                let r = NdRange::new(&[n.div_ceil(8) * 8]).with_local(&[8]);
                agree(&k, &r, &args, &bufs, &format!("{ty} * {c}, n={n}"));
            }
            if avx2() && wide {
                let text = vector_listing(&k).join("\n");
                assert!(!text.contains("vpmulld"), "{ty} * {c}\n{text}");
            }
        }
    }
    if !avx2() {
        kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
    }
}

#[test]
fn collatz_steps_agree() {
    let k = kernel(
        "kernel collatz(start: ptr<global, u32>, steps: ptr<global, u32>, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             var v: u32 = start[i];
             var s: u32 = 0;
             while v > 1 {
               if (v & 1) == 0 {
                 v = v >> 1;
               } else {
                 v = 3 * v + 1;
               }
               s = s + 1;
             }
             steps[i] = s;
           }
         }",
    );
    for n in [5u32, 8, 61, 200] {
        let starts: Vec<u32> = (0..n).map(|i| i * 37 % 1000 + 1).collect();
        let args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
        let bufs = vec![Buffer::from_slice(&starts), Buffer::zeroed(Scalar::U32, n as usize)];
        let r = NdRange::new(&[n.div_ceil(64) * 64]).with_local(&[64]);
        agree(&k, &r, &args, &bufs, &format!("n={n}"));
    }
}
