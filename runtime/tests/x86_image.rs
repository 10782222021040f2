//! Programs loaded from their images (`X86Program::from_image`) run as the programs they
//! were written from: the same buffers and the same errors, on the scalar code, the 8-lane
//! code, barrier rounds and fault sites. (What an image holds is tested in the backend.)

use kiln_backends::x86::{compile, cpu_has, X86Options, X86Program};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_runtime::device::cpu::CpuRun;

fn program(src: &str) -> X86Program {
    let m = kiln_ir::parse_module(src).unwrap();
    compile(&m.kernels[0], &X86Options::default()).unwrap()
}

const SRC: &str = "kernel k(x: ptr<global, i32>, d: i32) {
    let i: u32 = global_id(0); x[i] = x[i] / d + x[i + 1]; }";

#[test]
fn round_trip_runs_and_reports_like_the_original() {
    let vector = "kernel v(x: ptr<global, i32>, d: i32) {
        let i: u32 = global_id(0); x[i] = x[i] * d + 1; }";
    assert_eq!(program(vector).has_spmd(), cpu_has("avx2"));
    for src in [SRC, vector] {
        let p = program(src);
        let image = p.to_image().unwrap();
        let q = X86Program::from_image(p.kernel(), &image).unwrap();
        // Whole batches (the vector code where there is one), a ragged range (the
        // scalar code), a division by zero, an access out of bounds.
        for (d, n, len) in [(3i32, 16u32, 17usize), (3, 13, 14), (0, 8, 9), (2, 9, 9)] {
            let args = [Arg::Buffer(0), Arg::scalar(d)];
            let init: Vec<i32> = (0..len as i32).map(|v| v * 5 - 7).collect();
            let (mut a, mut b) = (vec![Buffer::from_slice(&init)], vec![Buffer::from_slice(&init)]);
            let ra = p.run(&NdRange::new(&[n]), &args, &mut a).map_err(|e| e.to_string());
            let rb = q.run(&NdRange::new(&[n]), &args, &mut b).map_err(|e| e.to_string());
            assert_eq!(ra, rb, "{src}");
            assert_eq!(a[0].to_vec::<i32>(), b[0].to_vec::<i32>());
        }
    }
}

#[test]
fn vector_code_with_barriers_local_arrays_and_checked_accesses_round_trips() {
    // A barrier, a local array, a gathered load that can fault (its site is in the
    // image) and a uniform division.
    let src = "kernel r(x: ptr<global, f32>, ix: ptr<global, u32>, d: u32) {
        local t: f32[16];
        let l: u32 = local_id(0);
        t[l] = x[ix[global_id(0)]];
        barrier(local);
        x[global_id(0)] = t[(l + 16u32 / d) & 15u32]; }";
    let p = program(src);
    assert_eq!(p.has_spmd(), cpu_has("avx2"));
    let image = p.to_image().unwrap();
    let q = X86Program::from_image(p.kernel(), &image).unwrap();
    assert_eq!(q.has_spmd(), p.has_spmd());
    for (bad, d) in [(None, 3u32), (Some(37usize), 3), (None, 0)] {
        let mut ix: Vec<u32> = (0..64u32).map(|i| (i * 13) % 64).collect();
        if let Some(at) = bad {
            ix[at] = 64;
        }
        let init: Vec<f32> = (0..64).map(|v| v as f32 * 0.5 - 3.0).collect();
        let bufs = vec![Buffer::from_slice(&init), Buffer::from_slice(&ix)];
        let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(d)];
        let range = NdRange::new(&[64]).with_local(&[16]);
        let mut want = bufs.clone();
        let rw = kiln_ir::interp::run(p.kernel(), &range, &args, &mut want);
        for prog in [&p, &q] {
            let mut got = bufs.clone();
            let r = prog.run(&range, &args, &mut got);
            assert_eq!(r, rw);
            if rw.is_ok() {
                assert_eq!(got[0].to_vec::<f32>(), want[0].to_vec::<f32>());
            }
        }
    }
}

