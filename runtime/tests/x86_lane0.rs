//! The lane-0 audit (issue 24): 8-lane code that reads lane 0 of a value it holds
//! batch-uniform (a uniform load's index, a uniform `u32` division in a general-purpose
//! register, a uniform branch, a uniform `for`'s bounds) must find the value there even
//! when lane 0 is masked off. Each kernel here computes such a value under a divergent `if`
//! whose batches have lane 0 inactive, and runs three ways (interpreter, scalar code,
//! 8-lane code), comparing buffers and errors.

mod x86_common;

use x86_common::{avx2, kernel, three_ways};

use kiln_ir::launch::{Arg, Buffer, NdRange};

/// `if (i & 7) != 0`: lane 0 of every batch is off.
const LANE0_OFF: &str = "(i & 7u32) != 0u32";

/// A 64-bit `/` or `%` of batch-uniform operands by a divisor that may be zero divided
/// the active lanes alone, leaving the dividend in the others: under a mask with lane 0
/// off, uniform code then read the dividend (a wrong element, or one out of bounds, read
/// unchecked). Every reader of lane 0: a uniform load's index, a contiguous access's base,
/// a `u32` division in a GPR, a uniform `for`'s bound, a uniform branch.
#[test]
fn a_uniform_64_bit_division_under_a_mask_reaches_lane_0_readers() {
    let uses = [
        "o[i] = t[q];",
        "o[i] = t[local_id(0) + q];",
        "o[i] = q / 3u32 + q % 3u32;",
        "var s: u32 = 0u32; for j: u32 in 0u32..q { s = s + t[j]; } o[i] = s;",
        "if q == 4u32 { o[i] = 5u32; } else { o[i] = 9u32; }",
    ];
    // (The 64-bit types had the bug; the others divide every lane and are here as the
    // audit's record.)
    for ty in ["i64", "u64", "i32", "u32", "i16", "u16", "i8", "u8"] {
        for op in ["/", "%"] {
            for body in uses {
                let k = kernel(&format!(
                    "kernel k(o: ptr<global, u32>, t: ptr<global, u32>, x: {ty}, y: {ty}) {{
                       let i: u32 = global_id(0);
                       if {LANE0_OFF} {{ let q: u32 = (x {op} y) as u32; {body} }}
                     }}"
                ));
                // 40 / 9 = 4 and 40 % 9 = 4; lane 0 held 40 (t has 48 elements).
                let t: Vec<u32> = (0..48).map(|v| v * 3 + 1).collect();
                let bufs = [Buffer::zeroed(kiln_ir::Scalar::U32, 16), Buffer::from_slice(&t)];
                let sc = kiln_ir::Scalar::from_name(ty).unwrap();
                let s = |v: i128| Arg::Scalar(kiln_ir::Imm::int(sc, v));
                let args = [Arg::Buffer(0), Arg::Buffer(1), s(40), s(9)];
                let vector = three_ways(&k, &NdRange::new(&[16]).with_local(&[8]), &args, &bufs);
                assert_eq!(vector, avx2(), "{k}");
            }
        }
    }
}

/// Runs `k` on the interpreter and on the 8-lane code with a loop limit (a batch whose
/// lanes all stopped must not loop on forever): the same error.
fn same_error(k: &kiln_ir::Kernel, range: &NdRange, args: &[Arg], bufs: &[Buffer]) {
    use kiln_backends::x86::{compile, X86Options};
    use kiln_runtime::device::cpu::{CpuRun, CpuRunOptions};
    let want = kiln_ir::interp::run(k, range, args, &mut bufs.to_vec()).unwrap_err();
    let opts = CpuRunOptions { max_loop_iterations: Some(100_000), ..CpuRunOptions::default() };
    for scalar in [true, false] {
        let p = compile(k, &X86Options { scalar, ..X86Options::default() }).unwrap();
        assert_eq!(p.has_spmd(), !scalar && avx2(), "{k}");
        let got = p.run_with(range, args, &mut bufs.to_vec(), &opts).unwrap_err();
        assert_eq!(got, want, "scalar: {scalar}\n{k}");
    }
}

