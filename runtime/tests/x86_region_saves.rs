//! Region loops' save frames (backends/src/x86/spmd/region.rs): a batch restores only the
//! values its region names and saves only the ones it declares or assigns, and the save
//! frame's address lives in a register where no table takes it. Against the interpreter
//! and the scalar code, bit for bit, errors included: Hillis-Steele scans (the held-out
//! suite's `scan`) over group sizes that are not multiples of the batch's rows of groups,
//! odd sizes, several rounds; values skipped by middle regions and assigned later, under a
//! mask; 64-bit values; kernels with five tables (the register) and six or more (memory);
//! faults in later rounds.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, kernel};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Kernel, Scalar};

fn expect_regions(k: &Kernel) {
    if avx2() {
        for optimize in [false, true] {
            let p = compile(k, &X86Options { optimize, ..X86Options::default() }).unwrap();
            assert!(p.has_region_code(), "{k}\n{}", p.disassemble());
        }
    }
}

fn keys(n: usize, seed: u32) -> Buffer {
    Buffer::from_slice(
        &(0..n as u32).map(|i| (i ^ seed).wrapping_mul(0x9e37_79b9) >> 9).collect::<Vec<_>>(),
    )
}

/// The held-out suite's scan, with the group's size fixed or not, and the sum's type.
fn scan(reqd: Option<u32>, ty: &str, zero: &str) -> Kernel {
    let attr = reqd.map_or(String::new(), |l| format!(" #reqd_work_group_size({l}, 1, 1)"));
    let len = reqd.unwrap_or(256);
    kernel(&format!(
        "kernel scan(x: ptr<global, {ty}>, y: ptr<global, {ty}>, n: u32){attr} {{
           local t: {ty}[{len}];
           let lid: u32 = local_id(0);
           let i: u32 = global_id(0);
           if i < n {{ t[lid] = x[i]; }} else {{ t[lid] = {zero}; }}
           barrier(local);
           var off: u32 = 1u32;
           while off < local_size(0) {{
             var v: {ty} = t[lid];
             if lid >= off {{ v = v + t[lid - off]; }}
             barrier(local);
             t[lid] = v;
             barrier(local);
             off = off * 2u32;
           }}
           if i < n {{ y[i] = t[lid]; }}
         }}"
    ))
}

#[test]
fn scans_agree() {
    for (reqd, locals) in [
        (None, vec![8u32, 16, 24, 64, 200, 256]),
        (Some(256u32), vec![256]),
        (Some(64), vec![64]),
        (Some(24), vec![24]),
    ] {
        let k = scan(reqd, "u32", "0u32");
        expect_regions(&k);
        for local in locals {
            for groups in [1u32, 3] {
                let global = local * groups;
                for n in [global, global - 1, global - 7, global / 2 + 3, 1] {
                    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
                    let bufs = [keys(n as usize, local), Buffer::zeroed(Scalar::U32, n as usize)];
                    let r = NdRange::new(&[global]).with_local(&[local]);
                    agree(&k, &r, &args, &bufs, &format!("local {local} n {n}"));
                }
            }
        }
    }
    // Float sums (rounding shows any change of order), with an offset.
    let k = scan(None, "f32", "0.0");
    let n = 133u32;
    let x = Buffer::from_slice(&(0..n).map(|i| (i % 13) as f32 * 0.1 - 0.55).collect::<Vec<_>>());
    for local in [8u32, 24, 72] {
        let global = n.div_ceil(local) * local;
        let r = NdRange::new(&[global]).with_local(&[local]).with_offset(&[0]);
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
        agree(&k, &r, &args, &[x.clone(), Buffer::zeroed(Scalar::F32, n as usize)], "f32 scan");
    }
}

/// A value of the first region that middle regions do not name, read or assigned (under a
/// mask) in later ones; a `let` read only at the end; an f64 `var`.
#[test]
fn values_skipped_by_regions_agree() {
    let k = kernel(
        "kernel k(o: ptr<global, u32>, a: ptr<global, u32>, w: ptr<global, f64>, m: u32) {
           local t: u32[64];
           let l: u32 = local_id(0);
           let g: u32 = global_id(0);
           let keep: u32 = a[g] * 7u32 + 1u32;
           var acc: u32 = a[g] ^ 5u32;
           var d: f64 = w[g];
           let inside: bool = g < m;
           t[l] = acc;
           var s: u32 = 1u32;
           while s < local_size(0) {
             barrier(local);
             var here: u32 = t[l];
             if l >= s { here = here + t[l - s]; }
             barrier(local);
             t[l] = here;
             barrier(local);
             if (l & s) != 0u32 { acc = acc + t[l]; d = d * 0.5; }
             s = s * 2u32;
           }
           barrier(local);
           if inside { o[g] = acc + keep; o[g + 64u32] = t[l]; w[g] = d; }
         }",
    );
    expect_regions(&k);
    for local in [8u32, 24, 32] {
        for m in [0u32, 5, 17, 32, 64] {
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(m)];
            let w =
                Buffer::from_slice(&(0..64).map(|i| f64::from(i) * 1.25 - 3.0).collect::<Vec<_>>());
            let bufs = [Buffer::zeroed(Scalar::U32, 128), keys(64, 3), w];
            let r = NdRange::new(&[64 - 64 % local]).with_local(&[local]);
            agree(&k, &r, &args, &bufs, &format!("local {local} m {m}"));
        }
    }
}

