//! Every fenced code block of README.md and docs/*.md is checked, so the docs cannot rot.
//!
//! The info string after the opening fence says what a block is and how it is checked
//! (docs/README.md says the same for writers):
//!
//! * `sh`: every line that starts with `kiln ` (after joining lines that end in `\`, and
//!   after leading `NAME=VALUE` environment assignments, which apply to that line) runs
//!   with the `kiln` binary this build made, in a scratch directory holding copies of
//!   `examples/` and `docs/` (so relative paths work and written files stay there), with
//!   `HOME`, `XDG_CACHE_HOME` and `KILN_CACHE_DIR` inside it. Each must exit 0. Other lines
//!   (`cargo ...`, comments) are shown, not run. Lines are split on whitespace with '...' and
//!   "..." quoting; pipes, redirections, `$` and `&&` are refused so a block stays runnable.
//! * `sh,fails`: the same, but each `kiln` line must fail (exit 1 or 2, without a panic).
//! * `output`: directly after a `sh` block, the standard output of its last `kiln` line,
//!   compared exactly (trailing whitespace of each line aside); directly after a `kir,fails`
//!   block, text that `kiln check`'s standard error must contain.
//! * `kir`: a module that `kiln check` accepts (written to `t.kir` in the scratch directory).
//! * `kir,fails`: a module `kiln check` rejects with exit 1 (the `output` block after it, if
//!   any, is the message; the file is named `t.kir`).
//! * `rust`: compiled and run by rustdoc: the file must be included as a doc in
//!   `src/lib.rs` (`#[doc = include_str!("../docs/NAME.md")]`); this test checks that it is.
//! * `toml`: must parse as TOML.
//! * `text`, `ebnf`: illustrations and grammar, not checked.
//!
//! A block without an info string, or with one not listed here, is an error: rustdoc would
//! compile an unlabelled block as Rust, and an unknown kind would be checked by nothing.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A fenced block: where it starts, its info string and its text.
#[derive(Debug)]
struct Block {
    line: usize,
    info: String,
    text: String,
}

/// The fenced blocks of a Markdown text (fences of three or more backticks, indented by at
/// most three spaces; a block ends at a fence at least as long as the one that opened it).
fn blocks(md: &str) -> Result<Vec<Block>, String> {
    let mut out = Vec::new();
    let mut open: Option<(usize, usize, String, String)> = None;
    for (i, line) in md.lines().enumerate() {
        let trimmed = line.trim_start_matches(' ');
        let indent = line.len() - trimmed.len();
        let ticks = trimmed.chars().take_while(|&c| c == '`').count();
        let is_fence = indent <= 3 && ticks >= 3;
        match &mut open {
            None if is_fence => {
                open = Some((i + 1, ticks, trimmed[ticks..].trim().to_string(), String::new()))
            }
            None => {}
            Some((_, n, _, _)) if is_fence && ticks >= *n && trimmed[ticks..].trim().is_empty() => {
                let (line, _, info, text) = open.take().unwrap();
                out.push(Block { line, info, text });
            }
            Some((_, _, _, text)) => {
                text.push_str(line);
                text.push('\n');
            }
        }
    }
    match open {
        Some((line, ..)) => Err(format!("line {line}: the block is never closed")),
        None => Ok(out),
    }
}

/// Splits a command line into words: whitespace-separated, with '...' and "..." quoting.
fn words(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some(q) if q == c => break,
                        Some(x) => w.push(x),
                        None => return Err(format!("unterminated {c} quote")),
                    }
                }
            }
            c if c.is_whitespace() => out.extend(word.take()),
            '#' if word.is_none() => break,
            '|' | '>' | '<' | '$' | '&' | ';' | '`' | '*' => {
                return Err(format!("`{c}` is not supported in a runnable block"))
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    out.extend(word);
    Ok(out)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if src.is_dir() {
            copy_dir(&src, &dst);
        } else {
            std::fs::copy(&src, &dst).unwrap();
        }
    }
}

