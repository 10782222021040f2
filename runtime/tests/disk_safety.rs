//! The persistent cache and the files around it (issue 12): it follows no link below its
//! root, deletes nothing outside it and nothing its layout does not name, reports a damaged
//! item by its path and keeps working for the others, and refuses a root that is not a kiln
//! cache. Each test builds links or misplaced entries in a temporary directory and checks
//! that a "victim" directory outside the cache comes through untouched.

#![cfg(unix)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use kiln_runtime::cache::{DiskKey, PersistentCache, RootError};

#[path = "common/temp_dir.rs"]
mod temp_dir;
use temp_dir::TempDir;

fn key(i: u32) -> DiskKey {
    DiskKey {
        device: "interp|kiln-interp|safety".into(),
        image: format!("kernel s{i}() {{}}").into_bytes(),
        spec_consts: vec![],
        build_options: String::new(),
    }
}

fn artifact(i: u32) -> Vec<u8> {
    (0..(120 + i * 11)).map(|b| (b as u8).wrapping_mul(3) ^ (i as u8)).collect()
}

/// Every path under `dir` (links not followed) with its contents (files), link target
/// (links) and modification time: what must not change.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (String, Option<SystemTime>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap().map(Result::unwrap) {
            let p = e.path();
            let m = fs::symlink_metadata(&p).unwrap();
            let what = if m.is_dir() {
                stack.push(p.clone());
                "dir".to_string()
            } else if m.file_type().is_symlink() {
                format!("link to {}", fs::read_link(&p).unwrap().display())
            } else {
                String::from_utf8_lossy(&fs::read(&p).unwrap()).into_owned()
            };
            out.insert(p, (what, m.modified().ok()));
        }
    }
    out
}

/// A victim directory next to the cache root, full of names the cache uses: loose item
/// files, a lock, a temporary file, and a whole valid-looking cache layout with an item.
fn make_victim(t: &TempDir) -> PathBuf {
    let v = t.0.join("victim");
    fs::create_dir_all(&v).unwrap();
    for name in ["a.txt", "0.src", "0.bin", ".lock", ".tmp-1-0-0.bin", "CACHEDIR.TAG"] {
        fs::write(v.join(name), format!("victim file {name}")).unwrap();
    }
    // A second, real cache outside: a link into it must not make its items ours.
    let other = PersistentCache::new(v.join("other-cache"));
    other.put(&key(9), &artifact(9));
    other.put(&key(8), &artifact(8));
    v
}

/// A cache at `<t>/cache` with three items, and links of every kind planted in it.
fn cache_with_links(t: &TempDir, victim: &Path) -> PersistentCache {
    let root = t.0.join("cache");
    let c = PersistentCache::new(&root);
    for i in 0..3 {
        c.put(&key(i), &artifact(i));
    }
    let dir = c.item_dir(&key(0));
    let other = victim.join("other-cache");
    let other_item = PersistentCache::new(&other).item_dir(&key(9));
    let device_level = dir.parent().unwrap().parent().unwrap().parent().unwrap();
    // Links to directories, under foreign names and under names of the layout.
    symlink(victim, root.join("victim-link")).unwrap();
    let other_device = other_item.parent().unwrap().parent().unwrap().parent().unwrap();
    symlink(other_device, root.join("00000000000000aa")).unwrap();
    symlink(other_item.parent().unwrap(), device_level.join("00000000000000bb")).unwrap();
    symlink(&other_item, dir.parent().unwrap().join("00000000000000cc")).unwrap();
    // The root's parent (holding the victim and the cache itself), and loops.
    symlink("..", root.join("parent")).unwrap();
    symlink(&t.0, root.join("00000000000000dd")).unwrap();
    symlink(".", root.join("self")).unwrap();
    symlink(".", device_level.join("00000000000000ee")).unwrap();
    // Links to files where item files belong.
    symlink(victim.join("0.src"), dir.join("5.src")).unwrap();
    symlink(victim.join("0.bin"), dir.join("5.bin")).unwrap();
    symlink(other_item.join("0.src"), dir.join("6.src")).unwrap();
    symlink(other_item.join("0.bin"), dir.join("6.bin")).unwrap();
    symlink(victim.join("a.txt"), dir.join(".tmp-7-0-0.bin")).unwrap();
    c
}

