//! The x86 JIT's 8-lane AVX2 code (elementwise kernels indexed by `global_id(0)`, with
//! divergent `if`s as lane masks) against its scalar code and the interpreter: hand cases
//! (the benchmark chain, aliasing buffers, rows sharing elements, the scalar fallbacks) and
//! random elementwise kernels with nested divergent branches over edge values. On a CPU without AVX2 the programs have no vector
//! code and the tests say so.
//!
//! `X86_SPMD_CASES=N` raises the number of random kernels (default 128).
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{avx2, f32s, kernel};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::results_match;
use kiln_ir::{Kernel, Scalar};
use kiln_runtime::device::cpu::CpuRun;
use proptest::prelude::*;

/// Runs `k` on the interpreter, the scalar code and the vector code (plain and `-O`); all
/// must agree, errors included (kernel, work-item, message). Unlike `x86_common::three_ways`, buffers
/// are compared after an error too. Returns whether vector code exists.
fn three_ways(k: &Kernel, range: &NdRange, args: &[Arg], bufs: &[Buffer]) -> bool {
    let mut want = bufs.to_vec();
    let want_r = run(k, range, args, &mut want);
    let scalar = compile(k, &X86Options { scalar: true, ..X86Options::default() }).unwrap();
    assert!(!scalar.has_spmd());
    let mut has = false;
    for opts in [X86Options::default(), X86Options { optimize: true, ..X86Options::default() }] {
        let vector = compile(k, &opts).unwrap();
        has |= vector.has_spmd();
        for p in [&scalar, &vector] {
            let mut got = bufs.to_vec();
            let r = p.run(range, args, &mut got);
            // The whole error, for `-O` code too: its errors quote the source's expressions
            // (`kiln_passes::origin`), and where several loads of a work-item fail it names
            // the one the source reaches first.
            if want_r != r {
                panic!("interpreter: {want_r:?}\nprogram: {r:?}\n{k}\n{}", p.disassemble());
            }
            if let Err(m) = results_match(&want, &got) {
                panic!("{m}\n{k}\n{}", p.disassemble());
            }
        }
    }
    has
}

#[test]
fn chain_kernels_use_the_lanes_and_agree() {
    let src = include_str!("../benches/x86_chain.kir");
    let m = kiln_ir::parse_module(src).unwrap();
    let n = 1000;
    for k in &m.kernels {
        let bufs: Vec<Buffer> = (0..k.params().len()).map(|i| f32s(n, i as u32)).collect();
        let args: Vec<Arg> = k
            .params()
            .iter()
            .enumerate()
            .map(|(i, p)| if p.ty().is_ptr() { Arg::Buffer(i) } else { Arg::scalar(1.5f32) })
            .collect();
        // 1000 = 125 groups of 8: every group on the lanes.
        let has = three_ways(k, &NdRange::new(&[n as u32]).with_local(&[8]), &args, &bufs);
        assert_eq!(has, avx2(), "{k}");
        // Groups of 5 (not a multiple of 8): the scalar code.
        three_ways(k, &NdRange::new(&[n as u32]).with_local(&[5]), &args, &bufs);
        // A global size past the buffers: groups before the end on the lanes, the last one
        // on the scalar code, which reports the interpreter's out-of-bounds error.
        three_ways(k, &NdRange::new(&[1024]).with_local(&[64]), &args, &bufs);
    }
    if !avx2() {
        kiln_ir::testing::skip("no AVX2 on this CPU: only the scalar code ran");
    }
}

