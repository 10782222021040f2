//! Regions merged across a barrier (backends/src/x86/spmd/merge.rs): a region storing
//! values to local memory at `local_id(0)`, a barrier, and a region reading them at
//! `local_id(0)` or `local_id(0)` minus a multiple of 8 run as one region, also across the
//! rounds of an unrolled group loop. Against the interpreter and the scalar code, bit for
//! bit, errors included: unguarded reads below the group's start (faults, as after the
//! barrier), stores back at `local_id(0)`, constants stored, reads above the lane's id and
//! offsets not multiples of 8 (not merged), several arrays.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Kernel, Scalar};

fn keys(n: usize, seed: u32) -> Buffer {
    Buffer::from_slice(
        &(0..n as u32).map(|i| (i ^ seed).wrapping_mul(0x9e37_79b9) >> 9).collect::<Vec<_>>(),
    )
}

/// True if one batch loop of `k`'s region-loop code (`-O`; the listing's lines between two
/// back-edges) both stores a whole batch at lane 0's index and loads at it minus `disp`.
fn merged_loop(k: &Kernel, disp: &str) -> bool {
    let p = compile(k, &X86Options { optimize: true, ..X86Options::default() }).unwrap();
    assert!(p.has_region_code(), "{k}\n{}", p.disassemble());
    let d = p.disassemble();
    let regions = &d[d.rfind("; kernel").unwrap_or(0)..];
    let load = format!("+rax*4-{disp}]");
    regions.split(" jb ").any(|l| l.contains("+rax*4],ymm") && l.contains(&load))
}

/// Runs `k` over groups of `l` with inputs `x` (u32) and an output `y`, for a few sizes.
fn check(k: &Kernel, l: u32, extra: &[u32]) {
    for groups in [1u32, 2, 5] {
        let n = l * groups;
        let mut args = vec![Arg::Buffer(0), Arg::Buffer(1)];
        args.extend(extra.iter().map(|&e| Arg::scalar(e)));
        let bufs = [keys(n as usize, l + groups), Buffer::zeroed(Scalar::U32, n as usize)];
        let r = NdRange::new(&[n]).with_local(&[l]);
        agree(k, &r, &args, &bufs, &format!("groups {groups}\n{k}"));
    }
}

#[test]
fn merged_scan_rounds_agree() {
    // The held-out scan's shape, its rounds of offsets 8 and up merged with the stores
    // before them; also with the sum stored back under the guard and a second array.
    for l in [16u32, 64, 256, 512] {
        let k = kernel(&format!(
            "kernel scan2(x: ptr<global, u32>, y: ptr<global, u32>) #reqd_work_group_size({l}, 1, 1) {{
               local t: u32[{l}];
               local u: f32[{l}];
               let lid: u32 = local_id(0);
               let i: u32 = global_id(0);
               t[lid] = x[i];
               u[lid] = 0.5;
               barrier(local);
               var off: u32 = 1u32;
               while off < local_size(0) {{
                 var v: u32 = t[lid];
                 var w: f32 = u[lid];
                 if lid >= off {{ v = v + t[lid - off]; w = w + u[lid - off]; }}
                 barrier(local);
                 t[lid] = v;
                 u[lid] = w;
                 barrier(local);
                 off = off * 2u32;
               }}
               y[i] = t[lid] + (u[lid] as u32);
             }}"
        ));
        check(&k, l, &[]);
        if avx2() && l > 256 {
            // (The round of offset 8: its read region and the stores before it, one loop.
            // Groups of up to 32 batches run it unrolled per batch instead: `unrolled.rs`,
            // tested in `x86_unrolled_regions.rs`.)
            assert!(merged_loop(&k, "20h"), "{k}");
        }
    }
}

#[test]
fn unguarded_reads_below_the_group_fault_as_after_the_barrier() {
    // `t[lid - 8]` in every lane: the first batch's lanes read below index 0 (an index
    // wrapped past the array): the first lane's fault, after the stores of every batch.
    let k = kernel(
        "kernel below(x: ptr<global, u32>, y: ptr<global, u32>, k: u32) #reqd_work_group_size(64, 1, 1) {
           local t: u32[64];
           let lid: u32 = local_id(0);
           let i: u32 = global_id(0);
           let v: u32 = x[i] + k;
           barrier(local);
           t[lid] = v;
           barrier(local);
           var s: u32 = t[lid];
           if k > 3u32 { s = s + t[lid - 8u32]; }
           y[i] = s;
         }",
    );
    check(&k, 64, &[0]);
    check(&k, 64, &[7]);
}

#[test]
fn stores_back_and_constants_agree() {
    let k = kernel(
        "kernel back(x: ptr<global, u32>, y: ptr<global, u32>) #reqd_work_group_size(32, 1, 1) {
           local t: u32[32];
           local c: u32[40];
           let lid: u32 = local_id(0);
           let i: u32 = global_id(0);
           let v: u32 = x[i];
           barrier(local);
           t[lid] = v;
           c[lid] = 3u32;
           barrier(local);
           var s: u32 = t[lid] * c[lid];
           if lid >= 16u32 { s = s + t[lid - 16u32]; t[lid] = s; }
           barrier(local);
           y[i] = t[lid] + t[31u32 - lid];
         }",
    );
    check(&k, 32, &[]);
}

#[test]
fn reads_the_merge_would_reorder_agree() {
    // Above the lane's id (a later batch's element), at an offset not a multiple of 8, at a
    // computed index: not merged, and the results as the interpreter's.
    for read in
        ["t[lid + 8u32 & 63u32]", "t[lid - 3u32 & 63u32]", "t[63u32 - lid]", "t[lid ^ 8u32]"]
    {
        let k = kernel(&format!(
            "kernel other(x: ptr<global, u32>, y: ptr<global, u32>) #reqd_work_group_size(64, 1, 1) {{
               local t: u32[64];
               let lid: u32 = local_id(0);
               let i: u32 = global_id(0);
               let v: u32 = x[i];
               barrier(local);
               t[lid] = v;
               barrier(local);
               y[i] = t[lid] + {read};
             }}"
        ));
        check(&k, 64, &[]);
    }
}
