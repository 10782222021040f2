//! The key that proves an item was written by this user's kiln: 32 random bytes in
//! `<root>/mac.key` (0600, created on first use), and the keyed MAC (BLAKE3 in keyed mode)
//! that every item carries. A checksum anyone can recompute proves nothing about who wrote
//! an item; a MAC under a key only this user can read does.

use std::fs::{self, File, OpenOptions};
use std::io::{self, ErrorKind, Read, Write};
use std::path::Path;
use std::sync::atomic::Ordering;

use super::entry::{self, describe, Opened};
use super::{trust, PersistentCache};

/// The key file's name at the root.
pub(super) const KEY_NAME: &str = "mac.key";

/// The length of a MAC in the formats.
pub(super) const MAC_LEN: usize = 32;

/// What a MAC is computed over: the two kinds of file never share a tag.
#[derive(Clone, Copy)]
pub(super) enum Domain {
    /// A `<n>.src` key file's body.
    Src,
    /// A `<n>.bin` file's payload.
    Bin,
}

/// A cache root's MAC key.
#[derive(Clone)]
pub(super) struct MacKey([u8; 32]);

impl std::fmt::Debug for MacKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MacKey(..)")
    }
}

impl MacKey {
    /// A key with the given bytes (for the format's unit tests).
    #[cfg(test)]
    pub(super) fn from_bytes(bytes: [u8; 32]) -> MacKey {
        MacKey(bytes)
    }

    /// The MAC of `data` in `domain`.
    pub(super) fn tag(&self, domain: Domain, data: &[u8]) -> [u8; MAC_LEN] {
        let mut h = blake3::Hasher::new_keyed(&self.0);
        h.update(match domain {
            Domain::Src => b"kiln cache key file\0",
            Domain::Bin => b"kiln cache artifact\0",
        });
        h.update(data);
        *h.finalize().as_bytes()
    }

    /// Whether `tag` is the MAC of `data` in `domain` (compared in constant time).
    pub(super) fn verify(&self, domain: Domain, data: &[u8], tag: &[u8]) -> bool {
        let Ok(tag) = <[u8; MAC_LEN]>::try_from(tag) else { return false };
        blake3::Hash::from(self.tag(domain, data)) == blake3::Hash::from(tag)
    }
}

/// The key of the cache at `root`: `Ok(None)` when there is none yet, `Err` (naming the
/// file and what is wrong) when the file there cannot be trusted or read.
pub(super) fn load(root: &Path) -> Result<Option<MacKey>, String> {
    let path = root.join(KEY_NAME);
    read_key(&path).map_err(|e| {
        format!("{e}; remove it to let kiln make a new key (every item is then rebuilt)")
    })
}

fn read_key(path: &Path) -> Result<Option<MacKey>, String> {
    let mut f = match entry::open(path, OpenOptions::new().read(true)) {
        Ok(Opened::File(f, _)) => f,
        Ok(Opened::Missing) => return Ok(None),
        Ok(Opened::NotAFile(ft)) => {
            return Err(format!("`{}` is {}, not kiln's key file", path.display(), describe(ft)))
        }
        Err(e) => return Err(format!("cannot read `{}`: {e}", path.display())),
    };
    let meta = f.metadata().map_err(|e| format!("cannot read `{}`: {e}", path.display()))?;
    trust::check_private_file(path, &meta)?;
    let mut key = [0u8; 32];
    let mut rest = Vec::new();
    f.read_exact(&mut key)
        .and_then(|()| f.read_to_end(&mut rest))
        .map_err(|e| format!("`{}` is not a 32-byte key ({e})", path.display()))?;
    if !rest.is_empty() {
        return Err(format!("`{}` is not a 32-byte key (it is longer)", path.display()));
    }
    Ok(Some(MacKey(key)))
}

/// The key of the cache at `root`, created from the operating system's random source when
/// there is none. Creation is atomic: the key is written to a temporary file (created
/// exclusively, 0600) and hard-linked into place, which fails if another process got there
/// first, whose key is then used.
pub(super) fn load_or_create(root: &Path, tmp_name: &str) -> Result<MacKey, String> {
    if let Some(k) = load(root)? {
        return Ok(k);
    }
    let mut key = [0u8; 32];
    File::open("/dev/urandom")
        .and_then(|mut r| r.read_exact(&mut key))
        .map_err(|e| format!("cannot read random bytes for the cache key: {e}"))?;
    let path = root.join(KEY_NAME);
    let tmp = root.join(tmp_name);
    let write = || -> io::Result<()> {
        let mut f = entry::create_new(&tmp)?;
        f.write_all(&key)?;
        f.sync_all()
    };
    let linked = write().and_then(|()| fs::hard_link(&tmp, &path));
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(MacKey(key)),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            load(root)?.ok_or_else(|| format!("`{}` vanished while it was read", path.display()))
        }
        Err(e) => Err(format!("cannot create the cache key `{}`: {e}", path.display())),
    }
}

impl PersistentCache {
    /// The root's MAC key, read on first use, or made when there is none yet and the root
    /// can be written. A key that cannot be read or trusted turns the cache off.
    pub(super) fn mac_key(&self) -> Option<MacKey> {
        let mut slot = self.mac_key.lock();
        if let Some(k) = &*slot {
            return Some(k.clone());
        }
        let found = match self.check_writable() {
            Ok(()) => {
                let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed);
                load_or_create(&self.root, &format!(".tmp-{}-{n}-key", std::process::id()))
                    .map(Some)
            }
            Err(_) => load(&self.root),
        };
        match found {
            Ok(k) => {
                *slot = k.clone();
                k
            }
            Err(why) => {
                drop(slot);
                self.refuse(why);
                None
            }
        }
    }
}
