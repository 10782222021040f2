//! Byte loads in loops that write no memory, served from the dwords an earlier trip
//! gathered (backends/src/x86/spmd/bytecache.rs). The interpreter, the scalar code and the
//! 8-lane code agree, errors included: the seventh set's search loop over records of every
//! length from 0 up (odd ones, whose lanes' dwords are not aligned alike), matches at the
//! first and the last byte or none, partial batches, text too short (a fault in a later
//! batch, after earlier batches stored); signed bytes under a per-lane `for`; a loop
//! entered again after its bytes were written (the entry empties the cache); and a loop that
//! writes the bytes it reads, which must gather every trip.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

fn seventh(name: &str) -> kiln_ir::Kernel {
    let m = kiln_ir::parse_module(include_str!("../benches/cpu_suite_seventh.kir")).unwrap();
    m.kernels.iter().find(|k| k.name() == name).expect("a kernel of the seventh set").clone()
}

/// The cache's hit path in a listing: the bytes shifted by a register of counts (a
/// gather's shifts come from the frame), after a test of the cached offsets.
fn hits(lines: &[String]) -> bool {
    lines.windows(2).any(|w| w[0].starts_with("vpand ymm") && w[1].starts_with("vpsrlvd"))
        && lines.iter().any(|l| {
            l.starts_with("vpsrlvd ymm")
                && l.split(',').nth(2).is_some_and(|c| c.starts_with("ymm"))
        })
}

/// `len` letters 'a' to 'e', varied by `seed`.
fn letters(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32).map(|i| b'a' + ((i * 7 + seed + i / 11) % 5) as u8).collect()
}

fn range(n: usize) -> NdRange {
    NdRange::new(&[n.div_ceil(8) as u32 * 8 + 8]).with_local(&[8])
}

/// strfind over records of lengths 0 to 13 and 63 to 65, searched for letters that are
/// frequent, rare (placed at the first or last byte) or absent, with whole and short text.
#[test]
fn strfind_agrees() {
    let k = seventh("strfind");
    for len in (0..=13).chain(63..=65) {
        for n in [1usize, 7, 8, 9, 37] {
            let mut text = letters(n * len, (len * 3 + n) as u32);
            // 'q' at the last byte of every third record, at the first of every fifth.
            for r in 0..n {
                if len > 0 && r % 3 == 1 {
                    text[r * len + len - 1] = b'q';
                }
                if len > 0 && r % 5 == 2 {
                    text[r * len] = b'q';
                }
            }
            for c in [b'c', b'q', b'z'] {
                for cut in [0, 1, n * len / 3] {
                    let t = &text[..text.len() - cut.min(text.len())];
                    let args = [
                        Arg::Buffer(0),
                        Arg::Buffer(1),
                        Arg::scalar(c),
                        Arg::scalar(len as u32),
                        Arg::scalar(n as u32),
                    ];
                    let bufs = [Buffer::from_slice(t), Buffer::zeroed(Scalar::U32, n)];
                    let what = format!("len {len}, n {n}, c {}, cut {cut}", c as char);
                    agree(&k, &range(n), &args, &bufs, &what);
                }
            }
        }
    }
    if avx2() {
        let lines = vector_listing(&k);
        assert!(hits(&lines), "{}", lines.join("\n"));
    } else {
        kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
    }
}

