//! The command line tells the truth: run limits (`--max-steps`, `--timeout`, the GPU
//! watchdog), exit code 2 for every malformed command line, environment values that are
//! not understood, `emit` refusing to write binary to a terminal, and help texts.

use std::path::Path;
use std::process::{Command, Output};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `kiln ARGS` in the repository root, with extra environment.
fn kiln_env(env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
    c.current_dir(root()).args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run kiln")
}

fn kiln(args: &[&str]) -> Output {
    kiln_env(&[], args)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Asserts exit code `code` and that stderr mentions every needle (and no panic).
#[track_caller]
fn assert_fails(o: &Output, code: i32, needles: &[&str]) {
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "expected exit code {code}; stderr:\n{err}");
    for n in needles {
        assert!(err.contains(n), "stderr does not mention {n:?}:\n{err}");
    }
    assert!(!err.contains("panicked"), "kiln panicked:\n{err}");
}

const SPIN: &str = "tests/adversarial/run_endless_timeout.kir";

#[test]
fn run_endless_kernel_stops_at_limits() {
    let o = kiln(&["run", SPIN, "--global", "4", "--arg", "x=zeros:1", "--max-steps", "50"]);
    assert_fails(&o, 1, &["kernel `spin`, work-item (0, 0, 0): step limit exceeded"]);
    let o = kiln(&["run", SPIN, "--global", "4", "--arg", "x=zeros:1", "--timeout", "0.2"]);
    assert_fails(&o, 1, &["kernel `spin`, work-item (0, 0, 0): time limit exceeded"]);
    // Limits that are not reached change nothing.
    let o = kiln(&[
        "run",
        "examples/saxpy.kir",
        "--global",
        "8",
        "--arg",
        "x=iota:8",
        "--arg",
        "y=zeros:8",
        "--arg",
        "a=2",
        "--arg",
        "n=8",
        "--max-steps",
        "1000",
        "--timeout",
        "600",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("y: f32[8] = [0.0, 2.0, 4.0"), "{}", text(&o.stdout));
}

#[test]
fn run_limits_reject_bad_values() {
    let base = ["run", SPIN, "--global", "1", "--arg", "x=zeros:1"];
    for (flag, needle) in [
        ("--timeout=abc", "not a number of seconds"),
        ("--timeout=0", "must be positive"),
        ("--timeout=NaN", "must be positive"),
        ("--timeout=1e30", "too many seconds"),
        ("--max-steps=-3", "--max-steps"),
        ("--max-steps=lots", "--max-steps"),
    ] {
        let o = kiln(&[&base[..], &[flag]].concat());
        assert_fails(&o, 2, &[needle]);
    }
    for device in ["vulkan", "cuda"] {
        let o = kiln(&[&base[..], &["--max-steps", "10", "--device", device]].concat());
        assert_fails(&o, 2, &["--max-steps", "cannot count them"]);
    }
}

/// On a GPU device the host abandons the wait after --timeout and says the work may still
/// be running (lavapipe here; skipped with a message where there is no Vulkan device,
/// unless `KILN_REQUIRE_TOOLS` is set). lavapipe caps loops at 65535 iterations, so the
/// kernel is long through its many work-items rather than endless.
#[test]
fn run_gpu_watchdog_abandons_wait() {
    let dir = std::env::temp_dir().join(format!("kiln-usage-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("busy.kir");
    std::fs::write(
        &file,
        "kernel busy(x: ptr<global, u32>, n: u32) {
  let g: u32 = global_id(0);
  var acc: u32 = g;
  for i: u32 in 0 .. n {
    acc = acc * 3u32 + i;
  }
  x[g] = acc;
}
",
    )
    .unwrap();
    let o = kiln(&[
        "run",
        file.to_str().unwrap(),
        "--device",
        "vulkan",
        "--global",
        "4194304",
        "--local",
        "128",
        "--arg",
        "x=zeros:4194304",
        "--arg",
        "n=60000",
        "--timeout",
        "0.5",
    ]);
    let _ = std::fs::remove_dir_all(&dir);
    let err = text(&o.stderr);
    if err.contains("device unavailable") {
        // Skipped, or (with KILN_REQUIRE_TOOLS) failed, by the one rule.
        kiln_ir::testing::require("KILN_REQUIRE_TOOLS", Err::<(), _>(err));
        return;
    }
    assert_fails(
        &o,
        1,
        &["kernel `busy` did not finish within 0.5s (--timeout)", "may still be running"],
    );
}

/// `kiln emit --target spirv-*` with a terminal as stdout and no `-o` refuses (exit 2)
/// instead of writing binary to the terminal; `--text` and `-o` still work there.
#[cfg(unix)]
#[test]
fn emit_spirv_refuses_terminal_stdout() {
    use std::os::fd::{FromRawFd, OwnedFd};
    let run = |extra: &[&str]| {
        let (mut master, mut slave) = (0, 0);
        // SAFETY: openpty writes two fds into the out-parameters; the null pointers ask for no
        // name and default terminal settings.
        let rc = unsafe {
            libc::openpty(
                &mut master,
                &mut slave,
                std::ptr::null_mut(),
                std::ptr::null(),
                std::ptr::null(),
            )
        };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both fds were just opened and are owned by nothing else.
        let (master, slave) =
            unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        let o = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .current_dir(root())
            .args(["emit", "examples/saxpy.kir", "--target", "spirv-vk"])
            .args(extra)
            .stdout(std::process::Stdio::from(slave))
            .output()
            .expect("run kiln");
        drop(master);
        o
    };
    let o = run(&[]);
    assert_fails(&o, 2, &["binary SPIR-V", "stdout is a terminal", "-o PATH"]);
    let o = run(&["--text"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let dir = std::env::temp_dir().join(format!("kiln-usage-tty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = dir.join("saxpy.spv");
    let o = run(&["-o", out.to_str().unwrap()]);
    let bytes = std::fs::read(&out).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(bytes.get(..4), Some(&0x0723_0203u32.to_le_bytes()[..]), "not SPIR-V");
    // Not a terminal (a pipe): the binary goes to stdout as before.
    let o = kiln(&["emit", "examples/saxpy.kir", "--target", "spirv-vk"]);
    assert!(o.status.success() && o.stdout.starts_with(&0x0723_0203u32.to_le_bytes()));
}

/// A `KILN_*` value that is not understood is the same error for every command and device,
/// before anything runs; accepted values pass.
#[test]
fn env_values_not_understood_are_errors_everywhere() {
    let saxpy = [
        "run",
        "examples/saxpy.kir",
        "--global",
        "8",
        "--arg",
        "x=iota:8",
        "--arg",
        "y=zeros:8",
        "--arg",
        "a=2",
        "--arg",
        "n=8",
    ];
    for (var, value, needle) in [
        ("KILN_CACHE_PERSISTENT", "yes", "1 (on) or 0 (off)"),
        ("KILN_CACHE_PERSISTENT", "true", "1 (on) or 0 (off)"),
        ("KILN_PROGRAM_BUILD_OPTIONS", "-O7", "unknown build option `-O7`"),
        ("KILN_IN_MEM_CACHE_MAX", "lots", "expected a size in bytes"),
        ("KILN_VERBOSE", "1", "debuginfo"),
    ] {
        let said = format!("{var}=\"{value}\" is not understood");
        for device in ["interp", "vulkan", "cuda"] {
            let o = kiln_env(&[(var, value)], &[&saxpy[..], &["--device", device]].concat());
            assert_fails(&o, 1, &[&said, needle]);
        }
        let o = kiln_env(&[(var, value)], &["fmt", "examples/saxpy.kir"]);
        assert_fails(&o, 1, &[&said]);
    }
    let scratch = std::env::temp_dir().join(format!("kiln-usage-env-{}", std::process::id()));
    for (var, value) in [
        ("KILN_CACHE_PERSISTENT", "0"),
        ("KILN_PROGRAM_BUILD_OPTIONS", "-O0 -O2"),
        ("KILN_IN_MEM_CACHE_MAX", "4096"),
        ("KILN_VERBOSE", "debuginfo"),
    ] {
        let o = kiln_env(&[(var, value), ("KILN_CACHE_DIR", scratch.to_str().unwrap())], &saxpy);
        assert!(o.status.success(), "{var}={value}: {}", text(&o.stderr));
    }
    let _ = std::fs::remove_dir_all(&scratch);
}

/// Help tells the truth: every variable of kiln's is in the footer, `run` is not said to be
/// interpreter-only, and `opt` points to a flag that exists.
#[test]
fn help_lists_variables_and_real_flags() {
    let o = kiln(&["--help"]);
    let help = text(&o.stdout);
    assert!(o.status.success());
    for v in kiln::runtime::env::VARIABLES {
        if v.scope == kiln::runtime::env::Scope::Kiln {
            assert!(
                help.contains(&format!("{}: {}", v.name, v.accepts)),
                "{} missing:\n{help}",
                v.name
            );
        }
    }
    assert!(help.contains("over an nd-range on a device: `interp`"), "{help}");
    let o = kiln(&["opt", "--help"]);
    assert!(text(&o.stdout).contains("--list-passes"), "{}", text(&o.stdout));
    let o = kiln(&["opt", "--list-passes"]);
    assert!(o.status.success());
    for (name, _, what) in kiln::passes::manager::PASSES {
        assert!(text(&o.stdout).contains(&format!("{name:<10} {what}")), "{name}");
    }
}

/// A sample of malformed command lines for every subcommand: all exit 2, none 1.
#[test]
fn malformed_command_lines_exit_2() {
    for args in [
        &["check"][..],
        &["check", "--frob", "x.kir"],
        &["fmt"],
        &["fmt", "examples/saxpy.kir", "--check", "--nope"],
        &["emit", "examples/saxpy.kir"],
        &["emit", "examples/saxpy.kir", "--target", "x87"],
        &["emit", "examples/saxpy.kir", "--target", "ptx", "--sm", "abc"],
        &["emit", "examples/saxpy.kir", "--target", "ptx", "--ptx-version", "eight"],
        &["fuse", "examples/saxpy.kir"],
        &["run", "examples/saxpy.kir", "--global", "abc"],
        &["run", "examples/saxpy.kir", "--global", "8", "--arg", "a"],
        &["run", "examples/saxpy.kir", "--global", "8", "--arg", "x=zeros:abc"],
        &["run", "examples/saxpy.kir", "--global", "8", "--arg", "x=iota:"],
        &["run", "examples/saxpy.kir", "--global", "8", "--arg", "x=@"],
        &["run", "examples/saxpy.kir", "--global", "8", "--out", "y"],
        &["run", "examples/saxpy.kir", "--device", "tpu"],
        &["run", "examples/saxpy.kir", "--max-steps", "x"],
        &["divergence"],
        &["cache", "frob"],
        &["cache", "evict", "--max-size", "lots"],
        &["opt", "examples/saxpy.kir"],
        &["opt", "examples/saxpy.kir", "--passes", "cse,nope"],
        &["opt", "examples/saxpy.kir", "-O", "--passes", "cse"],
        &["frobnicate"],
        &[],
    ] {
        let o = kiln(args);
        assert_eq!(o.status.code(), Some(2), "kiln {args:?}: {}", text(&o.stderr));
        assert!(!text(&o.stderr).is_empty(), "kiln {args:?} said nothing");
    }
}

/// Issue 29: `kiln --help` said `run` ran on "the interpreter, Vulkan or CUDA" (no `cpu`) and
/// `emit` lowered for four targets (no `kir`, `x86`). The summaries name every device and
/// every target of the registries.
#[test]
fn help_summaries_list_every_device_and_target() {
    let o = kiln(&["--help"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let help = text(&o.stdout);
    let summary = |cmd: &str| {
        help.lines()
            .find(|l| l.trim_start().starts_with(&format!("{cmd} ")))
            .unwrap_or_else(|| panic!("no `{cmd}` in:\n{help}"))
            .to_string()
    };
    let run = summary("run");
    for d in kiln::runtime::device::registry::names() {
        assert!(run.contains(&format!("`{d}`")), "`run`'s summary lacks `{d}`: {run}");
    }
    let emit = summary("emit");
    for t in kiln::backends::registry::names() {
        assert!(emit.contains(&format!("`{t}`")), "`emit`'s summary lacks `{t}`: {emit}");
    }
}

/// Issue 29, H2: `kiln graph --run` had no --timeout or --max-steps, its help left out `cpu`
/// and its default device was `interp` where `kiln run`'s is `cpu`. Both take the same
/// device options, described by the same help.
#[test]
fn graph_and_run_share_their_device_options() {
    let options = |cmd: &str| {
        let o = kiln(&[cmd, "--help"]);
        assert!(o.status.success(), "{}", text(&o.stderr));
        let help = text(&o.stdout);
        // The lines from --device up to the option or section after --threads.
        let lines: Vec<&str> = help.lines().collect();
        let at = |flag: &str| lines.iter().position(|l| l.trim_start().starts_with(flag));
        let start = at("--device <DEVICE>").unwrap_or_else(|| panic!("{help}"));
        let threads = at("--threads <N>").unwrap_or_else(|| panic!("{help}"));
        let indent = |l: &str| l.len() - l.trim_start().len();
        let next = |l: &&str| {
            (indent(l) <= 6 && l.trim_start().starts_with('-')) || (indent(l) == 0 && !l.is_empty())
        };
        let end =
            lines[threads + 1..].iter().position(next).map_or(lines.len(), |e| e + threads + 1);
        // Short and long help lay the same text out differently.
        lines[start..end].join(" ").split_whitespace().collect::<Vec<_>>().join(" ")
    };
    let run = options("run");
    assert!(run.contains("--max-steps <N>") && run.contains("--timeout <SECS>"), "{run}");
    assert!(run.contains("`cpu`") && run.contains("Default: `cpu` on x86-64 hosts"), "{run}");
    assert_eq!(options("graph"), run);
}

#[test]
fn a_reader_that_leaves_early_ends_kiln_quietly() {
    // `kiln ... | head -1`: once the reader has gone, the next write fails with EPIPE; kiln
    // ends with status 0 and says nothing, as Unix tools do (it used to panic in `print!`).
    // Each output is far larger than a pipe's buffer, so a write after the close is certain.
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = std::env::temp_dir().join(format!("kiln-epipe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kir = dir.join("g.kir");
    let o = kiln(&["gen", "gemm", "1024", "1024", "1024", "-o", kir.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let k = kir.to_str().unwrap();
    for args in [
        vec!["emit", "--target", "x86", k],
        vec!["emit", "--target", "spirv-vk", "--text", k],
        vec!["gen", "gemm", "4096", "4096", "4096"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .current_dir(root())
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kiln");
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
        assert!(!first.is_empty(), "{args:?} printed nothing");
        // The reader (and with it the pipe's only read end) is dropped here.
        let o = child.wait_with_output().expect("wait for kiln");
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(0), "{args:?}: stderr:\n{err}");
        assert!(!err.contains("panicked"), "{args:?} panicked:\n{err}");
    }
    std::fs::remove_dir_all(&dir).ok();
}
