//! Divergent loops of the 8-lane code (backends/src/x86/spmd/ctl.rs, cond.rs): a `for`
//! whose bounds differ between lanes tests `k >= end` by an unsigned (signed) max and skips
//! the counter's wrap test where its step is 1; an unsigned comparison with a constant
//! flips only the variable side. The interpreter, the scalar code and the 8-lane code agree,
//! errors included: zero-trip lanes, lanes leaving at different iterations, faults inside
//! the loops in later batches, partial batches, counters that end at the type's largest
//! value and steps that would wrap it.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vals, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

fn sixth(name: &str) -> kiln_ir::Kernel {
    let m = kiln_ir::parse_module(include_str!("../benches/cpu_suite_sixth.kir")).unwrap();
    m.kernels.iter().find(|k| k.name() == name).expect("a kernel of the sixth set").clone()
}

/// Per-item lengths 0..=`max` (some zero), as the `n + 1` offsets of a packed list.
fn offsets(n: usize, max: u32, seed: u32) -> Vec<u32> {
    let mut offs = vec![0u32];
    for i in 0..n as u32 {
        let len = (i * 7 + seed * 3 + i / 5) % (max + 1);
        offs.push(offs[i as usize] + len);
    }
    offs
}

/// The held-out suite's FNV-1a over byte strings of 0 to 9 bytes at odd sizes, with the
/// bytes too short (a fault in a later batch, lanes of the batch at other iterations).
#[test]
fn fnv64_agrees() {
    let k = sixth("fnv64");
    for (n, global) in [(1usize, 8usize), (13, 16), (37, 40), (64, 64), (203, 208)] {
        let offs = offsets(n, 9, n as u32);
        let total = offs[n] as usize;
        let r = NdRange::new(&[global as u32]).with_local(&[8]);
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n as u32)];
        for bytes in [total, total.saturating_sub(1), total * 2 / 3] {
            let bufs = [
                vals(Scalar::U8, bytes, 3),
                Buffer::from_slice(&offs),
                Buffer::zeroed(Scalar::U64, n),
            ];
            agree(&k, &r, &args, &bufs, &format!("n {n}, bytes {bytes} of {total}"));
        }
    }
    if avx2() {
        // The top's test by an unsigned max; the step of 1 needs no wrap test, whose
        // `vpandn ymm0,ymm0,` is what the loop's bottom would otherwise show.
        let lines = vector_listing(&k);
        let text = lines.join("\n");
        assert!(lines.iter().any(|l| l.starts_with("vpmaxud ymm1,ymm")), "{text}");
        assert!(!lines.iter().any(|l| l.starts_with("vpandn ymm0,ymm0,")), "{text}");
    }
}

/// Signed counters from negative bounds, a store inside the loop, accesses that fault
/// past the end or at a negative index, and a var read after the loop.
#[test]
fn signed_bounds_agree() {
    let k = kernel(
        "kernel k(lo: ptr<global, i32>, hi: ptr<global, i32>, x: ptr<global, f32>, y: ptr<global, f32>, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             var acc: f32 = 0.0;
             for k: i32 in lo[i] .. hi[i] {
               acc = acc * 0.5 + x[(k + 8i32) as u32];
               y[i] = acc;
             }
             y[i] = acc + 1.0;
           }
         }",
    );
    for (n, global) in [(5usize, 8usize), (29, 32), (61, 64)] {
        let lo: Vec<i32> = (0..n as i32).map(|i| (i * 5) % 13 - 8).collect();
        let hi: Vec<i32> = lo.iter().enumerate().map(|(i, l)| l + (i as i32 * 3) % 10).collect();
        let r = NdRange::new(&[global as u32]).with_local(&[8]);
        let args =
            [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3), Arg::scalar(n as u32)];
        for xlen in [20usize, 12, 6] {
            for shift in [0i32, -9] {
                let lo: Vec<i32> = lo.iter().map(|l| l + shift).collect();
                let bufs = [
                    Buffer::from_slice(&lo),
                    Buffer::from_slice(&hi),
                    vals(Scalar::F32, xlen, 1),
                    Buffer::zeroed(Scalar::F32, n),
                ];
                agree(&k, &r, &args, &bufs, &format!("n {n}, x {xlen}, shift {shift}"));
            }
        }
    }
}

