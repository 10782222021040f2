//! Issue 29, S1: the persistent cache loads only what this user's kiln wrote. An item in a
//! root or level directory that another user owns or can write is a miss (never loaded,
//! never stored into), reported once by the directory and the reason; an item that does
//! not carry a MAC under the cache's key (written by an earlier version with a checksum
//! anyone can recompute, or by kiln under another cache's key) is refused and rebuilt.
//!
//! Run as root (as CI does), the other user is uid 65534 (`nobody`): the directories are
//! handed to it with `chown`. Every user also gets the group- and other-writable cases.

#![cfg(unix)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use kiln_runtime::cache::hash::hash64;
use kiln_runtime::cache::{DiskKey, PersistentCache};

#[path = "common/temp_dir.rs"]
mod temp_dir;
use temp_dir::TempDir;

fn key() -> DiskKey {
    DiskKey {
        device: "cpu|kiln-x86|trust".into(),
        image: b"kernel k(x: ptr<global, u32>) { x[global_id(0)] = 1u32; }".to_vec(),
        spec_consts: vec![],
        build_options: String::new(),
    }
}

/// What this user's kiln built for [`key`].
fn good() -> Vec<u8> {
    b"the code kiln built".to_vec()
}

/// What someone else put there for [`key`].
fn planted() -> Vec<u8> {
    b"\xcc\xcc\xcc planted code".to_vec()
}

fn is_root() -> bool {
    // SAFETY: geteuid takes no arguments and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A way a directory can be open to someone else, and the reason a warning must give.
struct Exposure {
    name: &'static str,
    apply: fn(&Path),
    reason: &'static str,
}

/// Handed to uid 65534 (only root can), writable by others, writable by the group.
fn exposures() -> Vec<Exposure> {
    fn chown_nobody(p: &Path) {
        std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
    }
    fn other_writable(p: &Path) {
        fs::set_permissions(p, fs::Permissions::from_mode(0o757)).unwrap();
    }
    fn group_writable(p: &Path) {
        fs::set_permissions(p, fs::Permissions::from_mode(0o770)).unwrap();
    }
    let mut v = vec![
        Exposure {
            name: "other-writable",
            apply: other_writable,
            reason: "is writable by others (mode 0757)",
        },
        Exposure {
            name: "group-writable",
            apply: group_writable,
            reason: "is writable by its group (mode 0770)",
        },
    ];
    if is_root() {
        v.push(Exposure {
            name: "owned-by-nobody",
            apply: chown_nobody,
            reason: "belongs to uid 65534, not to this user (uid 0)",
        });
    }
    v
}

/// A cache at `root` holding a valid item for [`key`] whose artifact is [`planted`]: what
/// another user running kiln (knowing the format, and even this cache's key) can write.
fn plant(root: &Path) {
    let c = PersistentCache::new(root);
    c.put(&key(), &planted());
    assert_eq!(c.get(&key()), Some(planted()), "the planted item is valid");
}

#[test]
fn a_root_another_user_can_write_is_not_loaded() {
    for Exposure { name, apply: expose, reason } in exposures() {
        let t = TempDir::new(&format!("trust-root-{name}"));
        let root = t.0.join("cache");
        plant(&root);
        expose(&root);
        let c = PersistentCache::new(&root);
        assert_eq!(c.get(&key()), None, "{name}: the planted item was loaded");
        c.put(&key(), &good());
        assert_eq!(c.get(&key()), None, "{name}");
        let w = c.warnings();
        assert_eq!(w.len(), 1, "{name}: {w:?}");
        assert!(w[0].contains(&format!("`{}` {reason}", root.display())), "{name}: {w:?}");
        assert!(w[0].contains("loads nothing from it"), "{name}: {w:?}");
        // Nothing was written there: still only the planted item.
        assert_eq!(c.items().len(), 1, "{name}");
    }
}

#[test]
fn a_level_directory_another_user_can_write_is_not_loaded() {
    for Exposure { name, apply: expose, reason } in exposures() {
        let t = TempDir::new(&format!("trust-level-{name}"));
        let root = t.0.join("cache");
        plant(&root);
        let item = PersistentCache::new(&root).item_dir(&key());
        // Each of the four levels in turn.
        for level in item.ancestors().take(4) {
            expose(level);
            let c = PersistentCache::new(&root);
            assert_eq!(c.get(&key()), None, "{name}: planted code loaded via {level:?}");
            c.put(&key(), &good());
            assert_eq!(c.get(&key()), None, "{name}");
            let w = c.warnings();
            assert_eq!(w.len(), 1, "{name}: one warning for a get, a put and a get: {w:?}");
            assert!(w[0].contains(&format!("`{}` {reason}", level.display())), "{name}: {w:?}");
            assert_eq!(c.items().len(), 1, "{name}: stored into {level:?}");
            // Back to this user, private: the item loads again.
            std::os::unix::fs::chown(level, Some(unsafe { libc::geteuid() }), None).unwrap();
            fs::set_permissions(level, fs::Permissions::from_mode(0o700)).unwrap();
            assert_eq!(PersistentCache::new(&root).get(&key()), Some(planted()));
        }
    }
}

/// The item a cache of format version 2 held: checksums by the public `hash64`, which
/// anyone can recompute for a planted artifact.
fn write_v2_item(dir: &Path, key: &DiskKey, artifact: &[u8]) {
    let mut src = b"KILNSRC2".to_vec();
    for part in [key.device.as_bytes(), &key.image, &key.spec_consts, key.build_options.as_bytes()]
    {
        src.extend_from_slice(&(part.len() as u64).to_le_bytes());
        src.extend_from_slice(part);
    }
    src.extend_from_slice(&(artifact.len() as u64).to_le_bytes());
    src.extend_from_slice(&hash64(artifact).to_le_bytes());
    let sum = hash64(&src);
    src.extend_from_slice(&sum.to_le_bytes());
    let mut bin = b"KILNBIN2".to_vec();
    bin.extend_from_slice(&(artifact.len() as u64).to_le_bytes());
    bin.extend_from_slice(&hash64(artifact).to_le_bytes());
    bin.extend_from_slice(artifact);
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join("0.bin"), bin).unwrap();
    fs::write(dir.join("0.src"), src).unwrap();
}

