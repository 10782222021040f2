//! Adversarial review (session 14, issue 24) of the day's x86 8-lane changes, part one:
//! accesses narrowed to a lane mask known when the code is generated (`spmd/mem.rs`),
//! i64/u64 <-> float conversions in the 8-lane code, and batches that keep no id register up
//! to date (`ids_stale`). Every kernel runs three ways (interpreter, scalar code, 8-lane
//! code plain, `-O` and with general groups), errors word for word. Programs compiled for a
//! launch's group size and their images: `x86_review_s14_groups.rs`.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use std::sync::Arc;

use x86_common::{agree, avx2, expect_fixed, f32s, kernel, vals};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Imm, Kernel, Scalar};

// ---------------------------------------------------------------------------------------
// Narrow accesses under known lane masks.

/// Masks that are prefixes and masks that are not (lanes 1-2, lane 7, lanes 0-2, lanes 0-4,
/// lanes 0-1 and lane 0), over int and float local arrays, a narrow load whose value a later
/// unmasked statement uses, a global load under a mask.
#[test]
fn masks_prefix_and_not() {
    for ty in ["i32", "f32"] {
        let src = "kernel k(o: ptr<global, T>, a: ptr<global, T>) #reqd_work_group_size(8, 1, 1) {
             local t: T[8];
             private p: T[1];
             let l: u32 = local_id(0);
             let g: u32 = global_id(0);
             t[l] = a[g];
             barrier(local);
             if l >= 1u32 && l < 3u32 { t[l] = t[l] + t[l + 4u32]; }
             barrier(local);
             if l == 7u32 { t[l] = t[l] * (2 as T); }
             barrier(local);
             var v: T = 0 as T;
             if l < 3u32 { v = t[l]; t[l] = a[g] + v; }
             barrier(local);
             if l < 5u32 { t[l] = t[l] - (1 as T); }
             barrier(local);
             if l < 2u32 { t[l] = t[l + 2u32] + t[l + 6u32]; }
             barrier(local);
             if l == 0u32 { p[0] = t[l]; t[l] = p[0] + t[7]; }
             barrier(local);
             o[g] = t[l] + v;
           }"
        .replace('T', ty);
        let k = kernel(&src);
        let s = if ty == "i32" { Scalar::I32 } else { Scalar::F32 };
        for n in [8usize, 16, 64] {
            let args = [Arg::Buffer(0), Arg::Buffer(1)];
            let bufs = [Buffer::zeroed(s, n), vals(s, n, n as u32)];
            let r = NdRange::new(&[n as u32]).with_local(&[8]);
            agree(&k, &r, &args, &bufs, &format!("{ty} n {n}"));
        }
    }
}

/// A narrow load feeding an integer division in the masked lanes only: the lanes outside
/// the mask must not divide (they would read 0 now) nor fault; and a division by zero in an
/// active lane must be the interpreter's error (work-item, message).
#[test]
fn narrow_load_feeding_division() {
    let k = kernel(
        "kernel k(o: ptr<global, i32>, a: ptr<global, i32>) #reqd_work_group_size(8, 1, 1) {
           local t: i32[8];
           let l: u32 = local_id(0);
           let g: u32 = global_id(0);
           t[l] = a[g];
           barrier(local);
           if l < 3u32 { t[l] = 1000 / t[l]; }
           barrier(local);
           if l >= 1u32 && l < 3u32 { t[l] = t[l] % t[l + 1u32]; }
           barrier(local);
           if l == 7u32 { t[l] = 77 / t[l]; }
           barrier(local);
           o[g] = t[l];
         }",
    );
    let args = [Arg::Buffer(0), Arg::Buffer(1)];
    let good = vals(Scalar::I32, 32, 5);
    let r = NdRange::new(&[32]).with_local(&[8]);
    agree(&k, &r, &args, &[Buffer::zeroed(Scalar::I32, 32), good.clone()], "no zero");
    // Zeros where the masks are off (lanes 3..7 but 7 for the first): no fault.
    let mut zeros = good.clone();
    for i in [3usize, 4, 5, 6, 11, 12, 13, 14, 22] {
        zeros.set(i, Imm::int(Scalar::I32, 0)).unwrap();
    }
    agree(&k, &r, &args, &[Buffer::zeroed(Scalar::I32, 32), zeros.clone()], "zeros outside");
    // A zero in an active lane of the second group, then of lane 7.
    for i in [9usize, 15, 1] {
        let mut z = zeros.clone();
        z.set(i, Imm::int(Scalar::I32, 0)).unwrap();
        agree(&k, &r, &args, &[Buffer::zeroed(Scalar::I32, 32), z], &format!("zero at {i}"));
    }
}

