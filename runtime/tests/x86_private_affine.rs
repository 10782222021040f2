//! Per-work-item small matrices on the 8-lane code: private array elements at constant
//! indices as rows of the vector frame (backends/src/x86/spmd/private.rs) and short loops'
//! induction variables read as affine values of their counters
//! (backends/src/x86/spmd/ivs.rs). The interpreter, the scalar code and the 8-lane code
//! (plain and `-O`, whose strength reduction makes the induction variables) agree bit for
//! bit, faults included: an index past the end inside the loops, odd sizes, partial
//! batches, divergent control around the private stores, and variables that must not be
//! rewritten (read after the increment, assigned twice, read after the loop).
#![cfg(target_arch = "x86_64")]

mod x86_common;

use x86_common::{agree, avx2, f32s, kernel, vector_listing};

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::Scalar;

fn mat4() -> kiln_ir::Kernel {
    let m = kiln_ir::parse_module(include_str!("../benches/cpu_suite_fourth.kir")).unwrap();
    m.kernels.iter().find(|k| k.name() == "mat4").expect("mat4").clone()
}

/// Runs a kernel `k(a, b, c, n)` of f32 buffers at sizes that leave partial batches, with
/// `a` (read at `16 * i + e`) and `c` long enough, one element short, and `b` short.
fn cases(k: &kiln_ir::Kernel, what: &str) {
    for (n, global) in [(1u32, 8usize), (13, 16), (37, 40), (64, 64)] {
        let full = 16 * n as usize;
        for (alen, blen, clen) in
            [(full, 16, full), (full - 1, 16, full), (full, 15, full), (full, 16, full - 3)]
        {
            let r = NdRange::new(&[global as u32]).with_local(&[8]);
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n)];
            let bufs = [f32s(alen, 2), f32s(blen, 5), Buffer::zeroed(Scalar::F32, clen)];
            agree(k, &r, &args, &bufs, &format!("{what}\nn {n}, a {alen}, b {blen}, c {clen}"));
        }
    }
}

/// The fourth held-out set's `mat4`, and its `-O` form's listing: the private matrix's
/// elements are frame rows in the loops' copies.
#[test]
fn mat4_agrees() {
    let k = mat4();
    cases(&k, "mat4");
    if avx2() {
        let o = kiln_passes::pipeline::optimize(&k);
        let lines = vector_listing(&o);
        let text = lines.join("\n");
        // (The ordinary loops kept for a budget running out still gather and store per
        // lane.) The copies: `m[0]` stored whole, and `m[15]`, read in the last copy.
        assert!(lines.iter().any(|l| l == "vmovups [r15+220h],ymm0"), "{text}");
        assert!(lines.iter().any(|l| l == "vmovups ymm0,[r15+400h]"), "{text}");
    }
}

