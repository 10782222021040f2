//! The x86 JIT's 8-lane code for the whole scalar IR on 32-bit values — `min`/`max` with
//! the interpreter's NaN and signed-zero rules, `abs`, `sqrt`, `fma`, `floor`/`ceil`/
//! `trunc`, `select`, negation, `bool` values as lane masks, every cast between f32, i32,
//! u32 and bool (saturating, NaN to 0, u32 to f32 correctly rounded), integer `/` and `%`
//! with per-lane divisors (zero divisors, i32::MIN / -1), `for` loops with bounds per
//! lane, private arrays and atomics — against its scalar code and the interpreter, bits
//! and errors compared: hand cases over edge values, random kernels using every one of
//! these operations, and the kernels of issue 24's table that must now get vector code
//! (so that a fall back to the scalar code fails here).
//!
//! `X86_SPMD_OPS_CASES=N` raises the number of random kernels (default 96).
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{avx2, fallback, kernel, three_ways};

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{Kernel, Scalar};
use kiln_runtime::device::cpu::CpuRun;
use proptest::prelude::*;

/// Interpreter, scalar code and vector code (plain and `-O`) agree, errors word for word,
/// buffers after success.
fn agree(k: &Kernel, range: &NdRange, args: &[Arg], bufs: &[Buffer]) -> bool {
    three_ways(k, range, args, bufs)
}

/// f32 edge values: NaNs (quiet, signalling, negative), infinities, signed zeros,
/// denormals, values at and around 2^31 and 2^32 (saturating casts), halves.
fn edge_floats() -> Vec<f32> {
    let mut v = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        1.5,
        -2.5,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7fa0_0001),
        f32::from_bits(0xffc0_1234),
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        f32::MIN,
        f32::MIN_POSITIVE,
        1e-45,
        -1e-45,
        2147483648.0,
        2147483520.0,
        -2147483648.0,
        -2147483904.0,
        4294967296.0,
        4294967040.0,
        16777217.0,
        3.75,
        -7.25,
        1e10,
        -1e10,
        0.99999994,
        100.0,
    ];
    // 64 elements: the edges, then their neighbours in another order.
    let more: Vec<f32> = v.iter().rev().map(|x| x * 0.5 + 1.0).collect();
    v.extend(more);
    v
}

fn edge_i32() -> Vec<i32> {
    let base = [0, 1, -1, 2, -2, 7, -7, i32::MIN, i32::MAX, i32::MIN + 1, 3, -3, 1000, -1000];
    (0..64).map(|i| base[(i * 3) % base.len()]).collect()
}

fn edge_u32() -> Vec<u32> {
    let base = [0, 1, 2, 3, 7, u32::MAX, u32::MAX - 1, 0x8000_0000, 0x7fff_ffff, 16777217, 1000, 5];
    (0..64).map(|i| base[(i * 5) % base.len()]).collect()
}

/// The buffers of the hand and random kernels: a, b (f32), c, e (i32), d, g (u32), and the
/// outputs of (f32), oi (i32), ou (u32).
fn bufs() -> Vec<Buffer> {
    let f = edge_floats();
    let i = edge_i32();
    let u = edge_u32();
    vec![
        Buffer::from_slice(&f),
        // Rotated by one: different NaNs meet in a lane (which NaN an operation keeps).
        Buffer::from_slice(&f.iter().cycle().skip(1).take(64).copied().collect::<Vec<f32>>()),
        Buffer::from_slice(&i),
        Buffer::from_slice(&i.iter().rev().copied().collect::<Vec<i32>>()),
        Buffer::from_slice(&u),
        Buffer::from_slice(&u.iter().rev().copied().collect::<Vec<u32>>()),
        Buffer::zeroed(Scalar::F32, 64),
        Buffer::zeroed(Scalar::I32, 64),
        Buffer::zeroed(Scalar::U32, 64),
    ]
}

const PARAMS: &str = "a: ptr<global, f32>, b: ptr<global, f32>, c: ptr<global, i32>, \
     e: ptr<global, i32>, d: ptr<global, u32>, g: ptr<global, u32>, of: ptr<global, f32>, \
     oi: ptr<global, i32>, ou: ptr<global, u32>, s: f32, n: i32, m: u32, flag: bool";