/// Local arrays whose length ends inside the 8-lane window (5 and 3 elements), accessed
/// under masks up to their end, in int and float (no lane reads what another lane
/// writes between the same barriers: that would be a race).
#[test]
fn local_arrays_ending_inside_the_window() {
    let k = kernel(
        "kernel k(o: ptr<global, f32>, a: ptr<global, f32>, q: ptr<global, i32>) #reqd_work_group_size(8, 1, 1) {
           local t: f32[5];
           local u: i32[3];
           let l: u32 = local_id(0);
           let g: u32 = global_id(0);
           if l < 5u32 { t[l] = a[g]; }
           if l < 3u32 { u[l] = q[g]; }
           barrier(local);
           if l < 5u32 { t[l] = t[l] * 2.0; }
           if l >= 1u32 && l < 3u32 { t[l] = t[l] + (u[l - 1u32] as f32); }
           barrier(local);
           if l < 3u32 { o[g] = t[l] + (u[l] as f32); } else { if l < 5u32 { o[g] = t[l]; } }
         }",
    );
    for n in [8u32, 24] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
        let bufs = [
            Buffer::zeroed(Scalar::F32, n as usize),
            f32s(n as usize, n),
            vals(Scalar::I32, n as usize, 3),
        ];
        let r = NdRange::new(&[n]).with_local(&[8]);
        agree(&k, &r, &args, &bufs, &format!("n {n}"));
    }
}

/// A fault in an earlier statement of the same batch (a global load past the buffer's end
/// in some lanes) followed by a masked store to a local array and to a global buffer: the
/// error is the interpreter's, and a launch where no lane faults agrees.
#[test]
fn fault_then_masked_store() {
    let k = kernel(
        "kernel k(o: ptr<global, i32>, a: ptr<global, i32>, s: u32) #reqd_work_group_size(8, 1, 1) {
           local t: i32[8];
           let l: u32 = local_id(0);
           let g: u32 = global_id(0);
           t[l] = 0;
           barrier(local);
           if l < 4u32 {
             let x: i32 = a[g * s];
             t[l] = x;
             o[g] = x + 1;
           }
           barrier(local);
           o[g] = o[g] + t[l];
         }",
    );
    for (s, len) in [(1u32, 32usize), (2, 32), (3, 32), (4, 32), (2, 64)] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(s)];
        let bufs = [Buffer::zeroed(Scalar::I32, 32), vals(Scalar::I32, len, s)];
        let r = NdRange::new(&[32]).with_local(&[8]);
        agree(&k, &r, &args, &bufs, &format!("s {s} len {len}"));
    }
}

// ---------------------------------------------------------------------------------------
// i64/u64 <-> float conversions inside control.

