//! `kiln fuse --explain` (issue 28): per shared buffer and access, the guard, whether the
//! index is analysable and in bounds, and the verdicts, with the same reasons fusion uses.

use std::process::Command;

fn kiln(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("kiln runs")
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The guarded example fuses with `e` private; the explanation says why, access by access.
#[test]
fn explain_prints_guards_and_verdicts() {
    let o = kiln(&[
        "fuse",
        "examples/fusion/guarded.kir",
        "--spec",
        "examples/fusion/guarded.toml",
        "--explain",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = stdout(&o);
    for line in [
        "buffer `e` of `shift_exp` (parameter (0, 1)):",
        "  entry 0 writes `e[i]` under `i < n`: affine index, in bounds",
        "  entry 1 reads `e[i]` under `i < n`: affine index, in bounds",
        "  in global memory, per work-item: yes",
        "  in global memory, per work-group: yes",
        "  promotion to private: done",
    ] {
        assert!(out.lines().any(|l| l == line), "{line:?} not in:\n{out}");
    }
    // No fused module on standard output with --explain, and no warning.
    assert!(!out.contains("kernel guarded"), "{out}");
    assert!(o.stderr.is_empty(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A refused promotion is explained with the access that refutes it.
#[test]
fn explain_names_the_refuting_access() {
    let o = kiln(&[
        "fuse",
        "examples/fusion/neighbour.kir",
        "--spec",
        "examples/fusion/neighbour.toml",
        "--explain",
    ]);
    assert!(o.status.success());
    let out = stdout(&o);
    assert!(out.contains("  entry 1 reads `t[i + 1]` (every work-item): affine index"), "{out}");
    assert!(
        out.contains("  promotion to private: refused: ")
            && out.contains("neighbouring work-items access the same element"),
        "{out}"
    );
}
