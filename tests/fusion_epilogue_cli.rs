//! `kiln fuse` and `Jit::fuse` with `epilogue = true`: the element-wise kernels run at the
//! matrix product's store; `--explain` says so consumer by consumer, or why the fusion is
//! refused; the fused kernel runs on the interpreter and the cpu device.

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
    assert!(out.contains("120 of its work-items touch one"), "{out}");
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

/// `Jit::fuse` with the same spec: the fused kernel runs on the interpreter and on the cpu
/// device and gives the bits of the three kernels launched one after another.
fn jit_epilogue(dev: kiln::Device) {
    use kiln::{args, FusionSpec, Jit, NdRange};
    let jit = Jit::new(dev).unwrap();
    let src = include_str!("../examples/fusion/epilogue.kir");
    let m = jit.compile_source("epilogue.kir", src).unwrap();
    let spec = FusionSpec::from_toml(include_str!("../examples/fusion/epilogue.toml")).unwrap();
    let fused = jit.fuse(&m, &spec).unwrap();
    let a = jit.buffer_from(&(0..80).map(|i| (i % 7) as f32 - 3.0).collect::<Vec<_>>());
    let b = jit.buffer_from(&(0..96).map(|i| (i % 5) as f32 * 0.5 - 1.0).collect::<Vec<_>>());
    let bias = jit.buffer_from(&(0..12).map(|i| i as f32 - 6.0).collect::<Vec<_>>());
    let sentinel = vec![-7.0f32; 120];
    let (c, out) = (jit.buffer_from(&sentinel), jit.buffer_zeroed::<f32>(120));
    jit.launch(&m, "matmul", NdRange::new(&[16, 16]).with_local(&[16, 4]), args![&a, &b, &c])
        .unwrap()
        .wait()
        .unwrap();
    let one = NdRange::new(&[128]).with_local(&[64]);
    jit.launch(&m, "bias_relu", one, args![&c, &bias, 120u32]).unwrap().wait().unwrap();
    jit.launch(&m, "scale", one, args![&c, &out, 0.75f32, 120u32]).unwrap().wait().unwrap();
    let want = out.read().unwrap();
    let (c2, out2) = (jit.buffer_from(&sentinel), jit.buffer_zeroed::<f32>(120));
    jit.launch_fused(
        &fused,
        &[args![&a, &b, &c2], args![&c2, &bias, 120u32], args![&c2, &out2, 0.75f32, 120u32]],
    )
    .unwrap()
    .wait()
    .unwrap();
    let got = out2.read().unwrap();
    assert_eq!(
        got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        want.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
    assert!(want.iter().any(|&x| x > 0.0) && want.contains(&0.0), "{want:?}");
    // c is internalized: the fused launch leaves it as it was.
    assert_eq!(c2.read().unwrap(), sentinel);
}

#[test]
fn jit_fuse_runs_an_epilogue_on_the_interpreter() {
    jit_epilogue(kiln::Device::interp());
}

#[test]
fn jit_fuse_runs_an_epilogue_on_the_cpu_device() {
    jit_epilogue(kiln::Device::cpu().unwrap());
}
