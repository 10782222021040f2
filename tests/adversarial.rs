//! The adversarial corpus (`tests/adversarial/*.toml`, described in its README): hostile
//! inputs to the `kiln` binary, each asserting a clear error or the expected output, never a
//! signal, a hang, a panic, or a file written outside the case's scratch directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;

/// One case file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    args: Vec<String>,
    exit: i32,
    #[serde(default)]
    stderr: Vec<String>,
    #[serde(default)]
    stdout: Vec<String>,
    timeout_s: Option<u64>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    output: Option<String>,
    #[serde(default)]
    parses: bool,
    /// A device the case needs: `vulkan` (any Vulkan device) or `lavapipe` (the first Vulkan
    /// device is lavapipe). Without it the case is skipped with a message, unless
    /// `KILN_REQUIRE_TOOLS` is set, when it fails.
    requires: Option<String>,
    /// Inputs too large to check in, written into the scratch directory before the run:
    /// the name of their generator ([`generate`]).
    generate: Option<String>,
}

/// Writes the inputs generator `name` makes into `dir`.
fn generate(name: &str, dir: &Path) -> Result<(), String> {
    let write = |file: &str, text: String| {
        std::fs::write(dir.join(file), text).map_err(|e| format!("cannot write {file}: {e}"))
    };
    match name {
        // `chain.toml`: a graph of 1000 kernels in one chain: 999 add one to the previous
        // one's output (`t999 = t0 + 999`, through intermediates that no other node uses),
        // the last rotates `t999` into `t1000` (reading a neighbour's element: it cannot
        // join the fused chain).
        "chain_1000" => {
            write(
                "chain.kir",
                "kernel next(x: ptr<global, u32>, y: ptr<global, u32>) {\n  \
                 let i: u32 = global_id(0);\n  y[i] = x[i] + 1u32;\n}\n\
                 kernel rotate(x: ptr<global, u32>, y: ptr<global, u32>) {\n  \
                 let i: u32 = global_id(0);\n  y[i] = x[(i + 1u32) % 4u32];\n}\n"
                    .into(),
            )?;
            let mut toml = String::from(
                "kernels = \"chain.kir\"\nfuse_chains = true\ninternalize = true\n\n[buffers]\n\
                 t0 = { type = \"u32\", len = 4, init = \"iota\" }\n",
            );
            for i in 1..=1000 {
                toml.push_str(&format!("t{i} = {{ type = \"u32\", len = 4 }}\n"));
            }
            for i in 0..1000 {
                let kernel = if i < 999 { "next" } else { "rotate" };
                toml.push_str(&format!(
                    "\n[[nodes]]\nkernel = \"{kernel}\"\nglobal = [4]\nargs = [\"t{i}\", \"t{}\"]\n",
                    i + 1
                ));
            }
            write("chain.toml", toml)
        }
        other => Err(format!("unknown `generate = {other:?}`")),
    }
}

/// Why the device a case `requires` is missing here, if it is.
fn missing_device(requires: &str) -> Option<String> {
    let dev = kiln::runtime::device::vulkan::VulkanDevice::open();
    match (requires, dev) {
        (_, Err(e)) => Some(e.to_string()),
        ("vulkan", Ok(_)) => None,
        ("lavapipe", Ok(d)) if kiln::runtime::Device::name(&d).contains("llvmpipe") => None,
        ("lavapipe", Ok(d)) => {
            Some(format!("the first Vulkan device is {}", kiln::runtime::Device::name(&d)))
        }
        (other, _) => Some(format!("unknown `requires = {other:?}` (known: vulkan, lavapipe)")),
    }
}

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests").join("adversarial")
}

fn expand(s: &str, dir: &Path, tmp: &Path) -> String {
    s.replace("{dir}", &dir.display().to_string()).replace("{tmp}", &tmp.display().to_string())
}

/// Every path under `root` with its length and modification time, to see what a run wrote.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, (u64, Option<std::time::SystemTime>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else { continue };
            if m.is_dir() {
                stack.push(p.clone());
            }
            out.insert(p, (m.len(), m.modified().ok()));
        }
    }
    out
}

