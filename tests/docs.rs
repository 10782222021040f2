//! Every fenced code block of README.md, docs/*.md and the READMEs of examples/,
//! benches/gpu/ and tests/adversarial/ is checked, and every relative link in them must
//! lead somewhere, so the docs cannot rot.
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
//!   Other lines are shown, not run, but a file of the repository they name (a word with a
//!   `/` under a top-level folder and a script, source or document extension) must exist.
//! * `sh,fails`: the same, but each `kiln` line must fail (exit 1 or 2, without a panic).
//!   The message a document shows for it must be an `output` block, which is checked: a
//!   `text` block right after a `sh,fails` block is an error.
//! * `sh,parses`: lines that need what the test cannot provide (data made by another
//!   program, a GPU): each `kiln` line runs and must get past the command-line parser (any
//!   exit but 2, without a panic).
//! * `output`: directly after a `sh` block, the standard output of its last `kiln` line;
//!   directly after a `sh,fails` block, the standard error of its last `kiln` line; both
//!   compared exactly (trailing whitespace of each line aside). Directly after a `kir,fails`
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

#[path = "../build/doc_links.rs"]
mod doc_links;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A fenced block: where it starts, its info string, its text, and whether a heading lies
/// between it and the block before it (a new section).
#[derive(Debug)]
struct Block {
    line: usize,
    info: String,
    text: String,
    after_heading: bool,
}

