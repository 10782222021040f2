//! The persistent (on-disk) program cache.
//!
//! ## Layout
//!
//! ```text
//! <root>/<device_hash>/<image_hash>/<spec_consts_hash>/<build_options_hash>/
//!     .lock        advisory lock of this item directory (flock; released by the OS when
//!                  the holder dies, so a lock file left by a killed process is harmless)
//!     <n>.src      the full key: device identity, image, spec constants, build options,
//!                  and the length and checksum of <n>.bin; itself checksummed
//!     <n>.bin      the artifact: a header (magic, length, checksum) and the bytes
//! ```
//!
//! Hashes are [`super::hash::hash64`] in hex; [`PersistentCache::with_hash_bits`]
//! truncates them (a test hook that forces collisions). A caller that looks the same key up
//! repeatedly computes its [`KeyHashes`] once ([`PersistentCache::get_hashed`]), so a lookup
//! never re-hashes the module. A hash match is never trusted: the
//! full key in `<n>.src` is compared, and on a collision the next free `<n>` is used.
//!
//! ## Safety against races and damage
//!
//! * Writes go to a temporary file in the item directory and are renamed into place, the
//!   `.bin` before the `.src`, under the directory's exclusive lock; the lock is held only
//!   while choosing `<n>` and writing. Readers take no lock: they see an item only once its
//!   `.src` exists, and then its `.bin` is complete.
//! * A hit is lean: the first item of the directory (`0.src`, where an uncollided key lives)
//!   is opened directly, with no directory scan; the `.src` file's handle is used both to
//!   read the key and to stamp the use; checksums run over the bytes already read. Only
//!   when `0` is another key (a collision), missing or damaged is the directory listed.
//! * Every read is checked (magic, lengths, checksums, and the `.bin`'s checksum against the
//!   one in `.src`). A damaged item is reported once as a warning, removed (when its lock
//!   can be taken), and treated as a miss, so the caller rebuilds; it is never loaded.
//! * A root that cannot be written (read-only, full disk, not a directory) turns the cache
//!   off for this process with one warning; it never fails the caller's build.
//! * Eviction ([`PersistentCache::evict`]) removes least-recently-used items (a hit sets
//!   the `.src` file's modification time, so recency does not depend on `atime` mount
//!   options) until the total size fits, skipping directories whose lock is held, and
//!   removes directories left empty.

// File locking (`File::lock`, `File::try_lock`) is in std since Rust 1.89.
#![allow(clippy::incompatible_msrv)]

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use super::hash::hash64;

mod format;
use format::{check_bin, decode_bin, encode_bin, read_exact_two, read_key_file, MAX_ARTIFACT};
pub use format::{DiskKey, KeyHashes};

/// One item of the cache, as listed by [`PersistentCache::items`].
#[derive(Clone, Debug)]
pub struct ItemInfo {
    /// The item's name relative to the root: `<device>/<image>/<spec>/<options>/<n>`.
    pub id: String,
    /// The item directory.
    pub dir: PathBuf,
    /// The collision index `<n>`.
    pub n: u64,
    /// Size of `<n>.src` plus `<n>.bin` in bytes.
    pub size: u64,
    /// When the item was last stored or loaded.
    pub last_used: SystemTime,
}

/// What [`PersistentCache::show`] finds for an item.
#[derive(Clone, Debug)]
pub struct ItemDetails {
    /// The full key, if `<n>.src` is readable and valid.
    pub key: Result<DiskKey, String>,
    /// The artifact's length in bytes, if `<n>.bin` is present and checks out.
    pub artifact: Result<usize, String>,
}

/// Totals of [`PersistentCache::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskStats {
    /// Number of items.
    pub items: u64,
    /// Their total size in bytes.
    pub bytes: u64,
}

/// A simulated file-system fault (test hook, [`PersistentCache::with_fault`]): the cache's
/// writes fail as they would on such a file system, through the same error paths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskFault {
    /// Every write fails (`EROFS`-like): a read-only root, whatever the process's privileges.
    ReadOnly,
    /// The disk fills up after this many bytes of items have been written; the write that
    /// crosses the limit writes part of its file, then fails with `StorageFull`.
    FullAfter(u64),
}

