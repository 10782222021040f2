//! Batch-uniform integer values of the 8-lane code in general-purpose registers: the
//! disassembly shows scalar arithmetic on a uniform loop's counter and index values, and
//! random kernels full of uniform index arithmetic, uniform branches, uniform `var`s and
//! nested uniform loops (signed and unsigned, negative and wrapping values) agree with the
//! scalar code and the interpreter, errors compared word for word.
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{avx2, kernel, three_ways, vector_listing};

use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;
use proptest::prelude::*;

#[test]
fn uniform_loop_arithmetic_is_scalar() {
    if !avx2() {
        kiln_ir::testing::skip("no AVX2 on this CPU: no 8-lane code to inspect");
        return;
    }
    // A row sum: `j * w` and the loop's bounds and counter are the same in all lanes.
    let k = kernel(
        "kernel k(o: ptr<global, f32>, a: ptr<global, f32>, w: u32, h: u32) {
           let i: u32 = global_id(0);
           var acc: f32 = 0.0;
           for j: u32 in 0u32 .. h {
             let row: u32 = j * w + 1u32;
             if j != 3u32 { acc = acc + a[row + i]; }
           }
           o[i] = acc;
         }",
    );
    let code = vector_listing(&k);
    let has = |p: &str| code.iter().any(|l| l.starts_with(p));
    // `j * w` by a scalar multiply of a GPR with the parameter's scalar frame slot, the
    // `+ 1` by a scalar add, the uniform `if` by a scalar compare and a conditional jump
    // (no flag materialized in a register).
    assert!(has("imul eax,"), "no scalar multiply:\n{}", code.join("\n"));
    assert!(has("add eax,1"), "no scalar add:\n{}", code.join("\n"));
    // (The counter `j` lives in `r9`: the compare is of that register.)
    assert!(has("cmp r9d,3"), "no scalar condition:\n{}", code.join("\n"));
    assert!(!has("setne al"), "a condition set in a register:\n{}", code.join("\n"));
    // No lane multiply (the only multiply is uniform) and no lane mask test of a
    // uniform condition.
    assert!(!has("vpmulld"), "a lane multiply:\n{}", code.join("\n"));
    assert!(!has("vmovmskps eax,ymm0"), "a lane-0 branch:\n{}", code.join("\n"));
    // The counter is broadcast only where it meets lanes: here never (the row value is).
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(40u32), Arg::scalar(6u32)];
    let a = Buffer::from_slice(&(0..300).map(|i| i as f32 * 0.5 - 7.0).collect::<Vec<_>>());
    let bufs = [Buffer::zeroed(Scalar::F32, 40), a];
    assert!(three_ways(&k, &NdRange::new(&[40]).with_local(&[8]), &args, &bufs));
}

/// Unsigned uniform division and remainder by a power of two are a shift and a mask (as a
/// tree reduction's `stride / 2`), not a `div`; the results are the interpreter's.
#[test]
fn uniform_unsigned_division_by_a_power_of_two_is_a_shift() {
    if !avx2() {
        kiln_ir::testing::skip("no AVX2 on this CPU: no 8-lane code to inspect");
        return;
    }
    let k = kernel(
        "kernel k(o: ptr<global, u32>, n: u32) {
           var s: u32 = n;
           var acc: u32 = 0u32;
           while s > 0u32 {
             acc = acc + s % 8u32 + global_id(0);
             s = s / 4u32;
           }
           o[global_id(0)] = acc + n / 1u32;
         }",
    );
    let code = vector_listing(&k);
    let has = |p: &str| code.iter().any(|l| l.starts_with(p));
    assert!(has("shr eax,2"), "no shift:\n{}", code.join("\n"));
    assert!(has("and eax,7"), "no mask:\n{}", code.join("\n"));
    assert!(!has("div "), "a division:\n{}", code.join("\n"));
    for n in [0u32, 1, 7, 100, 0x8000_0001, u32::MAX] {
        let args = [Arg::Buffer(0), Arg::scalar(n)];
        let bufs = [Buffer::zeroed(Scalar::U32, 16)];
        assert!(three_ways(&k, &NdRange::new(&[16]).with_local(&[8]), &args, &bufs));
    }
}