/// Induction variables written by hand, as `-O` writes them and otherwise: per-lane and
/// uniform starts, steps that wrap, signed counters from below zero, the variable read
/// after the loop, and forms that must be left alone (the variable read after its
/// increment, assigned twice, assigned in a nested block, declared again in the body).
#[test]
fn induction_variables_agree() {
    let bodies = [
        // mat4's `-O` form.
        "private m: f32[16];
         for e: u32 in 0 .. 16 { m[e] = a[(i << 4) + e]; }
         var r0: u32 = 0; var r1: u32 = i << 4;
         for r: u32 in 0 .. 4 {
           for col: u32 in 0 .. 4 {
             var acc: f32 = 0.0; var e0: u32 = col;
             for e: u32 in 0 .. 4 { acc = acc + m[r0 + e] * b[e0]; e0 = e0 + 4; }
             c[r1 + col] = acc;
           }
           r0 = r0 + 4; r1 = r1 + 4;
         }",
        // A step that wraps (adding 2^32 - 3 is subtracting 3), the variable after the loop.
        "private m: f32[16]; var v: u32 = 15u32;
         for e: u32 in 0 .. 5 { m[v] = a[16u32 * i + e]; v = v + 4294967293u32; }
         c[16u32 * i] = m[15] + m[12] + m[3]; c[16u32 * i + 1u32] = v as f32;",
        // A signed counter from below zero, an i32 variable.
        "private m: f32[8]; var v: i32 = 7i32;
         for e: i32 in -2i32 .. 5i32 { m[v] = b[(e + 2i32) as u32]; v = v + -1i32; }
         var s: f32 = 0.0; for e: u32 in 0 .. 8 { s = s * 0.5 + m[e]; } c[16u32 * i] = s;",
        // Read after the increment (left alone: still the loop's values).
        "private m: f32[17]; var v: u32 = 0u32;
         for e: u32 in 0 .. 4 { m[v] = a[16u32 * i + e]; v = v + 4u32; m[v] = 1.0; }
         c[16u32 * i] = m[4] + m[8] + m[16] + m[0];",
        // Assigned twice, and in a nested block (left alone).
        "private m: f32[16]; var v: u32 = 1u32; var w: u32 = 2u32;
         for e: u32 in 0 .. 4 {
           m[v] = a[16u32 * i + e]; m[w] = m[w] + 1.0; v = v + 2u32; v = v + 1u32;
           if a[16u32 * i] > 0.0 { w = w + 3u32; }
         }
         c[16u32 * i] = m[1] + m[4] + m[7] + m[10] + m[2] + m[5];",
        // Also assigned under a branch before the increment (left alone).
        "private m: f32[16]; var v: u32 = 0u32;
         for e: u32 in 0 .. 4 { if a[16u32 * i + e] > 0.0 { v = v + 1u32; } m[v] = m[v] + 2.0; v = v + 2u32; }
         var s: f32 = 0.0; for e: u32 in 0 .. 16 { s = s * 0.75 + m[e]; } c[16u32 * i] = s;",
        // A start from the work-item's own data is not stable (a load): left alone.
        "c[16u32 * i] = a[16u32 * i] + 3.0; var v: u32 = (c[16u32 * i] as u32) & 7u32;
         for e: u32 in 0 .. 4 { c[16u32 * i + e] = b[v] + 5.0; v = v + 1u32; }",
        // A start from a variable the loop assigns (left alone).
        "private m: f32[16]; var u: u32 = 1u32; var v: u32 = u * 2u32;
         for e: u32 in 0 .. 4 { m[v] = a[16u32 * i + e]; u = u + 1u32; v = v + 3u32; }
         var s: f32 = 0.0; for e: u32 in 0 .. 16 { s = s * 0.75 + m[e]; } c[16u32 * i] = s;",
        // A variable dead after its loop (it and its increment go), under divergent control.
        "var w: u32 = 3u32; private m: f32[16];
         if a[16u32 * i] > 0.0 { var v: u32 = 1u32; for e: u32 in 0 .. 4 { m[v] = a[16u32 * i + e]; v = v + 3u32; } w = 5u32; }
         c[16u32 * i] = m[1] + m[4] + m[7] + m[10] + (w as f32);",
        // A private index that runs past the array in the last copies (a fault in the loop).
        "private m: f32[10]; var v: u32 = 0u32;
         for e: u32 in 0 .. 4 { m[v] = a[16u32 * i + e]; v = v + 3u32; }
         c[16u32 * i] = m[9];",
        // Divergent control around constant-index private stores and loads, 64-bit rows.
        "private m: f32[4]; private d: f64[4];
         for e: u32 in 0 .. 4 {
           if a[16u32 * i + e] > 0.0 { m[e] = a[16u32 * i + e]; d[e] = (a[16u32 * i + e] as f64) * 0.5; }
           else { m[3u32 - e] = -1.0; }
         }
         c[16u32 * i] = m[0] + m[1] * 2.0 + m[2] * 3.0 + m[3] * 4.0;
         c[16u32 * i + 1u32] = (d[0] + d[1] + d[2] + d[3]) as f32;",
        // A constant index past the end: the lowest active lane's fault.
        "private m: f32[4]; if a[16u32 * i] > 1.0 { m[4] = 1.0; } c[16u32 * i] = m[0];",
        "private m: f32[4]; var s: f32 = 0.0; if a[16u32 * i] > 1.0 { s = m[5]; } c[16u32 * i] = s;",
    ];
    for body in bodies {
        let k = kernel(&format!(
            "kernel k(a: ptr<global, f32>, b: ptr<global, f32>, c: ptr<global, f32>, n: u32) {{
               let i: u32 = global_id(0);
               if i < n {{ {body} }}
             }}"
        ));
        cases(&k, body);
    }
}
