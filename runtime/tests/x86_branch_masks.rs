//! Data-dependent `if`s in the x86 JIT's 8-lane code: a branch's lane mask is kept in a free
//! `let` register while its masked code runs (the else side reusing it), and a branch with
//! no `else` computes no else-mask. Against the scalar code and the interpreter, bit for
//! bit and errors word for word: chains of `if`s without `else` (bit reversal, leading
//! zeros), `if`/`else` in `while` loops with lane-varying trip counts (Collatz), nested
//! branches, `var`s assigned in one branch only, 64-bit `var`s, faults inside either
//! branch, odd sizes, and branches under register pressure (the mask then in its frame
//! slot). Also the listings: the chain's masks are neither stored nor reloaded.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vals, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

/// Bit reversal and a leading-zero count: `if`s without `else` in a chain.
const BITREV: &str = "kernel k(keys: ptr<global, u32>, out: ptr<global, u32>, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    let k: u32 = keys[i];
    var v: u32 = k >> 1 & 0x55555555 | (k & 0x55555555) << 1;
    v = v >> 2 & 0x33333333 | (v & 0x33333333) << 2;
    v = v >> 16 | v << 16;
    var x: u32 = k;
    var z: u32 = 0;
    if (x & 0xffff0000) == 0 {
      z = z + 16;
      x = x << 16;
    }
    if (x & 0xff000000) == 0 {
      z = z + 8;
      x = x << 8;
    }
    if (x & 0xf0000000) == 0 {
      z = z + 4;
      x = x << 4;
    }
    if (x & 0xc0000000) == 0 {
      z = z + 2;
      x = x << 2;
    }
    if (x & 0x80000000) == 0 {
      z = z + 1;
    }
    if k == 0 {
      z = 32;
    }
    out[i] = v ^ z;
  }
}";

/// Per-lane bit patterns with many leading zeros of every count (and zeros).
fn keys(n: usize) -> Buffer {
    Buffer::from_slice(
        &(0..n as u32)
            .map(|i| if i % 11 == 0 { 0 } else { (i.wrapping_mul(0x9e37_79b9) | 1) >> (i % 32) })
            .collect::<Vec<_>>(),
    )
}

#[test]
fn if_chains_without_else_agree() {
    let k = kernel(BITREV);
    for (g, n) in [(256u32, 256u32), (200, 197), (64, 61), (40, 3)] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
        let bufs = [keys(g as usize), Buffer::zeroed(Scalar::U32, g as usize)];
        agree(&k, &NdRange::new(&[g]).with_local(&[8]), &args, &bufs, &format!("{g}, {n}"));
    }
}

/// The chain's masks stay in registers: no else-mask (`vpandn`) for `if`s without `else`,
/// and every blend reads its mask from a register, with no load before it.
#[test]
fn if_chain_masks_stay_in_registers() {
    if !avx2() {
        return kiln_ir::testing::skip("no AVX2");
    }
    let lines = vector_listing(&kernel(BITREV));
    assert!(!lines.iter().any(|l| l.starts_with("vpandn")), "{}", lines.join("\n"));
    blends_read_registers(&lines, 10);
}

/// Every blend of `lines` (at least `least` of them) reads its mask from a `let` register:
/// a reloaded mask goes to a temporary, `ymm0..ymm7`, first.
fn blends_read_registers(lines: &[String], least: usize) {
    let blends: Vec<_> = lines.iter().filter(|l| l.starts_with("vblendvps")).collect();
    assert!(blends.len() >= least, "{}", lines.join("\n"));
    for b in blends {
        let mask = b.rsplit(',').next().unwrap().trim_start_matches("ymm");
        assert!(mask.parse::<u32>().unwrap() >= 8, "a mask reloaded for a blend: {b}");
    }
}

/// An `if`/`else` in a divergent loop: both masks in registers, neither stored.
#[test]
fn if_else_masks_in_loops_stay_in_registers() {
    if !avx2() {
        return kiln_ir::testing::skip("no AVX2");
    }
    let lines = vector_listing(&kernel(COLLATZ));
    blends_read_registers(&lines, 4);
}

/// Collatz steps: an `if`/`else` in a `while` loop with lane-varying trip counts.
const COLLATZ: &str = "kernel k(start: ptr<global, u32>, steps: ptr<global, u32>, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    var v: u32 = start[i];
    var s: u32 = 0;
    var odd: u32 = 0;
    while v > 1 {
      if (v & 1) == 0 {
        v = v >> 1;
      } else {
        v = 3 * v + 1;
        odd = odd + 1;
      }
      s = s + 1;
    }
    steps[i] = s * 1000 + odd;
  }
}";

