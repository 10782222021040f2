//! Matrix operations and bf16 in PTX: every instruction form the backend emits for them is
//! assembled by `ptxas` (env `KILN_PTXAS`) for sm_80 and sm_90a, and the forms are the ones
//! the PTX ISA names. Without `KILN_PTXAS` the assembling tests skip with a message (the one
//! skip rule), unless `KILN_REQUIRE_TOOLS` is set, when they fail.

mod ptx_common;

use kiln_backends::ptx::{emit_module, Options};
use kiln_backends::target::ErrorKind;
use kiln_ir::parse_module;
use ptx_common::{assert_assembles, ptx_for};

/// One kernel per combination: shape × element type × layout of `a` and `b` × memory (local
/// through `ldmatrix`, or global), with an accumulator loaded, stored, filled, and a K loop.
fn mma_module() -> String {
    let mut src = String::new();
    for shape in ["m16n8k16", "m16n16k16"] {
        for elem in ["f16", "bf16"] {
            for la in ["row", "col"] {
                for lb in ["row", "col"] {
                    for (space, a, b) in [("local", "sa", "sb"), ("global", "ga", "gb")] {
                        let n = if shape == "m16n8k16" { 8 } else { 16 };
                        src.push_str(&format!(
                            "kernel mma_{shape}_{elem}_{la}{lb}_{space}(ga: ptr<global, {elem}>, gb: ptr<global, {elem}>, d: ptr<global, f32>, nk: u32) {{
  local sa: {elem}[512];
  local sb: {elem}[512];
  local sd: f32[256];
  let t: u32 = local_id(0);
  copy_async(sa, t * 8u32, ga, t * 8u32, 8);
  copy_async(sb, t * 8u32, gb, t * 8u32, 8);
  async_commit();
  async_wait(0);
  barrier(local);
  let z: frag<acc, {shape}, f32> = frag_fill(0.0f32);
  var acc: frag<acc, {shape}, f32> = z;
  for k: u32 in 0u32 .. nk {{
    let fa: frag<a, {shape}, {elem}> = frag_load({a}, k * 256u32, 16u32, {la});
    let fb: frag<b, {shape}, {elem}> = frag_load({b}, k * 256u32, 16u32, {lb});
    let r: frag<acc, {shape}, f32> = mma(fa, fb, acc);
    acc = r;
  }}
  frag_store(sd, 0u32, {n}u32, row, acc);
  let c: frag<acc, {shape}, f32> = frag_load(sd, 0u32, {n}u32, col);
  frag_store(d, 0u32, {n}u32, {la}, c);
}}

"
                        ));
                    }
                }
            }
        }
    }
    src.push_str(
        "kernel copies(g: ptr<global, f32>, h: ptr<global, f16>, d: ptr<global, f32>) {
  local s: f32[128];
  local sh: f16[128];
  let t: u32 = local_id(0);
  copy_async(s, t, g, t, 1);
  copy_async(s, t * 2u32, g, t * 2u32, 2);
  copy_async(sh, t * 2u32, h, t * 2u32, 2);
  async_commit();
  async_wait(1);
  async_wait(0);
  barrier(local);
  d[t] = s[t];
}

kernel fills(h: ptr<global, bf16>, x: f32) {
  let v: bf16 = x as bf16;
  let fa: frag<a, m16n8k16, bf16> = frag_fill(v);
  let fb: frag<b, m16n8k16, bf16> = frag_fill(h[0u32]);
  let c: frag<acc, m16n8k16, f32> = frag_fill(x);
  let r: frag<acc, m16n8k16, f32> = mma(fa, fb, c);
  local sd: f32[128];
  frag_store(sd, 0u32, 8u32, row, r);
  barrier(local);
  h[local_id(0)] = sd[local_id(0)] as bf16;
}

kernel bf16_casts(x: ptr<global, f32>, y: ptr<global, bf16>, z: ptr<global, f32>) {
  let i: u32 = global_id(0);
  y[i] = x[i] as bf16;
  z[i] = y[i] as f32;
}
",
    );
    src
}

#[test]
fn emitted_forms_are_the_isa_s() {
    let m = parse_module(&mma_module()).unwrap();
    let ptx = emit_module(&m, &Options::sm(80)).unwrap();
    for form in [
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
        "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
        "ldmatrix.sync.aligned.m8n8.x2.shared.b16",
        "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
        "cp.async.cg.shared.global",
        "cp.async.ca.shared.global",
        "cp.async.commit_group",
        "cp.async.wait_group 1",
        "cvt.rn.bf16.f32",
    ] {
        assert!(ptx.contains(form), "no `{form}` in the PTX");
    }
    assert!(ptx.contains(".target sm_80"));
}

#[test]
fn ptxas_accepts_every_form_for_sm_80_and_sm_90a() {
    let Some(ptxas) = kiln_ir::testing::tool("KILN_PTXAS") else { return };
    let m = parse_module(&mma_module()).unwrap();
    let dir = std::env::temp_dir().join(format!("kiln-ptx-mma-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (sm, arch, optimize) in
        [(80, "sm_80", false), (90, "sm_90a", false), (80, "sm_80", true), (90, "sm_90a", true)]
    {
        // As written, and through the build driver's -O pipeline (what devices run).
        let ptx = ptx_for(&m, sm, optimize);
        // 16 m16n8k16 kernels, 16 m16n16k16 kernels (two steps each) and `fills`.
        assert_eq!(ptx.matches("mma.sync").count(), 16 + 32 + 1, "{arch} -O {optimize}");
        let stem = format!("mma.{arch}.{optimize}");
        assert_assembles(&ptxas, &format!("-arch={arch}"), arch, &dir, &stem, &ptx);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn older_targets_and_double_rounding_casts_are_refused_by_name() {
    let m = parse_module(&mma_module()).unwrap();
    let e = emit_module(&m, &Options::sm(75)).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unsupported);
    assert!(e.message.contains("needs sm_80 or newer; the target is sm_75"), "{e}");
    let k = parse_module(
        "kernel k(x: ptr<global, f64>, y: ptr<global, bf16>) { y[0u32] = x[0u32] as bf16; }",
    )
    .unwrap();
    let e = emit_module(&k, &Options::sm(90)).unwrap_err();
    assert!(e.message.contains("cast from f64 to bf16 is not lowered for PTX"), "{e}");
    // Kernels without matrix operations or bf16 keep an older target.
    let k = parse_module("kernel k(x: ptr<global, f32>) { x[0u32] = 1.0f32; }").unwrap();
    assert!(emit_module(&k, &Options::sm(75)).unwrap().contains(".target sm_75"));
}
