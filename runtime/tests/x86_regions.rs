//! Work-groups with barriers as region loops on the 8-lane code (backends/src/x86/spmd/
//! region.rs): which kernels get them, and that they agree with the interpreter and the
//! scalar code, errors included, where the batch ranges are trimmed by conditions on
//! `local_id(0)` (bounds that are not multiples of 8, past the group, from a buffer), where
//! values live across barriers (lets, vars, f64 and atomic results), in loops around
//! barriers, and where lanes fault.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{avx2, f32s, kernel, three_ways};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Kernel, Scalar};
use kiln_runtime::device::cpu::{CpuRun, CpuRunOptions};
use proptest::prelude::*;

fn has_regions(k: &Kernel) -> bool {
    [false, true].iter().all(|&optimize| {
        compile(k, &X86Options { optimize, ..X86Options::default() }).unwrap().has_region_code()
    })
}

#[test]
fn which_barrier_kernels_get_region_loops() {
    if !avx2() {
        return kiln_ir::testing::skip("region loops need AVX2, which this CPU lacks");
    }
    let reduce = kiln_ir::parse_module(include_str!("../../examples/reduce.kir")).unwrap();
    assert!(has_regions(&reduce.kernels[0]));
    let suite = kiln_ir::parse_module(include_str!("../../runtime/benches/cpu_suite.kir")).unwrap();
    let hist = suite.kernels.iter().find(|k| k.name() == "histogram").unwrap();
    assert!(has_regions(hist));
    // A barrier under control that may differ between work-items of the group: the
    // round-by-round code only.
    for body in [
        "if o[1] == 0u32 { barrier(local); } o[global_id(0)] = 1u32;",
        "var s: u32 = o[0]; while s > 0u32 { barrier(local); s = s / 2u32; }",
        "for r: u32 in 0u32 .. 4u32 step m { barrier(local); }",
        "let d: u32 = 8u32 / m; if d > 1u32 { barrier(local); }",
    ] {
        let k = kernel(&format!("kernel k(o: ptr<global, u32>, m: u32) {{ {body} }}"));
        assert!(compile(&k, &X86Options::default()).unwrap().has_spmd(), "{body}");
        assert!(!compile(&k, &X86Options::default()).unwrap().has_region_code(), "{body}");
    }
}

/// Conditions on `local_id(0)` that trim a region's batches, with bounds around the
/// batch edges and the group's size; each kernel also reads values of earlier regions.
#[test]
fn trimmed_regions_agree() {
    let conds = [
        "l < s",
        "l <= s",
        "s > l",
        "l == s",
        "s == l",
        "l >= s",
        "l > s",
        "l >= s && l < s + 11u32",
        "l > 3u32 && l <= s",
        "l < s && (l & 1u32) == 0u32",
        "l < t[0]",
        "local_id(0) < s",
    ];
    for cond in conds {
        let k = kernel(&format!(
            "kernel k(o: ptr<global, u32>, a: ptr<global, u32>, s: u32) {{
               local t: u32[64];
               let l: u32 = local_id(0);
               let g: u32 = global_id(0);
               var acc: u32 = a[g] * 3u32;
               t[l] = acc;
               barrier(local);
               if {cond} {{ o[g] = t[(l + 1u32) & 63u32] + acc + l; }}
               barrier(local);
               acc = acc + t[l];
               o[g + 128u32] = acc;
             }}"
        ));
        for s in [0u32, 1, 7, 8, 9, 13, 31, 32, 33, 63, 64, 65, 1000, u32::MAX] {
            for local in [8u32, 24, 64] {
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(s)];
                let a: Vec<u32> = (0..128u32).map(|i| i.wrapping_mul(0x9e37_79b9) >> 7).collect();
                let bufs = [Buffer::zeroed(Scalar::U32, 256), Buffer::from_slice(&a)];
                // (An offset that is not a multiple of 8: batches start at odd global ids.)
                let r = NdRange::new(&[128 - 128 % local - local])
                    .with_local(&[local])
                    .with_offset(&[if s % 2 == 1 { 5 } else { 0 }]);
                assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "{cond} s={s} {local}");
            }
        }
        if avx2() {
            assert!(has_regions(&k), "{cond}");
        }
    }
}

/// Values of every width live across barriers, a group `for` and a group `if` around
/// barriers, f32 and f64 vars, atomic results; faults in a later region, in a trimmed
/// region and in a middle batch.
#[test]
fn values_across_barriers_and_faults_agree() {
    let k = kernel(
        "kernel k(o: ptr<global, f32>, w: ptr<global, f64>, ix: ptr<global, u32>, c: ptr<global, u32>, p: ptr<global, f32>, m: u32) {
           local t: f32[64];
           let l: u32 = local_id(0);
           let g: u32 = global_id(0);
           let x: f32 = o[g];
           var d: f64 = w[g];
           let ticket: u32 = atomic_add(c, 0u32, 1u32);
           t[l] = x;
           var half: u32 = local_size(0) / 2u32;
           for r: u32 in 0u32 .. 3u32 {
             barrier(local);
             if l < half { t[l] = t[l] + t[l + half]; }
             half = half / 2u32;
             d = d + 1.5;
           }
           barrier(local);
           if m > 2u32 {
             barrier(local);
             p[ix[g]] = t[0] + x;
           }
           if l == m { o[g] = t[l + m] + (ticket as f32); }
           w[g] = d;
         }",
    );
    let ix_ok: Vec<u32> = (0..128u32).map(|i| (i * 5) % 128).collect();
    let mut ix_bad = ix_ok.clone();
    ix_bad[77] = 500;
    ix_bad[79] = 600;
    for (m, ix) in [(0u32, &ix_ok), (3, &ix_ok), (5, &ix_bad), (60, &ix_ok), (1, &ix_bad)] {
        for local in [16u32, 32, 64] {
            let args = [
                Arg::Buffer(0),
                Arg::Buffer(1),
                Arg::Buffer(2),
                Arg::Buffer(3),
                Arg::Buffer(4),
                Arg::scalar(m),
            ];
            let w: Vec<f64> = (0..128).map(|i| i as f64 * 0.25 - 3.0).collect();
            let bufs = [
                f32s(128, 5),
                Buffer::from_slice(&w),
                Buffer::from_slice(ix),
                Buffer::zeroed(Scalar::U32, 1),
                Buffer::zeroed(Scalar::F32, 128),
            ];
            let r = NdRange::new(&[128]).with_local(&[local]);
            assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "m={m} {local}");
        }
    }
    if avx2() {
        assert!(has_regions(&k));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Random race-free reductions with bounds on `local_id(0)` between barriers in group
    /// loops: group sizes of one row, bounds that are not multiples of 8 or past the
    /// group (and within the first batch); a last atomic at `local_id(0)` into a buffer
    /// that may end inside the group (the region's proof must fail there).
    #[test]
    fn random_region_kernels_agree(
        cond in prop::sample::select(vec!["l < s", "l + s < 64u32", "l >= s && l < 2u32 * s", "l == s - 1u32", "l <= s + 2u32"]),
        step in prop::sample::select(vec!["s = s / 2u32;", "s = s - 3u32;", "s = (s * 5u32) / 8u32;"]),
        s0 in prop::sample::select(vec![1u32, 5, 13, 32, 40, 63]),
        local in prop::sample::select(vec![8u32, 16, 40, 64]),
        n in prop::sample::select(vec![64u32, 100, 128]),
        hl in prop::sample::select(vec![40usize, 63, 64, 128]),
    ) {
        let k = kernel(&format!(
            "kernel k(o: ptr<global, u32>, a: ptr<global, u32>, s0: u32, h: ptr<global, u32>) {{
               local t: u32[64];
               local u: u32[64];
               let l: u32 = local_id(0);
               t[l] = a[global_id(0)];
               var s: u32 = s0;
               while s > 0u32 && s < 64u32 {{
                 barrier(local);
                 if {cond} {{ u[l] = t[l] + t[(l + s) & 63u32] * 3u32; }}
                 barrier(local);
                 if {cond} {{ t[l] = u[l]; }}
                 {step}
               }}
               barrier(local);
               if l == 0u32 {{ o[group_id(0)] = t[0] + t[s0 & 63u32]; }}
               atomic_add(h, l, t[l] & 255u32);
             }}"
        ));
        let a: Vec<u32> = (0..n).map(|i| i.wrapping_mul(0x9e37_79b9) >> 9).collect();
        let bufs =
            [Buffer::zeroed(Scalar::U32, 16), Buffer::from_slice(&a), Buffer::zeroed(Scalar::U32, hl)];
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(s0), Arg::Buffer(2)];
        let r = NdRange::new(&[128 - 128 % local]).with_local(&[local]);
        prop_assert_eq!(three_ways(&k, &r, &args, &bufs), avx2());
        if avx2() {
            prop_assert!(has_regions(&k));
        }
    }
}

/// Contiguous accesses (`local_id(0)`/`global_id(0)` plus a uniform value) under no mask
/// are plain vector accesses when the batch's lanes are all alive and in bounds: at the
/// edges (the first index at the length minus 8, minus 7, past the end, wrapping), after
/// a lane of the batch faulted, in region loops and without barriers.
#[test]
fn contiguous_accesses_near_the_end_agree() {
    // (Without the barrier, `t` is read where this work-item wrote: other work-items'
    // elements would be a race.)
    for (barrier, at) in [("", "l"), ("barrier(local);", "l + m")] {
        let k = kernel(&format!(
            "kernel k(o: ptr<global, u32>, a: ptr<global, u32>, ix: ptr<global, u32>, m: u32) {{
               local t: u32[40];
               let l: u32 = local_id(0);
               let g: u32 = global_id(0);
               let x: u32 = a[ix[g]];
               t[l] = x;
               {barrier}
               let v: u32 = t[{at}];
               o[g + m] = v + a[g + m] + x;
             }}"
        ));
        let ix_ok: Vec<u32> = (0..64u32).map(|i| (i * 3) % 64).collect();
        let mut ix_bad = ix_ok.clone();
        ix_bad[21] = 99;
        for m in [0u32, 1, 7, 8, 9, u32::MAX, u32::MAX - 7, 100] {
            for ix in [&ix_ok, &ix_bad] {
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(m)];
                let a: Vec<u32> = (0..72u32).map(|i| i * 7 + 1).collect();
                let bufs = [
                    Buffer::zeroed(Scalar::U32, 72),
                    Buffer::from_slice(&a),
                    Buffer::from_slice(ix),
                ];
                let r = NdRange::new(&[64]).with_local(&[32]);
                assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "{barrier} m={m}");
            }
        }
    }
}

/// Several groups run per call of the region code: each starts with its local arrays
/// zeroed and its own ids (a group scatters to data-dependent elements; the next one reads
/// elements it did not write), and a fault in a later group of a call is reported there.
#[test]
fn groups_of_one_call_start_afresh() {
    let k = kernel(
        "kernel k(o: ptr<global, u32>, a: ptr<global, u32>, bad: u32) {
           local t: u32[64];
           local big: u32[300];
           let l: u32 = local_id(0);
           let g: u32 = global_id(0);
           if (a[g] & 1u32) == 1u32 {
             t[(l * 7u32) & 63u32] = l + group_id(0) * 100u32;
             big[(l * 37u32) % 300u32] = a[g];
           }
           barrier(local);
           o[g] = t[l] + big[l + 200u32] * 3u32 + a[g + (g / bad) * 1000u32];
         }",
    );
    // `bad` past the grid: no fault; 150: a fault in a later group of a call.
    for (bad, local) in [(1000u32, 8u32), (1000, 16), (1000, 64), (150, 8), (150, 32)] {
        let a: Vec<u32> = (0..200u32).map(|i| i.wrapping_mul(2_654_435_761) >> 13).collect();
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(bad)];
        let bufs = [Buffer::zeroed(Scalar::U32, 192), Buffer::from_slice(&a)];
        let r = NdRange::new(&[192]).with_local(&[local]);
        assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "{bad} {local}");
    }
    if avx2() {
        assert!(has_regions(&k));
    }
}

