//! Shared helpers of the kiln integration tests: running the `kiln` binary and scratch
//! directories under the temporary directory.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs the `kiln` binary with `args`.
pub fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln")).args(args).output().expect("kiln runs")
}

/// Output bytes as text (lossy).
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs `kiln args`, fails the test unless it succeeds, and returns its standard output.
pub fn ok(args: &[&str]) -> String {
    let o = kiln(args);
    assert!(o.status.success(), "kiln {args:?}: {}", text(&o.stderr));
    text(&o.stdout)
}

/// The path `name` in this process's scratch directory `kiln-<tag>-<pid>` (created).
pub fn scratch(tag: &str, name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kiln-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}
