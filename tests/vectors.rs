//! Vector kernels (`f32x4`, `i32x2`, `u8x8`, ...) run on the interpreter (the oracle) and,
//! bit for bit, through every pass, both forms of vector lowering, the cpu device (x86),
//! Vulkan (lavapipe), the AMDGPU wave simulator, and CUDA where there is one; the PTX,
//! SPIR-V and AMDGPU outputs are checked by ptxas, spirv-val and llvm-mc. Also random
//! lane-wise expressions (proptest: arithmetic, masks, selects, casts) through both
//! lowerings, the `-O` pipeline, the cpu device, the AMDGPU simulator and Vulkan.

use std::io::Write;
use std::process::{Command, Stdio};

use kiln::backends::driver::build;
use kiln::backends::options::BuildOptions;
use kiln::backends::ptx::{Options, Ptx};
use kiln::backends::spirv::{emit, Flavour};
use kiln::ir::interp::run;
use kiln::ir::launch::{Arg, Buffer, NdRange};
use kiln::ir::{parse_module, verify_kernel, Imm, Kernel, Scalar, Type};
use kiln::passes::manager::{pass_by_name, PASSES};
use kiln::passes::pipeline::optimize;
use kiln::passes::vectors::{lower_vectors, uses_vectors, VectorLowering};
use kiln::runtime::device::cpu::CpuDevice;
use kiln::runtime::device::registry::OpenOptions;
use kiln::runtime::Device;
use proptest::prelude::*;

