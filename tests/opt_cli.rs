//! `kiln opt` from the command line, on the examples.

use std::process::Command;

fn kiln(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kiln")).args(args).output().expect("kiln runs")
}

fn example(name: &str) -> String {
    format!("{}/examples/{name}", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn opt_with_default_pipeline_on_every_example_gives_valid_ir() {
    for ex in ["saxpy.kir", "reduce.kir", "divergent.kir", "stencil2d.kir"] {
        let out = kiln(&["opt", &example(ex), "-O"]);
        assert!(out.status.success(), "{ex}: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        kiln::ir::check_source(ex, &text).unwrap_or_else(|d| panic!("{ex}: {d:?}\n{text}"));
    }
}

#[test]
fn opt_with_a_pass_list_writes_the_output_file() {
    let dir = std::env::temp_dir().join(format!("kiln-opt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let out_path = dir.join("out.kir");
    let out_str = out_path.display().to_string();
    let out = kiln(&["opt", &example("divergent.kir"), "--passes", "strength", "-o", &out_str]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&out_path).expect("output written");
    assert!(text.contains("x = x >> 1;"), "{text}");
    assert!(text.contains("for j: u32 in 0 .. i & 3 {"), "{text}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn opt_rejects_unknown_passes_and_missing_choice() {
    // Both are malformed command lines: exit code 2.
    let out = kiln(&["opt", &example("saxpy.kir"), "--passes", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown pass `nope`"));
    let out = kiln(&["opt", &example("saxpy.kir")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--list-passes"));
}

#[test]
fn opt_verbose_prints_ir_after_each_pass() {
    let out = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["opt", &example("saxpy.kir"), "--passes", "simplify,cse"])
        .env("KILN_VERBOSE", "debuginfo")
        .output()
        .expect("kiln runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("// IR after pass `simplify`:"), "{err}");
    assert!(err.contains("// IR after pass `cse`:"), "{err}");
}

#[test]
fn opt_time_passes_lists_every_pass_that_ran() {
    let out =
        kiln(&["opt", &example("saxpy.kir"), "--passes", "simplify,cse,simplify", "--time-passes"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("pass timing for kernel `saxpy`:"), "{err}");
    let steps: Vec<&str> = err
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            w.next()?.parse::<usize>().ok()?;
            Some(l.split_whitespace().nth(1).unwrap_or(""))
        })
        .collect();
    assert_eq!(steps, ["simplify", "(verify", "cse", "(verify", "simplify", "(verify"], "{err}");
    assert!(err.contains("total"), "{err}");
    // The optimized kernel still goes to stdout, and parses.
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    kiln::ir::check_source("saxpy.kir", &text).unwrap_or_else(|d| panic!("{d:?}\n{text}"));
}