#[test]
fn aliasing_and_shared_rows_keep_the_interpreters_order() {
    // Rows of a 2-D range touch the same elements: each row adds to what the last wrote.
    let k = kernel(
        "kernel k(o: ptr<global, i32>, a: ptr<global, i32>, s: i32) {
           let i: u32 = global_id(0);
           let v: i32 = o[i] * s + a[i];
           o[i] = v - 1i32;
         }",
    );
    let o = Buffer::from_slice(&(0..64).map(|i| i * 1000 - 7).collect::<Vec<i32>>());
    let a = Buffer::from_slice(&(0..64).map(|i| i32::MAX - i).collect::<Vec<i32>>());
    let r = NdRange::new(&[64, 6]).with_local(&[16, 3]);
    assert_eq!(
        three_ways(&k, &r, &[Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(-3i32)], &[o.clone(), a]),
        avx2()
    );
    // `o` and `a` the same buffer.
    three_ways(&k, &r, &[Arg::Buffer(0), Arg::Buffer(0), Arg::scalar(3i32)], &[o]);
    // Uniform lets (hoisted out of the batch loop) and a uniform branch.
    let k = kernel(
        "kernel k(o: ptr<global, f32>, a: ptr<global, f32>, s: f32) {
           let u: f32 = s * 3.0 + 0.25;
           let i: u32 = global_id(0);
           let w: f32 = u / s;
           if s > 1.0 { o[i] = a[i] * w - u; } else { o[i] = a[i]; }
         }",
    );
    let r = NdRange::new(&[96]).with_local(&[32]);
    for s in [2.5f32, -1.0, f32::NAN, 0.0] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(s)];
        assert_eq!(three_ways(&k, &r, &args, &[f32s(96, 1), f32s(96, 2)]), avx2());
    }
    // A neighbour's element (a checked contiguous load), a loop and private arrays of
    // 64-bit values run on the lanes too.
    for body in [
        "o[i] = a[i + 1u32];",
        "for j: u32 in 0 .. 2 { o[i] = a[i]; }",
        "private p: u64[4]; p[1] = 2u64; o[i] = a[i] + (p[1] as i32);",
    ] {
        let k = kernel(&format!(
            "kernel k(o: ptr<global, i32>, a: ptr<global, i32>, s: i32) {{ let i: u32 = global_id(0); {body} }}"
        ));
        let bufs =
            [Buffer::from_slice(&[5i32; 96]), Buffer::from_slice(&(0..96).collect::<Vec<i32>>())];
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(1i32)];
        assert_eq!(three_ways(&k, &NdRange::new(&[96]).with_local(&[32]), &args, &bufs), avx2());
    }
}