/// Kernels over 64-element buffers, launched on 16 work-items (groups of 8).
const CASES: &[&str] = &[
    // f32x4 axpy: ld.global.v4.f32 / st.global.v4.f32.
    "kernel axpy4(x: ptr<global, f32>, y: ptr<global, f32>, a: f32) {
  let i: u32 = global_id(0) * 4u32;
  let xv: f32x4 = vload4(x, i);
  let yv: f32x4 = vload4(y, i);
  vstore(y, i, f32x4(a) * xv + yv);
}",
    // i32 lanes: insert/extract, select, intrinsics, shifts, division, a lane swap.
    "kernel lanes(x: ptr<global, i32>, out: ptr<global, i32>) {
  let g: u32 = global_id(0);
  let v: i32x4 = vload4(x, g * 4u32);
  var w: i32x4 = insert(i32x4(7), 2, extract(v, 3) + 1);
  w = max(w, v) - i32x4(1, 2, 3, 4);
  w = i32x4(extract(w, 1), extract(w, 0), extract(w, 3), extract(w, 2));
  let s: i32x4 = g % 2u32 == 0u32 ? w : -(v << i32x4(1)) / i32x4(3) % i32x4(5);
  vstore(out, g * 4u32, abs(s) ^ i32x4(5));
}",
    // f64x2, u16x4 and u8x8 (one and two 8-byte chunks), f16x4 storage.
    "kernel widths(a: ptr<global, f64>, b: ptr<global, u16>, c: ptr<global, u8>, h: ptr<global, f16>) {
  let g: u32 = global_id(0);
  if g < 8u32 {
    let d: f64x2 = vload2(a, g * 2u32);
    vstore(a, g * 2u32, d * d + f64x2(0.5));
    let s: u16x4 = vload4(b, g * 4u32);
    vstore(b, g * 4u32, s * u16x4(3) + u16x4(65535));
    let q: u8x8 = vload8(c, g * 8u32);
    vstore(c, g * 8u32, q + q);
    let f: f16x4 = vload4(h, g * 4u32);
    vstore(h, g * 4u32, insert(f, 0, extract(f, 3)));
  }
}",
    // f32x8 (two v4 chunks on PTX), a loop accumulating in a vector var, a while loop with
    // a lane in its condition.
    "kernel acc8(x: ptr<global, f32>, out: ptr<global, f32>) {
  let g: u32 = global_id(0);
  var acc: f32x8 = f32x8(0.0);
  for k: u32 in 0u32 .. 4u32 {
    acc = acc + vload8(x, ((g + k) % 8u32) * 8u32) * f32x8(1.5);
  }
  var n: u32 = 0u32;
  while extract(acc, 0) > 1.0 && n < 3u32 {
    acc = acc * f32x8(0.25);
    n = n + 1u32;
  }
  if g < 8u32 {
    vstore(out, g * 8u32, acc);
  }
}",
    // Lane-wise compares into masks (`boolx4`), mask logic, selects by mask, and lane-wise
    // casts both ways (f32x4 <-> i32x4, i32x4 -> u16x4, u8x8 -> f32 lanes).
    "kernel masks(x: ptr<global, f32>, n: ptr<global, i32>, out: ptr<global, f32>, q: ptr<global, u16>) {
  let g: u32 = global_id(0);
  let v: f32x4 = vload4(x, g * 4u32);
  let w: i32x4 = vload4(n, g * 4u32);
  let m: boolx4 = v > f32x4(0.0) & !(w == i32x4(3)) | w < i32x4(-5);
  let t: i32x4 = v as i32;
  let s: f32x4 = m ? v * f32x4(2.0) : (w + t) as f32;
  vstore(out, g * 4u32, s);
  vstore(n, g * 4u32, (v >= (w as f32)) ? t : w ^ i32x4(7));
  let k: boolx4 = boolx4(extract(m, 0), true, extract(m, 3), false);
  vstore(q, g * 4u32, k ? w as u16 : (-v) as u16);
}",
    // Local memory: a vector store into a tile, a barrier, vector loads of another lane.
    "kernel tile(x: ptr<global, f32>, out: ptr<global, f32>) {
  local t: f32[32];
  let l: u32 = local_id(0);
  vstore(t, l * 4u32, vload4(x, global_id(0) * 4u32));
  barrier(local);
  let o: f32x4 = vload4(t, ((l + 1u32) % 8u32) * 4u32);
  vstore(out, global_id(0) * 4u32, o + f32x4(extract(o, 1)));
}",
    // A vector load inside a `while` condition (kept inline by the lowering), 2-lane local
    // tiles (ds_read_b64), i64x2 lanes, and a loaded vector stored as it is.
    "kernel misc(x: ptr<global, u32>, w: ptr<global, i64>, out: ptr<global, u32>) {
  local t: u32[16];
  let l: u32 = local_id(0);
  var n: u32 = 0u32;
  while extract(vload4(x, (n % 4u32) * 4u32), 1) > 3u32 && n < 5u32 {
    n = n + 1u32;
  }
  vstore(t, l * 2u32, vload2(x, global_id(0) * 2u32) + u32x2(n));
  barrier(local);
  let p: u32x2 = vload2(t, ((l + 3u32) % 8u32) * 2u32);
  vstore(out, global_id(0) * 2u32, p);
  if global_id(0) < 8u32 {
    let q: i64x2 = vload2(w, global_id(0) * 2u32);
    vstore(w, global_id(0) * 2u32, q * i64x2(-3) + i64x2(extract(q, 1)));
  }
}",
];

fn kernel(src: &str) -> Kernel {
    let m = parse_module(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    let k = m.kernels[0].clone();
    verify_kernel(&k).unwrap_or_else(|e| panic!("{e:?}\n{src}"));
    assert!(uses_vectors(&k));
    k
}

/// 64 elements per pointer parameter, distinct small values; scalars 1.5 / 3.
fn inputs(k: &Kernel) -> (Vec<Arg>, Vec<Buffer>) {
    let (mut args, mut bufs) = (Vec::new(), Vec::new());
    for p in k.params() {
        match p.ty() {
            Type::Ptr(_, elem) => {
                let vals: Vec<Imm> = (0..64i128)
                    .map(|i| {
                        let v = (i * 37 % 23) - 9;
                        if elem.is_float() {
                            Imm::float(elem, v as f64 * 0.375)
                        } else {
                            Imm::int(elem, v)
                        }
                    })
                    .collect();
                args.push(Arg::Buffer(bufs.len()));
                bufs.push(Buffer::from_imms(elem, &vals).unwrap());
            }
            Type::Scalar(s) if s.is_float() => args.push(Arg::Scalar(Imm::float(s, 1.5))),
            Type::Scalar(s) => args.push(Arg::Scalar(Imm::int(s, 3))),
            Type::Vector(..) | Type::Frag(_) => unreachable!("verified kernels take no vectors"),
        }
    }
    (args, bufs)
}

fn range() -> NdRange {
    NdRange::new(&[16]).with_local(&[8])
}

fn oracle(k: &Kernel) -> Vec<Buffer> {
    let (args, mut bufs) = inputs(k);
    run(k, &range(), &args, &mut bufs).unwrap_or_else(|e| panic!("{}: {e}", k.name()));
    bufs
}

fn same(k: &Kernel, what: &str, got: &[Buffer], want: &[Buffer]) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.as_bytes(), w.as_bytes(), "{}: {what}: buffer {i} differs", k.name());
    }
}