fn args(s: f32, n: i32, m: u32, flag: bool) -> Vec<Arg> {
    let mut v: Vec<Arg> = (0..9).map(Arg::Buffer).collect();
    v.extend([Arg::scalar(s), Arg::scalar(n), Arg::scalar(m), Arg::scalar(flag)]);
    v
}

/// A kernel over [`PARAMS`] with `body` after `let i: u32 = global_id(0);`.
fn ops_kernel(body: &str) -> Kernel {
    kernel(&format!("kernel k({PARAMS}) {{ let i: u32 = global_id(0); {body} }}"))
}

fn run_cases(body: &str) {
    let k = ops_kernel(body);
    assert_eq!(fallback(&k), None, "{k}");
    for local in [8u32, 16, 64] {
        for (s, n, m, flag) in [(0.5f32, 3i32, 7u32, true), (f32::NAN, -1, 0, false)] {
            let r = NdRange::new(&[64]).with_local(&[local]);
            assert_eq!(agree(&k, &r, &args(s, n, m, flag), &bufs()), avx2(), "{k}");
        }
    }
}

#[test]
fn min_max_abs_sqrt_fma_and_rounding_give_the_interpreters_bits() {
    run_cases(
        "of[i] = min(a[i], b[i]);
         oi[i] = max(c[i], e[i]) - min(c[i], n);
         ou[i] = max(d[i], g[i]) ^ min(d[i], m);",
    );
    run_cases("of[i] = max(a[i], b[i]) + max(s, a[i]) * min(b[i], s);");
    run_cases("of[i] = max(min(a[i], -0.0), 0.0); oi[i] = abs(c[i]); ou[i] = abs(d[i]);");
    run_cases("of[i] = abs(a[i]); ou[i] = (abs(b[i]) as u32);");
    run_cases("of[i] = sqrt(a[i]) - sqrt(b[i] * s);");
    run_cases("of[i] = fma(a[i], b[i], s); oi[i] = (fma(b[i], s, a[i]) as i32);");
    run_cases("of[i] = fma(a[i], a[i], b[i]) - fma(s, b[i], a[i]);");
    run_cases("of[i] = floor(a[i]) + ceil(b[i]) * trunc(a[i] * 0.75);");
}

#[test]
fn fma_is_one_rounding_and_never_contracted() {
    // 0.1 * 10 - 1 differs with one rounding and with two: fma gives the first, a * b + c
    // the second.
    let k = ops_kernel("of[i] = fma(a[i], s, b[i]) - (a[i] * s + b[i]);");
    let mut b = bufs();
    b[0] = Buffer::from_slice(&[0.1f32; 64]);
    b[1] = Buffer::from_slice(&[-1.0f32; 64]);
    let r = NdRange::new(&[64]).with_local(&[64]);
    assert_eq!(agree(&k, &r, &args(10.0, 0, 0, true), &b), avx2());
    assert_eq!(fallback(&k), None);
}

#[test]
fn casts_saturate_and_round_as_the_interpreter() {
    run_cases("oi[i] = (a[i] as i32); ou[i] = (b[i] as u32); of[i] = (c[i] as f32);");
    run_cases(
        "of[i] = (d[i] as f32) - (g[i] as f32); oi[i] = (d[i] as i32); ou[i] = (c[i] as u32);",
    );
    run_cases("oi[i] = ((a[i] * 3.0e9) as i32); ou[i] = ((b[i] * -5.0e9) as u32);");
    run_cases(
        "let z: bool = (a[i] as bool);
         let y: bool = (c[i] as bool) && !(d[i] as bool);
         of[i] = (z as f32) + (y as f32); oi[i] = (z as i32) - (flag as i32); ou[i] = (y as u32);",
    );
    run_cases("of[i] = (i as f32) * s; ou[i] = (((i as f32) * 1.5) as u32);");
}

#[test]
fn select_negation_and_bool_values_run_on_the_lanes() {
    run_cases(
        "let p: bool = a[i] < b[i];
         var q: bool = c[i] > n;
         if d[i] > 5u32 { q = !q; }
         of[i] = select(p, a[i], -b[i]);
         oi[i] = q ? -c[i] : ~e[i];
         ou[i] = (p == q) ? d[i] : select(p != flag, g[i], m);",
    );
    run_cases(
        "let u: bool = s > 0.25;
         if u { of[i] = a[i]; } else { of[i] = b[i]; }
         oi[i] = ((u ^ (c[i] < 0i32)) && flag) ? 1i32 : 2i32;",
    );
}