/// Issue 12: `clear` and eviction followed links and deleted files outside the cache.
#[test]
fn clear_and_evict_never_follow_links() {
    let t = TempDir::new("safety-links");
    let victim = make_victim(&t);
    let before = snapshot(&victim);
    let c = cache_with_links(&t, &victim);
    // The walk terminates (links to `.` and `..` are not followed) and sees kiln's three
    // items only.
    let scan = c.scan();
    assert_eq!(scan.items.len(), 3, "{:?}", scan.items);
    assert!(!scan.damaged.is_empty() && !scan.foreign.is_empty());
    // Evicting under a limit of one byte (as a store under KILN_CACHE_MAX_SIZE=1 does) ...
    let limited = PersistentCache::new(c.root()).with_max_size(1);
    limited.put(&key(3), &artifact(3));
    assert_eq!(limited.stats().items, 0);
    assert!(!limited.is_disabled(), "{:?}", limited.warnings());
    assert_eq!(snapshot(&victim), before, "eviction touched files outside the cache");
    // ... and clearing, which also removes the links at kiln's names (never their targets).
    for i in 0..3 {
        c.put(&key(i), &artifact(i));
    }
    assert_eq!(c.clear(), 3);
    assert_eq!(snapshot(&victim), before, "clear touched files outside the cache");
    assert_eq!(c.stats().items, 0);
    // What is left is foreign (the links under names kiln does not use), the tag and the key.
    let mut left: Vec<String> = fs::read_dir(c.root())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["CACHEDIR.TAG", "mac.key", "parent", "self", "victim-link"]);
    // The other cache, reached through links, still has its items.
    assert_eq!(PersistentCache::new(victim.join("other-cache")).get(&key(9)), Some(artifact(9)));
}

/// A hit must not read through a link at a level directory, nor stamp (or remove) the file
/// it leads to; the link is reported by its path and removed, the key rebuilt.
#[test]
fn lookup_does_not_follow_a_linked_level() {
    let t = TempDir::new("safety-get");
    let victim = make_victim(&t);
    let c = PersistentCache::new(t.0.join("cache"));
    c.put(&key(1), &artifact(1));
    // Key 9's device directory is a link into the other cache, which holds key 9.
    let other_item = PersistentCache::new(victim.join("other-cache")).item_dir(&key(9));
    let mine = c.item_dir(&key(9));
    let level = mine.parent().unwrap().parent().unwrap().parent().unwrap().to_path_buf();
    assert_eq!(level.parent().unwrap(), c.item_dir(&key(1)).ancestors().nth(4).unwrap());
    fs::remove_dir_all(&level).unwrap(); // key 1 and 9 share the device level
    symlink(other_item.ancestors().nth(3).unwrap(), &level).unwrap();
    let before = snapshot(&victim);
    assert_eq!(c.get(&key(9)), None);
    assert_eq!(snapshot(&victim), before, "the lookup stamped or removed a file outside");
    let w = c.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains(&format!("`{}` is a symbolic link", level.display())), "{w:?}");
    assert!(w[0].contains("removed it"), "{w:?}");
    assert!(fs::symlink_metadata(&level).is_err(), "the link is still there");
    // The cache keeps working: the key is stored under a real directory now.
    c.put(&key(9), &artifact(9));
    assert_eq!(c.get(&key(9)), Some(artifact(9)));
    assert!(fs::symlink_metadata(&level).unwrap().is_dir());
    assert_eq!(snapshot(&victim), before);
}