#[test]
fn register_pressure_many_buffers_and_shadowed_lets() {
    let r = NdRange::new(&[96]).with_local(&[32]);
    // Twelve live `let`s: seven in registers, the rest in vector frame slots.
    let lets: String = (0..12)
        .map(|j| {
            let prev = if j == 0 { "a[i]".to_string() } else { format!("v{}", j - 1) };
            format!("let v{j}: f32 = {prev} * s + b[i];\n")
        })
        .collect();
    let sum = (0..12).map(|j| format!("v{j}")).collect::<Vec<_>>().join(" - ");
    let k = kernel(&format!(
        "kernel k(a: ptr<global, f32>, b: ptr<global, f32>, o: ptr<global, f32>, s: f32) {{
           let i: u32 = global_id(0);
           {lets}
           o[i] = {sum};
         }}"
    ));
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(0.75f32)];
    let bufs = [f32s(96, 1), f32s(96, 2), f32s(96, 3)];
    assert_eq!(three_ways(&k, &r, &args, &bufs), avx2());
    // A balanced expression tree of depth d needs d + 1 registers: 8 fit (all the
    // temporaries), 9 spill registers to the frame (`spill.rs`), still in the lanes.
    // (A distinct constant in every node, so that -O finds no common subexpression.)
    fn tree(d: u32, n: &mut u32) -> String {
        if d == 0 {
            return "a[i]".into();
        }
        let (x, y) = (tree(d - 1, n), tree(d - 1, n));
        *n += 1;
        format!("({x} - {y} * {}.5)", *n)
    }
    for (d, lanes) in [(6, true), (7, true), (8, true), (9, true)] {
        let k = kernel(&format!(
            "kernel k(a: ptr<global, f32>, b: ptr<global, f32>, o: ptr<global, f32>, s: f32) {{
               let i: u32 = global_id(0);
               o[i] = {};
             }}",
            tree(d, &mut 0)
        ));
        assert_eq!(three_ways(&k, &r, &args, &bufs), lanes && avx2(), "depth {d}");
    }
    // Eleven buffers: eight bases in registers, the others loaded per access.
    let params: String = (0..10).map(|j| format!("b{j}: ptr<global, i32>, ")).collect();
    let sum = (0..10).map(|j| format!("b{j}[i]")).collect::<Vec<_>>().join(" + ");
    let k = kernel(&format!(
        "kernel k({params}o: ptr<global, i32>) {{ let i: u32 = global_id(0); o[i] = {sum}; }}"
    ));
    let bufs: Vec<Buffer> = (0..11)
        .map(|j| {
            Buffer::from_slice(&(0..96).map(|i| i * 7919 + j * 1_000_003).collect::<Vec<i32>>())
        })
        .collect();
    let args: Vec<Arg> = (0..11).map(Arg::Buffer).collect();
    assert_eq!(three_ways(&k, &r, &args, &bufs), avx2());
    // A uniform `let` (computed before the loop) used under divergent branches, and one name
    // bound in two sibling blocks (names cannot be shadowed, but can be reused).
    let k = kernel(
        "kernel k(a: ptr<global, f32>, o: ptr<global, f32>, p: ptr<global, f32>, s: f32) {
           let i: u32 = global_id(0);
           let u: f32 = s * 2.0;
           if a[i] > 0.0 {
             let v: f32 = a[i] * 3.0;
             o[i] = v + u;
           } else {
             o[i] = u;
           }
           if a[i] < 1.0 { let w: f32 = a[i] + u; p[i] = w; } else { let w: f32 = u - 1.0; p[i] = w; }
         }",
    );
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(1.25f32)];
    let bufs = [f32s(96, 5), f32s(96, 6), f32s(96, 7)];
    assert_eq!(three_ways(&k, &r, &args, &bufs), avx2());
}

/// A random f32/i32/u32 expression over `a[i]`, `b[i]`, `s`, `i` and constants.
fn arb_value(t: &'static str, depth: u32) -> BoxedStrategy<String> {
    let leaf = match t {
        "f32" => prop_oneof![
            Just("a[i]".to_string()),
            Just("b[i]".to_string()),
            Just("s".to_string()),
            Just("(-0.0)".to_string()),
            (-1e6f32..1e6).prop_map(|v| format!("{v:?}")),
        ]
        .boxed(),
        _ => prop_oneof![
            Just("c[i]".to_string()),
            Just("i".to_string()).prop_map(move |_| if t == "u32" {
                "i".to_string()
            } else {
                "c[i]".to_string()
            }),
            (0u32..5000).prop_map(move |v| format!("{v}{t}")),
        ]
        .boxed(),
    };
    let leaf = if t == "u32" {
        prop_oneof![
            Just("d[i]".to_string()),
            Just("i".to_string()),
            (0u32..u32::MAX).prop_map(|v| format!("{v}u32"))
        ]
        .boxed()
    } else {
        leaf
    };
    if depth == 0 {
        return leaf;
    }
    let ops: &'static [&'static str] =
        if t == "f32" { &["+", "-", "*", "/"] } else { &["+", "-", "*"] };
    prop_oneof![
        1 => leaf,
        3 => (arb_value(t, depth - 1), prop::sample::select(ops), arb_value(t, depth - 1))
            .prop_map(|(a, op, b)| format!("({a} {op} {b})")),
    ]
    .boxed()
}