/// Conversions at the edges inside divergent `if`s, selects, `var`s and loops.
#[test]
fn int64_float_casts_in_control() {
    let k = kernel(
        "kernel k(x: ptr<global, f64>, f: ptr<global, f32>, a: ptr<global, i64>, b: ptr<global, u64>, oi: ptr<global, i64>, ou: ptr<global, u64>, of: ptr<global, f32>, od: ptr<global, f64>) {
           let g: u32 = global_id(0);
           var vi: i64 = 0i64;
           var vu: u64 = 0u64;
           if (g % 3u32) == 1u32 {
             vi = x[g] as i64;
             vu = f[g] as u64;
           } else {
             vi = f[g] as i64;
             vu = x[g] as u64;
           }
           for j: u32 in 0u32 .. g % 4u32 {
             vi = vi + ((x[g] * 0.5f64) as i64);
             vu = vu ^ ((f[g] * 2.0) as u64);
           }
           oi[g] = select(x[g] > 0.0f64, vi, (f[g] as i64) - 1i64);
           ou[g] = select(g % 2u32 == 0u32, vu, x[g] as u64);
           of[g] = select(g % 5u32 == 0u32, b[g] as f32, a[g] as f32);
           var d: f64 = 0.0f64;
           if a[g] < 0i64 { d = a[g] as f64; } else { d = b[g] as f64; }
           od[g] = d + (b[g] as f32) as f64;
         }",
    );
    let fl: Vec<f64> = vec![
        0.0,
        -0.0,
        0.5,
        -0.5,
        1.0,
        -1.0,
        9223372036854774784.0,  // 2^63 - 1024
        -9223372036854775808.0, // -2^63
        9223372036854775808.0,  // 2^63
        -9.223372036854777e18,
        1.8446744073709552e19,
        18446744073709549568.0, // 2^64 - 2048
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        4294967296.5,
        -4294967296.5,
        2147483648.0,
        -2147483649.0,
        1e300,
        -1e300,
        9007199254740993.0,
        123456789012.75,
        -0.9999,
    ];
    let ints: Vec<i64> = vec![
        0,
        -1,
        1,
        i64::MAX,
        i64::MIN,
        i64::MIN + 1,
        (1 << 53) + 1,
        -(1 << 53) - 1,
        (1 << 54) + 3,
        (1 << 62) + (1 << 40) + 1,
        -(1 << 62) - 5,
        0x7fff_ffff,
        -0x8000_0000,
        0x1_0000_0001,
        (1 << 24) + 1,
        -(1 << 24) - 1,
        0x0020_0000_0000_0001,
        -0x0020_0000_0000_0003,
        12345,
        -12345,
        0x7fff_fe00_0000_0000,
        0x7fff_ff80_0000_0001,
        (1 << 25) + 3,
        -999,
    ];
    let uints: Vec<u64> = ints
        .iter()
        .map(|&i| i as u64)
        .chain([u64::MAX, 1 << 63, (1 << 63) + 1, u64::MAX - 1024])
        .collect();
    let n = 32usize;
    let f64s: Vec<f64> = (0..n).map(|i| fl[i % fl.len()]).collect();
    let f32s_: Vec<f32> = (0..n).map(|i| fl[(i * 5 + 3) % fl.len()] as f32).collect();
    let is: Vec<i64> = (0..n).map(|i| ints[i % ints.len()]).collect();
    let us: Vec<u64> = (0..n).map(|i| uints[(i * 3 + 1) % uints.len()]).collect();
    let args: Vec<Arg> = (0..8).map(Arg::Buffer).collect();
    let bufs = [
        Buffer::from_slice(&f64s),
        Buffer::from_slice(&f32s_),
        Buffer::from_slice(&is),
        Buffer::from_slice(&us),
        Buffer::zeroed(Scalar::I64, n),
        Buffer::zeroed(Scalar::U64, n),
        Buffer::zeroed(Scalar::F32, n),
        Buffer::zeroed(Scalar::F64, n),
    ];
    for local in [8u32, 16, 32] {
        let r = NdRange::new(&[n as u32]).with_local(&[local]);
        agree(&k, &r, &args, &bufs, &format!("local {local}"));
    }
}

// ---------------------------------------------------------------------------------------
// Batches that keep no id register up to date.

/// The arguments of this section's kernels (`a: u32, w: u64, b: u8, o: u32, f: f32`
/// buffers), `n` elements each, `a` holding data.
fn id_args(n: usize) -> (Vec<Arg>, [Buffer; 5]) {
    let bufs = [
        vals(Scalar::U32, n, 2),
        Buffer::zeroed(Scalar::U64, n),
        Buffer::zeroed(Scalar::U8, n),
        Buffer::zeroed(Scalar::U32, n),
        Buffer::zeroed(Scalar::F32, n),
    ];
    ((0..5).map(Arg::Buffer).collect(), bufs)
}

