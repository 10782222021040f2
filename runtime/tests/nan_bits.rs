//! Issue 29 (W1): a kernel that only moves NaN payloads (signalling ones included) keeps every
//! bit on every backend: the x86 scalar and 8-lane code (plain and `-O`) and the AMDGPU
//! simulator give the expected buffers bit for bit, and the PTX and SPIR-V lowerings hold
//! such values without a single float conversion (which would quiet a signalling NaN on the
//! GPU) and pass their validators.

use kiln_backends::spirv::{emit, Flavour};
use kiln_backends::x86::{compile, X86Options};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::testing::{bits_match, nan_copy_case};
use kiln_ir::Scalar;
use kiln_runtime::device::cpu::CpuRun;

const TYPES: [Scalar; 3] = [Scalar::F16, Scalar::F32, Scalar::F64];

fn x86_options() -> [X86Options; 3] {
    [
        X86Options { scalar: true, ..X86Options::default() },
        X86Options::default(),
        X86Options { optimize: true, ..X86Options::default() },
    ]
}

#[test]
fn x86_code_copies_every_bit() {
    for ty in TYPES {
        let (case, want) = nan_copy_case(ty);
        for opts in x86_options() {
            let p = compile(&case.kernel, &opts).unwrap_or_else(|e| panic!("{ty}: {e}"));
            let mut got = case.buffers.clone();
            p.run(&case.range, &case.args, &mut got).unwrap_or_else(|e| panic!("{ty}: {e}"));
            bits_match(&want, &got)
                .unwrap_or_else(|e| panic!("{ty} {opts:?}: {e}\n{}", p.disassemble()));
        }
    }
}

/// The 8-lane code takes scalar f32 kernels without selects only (`nan_copy_case` has
/// vectors): the same moves in that class, checked to run there.
#[test]
fn x86_8_lane_code_copies_every_bit() {
    let k = kiln_ir::parse_module(
        "kernel lanes(src: ptr<global, f32>, dst: ptr<global, f32>, c: ptr<global, u32>, s: f32) {
  let i: u32 = global_id(0);
  let v: f32 = src[i];
  var w: f32 = s;
  if c[i] != 0u32 {
    w = v;
  }
  dst[4u32 * i] = v;
  dst[4u32 * i + 1u32] = w;
  if c[i] == 0u32 {
    dst[4u32 * i + 2u32] = v;
  } else {
    dst[4u32 * i + 2u32] = s;
  }
  dst[4u32 * i + 3u32] = nanf32(0xffb00003);
}",
    )
    .unwrap()
    .kernels
    .remove(0);
    let n = 16;
    let nans = [0x7f80_0001u32, 0x7fbf_ffff, 0xff80_0001, 0x7fc0_0001];
    let src: Vec<u32> = (0..n).map(|i| nans[i % 4]).collect();
    let c: Vec<u32> = (0..n as u32).map(|i| (i + i / 4) % 2).collect();
    let s = 0x7fa0_0005u32;
    let mut want = vec![0u32; 4 * n];
    for i in 0..n {
        want[4 * i] = src[i];
        want[4 * i + 1] = if c[i] != 0 { src[i] } else { s };
        want[4 * i + 2] = if c[i] != 0 { s } else { src[i] };
        want[4 * i + 3] = 0xffb0_0003;
    }
    let f =
        |v: &[u32]| Buffer::from_slice(&v.iter().map(|&b| f32::from_bits(b)).collect::<Vec<_>>());
    let bufs = vec![f(&src), f(&vec![0; 4 * n]), Buffer::from_slice(&c)];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(f32::from_bits(s))];
    let range = NdRange::new(&[n as u32]).with_local(&[8]);
    let mut vector_code = 0;
    for opts in x86_options() {
        let p = compile(&k, &opts).unwrap();
        vector_code += p.has_spmd() as usize;
        let mut got = bufs.clone();
        p.run(&range, &args, &mut got).unwrap();
        bits_match(&[f(&src), f(&want), Buffer::from_slice(&c)], &got)
            .unwrap_or_else(|e| panic!("{opts:?}: {e}\n{}", p.disassemble()));
    }
    if std::arch::is_x86_feature_detected!("avx2") {
        assert_eq!(
            vector_code,
            2,
            "the 8-lane code did not run: {}",
            compile(&k, &X86Options::default())
                .unwrap()
                .disassemble()
                .lines()
                .filter(|l| l.contains("no 8-lane"))
                .collect::<String>()
        );
    }
}

#[test]
fn the_amdgpu_simulator_copies_every_bit() {
    for ty in TYPES {
        let (case, want) = nan_copy_case(ty);
        let c = kiln_backends::amdgpu::compile(&case.kernel).unwrap_or_else(|e| panic!("{e}"));
        let mut got = case.buffers.clone();
        kiln_backends::amdgpu::sim::run(&c, &case.kernel, &case.range, &case.args, &mut got)
            .unwrap_or_else(|e| panic!("{ty}: {e}"));
        bits_match(&want, &got).unwrap_or_else(|e| panic!("{ty}: {e}\n{}", c.asm));
        assert!(!c.asm.contains("v_cvt"), "{ty}: a conversion in a copy:\n{}", c.asm);
    }
}

