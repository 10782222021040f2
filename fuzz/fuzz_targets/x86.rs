//! x86 JIT: a random kernel from the shared `kiln_ir::testing` generator (every feature,
//! barriers and local memory included) is compiled to x86-64, unoptimized and with `-O`,
//! each with the AVX2 lanes where the kernel qualifies and scalar only, run in this process
//! and compared with the interpreter. The same bytes also pick a kernel of the 8-lane
//! class (loops, divergent branches, gathers, scatters, a local array and a barrier, with
//! indices that may be out of bounds, one of the lane operations beyond `+ - *`, a `for`
//! with bounds per lane, `exp`/`log`/`sin`/`cos` and an expression needing more than the eight
//! YMM temporaries), compared the same way, errors included. A crash
//! here is a host crash the backend promised never to cause.
#![no_main]

use kiln_backends::x86::{compile, X86Options};
use kiln_runtime::device::cpu::{CpuRun, CpuRunOptions};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::{case_from_bytes, results_match, GenConfig};
use kiln_ir::Scalar;
use libfuzzer_sys::fuzz_target;

/// A kernel of the 8-lane class chosen by `data`, run every way and compared with the
/// interpreter (buffers when it succeeds, the error word for word when it fails).
fn lanes_case(data: &[u8]) {
    let byte = |i: usize| data.get(i).copied().unwrap_or(0) as usize;
    const INDEX: [&str; 11] = [
        "i", "(i + 1u32)", "(i - 2u32)", "x", "(x & 31u32)", "ix[i]", "ix[i & 15u32]",
        "(i * 3u32)", "n", "(ix[x & 63u32] + 2u32)", "(i + n)",
    ];
    let ix = |k: usize| INDEX[byte(k) % INDEX.len()];
    // Operations of the lanes beyond + - *: min/max, abs/sqrt/fma/rounding, select, casts
    // (saturating), integer division by divisors that may be 0 or -1, 8/16-bit integers, a
    // `for` per lane, vector loads, an expression deeper than the registers.
    const OPS: [&str; 11] = [
        "acc + a[i & 63u32]",
        "max(acc, a[x & 63u32]) - min(acc, 0.5)",
        "select(acc > 1.0, sqrt(abs(acc)), fma(acc, 0.5, (x as f32)))",
        "acc + ((((x as i32) % (((x & 3u32) as i32) - 1i32)) as f32))",
        "acc + (((acc * 1.0e9) as u32) as f32) - trunc(acc) + (((acc * -3.0e9) as i32) as f32)",
        "floor(acc * 0.5) + ((x >> 3u32) as f32) * ceil(-0.25)",
        "acc + ((x / ((x & 7u32) + 1u32 - (i & 1u32))) as f32)",
        "select((x as bool) != (acc < 0.0), -acc, acc * 2.0)",
        // 8/16-bit integers in 32-bit lanes: wrapping, shifts, saturating casts.
        "acc + ((((x as u8) * 37u8 + (x as u8)) >> 3u8) as f32) - (((acc * 100.0) as i16) as f32)",
        // A vector load: misaligned where `n` and `i` are odd, its last lane past `a`'s end
        // where `x & 15` is 15.
        "acc + extract(vload4(a, (x & 15u32) * 4u32 + (i & n & 1u32)), 3) * 0.5",
        // Deeper than the eight temporaries: every operand a load that may fault, each
        // level's left one computed first (registers spilled to the frame).
        "acc * a[x + 1u32] + a[x + 2u32] * (a[x + 3u32] - a[x + 4u32] * (a[x + 5u32] \
         + a[x + 6u32] * (a[x + 7u32] - a[x + 8u32] * (a[x + 9u32] + a[x + 10u32] \
         * (a[x + 11u32] - a[x + 12u32] * a[x + 13u32])))))",
    ];
    let op = OPS[byte(11) % OPS.len()];
    let cond = if byte(4) % 2 == 0 { "t < n" } else { "t < (x & 3u32) + n" };
    // `exp`, `log`, `sin`, `cos` have lane code of their own (or none: the parentheses).
    let math = ["", "exp", "log", "sin", "cos"][byte(12) % 5];
    let src = format!(
        "kernel k(o: ptr<global, f32>, a: ptr<global, f32>, ix: ptr<global, u32>, n: u32) {{
           local sh: f32[64];
           let i: u32 = global_id(0);
           let l: u32 = local_id(0);
           var x: u32 = i ^ 5u32;
           x = ix[{}];
           var acc: f32 = a[{}];
           sh[l] = acc;
           barrier(local);
           acc = acc + sh[(l + {}u32) & (local_size(0) - 1u32)];
           acc = {op};
           for k: u32 in (x & 3u32) .. (i & 7u32) {{ acc = acc + (k as f32) * 0.5; }}
           acc = {math}(acc * 0.5);
           for j: u32 in 0u32 .. {}u32 {{
             var t: u32 = 0u32;
             while {cond} && t < 4u32 {{
               if (x & 1u32) == 0u32 {{ acc = acc + a[{}]; }} else {{ x = (x >> 1u32) + 7u32; }}
               t = t + 1u32;
             }}
             x = x * 5u32 + j;
           }}
           if acc > 0.0 {{ o[{}] = acc; }}
         }}",
        ix(0),
        ix(1),
        byte(5) % 9,
        byte(6) % 5,
        ix(2),
        ix(3)
    );
    let kernel = kiln_ir::parse_module(&src).expect("the template parses").kernels[0].clone();
    let n = [0u32, 3, 40, 63, 64, 1000][byte(7) % 6];
    let local = [8u32, 16, 32, 64][byte(8) % 4];
    let range = NdRange::new(&[64]).with_local(&[local]);
    let ixs: Vec<u32> = (0..64u32).map(|i| (i * 29 + byte(9) as u32) % 70).collect();
    let a: Vec<f32> = (0..64u32).map(|i| ((i * 7 + byte(10) as u32) % 23) as f32 * 0.37 - 3.0).collect();
    let bufs = [Buffer::zeroed(Scalar::F32, 64), Buffer::from_slice(&a), Buffer::from_slice(&ixs)];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(n)];
    let mut want = bufs.to_vec();
    let want_r = kiln_ir::interp::run(&kernel, &range, &args, &mut want);
    for (optimize, scalar) in [(false, false), (true, false), (false, true)] {
        let p = compile(&kernel, &X86Options { optimize, scalar, ..X86Options::default() })
            .unwrap_or_else(|e| panic!("{e}\n{kernel}"));
        let mut got = bufs.to_vec();
        let r = p.run(&range, &args, &mut got);
        assert_eq!(want_r, r, "\n{kernel}\n{}", p.disassemble());
        if want_r.is_ok() {
            if let Err(e) = results_match(&want, &got) {
                panic!("{e}\n{kernel}\n{}", p.disassemble());
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    lanes_case(data);
    let case = case_from_bytes(data, &GenConfig { approx_intrinsics: true, ..GenConfig::default() });
    let want = case.run().expect("generated kernels run");
    for (optimize, scalar) in [(false, false), (true, false), (false, true), (true, true)] {
        let p = compile(&case.kernel, &X86Options { optimize, scalar, ..X86Options::default() })
            .unwrap_or_else(|e| panic!("{e}\n{}", case.kernel));
        let mut got = case.buffers.clone();
        let opts = CpuRunOptions { max_loop_iterations: Some(10_000_000), ..CpuRunOptions::default() };
        p.run_with(&case.range, &case.args, &mut got, &opts)
            .unwrap_or_else(|e| panic!("x86: {e}\n{}\n{}", case.kernel, p.disassemble()));
        if let Err(e) = results_match(&want, &got) {
            panic!("{e}\n{}\n{}", case.kernel, p.disassemble());
        }
    }
});