/// Region statements that read the id lanes in ways a scan might miss: a `let` of an id
/// used later in arithmetic, an id stored as the value, `global_id(0)` as the index of a
/// 64-bit, a narrow and a local buffer, an id through a `select` and a cast.
#[test]
fn ids_read_in_roundabout_ways() {
    let k = kernel(
        "kernel k(a: ptr<global, u32>, w: ptr<global, u64>, b: ptr<global, u8>, o: ptr<global, u32>, f: ptr<global, f32>) {
           local t: u32[256];
           t[local_id(0)] = a[global_id(0)];
           barrier(local);
           let g: u32 = global_id(0);
           let l: u32 = local_id(0);
           o[global_id(0)] = t[l] + 1u32;
           barrier(local);
           w[global_id(0)] = (g as u64) * 3u64;
           b[global_id(0)] = (l + 5u32) as u8;
           barrier(local);
           a[global_id(0)] = global_id(0);
           barrier(local);
           t[local_id(0)] = g * 2u32 + l;
           barrier(local);
           f[global_id(0)] = (select(l > 3u32, g, l) as f32) + (t[l] as f32);
           barrier(local);
           o[global_id(0)] = o[global_id(0)] + t[(l + 1u32) % local_size(0)];
         }",
    );
    for (total, local, off) in
        [(64u32, 8u32, 0u32), (64, 16, 8), (96, 32, 0), (256, 256, 16), (48, 24, 0)]
    {
        let n = (total + off) as usize;
        let (args, bufs) = id_args(n);
        let r = NdRange::new(&[total]).with_local(&[local]).with_offset(&[off]);
        agree(&k, &r, &args, &bufs, &format!("{total}/{local} offset {off}"));
    }
}

// ---------------------------------------------------------------------------------------
// Narrow accesses where they are taken: regions of one `if` bounding `local_id(0)` by
// constants, in the group's first batch alone or in batches known when the code is
// generated.

/// The `if`s of the narrow-access regions below (lanes of their batches: prefixes, and not:
/// `lid > 0 && lid < 4` is lanes 1-3, `lid == 9` lane 1 of the second batch, `lid >= 5 &&
/// lid < 19` lanes 5-7, all, then 0-2).
const NARROW_IFS: [(&str, u32); 10] = [
    ("lid < 4u32", 4),
    ("lid < 2u32", 2),
    ("lid < 1u32", 1),
    ("lid < 3u32", 3),
    ("lid > 0u32 && lid < 4u32", 4),
    ("lid == 9u32", 1),
    ("lid >= 5u32 && lid < 19u32", 14),
    ("lid >= 8u32 && lid < 12u32", 4),
    ("lid < 12u32", 12),
    ("lid >= 1u32 && lid < 2u32", 1),
];

/// A kernel whose second region is `if COND { BODY }` over a local tile of `T`, then a
/// region reading the tile in every lane (the narrowly stored lanes and the others). The
/// bodies below read only elements no active lane writes (between two barriers, anything
/// else would be a race, whose outcome the interpreter's order does not define).
fn narrow_kernel(ty: &str, cond: &str, body: &str, fixed: bool) -> Kernel {
    let attr = if fixed { " #reqd_work_group_size(64, 1, 1)" } else { "" };
    let src = format!(
        "kernel k(x: ptr<global, {ty}>, o: ptr<global, {ty}>){attr} {{
           local t: {ty}[256];
           let lid: u32 = local_id(0);
           t[lid] = x[global_id(0)];
           barrier(local);
           if {cond} {{ {body} }}
           barrier(local);
           o[global_id(0)] = t[lid] + t[(lid + 1u32) % local_size(0)];
         }}"
    );
    kernel(&src)
}

/// Every narrow mask, i32 and f32 (and f64, which takes other code), loads only, loads and a
/// store, a store of a value computed from loads at other offsets; group sizes fixed by the
/// kernel (64) and by the launch (8, 16, 24, 64).
#[test]
fn narrow_masks_agree() {
    let bodies = [
        "t[lid] = t[lid] + t[lid + 20u32];",
        "t[lid] = t[lid + 29u32] * t[lid + 21u32] - t[lid];",
        "let v: T = t[lid + 22u32]; t[lid] = t[lid] + v * v;",
        // (The least offset that is not a race: `near` below.)
        "t[lid] = t[lid] + t[lid + NEAR];",
        "let v: T = t[lid + NEAR]; t[lid] = v - t[lid] * v;",
    ];
    for ty in ["i32", "f32", "f64"] {
        let s = match ty {
            "i32" => Scalar::I32,
            "f32" => Scalar::F32,
            _ => Scalar::F64,
        };
        for (cond, near) in NARROW_IFS {
            for body in bodies {
                let body = body.replace('T', ty).replace("NEAR", &format!("{near}u32"));
                for fixed in [true, false] {
                    let k = narrow_kernel(ty, cond, &body, fixed);
                    let locals: &[u32] = if fixed { &[64] } else { &[8, 16, 24, 64] };
                    for &l in locals {
                        let n = 192usize;
                        let args = [Arg::Buffer(0), Arg::Buffer(1)];
                        let bufs = [vals(s, n, l), Buffer::zeroed(s, n)];
                        let r = NdRange::new(&[n as u32]).with_local(&[l]);
                        agree(&k, &r, &args, &bufs, &format!("{ty} `{cond}` `{body}` local {l}"));
                    }
                }
            }
        }
    }
}

