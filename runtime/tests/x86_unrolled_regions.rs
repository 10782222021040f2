//! Regions unrolled per batch when the code is generated (backends/src/x86/spmd/unrolled.rs)
//! and branches bounding `local_id(0)` by a constant decided per known batch (branch.rs):
//! against the interpreter and the scalar code, bit for bit, errors included. Kernels that
//! fix their group's size (one batch to 32), scans of every width of value, branches split
//! inside a batch, with `else`, nested, every comparison; faults in later batches, later
//! groups and later rounds (a load past the end, a division by zero under the branch).
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, scan};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Kernel, Scalar};

/// The region-loop listing of `k` (`-O`), which must be there where AVX2 is.
fn region_listing(k: &Kernel) -> String {
    let p = compile(k, &X86Options { optimize: true, ..X86Options::default() }).unwrap();
    assert!(p.has_region_code(), "{k}\n{}", p.disassemble());
    let d = p.disassemble();
    let at = d.find("; 8-lane region loops").expect("region-loop code");
    d[at..].to_string()
}

fn keys(n: usize, seed: u32) -> Buffer {
    Buffer::from_slice(
        &(0..n as u32).map(|i| (i ^ seed).wrapping_mul(0x9e37_79b9) >> 9).collect::<Vec<_>>(),
    )
}

#[test]
fn scans_unrolled_agree() {
    for l in [16u32, 24, 64, 256] {
        let k = scan(l);
        if avx2() {
            // Batch 1's `t[lid - 1u32]` at a constant displacement: the unrolled copy, the
            // branch decided (the loop addresses it from lane 0's id in a register).
            let d = region_listing(&k);
            assert!(d.contains("+1Ch]"), "{k}\n{d}");
        }
        for groups in [1u32, 3] {
            let global = l * groups;
            for n in [global, global - 1, global - 7, global / 2 + 3, 1] {
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
                let bufs = [keys(n as usize, l), Buffer::zeroed(Scalar::U32, n as usize)];
                let r = NdRange::new(&[global]).with_local(&[l]);
                agree(&k, &r, &args, &bufs, &format!("local {l} n {n}"));
            }
        }
    }
}

/// Branches on `local_id(0)` split inside a batch (`c` not a multiple of 8), with `else`,
/// nested, each comparison; a load at `i + m` (past `x`'s end in a later batch or group)
/// and a division by `d` (zero: the first lane the branch lets through) under them.
fn branches(l: u32, op: &str, c: u32) -> Kernel {
    kernel(&format!(
        "kernel br(x: ptr<global, u32>, y: ptr<global, u32>, m: u32, d: u32) #reqd_work_group_size({l}, 1, 1) {{
           local t: u32[{l}];
           let lid: u32 = local_id(0);
           let i: u32 = global_id(0);
           t[lid] = i * 3u32 + 1u32;
           barrier(local);
           var v: u32 = t[lid];
           var w: u32 = 7u32;
           if lid {op} {c}u32 {{
             v = v + x[i + m];
             if lid > 2u32 {{ w = v / d; }}
           }} else {{
             w = v * 5u32;
           }}
           barrier(local);
           t[lid] = v + w;
           barrier(local);
           y[i] = t[lid] + v;
         }}"
    ))
}

#[test]
fn decided_branches_agree() {
    for l in [8u32, 24, 64] {
        for op in [">=", ">", "<", "<="] {
            for c in [0u32, 3, 8, 13, l - 1, l] {
                let k = branches(l, op, c);
                if avx2() && l > 8 {
                    // Batch 1's `t[lid]` at a constant displacement: the unrolled copy (the
                    // loop addresses it from lane 0's id in a register). One batch is a
                    // group the loop runs.
                    let d = region_listing(&k);
                    let at = ["[rcx+20h]", "[rdx+20h]", "[rsi+20h]"];
                    assert!(at.iter().any(|a| d.contains(a)), "{k}\n{d}");
                }
                for groups in [1u32, 3] {
                    let global = l * groups;
                    // `x` of `global` elements: `m` 0 stays inside, others fault in a later
                    // batch or group; `d` 0 faults at the first lane the branch lets through.
                    for (m, d) in [(0u32, 3u32), (l + 5, 3), (global - 2, 1), (0, 0)] {
                        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(m), Arg::scalar(d)];
                        let bufs = [
                            keys(global as usize, c),
                            Buffer::zeroed(Scalar::U32, global as usize),
                        ];
                        let r = NdRange::new(&[global]).with_local(&[l]);
                        agree(&k, &r, &args, &bufs, &format!("local {l} {op} {c} m {m} d {d}"));
                    }
                }
            }
        }
    }
}