/// Counters that end at (or step past) the type's largest value: with a step of 1 the
/// loop stops at `hi`; with larger steps a lane whose next value would wrap leaves, and a
/// step of 0 in a later batch is an error.
#[test]
fn counters_near_the_wrap_agree() {
    let unsigned = "kernel k(lo: ptr<global, u32>, hi: ptr<global, u32>, st: ptr<global, u32>, y: ptr<global, u32>, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             var acc: u32 = 0u32;
             var c: u32 = 0u32;
             for k: u32 in lo[i] .. hi[i] STEP { acc = acc * 31u32 + k; c = c + 1u32; }
             y[i] = acc ^ (c << 24u32);
           }
         }";
    let signed = "kernel k(lo: ptr<global, i32>, hi: ptr<global, i32>, st: ptr<global, i32>, y: ptr<global, i32>, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             var acc: i32 = 0i32;
             var c: i32 = 0i32;
             for k: i32 in lo[i] .. hi[i] STEP { acc = acc * 31i32 + k; c = c + 1i32; }
             y[i] = acc ^ (c << 24i32);
           }
         }";
    let n = 21usize;
    let r = NdRange::new(&[24]).with_local(&[8]);
    let args =
        [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3), Arg::scalar(n as u32)];
    for (src, unit) in [(unsigned, "1u32"), (signed, "1i32")] {
        for step in [format!("step {unit}"), "step st[i]".to_string()] {
            let k = kernel(&src.replace("STEP", &step));
            for zero_step in [false, true] {
                let steps: Vec<u32> = (0..n as u32)
                    .map(|i| if zero_step && i == 17 { 0 } else { i % 5 + 1 })
                    .collect();
                let bufs = if src == unsigned {
                    let lo: Vec<u32> = (0..n as u32).map(|i| u32::MAX - 20 + i % 9).collect();
                    let hi: Vec<u32> = (0..n as u32).map(|i| u32::MAX - (i % 3) * 4).collect();
                    [
                        Buffer::from_slice(&lo),
                        Buffer::from_slice(&hi),
                        Buffer::from_slice(&steps),
                        Buffer::zeroed(Scalar::U32, n),
                    ]
                } else {
                    let lo: Vec<i32> = (0..n as i32).map(|i| i32::MAX - 20 + i % 9).collect();
                    let hi: Vec<i32> = (0..n as i32).map(|i| i32::MAX - (i % 3) * 4).collect();
                    let steps: Vec<i32> = steps.iter().map(|&s| s as i32).collect();
                    [
                        Buffer::from_slice(&lo),
                        Buffer::from_slice(&hi),
                        Buffer::from_slice(&steps),
                        Buffer::zeroed(Scalar::I32, n),
                    ]
                };
                agree(&k, &r, &args, &bufs, &format!("{step}, zero step {zero_step}"));
            }
            if avx2() {
                // A step read per lane keeps the bottom's wrap test.
                let lines = vector_listing(&k);
                let wrap = lines.iter().any(|l| l.starts_with("vpandn ymm0,ymm0,"));
                assert_eq!(wrap, step == "step st[i]", "{step}\n{}", lines.join("\n"));
            }
        }
    }
}