/// The narrow shapes above do take narrow loads (else `narrow_masks_agree` proves little):
/// 16- and 8-byte loads of the tile appear in the region-loop code.
#[test]
fn narrow_loads_are_taken() {
    if !avx2() {
        return kiln_ir::testing::skip("region loops need AVX2, which this CPU lacks");
    }
    for (cond, load, near) in [
        ("lid < 4u32", "vmovups xmm", 4),
        ("lid == 9u32", "vmovq xmm", 1),
        ("lid == 9u32", "vmovq xmm", 20),
    ] {
        for fixed in [true, false] {
            let body = format!("t[lid] = t[lid] + t[lid + {near}u32];");
            let k = narrow_kernel("i32", cond, &body, fixed);
            let p = compile(&k, &X86Options::default()).unwrap();
            // (Without a size of its own, the program compiled for groups of 64.)
            let p = if fixed { Arc::new(p) } else { p.for_group([64, 1, 1]).unwrap() };
            let d = p.disassemble();
            let regions = &d[d.find("; 8-lane region loops").expect("region code")..];
            assert!(regions.contains(load), "{cond}\n{regions}");
        }
    }
}

/// Narrow loads (the lanes outside the mask read as 0) feeding integer divisions and
/// remainders in the masked lanes only: no fault from the lanes outside, and a zero divisor
/// in an active lane is the interpreter's error.
#[test]
fn narrow_loads_feeding_divisions() {
    let k = kernel(
        "kernel k(x: ptr<global, i32>, o: ptr<global, i32>) #reqd_work_group_size(64, 1, 1) {
           local t: i32[64];
           local u: i32[64];
           let lid: u32 = local_id(0);
           t[lid] = x[global_id(0)];
           u[lid] = 0;
           barrier(local);
           if lid >= 5u32 && lid < 19u32 { u[lid] = 1000 / t[lid + 4u32] + t[lid] % t[lid + 1u32]; }
           barrier(local);
           if lid < 4u32 { u[lid] = 7 / t[lid + 4u32]; }
           barrier(local);
           if lid == 9u32 { u[lid] = u[lid] + 50 / t[lid]; }
           barrier(local);
           o[global_id(0)] = u[lid] + t[lid];
         }",
    );
    let args = [Arg::Buffer(0), Arg::Buffer(1)];
    let good = vals(Scalar::I32, 128, 9);
    let r = NdRange::new(&[128]).with_local(&[64]);
    agree(&k, &r, &args, &[good.clone(), Buffer::zeroed(Scalar::I32, 128)], "no zeros");
    // Zeros no active lane divides by (0-3, 24-63 of each group): no fault.
    let mut zeros = good.clone();
    for i in (0..4).chain(24..64).chain(64..68).chain(90..128) {
        zeros.set(i, Imm::int(Scalar::I32, 0)).unwrap();
    }
    agree(&k, &r, &args, &[zeros.clone(), Buffer::zeroed(Scalar::I32, 128)], "zeros outside");
    // i32::MIN / -1 in an active lane, and zero divisors in active lanes of the first and
    // second group.
    let mut min = zeros.clone();
    min.set(64 + 9, Imm::int(Scalar::I32, -1)).unwrap();
    min.set(64 + 5, Imm::int(Scalar::I32, i128::from(i32::MIN))).unwrap();
    min.set(64 + 6, Imm::int(Scalar::I32, -1)).unwrap();
    agree(&k, &r, &args, &[min, Buffer::zeroed(Scalar::I32, 128)], "MIN % -1");
    for i in [4usize, 9, 19, 64 + 22, 64 + 7, 64 + 8] {
        let mut z = zeros.clone();
        z.set(i, Imm::int(Scalar::I32, 0)).unwrap();
        agree(&k, &r, &args, &[z, Buffer::zeroed(Scalar::I32, 128)], &format!("zero at {i}"));
    }
}