/// Uniform shifts are scalar `shl`/`shr`/`sar` (as a tree reduction's `stride >> 1` after
/// `-O`), by constants and by uniform counts of 32 and more or negative (taken modulo 32,
/// as the interpreter does), not lane shifts; the results are the interpreter's.
#[test]
fn uniform_shifts_are_scalar() {
    if !avx2() {
        kiln_ir::testing::skip("no AVX2 on this CPU: no 8-lane code to inspect");
        return;
    }
    let k = kernel(
        "kernel k(o: ptr<global, u32>, p: ptr<global, i32>, n: u32, c: i32) {
           var s: u32 = n;
           var acc: u32 = 0u32;
           while s > 0u32 {
             acc = acc + (s << 3u32) + global_id(0);
             s = s >> 1u32;
           }
           let t: i32 = (c >> 2i32) + (c << c) + (c >> (c + 30i32));
           o[global_id(0)] = acc;
           p[global_id(0)] = t + global_id(0) as i32;
         }",
    );
    let code = vector_listing(&k);
    let has = |p: &str| code.iter().any(|l| l.starts_with(p));
    assert!(has("shr eax,1"), "no scalar shift:\n{}", code.join("\n"));
    assert!(has("shl eax,3"), "no scalar left shift:\n{}", code.join("\n"));
    assert!(has("sar eax,2"), "no scalar arithmetic shift:\n{}", code.join("\n"));
    assert!(has("sar eax,cl"), "no scalar shift by a count:\n{}", code.join("\n"));
    for l in ["vpsrlvd", "vpsllvd", "vpsravd", "vpsrld", "vpslld", "vpsrad"] {
        assert!(!has(l), "a lane shift `{l}`:\n{}", code.join("\n"));
    }
    for (n, c) in [(0u32, 0i32), (1, 1), (100, 31), (0x8000_0001, 32), (u32::MAX, -1), (77, -33)] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(c)];
        let bufs = [Buffer::zeroed(Scalar::U32, 16), Buffer::zeroed(Scalar::I32, 16)];
        assert!(three_ways(&k, &NdRange::new(&[16]).with_local(&[8]), &args, &bufs));
    }
}

/// A store at a batch-uniform index under a divergent mask is one store of the last active
/// lane's value (`bsr` of the mask), not eight lane tests: the last work-item writing the
/// element wins, as in the interpreter, whichever lanes are active (the first, the last,
/// none, a gap), and an index past the end faults at the first active work-item.
#[test]
fn uniform_index_stores_keep_the_last_active_lane() {
    if !avx2() {
        kiln_ir::testing::skip("no AVX2 on this CPU: no 8-lane code to inspect");
        return;
    }
    let k = kernel(
        "kernel k(o: ptr<global, u32>, c: ptr<global, u32>, at: u32, lo: u32, hi: u32) {
           let i: u32 = global_id(0);
           if c[i] >= lo && c[i] < hi {
             o[at + group_id(0)] = i * 3u32 + c[i];
           }
         }",
    );
    let code = vector_listing(&k);
    let has = |p: &str| code.iter().any(|l| l.starts_with(p));
    assert!(has("bsr eax,eax"), "no last-lane store:\n{}", code.join("\n"));
    assert!(!has("test eax,80h"), "a lane-by-lane store:\n{}", code.join("\n"));
    // Lane values 0..8 in each batch, in an order where the first and last lanes differ.
    let c: Vec<u32> = (0..32u32).map(|i| [5, 0, 7, 3, 1, 6, 2, 4][(i % 8) as usize]).collect();
    for (at, lo, hi) in [(0u32, 0u32, 8u32), (1, 4, 8), (2, 0, 1), (0, 8, 9), (3, 2, 5), (7, 0, 8)]
    {
        let args =
            [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(at), Arg::scalar(lo), Arg::scalar(hi)];
        let bufs = [Buffer::zeroed(Scalar::U32, 8), Buffer::from_slice(&c)];
        assert!(three_ways(&k, &NdRange::new(&[32]).with_local(&[16]), &args, &bufs));
    }
}