/// A kernel with region-loop code that fixes no group size carries its text in its image,
/// so the loaded program is compiled for a launch's group size as the original is
/// (`X86Program::for_group`), with the same results and errors; where the text would lose a
/// fault site's name (a division by a value that may be zero) it carries none and runs the
/// general code. An image whose text is not the signature's kernel is refused.
#[test]
fn images_carry_the_text_a_group_size_is_compiled_from() {
    if !cpu_has("avx2") {
        return kiln_ir::testing::skip("region loops need AVX2, which this CPU lacks");
    }
    let reduce = "kernel r(x: ptr<global, f32>, o: ptr<global, f32>, d: u32) {
        local t: f32[32];
        let l: u32 = local_id(0);
        t[l] = x[global_id(0)];
        var s: u32 = local_size(0) / 2u32;
        while s > 0u32 {
          barrier(local);
          if l < s { t[l] = t[l] + t[l + s]; }
          s = s / 2u32;
        }
        barrier(local);
        if l == 0u32 { o[group_id(0)] = t[0] + (d as f32); }
      }";
    let named = reduce.replace("(d as f32)", "((32u32 / (d + l)) as f32)");
    // (Optimized: `-O` names the division after the source's text, see
    // `kiln_passes::origin`; unoptimized, the kernel's text is its own and comes along.)
    let optimized = |src: &str| {
        let m = kiln_ir::parse_module(src).unwrap();
        compile(&m.kernels[0], &X86Options { optimize: true, ..X86Options::default() }).unwrap()
    };
    let plain = program(&named);
    let loaded = X86Program::from_image(plain.kernel(), &plain.to_image().unwrap()).unwrap();
    assert!(loaded.for_group([16, 1, 1]).is_some());
    for (src, text) in [(reduce.to_string(), true), (named, false)] {
        let p = optimized(&src);
        assert!(p.for_group([16, 1, 1]).is_some(), "{src}");
        let image = p.to_image().unwrap();
        let q = X86Program::from_image(p.kernel(), &image).unwrap();
        assert_eq!(q.for_group([16, 1, 1]).is_some(), text, "{src}");
        let x: Vec<f32> = (0..64).map(|i| (i % 13) as f32 * 0.5 - 2.0).collect();
        for (d, local) in [(3u32, 16u32), (0, 16), (5, 32), (1, 8)] {
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(d)];
            let bufs = vec![Buffer::from_slice(&x), Buffer::zeroed(kiln_ir::Scalar::F32, 8)];
            let r = NdRange::new(&[64]).with_local(&[local]);
            let (mut a, mut b, mut c) = (bufs.clone(), bufs.clone(), bufs.clone());
            let ra = p.run(&r, &args, &mut a).map_err(|e| e.to_string());
            let rb = q.run(&r, &args, &mut b).map_err(|e| e.to_string());
            let rc = kiln_ir::interp::run(p.kernel(), &r, &args, &mut c).map_err(|e| e.to_string());
            assert_eq!(ra, rb, "{src} d={d} local={local}");
            assert_eq!(ra.is_ok(), rc.is_ok(), "{src} d={d} local={local}: {ra:?} {rc:?}");
            assert_eq!(a, b, "{src} d={d} local={local}");
            if rc.is_ok() {
                assert_eq!(a, c, "{src} d={d} local={local}");
            }
        }
    }
    // A signature keeps no `#nd_range` (a fused kernel's binary is loaded for its
    // signature): the text's kernel with one loads for it, and specializes.
    let ranged =
        reduce.replacen(") {", ") #nd_range(global = [64], local = [16], offset = [0]) {", 1);
    let p = optimized(&ranged);
    let sig = kiln_ir::parse_module(reduce).unwrap();
    let q = X86Program::from_image(&sig.kernels[0], &p.to_image().unwrap()).unwrap();
    assert!(q.for_group([16, 1, 1]).is_some());
    // Another kernel's signature: the text is refused, not run.
    let p = program(reduce);
    let image = p.to_image().unwrap();
    let other = reduce.replacen(") {", ") #reqd_work_group_size(16, 1, 1) {", 1);
    let other = kiln_ir::parse_module(&other).unwrap();
    let e = X86Program::from_image(&other.kernels[0], &image).unwrap_err();
    assert!(e.to_string().contains("signature"), "{e}");
}