/// Whole regions, group-guarded regions and masked ones, each one statement between
/// barriers in a kernel of a known group size, that read the id lanes in ways a scan for
/// them might miss: an id stored as the value, through an intrinsic, a `let` of it used in
/// arithmetic, as the index of 64-bit, 8-bit and local buffers, `local_id(0)` converted,
/// the id inside a comparison. Fixed by the kernel and by the launch; launch offsets that
/// are not multiples of 8.
#[test]
fn ids_in_known_batches() {
    let body = "
           local t: u32[256];
           t[local_id(0)] = 1u32;
           barrier(local);
           a[global_id(0)] = global_id(0);
           barrier(local);
           o[global_id(0)] = max(global_id(0), 70u32) + min(local_id(0), 9u32);
           barrier(local);
           let g: u32 = global_id(0);
           barrier(local);
           w[global_id(0)] = (g as u64) * 3u64 + (global_id(0) as u64);
           barrier(local);
           b[global_id(0)] = (global_id(0) + 5u32) as u8;
           barrier(local);
           t[local_id(0)] = global_id(0) * 2u32;
           barrier(local);
           if group_id(0) == 1u32 { o[global_id(0)] = o[global_id(0)] + global_id(0) * 7u32; }
           barrier(local);
           if local_id(0) < 12u32 { a[global_id(0)] = a[global_id(0)] + local_id(0) * 1000u32; }
           barrier(local);
           f[global_id(0)] = select(global_id(0) > 37u32, 1.5, 2.5) + (local_id(0) as f32);
           barrier(local);
           o[global_id(0)] = o[global_id(0)] + t[local_id(0)] + g;
         }";
    let sig = "kernel k(a: ptr<global, u32>, w: ptr<global, u64>, b: ptr<global, u8>, o: ptr<global, u32>, f: ptr<global, f32>)";
    for fixed in [true, false] {
        let attr = if fixed { " #reqd_work_group_size(32, 1, 1)" } else { "" };
        let k = kernel(&format!("{sig}{attr} {{{body}"));
        if !fixed {
            expect_fixed(&k, 32);
        }
        for off in [0u32, 3, 8, 13] {
            let total = 96u32;
            let n = (total + off) as usize;
            let (args, bufs) = id_args(n);
            let r = NdRange::new(&[total]).with_local(&[32]).with_offset(&[off]);
            agree(&k, &r, &args, &bufs, &format!("fixed {fixed} offset {off}"));
            // `a` and `o` windows of one buffer (their first elements not the buffer's).
            let mut windows = args.clone();
            windows[0] = Arg::Range { buffer: 0, offset: 5, len: n };
            windows[3] = Arg::Range { buffer: 0, offset: n + 11, len: n };
            let mut wb = bufs.to_vec();
            wb[0] = vals(Scalar::U32, 2 * n + 16, 4);
            wb[3] = Buffer::zeroed(Scalar::U32, 1);
            agree(&k, &r, &windows, &wb, &format!("windows, fixed {fixed} offset {off}"));
        }
    }
}