/// Links where item files belong are not followed by a lookup or a store either.
#[test]
fn item_file_links_are_damaged_items() {
    let t = TempDir::new("safety-item-links");
    let victim = make_victim(&t);
    let before = snapshot(&victim);
    let c = PersistentCache::new(t.0.join("cache"));
    let dir = c.item_dir(&key(9));
    fs::create_dir_all(&dir).unwrap();
    let other_item = PersistentCache::new(victim.join("other-cache")).item_dir(&key(9));
    // A valid item of the same key, reached only through links, and a linked lock.
    symlink(other_item.join("0.src"), dir.join("0.src")).unwrap();
    symlink(other_item.join("0.bin"), dir.join("0.bin")).unwrap();
    symlink(victim.join(".lock"), dir.join(".lock")).unwrap();
    assert_eq!(c.get(&key(9)), None);
    c.put(&key(9), &artifact(9));
    assert_eq!(c.get(&key(9)), Some(artifact(9)));
    assert!(!c.is_disabled());
    assert_eq!(snapshot(&victim), before);
    let w = c.warnings().join("\n");
    for name in ["0.src", ".lock"] {
        let path = dir.join(name);
        assert!(w.contains(&format!("`{}` is a symbolic link", path.display())), "{w}");
    }
}

/// Issue 12, item 2: a directory where `0.bin` belongs used to turn the whole cache off
/// with a message naming only the root.
#[test]
fn directory_at_bin_is_a_damaged_item_not_a_dead_cache() {
    let t = TempDir::new("safety-bin-dir");
    let c = PersistentCache::new(&t.0);
    c.put(&key(1), &artifact(1));
    c.put(&key(2), &artifact(2));
    let dir = c.item_dir(&key(1));
    fs::remove_file(dir.join("0.bin")).unwrap();
    fs::create_dir(dir.join("0.bin")).unwrap();
    fs::write(dir.join("0.bin").join("keep.txt"), b"someone's file").unwrap();
    let fresh = PersistentCache::new(&t.0);
    assert_eq!(fresh.get(&key(1)), None);
    assert_eq!(fresh.get(&key(2)), Some(artifact(2)));
    fresh.put(&key(1), &artifact(1));
    fresh.put(&key(3), &artifact(3));
    assert!(!fresh.is_disabled(), "{:?}", fresh.warnings());
    assert_eq!(fresh.get(&key(1)), Some(artifact(1)));
    assert_eq!(fresh.get(&key(3)), Some(artifact(3)));
    let w = fresh.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    let path = dir.join("0.bin");
    assert!(w[0].contains(&format!("`{}` is a directory", path.display())), "{w:?}");
    assert!(w[0].contains("left it in place"), "{w:?}");
    assert_eq!(fs::read(path.join("keep.txt")).unwrap(), b"someone's file");
}

/// Issue 12, item 2: `.lock` as a directory turned the cache off for the process.
#[test]
fn lock_directory_is_repaired_or_skipped() {
    let t = TempDir::new("safety-lock-dir");
    let c = PersistentCache::new(&t.0);
    c.put(&key(5), &artifact(5));
    // An empty directory is removed and the store goes ahead.
    let d1 = c.item_dir(&key(1));
    fs::create_dir_all(d1.join(".lock")).unwrap();
    c.put(&key(1), &artifact(1));
    assert_eq!(c.get(&key(1)), Some(artifact(1)));
    assert!(fs::metadata(d1.join(".lock")).unwrap().is_file());
    // One holding a file is left alone: that key is not stored, every other one is.
    let d2 = c.item_dir(&key(2));
    fs::create_dir_all(d2.join(".lock")).unwrap();
    fs::write(d2.join(".lock").join("x"), b"x").unwrap();
    c.put(&key(2), &artifact(2));
    c.put(&key(3), &artifact(3));
    assert!(!c.is_disabled(), "{:?}", c.warnings());
    assert_eq!(c.get(&key(2)), None);
    assert_eq!(c.get(&key(3)), Some(artifact(3)));
    assert_eq!(c.get(&key(5)), Some(artifact(5)));
    assert!(d2.join(".lock").join("x").is_file());
    let w = c.warnings().join("\n");
    for d in [&d1, &d2] {
        let lock = d.join(".lock");
        assert!(w.contains(&format!("`{}` is a directory", lock.display())), "{w}");
    }
    assert!(!w.contains("without a persistent cache"), "{w}");
}