/// Runs `cmd` with a time limit; `None` when it had to be killed.
fn run_limited(mut cmd: Command, limit: Duration) -> Option<std::process::Output> {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn kiln");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut v).ok();
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut err, &mut v).ok();
        v
    });
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait for kiln") {
            let stdout = t_out.join().unwrap();
            let stderr = t_err.join().unwrap();
            return Some(std::process::Output { status, stdout, stderr });
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs one case; `Ok(Some(why))` when it needs a device missing here (not run), `Err` says
/// what went wrong.
fn check_case(path: &Path) -> Result<Option<String>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    let case: Case = toml::from_str(&text).map_err(|e| format!("bad case file: {e}"))?;
    if let Some(why) = case.requires.as_deref().and_then(missing_device) {
        if why.starts_with("unknown") {
            return Err(format!("needs {}: {why}", case.requires.unwrap_or_default()));
        }
        return Ok(Some(format!("needs {}: {why}", case.requires.unwrap_or_default())));
    }
    let dir = corpus_dir();
    let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
    let tmp = std::env::temp_dir().join(format!("kiln-adv-{}-{stem}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(tmp.join("home")).map_err(|e| e.to_string())?;
    if let Some(name) = &case.generate {
        generate(name, &tmp)?;
    }
    let corpus_before = snapshot(&dir);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kiln"));
    cmd.current_dir(&tmp)
        .args(case.args.iter().map(|a| expand(a, &dir, &tmp)))
        .stdin(Stdio::null())
        .env("HOME", tmp.join("home"))
        .env("XDG_CACHE_HOME", tmp.join("home/.cache"))
        .env("KILN_CACHE_DIR", tmp.join("cache"))
        .env_remove("KILN_CACHE_PERSISTENT")
        .env_remove("KILN_PROGRAM_BUILD_OPTIONS")
        .env_remove("KILN_CACHE_MAX_SIZE");
    for (k, v) in &case.env {
        cmd.env(k, expand(v, &dir, &tmp));
    }
    let limit = Duration::from_secs(case.timeout_s.unwrap_or(60));
    let result = (|| {
        let out = run_limited(cmd, limit).ok_or(format!("still running after {limit:?}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let shown = || format!("stdout:\n{stdout}\nstderr:\n{stderr}");
        let Some(code) = out.status.code() else {
            return Err(format!("killed by a signal ({}); {}", out.status, shown()));
        };
        if stderr.contains("panicked") {
            return Err(format!("kiln panicked; {}", shown()));
        }
        if code != case.exit {
            return Err(format!("exit code {code}, expected {}; {}", case.exit, shown()));
        }
        for needle in &case.stderr {
            if !stderr.contains(needle.as_str()) {
                return Err(format!("stderr lacks {needle:?}; {}", shown()));
            }
        }
        for needle in &case.stdout {
            if !stdout.contains(needle.as_str()) {
                return Err(format!("stdout lacks {needle:?}; {}", shown()));
            }
        }
        if let Some(output) = &case.output {
            let output = expand(output, &dir, &tmp);
            if !Path::new(&output).is_file() {
                return Err(format!("{output} was not written; {}", shown()));
            }
            if case.parses {
                let check = Command::new(env!("CARGO_BIN_EXE_kiln"))
                    .args(["check", &output])
                    .output()
                    .map_err(|e| e.to_string())?;
                if !check.status.success() {
                    return Err(format!(
                        "{output} does not parse back:\n{}",
                        String::from_utf8_lossy(&check.stderr)
                    ));
                }
            }
        }
        if snapshot(&dir) != corpus_before {
            return Err("the run wrote into the corpus directory".into());
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    result.map(|()| None)
}

#[test]
fn adversarial_corpus() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .expect("read tests/adversarial")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "tests/adversarial has no cases");
    let (mut failures, mut skipped) = (Vec::new(), Vec::new());
    for f in &files {
        match check_case(f) {
            Ok(None) => {}
            Ok(Some(why)) => skipped.push(format!("{}: {why}", f.display())),
            Err(e) => failures.push(format!("{}: {e}", f.display())),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    );
    eprintln!("{} adversarial cases passed", files.len() - skipped.len());
    if !skipped.is_empty() {
        // The cases that ran passed; those that did not are a skip (a failure with
        // KILN_REQUIRE_TOOLS), by the one rule.
        let why = format!(
            "{} of {} cases need a device missing here: {}",
            skipped.len(),
            files.len(),
            skipped.join("; ")
        );
        kiln_ir::testing::require("KILN_REQUIRE_TOOLS", Err::<(), _>(why));
    }
}
