//! Shared helpers of the kiln integration tests: running the `kiln` binary, scratch
//! directories under the temporary directory, and tuner options for tests.

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

/// This process's directory `kiln-<tag>-<pid>` under the temporary directory, emptied (not
/// created: a tuner's cache creates it).
pub fn fresh_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kiln-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Tuner options for tests: at most 3 candidates, one timing each, the cache in `cache`.
pub fn tune_opts(cache: &std::path::Path, search: bool) -> kiln::tune::TuneOptions {
    kiln::tune::TuneOptions {
        search,
        cache: Some(kiln::runtime::cache::PersistentCache::new(cache)),
        max_candidates: 3,
        exhaustive: false,
        repeats: 1,
    }
}