/// Signed bytes under a `for` whose bounds differ per lane (records of 0 to 9 bytes, so
/// the lanes' dwords differ), a `break`-free search with a second load of the same byte,
/// and bytes too short for the last records.
#[test]
fn signed_ranges_agree() {
    let k = kernel(
        "kernel k(t: ptr<global, i8>, lo: ptr<global, u32>, out: ptr<global, i32>, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             var s: i32 = 0;
             var neg: u32 = 0;
             for j: u32 in lo[i] .. lo[i + 1u32] {
               s = s * 3 + t[j] as i32;
               if t[j] < 0i8 {
                 neg = neg + 1;
               }
             }
             out[i] = s + (neg as i32) * 1000;
           }
         }",
    );
    for n in [1usize, 8, 13, 40] {
        let mut lo = vec![0u32];
        for i in 0..n as u32 {
            lo.push(lo[i as usize] + (i * 5 + 3) % 10);
        }
        let total = lo[n] as usize;
        let bytes: Vec<i8> =
            (0..total as u32).map(|x| (x.wrapping_mul(97) % 251) as u8 as i8).collect();
        for cut in [0, 1, total / 2] {
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n as u32)];
            let bufs = [
                Buffer::from_slice(&bytes[..total - cut.min(total)]),
                Buffer::from_slice(&lo),
                Buffer::zeroed(Scalar::I32, n),
            ];
            agree(&k, &range(n), &args, &bufs, &format!("n {n}, cut {cut}"));
        }
    }
    if avx2() {
        let lines = vector_listing(&k);
        assert!(hits(&lines), "{}", lines.join("\n"));
    } else {
        kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
    }
}

/// A loop that writes no memory inside one that writes the bytes it reads: each entry of
/// the inner loop must see the outer loop's stores (its cache emptied at the entry).
#[test]
fn reentered_loop_agrees() {
    let k = kernel(
        "kernel k(t: ptr<global, u8>, out: ptr<global, u32>, len: u32, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             let base: u32 = i * len;
             var acc: u32 = 0;
             var r: u32 = 0;
             while r < 3 {
               var k: u32 = 0;
               while k < len {
                 acc = acc * 31 + t[base + k] as u32;
                 k = k + 1;
               }
               if len > 0 {
                 t[base + r % len] = (acc & 255) as u8;
               }
               r = r + 1;
             }
             out[i] = acc;
           }
         }",
    );
    for len in [0usize, 1, 3, 4, 6] {
        for n in [1usize, 9, 20] {
            let text = letters(n * len, len as u32);
            for cut in [0, n * len / 2] {
                let args = [
                    Arg::Buffer(0),
                    Arg::Buffer(1),
                    Arg::scalar(len as u32),
                    Arg::scalar(n as u32),
                ];
                let bufs =
                    [Buffer::from_slice(&text[..text.len() - cut]), Buffer::zeroed(Scalar::U32, n)];
                agree(&k, &range(n), &args, &bufs, &format!("len {len}, n {n}, cut {cut}"));
            }
        }
    }
    if avx2() {
        let lines = vector_listing(&k);
        assert!(hits(&lines), "{}", lines.join("\n"));
    } else {
        kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
    }
}

/// A loop that stores into the bytes it reads next trip keeps no dwords (a cached one
/// would be stale): it agrees, and its listing has no hit path.
#[test]
fn writing_loop_gathers() {
    let k = kernel(
        "kernel k(t: ptr<global, u8>, out: ptr<global, u32>, len: u32, n: u32) {
           let i: u32 = global_id(0);
           if i < n {
             let base: u32 = i * len;
             var s: u32 = 0;
             var k: u32 = 0;
             while k + 1 < len {
               s = s + t[base + k] as u32;
               t[base + k + 1] = t[base + k + 1] + t[base + k];
               k = k + 1;
             }
             out[i] = s;
           }
         }",
    );
    for len in [1usize, 2, 5, 8, 9] {
        for n in [1usize, 8, 21] {
            let text = letters(n * len, 7);
            let args =
                [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(len as u32), Arg::scalar(n as u32)];
            let bufs = [Buffer::from_slice(&text), Buffer::zeroed(Scalar::U32, n)];
            agree(&k, &range(n), &args, &bufs, &format!("len {len}, n {n}"));
        }
    }
    if avx2() {
        let lines = vector_listing(&k);
        assert!(lines.iter().any(|l| l.starts_with("vpgatherdd")), "{}", lines.join("\n"));
        assert!(!hits(&lines), "{}", lines.join("\n"));
    } else {
        kiln_ir::testing::skip("no AVX2: no 8-lane code to inspect");
    }
}
