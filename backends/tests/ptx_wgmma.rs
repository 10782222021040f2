//! The warpgroup (sm_90a) tier in PTX: every form the backend emits for `wgmma` (each
//! element type, swizzle, K-major and MN-major factors, and a range of N), its fence/commit/wait, `frag_elem`, `tma_load`
//! (`cp.async.bulk.tensor`, each swizzle) and the `mbarrier` operations is assembled by
//! `ptxas` for sm_90a (env `KILN_PTXAS`; without it the assembling test skips through the one
//! skip rule unless `KILN_REQUIRE_TOOLS` is set); other targets refuse such kernels by name.

mod ptx_common;

use kiln_backends::ptx::{emit_module, Options};
use kiln_backends::target::ErrorKind;
use kiln_ir::parse_module;
use ptx_common::{assert_assembles, ptx_for};

/// One kernel per (element type, swizzle, major-ness, N): a producer work-item copies A and
/// B with `tma_load` onto a barrier object, the second warpgroup waits, multiplies, and
/// stores its elements. MN-major kernels (`wg_mn_..`) read both factors transposed
/// (`imm-trans` 1), k steps 16 rows down.
fn wgmma_module() -> String {
    let mut src = String::new();
    for (elem, mn) in [("f16", false), ("bf16", false), ("f16", true), ("bf16", true)] {
        for (sw, row) in [("sw128", 64), ("sw64", 32), ("sw32", 16)] {
            let (tag, lay, kk) = match mn {
                false => ("", sw.to_string(), if row == 16 { 64 * 16 } else { 16 }),
                true => ("mn_", format!("{sw}_mn{}", 128 * row), 16 * row),
            };
            for n in [8u32, 64, 128, 256] {
                let last = n / 2 - 1;
                src.push_str(&format!(
                    "kernel wg_{tag}{elem}_{sw}_n{n}(a: ptr<global, {elem}>, b: ptr<global, {elem}>, d: ptr<global, f32>, nk: u32) {{
  local a_s: {elem}[{asz}];
  local b_s: {elem}[{bsz}];
  local bar: u64[2];
  let lin: u32 = local_id(0);
  if lin == 0u32 {{ mbar_init(bar, 0u32, 1u32); mbar_init(bar, 1u32, 128u32); }}
  barrier(local);
  if lin < 128u32 {{
    if lin == 0u32 {{
      for k: u32 in 0u32 .. nk {{
        mbar_wait(bar, 1u32, (k + 1u32) & 1u32);
        mbar_expect_tx(bar, 0u32, {bytes}u32);
        tma_load(a_s, 0u32, a, 1000u32, 999u32, 1024u32, k * {row}u32, 0u32, bar, 0u32, {row}, 64, {sw});
        tma_load(b_s, 0u32, b, 1000u32, 777u32, 1000u32, k * {row}u32, 64u32, bar, 0u32, {row}, {n}, {sw});
      }}
    }}
  }} else {{
    let z: frag<acc, m64n{n}k16, f32> = frag_fill(0.0f32);
    var acc: frag<acc, m64n{n}k16, f32> = z;
    for k: u32 in 0u32 .. nk {{
      mbar_wait(bar, 0u32, k & 1u32);
      wgmma_fence();
      wgmma(acc, a_s, 0u32, b_s, 0u32, {lay}, {lay});
      wgmma(acc, a_s, {kk}u32, b_s, {kk}u32, {lay}, {lay});
      wgmma_commit();
      wgmma_wait(1);
      wgmma_wait(0);
      mbar_arrive(bar, 1u32);
    }}
    let v0: f32 = frag_elem(acc, 0);
    let v1: f32 = frag_elem(acc, {last});
    d[lin] = v0 + v1;
  }}
}}

",
                    asz = 64 * row,
                    bsz = n * row,
                    bytes = (64 + n) * row * 2,
                ));
            }
        }
    }
    src.push_str(
        "kernel tma_plain(a: ptr<global, f32>, d: ptr<global, f32>) {
  local s: f32[1024];
  local bar: u64[1];
  if local_id(0) == 0u32 {
    mbar_init(bar, 0u32, 1u32);
    mbar_expect_tx(bar, 0u32, 4096u32);
    tma_load(s, 0u32, a, 100u32, 100u32, 100u32, 4u32, 8u32, bar, 0u32, 32, 32, noswizzle);
  }
  barrier(local);
  mbar_wait(bar, 0u32, 0u32);
  d[local_id(0)] = s[local_id(0)];
}
",
    );
    src
}