/// A batch-uniform expression of type `t` (`i32` or `u32`) over the loop counters `j`,
/// `q`, the parameters `n`, `m`, the uniform `var` `u` and (for u32) ids and sizes of
/// other dimensions, with wrapping and sign-crossing constants.
fn arb_uniform(depth: u32, with_q: bool, t: &'static str) -> BoxedStrategy<String> {
    let mut leaves: Vec<String> = vec!["j".into(), "n".into(), "m".into(), "u".into()];
    if with_q {
        leaves.push("q".into());
    }
    for c in ["0", "3", "2147483647"] {
        leaves.push(format!("{c}{t}"));
    }
    if t == "u32" {
        leaves.extend(["group_id(1)", "local_size(0)", "4294967291u32"].map(String::from));
    } else {
        leaves.push("(0i32 - 5i32)".into());
    }
    let leaf = prop::sample::select(leaves);
    // Division and remainder by constants that cannot fault (-2 and 7 for i32: negative
    // and odd divisors truncate toward zero).
    let divisors: Vec<String> = if t == "u32" {
        vec!["2u32".into(), "7u32".into(), "4294967295u32".into()]
    } else {
        vec!["2i32".into(), "7i32".into(), "-2i32".into()]
    };
    leaf.prop_recursive(depth, 16, 2, move |inner| {
        prop_oneof![
            (
                inner.clone(),
                prop::sample::select(vec!["+", "-", "*", "&", "|", "^", "<<", ">>"]),
                inner.clone()
            )
                .prop_map(|(a, op, b)| format!("({a} {op} {b})")),
            (inner, prop::sample::select(vec!["/", "%"]), prop::sample::select(divisors.clone()))
                .prop_map(|(a, op, d)| format!("({a} {op} {d})")),
        ]
    })
    .boxed()
}

fn arb_cmp() -> BoxedStrategy<&'static str> {
    prop::sample::select(vec!["<", "<=", ">", ">=", "==", "!="]).boxed()
}

fn arb_case() -> impl Strategy<Value = (&'static str, [String; 4])> {
    prop::sample::select(vec!["i32", "u32"]).prop_flat_map(|t| {
        (
            Just(t),
            [
                arb_uniform(3, true, t),
                arb_uniform(3, true, t),
                arb_uniform(2, true, t),
                arb_uniform(2, false, t),
            ],
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn uniform_integer_code_agrees(
        (t, [e1, e2, e3, e4]) in arb_case(),
        c1 in arb_cmp(), c2 in arb_cmp(),
        n in prop::sample::select(vec![0i32, 2, 3, 7, -1, -40]),
        m in prop::sample::select(vec![1i32, 5, -3, i32::MIN]),
        hi in 0i32..5,
    ) {
        // For u32, also a contiguous access at `global_id(0)` plus a uniform offset.
        let contig = if t == "u32" { "acc = acc + a[(i + off) & 63u32];" } else { "" };
        let k = kernel(&format!(
            "kernel k(o: ptr<global, {t}>, a: ptr<global, {t}>, n: {t}, m: {t}) {{
               let i: u32 = global_id(0);
               let x: {t} = a[i];
               var acc: {t} = x;
               var u: {t} = n;
               for j: {t} in 0{t} .. {hi}{t} {{
                 let lo: {t} = {e4} & 3{t};
                 for q: {t} in lo .. lo + 3{t} step 2{t} {{
                   let off: {t} = {e3} & 31{t};
                   acc = acc + a[off] * (q + 1{t}) + x;
                   {contig}
                   if {e1} {c1} {e2} {{ u = u + {e2}; acc = acc ^ u; }} else {{ acc = acc + j; }}
                   if {e1} {c2} n && acc > 0{t} {{ acc = acc - m; }}
                 }}
                 u = u * 3{t} + j;
               }}
               o[i] = acc + a[u & 63{t}];
             }}"
        ));
        let a: Vec<i32> = (0..64i32).map(|i| (i * 37 + 11) % 101 - 50).collect();
        let (a, o, args) = if t == "i32" {
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(m)];
            (Buffer::from_slice(&a), Buffer::zeroed(Scalar::I32, 48), args)
        } else {
            let a: Vec<u32> = a.iter().map(|&v| v as u32).collect();
            let (n, m) = (n as u32, m as u32);
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(m)];
            (Buffer::from_slice(&a), Buffer::zeroed(Scalar::U32, 48), args)
        };
        let has = three_ways(&k, &NdRange::new(&[16, 3]).with_local(&[16, 1]), &args, &[o, a]);
        prop_assert_eq!(has, avx2());
    }
}