/// The fenced blocks of a Markdown text (fences of three or more backticks, indented by at
/// most three spaces; a block ends at a fence at least as long as the one that opened it).
/// Each line of a block loses as much indentation as its opening fence had, as CommonMark
/// says.
fn blocks(md: &str) -> Result<Vec<Block>, String> {
    let mut out = Vec::new();
    // Line, fence length, fence indentation, info string, text.
    let mut open: Option<(usize, usize, usize, String, String)> = None;
    let mut heading = false;
    for (i, line) in md.lines().enumerate() {
        let trimmed = line.trim_start_matches(' ');
        let indent = line.len() - trimmed.len();
        let ticks = trimmed.chars().take_while(|&c| c == '`').count();
        let is_fence = indent <= 3 && ticks >= 3;
        match &mut open {
            None if is_fence => {
                let info = trimmed[ticks..].trim().to_string();
                open = Some((i + 1, ticks, indent, info, String::new()))
            }
            None => heading |= trimmed.starts_with('#'),
            Some((_, n, ..)) if is_fence && ticks >= *n && trimmed[ticks..].trim().is_empty() => {
                let (line, _, _, info, text) = open.take().unwrap();
                out.push(Block { line, info, text, after_heading: std::mem::take(&mut heading) });
            }
            Some((_, _, fence_indent, _, text)) => {
                text.push_str(&line[indent.min(*fence_indent)..]);
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
    // A line that cannot be split is a kiln line if its words, split on whitespace alone,
    // say so: its error is then reported.
    lines
        .into_iter()
        .filter(|l| match words(l) {
            Ok(w) => command(&w).1.first().is_some_and(|c| c == "kiln"),
            Err(_) => {
                let raw: Vec<String> = l.split_whitespace().map(str::to_string).collect();
                command(&raw).1.first().is_some_and(|c| c == "kiln")
            }
        })
        .collect()
}

/// A command line's words split into its leading `NAME=VALUE` assignments (as a shell reads
/// them, quotes removed) and the command with its arguments.
fn command(words: &[String]) -> (Vec<(String, String)>, &[String]) {
    let assignment = |w: &String| {
        w.split_once('=')
            .filter(|(name, _)| {
                !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c == '_')
            })
            .map(|(k, v)| (k.to_string(), v.to_string()))
    };
    let env: Vec<(String, String)> = words.iter().map_while(assignment).collect();
    let n = env.len();
    (env, &words[n..])
}

/// What the last block showed, for an `output` block right after it.
enum Shown {
    /// The standard output of a `sh` block's last `kiln` line.
    Stdout(String),
    /// The standard error of a `sh,fails` block's last `kiln` line.
    Failure(String),
    /// `kiln check`'s standard error for a `kir,fails` block.
    CheckError(String),
    /// Nothing: the block's last line needs a device this machine does not have.
    Skipped,
}

/// Whether the device a command line asks for (`--device vulkan`, `cuda`, or `cpu`, which
/// an x86-64 host has) is here, under the one rule for tests that need a device: when it is
/// not, the line is skipped with a message, or the test fails if `KILN_REQUIRE_TOOLS`
/// (Vulkan, which CI has as lavapipe; the cpu device) or `KILN_REQUIRE_CUDA` is set.
fn device_present(args: &[String]) -> bool {
    let device = args.windows(2).find(|w| w[0] == "--device").map(|w| w[1].as_str());
    let (found, require) = match device {
        Some("vulkan") => (kiln::Device::vulkan(), "KILN_REQUIRE_TOOLS"),
        Some("cuda") => (kiln::Device::cuda(), "KILN_REQUIRE_CUDA"),
        Some("cpu") => (kiln::Device::cpu(), "KILN_REQUIRE_TOOLS"),
        _ => return true,
    };
    kiln_ir::testing::optional(require, found).is_some()
}

/// Files of the repository a block names (a word with a `/` whose first part is a top-level
/// folder, ending in a script, source or document extension) that do not exist.
fn missing_files(block: &str) -> Vec<String> {
    const EXTENSIONS: &[&str] = &["sh", "py", "rs", "kir", "toml", "md", "spec"];
    block
        .split(|c: char| c.is_whitespace() || matches!(c, '\'' | '"' | '=' | '@' | ';'))
        .filter(|w| {
            let top = w.split('/').next().unwrap_or("");
            w.contains('/')
                && !top.is_empty()
                && root().join(top).is_dir()
                && Path::new(w).extension().is_some_and(|e| EXTENSIONS.iter().any(|x| e == *x))
        })
        .filter(|w| !root().join(w).is_file())
        .map(str::to_string)
        .collect()
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
    // What an `output` block right after the last block is compared with.
    let mut last: Option<Shown> = None;
    for b in &blocks {
        let at = format!("{rel}:{}", b.line);
        let mut fail = |m: String| problems.push(format!("{at}: {m}"));
        let previous = last.take();
        match b.info.as_str() {
            "sh" | "sh,fails" | "sh,parses" => {
                let fails = b.info == "sh,fails";
                let parses = b.info == "sh,parses";
                let kiln = kiln_lines(&b.text);
                let shown: Vec<&str> =
                    b.text.lines().filter(|l| !kiln.iter().any(|k| k.contains(l.trim()))).collect();
                for missing in missing_files(&shown.join("\n")) {
                    fail(format!("`{missing}` is not a file of the repository"));
                }
                for line in kiln {
                    let all = match words(&line) {
                        Ok(w) => w,
                        Err(e) => {
                            fail(format!("`{line}`: {e}"));
                            continue;
                        }
                    };
                    let (env, cmd) = command(&all);
                    let args = cmd[1..].to_vec();
                    if !parses && !device_present(&args) {
                        // Skipped (the device is missing), so what it shows is not compared.
                        last = Some(Shown::Skipped);
                        continue;
                    }
                    let o = scratch.kiln(&env, &args);
                    let err = text(&o.stderr);
                    let code = o.status.code();
                    if err.contains("panicked") {
                        fail(format!("`{line}` panicked:\n{err}"));
                    } else if parses && (code == Some(2) || code.is_none()) {
                        fail(format!(
                            "`{line}` is not a valid command line ({}):\n{err}",
                            o.status
                        ));
                    } else if fails && !matches!(code, Some(1 | 2)) {
                        fail(format!("`{line}` should fail but gave {}", o.status));
                    } else if !fails && !parses && !o.status.success() {
                        fail(format!("`{line}` failed ({}):\n{err}", o.status));
                    }
                    last = match b.info.as_str() {
                        "sh" => Some(Shown::Stdout(text(&o.stdout))),
                        "sh,fails" => Some(Shown::Failure(err)),
                        _ => None,
                    };
                }
            }
            "output" => match previous {
                Some(Shown::Stdout(stdout)) if trim_lines(&stdout) != trim_lines(&b.text) => {
                    fail(format!(
                        "the output shown differs from the command's:\n{}",
                        trim_lines(&stdout)
                    ))
                }
                Some(Shown::Failure(stderr)) if trim_lines(&stderr) != trim_lines(&b.text) => {
                    fail(format!(
                        "the message shown differs from the command's:\n{}",
                        trim_lines(&stderr)
                    ))
                }
                Some(Shown::CheckError(stderr))
                    if !trim_lines(&stderr).contains(&trim_lines(&b.text)) =>
                {
                    fail(format!("the message shown is not kiln's:\n{}", trim_lines(&stderr)))
                }
                Some(Shown::Skipped) => {}
                Some(_) => {}
                None => fail(
                    "an `output` block must follow a `sh`, `sh,fails` or `kir,fails` block".into(),
                ),
            },
            "kir" | "kir,fails" => {
                std::fs::write(scratch.0.join("t.kir"), &b.text).unwrap();
                let o = scratch.kiln(&[], &["check".into(), "t.kir".into()]);
                let err = text(&o.stderr);
                match (b.info == "kir,fails", o.status.code()) {
                    (false, Some(0)) => {}
                    (false, _) => fail(format!("`kiln check` rejects it:\n{err}")),
                    (true, Some(1)) if !err.contains("panicked") => {
                        last = Some(Shown::CheckError(err))
                    }
                    (true, _) => fail(format!("`kiln check` should fail with exit 1:\n{err}")),
                }
            }
            "rust" => {
                let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
                // The README is the crate's front page, as build.rs writes it.
                let front = rel == "README.md"
                    && lib.contains("include_str!(concat!(env!(\"OUT_DIR\"), \"/README.md\"))");
                if !front && !lib.contains(&format!("include_str!(\"../{rel}\")")) {
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
            "text" if !b.after_heading && matches!(previous, Some(Shown::Failure(_))) => fail(
                "the message of a `sh,fails` block goes in an `output` block, which is compared \
                 with kiln's"
                    .into(),
            ),
            "text" | "ebnf" => {}
            "" => {
                fail("a block needs an info string (sh, kir, rust, toml, output, text...)".into())
            }
            other => fail(format!("unknown info string `{other}` (see tests/docs.rs)")),
        }
    }
    problems
}

/// The Markdown files whose blocks and links are checked: README.md, every docs/*.md and
/// the READMEs of examples/, benches/gpu/ and tests/adversarial/.
fn documents() -> Vec<(PathBuf, String)> {
    let mut out: Vec<(PathBuf, String)> =
        ["README.md", "examples/README.md", "benches/gpu/README.md", "tests/adversarial/README.md"]
            .into_iter()
            .map(|rel| (root().join(rel), rel.to_string()))
            .collect();
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

/// The problems with the links of document `rel` (`text`): a relative link must lead to a
/// file of the repository, and its anchor, if any, to a heading of that file (a Markdown
/// document); on the document's page in the crate docs, where build.rs rewrites links, it
/// must lead to a page or be an embedded image.
fn link_problems(rel: &str, text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for target in doc_links::links(text) {
        let Some((file, anchor)) = doc_links::resolve(rel, &target) else { continue };
        let path = root().join(&file);
        if !path.exists() {
            problems.push(format!("{rel}: link `{target}`: `{}` does not exist", file.display()));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        let headings: Vec<String> = std::fs::read_to_string(&path)
            .unwrap_or_default()
            .lines()
            .filter_map(doc_links::heading_anchor)
            .collect();
        if !headings.contains(&anchor) {
            problems.push(format!(
                "{rel}: link `{target}`: no heading of `{}` has the anchor #{anchor}",
                file.display()
            ));
        }
    }
    let pages = doc_links::pages(root());
    if pages.iter().any(|p| p.file == rel) {
        let (_, dead) = doc_links::rewrite(root(), rel, text, &pages);
        for target in dead {
            problems.push(format!(
                "{rel}: link `{target}` leads to no page of the crate docs (`cargo doc`): link a \
                 document (docs/*.md, a README) instead"
            ));
        }
    }
    problems
}

/// Every link of the documents leads somewhere, on GitHub and in `cargo doc` (the README is
/// the `kiln` crate's front page; docs/ and examples/README.md are `kiln::guide`).
#[test]
fn every_link_resolves() {
    let docs = documents();
    let pages = doc_links::pages(root());
    for page in &pages {
        assert!(
            docs.iter().any(|(_, rel)| *rel == page.file),
            "{} is a page but not checked",
            page.file
        );
    }
    let problems: Vec<String> = docs
        .iter()
        .flat_map(|(path, rel)| link_problems(rel, &std::fs::read_to_string(path).unwrap()))
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // The checker finds each kind of dead link.
    let bad = "[a](docs/nope.md) [b](docs/cache.md#no-such-heading) [c](examples/fusion) \
               `[d](not/a/link)` [e](https://example.com/x) [f](#using-it)";
    let found = link_problems("README.md", bad).join("\n");
    for want in [
        "`docs/nope.md` does not exist",
        "#no-such-heading",
        "link `examples/fusion` leads to no page",
    ] {
        assert!(found.contains(want), "{want}: {found}");
    }
    for fine in ["not/a/link", "example.com", "using-it"] {
        assert!(!found.contains(fine), "{fine}: {found}");
    }
}

/// The `.rs` files under `dir`, recursively, as paths relative to the repository.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(root().join(dir)).into_iter().flatten().flatten() {
        let rel = dir.join(e.file_name());
        if e.path().is_dir() {
            out.extend(rust_files(&rel));
        } else if rel.extension().is_some_and(|x| x == "rs") {
            out.push(rel);
        }
    }
    out
}

/// docs/architecture.md, the map, stays true where a test can tell: the number of crates
/// and their names, every path it names, and two rules of the path of a kernel (devices and
/// `kiln emit` build through `driver::build_verified`, the CLI reads the settings once).
#[test]
fn architecture_page_is_true() {
    let page = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    // "a Cargo workspace of N crates": the root package and every member but xtask.
    let manifest: toml::Table =
        std::fs::read_to_string(root().join("Cargo.toml")).unwrap().parse().unwrap();
    let members: Vec<&str> = manifest["workspace"]["members"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m.as_str())
        .filter(|m| *m != "xtask")
        .collect();
    let count = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"]
        .iter()
        .position(|n| page.contains(&format!("a Cargo workspace of {n} crates")))
        .map(|i| i + 1);
    assert_eq!(count, Some(members.len() + 1), "the crate count of docs/architecture.md");
    for m in &members {
        let member: toml::Table =
            std::fs::read_to_string(root().join(m).join("Cargo.toml")).unwrap().parse().unwrap();
        let name = member["package"]["name"].as_str().unwrap();
        assert!(page.contains(&format!("{name} ({m}/)")), "the diagram lacks {name} ({m}/)");
    }
    // Every path it names from the repository's root exists; in the table of folders, each
    // file and folder it names exists under that row's folder.
    let mut problems = Vec::new();
    for line in page.lines() {
        let row = line
            .strip_prefix("| `")
            .and_then(|r| r.split_once('`'))
            .map(|(dir, _)| dir)
            .filter(|d| d.ends_with('/'));
        for (i, token) in line.split('`').enumerate() {
            let plain = i % 2 == 1 && !token.contains(' ') && token.contains('/');
            let top = token.split('/').next().unwrap_or("");
            if plain && root().join(top).is_dir() && !root().join(token).exists() {
                problems.push(format!("`{token}` does not exist"));
            }
            let Some(dir) = row else { continue };
            let named = i % 2 == 1 && (token.ends_with(".rs") || token.ends_with('/'));
            if named && !token.contains(' ') && !root().join(token).exists() {
                let under = rust_files(Path::new(dir));
                let found = under.iter().any(|f| {
                    let f = f.to_string_lossy();
                    f.ends_with(&format!("/{token}")) || f.contains(&format!("/{token}"))
                });
                if !found {
                    problems.push(format!("`{token}` is not under `{dir}`"));
                }
            }
        }
    }
    assert!(problems.is_empty(), "docs/architecture.md: {}", problems.join("; "));
    // "Every device's `build` goes through the one build driver ... `kiln emit` takes the
    // same driver": only the driver itself takes its steps apart.
    for dir in ["src", "runtime/src", "gen/src"] {
        for f in rust_files(Path::new(dir)) {
            let text = std::fs::read_to_string(root().join(&f)).unwrap();
            assert!(
                !text.contains("driver::lower("),
                "{} builds around build_verified",
                f.display()
            );
        }
    }
    // "`Config::from_env` reads the environment once (the CLI and `Jit::new` do)".
    let reads: Vec<PathBuf> = rust_files(Path::new("src/cli"))
        .into_iter()
        .filter(|f| std::fs::read_to_string(root().join(f)).unwrap().contains("from_env"))
        .collect();
    assert_eq!(reads, [PathBuf::from("src/cli/mod.rs")], "the CLI reads its settings once");
    let cli = std::fs::read_to_string(root().join("src/cli/mod.rs")).unwrap();
    assert_eq!(cli.matches("from_env").count(), 1, "src/cli/mod.rs reads its settings once");
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
        // A quoted environment value is an assignment too: the line runs.
        (
            "```sh\nKILN_CACHE_MAX_SIZE=\"1 0\" kiln check examples/saxpy.kir\n```\n",
            "not understood",
        ),
        // The message of a failure is compared, and must be in an `output` block.
        (
            "```sh,fails\nkiln check examples/nope.kir\n```\n```output\nkiln: error: other\n```\n",
            "the message shown differs",
        ),
        ("```sh,fails\nkiln check examples/nope.kir\n```\n```text\nkiln: error\n```\n", "goes in"),
        ("```sh,parses\nkiln check --no-such-flag x.kir\n```\n", "not a valid command line"),
        ("```sh\nbash benches/gpu/nope.sh\n```\n", "`benches/gpu/nope.sh` is not a file"),
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
         ```text\nanything\n```\n```sh,fails\nkiln check examples/nope.kir\n```\n\
         ```output\nkiln: error: cannot read `examples/nope.kir`: No such file or directory \
         (os error 2)\n```\n```sh,parses\nkiln run examples/saxpy.kir --global 8 --arg x=@x.npy \
         --arg y=zeros:8 --arg a=1 --arg n=8\n```\n\
         ```sh,fails\nkiln check examples/nope.kir\n```\n## A new section\n```text\nx\n```\n\
         ```sh\nbash benches/gpu/run.sh benches/gpu/bin\n```\n";
    let path = dir.join("good.md");
    std::fs::write(&path, good).unwrap();
    assert_eq!(check_file(&path, "good.md"), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(&dir);
}
