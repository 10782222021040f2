//! Accesses at `local_id(0) - e` under a guard `local_id(0) >= e` in region loops
//! (backends/src/x86/spmd/guarded.rs): unchecked under the branch's mask, a plain vector
//! access in its unmasked copy, where the group's size is fixed and the local array is at
//! least that long. Against the interpreter and the scalar code, bit for bit, errors
//! included: constant and parameter offsets (0, inside the first batch, whole batches, past
//! the group), `>` as well as `>=`, stores as well as loads, an offset the branch assigns
//! (not proven), arrays shorter than the group (not proven: their faults), and the class's
//! other kernels (a bitonic sorting network and a tiled transpose through local memory).
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel, scan, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Kernel, Scalar};

fn keys(n: usize, seed: u32) -> Buffer {
    Buffer::from_slice(
        &(0..n as u32).map(|i| (i ^ seed).wrapping_mul(0x9e37_79b9) >> 9).collect::<Vec<_>>(),
    )
}

/// A shifted add through local memory: `y[i] = t[lid] + t[lid - k]` where `lid OP k`
/// (else `t[lid]`), the group's size fixed at `l`, the array `len` long; with `store`,
/// the sum also written back to `t[lid - k]` after a barrier.
fn shifted(l: u32, len: u32, op: &str, store: bool) -> Kernel {
    let back = if store {
        "barrier(local);
         if lid OP k { t[lid - k] = v; }
         barrier(local);
         v = v + t[lid];"
            .replace("OP", op)
    } else {
        String::new()
    };
    kernel(&format!(
        "kernel shifted(x: ptr<global, u32>, y: ptr<global, u32>, n: u32, k: u32) #reqd_work_group_size({l}, 1, 1) {{
           local t: u32[{len}];
           let lid: u32 = local_id(0);
           let i: u32 = global_id(0);
           if i < n {{ t[lid] = x[i]; }} else {{ t[lid] = 0u32; }}
           barrier(local);
           var v: u32 = t[lid];
           if lid {op} k {{ v = v + t[lid - k]; }}
           {back}
           if i < n {{ y[i] = v; }}
         }}"
    ))
}