/// Kernels with barriers run a row's batches in one call per round: batches of one row
/// that disagree about a barrier are reported as the interpreter reports them (at the first
/// disagreeing work-item, before a later batch runs into a fault), and faults in later
/// batches of a row are reported with their work-item.
#[test]
fn rows_of_batches_per_call_keep_the_interpreters_order() {
    // Lane 0 of every batch bumps t[0] (in work-item order), then every batch branches
    // on it uniformly: batch `stop_at` and later ones skip a barrier the others reach.
    let k = kernel(
        "kernel k(o: ptr<global, u32>, ix: ptr<global, u32>, stop_at: u32) {
           local t: u32[64];
           let l: u32 = local_id(0);
           if (l & 7u32) == 0u32 { t[0] = t[0] + 1u32; }
           if t[0] <= stop_at { barrier(local); t[l] = l; }
           barrier(local);
           o[ix[global_id(0)]] = t[l] + t[0];
         }",
    );
    for (stop_at, bad) in
        [(99u32, None), (1, None), (2, Some(20usize)), (99, Some(45)), (3, Some(3))]
    {
        let mut ix: Vec<u32> = (0..64).collect();
        if let Some(b) = bad {
            ix[b] = 1000;
        }
        let bufs = [Buffer::zeroed(Scalar::U32, 64), Buffer::from_slice(&ix)];
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(stop_at)];
        for r in
            [NdRange::new(&[64]).with_local(&[32]), NdRange::new(&[32, 2]).with_local(&[16, 2])]
        {
            // The interpreter's verdict: divergence where batches disagree within the group.
            let e = run(&k, &r, &args, &mut bufs.to_vec()).err().map(|e| e.message);
            let diverges = stop_at < 99;
            assert_eq!(
                e.as_deref().is_some_and(|m| m.contains("barrier divergence")),
                diverges,
                "{e:?}"
            );
            assert!(three_ways(&k, &r, &args, &bufs) == avx2(), "stop_at {stop_at}, bad {bad:?}");
        }
    }
}

/// A load at a batch-uniform index is one scalar compare of the index with the buffer's
/// length and a broadcast (`cmp rax,[r14+..]`), the lanes' check only when that fails: in
/// bounds, one past the end and far past it, negative `i32` indices, under no mask, under
/// a divergent one, with one active lane and with none (no fault then), in loops: the
/// interpreter's values and errors (the lowest active lane's).
#[test]
fn uniform_index_loads_agree() {
    let k = kernel(
        "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, q: i32, m: u32) {
           let i: u32 = global_id(0);
           var acc: f32 = x[0];
           for j: i32 in 0 .. 6 {
             if i % 3u32 != m {
               acc = acc + x[q + j];
             }
           }
           if i == m * 5u32 + 2u32 { acc = acc * x[q + 4]; }
           if i > 1000u32 { acc = acc - x[q + 99]; }
           o[i] = acc;
         }",
    );
    if avx2() {
        let listing = vector_listing(&k);
        assert!(
            listing.iter().any(|l| l.starts_with("cmp rax,[r14+")),
            "no scalar bounds compare:\n{}",
            listing.join("\n")
        );
    }
    let x: Vec<f32> = (0..40).map(|i| i as f32 * 0.5 - 7.0).collect();
    for q in [0i32, 3, 33, 34, 35, 38, 39, 40, 200, -1, -3, i32::MIN] {
        for m in [0u32, 1, 2, 9] {
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(q), Arg::scalar(m)];
            let bufs = [Buffer::zeroed(Scalar::F32, 64), Buffer::from_slice(&x)];
            let r = NdRange::new(&[64]).with_local(&[16]);
            assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "q={q} m={m}");
        }
    }
}