#[test]
fn integer_division_per_lane_reports_the_interpreters_error() {
    // No zero divisor: e is never 0 where the mask holds; i32::MIN / -1 wraps.
    run_cases(
        "if e[i] != 0i32 { oi[i] = c[i] / e[i]; ou[i] = (c[i] % e[i]) as u32; }
         if g[i] != 0u32 { ou[i] = d[i] / g[i] + d[i] % g[i]; }",
    );
    // Zero divisors in some lanes: the lowest active one is reported.
    for body in [
        "oi[i] = c[i] / e[i];",
        "ou[i] = d[i] % g[i];",
        "if c[i] < 0i32 { oi[i] = n % c[i] + e[i] / (c[i] + 1i32); }",
        "oi[i] = (a[i] as i32) % (b[i] as i32);",
        // Both operands fault in one lane, the right one needing more registers: the left
        // one's error is the interpreter's.
        "oi[i] = c[i] / e[i] + c[i] / (e[i] / (c[i] - n));",
        "ou[i] = (d[g[i] & 127u32] << 1u32) >> (d[i] / (g[i] / (d[i] | 1u32)));",
    ] {
        let k = ops_kernel(body);
        assert_eq!(fallback(&k), None, "{k}");
        for local in [8u32, 32] {
            let r = NdRange::new(&[64]).with_local(&[local]);
            agree(&k, &r, &args(1.0, -1, 0, true), &bufs());
        }
    }
    // Edge quotients: every pair of edge values.
    let k = ops_kernel("oi[i] = c[i] / e[i & 7u32 | 8u32]; ou[i] = d[i] / g[(i & 3u32) + 1u32];");
    let r = NdRange::new(&[64]).with_local(&[64]);
    assert_eq!(agree(&k, &r, &args(1.0, 1, 1, true), &bufs()), avx2());
}

#[test]
fn for_loops_with_bounds_per_lane_agree() {
    for body in [
        "var acc: f32 = 0.0;
         for j: u32 in (i & 7u32) .. (d[i] & 15u32) step (g[i] & 3u32) + 1u32 { acc = acc + (j as f32); }
         of[i] = acc;",
        // Counters that would wrap past the type's end stop, as the interpreter's never wrap.
        "for j: u32 in d[i] .. 4294967295u32 step 2147483648u32 { ou[i] = ou[i] + 1u32; }
         for j: i32 in c[i] .. 2147483647i32 step 1073741824i32 { oi[i] = oi[i] + 1i32; }",
        // Under a divergent branch, the counter indexing a buffer (out of bounds at the end).
        "if c[i] > 0i32 { for j: u32 in 0u32 .. (i & 3u32) + m { of[i] = of[i] + a[j + i]; } }",
        // A step that is not positive in some lanes: the lowest active one is reported.
        "for j: i32 in c[i] .. n step (e[i] & 3i32) { oi[i] = oi[i] + j; }",
        "if (i & 1u32) == 1u32 { for j: u32 in 0u32 .. 5u32 step (d[i] & 1u32) { ou[i] = j; } }",
    ] {
        run_cases(body);
    }
}

#[test]
fn private_arrays_are_per_lane() {
    for body in [
        // Each lane its own array, zeroed at the declaration, indexed per lane (out of
        // bounds for some lanes: the lowest is reported).
        "private p: f32[8];
         p[i & 7u32] = a[i];
         p[(i + 3u32) & 7u32] = p[(i + 3u32) & 7u32] + b[i];
         of[i] = p[i & 7u32] + p[(i + 3u32) & 7u32] + p[1];",
        "private q: i32[4];
         for j: u32 in 0u32 .. 4u32 { q[j] = c[i] * (j as i32); }
         var s2: i32 = 0i32;
         for j: u32 in 0u32 .. (d[i] & 3u32) + 1u32 { s2 = s2 + q[j]; }
         oi[i] = s2;",
        "private r: u32[3];
         if c[i] > 0i32 { r[d[i] & 3u32] = d[i]; }
         ou[i] = r[g[i] & 1u32] + r[2];",
        // Declared in a loop: zeroed on every iteration.
        "for j: u32 in 0u32 .. 3u32 {
           private t: u32[2];
           t[j & 1u32] = t[j & 1u32] + j + 1u32;
           ou[i] = ou[i] + t[0] * 10u32 + t[1];
         }",
    ] {
        run_cases(body);
    }
}