/// Contiguous accesses at `local_id(0)` plus a group value, proven in bounds once per
/// region (`proven.rs`): loads and stores, local and global, the first index past the end
/// by one (a fault the proof must not hide), at the end exactly, wrapping, with the offset
/// a group `var`, and with an offset declared in the region (not proven: it differs
/// between batches).
#[test]
fn region_bounds_proven_once_agree() {
    let k = kernel(
        "kernel k(o: ptr<global, u32>, a: ptr<global, u32>, q: u32) {
           local t: u32[72];
           let l: u32 = local_id(0);
           let g: u32 = global_id(0);
           t[l + q] = a[g];
           barrier(local);
           var h: u32 = q + 1u32;
           o[g] = t[l + h] + t[l];
           barrier(local);
           o[l + (h + 200u32)] = l * 3u32;
           barrier(local);
           let d: u32 = g & 1u32;
           o[g + 64u32] = t[l + d] + d;
         }",
    );
    let a: Vec<u32> = (0..64u32).map(|i| i.wrapping_mul(0x9e37_79b9) >> 5).collect();
    for q in [0u32, 1, 6, 7, 8, 9, 40, 63, 64, 65, u32::MAX, u32::MAX - 3, u32::MAX - 63] {
        for local in [8u32, 24, 32, 64] {
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(q)];
            let bufs = [Buffer::zeroed(Scalar::U32, 273), Buffer::from_slice(&a)];
            let r = NdRange::new(&[64 - 64 % local])
                .with_local(&[local])
                .with_offset(&[if q % 2 == 1 { 5 } else { 0 }]);
            assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "q={q} {local}");
        }
    }
    if avx2() {
        assert!(has_regions(&k));
    }
}

/// A `let` of `local_id(0)` lives in a register that each region's batch recomputes
/// (region loops keep no other `let` registers): declared after the first barrier and read
/// in later regions (trimmed at bounds around the batch edges, with an offset that is not
/// a multiple of 8), beside a second such `let` (in a frame slot) and a `let` inside a
/// branch.
#[test]
fn local_id_lets_in_a_register_agree() {
    let k = kernel(
        "kernel k(o: ptr<global, u32>, a: ptr<global, u32>, s: u32) {
           local t: u32[64];
           let g: u32 = global_id(0);
           t[(g * 5u32) & 63u32] = a[g];
           barrier(local);
           let l: u32 = local_id(0);
           var acc: u32 = t[(l * 5u32 + group_id(0) * 3u32) & 63u32] + l;
           barrier(local);
           if l < s { o[g] = acc + t[(l + 3u32) & 63u32] * l; }
           barrier(local);
           let l2: u32 = local_id(0);
           if l2 > 2u32 { let q: u32 = l * 2u32 + l2 * 9u32; o[g + 128u32] = q + acc; }
           barrier(local);
           o[g + 256u32] = l + l2 * 7u32;
         }",
    );
    let a: Vec<u32> = (0..140u32).map(|i| i.wrapping_mul(0x9e37_79b9) >> 7).collect();
    for s in [0u32, 1, 7, 8, 9, 23, 64, 1000] {
        for local in [8u32, 24, 64] {
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(s)];
            let bufs = [Buffer::zeroed(Scalar::U32, 400), Buffer::from_slice(&a)];
            let r = NdRange::new(&[128 - 128 % local])
                .with_local(&[local])
                .with_offset(&[if s % 2 == 1 { 5 } else { 0 }]);
            assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "s={s} {local}");
        }
    }
    if avx2() {
        assert!(has_regions(&k));
    }
}

/// In a trimmed region, the batches wholly inside the range run one of two twins of the
/// branch's body, the region's bounds proof tested once per batch: proven (plain accesses,
/// no test per access) or not (each access checked). The offsets put the last lane at the
/// arrays' ends exactly and past them by one (a fault the proven twin must not hide), with
/// the range ending inside, at and past the group; `u[l]` and `u[l + q]` are proven
/// separately (one test per table and offset).
#[test]
fn proven_twins_in_trimmed_regions_agree() {
    let k = kernel(
        "kernel k(o: ptr<global, u32>, a: ptr<global, u32>, q: u32, s: u32) {
           local t: u32[64];
           local u: u32[72];
           let l: u32 = local_id(0);
           let g: u32 = global_id(0);
           t[l] = a[g];
           barrier(local);
           if l < s { u[l + 8u32] = t[l] * 3u32 + l; }
           barrier(local);
           if l < s { o[l + q] = t[l] + u[l] + u[l + q]; }
           barrier(local);
           o[g + 100u32] = u[l];
         }",
    );
    let a: Vec<u32> = (0..64u32).map(|i| i.wrapping_mul(0x9e37_79b9) >> 5).collect();
    for q in [0u32, 7, 8, 9, 16, u32::MAX] {
        for s in [8u32, 13, 56, 64, 65] {
            for local in [16u32, 64] {
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(q), Arg::scalar(s)];
                // (`o` ends 8 past `u`: its offset reaches one further.)
                let bufs = [Buffer::zeroed(Scalar::U32, 164), Buffer::from_slice(&a)];
                let r = NdRange::new(&[64]).with_local(&[local]);
                assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "q={q} s={s} {local}");
            }
        }
    }
    if avx2() {
        assert!(has_regions(&k));
    }
}

/// Indices whose form bounds them below a local array's length need no check
/// (`mem.rs`'s `index_max`): `x & c`, `x % c`, `x >> c`, casts from 8/16-bit types, in
/// loads, stores and atomics (the histogram's `bins[data[i] & 255]`). A bound one past
/// the end (`& 256`, `% 257`, `>> 23`, an `i32` mask with the sign bit) must still fault
/// where a lane's value reaches it, as the interpreter reports.
#[test]
fn indices_bounded_below_local_lengths_agree() {
    let forms = [
        ("x & 255u32", true),
        ("x & 256u32", false),
        ("(x & 255u32) & y", true),
        ("x % 256u32", true),
        ("x % 257u32", false),
        ("x >> 24u32", true),
        ("x >> 56u32", true),
        ("x >> 23u32", false),
        ("((x as u8) as u32)", true),
        ("((x as u16) as u32) >> 8u32", true),
        ("(x as i32) & 255", true),
        ("(x as i32) & -2147483393", false),
        ("y", false),
    ];
    for (form, bounded) in forms {
        let k = kernel(&format!(
            "kernel k(o: ptr<global, u32>, a: ptr<global, u32>, p: ptr<global, u32>, y: u32) {{
               local bins: u32[256];
               let l: u32 = local_id(0);
               let g: u32 = global_id(0);
               let x: u32 = a[g];
               atomic_add(bins, {form}, 1u32);
               barrier(local);
               p[g] = bins[{form}];
               barrier(local);
               // (Stores of several work-items to one element: the last one's stays.)
               bins[{form}] = l;
               barrier(local);
               atomic_add(o, l, bins[l]);
             }}"
        ));
        // Values past 2^31 too (negative as i32); `big` reaches every bit.
        let mut faults = false;
        let low: Vec<u32> = (0..256u32).map(|i| i.wrapping_mul(0x9e37_79b9) >> 24).collect();
        let big: Vec<u32> = (0..256u32).map(|i| i.wrapping_mul(0x9e37_79b9)).collect();
        for (data, y) in [(&low, 255u32), (&big, 255), (&big, 256), (&low, 300)] {
            for local in [64u32, 256] {
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(y)];
                let bufs = [
                    Buffer::zeroed(Scalar::U32, 256),
                    Buffer::from_slice(data),
                    Buffer::zeroed(Scalar::U32, 256),
                ];
                let r = NdRange::new(&[256]).with_local(&[local]);
                assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "{form} y={y} {local}");
                faults |= kiln_ir::interp::run(&k, &r, &args, &mut bufs.to_vec()).is_err();
            }
        }
        // (The data reach past the end exactly where the form does not bound the index.)
        assert_eq!(faults, !bounded, "{form}");
        if avx2() {
            assert!(has_regions(&k), "{form}");
        }
    }
}

/// Atomics at `local_id(0)` plus a group value are covered by the region's bounds proof
/// (the histogram's `atomic_add(hist, lid, bins[lid])`): the buffer one element short of
/// the last lane's index must fault; a whole region whose statements run as two copies
/// (proven or not) beside a second `let` of `local_id(0)` (which keeps one copy).
#[test]
fn proven_atomics_and_region_copies_agree() {
    let k = kernel(
        "kernel k(h: ptr<global, u32>, a: ptr<global, u32>, q: u32) {
           local t: u32[64];
           let l: u32 = local_id(0);
           let l2: u32 = local_id(0);
           let g: u32 = global_id(0);
           t[l] = a[g] + l2;
           barrier(local);
           atomic_add(h, l + q, t[l]);
           barrier(local);
           if l < q { atomic_add(h, l + 1u32, t[l + 1u32] * 2u32); }
         }",
    );
    let a: Vec<u32> = (0..128u32).map(|i| i.wrapping_mul(0x9e37_79b9) >> 9).collect();
    for q in [0u32, 1, 7, 8, 9, 13, 63, 64, u32::MAX] {
        for (local, len) in [(16u32, 80usize), (64, 72), (64, 73), (64, 128)] {
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(q)];
            let bufs = [Buffer::zeroed(Scalar::U32, len), Buffer::from_slice(&a)];
            let r = NdRange::new(&[128]).with_local(&[local]);
            assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "q={q} {local} {len}");
        }
    }
    if avx2() {
        assert!(has_regions(&k));
    }
}

/// A trimmed region whose range ends within the group's first 8 work-items runs that one
/// batch with no batch loop (the reduction's rounds of strides 4, 2, 1): bounds from 0 to
/// 9 and wrapping, `<`, `<=` and `==`, offsets reaching the array's end exactly and one past
/// it (a fault), groups of 8 and more.
#[test]
fn first_batch_only_rounds_agree() {
    for cond in ["l < s", "l <= s", "l == s", "s > l && l < 7u32"] {
        let k = kernel(&format!(
            "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, s: u32, q: u32) {{
               local t: f32[24];
               let l: u32 = local_id(0);
               let g: u32 = global_id(0);
               if l < 24u32 {{ t[l] = x[g]; }}
               barrier(local);
               if {cond} {{ t[l] = t[l] + t[l + q]; }}
               barrier(local);
               if l == 0u32 {{ o[group_id(0)] = t[0] + t[1] * 2.0 + t[7] * 4.0 + t[8] * 8.0; }}
             }}"
        ));
        let x: Vec<f32> = (0..64).map(|i| i as f32 * 0.75 - 9.0).collect();
        for s in [0u32, 1, 3, 6, 7, 8, 9, u32::MAX] {
            for q in [1u32, 8, 16, 17] {
                for local in [8u32, 32] {
                    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(s), Arg::scalar(q)];
                    let bufs = [Buffer::zeroed(Scalar::F32, 8), Buffer::from_slice(&x)];
                    let r = NdRange::new(&[64]).with_local(&[local]);
                    assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "{cond} s={s} q={q}");
                }
            }
        }
        if avx2() {
            assert!(has_regions(&k), "{cond}");
        }
    }
}

/// The region-loop code's listing.
fn region_listing(k: &Kernel) -> String {
    let text = compile(k, &X86Options::default()).unwrap().disassemble();
    let start = text.find("; 8-lane region loops").unwrap_or_else(|| panic!("{text}"));
    text[start..].to_string()
}