/// A store at a batch-uniform index is one scalar compare of the index with the buffer's
/// length and one store of the last active lane's value (lane 0's for a uniform value
/// under no mask), the lanes' check only when the index is past the end: in bounds, at and
/// past the end, negative `i32` indices, every lane, one, none (no fault then), uniform
/// and per-lane values: the interpreter's buffers and errors.
#[test]
fn uniform_index_stores_agree() {
    let k = kernel(
        "kernel k(o: ptr<global, f32>, q: i32, m: u32) {
           let i: u32 = global_id(0);
           o[q + 1] = (m as f32) * 0.5;
           if i % 4u32 == m { o[q] = (i as f32) + 0.25; }
           if i == m + 9u32 { o[q + 2] = 7.0; }
           if i > 1000u32 { o[q + 99] = 1.0; }
         }",
    );
    if avx2() {
        let listing = vector_listing(&k);
        assert!(
            listing.iter().any(|l| l.starts_with("cmp rax,[r14+")),
            "no scalar bounds compare:\n{}",
            listing.join("\n")
        );
    }
    for q in [0i32, 5, 36, 37, 38, 39, 40, 300, -1, -2, i32::MIN] {
        for m in [0u32, 1, 3, 7] {
            let args = [Arg::Buffer(0), Arg::scalar(q), Arg::scalar(m)];
            let bufs = [Buffer::zeroed(Scalar::F32, 40)];
            let r = NdRange::new(&[32]).with_local(&[16]);
            assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "q={q} m={m}");
        }
    }
}

/// Loads and stores at batch-uniform indices at their edges: `u32` indices that wrap
/// (to 0 and to the largest value), negative `i32` ones, indices of other dimensions'
/// ids in 2-D ranges (rows of one batch; rows not multiples of 8 on the scalar code),
/// the group's id, stores under divergent control whose last active lane
/// is not lane 7 (and is in a trimmed last batch), 8-, 16- and 64-bit elements, a
/// variable given a uniform value under a divergent branch, a global offset: the
/// interpreter's buffers and errors.
#[test]
fn uniform_indices_at_their_edges_agree() {
    let bodies = [
        // Wrapping u32 index: `q + 4294967295` is `q - 1`.
        "o[q + 4294967295u32] = (i as f32) + x[q + 4294967294u32];",
        // Stores whose last active lane is in the middle of a batch.
        "if (i % 8u32) < m { o[q] = (i as f32) + 0.5; }",
        "if (i % 8u32) >= m && (i % 8u32) < m + 2u32 { o[q + 1u32] = x[q] + (i as f32); }",
        // Other dimensions' ids and the group's id.
        "o[q + global_id(1)] = (i as f32) + x[local_id(1) + q];",
        "o[q + group_id(0) + 3u32 * group_id(1)] = (global_id(1) as f32) + x[q + local_id(1)];",
        "if i > m { o[q + local_id(1)] = (local_id(0) as f32); }",
        // A var with a uniform value set under a divergent branch: not uniform after it.
        "var u: u32 = q; if (i & 1u32) == 0u32 { u = q + 1u32; } o[u] = (i as f32) + x[u];",
        "var u: u32 = q; if i < m { u = q + 2u32; } else { u = q + 3u32; } o[u] = x[u] * 2.0;",
    ];
    for body in bodies {
        let k = kernel(&format!(
            "kernel k(o: ptr<global, f32>, x: ptr<global, f32>, q: u32, m: u32) {{
               let i: u32 = global_id(0);
               {body}
             }}"
        ));
        let x: Vec<f32> = (0..40).map(|i| i as f32 * 0.5 - 7.0).collect();
        for q in [0u32, 1, 2, 30, 37, 38, 39, 40, u32::MAX] {
            for m in [0u32, 1, 3, 6, 8] {
                for (size, local, offset) in [
                    ([32u32, 1u32], [16u32, 1u32], 0u32),
                    ([16, 3], [8, 3], 0),
                    ([24, 2], [8, 2], 3),
                    ([40, 1], [40, 1], 0),
                    ([12, 3], [6, 3], 0),
                ] {
                    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(q), Arg::scalar(m)];
                    let bufs = [Buffer::zeroed(Scalar::F32, 40), Buffer::from_slice(&x)];
                    let r = NdRange::new(&size).with_local(&local).with_offset(&[offset, 0]);
                    assert_eq!(
                        three_ways(&k, &r, &args, &bufs),
                        avx2(),
                        "{body} q={q} m={m} {size:?}/{local:?}"
                    );
                }
            }
        }
    }
    // Negative i32 indices and other element widths.
    for (t, v) in [
        ("i32", "(i as i32) - 3"),
        ("u8", "(i as u8)"),
        ("u16", "(i as u16)"),
        ("f64", "(i as f64) * 0.5"),
        ("i64", "(i as i64) - 9i64"),
    ] {
        let k = kernel(&format!(
            "kernel k(o: ptr<global, {t}>, q: i32, m: u32) {{
               let i: u32 = global_id(0);
               if i % 8u32 < m {{ o[q] = {v} + o[q + 1]; }}
               o[q - 1] = o[q + 2];
             }}"
        ));
        for q in [0i32, 1, 2, 36, 37, 38, -1, -2, i32::MIN, i32::MAX] {
            for m in [0u32, 1, 5, 8] {
                let args = [Arg::Buffer(0), Arg::scalar(q), Arg::scalar(m)];
                let s = match t {
                    "u8" => Scalar::U8,
                    "u16" => Scalar::U16,
                    "f64" => Scalar::F64,
                    "i64" => Scalar::I64,
                    _ => Scalar::I32,
                };
                let bufs = [Buffer::zeroed(s, 40)];
                for (size, local) in [(32u32, 16u32), (24, 24), (29, 29)] {
                    let r = NdRange::new(&[size]).with_local(&[local]);
                    assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "{t} q={q} m={m}");
                }
            }
        }
    }
}