/// The on-disk program cache. Cheap operations, thread-safe, and safe to share between
/// processes through the file system.
#[derive(Debug)]
pub struct PersistentCache {
    root: PathBuf,
    max_size: u64,
    max_item_size: u64,
    hash_bits: u32,
    disabled: AtomicBool,
    fault: Option<DiskFault>,
    written: AtomicU64,
    warned: Mutex<HashSet<String>>,
    warnings: Mutex<Vec<String>>,
    tmp_counter: AtomicU64,
}

impl PersistentCache {
    /// A cache rooted at `root` with no size limits.
    pub fn new(root: impl Into<PathBuf>) -> PersistentCache {
        PersistentCache {
            root: root.into(),
            max_size: 0,
            max_item_size: 0,
            hash_bits: 64,
            disabled: AtomicBool::new(false),
            fault: None,
            written: AtomicU64::new(0),
            warned: Mutex::new(HashSet::new()),
            warnings: Mutex::new(Vec::new()),
            tmp_counter: AtomicU64::new(0),
        }
    }

    /// The cache the environment asks for: `None` unless `KILN_CACHE_PERSISTENT=1`; rooted
    /// at `KILN_CACHE_DIR` or [`default_root`](Self::default_root); limits from
    /// `KILN_CACHE_MAX_SIZE` and `KILN_CACHE_MAX_ITEM_SIZE`. A `KILN_CACHE_PERSISTENT` that
    /// is neither `1` nor `0` is warned about on stderr and leaves the cache off.
    pub fn from_env() -> Option<PersistentCache> {
        match crate::env::flag("KILN_CACHE_PERSISTENT") {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                eprintln!("kiln: warning: {e}; the persistent cache stays off");
                return None;
            }
        }
        Self::from_env_root()
    }

    /// Like [`from_env`](Self::from_env) without the `KILN_CACHE_PERSISTENT` check (for
    /// tools that inspect the cache).
    pub fn from_env_root() -> Option<PersistentCache> {
        let root = match std::env::var_os("KILN_CACHE_DIR") {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => Self::default_root()?,
        };
        let num = |v: &str| std::env::var(v).ok().and_then(|s| s.trim().parse::<u64>().ok());
        Some(
            PersistentCache::new(root)
                .with_max_size(num("KILN_CACHE_MAX_SIZE").unwrap_or(0))
                .with_max_item_size(num("KILN_CACHE_MAX_ITEM_SIZE").unwrap_or(0)),
        )
    }

    /// `$XDG_CACHE_HOME/kiln`, else `$HOME/.cache/kiln`.
    pub fn default_root() -> Option<PathBuf> {
        match std::env::var_os("XDG_CACHE_HOME") {
            Some(x) if !x.is_empty() => Some(PathBuf::from(x).join("kiln")),
            _ => std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("kiln")),
        }
    }

    /// Evict least-recently-used items after a store once the total passes `bytes` (0: no
    /// limit).
    pub fn with_max_size(mut self, bytes: u64) -> PersistentCache {
        self.max_size = bytes;
        self
    }

    /// Do not store artifacts larger than `bytes` (0: no limit).
    pub fn with_max_item_size(mut self, bytes: u64) -> PersistentCache {
        self.max_item_size = bytes;
        self
    }

    /// Test hook: keep only the low `bits` bits of every hash in directory names (0 puts
    /// every key of a device in one directory), forcing collisions.
    pub fn with_hash_bits(mut self, bits: u32) -> PersistentCache {
        self.hash_bits = bits.min(64);
        self
    }

    /// Test hook: simulate a read-only or full file system under the cache.
    pub fn with_fault(mut self, fault: DiskFault) -> PersistentCache {
        self.fault = Some(fault);
        self
    }

    /// Fails like a read-only file system would, when that fault is simulated.
    fn check_writable(&self) -> io::Result<()> {
        match self.fault {
            Some(DiskFault::ReadOnly) => Err(io::Error::new(
                ErrorKind::ReadOnlyFilesystem,
                "read-only file system (simulated)",
            )),
            _ => Ok(()),
        }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether an unwritable root turned the cache's writes off (hits are still served
    /// from what is there).
    pub fn is_disabled(&self) -> bool {
        self.disabled.load(Ordering::Relaxed)
    }

    /// The warnings issued so far (each distinct problem once).
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn warn_once(&self, what: String, message: String) {
        let new = self.warned.lock().unwrap_or_else(PoisonError::into_inner).insert(what);
        if new {
            tracing::warn!("kiln persistent cache: {message}");
            self.warnings.lock().unwrap_or_else(PoisonError::into_inner).push(message);
        }
    }

    fn hex(&self, h: u64) -> String {
        let h = if self.hash_bits >= 64 { h } else { h & ((1u64 << self.hash_bits) - 1) };
        format!("{h:016x}")
    }

    /// The item directory of `key`.
    pub fn item_dir(&self, key: &DiskKey) -> PathBuf {
        self.item_dir_hashed(&KeyHashes::of(key))
    }

    fn item_dir_hashed(&self, h: &KeyHashes) -> PathBuf {
        let mut p = PathBuf::with_capacity(self.root.as_os_str().len() + 4 * 17 + 24);
        p.push(&self.root);
        for part in [h.device, h.image, h.spec_consts, h.build_options] {
            p.push(self.hex(part));
        }
        p
    }

    /// Collision indices of the items in `dir` (those with a `.src`), ascending.
    fn indices(dir: &Path, ext: &str) -> io::Result<Vec<u64>> {
        let mut v: Vec<u64> = fs::read_dir(dir)?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.strip_suffix(ext)?.parse::<u64>().ok()
            })
            .collect();
        v.sort_unstable();
        Ok(v)
    }

    /// The artifact stored for `key`, if a valid item exists. Damaged items are reported
    /// once, removed and skipped; nothing here fails.
    pub fn get(&self, key: &DiskKey) -> Option<Vec<u8>> {
        self.get_hashed(key, &KeyHashes::of(key))
    }

    /// [`get`](Self::get) with the key's hashes computed beforehand (`hashes` must be
    /// [`KeyHashes::of`] `key`; other hashes only make a miss).
    pub fn get_hashed(&self, key: &DiskKey, hashes: &KeyHashes) -> Option<Vec<u8>> {
        self.find(key, hashes).map(|(_, _, bin)| bin)
    }

    /// The valid item stored for `key`: its directory, index and artifact.
    fn find(&self, key: &DiskKey, hashes: &KeyHashes) -> Option<(PathBuf, u64, Vec<u8>)> {
        let dir = self.item_dir_hashed(hashes);
        // The common case first: the key is item 0 of its directory. No listing.
        match self.check_item(&dir, 0, key) {
            Some(Some(bin)) => return Some((dir, 0, bin)),
            Some(None) => {}
            // No `0.src`: a missing directory is a plain miss; otherwise list it below
            // (item 0 may have been removed while later ones remain).
            None if !dir.is_dir() => return None,
            None => {}
        }
        let ns = match Self::indices(&dir, ".src") {
            Ok(ns) => ns,
            Err(e) if e.kind() == ErrorKind::NotFound => return None,
            Err(e) => {
                self.warn_once(
                    format!("read {}", dir.display()),
                    format!("cannot read `{}`: {e}", dir.display()),
                );
                return None;
            }
        };
        for n in ns.into_iter().filter(|&n| n != 0) {
            if let Some(Some(bin)) = self.check_item(&dir, n, key) {
                return Some((dir, n, bin));
            }
        }
        None
    }

    /// Removes the item stored for `key`, reported once as a warning saying `why`: for an
    /// artifact that checks out but that its device cannot load (written by an incompatible
    /// build, say), so that the rebuilt artifact replaces it instead of being skipped as
    /// already stored.
    pub fn discard_hashed(&self, key: &DiskKey, hashes: &KeyHashes, why: &str) {
        if let Some((dir, n, _)) = self.find(key, hashes) {
            let path = dir.join(format!("{n}"));
            self.warn_once(
                format!("discard {} {why}", path.display()),
                format!("ignoring unloadable item `{}`: {why}; it will be rebuilt", path.display()),
            );
            self.remove_item(&dir, n);
        }
    }

    /// Item `n` of `dir` for `key`: `Some(Some)` a valid match, `Some(None)` another key or
    /// damaged (reported once and removed), `None` no such item.
    fn check_item(&self, dir: &Path, n: u64, key: &DiskKey) -> Option<Option<Vec<u8>>> {
        match self.load_item(dir, n, key) {
            Ok(found) => found,
            Err(problem) => {
                let path = dir.join(format!("{n}"));
                self.warn_once(
                    format!("corrupt {} {problem}", path.display()),
                    format!(
                        "ignoring damaged item `{}`: {problem}; it will be rebuilt",
                        path.display()
                    ),
                );
                self.remove_item(dir, n);
                Some(None)
            }
        }
    }

    /// `Ok(Some(Some))`: the item matches and is valid. `Ok(Some(None))`: another key's
    /// item. `Ok(None)`: no such item (or removed meanwhile). `Err`: damaged.
    fn load_item(
        &self,
        dir: &Path,
        n: u64,
        key: &DiskKey,
    ) -> Result<Option<Option<Vec<u8>>>, String> {
        let src_path = dir.join(format!("{n}.src"));
        // One handle reads the key and stamps the use (read-write where allowed; a
        // read-only cache still serves hits).
        let opened = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&src_path)
            .or_else(|_| File::open(&src_path));
        let mut src_file = match opened {
            Ok(f) => f,
            // A root that is not a directory holds no items (`put` reports it).
            Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                return Ok(None)
            }
            Err(e) => return Err(format!("cannot read key file: {e}")),
        };
        let short = read_key_file(&mut src_file, key.encoded_len())
            .map_err(|e| format!("cannot read key file: {e}"))?;
        let (src, (stored, len, sum)) = match DiskKey::decode(&short) {
            Ok(d) => (short, d),
            // Not what a file of exactly our key's size holds: read it whole before calling
            // it damaged (it may be another key's, or a read may have come back short).
            Err(_) => {
                let whole =
                    fs::read(&src_path).map_err(|e| format!("cannot read key file: {e}"))?;
                let d = DiskKey::decode(&whole).map_err(|e| format!("key file: {e}"))?;
                (whole, d)
            }
        };
        if stored != *key {
            return Ok(Some(None)); // a hash collision: another key's item
        }
        // The length comes from a checksummed key file; still, never allocate absurdly.
        let Some(size) = usize::try_from(len).ok().filter(|&l| l <= MAX_ARTIFACT) else {
            return Err(format!("artifact length {len} out of range"));
        };
        let mut header = [0u8; 24];
        let mut payload = vec![0u8; size];
        let read_bin = File::open(dir.join(format!("{n}.bin")))
            .and_then(|mut f| read_exact_two(&mut f, &mut header, &mut payload));
        let checked = match read_bin {
            Ok(()) => check_bin(&header, &payload, len, sum),
            // Removed by eviction since we read the key: a miss, not damage.
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return if src_path.exists() {
                    Err("the artifact file is missing".into())
                } else {
                    Ok(None)
                };
            }
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                Err(format!("truncated: shorter than {len} bytes"))
            }
            Err(e) => return Err(format!("cannot read artifact: {e}")),
        };
        match checked {
            Ok(()) => {
                // Record the use for LRU eviction (best effort; fails on a read-only root).
                if self.check_writable().is_ok() {
                    let _ = src_file.set_modified(SystemTime::now());
                }
                Ok(Some(Some(payload)))
            }
            // The item may have been replaced between our two reads; only a stable
            // mismatch is damage.
            Err(_) if fs::read(&src_path).ok().as_deref() != Some(&src[..]) => Ok(None),
            Err(e) => Err(format!("artifact: {e}")),
        }
    }

    /// Removes item `n` of `dir` if the directory's lock is free (else leaves it).
    fn remove_item(&self, dir: &Path, n: u64) {
        if self.check_writable().is_err() {
            return;
        }
        let Ok(lock) =
            OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(".lock"))
        else {
            return;
        };
        if lock.try_lock().is_err() {
            return;
        }
        let _ = fs::remove_file(dir.join(format!("{n}.src")));
        let _ = fs::remove_file(dir.join(format!("{n}.bin")));
    }

    /// Stores `artifact` for `key` (unless an equal item already exists or it is larger
    /// than the item size limit), then evicts if the cache is over its size limit. Failures
    /// are warnings; an unwritable root turns the cache off.
    pub fn put(&self, key: &DiskKey, artifact: &[u8]) {
        self.put_hashed(key, &KeyHashes::of(key), artifact)
    }

    /// [`put`](Self::put) with the key's hashes computed beforehand (as for
    /// [`get_hashed`](Self::get_hashed)).
    pub fn put_hashed(&self, key: &DiskKey, hashes: &KeyHashes, artifact: &[u8]) {
        if self.is_disabled() {
            return;
        }
        if self.max_item_size > 0 && artifact.len() as u64 > self.max_item_size {
            tracing::debug!("not caching a {}-byte artifact (item limit)", artifact.len());
            return;
        }
        let dir = self.item_dir_hashed(hashes);
        // The directory may be removed by a concurrent eviction between creating it and
        // writing into it: retry a few times.
        let mut last = None;
        for _ in 0..4 {
            match self.try_put(&dir, key, artifact) {
                Ok(()) => {
                    last = None;
                    break;
                }
                Err(e) if e.kind() == ErrorKind::NotFound => last = Some(e),
                Err(e) => {
                    last = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = last {
            self.disabled.store(true, Ordering::Relaxed);
            self.warn_once(
                "disabled".into(),
                format!(
                    "cannot write to `{}` ({e}); continuing without a persistent cache",
                    self.root.display()
                ),
            );
            return;
        }
        if self.max_size > 0 {
            self.evict(self.max_size);
        }
    }

    fn try_put(&self, dir: &Path, key: &DiskKey, artifact: &[u8]) -> io::Result<()> {
        self.check_writable()?;
        fs::create_dir_all(dir)?;
        let lock =
            OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(".lock"))?;
        lock.lock()?;
        // Under the lock no other writer is active in this directory.
        let srcs = Self::indices(dir, ".src")?;
        for &n in &srcs {
            if let Ok(Some(Some(_))) = self.load_item(dir, n, key) {
                return Ok(()); // stored by someone else meanwhile
            }
        }
        // Orphaned artifacts and temporary files (from killed writers) can go now.
        let bins = Self::indices(dir, ".bin")?;
        for &n in &bins {
            if !srcs.contains(&n) {
                let _ = fs::remove_file(dir.join(format!("{n}.bin")));
            }
        }
        for e in fs::read_dir(dir)?.filter_map(|e| e.ok()) {
            if e.file_name().to_string_lossy().starts_with(".tmp-") {
                let _ = fs::remove_file(e.path());
            }
        }
        let n = srcs.last().map_or(0, |&m| m + 1);
        self.write_atomic(dir, &format!("{n}.bin"), &encode_bin(artifact))?;
        let src = key.encode(artifact.len() as u64, hash64(artifact));
        self.write_atomic(dir, &format!("{n}.src"), &src)?;
        drop(lock);
        Ok(())
    }

    /// Writes `name` in `dir` through a temporary file and a rename.
    fn write_atomic(&self, dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
        let tmp = dir.join(format!(
            ".tmp-{}-{}-{name}",
            std::process::id(),
            self.tmp_counter.fetch_add(1, Ordering::Relaxed)
        ));
        let r = (|| {
            let mut f = File::create(&tmp)?;
            if let Some(DiskFault::FullAfter(limit)) = self.fault {
                let before = self.written.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                if before + bytes.len() as u64 > limit {
                    let room = limit.saturating_sub(before) as usize;
                    f.write_all(&bytes[..room.min(bytes.len())])?;
                    return Err(io::Error::new(
                        ErrorKind::StorageFull,
                        "no space left on device (simulated)",
                    ));
                }
            }
            f.write_all(bytes)?;
            f.flush()?;
            drop(f);
            fs::rename(&tmp, dir.join(name))
        })();
        if r.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        r
    }

    /// Every item, in no particular order.
    pub fn items(&self) -> Vec<ItemInfo> {
        let mut out = Vec::new();
        let mut dirs = vec![(self.root.clone(), 0, String::new())];
        while let Some((d, depth, id)) = dirs.pop() {
            let Ok(rd) = fs::read_dir(&d) else { continue };
            for e in rd.filter_map(|e| e.ok()) {
                let name = e.file_name().to_string_lossy().into_owned();
                let path = e.path();
                if depth < 4 {
                    if path.is_dir() {
                        let id = if id.is_empty() { name } else { format!("{id}/{name}") };
                        dirs.push((path, depth + 1, id));
                    }
                    continue;
                }
                let Some(n) = name.strip_suffix(".src").and_then(|s| s.parse::<u64>().ok()) else {
                    continue;
                };
                let Ok(meta) = e.metadata() else { continue };
                let bin = fs::metadata(d.join(format!("{n}.bin"))).map(|m| m.len()).unwrap_or(0);
                out.push(ItemInfo {
                    id: format!("{id}/{n}"),
                    dir: d.clone(),
                    n,
                    size: meta.len() + bin,
                    last_used: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                });
            }
        }
        out
    }

    /// Item count and total size.
    pub fn stats(&self) -> DiskStats {
        let items = self.items();
        DiskStats { items: items.len() as u64, bytes: items.iter().map(|i| i.size).sum() }
    }

    /// The key and artifact status of the item named `id` (as in [`ItemInfo::id`]).
    pub fn show(&self, id: &str) -> Option<ItemDetails> {
        let (dir, n) = id.rsplit_once('/')?;
        let n: u64 = n.parse().ok()?;
        if dir.split('/').count() != 4 || dir.split('/').any(|c| c.is_empty() || c == "..") {
            return None;
        }
        let dir = self.root.join(dir);
        let src = fs::read(dir.join(format!("{n}.src"))).ok()?;
        let decoded = DiskKey::decode(&src);
        let artifact = match (&decoded, fs::read(dir.join(format!("{n}.bin")))) {
            (Ok((_, len, sum)), Ok(bin)) => decode_bin(&bin, *len, *sum).map(|p| p.len()),
            (Err(_), _) => Err("unknown (the key file is damaged)".into()),
            (_, Err(e)) => Err(format!("cannot read: {e}")),
        };
        Some(ItemDetails { key: decoded.map(|(k, _, _)| k), artifact })
    }

    /// Removes least-recently-used items until the total size is at most `max_bytes`,
    /// skipping locked directories and removing empty ones. Returns how many were removed.
    pub fn evict(&self, max_bytes: u64) -> usize {
        if self.check_writable().is_err() {
            return 0;
        }
        let mut items = self.items();
        let mut total: u64 = items.iter().map(|i| i.size).sum();
        if total <= max_bytes {
            return 0;
        }
        items.sort_by_key(|i| i.last_used);
        let mut removed = 0;
        for item in items {
            if total <= max_bytes {
                break;
            }
            let lock_path = item.dir.join(".lock");
            let Ok(lock) =
                OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path)
            else {
                continue;
            };
            if lock.try_lock().is_err() {
                continue; // a writer is busy here
            }
            let _ = fs::remove_file(item.dir.join(format!("{}.src", item.n)));
            let _ = fs::remove_file(item.dir.join(format!("{}.bin", item.n)));
            total = total.saturating_sub(item.size);
            removed += 1;
            if Self::indices(&item.dir, ".src").is_ok_and(|v| v.is_empty()) {
                let _ = fs::remove_file(&lock_path);
                drop(lock);
                self.remove_empty_dirs(&item.dir);
            }
        }
        removed
    }

    /// Removes `dir` and its parents up to the root while they are empty.
    fn remove_empty_dirs(&self, dir: &Path) {
        let mut d = dir.to_path_buf();
        while d.starts_with(&self.root) && d != self.root {
            // Stray temporary files of killed writers do not keep a directory alive.
            if let Ok(rd) = fs::read_dir(&d) {
                for e in rd.filter_map(|e| e.ok()) {
                    if e.file_name().to_string_lossy().starts_with(".tmp-") {
                        let _ = fs::remove_file(e.path());
                    }
                }
            }
            if fs::remove_dir(&d).is_err() {
                break;
            }
            if !d.pop() {
                break;
            }
        }
    }

    /// Removes every item (evicting to size 0). Returns how many were removed.
    pub fn clear(&self) -> usize {
        self.evict(0)
    }
}
