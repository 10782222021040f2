//! Differential tests: kernels run on the Vulkan device (lavapipe in CI) give the
//! interpreter's results, bit for bit (NaN payloads aside; see `results_match`).
//!
//! Without a Vulkan device the tests skip with a message, unless `KILN_REQUIRE_TOOLS` is
//! set (as `cargo xtask test` does), when they fail.

use kiln_ir::interp::{run, Arg, Buffer, NdRange};
use kiln_ir::testing::{results_match, seeded_cases, GenConfig};
use kiln_ir::{parse_module, Imm, Kernel};
use kiln_runtime::vulkan::VulkanDevice;
use kiln_runtime::{Device, DeviceError};

mod common;

fn device() -> Option<VulkanDevice> {
    match VulkanDevice::open() {
        Ok(d) => {
            eprintln!("vulkan device: {}", d.name());
            Some(d)
        }
        Err(e) if std::env::var_os("KILN_REQUIRE_TOOLS").is_some() => {
            panic!("KILN_REQUIRE_TOOLS is set but no Vulkan device: {e}")
        }
        Err(e) => {
            kiln_ir::testing::skip(&e.to_string());
            None
        }
    }
}

fn example(name: &str) -> Kernel {
    let path = format!("{}/../examples/{name}.kir", env!("CARGO_MANIFEST_DIR"));
    let src = std::fs::read_to_string(&path).unwrap();
    parse_module(&src).unwrap().kernels.remove(0)
}

fn floats(n: usize, seed: f32) -> Buffer {
    Buffer::from_slice(&(0..n).map(|i| (i as f32 * 0.37 + seed).sin() * 10.0).collect::<Vec<_>>())
}

fn compare(dev: &VulkanDevice, k: &Kernel, range: &NdRange, args: &[Arg], bufs: &[Buffer]) {
    let mut want = bufs.to_vec();
    run(k, range, args, &mut want).unwrap();
    let mut got = bufs.to_vec();
    dev.build_and_run(k, range, args, &mut got).unwrap();
    results_match(&want, &got).unwrap_or_else(|e| panic!("{}: {e}", k.name()));
}

#[test]
fn examples_match_the_interpreter() {
    let Some(dev) = device() else { return };
    let saxpy = example("saxpy");
    compare(
        &dev,
        &saxpy,
        &NdRange::new(&[100]).with_local(&[20]),
        &[Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(2.5f32), Arg::scalar(97u32)],
        &[floats(100, 0.0), floats(100, 1.0)],
    );
    let reduce = example("reduce");
    compare(
        &dev,
        &reduce,
        &NdRange::new(&[256]),
        &[Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(250u32)],
        &[floats(256, 0.5), Buffer::zeroed(kiln_ir::Scalar::F32, 4)],
    );
    let stencil = example("stencil2d");
    compare(
        &dev,
        &stencil,
        &NdRange::new(&[16, 12]).with_local(&[4, 4]),
        &[Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(15u32), Arg::scalar(11u32)],
        &[floats(16 * 12, 2.0), Buffer::zeroed(kiln_ir::Scalar::F32, 16 * 12)],
    );
    let div = example("divergent");
    let (args, bufs) = generic_inputs(&div, 64);
    compare(&dev, &div, &NdRange::new(&[64]).with_local(&[16]).with_offset(&[3]), &args, &bufs);
}

/// Arguments for any kernel: a 4*n-element buffer per pointer, small scalars.
fn generic_inputs(k: &Kernel, n: usize) -> (Vec<Arg>, Vec<Buffer>) {
    let mut args = Vec::new();
    let mut bufs = Vec::new();
    for p in k.params() {
        match p.ty() {
            kiln_ir::Type::Ptr(_, elem) => {
                let imms: Vec<_> = (0..4 * n)
                    .map(|i| (i % 7) as i128 - 2)
                    .map(|v| match elem {
                        e if e.is_float() => kiln_ir::Imm::float(e, v as f64 * 0.75),
                        e => kiln_ir::Imm::int(e, v),
                    })
                    .collect();
                args.push(Arg::Buffer(bufs.len()));
                bufs.push(Buffer::from_imms(elem, &imms).unwrap());
            }
            kiln_ir::Type::Scalar(s) if s.is_float() => {
                args.push(Arg::Scalar(kiln_ir::Imm::float(s, 1.5)))
            }
            kiln_ir::Type::Scalar(kiln_ir::Scalar::Bool) => {
                args.push(Arg::Scalar(kiln_ir::Imm::Bool(true)))
            }
            kiln_ir::Type::Scalar(s) => args.push(Arg::Scalar(kiln_ir::Imm::int(s, n as i128))),
        }
    }
    (args, bufs)
}