/// Stores of a uniform value at a uniform index where some lanes, every lane of a batch or
/// none take the branch, in a uniform loop and in a loop whose lanes leave one by one:
/// only the active lanes store, and an index past the end faults only if one of them
/// reaches it.
#[test]
fn uniform_index_stores_of_uniform_values_agree() {
    let bodies = [
        "if i >= m { o[q] = 5.0; o[q + 1u32] = (m as f32); }",
        "if i < m { o[q] = 5.0; }",
        "if m > 40u32 { o[q] = 5.0; } else { o[q + 2u32] = 1.0; }",
        "for j: u32 in 0u32 .. 3u32 { if i >= m { o[q + j] = 2.0; } }",
        "for j: u32 in 0u32 .. 3u32 { if i + j >= m { o[q + j] = 3.0 + (j as f32); } }",
        "var j: u32 = 0u32; while j < 3u32 && i >= m + j { o[q] = (j as f32); j = j + 1u32; }",
    ];
    for body in bodies {
        let k = kernel(&format!(
            "kernel k(o: ptr<global, f32>, q: u32, m: u32) {{
               let i: u32 = global_id(0);
               {body}
             }}"
        ));
        for q in [0u32, 5, 37, 38, 39, 40, u32::MAX] {
            for m in [0u32, 3, 8, 16, 20, 32, 41] {
                let args = [Arg::Buffer(0), Arg::scalar(q), Arg::scalar(m)];
                let bufs = [Buffer::from_slice(&[0.5f32; 40])];
                let r = NdRange::new(&[32]).with_local(&[16]);
                assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "{body} q={q} m={m}");
            }
        }
    }
}

/// A uniform index into a private array names each work-item's own element: stores of
/// per-lane values under divergent control, loads back, indices one past the end and
/// wrapping (the fault of the lowest active work-item).
#[test]
fn uniform_indices_into_private_arrays_agree() {
    for t in ["f32", "u32", "i32"] {
        let k = kernel(&format!(
            "kernel k(o: ptr<global, {t}>, q: u32, m: u32) {{
               let i: u32 = global_id(0);
               private p: {t}[6];
               p[q % 6u32] = (i as {t});
               if i % 3u32 == m {{ p[q] = ((i * 7u32) as {t}); }}
               if i > m {{ p[q + 1u32] = p[q % 6u32] + ((m as {t})); }}
               o[i] = p[q % 6u32] + p[(q + 1u32) % 6u32];
             }}"
        ));
        for q in [0u32, 2, 4, 5, 6, u32::MAX] {
            for m in [0u32, 1, 2, 31, 40] {
                let args = [Arg::Buffer(0), Arg::scalar(q), Arg::scalar(m)];
                let s = match t {
                    "f32" => Scalar::F32,
                    "u32" => Scalar::U32,
                    _ => Scalar::I32,
                };
                let bufs = [Buffer::zeroed(s, 32)];
                let r = NdRange::new(&[32]).with_local(&[16]);
                assert_eq!(three_ways(&k, &r, &args, &bufs), avx2(), "{t} q={q} m={m}");
            }
        }
    }
}
