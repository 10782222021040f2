//! `kiln gen tc-gemm` from the command line: the printed tensor-core GEMM passes `kiln check`
//! and `kiln fmt --check`, runs on the interpreter to the right product (with and without a
//! fused epilogue), lowers to PTX with `mma.sync`; bad requests fail with a reason.

mod common;

use common::{kiln, ok, scratch, text};

#[test]
fn tc_gemm_generates_checks_runs_and_lowers() {
    let small = ["--block", "16x8", "--warps", "1x1", "--k-tile", "16"];
    // A is 4 x 2 (0..7), B is 2 x 3 (0..5), as in docs/generator.md's first example.
    let f = scratch("gen-tc-cli", "g.kir");
    let fs = f.to_str().unwrap();
    let mut args = vec!["gen", "tc-gemm", "4", "3", "2", "--type", "f16", "-o", fs];
    args.extend(small);
    ok(&args);
    ok(&["check", fs]);
    ok(&["fmt", "--check", fs]);
    let out = ok(&[
        "run",
        fs,
        "--device",
        "interp",
        "--arg",
        "a=iota:8",
        "--arg",
        "b=iota:6",
        "--arg",
        "c=zeros:12",
    ]);
    assert!(
        out.contains(
            "c: f32[12] = [3.0, 4.0, 5.0, 9.0, 14.0, 19.0, 15.0, 24.0, 33.0, 21.0, 34.0, 47.0]"
        ),
        "{out}"
    );
    // bias (0, 1, 2 by column), then relu, fused; bf16 inputs and output.
    let g = scratch("gen-tc-cli", "g2.kir");
    let gs = g.to_str().unwrap();
    let mut args =
        vec!["gen", "tc-gemm", "4", "3", "2", "--out", "bf16", "--epilogue", "bias,relu", "-o", gs];
    args.extend(small);
    ok(&args);
    let out = ok(&[
        "run",
        gs,
        "--device",
        "interp",
        "--arg",
        "a=iota:8",
        "--arg",
        "b=iota:6",
        "--arg",
        "c=zeros:12",
        "--arg",
        "bias=iota:3",
    ]);
    assert!(
        out.contains(
            "c: bf16[12] = [3.0, 5.0, 7.0, 9.0, 15.0, 21.0, 15.0, 25.0, 35.0, 21.0, 35.0, 49.0]"
        ),
        "{out}"
    );
    let ptx = ok(&["emit", gs, "--target", "ptx", "-O"]);
    assert!(ptx.contains("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"), "{ptx}");
}

#[test]
fn tc_gemm_refusals_say_why() {
    for (args, why) in [
        (&["gen", "tc-gemm", "4", "4", "4", "--k-tile", "24"][..], "multiple of 16"),
        (
            &["gen", "tc-gemm", "4", "4", "4", "--epilogue", "bias,tanh"],
            "unknown epilogue operation `tanh`",
        ),
        (&["gen", "tc-gemm", "0", "4", "4"], "M = 0"),
        (
            &[
                "gen", "tc-gemm", "4", "4", "4", "--block", "256x256", "--stages", "4", "--k-tile",
                "64",
            ],
            "227 KiB",
        ),
        (&["tune", "tc-gemm", "4", "4", "4", "-o", "t.kir"], "does not write tensor-core kernels"),
    ] {
        let o = kiln(args);
        assert_eq!(o.status.code(), Some(1), "kiln {args:?}");
        let err = text(&o.stderr);
        assert!(err.contains(why), "kiln {args:?}: {err}");
    }
    let c = ok(&["gen", "tc-gemm", "4096", "4096", "4096", "--candidates"]);
    assert!(c.lines().count() > 4 && c.starts_with("block=128x256x32 warps=2x4 stages=4"), "{c}");
}

