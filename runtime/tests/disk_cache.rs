//! Persistent cache: layout, collisions, fault tolerance, eviction, and several processes
//! sharing one directory.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use kiln_runtime::cache::{DiskKey, PersistentCache};

#[path = "common/temp_dir.rs"]
mod temp_dir;
use temp_dir::TempDir;

fn key(i: u32) -> DiskKey {
    DiskKey {
        device: "interp|kiln-interp|test".into(),
        image: format!("kernel k{i}() {{}}").into_bytes(),
        spec_consts: vec![i as u8],
        build_options: format!("-O{}", i % 3),
    }
}

fn artifact(i: u32) -> Vec<u8> {
    (0..(100 + i * 7)).map(|b| (b as u8) ^ (i as u8)).collect()
}

fn only_item_dir(c: &PersistentCache, k: &DiskKey) -> PathBuf {
    let d = c.item_dir(k);
    assert!(d.join("0.src").is_file() && d.join("0.bin").is_file());
    d
}

/// Held by the tests that spawn processes and by the test that checks exact eviction order:
/// between fork and exec a child briefly holds copies of this process's descriptors,
/// including a just-released item lock, and eviction rightly skips a locked item.
static NO_FORKS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn no_forks() -> std::sync::MutexGuard<'static, ()> {
    NO_FORKS.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn store_and_load_with_layout() {
    let t = TempDir::new("disk-layout");
    let c = PersistentCache::new(&t.0);
    assert_eq!(c.get(&key(1)), None);
    c.put(&key(1), &artifact(1));
    assert_eq!(c.get(&key(1)), Some(artifact(1)));
    let d = only_item_dir(&c, &key(1));
    // <root>/<device>/<image>/<spec>/<options>
    assert_eq!(d.strip_prefix(&t.0).unwrap().components().count(), 4);
    // Storing again is a no-op.
    c.put(&key(1), &artifact(1));
    assert!(!d.join("1.src").exists());
    // A fresh handle (another "process") sees it.
    assert_eq!(PersistentCache::new(&t.0).get(&key(1)), Some(artifact(1)));
    assert_eq!(c.stats().items, 1);
    assert!(c.warnings().is_empty());
}

#[test]
fn forced_collisions_keep_keys_apart() {
    let t = TempDir::new("disk-collide");
    let c = PersistentCache::new(&t.0).with_hash_bits(0);
    for i in 0..5 {
        c.put(&key(i), &artifact(i));
    }
    // All five share one directory, as items 0..4.
    let d = c.item_dir(&key(0));
    for i in 0..5 {
        assert_eq!(c.item_dir(&key(i)), d);
        assert!(d.join(format!("{i}.src")).is_file());
    }
    for i in 0..5 {
        assert_eq!(c.get(&key(i)), Some(artifact(i)), "key {i}");
    }
    assert_eq!(c.get(&key(9)), None);
    assert!(c.warnings().is_empty());
}

#[test]
fn truncated_bin_is_rebuilt_not_loaded() {
    let t = TempDir::new("disk-trunc");
    let c = PersistentCache::new(&t.0);
    c.put(&key(1), &artifact(1));
    let d = only_item_dir(&c, &key(1));
    let bin = fs::read(d.join("0.bin")).unwrap();
    fs::write(d.join("0.bin"), &bin[..bin.len() / 2]).unwrap();
    assert_eq!(c.get(&key(1)), None);
    assert_eq!(c.warnings().len(), 1, "{:?}", c.warnings());
    assert!(c.warnings()[0].contains("truncated"), "{:?}", c.warnings());
    // The damaged item was removed; storing the rebuilt artifact works.
    c.put(&key(1), &artifact(1));
    assert_eq!(c.get(&key(1)), Some(artifact(1)));
    // Flipped bits with the right length: the MAC does not match.
    let d = only_item_dir(&c, &key(1));
    let mut bin = fs::read(d.join("0.bin")).unwrap();
    let last = bin.len() - 1;
    bin[last] ^= 0xff;
    fs::write(d.join("0.bin"), &bin).unwrap();
    assert_eq!(c.get(&key(1)), None);
    assert!(c.warnings().iter().any(|w| w.contains("not authenticated")), "{:?}", c.warnings());
}

#[test]
fn garbage_src_and_orphan_bin() {
    let t = TempDir::new("disk-garbage");
    let c = PersistentCache::new(&t.0);
    c.put(&key(2), &artifact(2));
    let d = only_item_dir(&c, &key(2));
    fs::write(d.join("0.src"), b"\x00garbage\xff").unwrap();
    assert_eq!(c.get(&key(2)), None);
    assert_eq!(c.warnings().len(), 1);
    // Asking again does not warn again (the item is gone, or at least reported).
    assert_eq!(c.get(&key(2)), None);
    assert_eq!(c.warnings().len(), 1);
    // A .bin without its .src is invisible and cleaned up by the next store.
    fs::write(d.join("0.bin"), encode_like_bin()).unwrap();
    let _ = fs::remove_file(d.join("0.src"));
    assert_eq!(c.get(&key(2)), None);
    c.put(&key(2), &artifact(2));
    assert_eq!(c.get(&key(2)), Some(artifact(2)));
    assert_eq!(c.warnings().len(), 1);
}

fn encode_like_bin() -> Vec<u8> {
    b"KILNBIN1 not really".to_vec()
}