/// A random condition: comparisons of `t` values, sometimes negated or combined.
fn arb_cond(t: &'static str) -> BoxedStrategy<String> {
    let cmp = (
        arb_value(t, 1),
        prop::sample::select(vec!["==", "!=", "<", "<=", ">", ">="]),
        arb_value(t, 1),
    )
        .prop_map(|(a, op, b)| format!("({a} {op} {b})"));
    prop_oneof![
        3 => cmp.clone(),
        1 => cmp.clone().prop_map(|c| format!("!{c}")),
        1 => (cmp.clone(), prop::sample::select(vec!["&&", "||"]), cmp).prop_map(|(a, op, b)| format!("({a} {op} {b})")),
    ]
    .boxed()
}

fn floats() -> Vec<f32> {
    let special = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::MAX,
        f32::MIN_POSITIVE,
        1e-45,
        3.5,
        -2.25,
    ];
    (0..96)
        .map(|i| if i % 3 == 0 { special[i / 3 % special.len()] } else { (i as f32 - 40.0) * 0.71 })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("X86_SPMD_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(128),
        ..ProptestConfig::default()
    })]
    #[test]
    fn random_elementwise_kernels_agree(
        fv in arb_value("f32", 3),
        iv in arb_value("i32", 3),
        uv in arb_value("u32", 3),
        c1 in arb_cond("f32"),
        c2 in arb_cond("u32"),
        c3 in arb_cond("i32"),
        local in prop::sample::select(vec![8u32, 16, 32, 24, 12]),
        global in prop::sample::select(vec![96u32, 48, 192]),
    ) {
        let k = kernel(&format!(
            "kernel k(a: ptr<global, f32>, b: ptr<global, f32>, c: ptr<global, i32>, d: ptr<global, u32>,
                      s: f32, of: ptr<global, f32>, oi: ptr<global, i32>, ou: ptr<global, u32>) {{
               let i: u32 = global_id(0);
               let x: f32 = {fv};
               of[i] = x;
               if {c1} {{
                 oi[i] = {iv};
                 if {c2} {{ let y: u32 = {uv}; ou[i] = y; }} else {{ of[i] = x * 2.0; }}
               }} else if {c3} {{
                 ou[i] = 7u32;
               }}
             }}"
        ));
        let fl = floats();
        let bufs = [
            Buffer::from_slice(&fl),
            Buffer::from_slice(&fl.iter().rev().copied().collect::<Vec<f32>>()),
            Buffer::from_slice(&(0..96).map(|i: i32| i.wrapping_mul(0x3b9a_ca07) ^ (i << 29)).collect::<Vec<i32>>()),
            Buffer::from_slice(&(0..96).map(|i: u32| i.wrapping_mul(0x9e37_79b9)).collect::<Vec<u32>>()),
            Buffer::zeroed(Scalar::F32, 96),
            Buffer::zeroed(Scalar::I32, 96),
            Buffer::zeroed(Scalar::U32, 96),
        ];
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3), Arg::scalar(0.5f32),
                    Arg::Buffer(4), Arg::Buffer(5), Arg::Buffer(6)];
        // A global size of 192 runs past the 96-element buffers: the error path.
        let has = three_ways(&k, &NdRange::new(&[global]).with_local(&[local]), &args, &bufs);
        prop_assert_eq!(has, avx2());
    }
}

