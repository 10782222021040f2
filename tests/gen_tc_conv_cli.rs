//! `kiln gen tc-conv` and `kiln gen tc-attn` from the command line: the printed tensor-core
//! convolution passes `kiln check` and `kiln fmt --check`, runs on the interpreter to the
//! direct convolution's values (with and without padding and a fused epilogue), lowers to
//! PTX with `mma.sync`; the attention kernel runs to softmax's values; bad requests fail
//! with a reason.

mod common;

use common::{kiln, ok, scratch, text};

#[test]
fn tc_conv_generates_checks_runs_and_lowers() {
    let small = ["--block", "16x8", "--warps", "1x1", "--k-tile", "16"];
    // x is a 3x3 image of one channel (0..8), w two 2x2 filters (0..3 and 4..7): y (NHWC,
    // 2x2 pixels of 2 channels) is each 2x2 window's dot product with each filter.
    let f = scratch("gen-tc-conv-cli", "c.kir");
    let fs = f.to_str().unwrap();
    let geom = ["--mb", "1", "--ic", "1", "--oc", "2", "--input", "3x3", "--kernel", "2x2"];
    let mut args = vec!["gen", "tc-conv", "--type", "f16", "-o", fs];
    args.extend(geom);
    args.extend(small);
    ok(&args);
    ok(&["check", fs]);
    ok(&["fmt", "--check", fs]);
    let run = |path: &str, extra: &[&str]| {
        let mut a = vec!["run", path, "--device", "interp", "--arg", "x=iota:9", "--arg"];
        a.extend(["w=iota:8"]);
        a.extend(extra);
        ok(&a)
    };
    let out = run(fs, &["--arg", "y=zeros:8"]);
    assert!(
        out.contains("y: f32[8] = [19.0, 51.0, 25.0, 73.0, 37.0, 117.0, 43.0, 139.0]"),
        "{out}"
    );
    // Padding 1 (a 4x4 output, zeros around the image), bias (0 on channel 0, 1 on 1) and
    // relu fused; bf16 output. Pixel (0,0) sees one tap, x[0,0]·w[.,1,1] = 0; pixel (1,1) is
    // the unpadded (0,0); pixel (3,3) sees x[2,2]·w[.,0,0] = 8·(0, 4).
    let g = scratch("gen-tc-conv-cli", "c2.kir");
    let gs = g.to_str().unwrap();
    let mut args = vec![
        "gen",
        "tc-conv",
        "--pad",
        "1x1",
        "--out",
        "bf16",
        "--epilogue",
        "bias,relu",
        "-o",
        gs,
    ];
    args.extend(geom);
    args.extend(small);
    ok(&args);
    let out = run(gs, &["--full", "--arg", "y=zeros:32", "--arg", "bias=iota:2"]);
    let vals: Vec<f64> = out
        .lines()
        .find_map(|l| l.strip_prefix("y: bf16[32] = ["))
        .and_then(|l| l.strip_suffix(']'))
        .unwrap_or_else(|| panic!("{out}"))
        .split(", ")
        .map(|x| x.parse().unwrap())
        .collect();
    let at = |p: usize, q: usize, o: usize| vals[(p * 4 + q) * 2 + o];
    let corners = [at(0, 0, 0), at(0, 0, 1), at(1, 1, 0), at(1, 1, 1), at(3, 3, 0), at(3, 3, 1)];
    assert_eq!(corners, [0.0, 1.0, 19.0, 52.0, 0.0, 33.0]);
    let ptx = ok(&["emit", gs, "--target", "ptx", "-O"]);
    assert!(ptx.contains("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"), "{ptx}");
}

#[test]
fn tc_conv_refusals_say_why() {
    let geom = ["--mb", "1", "--ic", "8", "--oc", "8", "--input", "2x2", "--kernel", "3x3"];
    for (extra, why) in [
        (&[][..], "does not fit the padded 2x2 input"),
        (&["--pad", "1x1", "--k-tile", "24"], "multiple of 16"),
        (&["--pad", "1x1", "--epilogue", "tanh"], "unknown epilogue operation `tanh`"),
        (&["--pad", "1x1", "--stride", "0x1"], "strides [0, 1] must be at least 1"),
    ] {
        let mut args = vec!["gen", "tc-conv"];
        args.extend(geom);
        args.extend(extra);
        let o = kiln(&args);
        assert_eq!(o.status.code(), Some(1), "kiln {args:?}");
        let err = text(&o.stderr);
        assert!(err.contains(why), "kiln {args:?}: {err}");
    }
    let mut args = vec!["gen", "tc-conv", "--pad", "1x1", "--candidates"];
    args.extend(geom);
    let c = ok(&args);
    assert!(c.lines().count() >= 1 && c.starts_with("block="), "{c}");
}

#[test]
fn tc_attn_generates_runs_and_refuses() {
    // Two rows of 16: q = k = v = 0..31. Each row's score with key 1 exceeds key 0's by at
    // least 480 (after the 1/4 scale), so softmax picks key 1 exactly: o = v's row 1, twice.
    let f = scratch("gen-tc-conv-cli", "a.kir");
    let fs = f.to_str().unwrap();
    ok(&["gen", "tc-attn", "1", "2", "16", "--warps", "1", "--type", "f16", "-o", fs]);
    ok(&["check", fs]);
    ok(&["fmt", "--check", fs]);
    let mut args = vec!["run", fs, "--device", "interp", "--full"];
    args.extend(["--arg", "q=iota:32", "--arg", "k=iota:32", "--arg", "v=iota:32"]);
    args.extend(["--arg", "o=zeros:32"]);
    let out = ok(&args);
    let row: Vec<String> = (16..32).map(|i| format!("{i}.0")).collect();
    let want = format!("o: f16[32] = [{}, {}]", row.join(", "), row.join(", "));
    assert!(out.contains(&want), "{out}");
    for (args, why) in [
        (&["gen", "tc-attn", "1", "16", "72"][..], "multiple of 16, at most 128"),
        (&["gen", "tc-attn", "1", "16", "64", "--warps", "9"], "1 to 8"),
        (&["tune", "tc-attn", "1", "16", "64"], "does not tune attention kernels"),
    ] {
        let o = kiln(args);
        assert_eq!(o.status.code(), Some(1), "kiln {args:?}");
        assert!(text(&o.stderr).contains(why), "kiln {args:?}: {}", text(&o.stderr));
    }
}