/// Five tables leave the save frame's address a register; seven keep it in memory. Both
/// with a fault in a later round (`t[l - s]` without the guard wraps past the array).
#[test]
fn save_frame_address_in_register_or_memory_agrees() {
    for extra in [0usize, 3] {
        let more: String = (0..extra).map(|i| format!(", e{i}: ptr<global, u32>")).collect();
        let reads: String = (0..extra).map(|i| format!(" + e{i}[g]")).collect();
        for guard in ["l >= s", "l >= s || s == 4u32"] {
            let k = kernel(&format!(
                "kernel k(o: ptr<global, u32>, a: ptr<global, u32>, b: ptr<global, u32>{more}) {{
                   local t: u32[64];
                   local u: u32[64];
                   let l: u32 = local_id(0);
                   let g: u32 = global_id(0);
                   var v: u32 = a[g]{reads};
                   let c: u32 = b[g];
                   t[l] = v;
                   u[l] = c;
                   var s: u32 = 1u32;
                   while s < 32u32 {{
                     barrier(local);
                     if {guard} {{ v = v + t[l - s] + u[l]; }}
                     barrier(local);
                     t[l] = v;
                     s = s * 2u32;
                   }}
                   o[g] = v + c;
                 }}"
            ));
            expect_regions(&k);
            for local in [8u32, 16, 32, 64] {
                let mut args = vec![Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
                let mut bufs = vec![Buffer::zeroed(Scalar::U32, 64), keys(64, 1), keys(64, 2)];
                for i in 0..extra {
                    args.push(Arg::Buffer(3 + i));
                    bufs.push(keys(64, 10 + i as u32));
                }
                let r = NdRange::new(&[64]).with_local(&[local]);
                agree(&k, &r, &args, &bufs, &format!("{extra} extra, {guard}, local {local}"));
            }
        }
    }
}

/// Bounds on `local_id(0)` inside a region (after other statements, so not a trimmed
/// range): batches whose lanes all take the branch go to its unmasked copy by a scalar
/// compare; bounds around batch edges, past the group, zero and the largest.
#[test]
fn lid_bounds_inside_regions_agree() {
    for cond in ["l >= s", "l > s", "l < s", "l <= s", "s <= l", "s > l", "l >= s + 3u32"] {
        let k = kernel(&format!(
            "kernel k(o: ptr<global, u32>, a: ptr<global, u32>, s: u32) {{
               local t: u32[64];
               let l: u32 = local_id(0);
               let g: u32 = global_id(0);
               t[l] = a[g];
               barrier(local);
               var v: u32 = t[(l + 5u32) & 63u32];
               if {cond} {{ v = v * 3u32 + t[l]; }}
               barrier(local);
               o[g] = v;
             }}"
        ));
        expect_regions(&k);
        for s in [0u32, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 1000, u32::MAX] {
            for local in [8u32, 24, 64] {
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(s)];
                let bufs = [Buffer::zeroed(Scalar::U32, 64), keys(64, s)];
                let r = NdRange::new(&[64 - 64 % local]).with_local(&[local]);
                agree(&k, &r, &args, &bufs, &format!("{cond} s={s} local {local}"));
            }
        }
    }
}

/// A region that binds 64-bit names while an earlier region's value is restored into a
/// register: the region's names must stay in frame slots (a 64-bit name in registers takes
/// two, and its save kept one), so the later region reads every lane of `v0` and `v1`.
/// x86_diff's random kernel, as it found it.
#[test]
fn sixty_four_bit_names_of_a_region_with_restored_registers_agree() {
    let k = kernel(
        "kernel k0(in0: ptr<global, u8>, in1: ptr<global, f64>, out0: ptr<global, i8>, s0: i64) {
           let lin: u32 = global_id(0) - global_offset(0);
           let llin: u32 = local_id(0);
           barrier(local);
           out0[lin * 3 + 0.0 as u64 as u32 % 3] = -16;
           out0[lin * 3 + (0u16 + 0u16 + 0u16) as u32 % 3] = min(-out0[lin * 3 + 0], 0);
           var v0: f64 = -20.0 + abs(in1[0i64 as u32 % 4]) + (abs(in1[min(0u64, 0u64) as u32 % 4]) + -20.0);
           var v1: i64 = min(num_groups(0) as i64, min(s0, global_id(0) as i64)) - (global_id(0) as i64 + global_id(0) as i64 + min(0, s0));
           barrier(local);
           out0[lin * 3 + 0i8 as u32 % 3] = v1 as i8;
           out0[lin * 3 + 1] = v0 as i8;
         }",
    );
    expect_regions(&k);
    let x = Buffer::from_slice(&[0.0f64, 1e30, -20.0, -20.0]);
    for (n, local) in [(8u32, 8u32), (16, 8), (24, 24)] {
        let r = NdRange::new(&[n]).with_local(&[local]);
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(0i64)];
        let bufs =
            [Buffer::zeroed(Scalar::U8, 4), x.clone(), Buffer::zeroed(Scalar::I8, 3 * n as usize)];
        agree(&k, &r, &args, &bufs, &format!("{n} items, groups of {local}"));
    }
}
