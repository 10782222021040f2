//! Every module the SPIR-V backend emits here passes `spirv-val` for its target
//! environment: all examples, hand cases for each IR construct, and random kernels.
//!
//! The validator is `$KILN_SPIRV_VAL` (set by `cargo xtask test`); without it the tests
//! skip with a message, unless `KILN_REQUIRE_TOOLS` is set, when they fail.

use std::path::{Path, PathBuf};

use kiln_backends::spirv::{emit, Flavour};
use kiln_ir::testing::{seeded_cases, GenConfig};
use kiln_ir::{parse_module, Kernel};

fn validator() -> Option<PathBuf> {
    kiln_ir::testing::tool("KILN_SPIRV_VAL")
}

/// Emits and validates `k` in `flavour`; returns the validator's complaint, if any.
fn check(val: &Path, k: &Kernel, flavour: Flavour) -> Result<(), String> {
    let m = emit(k, flavour).map_err(|e| e.to_string())?;
    m.validate(val).map_err(|why| {
        format!(
            "spirv-val ({flavour:?}) rejects `{}`:\n{why}\n{}\n{}",
            k.name(),
            k,
            m.disassemble().chars().take(4000).collect::<String>()
        )
    })
}

/// The documented rejections: f64 transcendentals on Vulkan; f16 and 64-bit atomics on
/// OpenCL.
fn documented_rejection(f: Flavour, e: &kiln_backends::target::BackendError) -> bool {
    let m = &e.message;
    match f {
        Flavour::Vulkan => m.contains("on f64 cannot be expressed"),
        Flavour::OpenCl => {
            m.contains("f16 is not supported") || m.contains("64-bit atomics are not supported")
        }
    }
}

fn examples() -> Vec<Kernel> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");
    let mut out = Vec::new();
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "kir"))
        .collect();
    paths.sort();
    for p in paths {
        let src = std::fs::read_to_string(&p).unwrap();
        out.extend(parse_module(&src).unwrap_or_else(|e| panic!("{}: {e:?}", p.display())).kernels);
    }
    assert!(out.len() >= 4, "examples found: {}", out.len());
    out
}

#[test]
fn examples_validate_in_both_flavours() {
    let Some(val) = validator() else { return };
    for k in examples() {
        for f in [Flavour::Vulkan, Flavour::OpenCl] {
            check(&val, &k, f).unwrap();
        }
    }
}

/// One kernel per construct: every operator on every type family, casts between all
/// scalar types, intrinsics, built-ins, control flow, arrays, barriers, fences, atomics.
const HAND: &str = include_str!("spirv_cases.kir");

fn hand_cases() -> Vec<Kernel> {
    parse_module(HAND).unwrap_or_else(|e| panic!("{e:?}")).kernels
}

#[test]
fn hand_cases_validate_in_both_flavours() {
    let Some(val) = validator() else { return };
    let cases = hand_cases();
    assert!(cases.len() >= 8);
    let mut validated = 0;
    for k in cases {
        for f in [Flavour::Vulkan, Flavour::OpenCl] {
            match emit(&k, f) {
                Ok(_) => {
                    check(&val, &k, f).unwrap();
                    validated += 1;
                }
                Err(e) => assert!(documented_rejection(f, &e), "{e}"),
            }
        }
    }
    // Only `atomics` (64-bit atomics) is rejected, by the OpenCL flavour.
    assert_eq!(validated, 2 * hand_cases().len() - 1);
}

/// Emits `kernels` in both flavours and validates every module emitted; a refusal must be
/// documented ([`documented_rejection`]). Returns how many each flavour refused (Vulkan,
/// OpenCL), so that a backend that starts refusing more fails its bound.
fn validate_counting(val: &Path, kernels: impl Iterator<Item = Kernel>) -> [usize; 2] {
    let mut refused = [0; 2];
    for k in kernels {
        for (i, f) in [Flavour::Vulkan, Flavour::OpenCl].into_iter().enumerate() {
            match emit(&k, f) {
                Ok(_) => check(val, &k, f).unwrap_or_else(|e| panic!("{e}\n{k}")),
                Err(e) => {
                    assert!(documented_rejection(f, &e), "{e}\n{k}");
                    refused[i] += 1;
                }
            }
        }
    }
    refused
}

#[test]
fn random_kernels_validate_in_both_flavours() {
    let Some(val) = validator() else { return };
    let cfg = GenConfig { approx_intrinsics: true, ..GenConfig::default() };
    let refused = validate_counting(
        &val,
        seeded_cases(0x9e37_79b9_7f4a_7c15, &cfg).take(150).map(|c| c.kernel),
    );
    // Measured when the bound was set: 13 refused by Vulkan (f64 transcendentals and f64
    // `fma`), 99 by OpenCL (nearly all f16; the generator uses f16 in most kernels). The
    // bounds sit just above, so a flavour that starts refusing more fails here.
    eprintln!("of 150 random kernels, refused: {refused:?} (Vulkan, OpenCL)");
    assert!(refused[0] <= 15 && refused[1] <= 103, "refused: {refused:?} (Vulkan, OpenCL)");
}

/// Random kernels after the default `-O` pipeline (fused `mad`/`add3`, induction variables,
/// CSE lets) validate in both flavours.
#[test]
fn optimized_random_kernels_validate_in_both_flavours() {
    let Some(val) = validator() else { return };
    let cfg = GenConfig::default();
    let kernels = seeded_cases(0x2545_f491_4f6c_dd1d, &cfg)
        .take(60)
        .map(|c| kiln_passes::pipeline::optimize(&c.kernel));
    let refused = validate_counting(&val, kernels);
    // Measured when the bound was set: 1 (Vulkan), 25 (OpenCL); see above.
    eprintln!("of 60 optimized random kernels, refused: {refused:?} (Vulkan, OpenCL)");
    assert!(refused[0] <= 2 && refused[1] <= 27, "refused: {refused:?} (Vulkan, OpenCL)");
}