/// A scratch directory with copies of examples/ and docs/.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("kiln-docs-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["examples", "docs"] {
            copy_dir(&root().join(sub), &dir.join(sub));
        }
        Scratch(dir)
    }

    /// Runs `kiln ARGS` in the scratch directory, with `env` set last (so a block may
    /// override the scratch cache directory too).
    fn kiln(&self, env: &[(String, String)], args: &[String]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
        c.current_dir(&self.0)
            .args(args)
            .env("HOME", self.0.join("home"))
            .env("XDG_CACHE_HOME", self.0.join("xdg-cache"))
            .env("KILN_CACHE_DIR", self.0.join("kiln-cache"));
        for v in kiln::runtime::env::VARIABLES {
            if v.name != "KILN_CACHE_DIR" {
                c.env_remove(v.name);
            }
        }
        c.envs(env.iter().map(|(k, v)| (k, v))).output().expect("run kiln")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn trim_lines(s: &str) -> String {
    s.lines().map(str::trim_end).collect::<Vec<_>>().join("\n").trim_end().to_string()
}

/// The `kiln` command lines of a `sh` block (continuation lines joined).
fn kiln_lines(block: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for l in block.lines() {
        if let Some(head) = l.trim_end().strip_suffix('\\') {
            cur.push_str(head);
            cur.push(' ');
            continue;
        }
        cur.push_str(l);
        lines.push(std::mem::take(&mut cur));
    }
    lines.into_iter().filter(|l| split_env(l).1.starts_with("kiln ")).collect()
}

/// A command line's leading `NAME=VALUE` assignments (as a shell reads them) and the rest.
fn split_env(line: &str) -> (Vec<&str>, &str) {
    let mut rest = line.trim_start();
    let mut env = Vec::new();
    loop {
        let word = rest.split_whitespace().next().unwrap_or("");
        let is_assignment = word.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c == '_')
        });
        if !is_assignment {
            return (env, rest);
        }
        env.push(word);
        rest = rest[word.len()..].trim_start();
    }
}

/// Checks every block of one Markdown file; returns the problems found.
fn check_file(path: &Path, rel: &str) -> Vec<String> {
    let md = std::fs::read_to_string(path).unwrap();
    let blocks = match blocks(&md) {
        Ok(b) => b,
        Err(e) => return vec![format!("{rel}:{e}")],
    };
    let scratch = Scratch::new(&rel.replace(['/', '.'], "_"));
    let mut problems = Vec::new();
    // The last block's stdout (after `sh`) or stderr (after `kir,fails`) for an `output`.
    let mut last: Option<(bool, String)> = None;
    for b in &blocks {
        let at = format!("{rel}:{}", b.line);
        let mut fail = |m: String| problems.push(format!("{at}: {m}"));
        let previous = last.take();
        match b.info.as_str() {
            "sh" | "sh,fails" => {
                let fails = b.info == "sh,fails";
                for line in kiln_lines(&b.text) {
                    let (assignments, command) = split_env(&line);
                    let env: Vec<(String, String)> = assignments
                        .iter()
                        .filter_map(|a| a.split_once('='))
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect();
                    let args = match words(command) {
                        Ok(w) => w[1..].to_vec(),
                        Err(e) => {
                            fail(format!("`{line}`: {e}"));
                            continue;
                        }
                    };
                    let o = scratch.kiln(&env, &args);
                    let err = text(&o.stderr);
                    if err.contains("panicked") {
                        fail(format!("`{line}` panicked:\n{err}"));
                    } else if fails && !matches!(o.status.code(), Some(1 | 2)) {
                        fail(format!("`{line}` should fail but gave {}", o.status));
                    } else if !fails && !o.status.success() {
                        fail(format!("`{line}` failed ({}):\n{err}", o.status));
                    }
                    last = Some((true, text(&o.stdout)));
                }
            }
            "output" => match previous {
                Some((true, stdout)) if trim_lines(&stdout) != trim_lines(&b.text) => {
                    fail(format!(
                        "the output shown differs from the command's:\n{}",
                        trim_lines(&stdout)
                    ))
                }
                Some((false, stderr)) if !trim_lines(&stderr).contains(&trim_lines(&b.text)) => {
                    fail(format!("the message shown is not kiln's:\n{}", trim_lines(&stderr)))
                }
                Some(_) => {}
                None => fail("an `output` block must follow a `sh` or `kir,fails` block".into()),
            },
            "kir" | "kir,fails" => {
                std::fs::write(scratch.0.join("t.kir"), &b.text).unwrap();
                let o = scratch.kiln(&[], &["check".into(), "t.kir".into()]);
                let err = text(&o.stderr);
                match (b.info == "kir,fails", o.status.code()) {
                    (false, Some(0)) => {}
                    (false, _) => fail(format!("`kiln check` rejects it:\n{err}")),
                    (true, Some(1)) if !err.contains("panicked") => last = Some((false, err)),
                    (true, _) => fail(format!("`kiln check` should fail with exit 1:\n{err}")),
                }
            }
            "rust" => {
                let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
                if !lib.contains(&format!("include_str!(\"../{rel}\")")) {
                    fail(format!(
                        "a rust block is compiled only if src/lib.rs includes the file: add \
                         #[doc = include_str!(\"../{rel}\")] to its doc-test list"
                    ));
                }
            }
            "toml" => {
                if let Err(e) = b.text.parse::<toml::Table>() {
                    fail(format!("not TOML: {e}"));
                }
            }
            "text" | "ebnf" => {}
            "" => {
                fail("a block needs an info string (sh, kir, rust, toml, output, text...)".into())
            }
            other => fail(format!("unknown info string `{other}` (see tests/docs.rs)")),
        }
    }
    problems
}

