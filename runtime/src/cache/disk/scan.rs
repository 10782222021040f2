//! Walking the persistent cache (listing, statistics, `show`) and trimming it (eviction,
//! `clear`). A walk never follows a link and descends only into names of the layout; it
//! tells kiln's items from damaged entries and from foreign ones.

use std::fs::{self, OpenOptions};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::entry::{self, describe, Opened};
use super::format::decode_bin;
use super::mac::{self, KEY_NAME};
use super::root::{is_level_name, TAG_NAME};
use super::trust::{self, Levels};
use super::{DiskKey, DiskStats, PersistentCache};

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
    /// The full key, if `<n>.src` is readable and well-formed (what it claims, whether or
    /// not it authenticates).
    pub key: Result<DiskKey, String>,
    /// The artifact's length in bytes, if `<n>.bin` is present and well-formed.
    pub artifact: Result<usize, String>,
    /// Whether kiln would load the item: its directories are this user's and no one
    /// else's to write, and both files carry a MAC under the cache's key; else why not
    /// (`not authenticated: ...`).
    pub authenticated: Result<(), String>,
}

/// Everything a walk of the cache ([`PersistentCache::scan`]) found.
#[derive(Clone, Debug, Default)]
pub struct Scan {
    /// The items, in no particular order.
    pub items: Vec<ItemInfo>,
    /// Entries at names the layout owns but of the wrong type (a directory where `0.src`
    /// belongs, a link where a level directory belongs), each with a description.
    pub damaged: Vec<(PathBuf, String)>,
    /// Entries whose names the layout does not know: never followed, never removed.
    pub foreign: Vec<PathBuf>,
}

/// What an entry of an item directory is, by its name.
enum ItemName {
    Src(u64),
    Bin,
    Lock,
    Tmp,
    Other,
}

fn item_name(name: &str) -> ItemName {
    if name == ".lock" {
        return ItemName::Lock;
    }
    if name.starts_with(".tmp-") {
        return ItemName::Tmp;
    }
    let index = |ext| name.strip_suffix(ext).and_then(|s| s.parse::<u64>().ok());
    match (index(".src"), index(".bin")) {
        (Some(n), _) => ItemName::Src(n),
        (_, Some(_)) => ItemName::Bin,
        _ => ItemName::Other,
    }
}

impl PersistentCache {
    /// Walks the cache: its items, damaged entries and foreign entries. A missing or
    /// unreadable root is an empty cache here ([`check_root`](Self::check_root) tells).
    pub fn scan(&self) -> Scan {
        let mut out = Scan::default();
        let mut dirs = vec![(self.root.clone(), 0, String::new())];
        while let Some((d, depth, id)) = dirs.pop() {
            let Ok(rd) = fs::read_dir(&d) else { continue };
            for e in rd.filter_map(|e| e.ok()) {
                let path = e.path();
                // The entry's own type: a link is a link (never followed).
                let Ok(ft) = e.file_type() else { continue };
                let Some(name) = e.file_name().to_str().map(String::from) else {
                    out.foreign.push(path);
                    continue;
                };
                let mut damaged = |expected: &str| {
                    let what = format!("{} where kiln keeps {expected}", describe(ft));
                    out.damaged.push((path.clone(), what));
                };
                if depth < 4 {
                    if depth == 0 && name == TAG_NAME {
                        if !ft.is_file() {
                            damaged("its tag file");
                        }
                    } else if depth == 0 && name == KEY_NAME {
                        if !ft.is_file() {
                            damaged("its key file");
                        }
                    } else if depth == 0 && name.starts_with(".tmp-") && ft.is_file() {
                        // A key being written.
                    } else if !is_level_name(&name) {
                        out.foreign.push(path);
                    } else if ft.is_dir() {
                        let id = if id.is_empty() { name } else { format!("{id}/{name}") };
                        dirs.push((path, depth + 1, id));
                    } else {
                        damaged("a directory");
                    }
                    continue;
                }
                match item_name(&name) {
                    ItemName::Other => out.foreign.push(path),
                    ItemName::Lock if !ft.is_file() => damaged("a lock file"),
                    _ if !ft.is_file() => damaged("a file"),
                    ItemName::Src(n) => {
                        let Ok(meta) = e.metadata() else { continue };
                        let bin = fs::symlink_metadata(d.join(format!("{n}.bin")))
                            .ok()
                            .filter(|m| m.is_file())
                            .map_or(0, |m| m.len());
                        out.items.push(ItemInfo {
                            id: format!("{id}/{n}"),
                            dir: d.clone(),
                            n,
                            size: meta.len() + bin,
                            last_used: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                        });
                    }
                    ItemName::Bin | ItemName::Lock | ItemName::Tmp => {}
                }
            }
        }
        out
    }

    /// Every item, in no particular order.
    pub fn items(&self) -> Vec<ItemInfo> {
        self.scan().items
    }

    /// Item count and total size.
    pub fn stats(&self) -> DiskStats {
        let items = self.items();
        DiskStats { items: items.len() as u64, bytes: items.iter().map(|i| i.size).sum() }
    }