/// The instructions of the one-batch round of a region-loop listing: from its test of
/// the range's end (`cmp rax,{limit}`) to where that test jumps when it fails.
fn one_batch_round(listing: &str, limit: u32) -> Vec<String> {
    let lines: Vec<(&str, &str)> = listing
        .lines()
        .filter_map(|l| l.trim().split_once("  ").map(|(a, i)| (a, i.trim())))
        .collect();
    let at = lines.iter().position(|l| l.1 == format!("cmp rax,{limit}")).expect("the test");
    let target = lines[at + 1].1.strip_prefix("ja ").expect("its jump").trim_end_matches('h');
    let target = format!("{:06x}", u64::from_str_radix(target, 16).unwrap());
    lines[at + 2..]
        .iter()
        .take_while(|l| l.0.to_lowercase() != target)
        .map(|l| l.1.to_string())
        .collect()
}

/// A one-batch round's accesses to a local array long enough for any batch it can run
/// (`16 - add` elements for `l < s + add`'s offset `s`, as the reduction's `tile[lid + stride]`)
/// are proven when the code is generated: one proof flag fewer than with an array one
/// element shorter, where the flag stays; at exactly that length no lane faults, one
/// shorter the lane reaching past the end does.
#[test]
fn first_batch_rounds_proven_when_generated_agree() {
    for (cond, add) in [("l < s", 0u32), ("l <= s", 1), ("l == s", 1)] {
        let src = |len: u32| {
            kernel(&format!(
                "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, s: u32) {{
                   local t: f32[{len}];
                   let l: u32 = local_id(0);
                   t[l % {len}u32] = x[global_id(0)];
                   barrier(local);
                   if {cond} {{ t[l] = t[l] + t[l + s]; }}
                   barrier(local);
                   if l == 0u32 {{ o[group_id(0)] = t[0] + t[1] * 2.0 + t[7] * 4.0 + t[8] * 8.0; }}
                 }}"
            ))
        };
        let (fit, short) = (src(16 - add), src(15 - add));
        if avx2() {
            let flags = |k: &Kernel| {
                let l = region_listing(k);
                l.lines().filter(|l| l.contains("mov byte ptr [r15+") && l.ends_with(",1")).count()
            };
            assert_eq!(flags(&fit) + 1, flags(&short), "{cond}:\n{}", region_listing(&fit));
            // The round's masked accesses: plain loads (every lane in bounds), the store
            // masked.
            let round = one_batch_round(&region_listing(&fit), 8 - add);
            assert!(
                round.iter().any(|l| l.starts_with("vmaskmovps [")),
                "no masked store:\n{}",
                round.join("\n")
            );
            assert!(
                !round.iter().any(|l| l.starts_with("vmaskmovps ymm")),
                "a masked load:\n{}",
                round.join("\n")
            );
        }
        let x: Vec<f32> = (0..64).map(|i| i as f32 * 0.75 - 9.0).collect();
        for k in [&fit, &short] {
            for s in [0u32, 1, 6, 7, 8, 9, u32::MAX] {
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(s)];
                let bufs = [Buffer::zeroed(Scalar::F32, 8), Buffer::from_slice(&x)];
                let r = NdRange::new(&[64]).with_local(&[8]);
                assert_eq!(three_ways(k, &r, &args, &bufs), avx2(), "{cond} s={s}");
            }
        }
    }
}

/// An atomic at `local_id(0)` plus a group value, proven in bounds, every lane alive, is one
/// vector read-modify-write with the value in a register (lane 0's index from the `let`'s
/// register); on several threads the buffer's lanes are `lock`ed in lane order. Every
/// operation of the lanes, `u32` and `i32`, agrees with the interpreter on 1 to 4 threads,
/// offsets reaching the end exactly and one past it (a fault).
#[test]
fn proven_vector_atomics_agree() {
    for (op, t) in [
        ("add", "u32"),
        ("sub", "i32"),
        ("and", "u32"),
        ("or", "u32"),
        ("xor", "i32"),
        ("min", "i32"),
        ("min", "u32"),
        ("max", "i32"),
        ("max", "u32"),
    ] {
        // `h` is also stored to (never, with these data): not summed per thread, so its
        // atomics on several threads are the locked ones.
        let k = kernel(&format!(
            "kernel k(h: ptr<global, {t}>, a: ptr<global, {t}>, q: u32) {{
               local s: {t}[64];
               let l: u32 = local_id(0);
               let g: u32 = global_id(0);
               s[l] = a[g] * 3{t};
               barrier(local);
               atomic_{op}(h, l + q, s[l] - a[g]);
               if a[g] == 77777{t} {{ h[0] = 1{t}; }}
             }}"
        ));
        if avx2() {
            let listing = region_listing(&k);
            assert!(
                listing.lines().any(|l| l.contains("vmovdqu ymm1,[") && l.contains("+rax*4]")),
                "{op} {t}: no vector read-modify-write from lane 0's index:\n{listing}"
            );
        }
        let a: Vec<i32> = (0..128i32).map(|i| i.wrapping_mul(0x9e37_79b9u32 as i32) >> 7).collect();
        let a = if t == "i32" {
            Buffer::from_slice(&a)
        } else {
            Buffer::from_slice(&a.iter().map(|&v| v as u32).collect::<Vec<_>>())
        };
        let elem = if t == "i32" { Scalar::I32 } else { Scalar::U32 };
        for q in [0u32, 8, 9, 64] {
            for (local, len) in [(16u32, 80usize), (64, 72), (64, 73), (64, 128)] {
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(q)];
                let bufs = [Buffer::zeroed(elem, len), a.clone()];
                let r = NdRange::new(&[128]).with_local(&[local]);
                assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "{op} {t} q={q}");
                let mut want = bufs.to_vec();
                let want_r = kiln_ir::interp::run(&k, &r, &args, &mut want);
                let p = compile(&k, &X86Options::default()).unwrap();
                for threads in [2usize, 4] {
                    let mut got = bufs.to_vec();
                    let got_r =
                        p.run_parallel(&r, &args, &mut got, threads, &CpuRunOptions::default());
                    assert_eq!(want_r, got_r, "{op} {t} q={q} {threads} threads");
                    if want_r.is_ok() {
                        if let Err(m) = kiln_ir::testing::results_match(&want, &got) {
                            panic!("{m}\n{op} {t} q={q} {threads} threads");
                        }
                    }
                }
            }
        }
    }
}

/// True if the region-loop code of `k` counts a loop back-edge (a group loop that is not
/// unrolled): the budget's `dec` at the context's budget word.
fn region_loop_left(k: &Kernel) -> bool {
    region_listing(k).contains("dec qword ptr [r12+0A8h]")
}

/// Group loops whose values are known when the code is generated are unrolled (each round
/// its constant stride): tree reductions from strides that are not powers of two, past the
/// group or the array, steps that skip, a group `let` in the loop, the loop's last value
/// read after it, a guard for a rounded-up range, two local arrays. Loops that must stay
/// loops agree too: a stride from a parameter, more rounds than are unrolled, an `if`
/// around barriers inside the loop, a stride changed under an `if` around barriers before
/// the loop.
#[test]
fn unrolled_group_loops_agree() {
    let reduction = |init: &str, step: &str, before: &str, inner: &str| {
        kernel(&format!(
            "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, n: u32, p: u32) {{
               local t: f32[64];
               local u: f32[64];
               let l: u32 = local_id(0);
               let g: u32 = global_id(0);
               if g < n {{ t[l] = x[g]; u[l] = x[g] * 0.5; }} else {{ t[l] = 0.0; u[l] = 1.0; }}
               var s: u32 = {init};
               {before}
               while s > 0u32 {{
                 barrier(local);
                 let h: u32 = s / 2u32;
                 if l < s && l + s < 64u32 {{ t[l] = t[l] + t[l + s]; u[l] = u[l] * 0.75 + u[l + h]; }}
                 {inner}
                 {step}
               }}
               barrier(local);
               if l == 0u32 {{ o[group_id(0)] = t[0] + u[1] + (s as f32); }}
             }}"
        ))
    };
    let halve = "s = s / 2u32;";
    let cases = [
        // (init, step, before, inner, unrolled)
        ("32u32", halve, "", "", true),
        ("5u32", halve, "", "", true),
        ("40u32", "s = (s * 5u32) / 8u32;", "", "", true),
        ("63u32", "s = s - 7u32;", "", "", true),
        ("64u32", halve, "", "", true),
        ("100u32", halve, "", "", true),
        ("13u32", "s = s - 1u32;", "", "", true),
        // 40 rounds: more than are unrolled.
        ("40u32", "s = s - 1u32;", "", "", false),
        ("p", halve, "", "", false),
        ("32u32", halve, "", "if s > 4u32 { barrier(local); }", false),
        ("32u32", halve, "if p > 3u32 { s = 16u32; barrier(local); }", "", false),
    ];
    let x: Vec<f32> = (0..200).map(|i| (i % 23) as f32 * 0.37 - 3.0).collect();
    for (init, step, before, inner, unrolled) in cases {
        let k = reduction(init, step, before, inner);
        if avx2() {
            assert!(has_regions(&k), "{init} {step} {before} {inner}");
            assert_eq!(region_loop_left(&k), !unrolled, "{init} {step} {before} {inner}");
        }
        for (n, local) in [(200u32, 64u32), (193, 64), (64, 8), (130, 16), (100, 40)] {
            for p in [0u32, 3, 9] {
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(p)];
                let bufs = [Buffer::zeroed(Scalar::F32, 32), Buffer::from_slice(&x)];
                let r = NdRange::new(&[n.div_ceil(local) * local]).with_local(&[local]);
                assert_eq!(
                    three_ways(&k, &r, &args, &bufs),
                    avx2(),
                    "{init} {step} {before} {inner} n={n} local={local} p={p}"
                );
            }
        }
    }
}

/// A region within the group's first batch whose bounds are known runs under a constant
/// lane mask: every form of bound, ranges of no lane, of every lane, one lane at either
/// end, offsets reaching the array's end and past it (a fault in the lane that reaches
/// it); ranges that are not exactly the condition (two bounds on one side, a bound from a
/// parameter) keep the lanes' test.
#[test]
fn constant_first_batch_masks_agree() {
    let conds = [
        "l < 0u32",
        "l < 1u32",
        "l < 3u32",
        "l < 8u32",
        "l <= 4u32",
        "l == 0u32",
        "l == 7u32",
        "l == 5u32",
        "l >= 2u32 && l < 6u32",
        "l > 6u32 && l <= 7u32",
        "3u32 > l",
        "l < 3u32 && l < 5u32",
        "l < 4u32 && l < q",
    ];
    for cond in conds {
        for len in [16u32, 12, 9] {
            let k = kernel(&format!(
                "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, q: u32) {{
                   local t: f32[{len}];
                   let l: u32 = local_id(0);
                   if l < {len}u32 {{ t[l] = x[global_id(0)]; }}
                   barrier(local);
                   if {cond} {{ t[l] = t[l] * 2.0 + t[l + 4u32]; }}
                   barrier(local);
                   if l == 0u32 {{ o[group_id(0)] = t[0] + t[1] * 2.0 + t[5] * 4.0 + t[7] * 8.0; }}
                 }}"
            ));
            let x: Vec<f32> = (0..64).map(|i| i as f32 * 0.75 - 9.0).collect();
            for q in [2u32, 9] {
                for local in [8u32, 32] {
                    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(q)];
                    let bufs = [Buffer::zeroed(Scalar::F32, 8), Buffer::from_slice(&x)];
                    let r = NdRange::new(&[64]).with_local(&[local]);
                    assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "{cond} len={len} q={q}");
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    /// Random tree reductions whose strides are known when the code is generated (so the
    /// group loop is unrolled, or left a loop past the rounds unrolled): odd element
    /// counts in rounded-up ranges with a guard, group sizes of one row, bounds of every
    /// form, two local arrays, a last store of one lane.
    #[test]
    fn random_known_reductions_agree(
        s0 in prop::sample::select(vec![1u32, 3, 8, 16, 31, 32, 48, 64]),
        step in prop::sample::select(vec!["s = s / 2u32;", "s = s - 5u32;", "s = s / 3u32;", "s = s >> 1u32;"]),
        cond in prop::sample::select(vec!["l < s", "l <= s && l < 63u32 - s", "s > l", "l + 1u32 == s"]),
        local in prop::sample::select(vec![8u32, 16, 24, 64]),
        n in 1u32..300,
    ) {
        let k = kernel(&format!(
            "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, n: u32) {{
               local t: f32[64];
               local c: u32[72];
               let l: u32 = local_id(0);
               if global_id(0) < n {{ t[l] = x[global_id(0)]; c[l] = 1u32; }}
               var s: u32 = {s0}u32;
               while s > 0u32 && s < 64u32 {{
                 barrier(local);
                 if {cond} {{ t[l] = t[l] + t[l + s]; c[l] = c[l] + c[l + s]; }}
                 {step}
               }}
               barrier(local);
               if l == 0u32 {{ o[group_id(0)] = t[0] + (c[0] as f32) * 1000.0; }}
             }}"
        ));
        let x: Vec<f32> = (0..n).map(|i| ((i * 7) % 23) as f32 * 0.37 - 3.0).collect();
        let groups = n.div_ceil(local);
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
        let bufs = [Buffer::zeroed(Scalar::F32, groups as usize), Buffer::from_slice(&x)];
        let r = NdRange::new(&[groups * local]).with_local(&[local]);
        prop_assert_eq!(three_ways(&k, &r, &args, &bufs), avx2());
        if avx2() {
            prop_assert!(has_regions(&k));
        }
    }
}

