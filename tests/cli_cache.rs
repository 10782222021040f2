//! `kiln run` goes through the runtime's caches: with `KILN_CACHE_PERSISTENT=1` the program
//! it builds lands in the persistent cache, where `kiln cache ls|show` find it; a second run
//! reuses it; `KILN_PROGRAM_BUILD_OPTIONS` is part of the key; and the output is the same
//! every time. It loads only what this user's kiln wrote (private modes, directories no one
//! else can write, a keyed MAC), and never lands in the working directory by default.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::SystemTime;

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
    // The interpreter named (the default device is the cpu one on x86-64 hosts).
    let saxpy = with_device("interp");
    // Without the switch nothing is stored.
    let plain = ok(&kiln(&dir, &[], &saxpy));
    assert!(plain.contains("y: f32[8] = [0.0, 3.5, 7.0"), "{plain}");
    assert!(!dir.exists(), "a run without KILN_CACHE_PERSISTENT=1 created the cache");
    // With it, the first run stores one program ...
    assert_eq!(ok(&kiln(&dir, &on, &saxpy)), plain);
    let first = ls(&dir);
    assert_eq!(first.len(), 1, "{first:?}");
    // ... which `kiln cache show` describes: the interpreter's device and the saxpy module.
    let show = ok(&kiln(&dir, &[], &["cache", "show", &first[0]]));
    assert!(show.contains("device: interp|kiln-interp|"), "{show}");
    assert!(show.contains("kernel saxpy("), "{show}");
    assert!(show.contains(", authenticated"), "{show}");
    // A second run finds it (no new item) and prints the same.
    assert_eq!(ok(&kiln(&dir, &on, &saxpy)), plain);
    assert_eq!(ls(&dir), first);
    // Other build options are another key: a second item, options recorded.
    let opts = [("KILN_CACHE_PERSISTENT", "1"), ("KILN_PROGRAM_BUILD_OPTIONS", "-O0")];
    assert_eq!(ok(&kiln(&dir, &opts, &saxpy)), plain);
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
            kiln_ir::testing::skip(&err);
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
        assert!(show.contains(", authenticated"), "{show}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every path under `dir` (links not followed) with its contents or link target and its
/// modification time.
fn snapshot(dir: &Path) -> std::collections::BTreeMap<PathBuf, (String, Option<SystemTime>)> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().map(Result::unwrap) {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let what = if m.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else if m.file_type().is_symlink() {
                format!("link to {}", std::fs::read_link(&p).unwrap().display())
            } else {
                text(&std::fs::read(&p).unwrap())
            };
            out.insert(p, (what, m.modified().ok()));
        }
    }
    out
}

/// The item directory of the single item in the cache at `dir`.
fn item_dir(dir: &Path) -> PathBuf {
    let ids = ls(dir);
    assert_eq!(ids.len(), 1, "{ids:?}");
    dir.join(ids[0].rsplit_once('/').unwrap().0)
}

#[track_caller]
fn fails(o: &Output, needles: &[&str]) -> String {
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}{err}", text(&o.stdout));
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}: {err}");
    }
    err
}