    /// The key and artifact status of the item named `id` (as in [`ItemInfo::id`]); `None`
    /// when there is no such item.
    pub fn show(&self, id: &str) -> Option<ItemDetails> {
        let (dir, n) = id.rsplit_once('/')?;
        let n: u64 = n.parse().ok()?;
        let levels: Vec<&str> = dir.split('/').collect();
        if levels.len() != 4 || !levels.iter().all(|l| is_level_name(l)) {
            return None;
        }
        let dir = self.root.join(dir);
        let root_trust = fs::metadata(&self.root)
            .map_err(|e| e.to_string())
            .and_then(|m| trust::check_dir(&self.root, &m));
        let dir_trust = match trust::levels(&self.root, &dir, false) {
            Levels::Ok => root_trust,
            Levels::Untrusted(why) => Err(why),
            Levels::Missing | Levels::Misplaced(..) | Levels::Unreadable(..) => return None,
        };
        let mac = match mac::load(&self.root) {
            Ok(Some(k)) => Ok(k),
            Ok(None) => Err(format!(
                "the cache has no key (`{}`), so nothing in it can be authenticated",
                self.root.join(KEY_NAME).display()
            )),
            Err(e) => Err(e),
        };
        let read = |path: &Path| match entry::open(path, OpenOptions::new().read(true)) {
            Ok(Opened::File(mut f, _)) => {
                let mut v = Vec::new();
                f.read_to_end(&mut v).map(|_| Some(v)).map_err(|e| format!("cannot read: {e}"))
            }
            Ok(Opened::Missing) => Ok(None),
            Ok(Opened::NotAFile(ft)) => Err(format!("`{}` is {}", path.display(), describe(ft))),
            Err(e) => Err(format!("cannot read: {e}")),
        };
        let src = read(&dir.join(format!("{n}.src"))).ok()??;
        let decoded = DiskKey::decode_unauthenticated(&src);
        let bin = read(&dir.join(format!("{n}.bin")));
        let artifact = match (&decoded, &bin) {
            (Ok((_, len, tag)), Ok(Some(bin))) => decode_bin(bin, *len, tag, None).map(|p| p.len()),
            (Err(_), _) => Err("unknown (the key file is damaged)".into()),
            (_, Ok(None)) => Err("the artifact file is missing".into()),
            (_, Err(e)) => Err(e.clone()),
        };
        // The first reason kiln would not load it.
        let authenticated = dir_trust.and(mac).map_err(|e| format!("not authenticated: {e}"));
        let authenticated = authenticated.and_then(|mac| {
            let (_, len, tag) = DiskKey::decode(&src, &mac)?;
            match &bin {
                Ok(Some(bin)) => decode_bin(bin, len, &tag, Some(&mac)).map(|_| ()),
                _ => Err("the artifact file cannot be read".into()),
            }
        });
        Some(ItemDetails { key: decoded.map(|(k, _, _)| k), artifact, authenticated })
    }

    /// Removes least-recently-used items until the total size is at most `max_bytes`,
    /// skipping locked directories and removing empty ones. Returns how many were removed.
    /// Only kiln's items go: a root that is not a kiln cache is left alone (with a warning),
    /// and nothing is followed or removed outside the layout's names.
    pub fn evict(&self, max_bytes: u64) -> usize {
        if self.check_writable().is_err() || !self.root_usable(false) {
            return 0;
        }
        let scan = self.scan();
        let mut items = scan.items;
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
            // Nothing is deleted in a directory someone else may control (it could be
            // swapped for a link to files elsewhere).
            if !self.levels_ok(&item.dir) {
                continue;
            }
            let Ok(lock) = self.open_lock(&item.dir) else { continue };
            if lock.try_lock().is_err() {
                continue; // a writer is busy here
            }
            for ext in ["src", "bin"] {
                let path = item.dir.join(format!("{}.{ext}", item.n));
                if entry::kind(&path).ok().flatten().is_some_and(|ft| ft.is_file()) {
                    let _ = fs::remove_file(&path);
                }
            }
            total = total.saturating_sub(item.size);
            removed += 1;
            if Self::indices(&item.dir, ".src").is_ok_and(|v| v.is_empty()) {
                let _ = fs::remove_file(item.dir.join(".lock"));
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
                    let tmp = e.file_name().to_string_lossy().starts_with(".tmp-");
                    if tmp && e.file_type().is_ok_and(|t| t.is_file()) {
                        let _ = fs::remove_file(e.path());
                    }
                }
            }
            // Fails on anything but an empty real directory (a link is not removed).
            if fs::remove_dir(&d).is_err() {
                break;
            }
            if !d.pop() {
                break;
            }
        }
    }

    /// Removes every item (evicting to size 0) and repairs damaged entries where that
    /// loses nothing. Returns how many items were removed. What is left (foreign entries,
    /// damaged ones holding data) is in [`scan`](Self::scan) afterwards.
    pub fn clear(&self) -> usize {
        if self.check_writable().is_err() || !self.root_usable(false) {
            return 0;
        }
        for (path, _) in self.scan().damaged {
            if let Ok(Some(ft)) = entry::kind(&path) {
                if entry::remove_misplaced(&path, ft) == entry::Removal::Removed {
                    if let Some(parent) = path.parent() {
                        self.remove_empty_dirs(parent);
                    }
                }
            }
        }
        self.evict(0)
    }
}
