//! The one skip rule, kept: a test that finds no device or tool goes through
//! `kiln_ir::testing` (`require`, `optional`, `tool`, `skip`), which fails it under
//! `KILN_REQUIRE_TOOLS`/`KILN_REQUIRE_CUDA` and logs it for `cargo xtask test`'s summary.
//! Skips written by hand pass silently as `ok` on a machine without the device, so the test
//! sources are searched for the ways they were once written, and any found fails the suite.

use std::path::{Path, PathBuf};

/// One way of skipping by hand: a line containing every one of `needles` (and, when `next`
/// is set, followed by a line that trims to it).
struct Pattern {
    needles: &'static [&'static str],
    next: Option<&'static str>,
    why: &'static str,
}

const PATTERNS: &[Pattern] = &[
    Pattern {
        needles: &["eprintln!(\"skipping"],
        next: None,
        why: "a skip message printed by hand is not logged: call kiln_ir::testing::skip",
    },
    Pattern {
        needles: &["var_os(\"KILN_REQUIRE_"],
        next: None,
        why: "the KILN_REQUIRE_* rule by hand: use kiln_ir::testing::require or optional",
    },
    Pattern {
        needles: &["var(\"KILN_REQUIRE_"],
        next: None,
        why: "the KILN_REQUIRE_* rule by hand: use kiln_ir::testing::require or optional",
    },
    Pattern {
        needles: &["if let Ok(", "Device::"],
        next: None,
        why: "a device used only if it opens ignores KILN_REQUIRE_*: use \
              kiln_ir::testing::optional (one device of several) or require",
    },
    Pattern {
        needles: &["Device::", ".ok()"],
        next: None,
        why: "a device used only if it opens ignores KILN_REQUIRE_*: use \
              kiln_ir::testing::optional (one device of several) or require",
    },
    Pattern {
        needles: &["testing::optional(", "else { return"],
        next: None,
        why: "a whole test ended without its device is a skip: use kiln_ir::testing::require",
    },
    Pattern {
        needles: &["if !avx2()"],
        next: Some("return;"),
        why: "a test that returns without its CPU feature is a skip: call \
              kiln_ir::testing::skip first",
    },
];

/// Lines allowed to break the rule for now: (path, needle of the pattern, why).
const EXCEPTIONS: &[(&str, &str, &str)] = &[(
    "tests/cli_cache.rs",
    "var_os(\"KILN_REQUIRE_",
    "owned by the parallel cache change (issue 29); convert it with kiln_ir::testing::require \
     when that lands",
)];

/// The test sources: every `.rs` under a `tests` folder of the workspace (the root's and each
/// crate's), paths relative to `root`.
pub fn test_sources(root: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = vec![root.join("tests")];
    if let Ok(rd) = std::fs::read_dir(root) {
        for e in rd.flatten() {
            let p = e.path().join("tests");
            // fuzz/ is not a workspace member, target/ holds no sources.
            let name = e.file_name();
            if p.is_dir() && name != "fuzz" && name != "target" && name != "tests" {
                dirs.push(p);
            }
        }
    }
    let mut out = Vec::new();
    while let Some(d) = dirs.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p.strip_prefix(root).unwrap_or(&p).to_path_buf());
            }
        }
    }
    out.sort();
    out
}

/// The hand-written skips in one file's text, as `PATH:LINE: WHY`.
pub fn ad_hoc_skips(path: &str, text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        for p in PATTERNS {
            if !p.needles.iter().all(|n| code.contains(n)) {
                continue;
            }
            if let Some(next) = p.next {
                if lines.get(i + 1).map(|l| l.trim()) != Some(next) {
                    continue;
                }
            }
            let excused = EXCEPTIONS.iter().any(|(f, n, _)| *f == path && p.needles.contains(n));
            if !excused {
                found.push(format!("{path}:{}: {}\n    {}", i + 1, p.why, code));
            }
        }
    }
    found
}

/// Every hand-written skip in the workspace's tests.
pub fn check(root: &Path) -> Vec<String> {
    test_sources(root)
        .iter()
        .flat_map(|p| {
            let text = std::fs::read_to_string(root.join(p)).unwrap_or_default();
            ad_hoc_skips(&p.to_string_lossy(), &text)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_test_skips_by_hand() {
        let root = crate::root();
        let sources = test_sources(&root);
        // The search must see the suite: the runtime's and the facade's tests at least.
        for want in ["runtime/tests/graph.rs", "tests/adversarial.rs", "gen/tests/common/mod.rs"] {
            assert!(sources.iter().any(|p| p == Path::new(want)), "{want} not searched");
        }
        let found = check(&root);
        assert!(found.is_empty(), "tests that skip by hand:\n{}", found.join("\n"));
    }

    /// Each way of skipping by hand this suite once had is caught, and the one rule is not.
    #[test]
    fn the_ways_tests_once_skipped_are_caught() {
        let planted = [
            "    if let Ok(d) = CudaDevice::open() {",
            "        eprintln!(\"skipping: no lavapipe device\");",
            "        Err(e) if std::env::var_os(\"KILN_REQUIRE_TOOLS\").is_some() => {",
            "    let Some(dev) = kiln::ir::testing::optional(\"KILN_REQUIRE_CUDA\", found) else { return };",
            "    let d = VulkanDevice::open().ok()?;",
            "    if !avx2() {\n        return;\n    }",
        ];
        for text in planted {
            assert_eq!(ad_hoc_skips("t.rs", text).len(), 1, "not caught: {text}");
        }
        let fine = [
            "    let Some(d) = kiln_ir::testing::require(\"KILN_REQUIRE_CUDA\", CudaDevice::open()) else {",
            "    if let Some(d) = kiln_ir::testing::optional(\"KILN_REQUIRE_TOOLS\", VulkanDevice::open()) {",
            "    if !avx2() {\n        kiln_ir::testing::skip(\"no AVX2\");\n        return;\n    }",
            "    // if let Ok(d) = CudaDevice::open() { in a comment",
        ];
        for text in fine {
            assert!(ad_hoc_skips("t.rs", text).is_empty(), "wrongly caught: {text}");
        }
    }
}