#[test]
fn tc_gemm_sm_90_generates_runs_and_lowers_for_sm_90a() {
    // A is 4 x 2 (0..7), B stored 3 x 8 (N x K, zero past k = 2 would change nothing: K = 8).
    let f = scratch("gen-tc-cli", "g90.kir");
    let fs = f.to_str().unwrap();
    ok(&[
        "gen",
        "tc-gemm",
        "4",
        "3",
        "8",
        "--type",
        "f16",
        "--trans-b",
        "--arch",
        "sm_90",
        "-o",
        fs,
    ]);
    ok(&["check", fs]);
    ok(&["fmt", "--check", fs]);
    let out = ok(&[
        "run",
        fs,
        "--device",
        "interp",
        "--arg",
        "a=iota:32",
        "--arg",
        "b=iota:24",
        "--arg",
        "c=zeros:12",
    ]);
    // C[i][j] = sum_k (8i + k)(8j + k).
    let want: Vec<String> = (0..4)
        .flat_map(|i| (0..3).map(move |j| (0..8).map(|k| (8 * i + k) * (8 * j + k)).sum::<i32>()))
        .map(|v| format!("{v}.0"))
        .collect();
    assert!(out.contains(&format!("c: f32[12] = [{}]", want.join(", "))), "{out}");
    let ptx = ok(&["emit", fs, "--target", "ptx", "-O"]);
    assert!(ptx.contains(".target sm_90a") && ptx.contains("wgmma.mma_async"), "{ptx}");
    assert!(
        ptx.contains("// kiln.tensor_map tc90_gemm_nt_f16_f32_4x3x8 0 a f16 8 4 8 64 128 sw128")
    );
    // A stored K x M (--trans-a) and B stored K x N: both factors MN-major, K free of the
    // multiple of 8. A (2 x 8, K x M) is 0..15, B (2 x 8) is 0..15: C[i][j] = sum_k (8k + i)(8k + j).
    let t = scratch("gen-tc-cli", "g90t.kir");
    let ts = t.to_str().unwrap();
    ok(&["gen", "tc-gemm", "8", "8", "2", "--trans-a", "--arch", "sm_90", "-o", ts]);
    ok(&["check", ts]);
    let out = ok(&[
        "run",
        ts,
        "--device",
        "interp",
        "--arg",
        "a=iota:16",
        "--arg",
        "b=iota:16",
        "--arg",
        "c=zeros:64",
    ]);
    let want: Vec<String> = (0..8)
        .flat_map(|i| (0..8).map(move |j| (0..2).map(|k| (8 * k + i) * (8 * k + j)).sum::<i32>()))
        .map(|v| format!("{v}.0"))
        .collect();
    // The print elides the middle of long buffers: its first 8 and last 4 elements.
    let shown = format!("c: f32[64] = [{}, ..., {}]", want[..8].join(", "), want[60..].join(", "));
    assert!(out.contains(&shown), "{out}\n{shown}");
    let ptx = ok(&["emit", ts, "--target", "ptx"]);
    assert!(ptx.contains(", 1, 1, 1, 1;"), "{ptx}");
    // Persistent tiles and register budgets: 4 tiles of 128 x 64 on 3 work-groups, the
    // same product.
    let p = scratch("gen-tc-cli", "g90p.kir");
    let ps = p.to_str().unwrap();
    let mut args = vec!["gen", "tc-gemm", "512", "64", "2", "--trans-a", "--type", "f16"];
    args.extend([
        "--arch",
        "sm_90",
        "--block",
        "128x64",
        "--persistent",
        "3",
        "--setmaxnreg",
        "-o",
        ps,
    ]);
    ok(&args);
    let kir = std::fs::read_to_string(&p).unwrap();
    // 4 tiles on at most 3 work-groups take two rounds: 2 work-groups run them.
    assert!(kir.contains("persistent=3 setmaxnreg=40/232; launch: global [768, 1]"), "{kir}");
    assert!(kir.contains("setmaxnreg_dec(40);") && kir.contains("step 2 {"), "{kir}");
    let out = ok(&[
        "run",
        ps,
        "--device",
        "interp",
        "--arg",
        "a=iota:1024",
        "--arg",
        "b=iota:128",
        "--arg",
        "c=zeros:32768",
    ]);
    // C[i][j] = sum_k (512k + i)(64k + j); the last 4 elements are row 511, columns 60..63.
    let want: Vec<String> = (60..64)
        .map(|j| (0..2).map(|k| (512 * k + 511) * (64 * k + j)).sum::<i32>())
        .map(|v| format!("{v}.0"))
        .collect();
    assert!(out.contains(&format!("..., {}]", want.join(", "))), "{out}");
    let ptx = ok(&["emit", ps, "--target", "ptx"]);
    assert!(ptx.contains("setmaxnreg.inc.sync.aligned.u32 232") && ptx.contains(".minnctapersm 1"));
    // Refusals name what is wrong.
    for (args, want) in [
        (vec!["8", "12", "8", "--arch", "sm_90"], "B is stored K x N, so its rows are N = 12"),
        (
            vec!["8", "8", "12", "--arch", "sm_90", "--trans-b"],
            "rows are K = 12 elements, not a multiple of 8",
        ),
        (vec!["8", "8", "8", "--arch", "sm_90", "--trans-b", "--block", "64x128"], "128 rows"),
        (vec!["8", "8", "8", "--arch", "sm_90", "--trans-b", "--warps", "2x2"], "no --warps"),
        (vec!["8", "8", "8", "--persistent", "132"], "options of the sm_90 kernel"),
        (vec!["8", "8", "8", "--setmaxnreg"], "options of the sm_90 kernel"),
    ] {
        let mut a = vec!["gen", "tc-gemm"];
        a.extend(args);
        let o = kiln(&a);
        assert!(!o.status.success(), "{a:?}");
        assert!(text(&o.stderr).contains(want), "{a:?}: {}", text(&o.stderr));
    }
}