#[test]
fn if_else_in_divergent_loops_agrees() {
    let k = kernel(COLLATZ);
    for (g, n) in [(128u32, 128u32), (72, 69), (24, 5)] {
        let start: Vec<u32> = (0..g).map(|i| (i * 37 + 1) % 1000).collect();
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
        let bufs = [Buffer::from_slice(&start), Buffer::zeroed(Scalar::U32, g as usize)];
        agree(&k, &NdRange::new(&[g]).with_local(&[8]), &args, &bufs, &format!("{g}, {n}"));
    }
}

/// Nested branches, `var`s assigned in one branch only, a 64-bit `var`, a `for` loop in a
/// branch and a branch in a `for` loop with lane-varying bounds.
#[test]
fn nested_branches_and_one_sided_vars_agree() {
    let k = kernel(
        "kernel k(a: ptr<global, i32>, o: ptr<global, i32>, w: ptr<global, i64>, n: u32) {
           let i: u32 = global_id(0);
           let x: i32 = a[i % n];
           var p: i32 = 0i32;
           var q: i32 = 7i32;
           var r: i64 = 1i64;
           if x > 0i32 {
             p = x * 3i32;
             if (x & 1i32) == 0i32 {
               q = q - x;
               r = r * (x as i64) + 5000000000i64;
             } else {
               for j: i32 in 0i32 .. x {
                 if (j & 3i32) == 1i32 { p = p + j; }
               }
             }
           } else {
             if x < 0i32 - 5i32 { q = x; } else { r = r - 3i64; }
           }
           o[i] = p + q;
           w[i] = r;
         }",
    );
    for (g, n) in [(96u32, 96u32), (56, 29), (17, 17)] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n)];
        let bufs = [
            vals(Scalar::I32, n as usize, 3),
            Buffer::zeroed(Scalar::I32, g as usize),
            Buffer::zeroed(Scalar::I64, g as usize),
        ];
        agree(&k, &NdRange::new(&[g]), &args, &bufs, &format!("{g}, {n}"));
    }
}

/// Faults in either branch (an index out of bounds, a division by zero) in some lanes: the
/// first faulting work-item's error, and the lanes' results before it.
#[test]
fn faults_inside_branches_agree() {
    let k = kernel(
        "kernel k(a: ptr<global, i32>, o: ptr<global, i32>, n: u32, d: i32) {
           let i: u32 = global_id(0);
           let x: i32 = a[i % 40u32];
           var s: i32 = 1i32;
           var t: i32 = 2i32;
           if x > 0i32 {
             s = a[(x as u32) * n];
             t = s + 1i32;
           } else {
             t = 100i32 / (x + d);
             s = s - t;
           }
           if s > 3i32 { t = t * 2i32; }
           o[i] = s + t;
         }",
    );
    for (g, n, d) in [(64u32, 1u32, 100i32), (64, 9, 100), (64, 1, 14), (23, 3, 7)] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(d)];
        let bufs = [vals(Scalar::I32, 40, 5), Buffer::zeroed(Scalar::I32, g as usize)];
        agree(&k, &NdRange::new(&[g]).with_local(&[8]), &args, &bufs, &format!("{g} {n} {d}"));
    }
}

/// A branch whose bodies hold more names than registers are left: the mask stays in its
/// frame slot, the names in registers, and the results the same.
#[test]
fn branches_under_register_pressure_agree() {
    let k = kernel(
        "kernel k(a: ptr<global, f32>, o: ptr<global, f32>) {
           let i: u32 = global_id(0);
           let x: f32 = a[i];
           var acc: f32 = 0.0;
           var m: f32 = x;
           if x > 0.5 {
             let b: f32 = x * 2.0;
             let c: f32 = b + x;
             let d: f32 = c * b;
             let e: f32 = d - c;
             if e > 1.0 { acc = e + d; } else { m = b - e; }
             acc = acc + b * c;
           } else {
             m = m - 1.0;
           }
           o[i] = acc + m;
         }",
    );
    for g in [64u32, 41, 9] {
        let args = [Arg::Buffer(0), Arg::Buffer(1)];
        let a: Vec<f32> = (0..g).map(|i| (i % 13) as f32 * 0.3 - 1.0).collect();
        let bufs = [Buffer::from_slice(&a), Buffer::zeroed(Scalar::F32, g as usize)];
        agree(&k, &NdRange::new(&[g]), &args, &bufs, &format!("{g}"));
    }
}