#[test]
fn a_batch_whose_lanes_all_faulted_leaves_a_uniform_loop() {
    let k = kernel(
        "kernel k(o: ptr<global, u32>, t: ptr<global, u32>, n: u32) {
           let i: u32 = global_id(0);
           o[i + n] = 1u32;
           var c: u32 = 0u32;
           while t[c] != 7u32 { c = c + 1u32; }
           o[i] = c;
         }",
    );
    let t: Vec<u32> = vec![1, 2, 3, 7, 5, 6, 7, 8];
    let bufs = [Buffer::zeroed(kiln_ir::Scalar::U32, 16), Buffer::from_slice(&t)];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(100u32)];
    same_error(&k, &NdRange::new(&[16]).with_local(&[8]), &args, &bufs);
}

/// The `var` analysis (`spmd/uniform.rs`) held a `var` set from a narrow or 64-bit load at
/// a uniform index batch-uniform, where the code generator (which fills such loads in the
/// active lanes alone) does not: the kernel had no 8-lane code at all ("internal: `v` is
/// not uniform"). Now such a `var` is per lane, on the lanes, with the interpreter's bits.
#[test]
fn a_var_set_from_a_narrow_or_64_bit_uniform_load_runs_on_the_lanes() {
    for t in ["i8", "u8", "i16", "u16", "f16", "i64", "u64", "f64", "u32", "f32"] {
        let k = kernel(&format!(
            "kernel k(c: ptr<global, {t}>, o: ptr<global, u32>) {{
               let i: u32 = global_id(0);
               var v: u32 = c[1] as u32;
               for j: u32 in 0u32..v {{ o[i] = o[i] + j; }}
               v = v * 3u32 + c[0] as u32;
               if {LANE0_OFF} {{ o[i] = o[i] * 100u32 + v; }}
             }}"
        ));
        let s = kiln_ir::Scalar::from_name(t).unwrap();
        let c = if s.is_float() {
            [kiln_ir::Imm::float(s, 2.0), kiln_ir::Imm::float(s, 5.0)]
        } else {
            [kiln_ir::Imm::int(s, 2), kiln_ir::Imm::int(s, 5)]
        };
        let bufs = [Buffer::from_imms(s, &c).unwrap(), Buffer::zeroed(kiln_ir::Scalar::U32, 16)];
        let args = [Arg::Buffer(0), Arg::Buffer(1)];
        let vector = three_ways(&k, &NdRange::new(&[16]).with_local(&[8]), &args, &bufs);
        assert_eq!(vector, avx2(), "{t}: {:?}", x86_common::fallback(&k));
    }
}

/// A condition on narrow or 64-bit loads at uniform indices was held batch-uniform by the
/// same analysis, so a branch on it tested lane 0 of its mask; under a mask with lane 0 off
/// that lane had not been loaded (0), and every lane took the wrong side.
#[test]
fn a_branch_on_a_narrow_or_64_bit_uniform_load_under_a_mask() {
    // (f16 is a storage type: no comparisons.)
    for t in ["i8", "u8", "i16", "u16", "i64", "u64", "f64", "u32", "f32"] {
        let k = kernel(&format!(
            "kernel k(c: ptr<global, {t}>, o: ptr<global, u32>) {{
               let i: u32 = global_id(0);
               if {LANE0_OFF} {{
                 if c[1] > c[0] {{ o[i] = 1u32; }} else {{ o[i] = 2u32; }}
                 var n: u32 = 0u32;
                 while c[2] > c[n & 1u32] && n < 3u32 {{ n = n + 1u32; }}
                 o[i] = o[i] + n * 10u32;
               }}
             }}"
        ));
        let s = kiln_ir::Scalar::from_name(t).unwrap();
        let c = if s.is_float() {
            [kiln_ir::Imm::float(s, 2.0), kiln_ir::Imm::float(s, 5.0), kiln_ir::Imm::float(s, 9.0)]
        } else {
            [kiln_ir::Imm::int(s, 2), kiln_ir::Imm::int(s, 5), kiln_ir::Imm::int(s, 9)]
        };
        let bufs = [Buffer::from_imms(s, &c).unwrap(), Buffer::zeroed(kiln_ir::Scalar::U32, 16)];
        let args = [Arg::Buffer(0), Arg::Buffer(1)];
        let vector = three_ways(&k, &NdRange::new(&[16]).with_local(&[8]), &args, &bufs);
        assert_eq!(vector, avx2(), "{t}: {:?}", x86_common::fallback(&k));
    }
}
