//! Targets without a lowering for matrix operations or bf16 refuse such kernels by name
//! (never a panic, never wrong code): SPIR-V's OpenCL flavour, the AMDGPU-like target and
//! x86; SPIR-V's Vulkan flavour lowers the sub-group operations (backends/tests/
//! spirv_matrix.rs) and refuses bf16 and the warpgroup tier.

use kiln_backends::registry::target;
use kiln_backends::target::ErrorKind;
use kiln_ir::{parse_module, Verified};

const MATRIX: &str = "kernel k(a: ptr<global, f16>, d: ptr<global, f32>) {
  let fa: frag<a, m16n8k16, f16> = frag_load(a, 0u32, 16u32, row);
  let fb: frag<b, m16n8k16, f16> = frag_load(a, 0u32, 8u32, col);
  let c: frag<acc, m16n8k16, f32> = frag_fill(0.0f32);
  let r: frag<acc, m16n8k16, f32> = mma(fa, fb, c);
  frag_store(d, 0u32, 8u32, row, r);
}";

const BF16: &str = "kernel k(x: ptr<global, f32>, y: ptr<global, bf16>) {
  let i: u32 = global_id(0);
  y[i] = x[i] as bf16;
}";

#[test]
fn matrix_operations_and_bf16_are_refused_by_name() {
    let options = Default::default();
    for (name, matrix_words, bf16_words) in [
        (
            "spirv-cl",
            "matrix operation `frag_load`: matrix operations are emitted for the Vulkan flavour \
             only",
            "bf16 is not yet emitted for SPIR-V",
        ),
        (
            "amdgpu",
            "matrix operation `frag_load` is not lowered for amdgpu",
            "bf16 is not lowered for amdgpu",
        ),
        (
            "x86",
            "matrix operation `frag_load` is not lowered by the x86 backend",
            "bf16 is not lowered by the x86 backend",
        ),
    ] {
        let t = target(name, &options).unwrap();
        for (src, words) in [(MATRIX, matrix_words), (BF16, bf16_words)] {
            let m = Verified::new(parse_module(src).unwrap()).unwrap();
            let e = match t.emit_any(&m) {
                Ok(_) => panic!("{name} emitted a kernel it cannot lower"),
                Err(e) => e,
            };
            assert_eq!(e.kind, ErrorKind::Unsupported, "{name}: {e}");
            assert!(e.to_string().contains(words), "{name}: {e}");
        }
    }
}

const WARPGROUP: &str = "kernel k(d: ptr<global, f32>) {
  local s: bf16[4096];
  let z: frag<acc, m64n64k16, f32> = frag_fill(0.0f32);
  var acc: frag<acc, m64n64k16, f32> = z;
  wgmma_fence();
  wgmma(acc, s, 0u32, s, 0u32, sw128, sw128);
  wgmma_commit();
  wgmma_wait(0);
  let v: f32 = frag_elem(acc, 0);
  d[local_id(0)] = v;
}";

#[test]
fn warpgroup_operations_are_refused_by_name() {
    let options = Default::default();
    for (name, words) in [
        ("spirv-vk", "matrix operation `frag_fill`: the warpgroup (sm_90) tier has no SPIR-V"),
        ("spirv-cl", "matrix operation `frag_fill`: the warpgroup (sm_90) tier has no SPIR-V"),
        ("amdgpu", "is not lowered for amdgpu"),
        ("x86", "is not lowered by the x86 backend"),
    ] {
        let t = target(name, &options).unwrap();
        let m = Verified::new(parse_module(WARPGROUP).unwrap()).unwrap();
        let e = match t.emit_any(&m) {
            Ok(_) => panic!("{name} emitted a warpgroup kernel"),
            Err(e) => e,
        };
        assert_eq!(e.kind, ErrorKind::Unsupported, "{name}: {e}");
        assert!(e.to_string().contains(words), "{name}: {e}");
    }
}