/// A region whose range ends at a value known when the code is generated has its accesses
/// to local arrays proven then, when the array holds the batches' reach (the end rounded
/// up to 8, plus the offset): one proof flag fewer than with an array one element
/// shorter, which keeps the flag (and faults where a lane in the range reaches past the
/// end).
#[test]
fn known_ranges_proven_when_generated_agree() {
    for (cond, hi) in [("l < 16u32", 16u32), ("l < 13u32", 13), ("l >= 3u32 && l <= 20u32", 21)] {
        let src = |len: u32| {
            kernel(&format!(
                "kernel k(o: ptr<global, f32>, x: ptr<global, f32>) {{
                   local t: f32[{len}];
                   let l: u32 = local_id(0);
                   if l < {len}u32 {{ t[l] = x[global_id(0)]; }}
                   barrier(local);
                   if {cond} {{ t[l] = t[l] + t[l + 16u32]; }}
                   barrier(local);
                   if l == 0u32 {{ o[group_id(0)] = t[0] + t[3] * 2.0 + t[12] * 4.0 + t[20] * 8.0; }}
                 }}"
            ))
        };
        let reach = hi.div_ceil(8) * 8 + 16;
        let (fit, short) = (src(reach), src(reach - 1));
        if avx2() {
            let flags = |k: &Kernel| {
                let l = region_listing(k);
                l.lines().filter(|l| l.contains("mov byte ptr [r15+") && l.ends_with(",1")).count()
            };
            assert_eq!(flags(&fit) + 1, flags(&short), "{cond}:\n{}", region_listing(&fit));
        }
        let x: Vec<f32> = (0..128).map(|i| i as f32 * 0.75 - 9.0).collect();
        for k in [&fit, &short] {
            for local in [8u32, 16, 32, 64] {
                let args = [Arg::Buffer(0), Arg::Buffer(1)];
                let bufs = [Buffer::zeroed(Scalar::F32, 16), Buffer::from_slice(&x)];
                let r = NdRange::new(&[128]).with_local(&[local]);
                assert_eq!(three_ways(k, &r, &args, &bufs), avx2(), "{cond} local={local}");
            }
        }
    }
}

/// A kernel that fixes its group's size (`#reqd_work_group_size(L, 1, 1)`) has the accesses
/// of its regions without a known range proven when the code is generated, for the group's
/// end: one proof flag fewer with a local array of exactly L elements (plus the offset) than
/// with one element fewer, which keeps the flag and faults in the group's last work-item.
#[test]
fn fixed_group_sizes_proven_when_generated_agree() {
    for (local, off) in [(16u32, 0u32), (24, 0), (16, 3)] {
        let src = |len: u32| {
            kernel(&format!(
                "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, n: u32) #reqd_work_group_size({local}, 1, 1) {{
                   local t: f32[{len}];
                   let l: u32 = local_id(0);
                   let g: u32 = global_id(0);
                   if g < n {{ t[l + {off}u32] = x[g]; }} else {{ t[l + {off}u32] = 1.5; }}
                   barrier(local);
                   if l == 0u32 {{ o[group_id(0)] = t[{off}u32] + t[5] * 2.0 + t[{local}u32 - 1u32] * 4.0; }}
                 }}"
            ))
        };
        let (fit, short) = (src(local + off), src(local + off - 1));
        if avx2() {
            let flags = |k: &Kernel| {
                let l = region_listing(k);
                l.lines().filter(|l| l.contains("mov byte ptr [r15+") && l.ends_with(",1")).count()
            };
            assert_eq!(flags(&fit) + 1, flags(&short), "{local}:\n{}", region_listing(&fit));
        }
        let x: Vec<f32> = (0..100).map(|i| i as f32 * 0.75 - 9.0).collect();
        for k in [&fit, &short] {
            for n in [100u32, 37] {
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
                let bufs = [Buffer::zeroed(Scalar::F32, 8), Buffer::from_slice(&x)];
                let r = NdRange::new(&[4 * local]).with_local(&[local]);
                assert_eq!(three_ways(k, &r, &args, &bufs), avx2(), "{local} {off} n={n}");
            }
        }
    }
}

/// The reduction's rounds of known strides in a kernel that fixes its group's size
/// (`examples/reduce.kir`) run as batches unrolled when the code is generated (strides 32
/// and 16) or as the group's first batch alone (8, 4, 2, 1), each batch's `local_id(0)`
/// known: `tile[lid + stride]` is addressed at a constant displacement, not from the lanes'
/// register (`vmovd r11d,xmm14`).
#[test]
fn reduction_rounds_address_tile_by_constant_indices() {
    if !avx2() {
        return kiln_ir::testing::skip("region loops need AVX2, which this CPU lacks");
    }
    let reduce = kiln_ir::parse_module(include_str!("../../examples/reduce.kir")).unwrap();
    let listing = region_listing(&reduce.kernels[0]);
    assert!(!listing.contains("vmovd r11d,xmm14"), "{listing}");
    // Strides 32 and 16: no batch loop, every batch's `tile[lid + stride]` at its constant.
    for (lid0, stride) in [(0u32, 32u32), (8, 32), (24, 32), (8, 16)] {
        let at = format!("+{}]", listing_number(4 * (lid0 + stride)));
        let loads = listing.lines().any(|l| l.contains("vmovups ymm") && l.ends_with(&at));
        assert!(loads, "no load at `{at}`:\n{listing}");
    }
}

/// The reduction's rounds of strides 4, 2 and 1 run the group's first batch under a mask
/// of its first 4, 2 and 1 lanes, known when the code is generated: they load and store
/// only those lanes' elements, with plain 16-, 8- and 4-byte accesses (a store of them is
/// then forwarded to the next round's loads; after a masked store, or into an 8-lane load
/// over two stores, a load waits for the stores to reach the cache, which was most of the
/// reduction's time). The results are the interpreter's (`constant_first_batch_masks_agree`
/// and `random_known_reductions_agree` run such rounds three ways).
#[test]
fn reduction_last_rounds_access_only_their_lanes() {
    if !avx2() {
        return kiln_ir::testing::skip("region loops need AVX2, which this CPU lacks");
    }
    let reduce = kiln_ir::parse_module(include_str!("../../examples/reduce.kir")).unwrap();
    let listing = region_listing(&reduce.kernels[0]);
    let has = |prefix: &str, suffix: &str| {
        listing.lines().any(|l| {
            let i = l.trim().split_once("  ").map_or("", |(_, i)| i.trim());
            i.starts_with(prefix) && i.ends_with(suffix)
        })
    };
    // Stride 4: `tile[lid + 4]` from 16 bytes in, the sum stored as 16 bytes. (The loads
    // take the values the round before stored from the register that still holds them:
    // `forward.rs`.)
    assert!(has("vextractf128 xmm1,ymm", ",1"), "{listing}");
    assert!(has("vmovups [", "],xmm0"), "{listing}");
    // Stride 2: 8 bytes; stride 1: 4 bytes.
    assert!(has("vpsrldq xmm1,xmm", ",8") && has("vmovq [", "],xmm0"), "{listing}");
    assert!(has("vpsrldq xmm1,xmm", ",4") && has("vmovss [", "],xmm0"), "{listing}");
    reductions_agree(&reduce.kernels[0], &[1000, 960, 1]);
}

/// `examples/reduce.kir`'s kernel `k` over `n` elements for each `n`, in groups of 64 (the
/// last one partly past `n`), three ways.
fn reductions_agree(k: &Kernel, ns: &[u32]) {
    for &n in ns {
        let x: Vec<f32> = (0..n).map(|i| ((i * 7) % 23) as f32 * 0.37 - 3.0).collect();
        let groups = n.div_ceil(64);
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
        let bufs = [Buffer::from_slice(&x), Buffer::zeroed(Scalar::F32, groups as usize)];
        let r = NdRange::new(&[groups * 64]).with_local(&[64]);
        assert!(three_ways(k, &r, &args, &bufs), "n={n}");
    }
}

/// The reduction's first region (`if gid < n { tile[lid] = x[gid]; } else ...`) in a
/// group wholly inside `n` runs its eight batches as a load at the batch's first id and a
/// store at a constant displacement each: nothing reads a lane of `global_id(0)` or
/// `local_id(0)`, so neither register is kept up to date (`vpaddd`/`vpsubd` a batch before).
#[test]
fn guarded_batches_that_read_no_id_lanes_keep_no_id_registers() {
    if !avx2() {
        return kiln_ir::testing::skip("region loops need AVX2, which this CPU lacks");
    }
    let reduce = kiln_ir::parse_module(include_str!("../../examples/reduce.kir")).unwrap();
    let listing = region_listing(&reduce.kernels[0]);
    let ins: Vec<&str> =
        listing.lines().filter_map(|l| l.trim().split_once("  ").map(|(_, i)| i.trim())).collect();
    // From the group's test against `n` to the jump past the partial group's code.
    let from = ins.iter().position(|i| i.starts_with("ja ")).expect("the group's test");
    let to = from + ins[from..].iter().position(|i| i.starts_with("jmp ")).expect("a jump");
    let batches = &ins[from..to];
    let loads = batches.iter().filter(|i| i.starts_with("vmovups ymm0,[") && i.contains("+rbx*4]"));
    assert_eq!(loads.count(), 8, "{batches:#?}");
    assert!(!batches.iter().any(|i| i.contains("ymm14") || i.contains("ymm15")), "{batches:#?}");
    reductions_agree(&reduce.kernels[0], &[300, 256, 64, 65]);
}

