//! Inputs that ask for more memory than a process may have: under an address-space limit
//! (`RLIMIT_AS`, as a container's memory limit would set), `kiln` refuses them with a message
//! and exit code 1; it never aborts on a failed allocation. And numbers that do not fit the
//! parameter they are for are refused, never rounded to infinity.

#![cfg(unix)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The address space `kiln` gets here: enough to start and parse, far from 4 GiB.
const LIMIT: u64 = 1 << 30;

/// Runs `kiln ARGS` in `dir` with its address space limited to [`LIMIT`] bytes.
fn kiln_limited(dir: &Path, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
    c.current_dir(dir).args(args).env("KILN_CACHE_DIR", dir.join("cache"));
    // SAFETY: `setrlimit` is async-signal-safe and touches nothing of the parent's.
    unsafe {
        c.pre_exec(|| {
            let lim = libc::rlimit { rlim_cur: LIMIT, rlim_max: LIMIT };
            if libc::setrlimit(libc::RLIMIT_AS, &lim) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    c.output().expect("run kiln")
}

fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-memory-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Asserts a clean failure: exit code 1 (not a signal), every needle on stderr, no panic.
#[track_caller]
fn assert_refused(o: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}; stderr:\n{err}", o.status);
    for n in needles {
        assert!(err.contains(n), "stderr does not mention {n:?}:\n{err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

/// Issue 29, C1: `kiln graph` built every buffer as 16-byte values before making it, so a
/// u8 buffer of 2^32 elements asked for 64 GiB and aborted. It is built at one byte per
/// element, and when even that cannot be had the buffer is refused with a message.
#[test]
fn graph_buffer_beyond_memory_is_refused() {
    let dir = scratch("graph");
    std::fs::write(dir.join("k.kir"), "kernel k(x: ptr<global, u8>) { x[0] = 1u8; }\n").unwrap();
    let desc = "kernels = \"k.kir\"\n[buffers]\nbig = { type = \"u8\", len = 4294967296 }\n";
    std::fs::write(dir.join("g.toml"), desc).unwrap();
    let o = kiln_limited(&dir, &["graph", "g.toml", "--device", "interp"]);
    assert_refused(&o, &["buffer `big`", "not enough memory for a buffer of 4294967296 bytes"]);
    // A small buffer of the same description runs under the same limit.
    let desc = "kernels = \"k.kir\"\n[buffers]\nsmall = { type = \"u8\", len = 4 }\n\
                [[nodes]]\nname = \"k\"\nkernel = \"k\"\nglobal = [1]\nargs = [\"small\"]\n";
    std::fs::write(dir.join("g.toml"), desc).unwrap();
    let o = kiln_limited(&dir, &["graph", "g.toml", "--device", "interp", "--run"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "small: u8[4] = [1, 0, 0, 0]\n");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 29, C2: a 13-byte `.npy` whose header length field is 0xffffffff made kiln
/// allocate 4 GiB for the header, which aborts under a memory limit. The length is checked
/// against the file's size before anything is allocated.
#[test]
fn npy_header_longer_than_the_file_is_refused() {
    let dir = scratch("npy");
    std::fs::write(dir.join("k.kir"), "kernel k(x: ptr<global, f32>) { x[0] = 1.0; }\n").unwrap();
    std::fs::write(dir.join("x.npy"), b"\x93NUMPY\x02\x00\xff\xff\xff\xff{").unwrap();
    let args = ["run", "k.kir", "--global", "1", "--device", "interp", "--arg", "x=@x.npy"];
    let o = kiln_limited(&dir, &args);
    assert_refused(&o, &["x.npy", "header would end at byte 4294967307", "the file has 13 bytes"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 29, U5: `--arg a=1e40` for an f32 parameter became `inf`, while `1e40f32` in a .kir
/// file is an error. Both refuse a finite number too large for its type, the command line
/// naming the argument; `inf` written as such is still infinity.
#[test]
fn arguments_too_large_for_their_type_are_refused() {
    let dir = scratch("args");
    let kir = "kernel k(h: ptr<global, f16>, s: f32, h1: f16, d: f64, u: u8) {\n  h[0] = h1;\n}\n";
    std::fs::write(dir.join("k.kir"), kir).unwrap();
    let run = |s: &str, h1: &str, d: &str, u: &str| {
        let args = [
            "run".to_string(),
            "k.kir".into(),
            "--global".into(),
            "1".into(),
            "--device".into(),
            "interp".into(),
            "--arg".into(),
            "h=zeros:1".into(),
            "--arg".into(),
            format!("s={s}"),
            "--arg".into(),
            format!("h1={h1}"),
            "--arg".into(),
            format!("d={d}"),
            "--arg".into(),
            format!("u={u}"),
        ];
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        kiln_limited(&dir, &args)
    };
    let o = run("1e40", "70000", "1e400", "256");
    assert_refused(
        &o,
        &[
            "--arg s=1e40: `1e40` is out of range for f32",
            "--arg h1=70000: `70000` is out of range for f16",
            "--arg d=1e400: `1e400` is out of range for f64",
            "--arg u=256: `256` is not a valid u8 value (out of range 0..=255)",
        ],
    );
    let o = run("-inf", "65504", "1e308", "255");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "h: f16[1] = [65504.0]\n");
    // The .kir parser's rule is the same one.
    std::fs::write(dir.join("lit.kir"), "kernel k(x: ptr<global, f16>) { x[0] = 70000; }\n")
        .unwrap();
    let o = kiln_limited(&dir, &["check", "lit.kir"]);
    assert_refused(&o, &["literal out of range for f16"]);
    let _ = std::fs::remove_dir_all(&dir);
}