#[test]
fn images_keep_private_arrays_and_the_fma_feature() {
    let k = ops_kernel(
        "private p: f32[4];
         p[d[i] & 3u32] = fma(a[i], b[i], s);
         of[i] = p[g[i] & 3u32] + p[0];",
    );
    let p = compile(&k, &X86Options::default()).unwrap();
    if !avx2() {
        kiln_ir::testing::skip("no AVX2 on this CPU: no vector code to store");
        return;
    }
    assert!(p.has_spmd(), "{}", p.disassemble());
    assert_eq!(p.required_features(), ["avx2", "fma"]);
    let q = kiln_backends::x86::X86Program::from_image(p.kernel(), &p.to_image().unwrap()).unwrap();
    assert_eq!(q.required_features(), p.required_features());
    let r = NdRange::new(&[64]).with_local(&[16]);
    let a = args(0.5, 0, 0, true);
    let mut want = bufs();
    let want_r = kiln_ir::interp::run(&k, &r, &a, &mut want);
    let mut got = bufs();
    let before = kiln_runtime::device::cpu::lane_groups_on_this_thread();
    assert_eq!(q.run(&r, &a, &mut got), want_r);
    // Every group on the lanes (a private array's length fits their checks).
    assert_eq!(kiln_runtime::device::cpu::lane_groups_on_this_thread() - before, 4);
    kiln_ir::testing::results_match(&want, &got).unwrap();
    // Without fma, no feature beyond AVX2.
    let k = ops_kernel("private p: f32[4]; p[1] = a[i]; of[i] = p[1] * s;");
    assert_eq!(compile(&k, &X86Options::default()).unwrap().required_features(), ["avx2"]);
}

/// The kinds of kernels of issue 24's table that fell back to the scalar code for `max`,
/// `sqrt`/`abs`/`select`, a cast and atomics: all must have 8-lane code now. (The files
/// are the ones `kiln run --device cpu --threads 1 --time` measured before and after.)
#[test]
fn the_issues_kernels_get_vector_code() {
    let files = [
        include_str!("../benches/x86_lanes/maxchain.kir"),
        include_str!("../benches/x86_lanes/casts.kir"),
        include_str!("../benches/x86_lanes/price.kir"),
        include_str!("../benches/x86_lanes/mandel.kir"),
        include_str!("../benches/x86_lanes/hist.kir"),
    ];
    // Row softmax's running maximum.
    let rowmax = "kernel rowmax(x: ptr<global, f32>, o: ptr<global, f32>, w: u32) {
           let r: u32 = global_id(0);
           var mx: f32 = 0.0 - inf;
           for j: u32 in 0u32 .. w { mx = max(mx, x[r * w + j]); }
           o[r] = mx;
         }";
    for src in files.into_iter().chain([rowmax]) {
        let k = kernel(src);
        assert_eq!(fallback(&k), None, "{k}");
    }
}