/// A tree reduction that fixes no group size, its stride starting from `local_size(0)`:
/// each launch's group size gets the kernel compiled for it (`X86Program::for_group`), whose
/// rounds are unrolled with the last ones under lane masks known when the code is generated
/// (narrow accesses, as for `examples/reduce.kir`); sizes that are not whole batches, and
/// kernels that fix their size, get none. Run through the cpu device (build, load, launch)
/// at several group sizes and odd lengths, with a fault in one case, it agrees with the
/// interpreter, results and errors.
#[test]
fn reductions_compiled_for_their_launch_group_size_agree() {
    let src = "kernel r(x: ptr<global, f32>, partial: ptr<global, f32>, n: u32) {
          local tile: f32[64];
          let gid: u32 = global_id(0);
          let lid: u32 = local_id(0);
          if gid < n { tile[lid] = x[gid]; } else { tile[lid] = 0.0; }
          var stride: u32 = local_size(0) / 2u32;
          while stride > 0u32 {
            barrier(local);
            if lid < stride { tile[lid] = tile[lid] + tile[lid + stride]; }
            stride = stride / 2u32;
          }
          barrier(local);
          if lid == 0u32 { partial[group_id(0)] = tile[0]; }
        }";
    let k = kernel(src);
    if avx2() {
        let p = compile(&k, &X86Options::default()).unwrap();
        assert!(p.has_region_code());
        let fixed = p.for_group([64, 1, 1]).expect("a program for groups of 64");
        assert_eq!(fixed.kernel().attrs().reqd_work_group_size, Some([64, 1, 1]));
        let text = fixed.disassemble();
        assert!(text.contains("vmovss [") && text.contains("vmovq ["), "{text}");
        // Kept: the same program for the next launch of the size.
        assert!(std::sync::Arc::ptr_eq(&fixed, &p.for_group([64, 1, 1]).unwrap()));
        for local in [[12, 1, 1], [8, 2, 1]] {
            assert!(p.for_group(local).is_none(), "{local:?}");
        }
        assert!(fixed.for_group([64, 1, 1]).is_none(), "a fixed size is not fixed again");
        let general = X86Options { general_groups: true, ..X86Options::default() };
        assert!(compile(&k, &general).unwrap().for_group([64, 1, 1]).is_none());
    }
    let options =
        kiln_runtime::device::registry::OpenOptions { threads: Some(2), ..Default::default() };
    let Some(dev) = kiln_ir::testing::require(
        "KILN_REQUIRE_TOOLS",
        kiln_runtime::device::cpu::CpuDevice::open(&options),
    ) else {
        return;
    };
    use kiln_runtime::Device;
    let verified = kiln_ir::Verified::kernel(k.clone()).unwrap();
    let program = dev.load(&dev.build(&verified, &Default::default()).unwrap()).unwrap();
    let h = dev.kernel(&program, "r").unwrap();
    for (local, n) in [(64u32, 1000u32), (16, 999), (8, 77), (24, 500), (64, 1), (32, 4097)] {
        let x: Vec<f32> = (0..n).map(|i| ((i * 7) % 23) as f32 * 0.37 - 3.0).collect();
        let groups = n.div_ceil(local);
        // Groups of more than 64 items would reach past `tile`: a fault, as in the source.
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
        let bufs = [Buffer::from_slice(&x), Buffer::zeroed(Scalar::F32, groups as usize)];
        let r = NdRange::new(&[groups * local]).with_local(&[local]);
        let mut want = bufs.to_vec();
        let want_r = kiln_ir::interp::run(&k, &r, &args, &mut want);
        let mut got = bufs.to_vec();
        let got_r = dev.run(&h, &r, &args, &mut got);
        assert_eq!(want_r.is_ok(), got_r.is_ok(), "local {local} n {n}: {got_r:?}");
        assert_eq!(want, got, "local {local} n {n}");
        assert!(three_ways(&k, &r, &args, &bufs) == avx2());
    }
    // Groups of 128 reach past `tile` (64 elements): the interpreter's error.
    let x = Buffer::from_slice(&vec![1.0f32; 256]);
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(256)];
    let r = NdRange::new(&[256]).with_local(&[128]);
    let bufs = [x, Buffer::zeroed(Scalar::F32, 2)];
    let want = kiln_ir::interp::run(&k, &r, &args, &mut bufs.to_vec()).unwrap_err();
    let got = dev.run(&h, &r, &args, &mut bufs.to_vec()).unwrap_err();
    assert!(got.to_string().contains(&want.to_string()), "{got} / {want}");
    assert!(three_ways(&k, &r, &args, &bufs) == avx2());
}

/// A number as iced's listing writes it: below 10 plain, else in hex with an `h` (and a
/// leading 0 before a letter).
fn listing_number(v: u32) -> String {
    match format!("{v:X}h") {
        _ if v < 10 => v.to_string(),
        h if h.starts_with(|c: char| c.is_ascii_alphabetic()) => format!("0{h}"),
        h => h,
    }
}

/// The kernel of the tests of regions unrolled when the code is generated: groups of
/// `local` (fixed), a local array of `len`, the region `if {cond} { t[l] = t[l] * 0.5 +
/// t[l + {off}u32]; }` between two barriers.
fn known_batch_kernel(local: u32, len: u32, cond: &str, off: u32) -> Kernel {
    known_batch_kernel_with(local, len, cond, &format!("t[l] = t[l] * 0.5 + t[l + {off}u32];"))
}

/// [`known_batch_kernel`] with the branch `body`.
fn known_batch_kernel_with(local: u32, len: u32, cond: &str, body: &str) -> Kernel {
    kernel(&format!(
        "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, n: u32) #reqd_work_group_size({local}, 1, 1) {{
           local t: f32[{len}];
           let l: u32 = local_id(0);
           let g: u32 = global_id(0);
           if l < {len}u32 && g < n {{ t[l] = x[g]; }}
           barrier(local);
           if {cond} {{ {body} }}
           barrier(local);
           if l == 0u32 {{ o[group_id(0)] = t[0] + t[1] * 2.0 + t[9] * 4.0 + t[15] * 8.0; }}
         }}"
    ))
}

/// Runs `k` (groups of `local`, 4 groups, `n` elements of data) three ways.
fn known_batch_run(k: &Kernel, local: u32, n: u32) -> bool {
    let x: Vec<f32> = (0..4 * local).map(|i| ((i * 7) % 23) as f32 * 0.37 - 3.0).collect();
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
    let bufs = [Buffer::zeroed(Scalar::F32, 4), Buffer::from_slice(&x)];
    let r = NdRange::new(&[4 * local]).with_local(&[local]);
    three_ways(k, &r, &args, &bufs)
}

/// Ranges of `local_id(0)` known when the code is generated, in groups of a fixed size,
/// run as unrolled batches, each under its constant mask: ranges over several batches,
/// from a lower bound, ending within a batch, past the group, of one lane, empty, or not
/// exactly the condition (two bounds on one side, which keep the lanes' test); offsets
/// reaching the array's end exactly (proven when generated) and one past it (checked: a
/// fault where a lane in the range reaches it).
#[test]
fn known_batches_of_fixed_groups_agree() {
    let conds = [
        ("l < 32u32", 0u32, 32u32),
        ("l < 20u32", 0, 20),
        ("l >= 5u32 && l < 27u32", 5, 27),
        ("l > 9u32", 10, u32::MAX),
        ("l <= 40u32", 0, 41),
        ("l == 17u32", 17, 18),
        ("l < 80u32", 0, 80),
        ("l >= 12u32 && l < 12u32", 0, 0),
        ("l < 30u32 && l < 9u32", 0, 30),
    ];
    for (cond, lo, hi) in conds {
        for local in [16u32, 24, 64] {
            for off in [1u32, 16] {
                let end = hi.min(local);
                let reach = if lo >= end { 16 } else { end.div_ceil(8) * 8 };
                for len in [(reach + off).max(16), (reach + off - 1).max(16)] {
                    let k = known_batch_kernel(local, len, cond, off);
                    for n in [4 * local, 2 * local + 5] {
                        assert_eq!(
                            known_batch_run(&k, local, n),
                            avx2(),
                            "{cond} local={local} off={off} len={len} n={n}"
                        );
                    }
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    /// Random known ranges of every form in groups of a fixed size, offsets and array
    /// lengths around the batches' reach: the unrolled batches agree with the interpreter
    /// and the scalar code, faults included.
    #[test]
    fn random_known_batches_agree(
        local in prop::sample::select(vec![8u32, 16, 24, 32, 40, 64]),
        lo in 0u32..70,
        hi in 0u32..80,
        off in 0u32..20,
        form in 0usize..5,
        slack in 0u32..3,
        n in 1u32..300,
    ) {
        let cond = match form {
            0 => format!("l >= {lo}u32 && l < {hi}u32"),
            1 => format!("l < {hi}u32"),
            2 => format!("l > {lo}u32 && l <= {hi}u32"),
            3 => format!("{hi}u32 > l"),
            _ => format!("l == {lo}u32"),
        };
        let reach = hi.min(local).div_ceil(8) * 8;
        let len = (reach + off + slack).saturating_sub(1).max(16);
        let k = known_batch_kernel(local, len, &cond, off);
        prop_assert_eq!(known_batch_run(&k, local, n.min(4 * local)), avx2());
    }
}

/// In a kernel that fixes its group's size, a region without a range whose accesses are
/// proven when the code is generated runs the group's batches unrolled, each with its
/// `local_id(0)` known (`t[l]` at a constant displacement: the last batch's `4 (L - 8)`), the
/// `let`s of the last batch read by later regions: groups of 8 to 64, a guard for a
/// rounded-up range, a buffer shorter than the range (the fault of the lowest work-item),
/// one thread and several.
#[test]
fn unrolled_group_batches_agree() {
    let guards = ["g < n", "g <= n", "n > g", "n >= g", "global_id(0) < n"];
    for (local, guard) in [8u32, 16, 24, 64].into_iter().flat_map(|l| guards.map(|g| (l, g))) {
        let k = kernel(&format!(
            "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, n: u32) #reqd_work_group_size({local}, 1, 1) {{
               local t: f32[{local}];
               let l: u32 = local_id(0);
               let g: u32 = global_id(0);
               if {guard} {{ t[l] = x[g] * 2.0; }} else {{ t[l] = 1.5 + (l as f32); }}
               barrier(local);
               let r: f32 = t[(l + 1u32) % {local}u32];
               barrier(local);
               t[l] = t[l] + r;
               barrier(local);
               if l == 0u32 {{ o[group_id(0)] = t[0] + t[{local}u32 - 1u32] * 2.0 + t[5u32 % {local}u32] * 4.0; }}
             }}"
        ));
        if avx2() && local > 8 {
            let listing = region_listing(&k);
            // The last batch's `t[l]`, a store at its constant displacement.
            let last = format!("+{}],ymm0", listing_number(4 * (local - 8)));
            let lines: Vec<&str> = listing.lines().collect();
            let addressed = lines
                .iter()
                .any(|l| l.contains("vmovups [r") && !l.contains("[r15") && l.ends_with(&last));
            assert!(addressed, "no store at `{last}`:\n{listing}");
            // The guard tested once for the group: its end against `n`.
            let end = format!(" add r11,{local:X}h");
            let once =
                lines.windows(2).any(|w| w[0].ends_with(&end) && w[1].ends_with("cmp r11,rax"));
            assert!(once, "no group guard ({guard}):\n{listing}");
        }
        let cases = [
            (4 * local, 4 * local),
            (3 * local - 5, 4 * local),
            (3 * local, 4 * local),
            (3 * local - 1, 4 * local),
            (4 * local, 2 * local + 3),
        ];
        for (n, xl) in cases {
            let x: Vec<f32> = (0..xl).map(|i| ((i * 7) % 23) as f32 * 0.37 - 3.0).collect();
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
            let bufs = [Buffer::zeroed(Scalar::F32, 4), Buffer::from_slice(&x)];
            let r = NdRange::new(&[4 * local]).with_local(&[local]);
            assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "{guard} {local} n={n} xl={xl}");
            for threads in [2usize, 3] {
                let p = compile(&k, &X86Options::default()).unwrap();
                let (mut a, mut b) = (bufs.to_vec(), bufs.to_vec());
                let one = p.run(&r, &args, &mut a);
                let many = p.run_parallel(&r, &args, &mut b, threads, &CpuRunOptions::default());
                assert_eq!(one, many, "local={local} n={n} xl={xl} threads={threads}");
                if one.is_ok() {
                    assert_eq!(
                        f32s_bits(&a[0]),
                        f32s_bits(&b[0]),
                        "local={local} threads={threads}"
                    );
                }
            }
        }
    }
}

fn f32s_bits(b: &Buffer) -> Vec<u32> {
    b.to_vec::<f32>().unwrap().into_iter().map(f32::to_bits).collect()
}

/// Branches of unrolled batches that read the lanes of `local_id(0)` or `global_id(0)`
/// besides addressing at a known `local_id(0)` (arithmetic on them, an access elsewhere, a
/// gather) keep their registers up to date batch by batch; those that only address at it
/// need neither (the reduction's rounds), and later regions still see the right lanes.
#[test]
fn unrolled_batches_keep_the_id_lanes_they_read() {
    let bodies = [
        "t[l] = t[l] + t[l + 16u32];",
        "t[l] = t[l] + (l as f32);",
        "t[l] = t[l] + (global_id(0) as f32) * 0.25;",
        "t[l] = t[l] + t[(l * 3u32) % 48u32];",
        "t[l + 32u32] = t[l] * 2.0;",
    ];
    for body in bodies {
        for local in [32u32, 64] {
            let k = known_batch_kernel_with(local, 64, "l >= 3u32 && l < 29u32", body);
            for n in [4 * local, 2 * local + 5] {
                assert_eq!(known_batch_run(&k, local, n), avx2(), "{body} local={local} n={n}");
            }
        }
    }
}

/// [`three_ways`], then the default and `-O` programs on 2 and 3 threads: the
/// interpreter's result and error, and its buffers where it succeeds.
fn all_ways(k: &Kernel, r: &NdRange, args: &[Arg], bufs: &[Buffer]) -> bool {
    let has = three_ways(k, r, args, bufs);
    let mut want = bufs.to_vec();
    let want_r = kiln_ir::interp::run(k, r, args, &mut want);
    for optimize in [false, true] {
        let p = compile(k, &X86Options { optimize, ..X86Options::default() }).unwrap();
        for threads in [2usize, 3] {
            let mut got = bufs.to_vec();
            let got_r = p.run_parallel(r, args, &mut got, threads, &CpuRunOptions::default());
            assert_eq!(want_r, got_r, "threads={threads} -O={optimize}\n{k}");
            if want_r.is_ok() {
                if let Err(m) = kiln_ir::testing::results_match(&want, &got) {
                    panic!("{m} threads={threads} -O={optimize}\n{k}");
                }
            }
        }
    }
    has
}

/// Known ranges of `local_id(0)` in fixed groups at their edges: groups whose size is not
/// a multiple of 8, 2-D groups (rows of `local_id(1)`), bounds written `l <= c`, `c > l`,
/// `c >= l`, `l < 0`, past the group, `local_id(0)` read again after barriers inside the
/// unrolled rounds, offsets reaching one past the array (the fault of the lowest
/// work-item that reaches it), a global offset, on 1 to 3 threads.
#[test]
fn known_batches_at_their_edges_agree() {
    let conds = [
        "l <= 9u32",
        "13u32 > l",
        "12u32 >= l",
        "l < 0u32",
        "l <= 0u32",
        "l < 200u32",
        "l >= 3u32 && l <= 11u32",
    ];
    for (lx, ly) in [(8u32, 1u32), (24, 1), (32, 1), (12, 1), (20, 1), (8, 2), (12, 3)] {
        // (In 1-D groups `t[l + c]`, the unrolled batches' constant displacements.)
        let at = if ly == 1 { "l" } else { "row + l" };
        for cond in conds {
            for off in [1u32, 4] {
                let cells = lx * ly;
                for len in [cells + off, cells + off - 1, cells] {
                    let k = kernel(&format!(
                        "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, n: u32) #reqd_work_group_size({lx}, {ly}, 1) {{
                           local t: f32[{len}];
                           let l: u32 = local_id(0);
                           let row: u32 = local_id(1) * {lx}u32;
                           let g: u32 = global_id(0);
                           let at: u32 = global_id(1) * global_size(0) + g;
                           if g < n {{ t[{at}] = x[at]; }} else {{ t[{at}] = 0.5 + (l as f32); }}
                           for r: u32 in 0u32 .. 2u32 {{
                             barrier(local);
                             if {cond} {{ t[{at}] = t[{at}] * 0.5 + t[{at} + {off}u32] + (l as f32); }}
                           }}
                           barrier(local);
                           o[at] = t[{at}] + (local_id(0) as f32) * 0.125;
                         }}"
                    ));
                    let (gx, gy) = (3 * lx, 2 * ly);
                    let x: Vec<f32> =
                        (0..4 * gx * gy).map(|i| ((i * 7) % 23) as f32 * 0.37 - 3.0).collect();
                    for (n, offset) in [(gx + 3, 0u32), (2 * lx + 1, 0), (gx + 9, 5)] {
                        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
                        let bufs = [
                            Buffer::zeroed(Scalar::F32, (4 * gx * gy) as usize),
                            Buffer::from_slice(&x),
                        ];
                        let r =
                            NdRange::new(&[gx, gy]).with_local(&[lx, ly]).with_offset(&[offset, 0]);
                        assert_eq!(
                            all_ways(&k, &r, &args, &bufs),
                            avx2(),
                            "{cond} {lx}x{ly} off={off} len={len} n={n} offset={offset}"
                        );
                    }
                }
            }
        }
    }
}