#[test]
fn lowering_forms_and_every_pass_keep_results() {
    for src in CASES {
        let k = kernel(src);
        let want = oracle(&k);
        for how in [VectorLowering::Scalar, VectorLowering::Memory] {
            let l = lower_vectors(&k, how);
            verify_kernel(&l).unwrap_or_else(|e| panic!("{how:?}: {e:?}\n{l}"));
            if how == VectorLowering::Scalar {
                assert!(!uses_vectors(&l), "{l}");
            }
            same(&k, &format!("{how:?}"), &oracle(&l), &want);
            let o = optimize(&l);
            same(&k, &format!("{how:?} then -O"), &oracle(&o), &want);
        }
        for (name, _, _) in PASSES {
            let p = pass_by_name(name).unwrap().run(&k);
            verify_kernel(&p).unwrap_or_else(|e| panic!("{name}: {e:?}\n{p}"));
            same(&k, name, &oracle(&p), &want);
        }
        same(&k, "-O", &oracle(&optimize(&k)), &want);
        let sanitized = kiln::passes::sanitize::sanitize_kernel(&k);
        verify_kernel(&sanitized.kernel).unwrap();
    }
}

#[test]
fn cpu_device_runs_vector_kernels() {
    let dev = CpuDevice::open(&OpenOptions::default()).unwrap();
    for src in CASES {
        let k = kernel(src);
        let want = oracle(&k);
        let (args, mut bufs) = inputs(&k);
        dev.build_and_run(&k, &range(), &args, &mut bufs).unwrap_or_else(|e| panic!("{e}"));
        same(&k, "cpu", &bufs, &want);
    }
}

/// Kernels with one bad vector access (misaligned, or a lane out of bounds) when `o` is 2.
const BAD: &[&str] = &[
    "kernel vmis(x: ptr<global, f32>, y: ptr<global, f32>, o: u32) {
  let g: u32 = global_id(0);
  let i: u32 = g * 4u32 + (g == 1u32 ? o : 0u32);
  vstore(y, g * 4u32, vload4(x, i) * f32x4(2.0));
}",
    "kernel vloc(out: ptr<global, i32>, o: u32) {
  local t: i32[64];
  let l: u32 = local_id(0);
  vstore(t, l * 4u32 + (l == 3u32 ? o : 0u32), i32x4(l as i32));
  barrier(local);
  out[global_id(0)] = t[l];
}",
    "kernel vtail(x: ptr<global, u32>, y: ptr<global, u32>, o: u32) {
  let g: u32 = global_id(0);
  if g == 15u32 {
    vstore(y, 60u32 + o, vload2(x, 62u32 + o));
  }
}",
    "kernel vpast(y: ptr<global, i32>, o: i32) {
  vstore(y, (global_id(0) as i32) * 8i32 - o * 4i32, i32x8(1));
}",
];

#[test]
fn cpu_device_reports_bad_vector_accesses_as_the_interpreter_does() {
    // The cpu device checks every access itself (no sanitizer): misalignment included.
    let dev = CpuDevice::open(&OpenOptions::default()).unwrap();
    for src in BAD {
        let k = kernel(src);
        let (args, bufs) = inputs(&k);
        let args: Vec<Arg> = args
            .into_iter()
            .map(|a| match a {
                Arg::Scalar(Imm::Int(t, _)) => Arg::Scalar(Imm::Int(t, 2)),
                a => a,
            })
            .collect();
        let want = run(&k, &range(), &args, &mut bufs.clone()).unwrap_err().to_string();
        assert!(want.contains("misaligned") || want.contains("out of bounds"), "{want}");
        let got = dev.build_and_run(&k, &range(), &args, &mut bufs.clone()).unwrap_err();
        match got {
            kiln::runtime::DeviceError::Launch(got) => assert_eq!(got, want, "{}", k.name()),
            other => panic!("{}: {other:?}, want {want}", k.name()),
        }
    }
}