/// Issue 12: `kiln cache clear`, `kiln cache evict` and eviction during `kiln run` under
/// `KILN_CACHE_MAX_SIZE=1` followed links inside the cache and deleted the files behind
/// them. Links to files, to directories (another kiln cache among them), to the root's
/// parent and to `.` are planted; every file outside the cache survives.
#[cfg(unix)]
#[test]
fn clear_evict_and_run_keep_files_behind_links() {
    use std::os::unix::fs::symlink;
    let base = scratch("links");
    let (dir, victim) = (base.join("cache"), base.join("victim"));
    let on = [("KILN_CACHE_PERSISTENT", "1")];
    // The victim: loose files with the cache's names, and a real kiln cache of its own.
    std::fs::create_dir_all(&victim).unwrap();
    for name in ["a.txt", "0.src", "0.bin", ".lock", "CACHEDIR.TAG"] {
        std::fs::write(victim.join(name), format!("victim {name}")).unwrap();
    }
    let other = victim.join("other");
    ok(&kiln(&other, &on, &SAXPY));
    let other_item = item_dir(&other);
    ok(&kiln(&dir, &on, &SAXPY));
    let mine = item_dir(&dir);
    let device = mine.ancestors().nth(3).unwrap().to_path_buf();
    symlink(&victim, dir.join("victim-link")).unwrap();
    symlink(other_item.ancestors().nth(3).unwrap(), dir.join("00000000000000aa")).unwrap();
    symlink(other_item.ancestors().nth(1).unwrap(), device.join("00000000000000bb")).unwrap();
    symlink(&other_item, mine.parent().unwrap().join("00000000000000cc")).unwrap();
    symlink("..", dir.join("parent")).unwrap();
    symlink(&base, dir.join("00000000000000dd")).unwrap();
    symlink(".", dir.join("self")).unwrap();
    symlink(".", device.join("00000000000000ee")).unwrap();
    symlink(victim.join("0.src"), mine.join("5.src")).unwrap();
    symlink(victim.join("0.bin"), mine.join("5.bin")).unwrap();
    symlink(other_item.join("0.src"), mine.join("6.src")).unwrap();
    symlink(other_item.join("0.bin"), mine.join("6.bin")).unwrap();
    let before = snapshot(&victim);
    let want = ok(&kiln(&dir, &[], &SAXPY));
    // A run that stores and evicts everything over one byte.
    let tiny = [("KILN_CACHE_PERSISTENT", "1"), ("KILN_PROGRAM_BUILD_OPTIONS", "-O0")];
    let limited: Vec<_> = tiny.iter().copied().chain([("KILN_CACHE_MAX_SIZE", "1")]).collect();
    assert_eq!(ok(&kiln(&dir, &limited, &SAXPY)), want);
    assert_eq!(snapshot(&victim), before, "eviction during a run touched the victim");
    // Both real items were evicted; `ls` terminates and lists nothing behind the links ...
    assert!(ls(&dir).is_empty());
    // ... and then exactly the one item stored next.
    ok(&kiln(&dir, &on, &SAXPY));
    assert_eq!(ls(&dir).len(), 1);
    ok(&kiln(&dir, &[], &["cache", "evict", "--max-size", "0"]));
    assert_eq!(snapshot(&victim), before, "`cache evict` touched the victim");
    ok(&kiln(&dir, &on, &SAXPY));
    let out = ok(&kiln(&dir, &[], &["cache", "clear"]));
    assert!(out.contains("removed 1 items"), "{out}");
    assert_eq!(snapshot(&victim), before, "`cache clear` touched the victim");
    assert!(ls(&other).len() == 1 && ls(&dir).is_empty());
    let _ = std::fs::remove_dir_all(&base);
}

/// Issue 13: `kiln cache stats --dir /missing` reported an empty cache. Every subcommand
/// says the directory does not exist.
#[test]
fn cache_commands_on_a_missing_dir_fail() {
    let base = scratch("missing");
    let missing = base.join("no-such-cache");
    let m = missing.to_str().unwrap();
    let id = "0000000000000000/0000000000000000/0000000000000000/0000000000000000/0";
    for args in [
        &["cache", "stats", "--dir", m][..],
        &["cache", "ls", "--dir", m],
        &["cache", "show", id, "--dir", m],
        &["cache", "clear", "--dir", m],
        &["cache", "evict", "--max-size", "1", "--dir", m],
    ] {
        fails(&kiln(&base, &[], args), &["does not exist", m]);
    }
    // Through KILN_CACHE_DIR too.
    fails(&kiln(&missing, &[], &["cache", "stats"]), &["does not exist", m]);
    assert!(!missing.exists());
}