#[test]
fn atomics_in_lane_order_agree() {
    let r = NdRange::new(&[64]).with_local(&[16]);
    let hist = kernel(
        "kernel hist(x: ptr<global, u32>, h: ptr<global, u32>, old: ptr<global, u32>, f: ptr<global, f32>, n: u32) {
           local lh: u32[8];
           let i: u32 = global_id(0);
           if i < n { atomic_add(lh, x[i] & 7u32, 1u32); }
           barrier(local);
           if local_id(0) < 8u32 { atomic_add(h, local_id(0), lh[local_id(0)]); }
         }",
    );
    let x: Vec<u32> = (0..64u32).map(|i| i.wrapping_mul(0x9e37_79b9) >> 7).collect();
    let b = [
        Buffer::from_slice(&x),
        Buffer::zeroed(Scalar::U32, 8),
        Buffer::zeroed(Scalar::U32, 64),
        Buffer::zeroed(Scalar::F32, 4),
    ];
    for n in [64u32, 50] {
        let a = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3), Arg::scalar(n)];
        assert_eq!(agree(&hist, &r, &a, &b), avx2());
    }
    if avx2() {
        // A batch whose eight lanes are active runs them back to back: no test of a lane's
        // mask between one lane's `add` and the next lane's index.
        let code = compile(&hist, &X86Options::default()).unwrap().disassemble();
        let lines: Vec<&str> = code.lines().collect();
        // (a lane's index read from its slot, or from a register: `vmovd`/`vpextrd`)
        let index = |l: &str| l.contains("movsxd r10,") || l.contains("r10d,xmm");
        let back_to_back = lines.windows(4).any(|w| {
            index(w[0]) && w[2].contains("r10*4],r11d") && w[2].contains(" add ") && index(w[3])
        });
        assert!(back_to_back, "lanes tested one by one in full batches:\n{code}");
    }
    // One atomic per work-item with its result used (a ticket), f32 adds in work-item
    // order, compare-and-swap, min/max/and/or/xor, and an index out of bounds.
    for (body, vector) in [
        ("let t: u32 = atomic_add(h, 0u32, 1u32); old[i] = t;", true),
        ("atomic_add(f, i & 3u32, (x[i] as f32) * 0.1);", true),
        ("let t: u32 = atomic_cmpxchg(h, i & 7u32, 0u32, i + 1u32); old[i] = t;", true),
        ("let t: u32 = atomic_xchg(h, x[i] & 7u32, i); old[i] = t;", true),
        ("atomic_max(h, i & 7u32, x[i]); atomic_max(h, (i + 1u32) & 7u32, x[i] >> 3u32);", true),
        ("atomic_min(h, x[i] & 7u32, x[i]);", true),
        ("atomic_xor(h, x[i] & 7u32, x[i]); atomic_xor(h, 1u32, i);", true),
        ("if (x[i] & 1u32) == 0u32 { atomic_or(h, i & 7u32, x[i]); }", true),
        ("atomic_and(h, i & 7u32, x[i]);", true),
        ("atomic_sub(h, x[i] & 15u32, 1u32);", true),
        // Both results used on one buffer: the batch order would show; scalar code.
        ("let t: u32 = atomic_add(h, 0u32, 1u32); let u: u32 = atomic_add(h, 0u32, 1u32); old[i] = t + u;", false),
        ("for j: u32 in 0u32 .. n { let t: u32 = atomic_add(h, 0u32, 1u32); old[i] = t; }", false),
    ] {
        let k = kernel(&format!(
            "kernel k(x: ptr<global, u32>, h: ptr<global, u32>, old: ptr<global, u32>, f: ptr<global, f32>, n: u32) {{
               let i: u32 = global_id(0);
               {body}
             }}"
        ));
        for n in [3u32, 64] {
            let a = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3), Arg::scalar(n)];
            assert_eq!(agree(&k, &r, &a, &b), vector && avx2(), "{k}");
        }
        assert_eq!(fallback(&k).is_none(), vector || !avx2(), "{k}");
    }
}

/// Atomics whose order would show on both a buffer and a local array: the listing's reason
/// for the scalar code names the buffers on every compile (it once named whichever memory a
/// hash map listed first, so `kiln emit --target x86` printed one or the other).
#[test]
fn the_scalar_codes_reason_for_ordered_atomics_is_the_same_every_time() {
    if !avx2() {
        return kiln_ir::testing::skip("no AVX2 on this CPU: no 8-lane code to fall back from");
    }
    let k = kernel(
        "kernel k(f: ptr<global, f32>, n: u32) #reqd_work_group_size(64, 1, 1) {
           local acc: f32[4];
           let i: u32 = global_id(0);
           for j: u32 in 0u32 .. n {
             atomic_add(acc, (i + j) & 3u32, 1.5);
             atomic_add(f, (i + j) & 3u32, 0.5);
           }
         }",
    );
    for _ in 0..16 {
        let why = fallback(&k).expect("float atomics whose order shows run on the scalar code");
        assert!(why.contains("atomics on buffer parameters"), "{why}");
    }
}

