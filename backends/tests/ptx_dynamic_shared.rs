//! Local arrays past ptxas's 48 KiB of static shared memory: from sm_80 on they share one
//! `.extern` (dynamic) shared window, each array 16-byte aligned in it, the size named on a
//! `// kiln.dynamic_shared_bytes` line for launchers; smaller kernels keep static arrays.
//! `ptxas` (env `KILN_PTXAS`) must accept the dynamic form for sm_80 and sm_90a; without
//! it that part skips with a message (the one skip rule).

use std::process::Command;

use kiln_backends::ptx::{dynamic_shared_bytes, emit_module, Options};
use kiln_ir::parse_module;

/// Two bf16 tiles (the second one's size not a multiple of 16 bytes) and an f32 one:
/// 2 * 20000 + 2 * 4004 + 4 * 1000 bytes of local memory in all, past 48 KiB.
const BIG: &str = "kernel big(o: ptr<global, f32>, h: ptr<global, bf16>) {
    local a: bf16[20000]; local b: bf16[4004]; local c: f32[1000];
    a[19999] = h[0]; b[4003] = h[1]; c[999] = 2.0;
    barrier(local);
    o[0] = a[19999] as f32 + b[4003] as f32 + c[999];
}";

#[test]
fn large_local_arrays_share_one_dynamic_window() {
    let m = parse_module(BIG).unwrap();
    // 40000, then 8008 rounded up to 8016 (the next array stays 16-byte aligned), then 4000.
    let want = 40000 + 8016 + 4000;
    assert_eq!(dynamic_shared_bytes(&m.kernels[0]), want);
    for sm in [80, 90] {
        let ptx = emit_module(&m, &Options::sm(sm)).unwrap();
        assert!(ptx.contains(&format!("// kiln.dynamic_shared_bytes big {want}\n")), "{ptx}");
        assert!(ptx.contains(".extern .shared .align 16 .b8 big_dynamic[];"), "{ptx}");
        assert!(!ptx.contains(".shared .align 16 .b8 big_local"), "{ptx}");
        assert!(ptx.contains("big_dynamic, 40000") || ptx.contains(", 40000;"), "{ptx}");
        assert!(ptx.contains(", 48016;"), "the third array's offset:\n{ptx}");
        assemble(&ptx, sm);
    }
    // A kernel under the static limit keeps `.shared` arrays and needs nothing at launch.
    let small =
        parse_module("kernel s(o: ptr<global, f32>) { local t: f32[12288]; o[0] = t[12287]; }")
            .unwrap();
    assert_eq!(dynamic_shared_bytes(&small.kernels[0]), 0);
    let ptx = emit_module(&small, &Options::sm(90)).unwrap();
    assert!(ptx.contains(".shared .align 16 .b8 s_local1[49152];"), "{ptx}");
    assert!(!ptx.contains(".extern") && !ptx.contains("kiln.dynamic_shared_bytes"), "{ptx}");
    // Before sm_80 there is no dynamic window to fall back on: refused with ptxas's limit.
    let e = emit_module(&m, &Options::sm(75)).unwrap_err().to_string();
    assert!(e.contains("shared") && e.contains("49152"), "{e}");
}

fn assemble(ptx: &str, sm: u32) {
    let Some(ptxas) = kiln_ir::testing::tool("KILN_PTXAS") else { return };
    let dir = std::env::temp_dir().join(format!("kiln-ptx-dyn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let arch = if sm == 90 { "sm_90a".to_string() } else { format!("sm_{sm}") };
    let file = dir.join(format!("big.{arch}.ptx"));
    std::fs::write(&file, ptx).unwrap();
    let out = Command::new(&ptxas)
        .arg(format!("-arch={arch}"))
        .arg(&file)
        .arg("-o")
        .arg(file.with_extension("cubin"))
        .output()
        .expect("run ptxas");
    assert!(
        out.status.success(),
        "ptxas {arch} rejected the dynamic shared window:\n{}\n{ptx}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
