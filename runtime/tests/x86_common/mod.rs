//! Shared helpers of the x86 JIT's tests: parsing, the AVX2 check, the three-way comparison
//! (interpreter, scalar code, 8-lane code) and deterministic input data.
#![allow(dead_code)]

use kiln_backends::x86::{compile, X86Options};
use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::results_match;
use kiln_ir::{Imm, Kernel, Scalar};
use kiln_runtime::device::cpu::CpuRun;

/// The first kernel of a source text.
pub fn kernel(src: &str) -> Kernel {
    kiln_ir::parse_module(src).unwrap_or_else(|e| panic!("{e:?}\n{src}")).kernels[0].clone()
}

/// Whether this CPU runs the 8-lane code.
pub fn avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// Runs `k` on the interpreter, the scalar code and the vector code (plain and `-O`);
/// results and errors (kernel, work-item, message) must be the same. Buffers are compared
/// only when the interpreter succeeds (after an error they are unspecified: lanes after the
/// faulting one may have stored). Returns whether the kernel has vector code.
pub fn three_ways(k: &Kernel, range: &NdRange, args: &[Arg], bufs: &[Buffer]) -> bool {
    let mut want = bufs.to_vec();
    let want_r = run(k, range, args, &mut want);
    let scalar = compile(k, &X86Options { scalar: true, ..X86Options::default() }).unwrap();
    assert!(!scalar.has_spmd());
    let mut has = false;
    // (Also with the code compiled for every group size: a kernel with barriers that fixes
    // no size runs on a program compiled for the launch's otherwise.)
    let general = X86Options { general_groups: true, ..X86Options::default() };
    for opts in
        [X86Options::default(), X86Options { optimize: true, ..X86Options::default() }, general]
    {
        let vector = compile(k, &opts).unwrap();
        has |= vector.has_spmd();
        for p in [&scalar, &vector] {
            let mut got = bufs.to_vec();
            let r = p.run(range, args, &mut got);
            assert_eq!(want_r, r, "\n{k}\n{}", p.disassemble());
            if want_r.is_ok() {
                if let Err(m) = results_match(&want, &got) {
                    panic!("{m}\n{k}\n{}", p.disassemble());
                }
            }
        }
    }
    has
}

/// `n` f32 values between -3 and 5.1, varied by `seed`.
pub fn f32s(n: usize, seed: u32) -> Buffer {
    Buffer::from_slice(
        &(0..n as u32).map(|i| ((i * 7 + seed) % 23) as f32 * 0.37 - 3.0).collect::<Vec<_>>(),
    )
}

/// Why `k` has no 8-lane code (plain and `-O`), `None` if it has (or without AVX2).
pub fn fallback(k: &Kernel) -> Option<String> {
    if !avx2() {
        return None;
    }
    for optimize in [false, true] {
        let p = compile(k, &X86Options { optimize, ..X86Options::default() }).unwrap();
        if !p.has_spmd() {
            let d = p.disassemble();
            let why = d.lines().find(|l| l.starts_with("; no 8-lane")).unwrap_or("?");
            return Some(format!("{why} (optimize: {optimize})"));
        }
    }
    None
}

/// The lines of the vector code's listing (after its header line), without addresses.
pub fn vector_listing(k: &Kernel) -> Vec<String> {
    let p = compile(k, &X86Options::default()).unwrap();
    assert!(p.has_spmd(), "{}", p.disassemble());
    let text = p.disassemble();
    let start =
        text.find("; 8-lane AVX2 code").unwrap_or_else(|| panic!("no 8-lane code:\n{text}"));
    text[start..]
        .lines()
        .map(|l| l.trim().split_once("  ").map_or(l.trim(), |(_, ins)| ins.trim()).to_string())
        .collect()
}

/// `len` elements of `ty`: small distinct values, none zero (divisors).
pub fn vals(ty: Scalar, len: usize, seed: u32) -> Buffer {
    let mut b = Buffer::zeroed(ty, len);
    for i in 0..len {
        let v = (i as u32 * 7 + seed) % 29 + 1;
        let x = if ty.is_float() {
            Imm::float(ty, f64::from(v) * 0.5 - 3.25)
        } else if ty.is_signed() {
            Imm::int(ty, if v == 15 { 17 } else { i128::from(v) - 15 })
        } else {
            Imm::int(ty, i128::from(v))
        };
        b.set(i, x).expect("an element of the buffer's type");
    }
    b
}

/// Runs `k` three ways, requiring 8-lane code where AVX2 is there.
pub fn agree(k: &Kernel, r: &NdRange, args: &[Arg], bufs: &[Buffer], what: &str) {
    assert_eq!(three_ways(k, r, args, bufs), avx2(), "{what}\n{k}");
}

/// Requires the kernel's default program to have region-loop code and a program of its own
/// for group size `l` (where AVX2 is there): otherwise the tests prove nothing of
/// `for_group`.
pub fn expect_fixed(k: &Kernel, l: u32) {
    if avx2() {
        let p = compile(k, &X86Options::default()).unwrap();
        assert!(p.has_region_code(), "{k}\n{}", p.disassemble());
        assert!(p.for_group([l, 1, 1]).is_some(), "{k}");
    }
}

/// The held-out suite's scan (Hillis–Steele, two barriers a step) at group size `l`.
pub fn scan(l: u32) -> Kernel {
    kernel(&format!(
        "kernel scan(x: ptr<global, u32>, y: ptr<global, u32>, n: u32) #reqd_work_group_size({l}, 1, 1) {{
           local t: u32[{l}];
           let lid: u32 = local_id(0);
           let i: u32 = global_id(0);
           if i < n {{ t[lid] = x[i]; }} else {{ t[lid] = 0u32; }}
           barrier(local);
           var off: u32 = 1u32;
           while off < local_size(0) {{
             var v: u32 = t[lid];
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