/// Issue 13: `kiln cache clear` on a directory that is not a kiln cache refuses, and the
/// files there (some with the cache's own names) survive.
#[test]
fn cache_clear_refuses_a_directory_that_is_not_a_cache() {
    let base = scratch("foreign");
    let deep = base.join("0123456789abcdef/0123456789abcdef/0123456789abcdef/0123456789abcdef");
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("0.src"), b"not kiln's").unwrap();
    std::fs::write(base.join("thesis.tex"), b"precious").unwrap();
    let before = snapshot(&base);
    for sub in ["clear", "ls", "stats"] {
        fails(&kiln(&base, &[], &["cache", sub]), &["is not a kiln cache", "thesis.tex"]);
    }
    let err = kiln(&base, &[("KILN_CACHE_PERSISTENT", "1"), ("KILN_CACHE_MAX_SIZE", "1")], &SAXPY);
    assert!(text(&err.stderr).contains("is not a kiln cache"), "{}", text(&err.stderr));
    assert_eq!(snapshot(&base), before);
    let _ = std::fs::remove_dir_all(&base);
}

/// Issue 12, item 4: `KILN_CACHE_MAX_SIZE=abc`, `-1` or `10K` meant "no limit" without a
/// word. Size suffixes are accepted; anything else is an error naming the variable and the
/// value, for `kiln run` and `kiln cache` alike.
#[test]
fn cache_max_size_garbage_is_an_error() {
    let dir = scratch("max-size");
    for bad in ["abc", "-1", "10KB", "1.5M"] {
        let env = [("KILN_CACHE_PERSISTENT", "1"), ("KILN_CACHE_MAX_SIZE", bad)];
        let want = format!("KILN_CACHE_MAX_SIZE=\"{bad}\"");
        fails(&kiln(&dir, &env, &SAXPY), &[&want]);
        fails(&kiln(&dir, &env, &["cache", "evict"]), &[&want]);
    }
    // A suffix is a size: 10K holds the saxpy item, 1 does not.
    let env = [("KILN_CACHE_PERSISTENT", "1"), ("KILN_CACHE_MAX_SIZE", "10K")];
    ok(&kiln(&dir, &env, &SAXPY));
    assert_eq!(ls(&dir).len(), 1);
    ok(&kiln(&dir, &[("KILN_CACHE_MAX_SIZE", "10k")], &["cache", "evict"]));
    assert_eq!(ls(&dir).len(), 1);
    ok(&kiln(&dir, &[("KILN_CACHE_MAX_SIZE", "1")], &["cache", "evict"]));
    assert!(ls(&dir).is_empty());
    // The option takes the same syntax.
    let o = kiln(&dir, &[], &["cache", "evict", "--max-size", "lots"]);
    assert!(!o.status.success() && text(&o.stderr).contains("lots"), "{}", text(&o.stderr));
    ok(&kiln(&dir, &[], &["cache", "evict", "--max-size", "64M"]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 12, item 3: a directory named `0.src` showed as an item and warned on every run.
/// It is reported once, by its path, and repaired; the next run is silent.
#[test]
fn directory_named_src_warns_once_across_runs() {
    let dir = scratch("src-dir");
    let on = [("KILN_CACHE_PERSISTENT", "1")];
    let want = ok(&kiln(&dir, &on, &SAXPY));
    let item = item_dir(&dir);
    std::fs::remove_file(item.join("0.src")).unwrap();
    std::fs::remove_file(item.join("0.bin")).unwrap();
    std::fs::create_dir(item.join("0.src")).unwrap();
    let o = kiln(&dir, &[], &["cache", "ls"]);
    assert_eq!(ok(&o), "", "a directory listed as an item");
    assert!(text(&o.stderr).contains("is a directory where kiln keeps a file"));
    let first = kiln(&dir, &on, &SAXPY);
    assert_eq!(ok(&first), want);
    let err = text(&first.stderr);
    assert!(err.contains(&format!("`{}`", item.join("0.src").display())), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let second = kiln(&dir, &on, &SAXPY);
    assert_eq!(ok(&second), want);
    assert!(second.stderr.is_empty(), "{}", text(&second.stderr));
    assert_eq!(ls(&dir).len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 12, item 2: a directory where `0.bin` belongs turned the persistent cache off for
/// the whole run, naming only the root. It names the damaged path; other keys still store.
#[test]
fn directory_at_bin_keeps_the_cache_on() {
    let dir = scratch("bin-dir");
    let on = [("KILN_CACHE_PERSISTENT", "1")];
    let want = ok(&kiln(&dir, &on, &SAXPY));
    let item = item_dir(&dir);
    std::fs::remove_file(item.join("0.bin")).unwrap();
    std::fs::create_dir(item.join("0.bin")).unwrap();
    std::fs::write(item.join("0.bin/notes"), b"kept").unwrap();
    let o = kiln(&dir, &on, &SAXPY);
    assert_eq!(ok(&o), want);
    let err = text(&o.stderr);
    assert!(err.contains(&format!("`{}` is a directory", item.join("0.bin").display())), "{err}");
    assert!(!err.contains("without a persistent cache"), "{err}");
    // The rebuilt program was stored (under the next index), and so is another key's.
    let opts = [("KILN_CACHE_PERSISTENT", "1"), ("KILN_PROGRAM_BUILD_OPTIONS", "-O0")];
    ok(&kiln(&dir, &opts, &SAXPY));
    assert_eq!(ls(&dir).len(), 2);
    assert_eq!(std::fs::read(item.join("0.bin/notes")).unwrap(), b"kept");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `KILN_CACHE_MAX_SIZE=0` means "no limit", but `kiln cache evict` took it as a limit of
/// zero bytes and emptied the cache. Only an explicit `--max-size 0` does that.
#[test]
fn evict_under_a_zero_setting_keeps_items() {
    let dir = scratch("evict-zero");
    ok(&kiln(&dir, &[("KILN_CACHE_PERSISTENT", "1")], &SAXPY));
    let out = ok(&kiln(&dir, &[("KILN_CACHE_MAX_SIZE", "0")], &["cache", "evict"]));
    assert!(out.contains("removed 0 items"), "{out}");
    assert_eq!(ls(&dir).len(), 1);
    let out = ok(&kiln(&dir, &[], &["cache", "evict", "--max-size", "0"]));
    assert!(out.contains("removed 1 items"), "{out}");
    assert!(ls(&dir).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every entry under `dir` (links not followed, `dir` included) with its permission bits
/// and whether it is a directory.
#[cfg(unix)]
fn modes(dir: &Path) -> Vec<(PathBuf, u32, bool)> {
    use std::os::unix::fs::PermissionsExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        if m.is_dir() {
            stack.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        }
        out.push((p, m.permissions().mode() & 0o7777, m.is_dir()));
    }
    out.sort();
    out
}

/// Issue 29, S1: under `umask 000` kiln made the cache `drwxrwxrwx` and its items
/// `-rw-rw-rw-`. Directories are 0700 and files 0600 whatever the umask; directories an
/// earlier kiln made 0755 are narrowed to 0700.
#[cfg(unix)]
#[test]
fn the_cache_is_private_whatever_the_umask() {
    use std::os::unix::fs::PermissionsExt;
    let base = scratch("umask");
    let dir = base.join("cache");
    let o = Command::new("sh")
        .current_dir(root())
        .args(["-c", "umask 000 && exec \"$0\" \"$@\"", env!("CARGO_BIN_EXE_kiln")])
        .args(SAXPY)
        .env("KILN_CACHE_DIR", &dir)
        .env("KILN_CACHE_PERSISTENT", "1")
        .env_remove("KILN_PROGRAM_BUILD_OPTIONS")
        .env_remove("KILN_CACHE_MAX_SIZE")
        .output()
        .unwrap();
    ok(&o);
    let all = modes(&dir);
    let names: Vec<String> = all
        .iter()
        .filter(|(_, _, d)| !d)
        .map(|(p, _, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for (path, mode, is_dir) in &all {
        let want = if *is_dir { 0o700 } else { 0o600 };
        assert_eq!(*mode, want, "{} is {mode:04o} under umask 000", path.display());
    }
    for want in ["CACHEDIR.TAG", "mac.key", ".lock", "0.src", "0.bin"] {
        assert!(names.iter().any(|n| n == want), "no {want} in {all:?}");
    }
    // A cache an earlier kiln made under the usual umask: 0755 directories are narrowed
    // when kiln next uses them.
    for (path, _, is_dir) in &all {
        if *is_dir {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
    }
    ok(&kiln(&dir, &[("KILN_CACHE_PERSISTENT", "1")], &SAXPY));
    for (path, mode, is_dir) in modes(&dir) {
        if is_dir {
            assert_eq!(mode, 0o700, "{} was left {mode:04o}", path.display());
        }
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// A kernel with saxpy's name and signature that writes something else: the code someone
/// plants for saxpy's key.
const PLANTED: &str = "kernel saxpy(x: ptr<global, f32>, y: ptr<global, f32>, a: f32, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    y[i] = 1234.5;
  }
}
";

/// Issue 29, S1: a cache directory another user could write (owned by uid 65534, or
/// writable by others or the group) held machine code planted for saxpy's key, and
/// `kiln run` on the cpu device ran it. kiln now runs what it builds itself, printing the
/// right answer, with one warning naming the directory and the reason. The planted item is
/// a valid one, written through kiln's own cache code (as another user's kiln would write
/// it), and is shown to be run when the directory is private to this user.
#[cfg(all(unix, target_arch = "x86_64"))]
#[test]
fn planted_code_in_a_cache_others_can_write_is_not_run() {
    use kiln::runtime::cache::PersistentCache;
    use std::os::unix::fs::PermissionsExt;
    let base = scratch("planted");
    let (dir, theirs) = (base.join("cache"), base.join("theirs"));
    std::fs::create_dir_all(&base).unwrap();
    let on = [("KILN_CACHE_PERSISTENT", "1")];
    let saxpy = with_device("cpu");
    let want = ok(&kiln(&dir, &on, &saxpy));
    // The planted kernel's machine code, built by kiln into another cache.
    let planted_kir = base.join("planted.kir");
    std::fs::write(&planted_kir, PLANTED).unwrap();
    let mut planted_args = saxpy.clone();
    planted_args[1] = planted_kir.to_str().unwrap();
    let planted_out = ok(&kiln(&theirs, &on, &planted_args));
    assert!(planted_out.contains("1234.5"), "{planted_out}");
    let key_of = |root: &Path| {
        let id = ls(root).pop().unwrap();
        PersistentCache::new(root).show(&id).unwrap().key.unwrap()
    };
    let code = PersistentCache::new(&theirs).get(&key_of(&theirs)).unwrap();
    // Stored for saxpy's key in this cache, replacing what kiln built there.
    let saxpy_key = key_of(&dir);
    ok(&kiln(&dir, &[], &["cache", "clear"]));
    PersistentCache::new(&dir).put(&saxpy_key, &code);
    assert_eq!(ok(&kiln(&dir, &on, &saxpy)), planted_out, "the planted item is loadable");
    // Each way of opening the directory to someone else: a mode, or (as root, the other
    // user being uid 65534) an owner; with the reason the warning must give.
    // SAFETY: geteuid takes no arguments and cannot fail.
    let me = unsafe { libc::geteuid() };
    let mut exposures = vec![
        ("is writable by others (mode 0707)", Some(0o707)),
        ("is writable by its group (mode 0770)", Some(0o770)),
    ];
    if me == 0 {
        exposures.push(("belongs to uid 65534, not to this user (uid 0)", None));
    }
    let chmod = |mode| std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode));
    for (reason, mode) in exposures {
        match mode {
            Some(mode) => chmod(mode).unwrap(),
            None => std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap(),
        }
        let o = kiln(&dir, &on, &saxpy);
        assert_eq!(ok(&o), want, "the planted code ran ({reason})");
        let err = text(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(&format!("`{}` {reason}", dir.display())), "{err}");
        // `kiln cache show` says why kiln does not load it.
        let show = ok(&kiln(&dir, &[], &["cache", "show", &ls(&dir)[0]]));
        let said =
            format!("not authenticated: `{}` {reason}; kiln will not load it", dir.display());
        assert!(show.contains(&said), "{show}");
        std::os::unix::fs::chown(&dir, Some(me), None).unwrap();
        chmod(0o700).unwrap();
    }
    let _ = std::fs::remove_dir_all(&base);
}

/// Issue 29, S1: `kiln cache show` said `checksum ok` for an item anyone could have
/// re-checksummed. It says `authenticated` only for an item kiln would load, and why not
/// for one copied in from another cache (valid, but under another key).
#[test]
fn cache_show_says_whether_an_item_is_authenticated() {
    let base = scratch("show-auth");
    let (dir, theirs) = (base.join("cache"), base.join("theirs"));
    let on = [("KILN_CACHE_PERSISTENT", "1")];
    let interp = with_device("interp");
    ok(&kiln(&dir, &on, &interp));
    ok(&kiln(&theirs, &on, &interp));
    let id = ls(&dir).pop().unwrap();
    let show = ok(&kiln(&dir, &[], &["cache", "show", &id]));
    assert!(show.contains(", authenticated"), "{show}");
    for f in ["0.src", "0.bin"] {
        std::fs::copy(theirs.join(&id).with_file_name(f), dir.join(&id).with_file_name(f)).unwrap();
    }
    let show = ok(&kiln(&dir, &[], &["cache", "show", &id]));
    assert!(show.contains("bytes, not authenticated: its MAC does not match"), "{show}");
    assert!(!show.contains(", authenticated"), "{show}");
    // A run does not load it: one warning naming the item, and the item rebuilt.
    let o = kiln(&dir, &on, &interp);
    ok(&o);
    let err = text(&o.stderr);
    assert!(err.contains(&format!("`{}`", dir.join(&id).display())), "{err}");
    assert!(err.contains("not authenticated"), "{err}");
    let show = ok(&kiln(&dir, &[], &["cache", "show", &ls(&dir)[0]]));
    assert!(show.contains(", authenticated"), "{show}");
    let _ = std::fs::remove_dir_all(&base);
}

/// Issue 29, S2: with `HOME` empty, or `XDG_CACHE_HOME` relative, kiln put its cache in
/// the working directory (`./.cache/kiln`, `./rel/dir/kiln`). Relative and empty values
/// are ignored, as the XDG rule says; with no absolute location left, the persistent
/// cache is off with one warning saying why, and the working directory stays empty.
#[test]
fn no_absolute_cache_location_leaves_the_working_directory_alone() {
    let base = scratch("no-home");
    let cwd = base.join("cwd");
    std::fs::create_dir_all(&cwd).unwrap();
    let saxpy_kir = root().join("examples/saxpy.kir");
    let mut args = SAXPY.to_vec();
    args[1] = saxpy_kir.to_str().unwrap();
    let want = ok(&kiln(&base.join("unused"), &[], &SAXPY));
    let run = |home: Option<&str>, xdg: Option<&str>, args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
        c.current_dir(&cwd).args(args).env("KILN_CACHE_PERSISTENT", "1");
        for v in ["KILN_CACHE_DIR", "KILN_PROGRAM_BUILD_OPTIONS", "KILN_CACHE_MAX_SIZE"] {
            c.env_remove(v);
        }
        for (name, value) in [("HOME", home), ("XDG_CACHE_HOME", xdg)] {
            match value {
                Some(v) => c.env(name, v),
                None => c.env_remove(name),
            };
        }
        c.output().unwrap()
    };
    for (home, xdg, said) in [
        (Some(""), None, "XDG_CACHE_HOME is not set and HOME is empty"),
        (Some(""), Some("rel/dir"), "XDG_CACHE_HOME=\"rel/dir\" is not an absolute path"),
        (Some("home"), Some(""), "HOME=\"home\" is not an absolute path"),
        (None, Some("rel"), "HOME is not set"),
    ] {
        let o = run(home, xdg, &args);
        assert_eq!(ok(&o), want, "{home:?} {xdg:?}");
        let err = text(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("no directory for the persistent cache"), "{err}");
        assert!(err.contains(said), "{err}");
        assert!(err.contains("continuing without a persistent cache"), "{err}");
        let left: Vec<_> = std::fs::read_dir(&cwd).unwrap().collect();
        assert!(left.is_empty(), "{home:?} {xdg:?} wrote into the working directory: {left:?}");
        // `kiln cache` says the same.
        let o = run(home, xdg, &["cache", "stats"]);
        assert!(fails(&o, &["no directory for the persistent cache", said]).contains("--dir"));
    }
    // A relative XDG_CACHE_HOME next to an absolute HOME: HOME's cache.
    let home = base.join("home");
    let o = run(Some(home.to_str().unwrap()), Some("rel"), &args);
    assert_eq!(ok(&o), want);
    assert!(o.stderr.is_empty(), "{}", text(&o.stderr));
    assert_eq!(ls(&home.join(".cache/kiln")).len(), 1);
    assert_eq!(std::fs::read_dir(&cwd).unwrap().count(), 0);
    let _ = std::fs::remove_dir_all(&base);
}

/// Issue 29, S1: `kiln tune` uses the blocking a stored record names, so a record is
/// trusted like machine code: one planted in a cache others can write is not used (the
/// heuristic is, with one warning naming the directory). The planted record, valid and
/// written through kiln's own cache code, is shown to be used where only this user can
/// write.
#[cfg(unix)]
#[test]
fn a_planted_tuning_record_is_not_used() {
    use kiln::generator::GemmConfig;
    use kiln::runtime::cache::PersistentCache;
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("tune");
    let tune = |env: &[(&str, &str)]| {
        let args = ["tune", "--device", "cpu", "--max-candidates", "2", "--repeat", "1"];
        ok(&kiln(&dir, env, &[&args[..], &["gemm", "16", "16", "16"]].concat()))
    };
    let first = tune(&[]);
    assert!(first.contains("(stored)"), "{first}");
    let winner = first.lines().last().unwrap().split(':').next().unwrap().to_string();
    // Another blocking, stored for the same problem.
    let planted = GemmConfig::candidates(16, 16, 16)
        .into_iter()
        .map(|c| c.to_string())
        .find(|c| *c != winner)
        .unwrap();
    let id = ls(&dir).pop().unwrap();
    let key = PersistentCache::new(&dir).show(&id).unwrap().key.unwrap();
    ok(&kiln(&dir, &[], &["cache", "clear"]));
    PersistentCache::new(&dir).put(&key, planted.as_bytes());
    let off = [("KILN_TUNE", "0")];
    let used = tune(&off);
    assert!(used.starts_with(&format!("{planted}: stored winner")), "{used}");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o707)).unwrap();
    let o = kiln(&dir, &off, &["tune", "--device", "cpu", "gemm", "16", "16", "16"]);
    let out = ok(&o);
    assert!(out.contains(": heuristic for `gemm NN f32 m16 n16 k16`"), "{out}");
    let err = text(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    let said = format!("`{}` is writable by others (mode 0707)", dir.display());
    assert!(err.contains(&said), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// docs/cache.md quoted an error text kiln does not print. Each of its `sh,fails` examples
/// is followed by an `output` block with the message (which tests/docs.rs compares too):
/// run the command (in the repository root, as the page says), and the message must be
/// what kiln prints.
#[test]
fn cache_doc_quotes_the_real_errors() {
    let md = std::fs::read_to_string(root().join("docs/cache.md")).unwrap();
    let dir = scratch("doc-errors");
    let mut rest = md.as_str();
    let mut checked = 0;
    while let Some(at) = rest.find("```sh,fails\n") {
        rest = &rest[at + "```sh,fails\n".len()..];
        let (command, after) = rest.split_once("```").unwrap();
        let quoted_at = after.find("```output\n").expect("an `output` block with the message");
        let (quoted, _) = after[quoted_at + "```output\n".len()..].split_once("```").unwrap();
        let quoted: Vec<&str> = quoted.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
        let words: Vec<&str> = command.split_whitespace().collect();
        let kiln_at = words.iter().position(|w| *w == "kiln").expect("a kiln command");
        let env: Vec<(&str, &str)> =
            words[..kiln_at].iter().map(|w| w.split_once('=').expect("NAME=VALUE")).collect();
        let o = kiln(&dir, &env, &words[kiln_at + 1..]);
        let err = fails(&o, &[]);
        assert_eq!(err.lines().collect::<Vec<_>>(), quoted, "{command}");
        checked += 1;
    }
    assert_eq!(checked, 2, "docs/cache.md's failing examples");
}
