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
