//! `kiln run` goes through the runtime's caches: with `KILN_CACHE_PERSISTENT=1` the program
//! it builds lands in the persistent cache, where `kiln cache ls|show` find it; a second run
//! reuses it; `KILN_PROGRAM_BUILD_OPTIONS` is part of the key; and the output is the same
//! every time.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `kiln` in the repository root with the cache under `dir` and the given extra
/// environment; variables that would change the cache are cleared first.
fn kiln(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
    c.current_dir(root()).args(args).env("KILN_CACHE_DIR", dir);
    for v in ["KILN_CACHE_PERSISTENT", "KILN_PROGRAM_BUILD_OPTIONS", "KILN_CACHE_MAX_SIZE"] {
        c.env_remove(v);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run kiln")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[track_caller]
fn ok(o: &Output) -> String {
    assert!(o.status.success(), "kiln failed:\n{}{}", text(&o.stdout), text(&o.stderr));
    text(&o.stdout)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-cli-cache-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The item ids `kiln cache ls` prints (first column), sorted.
fn ls(dir: &Path) -> Vec<String> {
    let out = ok(&kiln(dir, &[], &["cache", "ls"]));
    let mut ids: Vec<String> =
        out.lines().filter_map(|l| l.split_whitespace().next()).map(String::from).collect();
    ids.sort();
    ids
}

const SAXPY: [&str; 12] = [
    "run",
    "examples/saxpy.kir",
    "--global",
    "8",
    "--arg",
    "x=iota:8",
    "--arg",
    "y=iota:8",
    "--arg",
    "a=2.5",
    "--arg",
    "n=7",
];

fn with_device(device: &str) -> Vec<&str> {
    let mut v = SAXPY.to_vec();
    v.extend(["--device", device]);
    v
}

#[test]
fn run_stores_programs_that_cache_ls_lists() {
    let dir = scratch("interp");
    let on = [("KILN_CACHE_PERSISTENT", "1")];
    // Without the switch nothing is stored.
    let plain = ok(&kiln(&dir, &[], &SAXPY));
    assert!(plain.contains("y: f32[8] = [0.0, 3.5, 7.0"), "{plain}");
    assert!(ls(&dir).is_empty());
    // With it, the first run stores one program ...
    assert_eq!(ok(&kiln(&dir, &on, &SAXPY)), plain);
    let first = ls(&dir);
    assert_eq!(first.len(), 1, "{first:?}");
    // ... which `kiln cache show` describes: the interpreter's device and the saxpy module.
    let show = ok(&kiln(&dir, &[], &["cache", "show", &first[0]]));
    assert!(show.contains("device: interp|kiln-interp|"), "{show}");
    assert!(show.contains("kernel saxpy("), "{show}");
    assert!(show.contains("checksum ok"), "{show}");
    // A second run finds it (no new item) and prints the same.
    assert_eq!(ok(&kiln(&dir, &on, &SAXPY)), plain);
    assert_eq!(ls(&dir), first);
    // Other build options are another key: a second item, options recorded.
    let opts = [("KILN_CACHE_PERSISTENT", "1"), ("KILN_PROGRAM_BUILD_OPTIONS", "-O0")];
    assert_eq!(ok(&kiln(&dir, &opts, &SAXPY)), plain);
    let both = ls(&dir);
    assert_eq!(both.len(), 2, "{both:?}");
    let new = both.iter().find(|id| !first.contains(id)).unwrap();
    let show = ok(&kiln(&dir, &[], &["cache", "show", new]));
    assert!(show.contains("build options: \"-O0\""), "{show}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Vulkan device's SPIR-V lands in the cache the same way (lavapipe here; skipped with
/// a message where there is no Vulkan device, unless `KILN_REQUIRE_TOOLS` is set).
#[test]
fn run_on_vulkan_stores_spirv() {
    let dir = scratch("vulkan");
    let on = [("KILN_CACHE_PERSISTENT", "1")];
    let o = kiln(&dir, &on, &with_device("vulkan"));
    if !o.status.success() {
        let err = text(&o.stderr);
        if err.contains("vulkan device unavailable")
            && std::env::var_os("KILN_REQUIRE_TOOLS").is_none()
        {
            eprintln!("skipping: {err}");
            return;
        }
        panic!("{err}");
    }
    let want = ok(&kiln(&dir, &[], &SAXPY));
    assert_eq!(text(&o.stdout), want);
    // The program, and next to it its pipeline cache (stored when the run ended).
    let items = ls(&dir);
    assert_eq!(items.len(), 2, "{items:?}");
    let shows: Vec<String> =
        items.iter().map(|i| ok(&kiln(&dir, &[], &["cache", "show", i]))).collect();
    assert!(shows.iter().all(|s| s.contains("device: vulkan|")), "{shows:?}");
    let driver = shows.iter().filter(|s| s.contains("\\0kiln-driver-cache")).count();
    assert_eq!(driver, 1, "{shows:?}");
    // The second run loads the stored binary and still prints the interpreter's output.
    assert_eq!(ok(&kiln(&dir, &on, &with_device("vulkan"))), want);
    assert_eq!(ls(&dir), items);
    // An unknown build option is a clear error, not a silent build.
    let bad = [("KILN_CACHE_PERSISTENT", "1"), ("KILN_PROGRAM_BUILD_OPTIONS", "-Ofast")];
    let o = kiln(&dir, &bad, &with_device("vulkan"));
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("unknown build option `-Ofast`"), "{}", text(&o.stderr));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Several `kiln run` processes at once on one cache directory, for two keys: every run
/// prints the interpreter's output with no warning, and the cache ends with both items,
/// loadable.
#[test]
fn concurrent_runs_share_one_cache() {
    let dir = scratch("concurrent");
    let want = ok(&kiln(&dir, &[], &SAXPY));
    let spawn = |opts: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
        c.current_dir(root())
            .args(SAXPY)
            .env("KILN_CACHE_DIR", &dir)
            .env("KILN_CACHE_PERSISTENT", "1")
            .env("KILN_PROGRAM_BUILD_OPTIONS", opts)
            .env_remove("KILN_CACHE_MAX_SIZE");
        c.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
        c.spawn().expect("run kiln")
    };
    let procs: Vec<_> = (0..6).map(|i| spawn(if i % 2 == 0 { "" } else { "-O0" })).collect();
    for p in procs {
        let o = p.wait_with_output().unwrap();
        assert_eq!(ok(&o), want);
        assert!(o.stderr.is_empty(), "{}", text(&o.stderr));
    }
    let items = ls(&dir);
    assert_eq!(items.len(), 2, "{items:?}");
    for id in &items {
        let show = ok(&kiln(&dir, &[], &["cache", "show", id]));
        assert!(show.contains("checksum ok"), "{show}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