/// Atomics at a contiguous index (`local_id(0)` or `global_id(0)` plus a uniform value)
/// whose results are unused: a batch whose lanes are all active and in bounds does them as
/// one vector read-modify-write (local arrays always, buffers when one thread runs the
/// launch); partial batches, lanes out of bounds and every kind of operation agree with the
/// interpreter.
#[test]
fn contiguous_atomics_are_one_vector_read_modify_write() {
    for (op, ty, vpop) in [
        ("add", "u32", "vpaddd"),
        ("sub", "i32", "vpsubd"),
        ("and", "u32", "vpand"),
        ("or", "u32", "vpor"),
        ("xor", "i32", "vpxor"),
        ("min", "i32", "vpminsd"),
        ("min", "u32", "vpminud"),
        ("max", "i32", "vpmaxsd"),
        ("max", "u32", "vpmaxud"),
    ] {
        let k = kernel(&format!(
            "kernel k(x: ptr<global, {ty}>, h: ptr<global, {ty}>, n: u32, off: u32) {{
               local lh: {ty}[32];
               let l: u32 = local_id(0);
               lh[l] = x[global_id(0)];
               barrier(local);
               if global_id(0) < n {{ atomic_{op}(lh, l, x[global_id(0)] >> 1{ty}); }}
               barrier(local);
               atomic_{op}(h, l + off, lh[l]);
               atomic_{op}(h, global_id(0), x[global_id(0)]);
             }}"
        ));
        let x: Vec<u32> = (0..64u32).map(|i| i.wrapping_mul(0x9e37_79b9) ^ (i << 3)).collect();
        let buf = |v: &[u32]| match ty {
            "i32" => Buffer::from_slice(&v.iter().map(|&u| u as i32).collect::<Vec<_>>()),
            _ => Buffer::from_slice(v),
        };
        let b = [buf(&x), buf(&x[..64])];
        let r = NdRange::new(&[64]).with_local(&[32]);
        // All lanes active; a partial batch (n); `h` at l + off: in bounds, and out of
        // bounds from the last lane of the last batch.
        for (n, off) in [(64u32, 0u32), (37, 0), (64, 32), (64, 33)] {
            let a = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n), Arg::scalar(off)];
            assert_eq!(agree(&k, &r, &a, &b), avx2(), "{k}");
        }
        if !avx2() {
            continue;
        }
        let code = compile(&k, &X86Options::default()).unwrap().disassemble();
        // Each of the three: the eight elements loaded at lane 0's index, the operation
        // with the lanes' values, stored back.
        let lines: Vec<&str> = code.lines().collect();
        let rmw = lines
            .windows(3)
            .filter(|w| {
                w[0].contains("vmovdqu ymm0,")
                    && w[1].contains(&format!("{vpop} ymm0,ymm0,"))
                    && w[2].contains("vmovdqu ")
                    && w[2].contains(",ymm0")
            })
            .count();
        // (The first is there twice: in the masked and the unmasked copy of its `if`.)
        assert!(rmw >= 3, "{op} {ty}: not three vector read-modify-writes:\n{code}");
    }
}