/// Whether every element where `got` differs from `want` is a NaN in `want`. Vulkan's
/// default float rules let a driver assume no NaN arises (SPIR-V's
/// `SignedZeroInfNanPreserve` mode is optional); lavapipe drops the store of a NaN that it
/// computes at compile time, e.g. `-0.0 / local_id(1)` with a local size of 1 in dimension 1.
/// Every other difference is a failure.
fn only_nans_differ(want: &[Buffer], got: &[Buffer]) -> bool {
    want.iter().zip(got).all(|(w, g)| {
        (0..w.len()).all(|i| match (w.get(i), g.get(i)) {
            (Some(Imm::Float(_, x)), _) if x.is_nan() => true,
            (Some(Imm::Float(_, x)), Some(Imm::Float(_, y))) => x.to_bits() == y.to_bits(),
            (a, b) => a == b,
        })
    })
}

#[test]
fn random_kernels_match_the_interpreter() {
    let Some(dev) = device() else { return };
    let cfg = GenConfig::default();
    let (mut ran, mut rejected, mut nan_only) = (0, 0, 0);
    for (n, case) in seeded_cases(0x2545_f491_4f6c_dd1d, &cfg).take(150).enumerate() {
        let want = case.run().unwrap();
        let mut got = case.buffers.clone();
        match dev.build_and_run(&case.kernel, &case.range, &case.args, &mut got) {
            Ok(()) => {}
            Err(DeviceError::Build { message, .. }) if message.contains("cannot be expressed") => {
                rejected += 1;
                continue;
            }
            Err(e) => panic!("case {n}: {e}\n{}", case.kernel),
        }
        if let Err(e) = results_match(&want, &got) {
            if only_nans_differ(&want, &got) {
                nan_only += 1;
                continue;
            }
            panic!("case {n}: {e}\nrange {:?}\nargs {:?}\n{}", case.range, case.args, case.kernel);
        }
        ran += 1;
    }
    eprintln!(
        "{ran} random kernels matched on the Vulkan device ({rejected} rejected, {nan_only} \
         differing only where the interpreter computes a NaN)"
    );
    assert!(ran >= 140);
}

/// The SPIR-V backend's hand cases (one kernel per construct), on generic inputs.
/// `exp`, `log`, `sin` and `cos` are approximate on both sides: f32 results of the
/// `intrinsics` kernel may differ by at most 1e-5 * max(1, |expected|); everything else is
/// compared exactly. `atomics` is skipped: its results depend on the schedule by design.
#[test]
fn hand_cases_match_the_interpreter() {
    let Some(dev) = device() else { return };
    let src = include_str!("../../backends/tests/spirv_cases.kir");
    let mut ran = 0;
    let kernels = parse_module(src).unwrap().kernels;
    let expected = kernels.iter().filter(|k| k.name() != "atomics").count();
    for k in kernels {
        if k.name() == "atomics" {
            continue;
        }
        let (args, bufs) = generic_inputs(&k, 32);
        // Only `builtins` indexes by the linear id; the others index by `global_id(0)`
        // alone, so a second dimension would have several work-items race on one element.
        let range = if k.name() == "builtins" {
            NdRange::new(&[8, 4]).with_local(&[4, 2]).with_offset(&[1, 2])
        } else {
            NdRange::new(&[16]).with_local(&[4]).with_offset(&[1])
        };
        let mut want = bufs.clone();
        run(&k, &range, &args, &mut want).unwrap();
        let mut got = bufs.clone();
        dev.build_and_run(&k, &range, &args, &mut got).unwrap();
        if k.name() == "intrinsics" {
            for (b, (w, g)) in want.iter().zip(&got).enumerate() {
                match (w.to_vec::<f32>(), g.to_vec::<f32>()) {
                    (Some(w), Some(g)) => {
                        for (i, (x, y)) in w.iter().zip(&g).enumerate() {
                            let ok = (x.is_nan() && y.is_nan())
                                || (x - y).abs() <= 1e-5 * x.abs().max(1.0);
                            assert!(ok, "intrinsics: buffer {b}[{i}]: expected {x}, got {y}");
                        }
                    }
                    _ => results_match(std::slice::from_ref(w), std::slice::from_ref(g))
                        .unwrap_or_else(|e| panic!("intrinsics: {e}")),
                }
            }
        } else {
            results_match(&want, &got).unwrap_or_else(|e| panic!("{}: {e}", k.name()));
        }
        ran += 1;
    }
    assert_eq!(ran, expected);
}