/// The guard `global_id(0) < n` (and its mirrored and `<= n - 1` forms) ending an unrolled
/// region, tested once per group: `n` of 0, inside the first group, at a group's edge, one
/// either side of it, past the range, the largest `u32` (where `n - 1` does not wrap) and
/// a global offset, with the array shorter than the range (the lowest faulting
/// work-item), groups of 8 to 24 and not multiples of 8, on 1 to 3 threads.
#[test]
fn group_guards_at_their_edges_agree() {
    let guards = ["g < n", "n > g", "g <= n - 1u32", "g <= n", "n >= g", "g < n && g < 1000u32"];
    for (local, len) in [(8u32, 8u32), (12, 12), (12, 64), (16, 16), (20, 64), (24, 24)] {
        for guard in guards {
            let k = kernel(&format!(
                "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, n: u32, p: ptr<global, f32>) #reqd_work_group_size({local}, 1, 1) {{
                   local t: f32[{len}];
                   let l: u32 = local_id(0);
                   let g: u32 = global_id(0);
                   if {guard} {{ t[l] = x[g] * 2.0; p[g] = (l as f32) + 0.5; }} else {{ t[l] = 1.5 + (l as f32); }}
                   barrier(local);
                   o[g] = t[(l + 1u32) % {local}u32] + t[l];
                 }}"
            ));
            let size = 4 * local;
            for n in [
                0u32,
                1,
                local - 1,
                local,
                local + 1,
                2 * local,
                3 * local + 1,
                size,
                size + 1,
                u32::MAX,
            ] {
                for (offset, xl) in [(0u32, size + 8), (3, size + 8), (0, 2 * local + 1), (8, size)]
                {
                    let x: Vec<f32> = (0..xl).map(|i| ((i * 7) % 23) as f32 * 0.37 - 3.0).collect();
                    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::Buffer(2)];
                    let bufs = [
                        Buffer::zeroed(Scalar::F32, (size + 16) as usize),
                        Buffer::from_slice(&x),
                        Buffer::zeroed(Scalar::F32, (size + 16) as usize),
                    ];
                    let r = NdRange::new(&[size]).with_local(&[local]).with_offset(&[offset]);
                    assert_eq!(
                        all_ways(&k, &r, &args, &bufs),
                        avx2(),
                        "{guard} local={local} len={len} n={n} offset={offset} xl={xl}"
                    );
                }
            }
        }
    }
}

/// Batch-uniform indices inside unrolled batches: a store into a local array at a uniform
/// index under each batch's constant mask (the last lane of the range wins, in a middle
/// batch's middle lane for `l < 13u32`), global loads at a uniform index in a guarded group
/// branch and in a trimmed round, indices one past the end and wrapping (the interpreter's
/// fault), on 1 to 3 threads.
#[test]
fn uniform_indices_in_unrolled_batches_agree() {
    let conds = ["l < 13u32", "l >= 3u32 && l < 29u32", "l == 17u32", "l < 64u32", "l > 30u32"];
    for local in [16u32, 32, 64] {
        for cond in conds {
            let k = kernel(&format!(
                "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, n: u32, q: u32, s: u32) #reqd_work_group_size({local}, 1, 1) {{
                   local t: f32[64];
                   local u: f32[64];
                   let l: u32 = local_id(0);
                   let g: u32 = global_id(0);
                   if g < n {{ t[l] = x[g] + x[q]; u[l] = 0.25; }} else {{ t[l] = 0.5; u[l] = 0.75; }}
                   barrier(local);
                   if {cond} {{ u[s] = t[l] + (l as f32); t[l] = t[l] * x[q + 1u32]; }}
                   barrier(local);
                   o[g] = t[l] + u[l] * 2.0;
                 }}"
            ));
            let xl = 4 * local + 8;
            let x: Vec<f32> = (0..xl).map(|i| ((i * 7) % 23) as f32 * 0.37 - 3.0).collect();
            for s in [0u32, 5, 12, 63, 64, 1000] {
                for q in [0u32, xl - 2, xl - 1, u32::MAX] {
                    for n in [4 * local, 2 * local + 3, u32::MAX] {
                        let args = [
                            Arg::Buffer(0),
                            Arg::Buffer(1),
                            Arg::scalar(n),
                            Arg::scalar(q),
                            Arg::scalar(s),
                        ];
                        let bufs = [
                            Buffer::zeroed(Scalar::F32, 4 * local as usize),
                            Buffer::from_slice(&x),
                        ];
                        let r = NdRange::new(&[4 * local]).with_local(&[local]);
                        assert_eq!(
                            all_ways(&k, &r, &args, &bufs),
                            avx2(),
                            "{cond} local={local} s={s} q={q} n={n}"
                        );
                    }
                }
            }
        }
    }
}

/// A group guard whose bound is a group `var` lowered round by round of a group loop that
/// is not unrolled (its count is a parameter), and one mixing the group's id: tested
/// once per group each round with the bound's value then, on 1 to 3 threads.
#[test]
fn group_guards_of_changing_bounds_agree() {
    for (init, step) in
        [("n", "lim - 16u32"), ("n", "lim + 8u32"), ("n - group_id(0) * 3u32", "lim / 2u32")]
    {
        let k = kernel(&format!(
            "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, n: u32, rounds: u32) #reqd_work_group_size(16, 1, 1) {{
               local t: f32[16];
               let l: u32 = local_id(0);
               let g: u32 = global_id(0);
               t[l] = 0.5;
               var lim: u32 = {init};
               for r: u32 in 0u32 .. rounds {{
                 barrier(local);
                 if g < lim {{ t[l] = t[l] * 0.5 + x[g]; }}
                 lim = {step};
               }}
               barrier(local);
               o[g] = t[l] + t[(l + 3u32) % 16u32];
             }}"
        ));
        let x: Vec<f32> = (0..80).map(|i| ((i * 7) % 23) as f32 * 0.37 - 3.0).collect();
        for n in [0u32, 15, 16, 33, 48, 64, 65, 100, u32::MAX] {
            for rounds in [0u32, 1, 4] {
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(rounds)];
                let bufs = [Buffer::zeroed(Scalar::F32, 64), Buffer::from_slice(&x)];
                let r = NdRange::new(&[64]).with_local(&[16]);
                assert_eq!(
                    all_ways(&k, &r, &args, &bufs),
                    avx2(),
                    "{init}/{step} n={n} rounds={rounds}"
                );
            }
        }
    }
}