/// A random value of type `t` using every operation the lanes now have.
fn arb(t: &'static str, depth: u32) -> BoxedStrategy<String> {
    let leaf: BoxedStrategy<String> = match t {
        "f32" => prop::sample::select(vec![
            "a[i]", "b[i]", "s", "(-0.0)", "0.0", "inf", "(-inf)", "nan", "1.5", "(-2.5)", "3.0e9",
        ])
        .prop_map(String::from)
        .boxed(),
        "i32" => prop::sample::select(vec![
            "c[i]",
            "e[i]",
            "n",
            "0i32",
            "(-1i32)",
            "(-2147483648i32)",
            "7i32",
            "(-3i32)",
        ])
        .prop_map(String::from)
        .boxed(),
        "u32" => prop::sample::select(vec![
            "d[i]",
            "g[i]",
            "m",
            "i",
            "0u32",
            "4294967295u32",
            "2147483648u32",
            "3u32",
        ])
        .prop_map(String::from)
        .boxed(),
        _ => prop::sample::select(vec!["flag", "true", "false", "(a[i] < b[i])", "(c[i] != n)"])
            .prop_map(String::from)
            .boxed(),
    };
    if depth == 0 {
        return leaf;
    }
    let sub = |u: &'static str| arb(u, depth - 1);
    let cast_from = |u: &'static str| sub(u).prop_map(move |x| format!("({x} as {})", "T"));
    let cast = prop_oneof![cast_from("f32"), cast_from("i32"), cast_from("u32"), cast_from("bool")]
        .prop_map(move |x| x.replace("as T", &format!("as {t}")));
    let select =
        (sub("bool"), sub(t), sub(t)).prop_map(|(c, x, y)| format!("select({c}, {x}, {y})"));
    match t {
        "bool" => prop_oneof![
            1 => leaf,
            2 => (sub("f32"), prop::sample::select(vec!["<", "<=", "==", "!=", ">", ">="]), sub("f32"))
                .prop_map(|(x, o, y)| format!("({x} {o} {y})")),
            1 => (sub("i32"), prop::sample::select(vec!["<", "==", ">="]), sub("i32"))
                .prop_map(|(x, o, y)| format!("({x} {o} {y})")),
            1 => (sub("u32"), prop::sample::select(vec!["<", "!=", ">"]), sub("u32"))
                .prop_map(|(x, o, y)| format!("({x} {o} {y})")),
            1 => (sub("bool"), prop::sample::select(vec!["&&", "||", "==", "!=", "^"]), sub("bool"))
                .prop_map(|(x, o, y)| format!("({x} {o} {y})")),
            1 => sub("bool").prop_map(|x| format!("!{x}")),
            1 => cast,
            1 => select,
        ]
        .boxed(),
        "f32" => prop_oneof![
            1 => leaf,
            2 => (sub(t), prop::sample::select(vec!["+", "-", "*", "/"]), sub(t))
                .prop_map(|(x, o, y)| format!("({x} {o} {y})")),
            2 => (prop::sample::select(vec!["min", "max"]), sub(t), sub(t))
                .prop_map(|(f, x, y)| format!("{f}({x}, {y})")),
            2 => (prop::sample::select(vec!["abs", "sqrt", "floor", "ceil", "trunc", "-"]), sub(t))
                .prop_map(|(f, x)| format!("{f}({x})")),
            1 => (sub(t), sub(t), sub(t)).prop_map(|(x, y, z)| format!("fma({x}, {y}, {z})")),
            2 => cast,
            1 => select,
        ]
        .boxed(),
        _ => prop_oneof![
            1 => leaf,
            2 => (sub(t), prop::sample::select(vec!["+", "-", "*", "&", "|", "^", "<<", ">>", "/", "%"]), sub(t))
                .prop_map(|(x, o, y)| format!("({x} {o} {y})")),
            1 => (prop::sample::select(vec!["min", "max"]), sub(t), sub(t))
                .prop_map(|(f, x, y)| format!("{f}({x}, {y})")),
            1 => (prop::sample::select(vec!["abs", "-", "~"]), sub(t)).prop_map(|(f, x)| format!("{f}({x})")),
            2 => cast,
            1 => select,
        ]
        .boxed(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("X86_SPMD_OPS_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(96),
        ..ProptestConfig::default()
    })]
    #[test]
    fn random_kernels_with_every_lane_operation_agree(
        fv in arb("f32", 2),
        iv in arb("i32", 2),
        uv in arb("u32", 2),
        bv in arb("bool", 2),
        local in prop::sample::select(vec![8u32, 16, 64]),
        s in prop::sample::select(vec![0.5f32, -0.0, f32::NAN, 3.0e9]),
        n in prop::sample::select(vec![0i32, -1, 5]),
        m in prop::sample::select(vec![0u32, 3, u32::MAX]),
    ) {
        // Also a private array and a `for` with bounds per lane.
        let k = ops_kernel(&format!(
            "let p: bool = {bv};
             private pa: f32[4];
             pa[d[i] & 3u32] = {fv};
             for j: u32 in (d[i] & 3u32) .. (g[i] & 7u32) {{ pa[j & 3u32] = pa[j & 3u32] + 0.5; }}
             of[i] = pa[g[i] & 3u32] + pa[0];
             if p {{ oi[i] = {iv}; }} else {{ ou[i] = {uv}; }}"
        ));
        // (Deep ones too: registers spill to the frame, `x86_spmd_deep.rs`.)
        prop_assert_eq!(fallback(&k), None, "{}", k);
        let has = agree(&k, &NdRange::new(&[64]).with_local(&[local]), &args(s, n, m, true), &bufs());
        prop_assert_eq!(has, avx2(), "{}", k);
    }
}
