//! Ranged buffer arguments (`Arg::Range`) on the executors of this crate, against the
//! interpreter: the x86 JIT (results and bounds messages, which are the interpreter's) and
//! the AMDGPU-style simulator (results; an access past the range is an error there too).

use kiln_backends::amdgpu;
use kiln_backends::x86::{self, X86Options};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::parse_module;
use kiln_runtime::device::cpu::CpuRun;

const SRC: &str = "
kernel axpy(a: ptr<global, i32>, b: ptr<global, i32>, out: ptr<global, i32>, s: i32) {
  let i: u32 = global_id(0);
  out[i] = a[i] * s + b[i];
}";

fn bufs() -> Vec<Buffer> {
    (0..3)
        .map(|b| Buffer::from_slice(&(0..40).map(|i| i * 3 - b * 11).collect::<Vec<i32>>()))
        .collect()
}

/// A launch over `n` work-items with three ranges `(buffer, offset)` of `len` elements.
type Case = (u32, usize, [(usize, usize); 3]);

/// The launches compared.
fn cases() -> Vec<Case> {
    vec![
        (8, 8, [(0, 0), (1, 8), (2, 16)]),
        (7, 7, [(0, 3), (1, 29), (2, 1)]),
        // One buffer through two disjoint ranges, written through a third.
        (10, 10, [(0, 0), (0, 20), (1, 5)]),
        (16, 16, [(2, 24), (1, 0), (0, 17)]),
    ]
}

fn args(len: usize, r: &[(usize, usize); 3]) -> Vec<Arg> {
    let mut a: Vec<Arg> =
        r.iter().map(|&(buffer, offset)| Arg::Range { buffer, offset, len }).collect();
    a.push(Arg::scalar(-3i32));
    a
}

#[test]
fn x86_and_the_simulator_match_the_interpreter_on_ranges() {
    let k = parse_module(SRC).unwrap().kernels[0].clone();
    let prog = x86::compile(&k, &X86Options::default()).unwrap();
    let sim = amdgpu::compile(&k).unwrap();
    for (n, len, r) in cases() {
        let (range, args) = (NdRange::new(&[n]), args(len, &r));
        let mut want = bufs();
        kiln_ir::interp::run(&k, &range, &args, &mut want).unwrap();
        // The rest of each buffer is untouched.
        assert_ne!(want, bufs());
        let mut got = bufs();
        prog.run(&range, &args, &mut got).unwrap();
        assert_eq!(got, want, "x86 {r:?}");
        let mut got = bufs();
        amdgpu::sim::run(&sim, &k, &range, &args, &mut got).unwrap();
        assert_eq!(got, want, "simulator {r:?}");
    }
}

#[test]
fn accesses_past_the_range_are_errors() {
    let k = parse_module(SRC).unwrap().kernels[0].clone();
    let prog = x86::compile(&k, &X86Options::default()).unwrap();
    let sim = amdgpu::compile(&k).unwrap();
    // Nine work-items on ranges of eight elements (the buffers go on).
    let (range, args) = (NdRange::new(&[9]), args(8, &[(0, 0), (1, 8), (2, 16)]));
    let want = kiln_ir::interp::run(&k, &range, &args, &mut bufs()).unwrap_err().to_string();
    assert!(
        want.contains("`a[8]` out of bounds (buffer range has 8 elements, at offset 0"),
        "{want}"
    );
    let got = prog.run(&range, &args, &mut bufs()).unwrap_err().to_string();
    assert_eq!(got, want);
    let got = amdgpu::sim::run(&sim, &k, &range, &args, &mut bufs()).unwrap_err();
    assert!(got.contains("out of bounds"), "{got}");
    // A range past its buffer is refused before anything runs.
    let bad = [
        Arg::Range { buffer: 0, offset: 36, len: 8 },
        Arg::Buffer(1),
        Arg::Buffer(2),
        Arg::scalar(1i32),
    ];
    let want = kiln_ir::interp::run(&k, &range, &bad, &mut bufs()).unwrap_err().to_string();
    assert!(
        want.contains("binds elements 36..44 (offset 36, length 8) of buffer 0, which has 40"),
        "{want}"
    );
    assert_eq!(prog.run(&range, &bad, &mut bufs()).unwrap_err().to_string(), want);
    let got = amdgpu::sim::run(&sim, &k, &range, &bad, &mut bufs()).unwrap_err();
    assert!(got.contains("36..44"), "{got}");
}