/// Kernels fixing groups of one row (`#reqd_work_group_size(L, 1, 1)`) launched over 2-D
/// and 3-D ranges, with offsets in every dimension: the unrolled batches, the group guard
/// and the known ranges of each row's groups agree with the interpreter, on 1 to 3 threads.
#[test]
fn fixed_row_groups_of_several_dimensions_agree() {
    for cond in ["l < 13u32", "l >= 3u32 && l < 29u32", "l <= 31u32"] {
        let k = kernel(&format!(
            "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, n: u32) #reqd_work_group_size(32, 1, 1) {{
               local t: f32[40];
               let l: u32 = local_id(0);
               let g: u32 = global_id(0);
               if g < n {{ t[l] = x[g] + (global_id(1) as f32); }} else {{ t[l] = 0.5 + (group_id(1) as f32); }}
               barrier(local);
               if {cond} {{ t[l] = t[l] * 0.5 + t[l + 8u32]; }}
               barrier(local);
               o[(global_id(2) * global_size(1) + global_id(1)) * global_size(0) + global_id(0) - global_offset(0)] = t[l] + (l as f32) * 0.125;
             }}"
        ));
        let x: Vec<f32> = (0..200).map(|i| ((i * 7) % 23) as f32 * 0.37 - 3.0).collect();
        for (size, offset) in [
            ([96u32, 3u32, 1u32], [0u32, 0u32, 0u32]),
            ([64, 2, 2], [8, 5, 1]),
            ([64, 1, 3], [3, 0, 7]),
        ] {
            for n in [0u32, 40, 64, 72, 1000] {
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
                let bufs = [Buffer::zeroed(Scalar::F32, 2048), Buffer::from_slice(&x)];
                let r = NdRange::new(&size).with_local(&[32, 1, 1]).with_offset(&offset);
                assert_eq!(
                    all_ways(&k, &r, &args, &bufs),
                    avx2(),
                    "{cond} {size:?} {offset:?} n={n}"
                );
            }
        }
    }
}

/// Group loops unrolled when the code is generated whose rounds trim to ranges ending
/// mid-batch (`stride` of 48, 27, 13, 6, 2, 1 and decreasing by odd steps), reading
/// `local_id(0)` in every round after its barrier, with a local array exactly long enough
/// and one element short (the fault of the lowest work-item reaching past it), on 1 to 3
/// threads.
#[test]
fn unrolled_rounds_of_odd_strides_agree() {
    for (init, next) in
        [("48u32", "(s * 5u32) / 9u32"), ("61u32", "s - 9u32"), ("40u32", "s / 3u32")]
    {
        for len in [128u32, 109, 97, 64] {
            let k = kernel(&format!(
                "kernel k(o: ptr<global, f32>, x: ptr<global, f32>) #reqd_work_group_size(64, 1, 1) {{
                   local t: f32[{len}];
                   let l: u32 = local_id(0);
                   let g: u32 = global_id(0);
                   t[l] = x[g];
                   var s: u32 = {init};
                   while s > 0u32 && s < 100u32 {{
                     barrier(local);
                     if l < s {{ t[l] = t[l] + t[l + s] * 0.5 + (l as f32) * 0.25; }}
                     s = {next};
                   }}
                   barrier(local);
                   o[g] = t[l];
                 }}"
            ));
            let x: Vec<f32> = (0..256).map(|i| ((i * 7) % 23) as f32 * 0.37 - 3.0).collect();
            let args = [Arg::Buffer(0), Arg::Buffer(1)];
            let bufs = [Buffer::zeroed(Scalar::F32, 256), Buffer::from_slice(&x)];
            let r = NdRange::new(&[256]).with_local(&[64]);
            assert_eq!(all_ways(&k, &r, &args, &bufs), avx2(), "{init} {next} len={len}");
        }
    }
}

/// Branches of unrolled batches that read no id lanes but carry per-work-item values
/// across barriers (a `var` read and assigned, f32 and u32, and a `let` of an earlier
/// region): each batch's own values, on 1 to 3 threads.
#[test]
fn unrolled_batches_keep_values_across_barriers() {
    let bodies = [
        "acc = acc + t[l + 16u32];",
        "acc = acc * 0.5 + t[l]; cnt = cnt + 3u32;",
        "t[l] = t[l + 8u32] + v; acc = v;",
        "cnt = cnt * 7u32; t[l] = t[l] + 1.0;",
    ];
    for body in bodies {
        for cond in ["l < 13u32", "l >= 3u32 && l < 29u32", "l < 64u32"] {
            let k = kernel(&format!(
                "kernel k(o: ptr<global, f32>, c: ptr<global, u32>, x: ptr<global, f32>) #reqd_work_group_size(32, 1, 1) {{
                   local t: f32[64];
                   let l: u32 = local_id(0);
                   let g: u32 = global_id(0);
                   var acc: f32 = x[g] * 3.0;
                   var cnt: u32 = g * 5u32 + 1u32;
                   let v: f32 = x[g] - 1.0;
                   t[l] = x[g];
                   t[l + 32u32] = v;
                   barrier(local);
                   if {cond} {{ {body} }}
                   barrier(local);
                   o[g] = acc + t[l];
                   c[g] = cnt;
                 }}"
            ));
            let x: Vec<f32> = (0..128).map(|i| ((i * 7) % 23) as f32 * 0.37 - 3.0).collect();
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2)];
            let bufs = [
                Buffer::zeroed(Scalar::F32, 128),
                Buffer::zeroed(Scalar::U32, 128),
                Buffer::from_slice(&x),
            ];
            let r = NdRange::new(&[128]).with_local(&[32]);
            assert_eq!(all_ways(&k, &r, &args, &bufs), avx2(), "{body} {cond}");
        }
    }
}

/// Faults of division by zero inside unrolled batches, uniform (`100u32 / d`) and per
/// lane, in branches that read no id lanes and in ones that do, under constant masks
/// starting mid-batch: the interpreter's work-item and message, on 1 to 3 threads.
#[test]
fn faults_in_unrolled_batches_name_the_interpreters_work_item() {
    let bodies = [
        "t[l] = t[l] + ((100u32 / d) as f32);",
        "cnt = cnt / d; t[l] = t[l + 8u32] * 2.0;",
        "cnt = cnt % (d + cnt - cnt); t[l] = t[l] + (l as f32);",
        "t[l] = t[l] + ((cnt / (d * l)) as f32);",
    ];
    for body in bodies {
        for cond in ["l >= 3u32 && l < 29u32", "l > 9u32", "l == 17u32", "l < 64u32"] {
            let k = kernel(&format!(
                "kernel k(o: ptr<global, f32>, c: ptr<global, u32>, x: ptr<global, f32>, d: u32) #reqd_work_group_size(32, 1, 1) {{
                   local t: f32[64];
                   let l: u32 = local_id(0);
                   let g: u32 = global_id(0);
                   var cnt: u32 = g * 5u32 + 1u32;
                   t[l] = x[g];
                   t[l + 32u32] = x[g] * 0.5;
                   barrier(local);
                   if {cond} {{ {body} }}
                   barrier(local);
                   o[g] = t[l];
                   c[g] = cnt;
                 }}"
            ));
            let x: Vec<f32> = (0..160).map(|i| ((i * 7) % 23) as f32 * 0.37 - 3.0).collect();
            for d in [0u32, 1, 3] {
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(d)];
                let bufs = [
                    Buffer::zeroed(Scalar::F32, 128),
                    Buffer::zeroed(Scalar::U32, 128),
                    Buffer::from_slice(&x),
                ];
                let r = NdRange::new(&[128]).with_local(&[32]).with_offset(&[16]);
                assert_eq!(all_ways(&k, &r, &args, &bufs), avx2(), "{body} {cond} d={d}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("X86_REGIONS_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(24),
        ..ProptestConfig::default()
    })]

    /// Random mixes of the unrolled batches' rules: fixed groups of 8 to 64, a guard
    /// ending region 0 (`<`, `<=`, mirrored), a known range of every form in region 1 whose
    /// branch reads id lanes or not, accesses at `l + c` reaching the array's end or one
    /// past it, uniform-index loads and stores, vars across barriers, a global offset:
    /// the interpreter's buffers and errors on 1 to 3 threads.
    #[test]
    fn random_unrolled_batch_kernels_agree(
        local in prop::sample::select(vec![8u32, 16, 24, 32, 64]),
        guard in prop::sample::select(vec!["g < n", "n > g", "g <= n", "n >= g", "g <= n - 1u32"]),
        form in 0usize..5,
        lo in 0u32..70,
        hi in 0u32..70,
        off in 0u32..12,
        body in prop::sample::select(vec![
            "t[l] = t[l] * 0.5 + t[l + OFFu32];",
            "acc = acc + t[l + OFFu32];",
            "u[s] = t[l] + (l as f32); t[l] = t[l] * x[q];",
            "t[l] = t[l + OFFu32] + (global_id(0) as f32) * 0.25; cnt = cnt + l;",
            "cnt = cnt / (q + 1u32); t[l] = t[l] + t[l + OFFu32];",
        ]),
        slack in 0u32..3,
        n in 0u32..300,
        q in prop::sample::select(vec![0u32, 7, 200, 263, 264, u32::MAX]),
        s in prop::sample::select(vec![0u32, 13, 63, 64]),
        offset in prop::sample::select(vec![0u32, 3, 8]),
    ) {
        let cond = match form {
            0 => format!("l >= {lo}u32 && l < {hi}u32"),
            1 => format!("l < {hi}u32"),
            2 => format!("l > {lo}u32 && l <= {hi}u32"),
            3 => format!("{hi}u32 > l"),
            _ => format!("l == {lo}u32"),
        };
        let reach = hi.min(local).div_ceil(8) * 8;
        let len = (reach + off + slack).saturating_sub(1).max(local).max(16);
        let body = body.replace("OFF", &off.to_string());
        let k = kernel(&format!(
            "kernel k(o: ptr<global, f32>, c: ptr<global, u32>, x: ptr<global, f32>, n: u32, q: u32, s: u32) #reqd_work_group_size({local}, 1, 1) {{
               local t: f32[{len}];
               local u: f32[64];
               let l: u32 = local_id(0);
               let g: u32 = global_id(0);
               var acc: f32 = 0.5;
               var cnt: u32 = g * 3u32;
               if {guard} {{ t[l] = x[g] + x[q % 264u32]; u[l] = 0.25; }} else {{ t[l] = 0.5; u[l] = 0.75; }}
               barrier(local);
               if {cond} {{ {body} }}
               barrier(local);
               o[g] = t[l] + u[l] * 2.0 + acc;
               c[g] = cnt;
             }}"
        ));
        let x: Vec<f32> = (0..264).map(|i| ((i * 7) % 23) as f32 * 0.37 - 3.0).collect();
        let args = [
            Arg::Buffer(0),
            Arg::Buffer(1),
            Arg::Buffer(2),
            Arg::scalar(n),
            Arg::scalar(q),
            Arg::scalar(s),
        ];
        let bufs = [
            Buffer::zeroed(Scalar::F32, 264),
            Buffer::zeroed(Scalar::U32, 264),
            Buffer::from_slice(&x),
        ];
        let r = NdRange::new(&[4 * local]).with_local(&[local]).with_offset(&[offset]);
        prop_assert_eq!(all_ways(&k, &r, &args, &bufs), avx2());
    }
}