/// No `cvt` with a float type: PTX keeps f16 as `b16` and moves f32/f64 as they are.
#[test]
fn ptx_moves_floats_without_conversions() {
    let ptxas = kiln_ir::testing::tool("KILN_PTXAS");
    for ty in TYPES {
        let (case, _) = nan_copy_case(ty);
        let ptx = kiln_backends::ptx::emit_kernel(&case.kernel, &Default::default())
            .unwrap_or_else(|e| panic!("{ty}: {e}"));
        let converting = ptx.lines().find(|l| {
            let l = l.trim_start();
            l.starts_with("cvt") && l.split_whitespace().next().is_some_and(|op| op.contains(".f"))
        });
        assert_eq!(converting, None, "{ty}:\n{ptx}");
        if let Some(ptxas) = &ptxas {
            let dir = std::env::temp_dir().join(format!("kiln-nan-bits-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let file = dir.join(format!("{ty}.ptx"));
            std::fs::write(&file, &ptx).unwrap();
            let out = std::process::Command::new(ptxas)
                .args(["-arch=sm_90", "-o"])
                .arg(dir.join(format!("{ty}.cubin")))
                .arg(&file)
                .output()
                .expect("run ptxas");
            assert!(out.status.success(), "{ty}: {}", String::from_utf8_lossy(&out.stderr));
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// No `OpFConvert` or `OpQuantizeToF16` in either flavour, and `spirv-val` accepts the
/// modules.
#[test]
fn spirv_moves_floats_without_conversions() {
    const OP_FCONVERT: u32 = 115;
    const OP_QUANTIZE_TO_F16: u32 = 116;
    let val = kiln_ir::testing::tool("KILN_SPIRV_VAL");
    for ty in TYPES {
        let (case, _) = nan_copy_case(ty);
        for flavour in [Flavour::Vulkan, Flavour::OpenCl] {
            let m = match emit(&case.kernel, flavour) {
                Ok(m) => m,
                // The OpenCL flavour cannot express f16 yet (a named refusal).
                Err(e) if flavour == Flavour::OpenCl && ty == Scalar::F16 => {
                    assert!(e.to_string().contains("f16"), "{e}");
                    continue;
                }
                Err(e) => panic!("{ty} {flavour:?}: {e}"),
            };
            let mut at = 5;
            while at < m.words.len() {
                let (count, op) = ((m.words[at] >> 16) as usize, m.words[at] & 0xffff);
                assert!(
                    op != OP_FCONVERT && op != OP_QUANTIZE_TO_F16,
                    "{ty} {flavour:?}: conversion opcode {op} in a copy"
                );
                at += count.max(1);
            }
            if let Some(val) = &val {
                if let Err(why) = m.validate(val) {
                    panic!("{ty} {flavour:?}: {why}");
                }
            }
        }
    }
}

/// `-` and `abs` only change the sign bit (IEEE 754's negate and abs are not arithmetic): a
/// NaN keeps its payload on the x86 code and the AMDGPU simulator, and PTX and SPIR-V use
/// bit operations (`neg.f32`/`abs.f32` may give "an unspecified NaN", `OpFNegate` need not
/// keep the payload).
#[test]
fn negation_and_abs_flip_only_the_sign_bit() {
    const OP_FNEGATE: u32 = 127;
    for (ty, nans) in [
        ("f32", vec![0x7f80_0001u64, 0xffbf_ffff, 0x7fc0_0001, 0x3f80_0000]),
        ("f64", vec![0x7ff0_0000_0000_0001, 0xfff7_ffff_ffff_ffff, 0x7ff8_0000_0000_0001, 0x1]),
    ] {
        let k = kiln_ir::parse_module(&format!(
            "kernel signs_{ty}(x: ptr<global, {ty}>, y: ptr<global, {ty}>) {{
  let i: u32 = global_id(0);
  y[2u32 * i] = -x[i];
  y[2u32 * i + 1u32] = abs(x[i]);
}}"
        ))
        .unwrap()
        .kernels
        .remove(0);
        let s = Scalar::from_name(ty).unwrap();
        let sign = 1u64 << (s.bits() - 1);
        let buf = |bits: &[u64]| {
            let imms: Vec<_> = bits.iter().map(|&b| kiln_ir::Imm::from_bits(s, b)).collect();
            Buffer::from_imms(s, &imms).unwrap()
        };
        let want: Vec<u64> = nans.iter().flat_map(|&b| [b ^ sign, b & !sign]).collect();
        let bufs = vec![buf(&nans), buf(&vec![0; 2 * nans.len()])];
        let (want, args) = (vec![buf(&nans), buf(&want)], [Arg::Buffer(0), Arg::Buffer(1)]);
        let range = NdRange::new(&[nans.len() as u32]);
        let mut got = bufs.clone();
        kiln_ir::interp::run(&k, &range, &args, &mut got).unwrap();
        bits_match(&want, &got).unwrap_or_else(|e| panic!("interp {ty}: {e}"));
        for opts in x86_options() {
            let mut got = bufs.clone();
            compile(&k, &opts).unwrap().run(&range, &args, &mut got).unwrap();
            bits_match(&want, &got).unwrap_or_else(|e| panic!("x86 {ty} {opts:?}: {e}"));
        }
        let c = kiln_backends::amdgpu::compile(&k).unwrap();
        let mut got = bufs.clone();
        kiln_backends::amdgpu::sim::run(&c, &k, &range, &args, &mut got).unwrap();
        bits_match(&want, &got).unwrap_or_else(|e| panic!("amdgpu {ty}: {e}\n{}", c.asm));
        let ptx = kiln_backends::ptx::emit_kernel(&k, &Default::default()).unwrap();
        assert!(!ptx.contains("neg.f") && !ptx.contains("abs.f"), "{ty}:\n{ptx}");
        let m = emit(&k, Flavour::Vulkan).unwrap();
        let mut at = 5;
        while at < m.words.len() {
            assert_ne!(m.words[at] & 0xffff, OP_FNEGATE, "{ty}: OpFNegate");
            at += ((m.words[at] >> 16) as usize).max(1);
        }
    }
}