/// An item re-checksummed with the old public hash, with no key: refused (reported by its
/// path), removed and rebuilt; the rebuilt item loads.
#[test]
fn an_item_sealed_with_the_public_hash_is_rebuilt() {
    let t = TempDir::new("trust-public-hash");
    let c = PersistentCache::new(&t.0);
    let dir = c.item_dir(&key());
    write_v2_item(&dir, &key(), &planted());
    assert_eq!(c.get(&key()), None, "an item without a MAC was loaded");
    let w = c.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains(&format!("`{}`", dir.join("0").display())), "{w:?}");
    assert!(w[0].contains("it will be rebuilt"), "{w:?}");
    c.put(&key(), &good());
    assert_eq!(PersistentCache::new(&t.0).get(&key()), Some(good()));
}

/// kiln's own item files, complete and valid, but written under another cache's key
/// (someone's own cache, copied in): not authenticated, never loaded.
#[test]
fn an_item_from_another_cache_is_not_authenticated() {
    let t = TempDir::new("trust-other-key");
    let (mine, theirs) = (t.0.join("mine"), t.0.join("theirs"));
    let c = PersistentCache::new(&mine);
    // This cache is in use: it has its key, and another item.
    let other = DiskKey { image: b"kernel other() {}".to_vec(), ..key() };
    c.put(&other, &good());
    plant(&theirs);
    let from = PersistentCache::new(&theirs).item_dir(&key());
    let to = c.item_dir(&key());
    fs::create_dir_all(&to).unwrap();
    for f in ["0.src", "0.bin"] {
        fs::copy(from.join(f), to.join(f)).unwrap();
    }
    let c = PersistentCache::new(&mine);
    assert_eq!(c.get(&key()), None, "an item under another key was loaded");
    let w = c.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains(&format!("`{}`", to.join("0").display())), "{w:?}");
    assert!(w[0].contains("not authenticated"), "{w:?}");
    assert_eq!(c.get(&other), Some(good()), "the cache's own item still loads");
}

/// The key file must be as private as the cache: one that is not this user's, or that
/// others may read, turns the cache off (one warning naming it and why), so nothing that
/// its key authenticates is loaded.
#[test]
fn a_key_file_others_can_read_or_own_is_not_used() {
    let mut cases: Vec<(u32, Option<u32>, String)> = vec![
        (0o644, None, "is open to other users (mode 0644; kiln makes it 0600)".into()),
        (0o640, None, "is open to other users (mode 0640; kiln makes it 0600)".into()),
    ];
    if is_root() {
        cases.push((0o600, Some(65534), "belongs to uid 65534, not to this user (uid 0)".into()));
    }
    for (mode, owner, reason) in cases {
        let t = TempDir::new(&format!("trust-key-{mode:o}-{}", owner.is_some()));
        plant(&t.0);
        let key_file = t.0.join("mac.key");
        fs::set_permissions(&key_file, fs::Permissions::from_mode(mode)).unwrap();
        if let Some(uid) = owner {
            std::os::unix::fs::chown(&key_file, Some(uid), None).unwrap();
        }
        let c = PersistentCache::new(&t.0);
        assert_eq!(c.get(&key()), None, "{reason}: the planted item was loaded");
        c.put(&key(), &good());
        let w = c.warnings();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains(&format!("`{}` {reason}", key_file.display())), "{w:?}");
        assert!(w[0].contains("remove it to let kiln make a new key"), "{w:?}");
        // Removed, a new key is made: the old items do not authenticate and are rebuilt.
        fs::remove_file(&key_file).unwrap();
        let c = PersistentCache::new(&t.0);
        assert_eq!(c.get(&key()), None);
        assert!(c.warnings()[0].contains("not authenticated"), "{:?}", c.warnings());
        c.put(&key(), &good());
        assert_eq!(PersistentCache::new(&t.0).get(&key()), Some(good()));
    }
}