/// The held-out suite's run-length decoding (a binary search per item, `hi - lo > 1`) at
/// odd sizes, with the run starts too short (a gather past the end mid-search).
#[test]
fn rledecode_agrees() {
    let k = sixth("rledecode");
    for (n, global, runs) in [(13usize, 16usize, 4u32), (100, 104, 9), (203, 208, 1), (64, 64, 0)] {
        let starts: Vec<u32> = (0..runs).map(|r| r * n as u32 / runs.max(1)).collect();
        let r = NdRange::new(&[global as u32]).with_local(&[8]);
        let args = [
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::Buffer(2),
            Arg::scalar(runs),
            Arg::scalar(n as u32),
        ];
        for short in [0usize, 1, 3] {
            let s = &starts[..starts.len().saturating_sub(short)];
            let bufs = [
                Buffer::from_slice(s),
                vals(Scalar::F32, runs.max(1) as usize, 2),
                Buffer::zeroed(Scalar::F32, n),
            ];
            agree(&k, &r, &args, &bufs, &format!("n {n}, runs {runs}, starts {}", s.len()));
        }
    }
    if avx2() {
        // `starts[mid] <= i` by a max or min and an equality, no sign flips.
        let lines = vector_listing(&k);
        let order = lines.windows(2).any(|w| {
            ["vpmaxud ymm", "vpminud ymm"].iter().any(|m| w[0].starts_with(m))
                && !w[0].contains('[')
                && w[1].starts_with("vpcmpeqd ymm")
        });
        assert!(order, "{}", lines.join("\n"));
    }
}

/// Unsigned comparisons with constants at the ends of the range, on either side, in
/// `if`s and a divergent `while`.
#[test]
fn unsigned_constant_comparisons_agree() {
    let xs: Vec<u32> =
        [0u32, 1, 2, 0x7fff_fffe, 0x7fff_ffff, 0x8000_0000, 0x8000_0001, 0xffff_fffe]
            .into_iter()
            .chain([u32::MAX, 5, 77, 1 << 20, 3_000_000_000])
            .collect();
    let n = xs.len();
    let r = NdRange::new(&[16]).with_local(&[8]);
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n as u32)];
    for c in [0u32, 1, 0x7fff_ffff, 0x8000_0000, 0xffff_fffe, u32::MAX] {
        let k = kernel(&format!(
            "kernel k(x: ptr<global, u32>, y: ptr<global, u32>, n: u32) {{
               let i: u32 = global_id(0);
               if i < n {{
                 let v: u32 = x[i];
                 var r: u32 = 0u32;
                 if v > {c}u32 {{ r = r + 1u32; }}
                 if v <= {c}u32 {{ r = r + 2u32; }}
                 if {c}u32 < v {{ r = r + 4u32; }}
                 if {c}u32 >= v {{ r = r + 8u32; }}
                 let u: u32 = x[(i + 3u32) % n];
                 if v <= u {{ r = r + 32u32; }}
                 if u <= v {{ r = r + 64u32; }}
                 if v >= x[(i + 5u32) % n] {{ r = r + 128u32; }}
                 if x[(i + 5u32) % n] >= v {{ r = r + 256u32; }}
                 var w: u32 = v;
                 while w > {c}u32 && w >= 16u32 {{ w = w / 3u32; r = r + 16u32; }}
                 y[i] = r;
               }}
             }}"
        ));
        let bufs = [Buffer::from_slice(&xs), Buffer::zeroed(Scalar::U32, n)];
        agree(&k, &r, &args, &bufs, &format!("c {c}"));
        if avx2() {
            // Two instructions each, the constant their memory operand: the variable side
            // flipped and a signed compare (`>`), or a min or max and an equality (`<=`,
            // `>=`, `<`).
            let lines = vector_listing(&k);
            let (mut flips, mut minmax) = (0, 0);
            for w in lines.windows(2) {
                let Some((dst, rest)) =
                    w[1].split_once(' ').and_then(|(_, ops)| ops.split_once(','))
                else {
                    continue;
                };
                let Some((src, mem)) = rest.split_once(',') else { continue };
                if src != dst || !mem.starts_with("[r15+") {
                    continue;
                }
                if w[1].starts_with("vpcmpgtd ") && w[0].starts_with(&format!("vpxor {dst},")) {
                    flips += 1;
                }
                let min_max = ["vpmaxud ", "vpminud "].iter().any(|m| w[0].starts_with(m));
                if w[1].starts_with("vpcmpeqd ")
                    && min_max
                    && w[0].contains(&format!(" {dst},"))
                    && w[0].ends_with(mem)
                {
                    minmax += 1;
                }
            }
            assert!(flips >= 3 && minmax >= 3, "c {c}: {flips}, {minmax}\n{}", lines.join("\n"));
        }
    }
}