#[test]
fn ptx_uses_vector_instructions_and_assembles() {
    let opts = BuildOptions::parse("-O").unwrap();
    let axpy = build(&Ptx(Options::sm(80)), &parse_module(CASES[0]).unwrap(), &opts).unwrap();
    assert!(axpy.output.contains("ld.global.v4.f32"), "{}", axpy.output);
    assert!(axpy.output.contains("st.global.v4.f32"), "{}", axpy.output);
    let acc = build(&Ptx(Options::sm(80)), &parse_module(CASES[3]).unwrap(), &opts).unwrap();
    assert!(acc.output.matches("st.global.v4.f32").count() >= 2, "{}", acc.output);
    let widths = build(&Ptx(Options::sm(80)), &parse_module(CASES[2]).unwrap(), &opts).unwrap();
    for want in ["ld.global.v2.f64", "ld.global.v4.u16", "ld.global.v4.u8", "ld.global.v4.b16"] {
        assert!(widths.output.contains(want), "{want}:\n{}", widths.output);
    }
    let tile = build(&Ptx(Options::sm(80)), &parse_module(CASES[5]).unwrap(), &opts).unwrap();
    assert!(tile.output.contains("st.shared.v4.f32"), "{}", tile.output);
    let Some(ptxas) = kiln::ir::testing::tool("KILN_PTXAS") else { return };
    let dir = std::env::temp_dir().join(format!("kiln-vec-ptx-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (i, src) in CASES.iter().enumerate() {
        for o in ["-O", "-O0"] {
            let b = build(
                &Ptx(Options::sm(80)),
                &parse_module(src).unwrap(),
                &BuildOptions::parse(o).unwrap(),
            )
            .unwrap();
            let file = dir.join(format!("case{i}.ptx"));
            std::fs::write(&file, &b.output).unwrap();
            let out = Command::new(&ptxas)
                .args(["-arch=sm_80", file.to_str().unwrap(), "-o", "/dev/null"])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "ptxas rejects case {i} {o}:\n{}\n{}",
                String::from_utf8_lossy(&out.stderr),
                b.output
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// How many `OpLoad`s in the disassembly `text` load an `OpTypeVector` of `n` components.
fn vector_loads(text: &str, n: u32) -> usize {
    let ids: Vec<String> = text
        .lines()
        .filter_map(|l| {
            let (id, rest) = l.trim().split_once(" = ")?;
            let t: Vec<&str> = rest.split_whitespace().collect();
            (t.first() == Some(&"OpTypeVector") && t.get(2) == Some(&n.to_string().as_str()))
                .then(|| id.to_string())
        })
        .collect();
    text.lines()
        .filter(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            t.get(2) == Some(&"OpLoad") && t.get(3).is_some_and(|ty| ids.iter().any(|i| i == ty))
        })
        .count()
}

#[test]
fn spirv_uses_vector_types_for_whole_accesses() {
    let axpy = emit(&kernel(CASES[0]), Flavour::Vulkan).unwrap().disassemble();
    for want in ["OpTypeVector", "OpTypeRuntimeArray", "OpCompositeExtract", "OpCompositeConstruct"]
    {
        assert!(axpy.contains(want), "{want}:\n{axpy}");
    }
    // Two loads of a whole 4-lane vector through the aliased vector views.
    assert_eq!(vector_loads(&axpy, 4), 2, "{axpy}");
    // f32x8: two 4-lane chunks per access (one load of 8 lanes per iteration).
    let acc = emit(&kernel(CASES[3]), Flavour::Vulkan).unwrap().disassemble();
    assert!(vector_loads(&acc, 4) >= 2, "{acc}");
    let widths = emit(&kernel(CASES[2]), Flavour::Vulkan).unwrap().disassemble();
    assert_eq!(vector_loads(&widths, 2), 1, "f64x2:\n{widths}");
}

#[test]
fn spirv_validates_and_runs_on_vulkan() {
    if let Some(val) = kiln::ir::testing::tool("KILN_SPIRV_VAL") {
        for src in CASES {
            let k = kernel(src);
            for flavour in [Flavour::Vulkan, Flavour::OpenCl] {
                let m = match emit(&k, flavour) {
                    Ok(m) => m,
                    // f16 buffers are outside the OpenCL flavour (documented).
                    Err(e) if flavour == Flavour::OpenCl && e.message.contains("f16") => continue,
                    Err(e) => panic!("{e}"),
                };
                let mut child = Command::new(&val)
                    .args(["--target-env", flavour.target_env(), "-"])
                    .stdin(Stdio::piped())
                    .stderr(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap();
                child.stdin.take().unwrap().write_all(&m.to_bytes()).unwrap();
                let out = child.wait_with_output().unwrap();
                assert!(
                    out.status.success(),
                    "spirv-val rejects {} ({flavour:?}): {}",
                    k.name(),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
    let found = kiln::runtime::device::vulkan::VulkanDevice::open();
    let Some(dev) = kiln::ir::testing::require("KILN_REQUIRE_TOOLS", found) else { return };
    for src in CASES {
        let k = kernel(src);
        let want = oracle(&k);
        let (args, mut bufs) = inputs(&k);
        dev.build_and_run(&k, &range(), &args, &mut bufs).unwrap_or_else(|e| panic!("{e}"));
        same(&k, "vulkan", &bufs, &want);
    }
}

#[test]
fn amdgpu_uses_vector_memory_instructions() {
    let asm = |src: &str| kiln::backends::amdgpu::compile(&kernel(src)).unwrap().asm;
    let axpy = asm(CASES[0]);
    for want in ["global_load_dwordx4", "global_store_dwordx4"] {
        assert!(axpy.contains(want), "{want}:\n{axpy}");
    }
    let tile = asm(CASES[5]);
    for want in ["ds_write_b128", "ds_read_b128"] {
        assert!(tile.contains(want), "{want}:\n{tile}");
    }
    let misc = asm(CASES[6]);
    for want in ["ds_write_b64", "ds_read_b64", "global_load_dwordx4", "global_load_dwordx2"] {
        assert!(misc.contains(want), "{want}:\n{misc}");
    }
    assert!(asm(CASES[3]).matches("global_store_dwordx4").count() >= 2);
    let pairs = asm("kernel p(x: ptr<global, i32>) {
  let i: u32 = global_id(0) * 2u32;
  vstore(x, i, vload2(x, i) + i32x2(1));
}");
    for want in ["global_load_dwordx2", "global_store_dwordx2"] {
        assert!(pairs.contains(want), "{want}:\n{pairs}");
    }
}

#[test]
fn amdgpu_assembles_and_simulates() {
    for src in CASES {
        let k = kernel(src);
        // The backend compiles every case (none was refused when this was written): a
        // refusal fails, rather than leaving the case unchecked there.
        let c = kiln::backends::amdgpu::compile(&k).unwrap_or_else(|e| panic!("{e}\n{k}"));
        if let Some(mc) = kiln::ir::testing::tool("KILN_LLVM_MC") {
            let mut child = Command::new(mc)
                .args([
                    "-triple=amdgcn-amd-amdhsa",
                    "-mcpu=gfx900",
                    "-filetype=obj",
                    "-o",
                    "/dev/null",
                ])
                .stdin(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            child.stdin.take().unwrap().write_all(c.asm.as_bytes()).unwrap();
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        }
        let want = oracle(&k);
        let (args, mut bufs) = inputs(&k);
        kiln::backends::amdgpu::sim::run(&c, &k, &range(), &args, &mut bufs).unwrap();
        same(&k, "amdgpu", &bufs, &want);
    }
}

#[test]
fn cuda_runs_vector_kernels_where_present() {
    let found = kiln::runtime::device::cuda::CudaDevice::open();
    let Some(dev) = kiln::ir::testing::require("KILN_REQUIRE_CUDA", found) else { return };
    for src in CASES {
        let k = kernel(src);
        let want = oracle(&k);
        let (args, mut bufs) = inputs(&k);
        dev.build_and_run(&k, &range(), &args, &mut bufs).unwrap_or_else(|e| panic!("{e}"));
        same(&k, "cuda", &bufs, &want);
    }
}

/// A random lane-wise `i32x4` expression over `a` and `b`, as text.
fn arb_vexpr() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("a".to_string()),
        Just("b".to_string()),
        (-9i32..9).prop_map(|c| format!("i32x4({c})")),
        (0u8..4).prop_map(|l| format!("i32x4(extract(b, {l}))")),
    ];
    leaf.prop_recursive(4, 24, 3, |inner| {
        prop_oneof![
            (
                inner.clone(),
                inner.clone(),
                prop::sample::select(vec!["+", "-", "*", "&", "|", "^"])
            )
                .prop_map(|(x, y, op)| format!("({x} {op} {y})")),
            (inner.clone(), inner.clone()).prop_map(|(x, y)| format!("max({x}, {y})")),
            inner.clone().prop_map(|x| format!("-({x})")),
            (inner.clone(), 0u8..4, inner.clone())
                .prop_map(|(x, l, y)| format!("insert({x}, {l}, extract({y}, {}))", 3 - l)),
            (inner.clone(), inner.clone())
                .prop_map(|(x, y)| format!("(global_id(0) > 3u32 ? {x} : {y})")),
            (
                inner.clone(),
                inner.clone(),
                inner.clone(),
                prop::sample::select(vec!["<", "<=", "==", "!=", ">", ">="])
            )
                .prop_map(|(x, y, z, op)| format!("(({x} {op} {y}) | !(a > b) ? {z} : a)")),
            inner.prop_map(|x| format!("((({x}) as f32 * f32x4(0.5)) as i32)")),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn random_lane_expressions_lower_exactly(e in arb_vexpr()) {
        let src = format!(
            "kernel r(x: ptr<global, i32>, out: ptr<global, i32>) {{
  let a: i32x4 = vload4(x, global_id(0) * 4u32);
  let b: i32x4 = vload4(x, 60u32 - global_id(0) * 4u32);
  vstore(out, global_id(0) * 4u32, {e});
}}"
        );
        let k = kernel(&src);
        let text = k.to_string();
        prop_assert!(parse_module(&text).unwrap().kernels[0].body().is_equal(k.body()));
        let want = oracle(&k);
        for how in [VectorLowering::Scalar, VectorLowering::Memory] {
            let l = lower_vectors(&k, how);
            same(&k, &format!("{how:?}"), &oracle(&l), &want);
            same(&k, &format!("{how:?} -O"), &oracle(&optimize(&l)), &want);
        }
        same(&k, "-O", &oracle(&optimize(&k)), &want);
        let _ = Scalar::I32;
        // The backends: the cpu device (x86), the AMDGPU simulator, Vulkan where present.
        let (args, mut bufs) = inputs(&k);
        CPU.with(|d| d.build_and_run(&k, &range(), &args, &mut bufs)).unwrap();
        same(&k, "cpu", &bufs, &want);
        let c = kiln::backends::amdgpu::compile(&k).unwrap();
        let (args, mut bufs) = inputs(&k);
        kiln::backends::amdgpu::sim::run(&c, &k, &range(), &args, &mut bufs).unwrap();
        same(&k, "amdgpu", &bufs, &want);
        if let Some(dev) = VULKAN.as_ref() {
            let (args, mut bufs) = inputs(&k);
            dev.build_and_run(&k, &range(), &args, &mut bufs).unwrap();
            same(&k, "vulkan", &bufs, &want);
        }
    }
}

thread_local! {
    static CPU: CpuDevice = CpuDevice::open(&OpenOptions::default()).unwrap();
}

/// The Vulkan device the random kernels also run on (opened once).
static VULKAN: std::sync::LazyLock<Option<kiln::runtime::device::vulkan::VulkanDevice>> =
    std::sync::LazyLock::new(|| {
        kiln::ir::testing::optional(
            "KILN_REQUIRE_TOOLS",
            kiln::runtime::device::vulkan::VulkanDevice::open(),
        )
    });