/// Issue 12, item 3: a directory named `0.src` showed as an item and warned on every run.
#[test]
fn directory_named_src_is_reported_once_and_repaired() {
    let t = TempDir::new("safety-src-dir");
    let c = PersistentCache::new(&t.0);
    let dir = c.item_dir(&key(4));
    fs::create_dir_all(dir.join("0.src")).unwrap();
    assert!(c.items().is_empty());
    assert_eq!(c.scan().damaged.len(), 1);
    // The first process reports it by its path and removes the empty directory ...
    assert_eq!(c.get(&key(4)), None);
    let w = c.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    let src = dir.join("0.src");
    assert!(w[0].contains(&format!("`{}` is a directory", src.display())), "{w:?}");
    assert!(w[0].contains("removed it"), "{w:?}");
    c.put(&key(4), &artifact(4));
    assert_eq!(c.get(&key(4)), Some(artifact(4)));
    // ... so the next one has nothing to say.
    let next = PersistentCache::new(&t.0);
    assert_eq!(next.get(&key(4)), Some(artifact(4)));
    assert!(next.warnings().is_empty(), "{:?}", next.warnings());
    assert_eq!(next.items().len(), 1);
}

/// A FIFO where a key file belongs must not hang a lookup (opening it would block).
#[test]
fn fifo_at_src_does_not_hang() {
    let t = TempDir::new("safety-fifo");
    let c = PersistentCache::new(&t.0);
    let dir = c.item_dir(&key(6));
    fs::create_dir_all(&dir).unwrap();
    let st = std::process::Command::new("mkfifo").arg(dir.join("0.src")).status().unwrap();
    assert!(st.success());
    assert_eq!(c.get(&key(6)), None);
    assert!(c.warnings()[0].contains("is a FIFO"), "{:?}", c.warnings());
    c.put(&key(6), &artifact(6));
    assert_eq!(c.get(&key(6)), Some(artifact(6)));
}

/// Issue 12, item 3: a header length that disagrees with the key file read `149 of 149
/// bytes`; the message must give both lengths.
#[test]
fn length_mismatch_message_names_both_lengths() {
    let t = TempDir::new("safety-len");
    let c = PersistentCache::new(&t.0);
    c.put(&key(2), &artifact(2));
    let bin = c.item_dir(&key(2)).join("0.bin");
    let mut bytes = fs::read(&bin).unwrap();
    let len = artifact(2).len() as u64;
    bytes[8..16].copy_from_slice(&(len + 7).to_le_bytes());
    fs::write(&bin, &bytes).unwrap();
    assert_eq!(c.get(&key(2)), None);
    let w = c.warnings();
    let want = format!("the artifact header records {} bytes, the key file {len}", len + 7);
    assert!(w.len() == 1 && w[0].contains(&want), "{w:?}");
    // A file longer than its item says is not called truncated.
    c.put(&key(2), &artifact(2));
    let mut bytes = fs::read(&bin).unwrap();
    bytes.extend_from_slice(b"trailing");
    fs::write(&bin, &bytes).unwrap();
    let fresh = PersistentCache::new(&t.0);
    assert_eq!(fresh.get(&key(2)), None);
    // The header: magic, length and a 32-byte MAC.
    let want = format!("{} bytes where {} are expected", len + 48 + 8, len + 48);
    assert!(fresh.warnings()[0].contains(&want), "{:?}", fresh.warnings());
}

