//! The malformed and ill-typed input corpus (`tests/errors/*.kir`): every file must be
//! rejected by `check_source` with a located diagnostic, without panicking.
//!
//! Each file starts with two header comments:
//!
//! ```text
//! // expect: <a substring of the first diagnostic's message>
//! // at: LINE:COL
//! ```
//!
//! `LINE:COL` is the 1-based position of the first diagnostic (the header lines count; the
//! column counts characters). All failures are collected and reported together, naming the
//! files.

use std::fs;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use kiln_ir::{check_source, Diagnostic};

fn corpus_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("errors");
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "kir"))
        .collect();
    files.sort();
    files
}

/// The `// expect:` text and the `// at:` position of a corpus file.
fn header(src: &str) -> Result<(String, (usize, usize)), String> {
    let mut lines = src.lines();
    let expect = lines
        .next()
        .and_then(|l| l.strip_prefix("// expect: "))
        .ok_or("the first line is not `// expect: <message substring>`")?;
    let at = lines
        .next()
        .and_then(|l| l.strip_prefix("// at: "))
        .ok_or("the second line is not `// at: LINE:COL`")?;
    let (line, col) = at.trim().split_once(':').ok_or("`// at:` is not LINE:COL")?;
    let line = line.parse().map_err(|_| "bad line number in `// at:`")?;
    let col = col.parse().map_err(|_| "bad column number in `// at:`")?;
    Ok((expect.to_string(), (line, col)))
}

/// Checks one file; `Err` says what is wrong.
fn check_file(name: &str, src: &str) -> Result<(), String> {
    let (expect, (line, col)) = header(src)?;
    let result = panic::catch_unwind(AssertUnwindSafe(|| check_source(name, src)));
    let diags: Vec<Diagnostic> = match result {
        Err(_) => return Err("check_source panicked".into()),
        Ok(Ok(_)) => return Err("accepted, but it must be rejected".into()),
        Ok(Err(d)) => d,
    };
    let Some(d) = diags.first() else {
        return Err("rejected with no diagnostic".into());
    };
    let mut problems = Vec::new();
    if !d.message.contains(&expect) {
        problems.push(format!("message {:?} does not contain {expect:?}", d.message));
    }
    if (d.line, d.col) != (line, col) {
        problems.push(format!("located at {}:{}, expected {line}:{col}", d.line, d.col));
    }
    let text = panic::catch_unwind(AssertUnwindSafe(|| d.to_string()))
        .map_err(|_| "displaying the diagnostic panicked".to_string())?;
    let position = format!("{name}:{}:{}", d.line, d.col);
    if !text.contains(&position) {
        problems.push(format!("display lacks `{position}`"));
    }
    let source_line = src.lines().nth(d.line.saturating_sub(1)).unwrap_or("");
    if !text.contains(source_line) {
        problems.push(format!("display lacks the source line {source_line:?}"));
    }
    if !text.contains('^') {
        problems.push("display lacks a caret".into());
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{}\n      --- diagnostic ---\n{text}", problems.join("; ")))
    }
}

#[test]
fn error_corpus() {
    let files = corpus_files();
    assert!(files.len() >= 30, "the corpus has {} files, expected at least 30", files.len());
    let mut failures = Vec::new();
    for path in &files {
        let name =
            format!("tests/errors/{}", path.file_name().unwrap_or_default().to_string_lossy());
        let outcome = fs::read_to_string(path)
            .map_err(|e| format!("cannot read: {e}"))
            .and_then(|src| check_file(&name, &src));
        if let Err(why) = outcome {
            failures.push(format!("  {name}: {why}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} corpus files failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

#[test]
fn corpus_headers_are_well_formed() {
    for path in corpus_files() {
        let src = fs::read_to_string(&path).unwrap();
        let (expect, (line, col)) =
            header(&src).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!expect.trim().is_empty(), "{}: empty `// expect:`", path.display());
        assert!(line >= 3 && col >= 1, "{}: `// at:` points into the header", path.display());
        let lines: Vec<&str> = src.split('\n').collect();
        let width = lines.get(line - 1).map(|l| l.chars().count());
        assert!(
            width.is_some_and(|w| col <= w + 1),
            "{}: `// at: {line}:{col}` is past the end of its line",
            path.display()
        );
    }
}