/// i64/u64 -> f32 where rounding twice (to f64, then to f32) goes wrong: just above, at and
/// just below the halfway points between f32 neighbours, at magnitudes from 2^53 to 2^64,
/// under a divergent `if` and a select; and f32/f64 -> u64 at 2^63 and 2^64.
#[test]
fn int64_to_f32_double_rounding_edges() {
    let k = kernel(
        "kernel k(a: ptr<global, i64>, b: ptr<global, u64>, fa: ptr<global, f32>, fb: ptr<global, f32>, x: ptr<global, f32>, ou: ptr<global, u64>, oi: ptr<global, i64>) {
           let g: u32 = global_id(0);
           if (g & 1u32) == 0u32 { fa[g] = a[g] as f32; } else { fa[g] = -(a[g] as f32); }
           fb[g] = select(g % 3u32 == 2u32, (b[g] as f64) as f32, b[g] as f32);
           ou[g] = x[g] as u64;
           oi[g] = select(x[g] < 0.0, x[g] as i64, (x[g] as f64) as i64);
         }",
    );
    let mut ints: Vec<i64> = Vec::new();
    let mut uints: Vec<u64> = Vec::new();
    for e in [53u32, 54, 55, 60, 62] {
        let base = 1i64 << e;
        let half = 1i64 << (e - 24); // half an f32 ulp at 2^e
        for d in [-1i64, 0, 1] {
            for x in [base + half + d, base + 3 * half + d, base + half + (half >> 12) + d] {
                ints.extend([x, -x]);
            }
        }
    }
    for e in [53u32, 60, 63] {
        let base = 1u64 << e;
        let half = 1u64 << (e - 24);
        for x in [base + half - 1, base + half, base + half + 1, base + 3 * half + 1] {
            uints.push(x);
        }
    }
    uints.extend([u64::MAX, u64::MAX - (1 << 39), u64::MAX - (1 << 39) + 1, (1 << 63) - 1]);
    let floats: Vec<f32> = vec![
        9.223372e18,
        -9.223372e18,
        1.8446743e19,
        1.8446744e19,
        1.8446746e19,
        -0.0,
        -0.75,
        0.75,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        16777217.0,
        4294967296.0,
        -4294967296.0,
        f32::MIN_POSITIVE,
        f32::from_bits(0x5eff_ffff), // just below 2^63
        f32::from_bits(0xdf00_0001), // just below -2^63
    ];
    let n = ints.len().max(uints.len()).max(floats.len()).div_ceil(8) * 8;
    let cyc = |v: &Vec<i64>| (0..n).map(|i| v[i % v.len()]).collect::<Vec<_>>();
    let is = cyc(&ints);
    let us: Vec<u64> = (0..n).map(|i| uints[i % uints.len()]).collect();
    let fs: Vec<f32> = (0..n).map(|i| floats[i % floats.len()]).collect();
    let args: Vec<Arg> = (0..7).map(Arg::Buffer).collect();
    let bufs = [
        Buffer::from_slice(&is),
        Buffer::from_slice(&us),
        Buffer::zeroed(Scalar::F32, n),
        Buffer::zeroed(Scalar::F32, n),
        Buffer::from_slice(&fs),
        Buffer::zeroed(Scalar::U64, n),
        Buffer::zeroed(Scalar::I64, n),
    ];
    let r = NdRange::new(&[n as u32]).with_local(&[8]);
    agree(&k, &r, &args, &bufs, "edges");
}

/// Control inside a region under a known lane mask: a nested divergent `if`, a `while`
/// whose lanes leave at different rounds, a `for` with a divergent `break`-like bound, an
/// `if`/`else`. The lanes that do not run a store must not be stored (a plain store of
/// the mask's lanes would write them).
#[test]
fn control_inside_known_masks() {
    let bodies = [
        "if t[lid + 40u32] > 0 { t[lid] = t[lid] + 5; }",
        "var j: i32 = 0; while j < t[lid + 40u32] % 4 { t[lid] = t[lid] + 1; j = j + 1; }",
        "for j: u32 in 0u32 .. (lid * 3u32) % 5u32 { t[lid] = t[lid] * 2 + 1; }",
        "if (t[lid + 40u32] & 1) == 0 { t[lid] = t[lid] - 7; } else { t[lid + 20u32] = 9; }",
        "var c: i32 = t[lid + 40u32]; while c > 2 { c = c / 2; t[lid] = c; }",
    ];
    for cond in [
        "lid < 4u32",
        "lid < 2u32",
        "lid < 1u32",
        "lid == 9u32",
        "lid >= 5u32 && lid < 19u32",
        "lid < 12u32",
    ] {
        for body in bodies {
            for fixed in [true, false] {
                let k = narrow_kernel("i32", cond, body, fixed);
                let locals: &[u32] = if fixed { &[64] } else { &[64, 16] };
                for &l in locals {
                    for seed in [1u32, 4, 11] {
                        let n = 128usize;
                        let args = [Arg::Buffer(0), Arg::Buffer(1)];
                        let bufs = [vals(Scalar::I32, n, seed), Buffer::zeroed(Scalar::I32, n)];
                        let r = NdRange::new(&[n as u32]).with_local(&[l]);
                        agree(&k, &r, &args, &bufs, &format!("`{cond}` `{body}` local {l}"));
                    }
                }
            }
        }
    }
}
