//! `kiln fuse` with `epilogue = true`: the element-wise kernels run at the matrix product's
//! store; `--explain` says so consumer by consumer, or why the fusion is refused.

use std::process::Command;

fn kiln(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("kiln runs")
}

#[test]
fn epilogue_spec_fuses_into_the_store() {
    let o =
        kiln(&["fuse", "examples/fusion/epilogue.kir", "--spec", "examples/fusion/epilogue.toml"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    // One kernel over the product's range; c internalized (not a parameter), no barrier.
    assert!(out.contains("kernel matmul_bias_relu_scale(matmul_a: ptr<global, f32>, matmul_b: ptr<global, f32>, bias_relu_bias: ptr<global, f32>, scale_out: ptr<global, f32>, scale_alpha: f32)"), "{out}");
    assert!(out.contains("#nd_range(global = [16, 16], local = [16, 4]"), "{out}");
    assert!(out.contains("promoted(private, 1)") && !out.contains("barrier"), "{out}");
    // It parses back and runs: `kiln fmt --check` accepts it.
    let dir = std::env::temp_dir().join(format!("kiln-epi-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("fused.kir");
    std::fs::write(&f, out.as_bytes()).unwrap();
    let o = kiln(&["fmt", "--check", f.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    let o = kiln(&[
        "fuse",
        "examples/fusion/epilogue.kir",
        "--spec",
        "examples/fusion/epilogue.toml",
        "--explain",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("entry 1 (`bias_relu`) runs at 1 store(s) of `c`"), "{out}");
    assert!(out.contains("120 of its work-items do"), "{out}");
    assert!(out.lines().any(|l| l == "epilogue fusion: done"), "{out}");
}

#[test]
fn explain_names_why_an_epilogue_is_refused() {
    let o = kiln(&[
        "fuse",
        "examples/fusion/epilogue.kir",
        "--spec",
        "examples/fusion/epilogue_stencil.toml",
        "--explain",
    ]);
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("epilogue fusion refused: rule `epilogue`: entry 1 (`smooth`) cannot run at the stores of the kernels before it: work-item [0, 0, 0] accesses two elements of `matmul_c`"), "{out}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("rule `epilogue`"), "{err}");
}