#[test]
fn lazy_scalar_code_under_threads() {
    // A fresh program whose scalar code is first needed by several threads at once: the
    // groups past the end of the short buffer fall back to it and report the interpreter's
    // error for the lowest failing group; every group before it has run.
    let k = kernel(
        "kernel k(a: ptr<global, f32>, o: ptr<global, f32>, s: f32) {
           let i: u32 = global_id(0);
           o[i] = a[i] * s - 1.0;
         }",
    );
    let range = NdRange::new(&[4096]).with_local(&[64]);
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(0.5f32)];
    for a_len in [4096, 3000, 64] {
        let bufs = vec![f32s(a_len, 1), f32s(4096, 2)];
        let mut want = bufs.clone();
        let want_r = run(&k, &range, &args, &mut want);
        for threads in [1, 2, 4] {
            let p = compile(&k, &X86Options::default()).unwrap();
            assert_eq!(p.has_spmd(), avx2());
            let mut got = bufs.clone();
            let r = p.run_parallel(&range, &args, &mut got, threads, &Default::default());
            assert_eq!(want_r, r, "{a_len} elements, {threads} threads");
            if want_r.is_ok() {
                results_match(&want, &got).unwrap();
            } else {
                // Groups before the failing one ran; in order, they match the interpreter's.
                let (w, g) = (want[1].to_vec::<f32>().unwrap(), got[1].to_vec::<f32>().unwrap());
                let done = a_len / 64 * 64;
                assert_eq!(w[..done], g[..done], "{a_len} elements, {threads} threads");
            }
        }
    }
}

/// A checked contiguous access tests only its bounds, not whether a lane has faulted (the
/// one fault-lane test left is the batch's end): a fault sets the whole-batch bounds to fail
/// for the rest of the call, so a store after a load that faulted in some lanes is masked to
/// the lanes before them, as the interpreter stops at the first faulting work-item (buffers
/// compared after the error too).
#[test]
fn checked_accesses_need_no_fault_lane_test() {
    let k = kernel(
        "kernel k(o: ptr<global, f32>, a: ptr<global, f32>, s: u32, t: u32) {
           let i: u32 = global_id(0);
           let v: f32 = a[i + t] * 2.0;
           o[i + s] = v + a[i + s];
         }",
    );
    if avx2() {
        let text = compile(&k, &X86Options::default()).unwrap().disassemble();
        let code = &text[text.find("; 8-lane AVX2 code").expect("8-lane code")..];
        let lane_tests = code
            .lines()
            .filter(|l| l.contains("cmp dword ptr [r15+") && l.trim_end().ends_with("],8"))
            .count();
        assert_eq!(lane_tests, 1, "{code}");
    }
    for (s, t) in [(0u32, 0u32), (8, 3), (0, 9), (3, 10), (8, 15), (9, 0), (0, u32::MAX)] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(s), Arg::scalar(t)];
        let bufs = [Buffer::zeroed(Scalar::F32, 40), f32s(40, 3)];
        assert_eq!(three_ways(&k, &NdRange::new(&[32]).with_local(&[16]), &args, &bufs), avx2());
    }
}

/// A store at per-lane indices (a scatter) runs its eight lanes' stores untested when every
/// lane is active, in lane order (colliding lanes: the last work-item wins), and tests each
/// lane under a mask.
#[test]
fn scatters_of_all_lanes_run_untested_in_lane_order() {
    let k = kernel(
        "kernel k(o: ptr<global, u32>, p: ptr<global, u32>, m: u32) {
           let i: u32 = global_id(0);
           o[i / 3u32] = i * 5u32;
           if i % m != 0u32 { p[(i * 7u32) % 13u32] = i; }
         }",
    );
    if avx2() {
        let text = compile(&k, &X86Options::default()).unwrap().disassemble();
        let code: Vec<&str> = text[text.find("; 8-lane AVX2 code").expect("8-lane code")..]
            .lines()
            .map(|l| l.trim().split_once("  ").map_or(l.trim(), |(_, i)| i.trim()))
            .collect();
        // A lane's store followed directly by the next lane's index: no test between (the
        // lanes stored straight from the registers, `vextractps`, or through frame slots).
        let store = |i: &str| {
            i.starts_with("vextractps [") || (i.starts_with("mov [") && i.ends_with(",r11d"))
        };
        let index = |i: &str| i.starts_with("vpextrd r10d,") || i.starts_with("movsxd r10,");
        let untested = code.windows(2).any(|w| store(w[0]) && index(w[1]));
        assert!(untested, "{}", code.join("\n"));
    }
    for m in [1u32, 2, 3, 8, 1000] {
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(m)];
        let bufs = [Buffer::zeroed(Scalar::U32, 16), Buffer::zeroed(Scalar::U32, 13)];
        assert_eq!(three_ways(&k, &NdRange::new(&[48]).with_local(&[16]), &args, &bufs), avx2());
    }
}

