//! The persistent (on-disk) program cache.
//!
//! ## Layout
//!
//! ```text
//! <root>/CACHEDIR.TAG   marks the root as a kiln cache (https://bford.info/cachedir/)
//! <root>/mac.key        the 32-byte key of the items' MACs (0600, made on first use)
//! <root>/<device_hash>/<image_hash>/<spec_consts_hash>/<build_options_hash>/
//!     .lock        advisory lock of this item directory (flock; released by the OS when
//!                  the holder dies, so a lock file left by a killed process is harmless)
//!     <n>.src      the full key: device identity, image, spec constants, build options,
//!                  and the length and MAC of <n>.bin; itself authenticated by a MAC
//!     <n>.bin      the artifact: a header (magic, length, MAC) and the bytes
//!     .tmp-*       a file being written (renamed into place when complete)
//! ```
//!
//! Hashes are [`super::hash::hash64`] in hex, always 16 digits;
//! [`PersistentCache::with_hash_bits`] truncates them (a test hook that forces collisions).
//! A caller that looks the same key up repeatedly computes its [`KeyHashes`] once
//! ([`PersistentCache::get_hashed`]), so a lookup never re-hashes the module. A hash match
//! is never trusted: the full key in `<n>.src` is compared, and on a collision the next
//! free `<n>` is used.
//!
//! ## Who wrote an item
//!
//! Items hold machine code that the cpu device maps executable, tuning records and other
//! artifacts a device trusts, so a checksum is not enough: anyone who can write a file
//! can recompute one. Hence (the private modules `trust` and `mac`):
//!
//! * Directories are created 0700 and files 0600, whatever the umask; a directory of the
//!   cache that others may read (made by an earlier version) is narrowed to 0700.
//! * The root and every level directory of an item must belong to the effective user and
//!   be writable by no one else. A root that is not turns the cache off; a level directory
//!   that is not makes its items misses that are neither loaded nor stored. Either is
//!   reported once, naming the directory and the reason.
//! * Every `.src` and `.bin` carries a keyed MAC (BLAKE3) under the root's `mac.key`,
//!   which must itself belong to this user and be readable by no one else. An item whose MAC fails
//!   (edited, copied from another cache, written by an earlier version) is damaged: it is
//!   reported, removed and rebuilt, never loaded.
//!
//! ## Safety of the files around the cache
//!
//! * The root is taken as given, links in its path included (a root that is a symbolic
//!   link means the directory it points to). Below the root nothing is followed: the cache
//!   creates no links, so every open refuses a link (`O_NOFOLLOW`), every walk looks at
//!   entries themselves (`symlink_metadata`), the level directories of an item are checked
//!   to be real directories before it is read or written, and a removal unlinks a link,
//!   never its target. Nothing outside the root is read, stamped or deleted.
//! * Only names of the layout are ever deleted, and only when they are what kiln writes
//!   there. An entry of the wrong type at such a name (a directory where `0.src` belongs, a
//!   link where a level directory belongs, `.lock` as a directory) is a damaged item: it is
//!   reported once, naming that path, and removed when that loses nothing (a link, an
//!   empty directory, a FIFO); a regular file or a non-empty directory is left in place
//!   and the item skipped. Either way the cache keeps working for every other item.
//!   Entries with other names are foreign: never followed, never removed.
//! * A root is used only when it is a kiln cache: tagged by `CACHEDIR.TAG`, or holding
//!   nothing but level directories and a key (an untagged cache of an earlier version), or
//!   missing or empty (it is created and tagged on the first store). Any other directory (`$HOME`,
//!   say) turns the cache off with a warning naming the root and what it holds, and
//!   [`PersistentCache::check_root`] refuses it, so `kiln cache clear` never deletes there.
//! * The checks are against links and misplaced entries present when the cache looks; a
//!   process that swaps a directory for a link in the instant between a check and a use is
//!   not defended against (that would take `openat`-style calls that std does not offer).
//!
//! ## Safety against races and damage
//!
//! * Writes go to a temporary file in the item directory (created exclusively, so an
//!   existing link is never written through) and are renamed into place, the `.bin` before
//!   the `.src`, under the directory's exclusive lock; the lock is held only while choosing
//!   `<n>` and writing. Readers take no lock: they see an item only once its `.src`
//!   exists, and then its `.bin` is complete.
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
use std::fs::{self, File, FileType, OpenOptions};
use std::io::{self, ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::SystemTime;

use crate::sync::{ranks, RankedMutex};

mod entry;
mod format;
mod mac;
mod root;
mod scan;
mod trust;
use entry::{describe, Opened, Removal};
use format::{check_bin, encode_bin, read_exact_two, read_key_file, BIN_HEADER, MAX_ARTIFACT};
pub use format::{DiskKey, KeyHashes};
use mac::MacKey;
pub use root::RootError;
pub use scan::{ItemDetails, ItemInfo, Scan};

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
    /// What this process found the root to be ([`root::UNCHECKED`], ...).
    root_state: AtomicU8,
    fault: Option<DiskFault>,
    written: AtomicU64,
    warned: RankedMutex<HashSet<String>>,
    warnings: RankedMutex<Vec<String>>,
    tmp_counter: AtomicU64,
    /// The root's MAC key, once read (or made).
    mac_key: RankedMutex<Option<MacKey>>,
}

