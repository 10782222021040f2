//! Issue 13: the Vulkan flavour uses no instruction whose result the Vulkan environment
//! leaves undefined or looser than kiln's semantics for some operands (the runtime's
//! `vulkan_diff` tests check the values, on lavapipe and on NVIDIA's driver). Each test
//! fails on the lowering the backend had before.

use kiln_backends::spirv::{emit, Flavour};
use kiln_ir::parse_module;

fn vulkan_text(src: &str) -> String {
    let k = parse_module(src).unwrap().kernels.remove(0);
    emit(&k, Flavour::Vulkan).unwrap().disassemble()
}

/// The result-type id of `OpTypeFloat 32` in a disassembly.
fn f32_type(text: &str) -> String {
    let line = text.lines().find(|l| l.ends_with("OpTypeFloat 32")).expect("f32 declared");
    line.split(" = ").next().unwrap().trim().to_string()
}

/// Vulkan leaves `OpSRem`/`OpSMod` undefined for negative operands (NVIDIA gave
/// `-42 % -2 == -42`) and `OpSDiv` for `MIN / -1`.
#[test]
fn signed_remainder_uses_no_srem_smod_or_sdiv() {
    let text = vulkan_text(
        "kernel r(a: ptr<global, i32>, b: ptr<global, i64>, c: ptr<global, i8>, d: ptr<global, i16>) {
  let k: u32 = global_id(0);
  a[k] = a[k] % a[k + 1] + a[k] / a[k + 2];
  b[k] = b[k] % b[k + 1] + b[k] / b[k + 2];
  c[k] = c[k] % c[k + 1] + c[k] / c[k + 2];
  d[k] = d[k] % d[k + 1] + d[k] / d[k + 2];
}",
    );
    for op in ["OpSRem", "OpSMod", "OpSDiv"] {
        assert!(!text.contains(op), "{op} in the Vulkan flavour:\n{text}");
    }
    assert!(text.contains("OpUMod") && text.contains("OpUDiv"), "{text}");
    // The OpenCL flavour, where `OpSRem` is defined for every sign, keeps it.
    let k = parse_module("kernel r(a: ptr<global, i32>) { a[0] = a[1] % a[2]; }").unwrap();
    let cl = emit(&k.kernels[0], Flavour::OpenCl).unwrap().disassemble();
    assert!(cl.contains("OpSRem"), "{cl}");
}

/// GLSL.std.450 `Fma` may round twice (lavapipe's does), `OpFDiv` is 2.5 ULP and `Sqrt`
/// only as exact as `1 / InverseSqrt`: on f32 none of them is used, the f64 sequences that
/// replace them are.
#[test]
fn f32_fma_division_and_sqrt_use_no_inexact_instruction() {
    let text = vulkan_text(
        "kernel f(x: ptr<global, f32>) {
  let k: u32 = global_id(0);
  x[k] = fma(x[k], x[k + 1], x[k + 2]) + sqrt(x[k]) / x[k + 3];
}",
    );
    let f = f32_type(&text);
    assert!(!text.contains(" Fma "), "GLSL Fma used:\n{text}");
    for l in text.lines() {
        let f32_result = l.split_whitespace().nth(3) == Some(f.as_str());
        assert!(
            !(f32_result && (l.contains("OpFDiv") || l.contains(" Sqrt "))),
            "an f32 `{l}` in:\n{text}"
        );
    }
    assert!(text.contains("OpFDiv") && text.contains(" Sqrt "), "{text}");
}

/// f64 `fma` is refused with its name, never emitted as a twice-rounding `Fma`.
#[test]
fn f64_fma_is_refused() {
    let k = parse_module("kernel g(x: ptr<global, f64>) { x[0] = fma(x[1], x[2], x[3]); }")
        .unwrap()
        .kernels
        .remove(0);
    let e = emit(&k, Flavour::Vulkan).unwrap_err();
    assert!(
        e.to_string().contains("`fma` on f64 cannot be expressed in the Vulkan flavour"),
        "{e}"
    );
    assert!(emit(&k, Flavour::OpenCl).is_ok());
}

/// NVIDIA's Vulkan driver flushed f32 subnormals (`1e-38 * 0.5` gave 0): every module that
/// uses a float width asks for `DenormPreserve` on it, and only then.
#[test]
fn float_widths_in_use_preserve_subnormals() {
    let text = vulkan_text("kernel s(x: ptr<global, f32>) { x[0] = x[1] * 0.5; }");
    assert!(text.contains("DenormPreserve 32"), "{text}");
    assert!(!text.contains("DenormPreserve 64"), "{text}");
    assert!(text.contains("SPV_KHR_float_controls"), "{text}");
    let text = vulkan_text("kernel s(x: ptr<global, f64>) { x[0] = x[1] * 0.5; }");
    assert!(text.contains("DenormPreserve 64") && !text.contains("DenormPreserve 32"), "{text}");
    let text = vulkan_text("kernel s(x: ptr<global, u32>) { x[0] = x[1] * 2u32; }");
    assert!(!text.contains("DenormPreserve"), "{text}");
}