#[test]
fn unsupported_constructs_are_clear_errors() {
    let Some(dev) = device() else { return };
    let src = "kernel e(x: ptr<global, f64>) { x[global_id(0)] = exp(x[global_id(0)]); }";
    let k = parse_module(src).unwrap().kernels.remove(0);
    let mut bufs = vec![Buffer::from_slice(&[1.0f64; 4])];
    let e = dev.build_and_run(&k, &NdRange::new(&[4]), &[Arg::Buffer(0)], &mut bufs).unwrap_err();
    assert!(
        e.to_string().contains("`exp` on f64 cannot be expressed in the Vulkan flavour"),
        "{e}"
    );
    assert_eq!(bufs[0].to_vec::<f64>().unwrap(), vec![1.0; 4]);
    let k = example("saxpy");
    let e = dev.build_and_run(&k, &NdRange::new(&[4]), &[], &mut bufs).unwrap_err();
    assert!(e.to_string().contains("0 arguments for 4 parameters"), "{e}");
    let big = NdRange::new(&[1 << 20]).with_local(&[1 << 20]);
    let args = [Arg::Buffer(0), Arg::Buffer(0), Arg::scalar(1.0f32), Arg::scalar(0u32)];
    let mut bufs = vec![floats(4, 0.0)];
    let e = dev.build_and_run(&k, &big, &args, &mut bufs).unwrap_err();
    assert!(e.to_string().contains("exceeds the device's"), "{e}");
}

/// Edge cases of the semantics, exactly: subnormals, NaN and out-of-range float-to-int
/// casts, `MIN / -1`, shift amounts past the width, `min`/`max` on ±0 and NaN, and `for`
/// loops whose counter would wrap.
#[test]
fn edge_cases_match_the_interpreter() {
    let Some(dev) = device() else { return };
    let src = "kernel edge(f: ptr<global, f32>, i: ptr<global, i32>, u: ptr<global, u8>, n: ptr<global, f32>) {
  let k: u32 = global_id(0);
  f[k] = f[k] * 0.5 + n[k] * 1e-40;
  i[k] = f[k] as i32 / (n[k] as i32 | -1) + (i[k] << 33) + (i[k] >> 40);
  u[k] = (n[k] * 1e10) as u8;
  n[k] = min(n[k], -n[k]) + max(n[k], 0.0 * n[k]);
  var c: i32 = 0;
  for j: u8 in 200u8 .. 255u8 step 50u8 {
    c = c + j as i32;
  }
  i[k] = i[k] + c;
}";
    let k = parse_module(src).unwrap().kernels.remove(0);
    let fv = [1e-38f32, -3e-39, f32::MIN_POSITIVE, 3e9, -3e9, f32::NAN, f32::INFINITY, -0.0];
    let nv = [0.0f32, -0.0, 1.0, -2.5, f32::NAN, 1e-45, -1e30, 7.0];
    let iv = [i32::MIN, -1, 0, 1, i32::MAX, 12345, -777, 3];
    let bufs = vec![
        Buffer::from_slice(&fv),
        Buffer::from_slice(&iv),
        Buffer::zeroed(kiln_ir::Scalar::U8, 8),
        Buffer::from_slice(&nv),
    ];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::Buffer(3)];
    compare(&dev, &k, &NdRange::new(&[8]), &args, &bufs);
}

/// The device through a `Context`, a `Queue` and the persistent cache.
#[test]
fn context_queue_and_persistent_cache() {
    let Some(dev) = device() else { return };
    common::context_round_trip(std::sync::Arc::new(dev), "vk");
}

/// A damaged program binary is a load error, never a panic or a launch of garbage; an
/// unknown build option is a build error.
#[test]
fn damaged_binaries_do_not_load() {
    let Some(dev) = device() else { return };
    common::damaged_binaries_do_not_load(&dev);
    let m = parse_module("kernel k(x: ptr<global, u32>) { x[global_id(0)] = 1u32; }").unwrap();
    let e = dev.build(&m, "-funroll").unwrap_err();
    assert!(e.to_string().contains("unknown build option `-funroll`"), "{e}");
}
