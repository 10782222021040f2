//! `dump()` works from a debugger: build `examples/dump_demo.rs`, stop it in gdb after it has
//! built the expression `2 * (a + b) - a`, call `dump` on it the ways a person would, and find
//! the printed expression in gdb's output.
//!
//! gdb comes from `KILN_GDB` (set by `cargo xtask test`) or `PATH`. Without it the test is
//! skipped, unless `KILN_REQUIRE_TOOLS` is set, when it fails.

use std::path::{Path, PathBuf};
use std::process::Command;

const EXPECTED: &str = "2 * (a + b) - a";

fn find_gdb() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("KILN_GDB").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join("gdb")).find(|p| p.is_file())
}

/// Builds the example in the test profile, which keeps full debug info for the code the
/// debugger evaluates in (the example and kiln-ir; see Cargo.toml), so that `e.dump()` finds
/// `e` and `dump`'s parameters. With the workspace's features, as `cargo xtask test` builds
/// the tests, the build reuses every library the tests were linked with and adds only the
/// example. Returns the executable's path.
fn build_example() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let out = Command::new(cargo)
        .args(["build", "--profile", "test", "--workspace", "--all-features"])
        .args(["--example", "dump_demo", "--message-format=json-render-diagnostics"])
        .arg("--manifest-path")
        .arg(&manifest)
        .output()
        .expect("run cargo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo build --example dump_demo failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .filter(|l| l.contains("\"reason\":\"compiler-artifact\"") && l.contains("dump_demo"))
        .find_map(|l| json_string_field(l, "executable"))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no dump_demo executable in cargo's output:\n{stdout}"))
}

/// The value of `"key":"..."` in one line of JSON (enough for cargo's messages).
fn json_string_field(line: &str, key: &str) -> Option<String> {
    let start = line.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let mut out = String::new();
    let mut chars = line[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                c => out.push(c),
            },
            c => out.push(c),
        }
    }
    None
}

#[test]
fn dump_from_gdb() {
    let found = find_gdb().ok_or("gdb not found (set KILN_GDB or install gdb)");
    let Some(gdb) = kiln_ir::testing::require("KILN_REQUIRE_TOOLS", found) else {
        return;
    };
    let exe = build_example();
    let out = Command::new(&gdb)
        .args(["-batch", "-nx"])
        .args(["-ex", "set debuginfod enabled off"])
        .args(["-ex", "break dump_demo::built"])
        .args(["-ex", "run"])
        // In `built(e: &Expr)`: the fully qualified call, as in the rustdoc of `dump`.
        .args(["-ex", "call kiln_ir::expr::Expr::dump(e)"])
        // In `main`, where `e: Expr` lives: a method call on the local.
        .args(["-ex", "up"])
        .args(["-ex", "call e.dump()"])
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", gdb.display()));
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        text.contains("Breakpoint 1, dump_demo::built"),
        "gdb did not stop in dump_demo::built:\n{text}"
    );
    let dumps = text.lines().filter(|l| l.trim() == EXPECTED).count();
    assert_eq!(dumps, 2, "expected `{EXPECTED}` twice (one line per dump call) in:\n{text}");
}

#[test]
fn json_field() {
    let line = r#"{"reason":"compiler-artifact","executable":"/t/a \"b\"\\c","fresh":true}"#;
    assert_eq!(json_string_field(line, "executable").as_deref(), Some(r#"/t/a "b"\c"#));
    assert_eq!(json_string_field(line, "nope"), None);
}