#[test]
fn emitted_forms_are_the_isa_s() {
    let m = parse_module(&wgmma_module()).unwrap();
    let ptx = emit_module(&m, &Options::sm(90)).unwrap();
    for form in [
        ".target sm_90a",
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16",
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16",
        "wgmma.fence.sync.aligned",
        "wgmma.commit_group.sync.aligned",
        "wgmma.wait_group.sync.aligned 1",
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
        "mbarrier.init.shared::cta.b64",
        "mbarrier.arrive.expect_tx.shared::cta.b64",
        "mbarrier.arrive.shared::cta.b64",
        "mbarrier.try_wait.parity.shared::cta.b64",
        ".shared .align 1024",
        "// kiln.tensor_map wg_bf16_sw128_n64 0 a bf16 1000 999 1024 64 64 sw128",
        "// kiln.tensor_map wg_bf16_sw128_n64 1 b bf16 1000 777 1000 64 64 sw128",
        "// kiln.tensor_map tma_plain 0 a f32 100 100 100 32 32 noswizzle",
        ".param .u64 wg_f16_sw32_n8_tmap_1",
    ] {
        assert!(ptx.contains(form), "no `{form}` in the PTX");
    }
    // The descriptors' constant parts: stride byte offset 8 rows of the span, the mode, and
    // the leading byte offset (K-major: unused, 1; MN-major: the stride between MN groups).
    for (span, mode) in [(128u64, 1u64), (64, 2), (32, 3)] {
        for lead in [1, (64 * span) >> 4] {
            let hi = (lead << 16) | (((8 * span) >> 4) << 32) | (mode << 62);
            assert!(ptx.contains(&format!(", {hi};")), "descriptor of the {span}-byte swizzle");
        }
    }
    // K-major factors are not transposed, MN-major ones are.
    let entry = |name: &str| ptx.split(".entry ").find(|e| e.starts_with(name)).unwrap();
    assert!(entry("wg_bf16_sw64_n64(").contains(", 1, 1, 0, 0;"));
    assert!(entry("wg_mn_bf16_sw64_n64(").contains(", 1, 1, 1, 1;"));
}

#[test]
fn ptxas_accepts_every_form_for_sm_90a() {
    let Some(ptxas) = kiln_ir::testing::tool("KILN_PTXAS") else { return };
    let m = parse_module(&wgmma_module()).unwrap();
    let dir = std::env::temp_dir().join(format!("kiln-ptx-wgmma-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for optimize in [false, true] {
        let ptx = ptx_for(&m, 90, optimize);
        assert_eq!(ptx.matches("wgmma.mma_async").count(), 2 * 4 * 3 * 4, "-O {optimize}");
        let stem = format!("wgmma.{optimize}");
        assert_assembles(&ptxas, "--gpu-name=sm_90a", "sm_90a", &dir, &stem, &ptx);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn other_targets_refuse_by_name() {
    let m = parse_module(&wgmma_module()).unwrap();
    for sm in [80, 89, 100] {
        let e = emit_module(&m, &Options::sm(sm)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Unsupported);
        assert!(e.message.contains("needs sm_90a (sm_90 exactly)"), "{e}");
    }
    let e = emit_module(&m, &Options { sm: 90, ptx_version: Some((7, 8)) }).unwrap_err();
    assert!(e.message.contains("needs PTX ISA 8.0 or newer"), "{e}");
    // A run-time tensor shape cannot be encoded into the map.
    let k = parse_module(
        "kernel k(a: ptr<global, f32>, w: u32) {
  local s: f32[1024];
  local bar: u64[1];
  mbar_init(bar, 0u32, 1u32);
  tma_load(s, 0u32, a, w, 100u32, 100u32, 0u32, 0u32, bar, 0u32, 32, 32, noswizzle);
}",
    )
    .unwrap();
    let e = emit_module(&k, &Options::sm(90)).unwrap_err();
    assert!(e.message.contains("must be constants"), "{e}");
}

/// A producer warpgroup lowering its register budget and two consumers raising theirs.
const SETMAXNREG: &str = "kernel regs(d: ptr<global, f32>) #reqd_work_group_size(384, 1, 1) {
  let lin: u32 = local_id(0);
  if lin < 128u32 {
    setmaxnreg_dec(40);
  } else {
    setmaxnreg_inc(232);
    d[lin] = 1.0f32;
  }
}
";

#[test]
fn setmaxnreg_declares_the_entry_register_count_and_assembles() {
    let m = parse_module(SETMAXNREG).unwrap();
    let ptx = emit_module(&m, &Options::sm(90)).unwrap();
    for form in [
        "setmaxnreg.dec.sync.aligned.u32 40;",
        "setmaxnreg.inc.sync.aligned.u32 232;",
        ".reqntid 384, 1, 1\n.minnctapersm 1\n",
    ] {
        assert!(ptx.contains(form), "no `{form}` in the PTX:\n{ptx}");
    }
    // Without a fixed work-group size ptxas cannot know the count the budgets start from.
    let open = SETMAXNREG.replace(" #reqd_work_group_size(384, 1, 1)", "");
    let e = emit_module(&parse_module(&open).unwrap(), &Options::sm(90)).unwrap_err();
    assert!(e.message.contains("uses `setmaxnreg` without `#reqd_work_group_size`"), "{e}");
    // The warpgroup tier: sm_90a only.
    let e = emit_module(&m, &Options::sm(80)).unwrap_err();
    assert!(e.message.contains("needs sm_90a (sm_90 exactly)"), "{e}");
    let Some(ptxas) = kiln_ir::testing::tool("KILN_PTXAS") else { return };
    let dir = std::env::temp_dir().join(format!("kiln-ptx-setmaxnreg-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("regs.ptx");
    std::fs::write(&f, &ptx).unwrap();
    let out = std::process::Command::new(&ptxas)
        .args(["--gpu-name=sm_90a", "-v"])
        .arg(&f)
        .arg("-o")
        .arg(dir.join("regs.cubin"))
        .output()
        .expect("run ptxas");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    // ptxas honours the instructions (no C7508 "'setmaxnreg' ignored") and allocates the
    // whole entry budget: 65536 registers / 384 work-items, rounded down to 8.
    assert!(!log.contains("C7508") && !log.contains("ignored"), "{log}");
    assert!(log.contains("Used 168 registers"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}