/// The Markdown files whose blocks are checked: README.md and every docs/*.md.
fn documents() -> Vec<(PathBuf, String)> {
    let mut out = vec![(root().join("README.md"), "README.md".to_string())];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    for p in docs {
        let rel = format!("docs/{}", p.file_name().unwrap().to_string_lossy());
        out.push((p, rel));
    }
    out
}

#[test]
fn every_doc_block_runs() {
    let docs = documents();
    assert!(docs.iter().any(|(_, r)| r == "docs/ir-syntax.md"), "{docs:?}");
    let problems: Vec<String> = docs.iter().flat_map(|(p, rel)| check_file(p, rel)).collect();
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// The README's variable table lists every `KILN_*` variable kiln and its tests know of.
#[test]
fn readme_lists_every_environment_variable() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let rows: Vec<&str> = readme.lines().filter(|l| l.starts_with("| `KILN_")).collect();
    for v in kiln::runtime::env::VARIABLES {
        assert!(
            rows.iter().any(|r| r.contains(&format!("`{}`", v.name))),
            "README's environment table lacks {}",
            v.name
        );
    }
}

/// The checker itself: each kind of mistake in a document is found.
#[test]
fn checker_finds_broken_blocks() {
    let dir = std::env::temp_dir().join(format!("kiln-docs-self-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("```\nkiln check x\n```\n", "needs an info string"),
        ("```python\nprint(1)\n```\n", "unknown info string `python`"),
        ("```sh\nkiln check examples/nope.kir\n```\n", "failed"),
        ("```sh,fails\nkiln check examples/saxpy.kir\n```\n", "should fail"),
        ("```sh\nkiln fmt examples/saxpy.kir | head\n```\n", "not supported"),
        (
            "```sh\nkiln run examples/saxpy.kir --global 1 --arg x=iota:1 --arg y=zeros:1 \\\n  \
             --arg a=1 --arg n=1\n```\n```output\ny: f32[1] = [5.0]\n```\n",
            "differs",
        ),
        ("```kir\nkernel k( {\n```\n", "rejects it"),
        ("```kir,fails\nkernel k() {}\n```\n", "should fail"),
        (
            "```kir,fails\nkernel k() { x = 1; }\n```\n```output\nsomething else\n```\n",
            "not kiln's",
        ),
        ("```output\nx\n```\n", "must follow"),
        ("```toml\na = [\n```\n", "not TOML"),
        ("```rust\nfn main() {}\n```\n", "include_str!"),
        ("```sh\nkiln check\n", "never closed"),
        ("```sh\nKILN_CACHE_PERSISTENT=yes kiln check examples/saxpy.kir\n```\n", "not understood"),
    ];
    for (i, (md, want)) in cases.iter().enumerate() {
        let path = dir.join(format!("case{i}.md"));
        std::fs::write(&path, md).unwrap();
        let problems = check_file(&path, &format!("case{i}.md")).join("\n");
        assert!(problems.contains(want), "case {i} ({want}): {problems:?}");
    }
    // A correct document passes.
    let good =
        "```sh\nkiln check examples/saxpy.kir\n```\n```kir,fails\nkernel k() { x = 1; }\n```\n\
                ```text\nanything\n```\n";
    let path = dir.join("good.md");
    std::fs::write(&path, good).unwrap();
    assert_eq!(check_file(&path, "good.md"), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(&dir);
}