/// Group guards whose bound can fault (`n / d`, `n % d` with `d` zero), in the first region
/// and after a region of the general code (which leaves its own batch registers): the
/// fault of the group's first work-item, as the interpreter reports it, on 1 to 3 threads.
#[test]
fn group_guards_whose_bound_faults_agree() {
    for bound in ["n / d", "n % d", "(n / d) + 1u32"] {
        for first in [true, false] {
            let before =
                if first { "" } else { "t[(l * 3u32) % 32u32] = x[g] * 0.5; barrier(local);" };
            let k = kernel(&format!(
                "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, n: u32, d: u32) #reqd_work_group_size(32, 1, 1) {{
                   local t: f32[32];
                   let l: u32 = local_id(0);
                   let g: u32 = global_id(0);
                   {before}
                   if g < {bound} {{ t[l] = x[g] * 2.0; }} else {{ t[l] = 1.5; }}
                   barrier(local);
                   o[g] = t[(l + 1u32) % 32u32] + t[l];
                 }}"
            ));
            let x: Vec<f32> = (0..160).map(|i| ((i * 7) % 23) as f32 * 0.37 - 3.0).collect();
            for (n, d) in [(1000u32, 0u32), (1000, 1), (64, 1), (200, 2)] {
                for offset in [0u32, 5] {
                    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(d)];
                    let bufs = [Buffer::zeroed(Scalar::F32, 160), Buffer::from_slice(&x)];
                    let r = NdRange::new(&[128]).with_local(&[32]).with_offset(&[offset]);
                    assert_eq!(
                        all_ways(&k, &r, &args, &bufs),
                        avx2(),
                        "{bound} first={first} n={n} d={d} offset={offset}"
                    );
                }
            }
        }
    }
}

/// Stores at a uniform index in regions trimmed by a range of `local_id(0)` that is not
/// known when the code is generated (`l < s`, `l >= s`, `l == s` for a parameter `s`),
/// where the range ends or starts inside a batch: the value of the last work-item in the
/// range, not of the batch's last lane; per-lane and uniform values; a uniform-index load
/// past the end faulting at the first work-item in range; on 1 to 3 threads.
#[test]
fn uniform_index_stores_in_trimmed_regions_keep_the_last_item_in_range() {
    let conds = ["l < s", "l <= s", "l >= s", "l > s && l < s + 5u32", "l == s", "s > l"];
    let bodies = [
        "u[q] = (l as f32) + 0.5;",
        "u[q] = t[l] * 2.0;",
        "u[q] = (s as f32) + 0.25;",
        "u[(l + 1u32) % 40u32] = x[q + 100u32] + t[l];",
    ];
    for cond in conds {
        for body in bodies {
            for fixed in [false, true] {
                let attr = if fixed { "#reqd_work_group_size(32, 1, 1)" } else { "" };
                let k = kernel(&format!(
                    "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, s: u32, q: u32) {attr} {{
                       local t: f32[32];
                       local u: f32[40];
                       let l: u32 = local_id(0);
                       let g: u32 = global_id(0);
                       t[l] = x[g];
                       u[l] = 0.0;
                       barrier(local);
                       if {cond} {{ {body} }}
                       barrier(local);
                       o[g] = u[(l + q) % 40u32] + t[l];
                     }}"
                ));
                let x: Vec<f32> = (0..128).map(|i| ((i * 7) % 23) as f32 * 0.37 - 3.0).collect();
                for s in [0u32, 3, 8, 13, 31, 40] {
                    for q in [0u32, 27, 28, 39, 40] {
                        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(s), Arg::scalar(q)];
                        let bufs = [Buffer::zeroed(Scalar::F32, 128), Buffer::from_slice(&x)];
                        let r = NdRange::new(&[128]).with_local(&[32]);
                        assert_eq!(
                            all_ways(&k, &r, &args, &bufs),
                            avx2(),
                            "{cond} {body} fixed={fixed} s={s} q={q}"
                        );
                    }
                }
            }
        }
    }
}

/// Large fixed groups (128 and 256 work-items) whose known ranges start far from 0 and
/// span up to the most batches unrolled (and one more, which keeps the batch loop), with
/// `l + c` reaching the array's end or one past it, on 1 to 3 threads.
#[test]
fn far_known_ranges_of_large_groups_agree() {
    for local in [128u32, 256] {
        for (lo, hi) in
            [(104u32, 168u32), (104, 169), (local - 60, local), (local - 1, local + 9), (63, 64)]
        {
            for off in [3u32, 40] {
                for len in [local + off, local + off - 1] {
                    let cond = format!("l >= {lo}u32 && l < {hi}u32");
                    let k = kernel(&format!(
                        "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, n: u32) #reqd_work_group_size({local}, 1, 1) {{
                           local t: f32[{len}];
                           let l: u32 = local_id(0);
                           let g: u32 = global_id(0);
                           if g < n {{ t[l] = x[g]; }} else {{ t[l] = 0.5; }}
                           barrier(local);
                           if {cond} {{ t[l] = t[l] * 0.5 + t[l + {off}u32]; }}
                           barrier(local);
                           o[g] = t[l];
                         }}"
                    ));
                    for n in [4 * local, 2 * local + 5] {
                        let x: Vec<f32> =
                            (0..4 * local).map(|i| ((i * 7) % 23) as f32 * 0.37 - 3.0).collect();
                        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
                        let bufs = [
                            Buffer::zeroed(Scalar::F32, 4 * local as usize),
                            Buffer::from_slice(&x),
                        ];
                        let r = NdRange::new(&[4 * local]).with_local(&[local]);
                        assert_eq!(
                            all_ways(&k, &r, &args, &bufs),
                            avx2(),
                            "{cond} local={local} off={off} len={len} n={n}"
                        );
                    }
                }
            }
        }
    }
}

/// Unrolled regions binding `let`s that later regions read (f32, u32, f64, and more than
/// fit in registers): region-loop code that agrees with the
/// interpreter, on 1 to 3 threads.
#[test]
fn lets_of_unrolled_regions_read_later_agree() {
    let lets = [
        ("let a: f32 = t[l] * 2.0;", "a"),
        ("let a: u32 = (t[l] as u32) + l;", "(a as f32)"),
        ("let a: f64 = (t[l] as f64) * 0.5;", "(a as f32)"),
        (
            "let a: f32 = t[l]; let b: f32 = a * 2.0; let c2: f32 = b + a; let d: f32 = c2 * b; let e: f32 = d - a; let f: f32 = e * c2; let h: f32 = f + d; let a2: f32 = h * e;",
            "a + b + c2 + d + e + f + h + a2",
        ),
    ];
    for (bind, read) in lets {
        for cond in ["", "l < 13u32"] {
            let region = if cond.is_empty() {
                format!("{bind} t[l] = t[l] + 1.0;")
            } else {
                format!("{bind} if {cond} {{ t[l] = t[l] + 1.0; }}")
            };
            let k = kernel(&format!(
                "kernel k(o: ptr<global, f32>, x: ptr<global, f32>) #reqd_work_group_size(32, 1, 1) {{
                   local t: f32[32];
                   let l: u32 = local_id(0);
                   let g: u32 = global_id(0);
                   t[l] = x[g];
                   barrier(local);
                   {region}
                   barrier(local);
                   o[g] = t[l] + {read};
                 }}"
            ));
            let x: Vec<f32> = (0..128).map(|i| ((i * 7) % 23) as f32 * 0.37 - 3.0).collect();
            let args = [Arg::Buffer(0), Arg::Buffer(1)];
            let bufs = [Buffer::zeroed(Scalar::F32, 128), Buffer::from_slice(&x)];
            let r = NdRange::new(&[128]).with_local(&[32]);
            assert_eq!(all_ways(&k, &r, &args, &bufs), avx2(), "{bind} {cond}");
            if avx2() {
                assert!(has_regions(&k), "{bind} {cond}");
            }
        }
    }
}

/// Guards whose bound is a work-item `var` holding the same value in every work-item,
/// which the guarded branch then changes (per work-item): each work-item tests its own
/// value, in fixed groups (the guard tested once per group) and others, on 1 to 3 threads.
#[test]
fn guards_of_work_item_vars_changed_in_their_branch_agree() {
    for attr in ["#reqd_work_group_size(32, 1, 1)", ""] {
        for change in ["lim = lim + 8u32;", "lim = lim - 40u32;", "lim = g;"] {
            let k = kernel(&format!(
                "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, n: u32) {attr} {{
                   local t: f32[32];
                   let l: u32 = local_id(0);
                   let g: u32 = global_id(0);
                   var lim: u32 = n;
                   t[l] = 0.0;
                   barrier(local);
                   if g < lim {{ t[l] = x[g]; {change} }}
                   barrier(local);
                   if g < lim {{ t[l] = t[l] + 1.0; {change} }}
                   barrier(local);
                   o[g] = t[l] + (lim as f32);
                 }}"
            ));
            let x: Vec<f32> = (0..128).map(|i| ((i * 7) % 23) as f32 * 0.37 - 3.0).collect();
            for n in [0u32, 20, 32, 64, 70, 128, 1000] {
                let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
                let bufs = [Buffer::zeroed(Scalar::F32, 128), Buffer::from_slice(&x)];
                let r = NdRange::new(&[128]).with_local(&[32]);
                assert_eq!(all_ways(&k, &r, &args, &bufs), avx2(), "{attr} {change} n={n}");
            }
        }
    }
}

/// `exp` in unrolled batches under constant masks (a branch reading no id lanes) and in
/// guarded group branches, over NaN payloads, ±inf and its clamp edges: the interpreter's
/// bits, on 1 to 3 threads.
#[test]
fn exp_in_unrolled_batches_keeps_the_bits() {
    let specials = [
        f32::NAN,
        f32::from_bits(0xffc0_1234),
        f32::from_bits(0x7f80_0001),
        f32::INFINITY,
        f32::NEG_INFINITY,
        88.72283,
        88.72284,
        -103.97,
        -87.4,
        -104.0,
        0.0,
        -0.0,
        1.5,
    ];
    let x: Vec<f32> = (0..128).map(|i| specials[(i * 5 + i / 13) % specials.len()]).collect();
    for (guard, cond, body) in [
        ("g < n", "l >= 3u32 && l < 29u32", "t[l] = exp(t[l + 8u32]);"),
        ("n > g", "l < 13u32", "t[l] = exp(t[l]) + exp(t[l + 16u32] * 0.5);"),
    ] {
        let k = kernel(&format!(
            "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, n: u32) #reqd_work_group_size(32, 1, 1) {{
               local t: f32[64];
               let l: u32 = local_id(0);
               let g: u32 = global_id(0);
               t[l + 32u32] = 2.0;
               if {guard} {{ t[l] = exp(x[g]); t[l + 32u32] = x[g]; }} else {{ t[l] = -1.0; }}
               barrier(local);
               if {cond} {{ {body} }}
               barrier(local);
               o[g] = t[l];
             }}"
        ));
        for n in [0u32, 40, 128, 1000] {
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n)];
            let bufs = [Buffer::zeroed(Scalar::F32, 128), Buffer::from_slice(&x)];
            let r = NdRange::new(&[128]).with_local(&[32]);
            assert_eq!(all_ways(&k, &r, &args, &bufs), avx2(), "{guard} {cond} n={n}");
            // (`results_match` lets quiet NaNs differ; `exp`'s results are pure: every bit.)
            if !body.contains('+') {
                let mut want = bufs.to_vec();
                kiln_ir::interp::run(&k, &r, &args, &mut want).unwrap();
                for optimize in [false, true] {
                    let p = compile(&k, &X86Options { optimize, ..X86Options::default() }).unwrap();
                    for threads in [1usize, 3] {
                        let mut got = bufs.to_vec();
                        p.run_parallel(&r, &args, &mut got, threads, &CpuRunOptions::default())
                            .unwrap();
                        assert_eq!(f32s_bits(&want[0]), f32s_bits(&got[0]), "{cond} n={n}");
                    }
                }
            }
        }
    }
}