/// The addresses of the batch loop's instructions (from its top to its back edge) in the
/// 8-lane code's listing, with the instructions.
fn batch_loop(text: &str) -> Vec<(u64, String)> {
    let lines: Vec<(u64, String)> = text[text.find("; 8-lane AVX2 code").expect("8-lane")..]
        .lines()
        .filter_map(|l| {
            let (a, i) = l.trim().split_once("  ")?;
            Some((u64::from_str_radix(a, 16).ok()?, i.trim().to_string()))
        })
        .collect();
    let at = lines
        .windows(2)
        .position(|w| w[0].1.starts_with("cmp rbx,[r15+") && w[1].1.starts_with("jb "))
        .expect("the batch loop's back edge");
    let top = u64::from_str_radix(lines[at + 1].1[3..].trim().trim_end_matches('h'), 16).unwrap();
    let end = lines[at + 1].0;
    lines.into_iter().filter(|l| l.0 >= top && l.0 <= end).collect()
}

/// Comparisons of values fixed for the call in `if`/`while` conditions (a 2-D kernel's
/// `y < h`, `y > 0`, float and signed parameters) are computed once per call, before the
/// batch loop, which loads their masks: the loop compares only the divergent operands.
/// Rows inside and outside every bound and NaN agree; a name declared twice (an earlier
/// block's `y`) is not hoisted, so its comparison means that block's `y`.
#[test]
fn call_invariant_comparisons_are_computed_once_per_call() {
    let k = kernel(
        "kernel k(o: ptr<global, f32>, w: u32, h: u32, s: f32, t: i32) {
           let x: u32 = global_id(0);
           let y: u32 = global_id(1);
           if x < w && y < h && (y > 0u32 || s < 0.5) && !(t == y as i32) {
             o[y * 16u32 + x] = s + 1.0;
           }
         }",
    );
    if avx2() {
        let text = compile(&k, &X86Options::default()).unwrap().disassemble();
        let body = batch_loop(&text);
        let count = |p: &str| body.iter().filter(|l| l.1.starts_with(p)).count();
        // `x < w` alone is compared in the loop (the other two `vpcmpgtd`s are the store's
        // bounds checks); `y < h`, `y > 0`, `s < 0.5` and `t == y` are loaded.
        assert_eq!(count("vpcmpgtd"), 3, "{text}");
        assert_eq!(count("vcmp"), 0, "{text}");
        assert_eq!(count("vpcmpeqd"), 0, "{text}");
    }
    let twice = kernel(
        "kernel k(o: ptr<global, f32>, w: u32, h: u32, s: f32, t: i32) {
           let x: u32 = global_id(0);
           if x > 5u32 { let y: u32 = 3u32; if x < 12u32 && w > y { o[x] = 3.0; } }
           let y: u32 = global_id(1);
           if x < w && y < h { o[y * 16u32 + x] = s + 1.0 + t as f32; }
         }",
    );
    for (w, h, s, t) in
        [(16u32, 8u32, 0.25f32, 2i32), (9, 3, 0.75, -1), (16, 0, f32::NAN, 0), (3, 8, 1.0, 5)]
    {
        let args = [Arg::Buffer(0), Arg::scalar(w), Arg::scalar(h), Arg::scalar(s), Arg::scalar(t)];
        let r = NdRange::new(&[16, 8]).with_local(&[16, 1]);
        for k in [&k, &twice] {
            let bufs = [Buffer::zeroed(Scalar::F32, 16 * 8)];
            assert_eq!(three_ways(k, &r, &args, &bufs), avx2());
        }
    }
}
