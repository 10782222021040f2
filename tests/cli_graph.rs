//! `kiln graph`: a TOML graph description validated, drawn and run; every mistake in a
//! description is an error naming it (exit 1, no panic).

use std::path::Path;
use std::process::{Command, Output};

fn kiln(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln")).current_dir(dir).args(args).output().expect("run kiln")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A scratch directory holding examples/graph/chain.kir and the description `toml`.
fn scratch(tag: &str, toml: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-graph-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let kir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/graph/chain.kir");
    std::fs::copy(kir, dir.join("chain.kir")).unwrap();
    std::fs::write(dir.join("g.toml"), toml).unwrap();
    dir
}

const HEAD: &str = "kernels = \"chain.kir\"\n[buffers]\nx = { type = \"f32\", len = 4, init = [1, 2, 3, 4] }\ny = { type = \"f32\", len = 4 }\n";

#[test]
fn runs_fills_copies_and_kernels_in_edge_order() {
    let toml = format!(
        "{HEAD}[[nodes]]\nname = \"dbl\"\nkernel = \"scale\"\nglobal = [4]\nargs = [\"x\", 2.0]\n\
         [[nodes]]\nname = \"cp\"\ncopy = [\"x\", \"y\"]\n\
         [[nodes]]\nname = \"zero\"\nfill = \"x\"\nvalue = 0.5\n"
    );
    let dir = scratch("run", &toml);
    let o = kiln(&["graph", "g.toml", "--run", "--dot", "g.dot"], &dir);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        "x: f32[4] = [0.5, 0.5, 0.5, 0.5]\ny: f32[4] = [2.0, 4.0, 6.0, 8.0]\n"
    );
    let dot = std::fs::read_to_string(dir.join("g.dot")).unwrap();
    assert!(dot.contains("n0 -> n1;") && dot.contains("n1 -> n2;"), "{dot}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn mistakes_are_errors_naming_them() {
    let node = "[[nodes]]\nname = \"n\"\n";
    let cases = [
        (format!("colour = 1\n{HEAD}"), "unknown key `colour`"),
        (
            format!("{HEAD}{node}kernel = \"nope\"\nglobal = [4]\nargs = []\n"),
            "node `n`: no kernel `nope`",
        ),
        (
            format!("{HEAD}{node}kernel = \"scale\"\nglobal = [4]\nargs = [\"x\"]\n"),
            "takes 2 arguments, 1 given",
        ),
        (
            format!("{HEAD}{node}kernel = \"scale\"\nglobal = [4]\nargs = [\"z\", 1.0]\n"),
            "no buffer `z`",
        ),
        (
            format!("{HEAD}{node}kernel = \"scale\"\nglobal = [4]\nargs = [\"x\", true]\n"),
            "parameter `s`",
        ),
        (
            format!("{HEAD}{node}fill = \"x\"\nvalue = 1\nafter = [\"m\"]\n"),
            "no node `m` before it",
        ),
        (format!("{HEAD}{node}fill = \"x\"\n"), "give the fill `value`"),
        (format!("{HEAD}{node}\n"), "give `kernel`, `fill` or `copy`"),
        (
            "kernels = \"chain.kir\"\n[buffers]\nb = { type = \"f33\", len = 1 }\n".into(),
            "unknown type `f33`",
        ),
        ("kernels = \"missing.kir\"\n".into(), "cannot read"),
        ("kernels = [\n".into(), "g.toml"),
    ];
    for (i, (toml, needle)) in cases.iter().enumerate() {
        let dir = scratch(&format!("bad{i}"), toml);
        let o = kiln(&["graph", "g.toml"], &dir);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "case {i}: {err}");
        assert!(err.contains(needle) && !err.contains("panicked"), "case {i}: {err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// `--svg` runs Graphviz's `dot`: without it on the PATH, an error says how to get it (exit
/// 1, nothing drawn); with it, the picture is written.
#[test]
fn svg_needs_graphviz_and_says_so() {
    let toml = format!(
        "{HEAD}[[nodes]]\nname = \"dbl\"\nkernel = \"scale\"\nglobal = [4]\nargs = [\"x\", 2.0]\n"
    );
    let dir = scratch("svg", &toml);
    let empty = dir.join("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .current_dir(&dir)
        .env("PATH", &empty)
        .args(["graph", "g.toml", "--svg", "g.svg"])
        .output()
        .expect("run kiln");
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("cannot run Graphviz's `dot`") && err.contains("install Graphviz"),
        "{err}"
    );
    assert!(!dir.join("g.svg").exists());
    // With Graphviz installed (not required in CI), the SVG is drawn.
    if Command::new("dot").arg("-V").output().is_ok() {
        let o = kiln(&["graph", "g.toml", "--svg", "g.svg"], &dir);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let svg = std::fs::read_to_string(dir.join("g.svg")).unwrap();
        assert!(svg.contains("<svg") && svg.contains("dbl"), "{svg}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--explain` prints every chain finalize considered, fused or not and why, with the
/// verdict on each shared buffer (the same words as `kiln fuse --explain`); without
/// `fuse_chains` it says that no chain was considered.
#[test]
fn explain_prints_each_chain_and_its_buffers() {
    let nodes = "[[nodes]]\nname = \"dbl\"\nkernel = \"scale\"\nglobal = [4]\nargs = [\"x\", 2.0]\n\
                 [[nodes]]\nname = \"sum\"\nkernel = \"add\"\nglobal = [4]\nargs = [\"x\", \"x\", \"y\"]\n";
    let dir = scratch("explain", &format!("fuse_chains = true\n{HEAD}{nodes}"));
    let o = kiln(&["graph", "g.toml", "--explain"], &dir);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        text(&o.stdout),
        "fused chain [node 0 `dbl`, node 1 `sum`]:\n\
         buffer `x` of `scale` (parameter (0, 0)):\n  \
         entry 0 reads `x[i]` (every work-item): affine index, in bounds\n  \
         entry 0 writes `x[i]` (every work-item): affine index, in bounds\n  \
         entry 1 reads `a[i]` (every work-item): affine index, in bounds\n  \
         entry 1 reads `b[i]` (every work-item): affine index, in bounds\n  \
         in global memory, per work-item: yes\n  \
         promotion: not requested\n"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let dir = scratch("explain-off", &format!("{HEAD}{nodes}"));
    let o = kiln(&["graph", "g.toml", "--explain"], &dir);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).starts_with("no chain of kernels was considered"),
        "{}",
        text(&o.stdout)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