#[test]
fn shifted_accesses_agree() {
    for (l, len) in [(256u32, 256u32), (64, 64), (64, 100), (32, 16), (64, 40)] {
        for op in [">=", ">"] {
            for store in [false, true] {
                let k = shifted(l, len, op, store);
                for groups in [1u32, 3] {
                    let global = l * groups;
                    for off in [0u32, 1, 3, 7, 8, 9, 17, l - 1, l, l + 5, u32::MAX] {
                        for n in [global, global - 5] {
                            let args =
                                [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(off)];
                            let bufs =
                                [keys(n as usize, off), Buffer::zeroed(Scalar::U32, n as usize)];
                            let r = NdRange::new(&[global]).with_local(&[l]);
                            let what = format!("l {l} len {len} {op} store {store} k {off} n {n}");
                            agree(&k, &r, &args, &bufs, &what);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn scans_agree_and_read_the_shifted_element_unchecked() {
    for l in [8u32, 16, 64, 256] {
        let k = scan(l);
        for groups in [1u32, 2, 5] {
            let global = l * groups;
            for n in [global, global - 3, 1] {
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
                let bufs = [keys(n as usize, l), Buffer::zeroed(Scalar::U32, n as usize)];
                let r = NdRange::new(&[global]).with_local(&[l]);
                agree(&k, &r, &args, &bufs, &format!("l {l} n {n}"));
            }
        }
    }
    if avx2() {
        // The rounds of a group of 512 (offsets 1 and 32 here), batch loops, read
        // `t[lid - off]` at a displacement from lane 0's id, with no compare with the length.
        let listing = vector_listing(&scan(512)).join("\n");
        assert!(listing.contains("*4-4]"), "{listing}");
        assert!(listing.contains("*4-80h]"), "{listing}");
        // A group of 256 unrolls them per batch (`unrolled.rs`): batch 1's `t[lid - 1]` at
        // a constant displacement.
        let listing = vector_listing(&scan(256)).join("\n");
        assert!(listing.contains("+1Ch]"), "{listing}");
    }
}

#[test]
fn offsets_the_branch_assigns_agree() {
    let k = kernel(
        "kernel reassigned(x: ptr<global, u32>, y: ptr<global, u32>, k: u32) #reqd_work_group_size(64, 1, 1) {
           local t: u32[64];
           let lid: u32 = local_id(0);
           t[lid] = x[global_id(0)];
           barrier(local);
           var off: u32 = k;
           var v: u32 = t[lid];
           if lid >= off {
             off = off + 40u32;
             v = v + t[lid - off];
           }
           y[global_id(0)] = v;
         }",
    );
    for off in [0u32, 1, 8, 23, 24, 30, 64] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(off)];
        let bufs = [keys(128, off), Buffer::zeroed(Scalar::U32, 128)];
        let r = NdRange::new(&[128]).with_local(&[64]);
        agree(&k, &r, &args, &bufs, &format!("k {off}"));
    }
}

#[test]
fn bitonic_sort_in_local_memory_agrees() {
    // Sorts each group's 128 keys: steps `j` of stages `k`, each work-item comparing its
    // element with its partner `lid ^ j`.
    let k = kernel(
        "kernel bitonic(x: ptr<global, u32>, y: ptr<global, u32>) #reqd_work_group_size(128, 1, 1) {
           local t: u32[128];
           let lid: u32 = local_id(0);
           let i: u32 = global_id(0);
           t[lid] = x[i];
           barrier(local);
           var k: u32 = 2u32;
           while k <= 128u32 {
             var j: u32 = k >> 1u32;
             while j > 0u32 {
               let p: u32 = lid ^ j;
               let a: u32 = t[lid];
               let b: u32 = t[p & 127u32];
               let up: bool = (lid & k) == 0u32;
               let lo: bool = lid < p;
               let keep: u32 = select(lo == up, min(a, b), max(a, b));
               barrier(local);
               t[lid] = keep;
               barrier(local);
               j = j >> 1u32;
             }
             k = k << 1u32;
           }
           y[i] = t[lid];
         }",
    );
    for groups in [1u32, 3] {
        let n = 128 * groups as usize;
        let args = [Arg::Buffer(0), Arg::Buffer(1)];
        let bufs = [keys(n, 5), Buffer::zeroed(Scalar::U32, n)];
        let r = NdRange::new(&[128 * groups]).with_local(&[128]);
        agree(&k, &r, &args, &bufs, &format!("groups {groups}"));
    }
}

#[test]
fn tiled_transpose_through_local_memory_agrees() {
    // 8 x 8 tiles of a w x h matrix, one group of 64 per tile (a row of tiles per group
    // row), read by rows and written by columns.
    let k = kernel(
        "kernel transpose(a: ptr<global, f32>, b: ptr<global, f32>, w: u32, h: u32) #reqd_work_group_size(64, 1, 1) {
           local t: f32[64];
           let lid: u32 = local_id(0);
           let tile: u32 = group_id(0);
           let tx: u32 = tile % (w / 8u32);
           let ty: u32 = tile / (w / 8u32);
           let r: u32 = lid >> 3u32;
           let c: u32 = lid & 7u32;
           t[lid] = a[(ty * 8u32 + r) * w + tx * 8u32 + c];
           barrier(local);
           b[(tx * 8u32 + r) * h + ty * 8u32 + c] = t[c * 8u32 + r];
         }",
    );
    for (w, h) in [(8u32, 8u32), (16, 8), (32, 24)] {
        let n = (w * h) as usize;
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(w), Arg::scalar(h)];
        let bufs = [x86_common::f32s(n, w), Buffer::zeroed(Scalar::F32, n)];
        let r = NdRange::new(&[w * h]).with_local(&[64]);
        agree(&k, &r, &args, &bufs, &format!("{w} x {h}"));
    }
}