/// Issue 12, item 5: a directory that is not a kiln cache is refused; its files survive a
/// store, an eviction and a clear.
#[test]
fn foreign_root_is_refused() {
    let t = TempDir::new("safety-foreign");
    fs::write(t.0.join("notes.txt"), b"mine").unwrap();
    fs::create_dir_all(t.0.join("0123456789abcdef/0123456789abcdef/0123456789abcdef")).unwrap();
    let deep = t.0.join("0123456789abcdef/0123456789abcdef/0123456789abcdef/0123456789abcdef");
    fs::create_dir_all(&deep).unwrap();
    fs::write(deep.join("0.src"), b"not kiln's").unwrap();
    let before = snapshot(&t.0);
    let c = PersistentCache::new(&t.0).with_max_size(1);
    match c.check_root() {
        Err(RootError::Foreign { entry, .. }) => assert_eq!(entry, "notes.txt"),
        other => panic!("{other:?}"),
    }
    c.put(&key(1), &artifact(1));
    assert!(c.is_disabled());
    assert!(c.warnings()[0].contains("is not a kiln cache"), "{:?}", c.warnings());
    assert_eq!(c.evict(0), 0);
    assert_eq!(c.clear(), 0);
    assert_eq!(snapshot(&t.0), before);
}

/// The root's own state: missing (an error for tools, created by a store), a link to a
/// directory (used where it points), an untagged cache of an earlier version (accepted and
/// tagged by the next store).
#[test]
fn root_missing_linked_or_untagged() {
    let t = TempDir::new("safety-root");
    let missing = PersistentCache::new(t.0.join("new"));
    assert_eq!(missing.check_root(), Err(RootError::Missing(t.0.join("new"))));
    missing.put(&key(1), &artifact(1));
    assert_eq!(missing.check_root(), Ok(()));
    assert!(t.0.join("new/CACHEDIR.TAG").is_file());
    symlink(t.0.join("new"), t.0.join("link")).unwrap();
    let linked = PersistentCache::new(t.0.join("link"));
    assert_eq!(linked.check_root(), Ok(()));
    assert_eq!(linked.get(&key(1)), Some(artifact(1)));
    assert_eq!(linked.clear(), 1);
    assert!(t.0.join("new/CACHEDIR.TAG").is_file());
    assert!(fs::symlink_metadata(t.0.join("link")).unwrap().file_type().is_symlink());
    // An untagged cache (only level directories) is still a cache.
    let old = PersistentCache::new(t.0.join("old"));
    old.put(&key(2), &artifact(2));
    fs::remove_file(t.0.join("old/CACHEDIR.TAG")).unwrap();
    let again = PersistentCache::new(t.0.join("old"));
    assert_eq!(again.check_root(), Ok(()));
    assert_eq!(again.get(&key(2)), Some(artifact(2)));
    again.put(&key(3), &artifact(3));
    assert!(t.0.join("old/CACHEDIR.TAG").is_file());
    // A regular file is not a directory.
    fs::write(t.0.join("file"), b"x").unwrap();
    let file = PersistentCache::new(t.0.join("file"));
    assert_eq!(file.check_root(), Err(RootError::NotADirectory(t.0.join("file"))));
}

/// A root removed by hand while a process uses it is created (and tagged) again by the next
/// store, as before roots were checked.
#[test]
fn removed_root_is_recreated_by_a_store() {
    let t = TempDir::new("safety-recreate");
    let root = t.0.join("cache");
    let c = PersistentCache::new(&root);
    c.put(&key(1), &artifact(1));
    fs::remove_dir_all(&root).unwrap();
    assert_eq!(c.get(&key(1)), None);
    c.put(&key(2), &artifact(2));
    assert!(!c.is_disabled(), "{:?}", c.warnings());
    assert_eq!(c.get(&key(2)), Some(artifact(2)));
    assert_eq!(c.check_root(), Ok(()));
    assert!(root.join("CACHEDIR.TAG").is_file());
}