#[test]
fn stale_lock_of_killed_process() {
    let _serial = no_forks();
    let t = TempDir::new("disk-stalelock");
    let c = PersistentCache::new(&t.0);
    let d = c.item_dir(&key(3));
    fs::create_dir_all(&d).unwrap();
    // A process takes the item directory's lock and is killed while holding it.
    let mut child = Command::new("flock")
        .arg("-o")
        .arg(d.join(".lock"))
        .args(["sleep", "60"])
        .spawn()
        .expect("flock(1) from util-linux");
    // Wait until the lock is really held (the lock file exists once flock opened it).
    for _ in 0..500 {
        if d.join(".lock").exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // A stray temporary file of a killed writer, too.
    fs::write(d.join(".tmp-99999-0-0.bin"), b"partial").unwrap();
    c.put(&key(3), &artifact(3));
    assert_eq!(c.get(&key(3)), Some(artifact(3)));
    assert!(!d.join(".tmp-99999-0-0.bin").exists());
    assert!(c.warnings().is_empty());
}

#[test]
fn unwritable_root_degrades_to_no_cache() {
    let t = TempDir::new("disk-readonly");
    // A root that is a regular file cannot hold directories (works even as root, where
    // permission bits do not stop writes).
    let root = t.0.join("not-a-dir");
    fs::write(&root, b"x").unwrap();
    let c = PersistentCache::new(&root);
    c.put(&key(1), &artifact(1));
    assert!(c.is_disabled());
    assert_eq!(c.get(&key(1)), None);
    c.put(&key(2), &artifact(2));
    assert_eq!(c.warnings().len(), 1, "{:?}", c.warnings());
    assert!(c.warnings()[0].contains("without a persistent cache"));
}

#[test]
fn item_size_limit_and_lru_eviction() {
    let _serial = no_forks();
    let t = TempDir::new("disk-evict");
    let c = PersistentCache::new(&t.0).with_max_item_size(150);
    c.put(&key(20), &artifact(20)); // 240 bytes: not stored
    assert_eq!(c.get(&key(20)), None);
    assert_eq!(c.stats().items, 0);
    let c = PersistentCache::new(&t.0);
    for i in 0..4 {
        c.put(&key(i), &artifact(i));
    }
    // Make the access order explicit: 0 oldest ... 3 newest, then touch 0.
    let base = SystemTime::now() - Duration::from_secs(100);
    for i in 0..4 {
        let f = fs::File::options().write(true).open(c.item_dir(&key(i)).join("0.src")).unwrap();
        f.set_modified(base + Duration::from_secs(i as u64)).unwrap();
    }
    assert!(c.get(&key(0)).is_some()); // now the most recent
    let sizes: Vec<u64> = c.items().iter().map(|i| i.size).collect();
    let total: u64 = sizes.iter().sum();
    // Leave room for about two items: 1 and 2 (least recently used) go.
    let removed = c.evict(total - sizes.iter().min().unwrap() - 1);
    assert!(removed >= 1);
    assert_eq!(c.get(&key(1)), None);
    assert!(c.get(&key(0)).is_some());
    assert!(c.get(&key(3)).is_some());
    // Emptied directories are removed.
    assert!(!c.item_dir(&key(1)).exists());
    let n = c.stats().items;
    assert_eq!(c.clear() as u64, n);
    assert_eq!(c.stats().items, 0);
    // Only the root's tag and key are left.
    let mut left: Vec<_> = fs::read_dir(&t.0).unwrap().map(|e| e.unwrap().file_name()).collect();
    left.sort();
    assert_eq!(left, ["CACHEDIR.TAG", "mac.key"]);
}

/// Worker for the multi-process test: runs only when `KILN_MP_WORKER` names a directory.
#[test]
fn mp_worker() {
    let Ok(dir) = std::env::var("KILN_MP_WORKER") else { return };
    let seed: u32 = std::env::var("KILN_MP_SEED").unwrap().parse().unwrap();
    let c = PersistentCache::new(Path::new(&dir)).with_hash_bits(4).with_max_size(6000);
    for round in 0..60u32 {
        let i = (round * 7 + seed * 3) % 12;
        match c.get(&key(i)) {
            Some(a) => assert_eq!(a, artifact(i), "process {seed} loaded a wrong artifact"),
            None => c.put(&key(i), &artifact(i)),
        }
        // Evictions by several processes at once may, each from its own view, remove every
        // item; the last rounds only get and put, so the directory ends with items.
        if round == 19 || round == 39 {
            c.evict(3000);
        }
    }
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
}

#[test]
fn several_processes_share_one_directory() {
    let _serial = no_forks();
    let t = TempDir::new("disk-multiproc");
    let exe = std::env::current_exe().unwrap();
    let procs: Vec<_> = (0..4)
        .map(|seed| {
            Command::new(&exe)
                .args(["--exact", "mp_worker", "--test-threads=1"])
                .env("KILN_MP_WORKER", &t.0)
                .env("KILN_MP_SEED", seed.to_string())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for p in procs {
        let out = p.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "worker failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // The worker really ran (a filter that matched nothing would also succeed).
        assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"));
    }
    // Every remaining item is loadable and correct.
    let c = PersistentCache::new(&t.0).with_hash_bits(4);
    for i in 0..12 {
        if let Some(a) = c.get(&key(i)) {
            assert_eq!(a, artifact(i));
        }
    }
    assert!(c.stats().items > 0);
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
}