/// Why an item could not be read: its contents (the item is removed), or an entry of the
/// wrong type at one of its names (repaired where that loses nothing).
enum Damage {
    Content(String),
    Misplaced { path: PathBuf, found: FileType, expected: &'static str },
}

/// Why a store failed: this item's directory is damaged (the cache stays on), a level
/// directory may have been written by someone else (the cache stays on), or the root
/// cannot be written (the cache turns off).
enum PutError {
    Item(String),
    Untrusted(String),
    Io(io::Error),
}

impl From<io::Error> for PutError {
    fn from(e: io::Error) -> PutError {
        PutError::Io(e)
    }
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
            root_state: AtomicU8::new(root::UNCHECKED),
            fault: None,
            written: AtomicU64::new(0),
            warned: RankedMutex::new(ranks::DISK_WARNED, HashSet::new()),
            warnings: RankedMutex::new(ranks::DISK_WARNINGS, Vec::new()),
            tmp_counter: AtomicU64::new(0),
            mac_key: RankedMutex::new(ranks::DISK_KEY, None),
        }
    }

    /// A cache that is off from the start because there is no place for it, saying `why`
    /// as its one warning (what a [`crate::Config`] with the cache on but no usable
    /// directory gives a context). Its [`root`](Self::root) is empty.
    pub fn unavailable(why: &str) -> PersistentCache {
        let c = PersistentCache::new(PathBuf::new());
        c.root_state.store(root::REFUSED, Ordering::Relaxed);
        c.disable(why.to_string());
        c
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

    /// The size limit of [`with_max_size`](Self::with_max_size) (0: none).
    pub fn max_size(&self) -> u64 {
        self.max_size
    }

    /// Whether the cache's writes are off for this process: an unwritable root (hits are
    /// still served from what is there), or one that cannot be trusted or has no usable
    /// key (nothing is served).
    pub fn is_disabled(&self) -> bool {
        self.disabled.load(Ordering::Relaxed)
    }

    /// The warnings issued so far (each distinct problem once).
    pub fn warnings(&self) -> Vec<String> {
        self.warnings.lock().clone()
    }

    fn warn_once(&self, what: String, message: String) {
        let new = self.warned.lock().insert(what);
        if new {
            tracing::warn!("kiln persistent cache: {message}");
            self.warnings.lock().push(message);
        }
    }

    /// Turns the cache's writes off for this process, saying why once.
    fn disable(&self, why: String) {
        self.disabled.store(true, Ordering::Relaxed);
        self.warn_once("disabled".into(), format!("{why}; continuing without a persistent cache"));
    }

    /// Turns the cache off for reads and writes, saying why once: what it holds cannot be
    /// trusted (or authenticated).
    fn refuse(&self, why: String) {
        self.root_state.store(root::REFUSED, Ordering::Relaxed);
        self.disable(why);
    }

    /// Reports an entry of the wrong type at a name the layout owns (once) and removes it
    /// where that loses nothing ([`entry::remove_misplaced`]). Returns whether it is gone.
    fn report_misplaced(&self, path: &Path, found: FileType, expected: &str) -> bool {
        let removal = match self.check_writable() {
            Ok(()) => entry::remove_misplaced(path, found),
            Err(_) => Removal::Kept,
        };
        let what = describe(found);
        let done = match removal {
            Removal::Removed => "removed it".to_string(),
            Removal::Kept => "left it in place (kiln deletes only what it wrote) and skipped \
                              it; remove it by hand to let kiln use this name again"
                .to_string(),
        };
        self.warn_once(
            format!("misplaced {}", path.display()),
            format!(
                "damaged item: `{}` is {what} where kiln keeps {expected}; {done}",
                path.display()
            ),
        );
        removal == Removal::Removed
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

    /// Collision indices of the entries in `dir` named `<n><ext>`, of any type, ascending.
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
        if !self.root_usable(false) {
            return None;
        }
        let mac = self.mac_key()?;
        let dir = self.item_dir_hashed(hashes);
        // A missing level is a plain miss; a link there is never followed.
        if !self.levels_ok(&dir) {
            return None;
        }
        // The common case first: the key is item 0 of its directory, found with no
        // listing. Otherwise (no `0.src`, another key's, or damaged) list the directory:
        // item 0 may have been removed while later ones remain.
        if let Some(Some(bin)) = self.check_item(&dir, 0, key, &mac) {
            return Some((dir, 0, bin));
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
            if let Some(Some(bin)) = self.check_item(&dir, n, key, &mac) {
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
    /// damaged (reported once and removed or repaired), `None` no such item.
    fn check_item(
        &self,
        dir: &Path,
        n: u64,
        key: &DiskKey,
        mac: &MacKey,
    ) -> Option<Option<Vec<u8>>> {
        match self.load_item(dir, n, key, mac, false) {
            Ok(found) => found,
            Err(Damage::Content(problem)) => {
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
            Err(Damage::Misplaced { path, found, expected }) => {
                self.report_misplaced(&path, found, expected);
                // The item is unusable either way; what of it is kiln's goes.
                self.remove_item(dir, n);
                Some(None)
            }
        }
    }

    /// `Ok(Some(Some))`: the item matches and is valid. `Ok(Some(None))`: another key's
    /// item. `Ok(None)`: no such item (or removed meanwhile). `Err`: damaged.
    ///
    /// `locked` says whether the caller holds the directory's lock (a store checking for an
    /// equal item does). Nothing comes back that `mac` does not authenticate.
    fn load_item(
        &self,
        dir: &Path,
        n: u64,
        key: &DiskKey,
        mac: &MacKey,
        locked: bool,
    ) -> Result<Option<Option<Vec<u8>>>, Damage> {
        let src_path = dir.join(format!("{n}.src"));
        let misplaced = |path: &Path, found| Damage::Misplaced {
            path: path.to_path_buf(),
            found,
            expected: "a file",
        };
        // One handle reads the key and stamps the use (read-write where allowed; a
        // read-only cache still serves hits).
        let opened = entry::open(&src_path, OpenOptions::new().read(true).write(true))
            .or_else(|_| entry::open(&src_path, OpenOptions::new().read(true)));
        let mut src_file = match opened {
            Ok(Opened::File(f, _)) => f,
            Ok(Opened::Missing) => return Ok(None),
            Ok(Opened::NotAFile(ft)) => return Err(misplaced(&src_path, ft)),
            Err(e) => return Err(Damage::Content(format!("cannot read key file: {e}"))),
        };
        let content = |m: String| Damage::Content(m);
        let short = read_key_file(&mut src_file, key.encoded_len())
            .map_err(|e| content(format!("cannot read key file: {e}")))?;
        let (src, (stored, len, tag)) = match DiskKey::decode(&short, mac) {
            Ok(d) => (short, d),
            // Not what a file of exactly our key's size holds: read it whole before calling
            // it damaged (it may be another key's, or a read may have come back short).
            Err(_) => {
                let whole = read_whole(&src_path).map_err(content)?;
                let d =
                    DiskKey::decode(&whole, mac).map_err(|e| content(format!("key file: {e}")))?;
                (whole, d)
            }
        };
        if stored != *key {
            return Ok(Some(None)); // a hash collision: another key's item
        }
        // The length comes from an authenticated key file; still, never allocate absurdly.
        let Some(size) = usize::try_from(len).ok().filter(|&l| l <= MAX_ARTIFACT) else {
            return Err(content(format!("artifact length {len} out of range")));
        };
        let bin_path = dir.join(format!("{n}.bin"));
        let (mut bin_file, on_disk) = match entry::open(&bin_path, OpenOptions::new().read(true)) {
            Ok(Opened::File(f, len)) => (f, len),
            // Removed by eviction since we read the key, or not yet written by a store that
            // reuses the index: a miss, not damage. Stores and evictions change an item only
            // under the directory's lock, so only a key without its artifact seen under the
            // lock is damage.
            Ok(Opened::Missing) => {
                let lock = if locked { None } else { self.open_lock(dir).ok() };
                if !locked && lock.as_ref().is_none_or(|l| l.lock().is_err()) {
                    return Ok(None);
                }
                let bin_missing = matches!(entry::kind(&bin_path), Ok(None));
                return if bin_missing && src_path.exists() {
                    Err(content("the artifact file is missing".into()))
                } else {
                    Ok(None)
                };
            }
            Ok(Opened::NotAFile(ft)) => return Err(misplaced(&bin_path, ft)),
            Err(e) => return Err(content(format!("cannot read artifact: {e}"))),
        };
        let expected = (size + BIN_HEADER) as u64;
        let mut header = [0u8; BIN_HEADER];
        let mut payload = vec![0u8; size];
        let checked = if on_disk < expected {
            Err(format!("truncated: the artifact file has {on_disk} of {expected} bytes"))
        } else if on_disk > expected {
            Err(format!(
                "length mismatch: the artifact file has {on_disk} bytes where {expected} are \
                 expected"
            ))
        } else {
            match read_exact_two(&mut bin_file, &mut header, &mut payload) {
                Ok(()) => check_bin(&header, &payload, len, &tag, Some(mac)),
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                    Err(format!("truncated: shorter than {expected} bytes"))
                }
                Err(e) => return Err(content(format!("cannot read artifact: {e}"))),
            }
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
            Err(_) if read_whole(&src_path).ok().as_deref() != Some(&src[..]) => Ok(None),
            Err(e) => Err(content(format!("artifact: {e}"))),
        }
    }

    /// Opens (creating) the lock file of `dir`; a misplaced `.lock` is repaired once where
    /// that loses nothing, else the item directory cannot be used.
    fn open_lock(&self, dir: &Path) -> Result<File, PutError> {
        let path = dir.join(".lock");
        for _ in 0..2 {
            let mut opts = OpenOptions::new();
            trust::private_file(opts.create(true).truncate(false).write(true));
            match entry::open(&path, &mut opts)? {
                Opened::File(f, _) => return Ok(f),
                Opened::Missing => return Err(io::Error::from(ErrorKind::NotFound).into()),
                Opened::NotAFile(ft) => {
                    if !self.report_misplaced(&path, ft, "a lock file") {
                        break;
                    }
                }
            }
        }
        Err(PutError::Item(format!("`{}` is not a lock file", path.display())))
    }

    /// Removes item `n` of `dir` if the directory's lock is free (else leaves it). Only
    /// the item's own names go, and a link there is unlinked, not followed.
    fn remove_item(&self, dir: &Path, n: u64) {
        if self.check_writable().is_err() {
            return;
        }
        let Ok(lock) = self.open_lock(dir) else { return };
        if lock.try_lock().is_err() {
            return;
        }
        for ext in ["src", "bin"] {
            let path = dir.join(format!("{n}.{ext}"));
            match entry::kind(&path) {
                Ok(Some(ft)) if ft.is_file() => {
                    let _ = fs::remove_file(&path);
                }
                Ok(Some(ft)) => {
                    self.report_misplaced(&path, ft, "a file");
                }
                _ => {}
            }
        }
    }

    /// Stores `artifact` for `key` (unless an equal item already exists or it is larger
    /// than the item size limit), then evicts if the cache is over its size limit. Failures
    /// are warnings; an unwritable root turns the cache off, a damaged item directory only
    /// skips this store.
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
        if !self.root_usable(true) {
            return;
        }
        let Some(mut mac) = self.mac_key() else { return };
        let dir = self.item_dir_hashed(hashes);
        // The directory may be removed by a concurrent eviction between creating it and
        // writing into it: retry a few times.
        let mut last = None;
        for _ in 0..4 {
            match self.try_put(&dir, key, artifact, &mac) {
                Ok(()) => {
                    last = None;
                    break;
                }
                Err(PutError::Item(why)) => {
                    self.warn_once(
                        format!("skip {}", dir.display()),
                        format!("not storing into `{}`: {why}", dir.display()),
                    );
                    return;
                }
                Err(PutError::Untrusted(why)) => {
                    self.warn_untrusted(why);
                    return;
                }
                Err(PutError::Io(e)) if e.kind() == ErrorKind::NotFound => {
                    last = Some(e);
                    // The root itself may be gone (removed by hand): look at it afresh,
                    // which creates and tags it again, with a new key.
                    self.forget_root();
                    if !self.root_usable(true) {
                        return;
                    }
                    let Some(fresh) = self.mac_key() else { return };
                    mac = fresh;
                }
                Err(PutError::Io(e)) => {
                    last = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = last {
            self.disable(format!("cannot write to `{}` ({e})", self.root.display()));
            return;
        }
        if self.max_size > 0 {
            self.evict(self.max_size);
        }
    }

    /// Creates the level directories of `dir` one by one below the (existing) root, 0700,
    /// never through a link, and never into a directory someone else may have written.
    fn make_levels(&self, dir: &Path) -> Result<(), PutError> {
        let rel =
            dir.strip_prefix(&self.root).map_err(|_| PutError::Item("outside the root".into()))?;
        let mut p = self.root.clone();
        for c in rel.components() {
            p.push(c);
            loop {
                match entry::metadata(&p)? {
                    Some(m) if m.is_dir() => {
                        trust::check_dir(&p, &m).map_err(PutError::Untrusted)?;
                        trust::narrow_dir(&p, &m);
                        break;
                    }
                    Some(m) => {
                        let ft = m.file_type();
                        if !self.report_misplaced(&p, ft, "a directory") {
                            return Err(PutError::Item(format!(
                                "`{}` is {}, not a directory",
                                p.display(),
                                describe(ft)
                            )));
                        }
                    }
                    None => match trust::create_dir(&p, false) {
                        Ok(()) => break,
                        Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                        Err(e) => return Err(e.into()),
                    },
                }
            }
        }
        Ok(())
    }

    fn try_put(
        &self,
        dir: &Path,
        key: &DiskKey,
        artifact: &[u8],
        mac: &MacKey,
    ) -> Result<(), PutError> {
        self.check_writable()?;
        self.make_levels(dir)?;
        let lock = self.open_lock(dir)?;
        lock.lock()?;
        // Under the lock no other writer is active in this directory.
        let srcs = Self::indices(dir, ".src")?;
        for &n in &srcs {
            if let Ok(Some(Some(_))) = self.load_item(dir, n, key, mac, true) {
                return Ok(()); // stored by someone else meanwhile
            }
        }
        // Orphaned artifacts and temporary files (from killed writers) can go now; only
        // regular files, a link is never followed.
        let remove_file = |path: &Path| {
            if entry::kind(path).ok().flatten().is_some_and(|ft| ft.is_file()) {
                let _ = fs::remove_file(path);
            }
        };
        for &n in &Self::indices(dir, ".bin")? {
            if !srcs.contains(&n) {
                remove_file(&dir.join(format!("{n}.bin")));
            }
        }
        for e in fs::read_dir(dir)?.filter_map(|e| e.ok()) {
            if e.file_name().to_string_lossy().starts_with(".tmp-") {
                remove_file(&e.path());
            }
        }
        // Past every name still taken, of any type: a misplaced entry kiln keeps cannot be
        // renamed over.
        let bins = Self::indices(dir, ".bin")?;
        let n = srcs.iter().chain(&bins).max().map_or(0, |&m| m + 1);
        let (bin, tag) = encode_bin(artifact, mac);
        self.write_atomic(dir, &format!("{n}.bin"), &bin)?;
        let src = key.encode(artifact.len() as u64, &tag, mac);
        self.write_atomic(dir, &format!("{n}.src"), &src)?;
        drop(lock);
        Ok(())
    }

    /// Writes `name` in `dir` through a temporary file (created exclusively, never through
    /// a link) and a rename.
    fn write_atomic(&self, dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
        let tmp = dir.join(format!(
            ".tmp-{}-{}-{name}",
            std::process::id(),
            self.tmp_counter.fetch_add(1, Ordering::Relaxed)
        ));
        let mut created = false;
        let r = (|| {
            let mut f = entry::create_new(&tmp)?;
            created = true;
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
        if r.is_err() && created {
            let _ = fs::remove_file(&tmp);
        }
        r
    }
}

/// Reads a whole key file again, without following a link.
fn read_whole(path: &Path) -> Result<Vec<u8>, String> {
    match entry::open(path, OpenOptions::new().read(true)) {
        Ok(Opened::File(mut f, _)) => {
            let mut v = Vec::new();
            io::Read::read_to_end(&mut f, &mut v)
                .map_err(|e| format!("cannot read key file: {e}"))?;
            Ok(v)
        }
        Ok(Opened::Missing) => Err("the key file is gone".into()),
        Ok(Opened::NotAFile(ft)) => Err(format!("the key file is {}", describe(ft))),
        Err(e) => Err(format!("cannot read key file: {e}")),
    }
}
