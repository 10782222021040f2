//! Where the cache lives by default, whether a root directory is a kiln cache, and marking
//! it as one (`CACHEDIR.TAG`).
//!
//! The cache deletes and writes only under a root it can call its own: pointing
//! `KILN_CACHE_DIR` or `kiln cache --dir` at a directory of other files must not let
//! eviction or `kiln cache clear` loose on it. And it loads only from a root this user owns
//! and no one else can write ([`super::trust`]).

use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use thiserror::Error;

use super::entry::{self, Opened};
use super::mac::KEY_NAME;
use super::{trust, PersistentCache};

/// The name of the tag file at the root.
pub(super) const TAG_NAME: &str = "CACHEDIR.TAG";
/// Its first line, as the Cache Directory Tagging Specification wants it.
const TAG_SIGNATURE: &str = "Signature: 8a477f597d28d172789f06886806bc55";
const TAG: &str = "Signature: 8a477f597d28d172789f06886806bc55\n\
# This file is a cache directory tag created by kiln (its persistent program cache).\n\
# For information about cache directory tags see https://bford.info/cachedir/\n";

/// [`PersistentCache::root_state`] values: not looked at yet, a tagged kiln cache, an
/// untagged one (readable; tagged by the first store), not usable.
pub(super) const UNCHECKED: u8 = 0;
const KILN: u8 = 1;
const UNTAGGED: u8 = 2;
pub(super) const REFUSED: u8 = 3;

/// Why a cache root cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum RootError {
    /// The root does not exist.
    #[error("cache directory `{}` does not exist", .0.display())]
    Missing(PathBuf),
    /// The root is not a directory.
    #[error("cache directory `{}` is not a directory", .0.display())]
    NotADirectory(PathBuf),
    /// The root holds something kiln does not create there, and no kiln tag.
    #[error(
        "`{}` is not a kiln cache: it holds `{entry}`, which kiln does not create (kiln marks \
         its cache directories with {TAG_NAME}); refusing to use it",
        .root.display()
    )]
    Foreign {
        /// The root.
        root: PathBuf,
        /// The first entry (in byte order) that kiln's layout does not name.
        entry: String,
    },
    /// The root cannot be read.
    #[error("cannot read cache directory `{}`: {message}", .root.display())]
    Unreadable {
        /// The root.
        root: PathBuf,
        /// The system's message.
        message: String,
    },
}

/// Whether `name` is a level directory's name: 16 lowercase hex digits.
pub(super) fn is_level_name(name: &str) -> bool {
    name.len() == 16 && name.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Whether `name` is a file kiln keeps at the root: the tag, the MAC key, or a key being
/// written.
pub(super) fn is_root_file(name: &str) -> bool {
    name == TAG_NAME || name == KEY_NAME || name.starts_with(".tmp-")
}

/// Whether `root` holds kiln's tag file (a regular file, not a link).
fn is_tagged(root: &Path) -> bool {
    let Ok(Opened::File(mut f, _)) =
        entry::open(&root.join(TAG_NAME), OpenOptions::new().read(true))
    else {
        return false;
    };
    let mut head = [0u8; 512];
    let n = f.read(&mut head).unwrap_or(0);
    let head = String::from_utf8_lossy(&head[..n]);
    head.starts_with(TAG_SIGNATURE) && head.contains("kiln")
}

/// Whether `root` is a kiln cache: `Ok(true)` tagged, `Ok(false)` untagged but holding
/// nothing kiln would not create (empty, or a cache of an earlier version).
fn classify(root: &Path) -> Result<bool, RootError> {
    match fs::metadata(root) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(RootError::NotADirectory(root.to_path_buf())),
        Err(e) if e.kind() == ErrorKind::NotFound => return Err(RootError::Missing(root.into())),
        Err(e) => return Err(RootError::Unreadable { root: root.into(), message: e.to_string() }),
    }
    if is_tagged(root) {
        return Ok(true);
    }
    let rd = fs::read_dir(root)
        .map_err(|e| RootError::Unreadable { root: root.into(), message: e.to_string() })?;
    // The first foreign name in byte order, so that the message does not depend on the
    // order the file system lists entries in.
    let mut foreign: Option<String> = None;
    for e in rd {
        let e =
            e.map_err(|e| RootError::Unreadable { root: root.into(), message: e.to_string() })?;
        let name = e.file_name().to_string_lossy().into_owned();
        let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
        if is_root_file(&name) || (is_level_name(&name) && is_dir) {
            continue;
        }
        if foreign.as_ref().is_none_or(|f| name < *f) {
            foreign = Some(name);
        }
    }
    match foreign {
        Some(entry) => Err(RootError::Foreign { root: root.into(), entry }),
        None => Ok(false),
    }
}

impl PersistentCache {
    /// The default root ([`default_root_from`](Self::default_root_from) of this process's
    /// `XDG_CACHE_HOME` and `HOME`).
    pub fn default_root() -> Result<PathBuf, String> {
        let (xdg, home) = (std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME"));
        Self::default_root_from(xdg.as_deref(), home.as_deref())
    }

    /// The default root by the XDG Base Directory rule, from the values of `XDG_CACHE_HOME`
    /// and `HOME`: `$XDG_CACHE_HOME/kiln`, else `$HOME/.cache/kiln`, where only an absolute
    /// path counts (a relative or empty value is ignored, as the rule says, so the cache never
    /// lands in whatever the working directory is). `Err` says why there is no location.
    pub fn default_root_from(
        xdg_cache_home: Option<&OsStr>,
        home: Option<&OsStr>,
    ) -> Result<PathBuf, String> {
        fn absolute(v: Option<&OsStr>) -> Option<&Path> {
            v.map(Path::new).filter(|p| p.is_absolute())
        }
        if let Some(x) = absolute(xdg_cache_home) {
            return Ok(x.join("kiln"));
        }
        if let Some(h) = absolute(home) {
            return Ok(h.join(".cache").join("kiln"));
        }
        let say = |name: &str, v: Option<&OsStr>| match v {
            None => format!("{name} is not set"),
            Some(v) if v.is_empty() => format!("{name} is empty"),
            Some(v) => format!("{name}={:?} is not an absolute path", Path::new(v)),
        };
        Err(format!(
            "no directory for the persistent cache: {} and {} (set KILN_CACHE_DIR, or one of \
         them to an absolute path)",
            say("XDG_CACHE_HOME", xdg_cache_home),
            say("HOME", home)
        ))
    }

    /// Checks that the root exists and is a kiln cache (see the module docs): what
    /// `kiln cache` asks before looking inside or deleting anything.
    pub fn check_root(&self) -> Result<(), RootError> {
        classify(&self.root).map(|_| ())
    }

    /// Whether this process may read (and, with `create`, write) under the root: checked
    /// once, then remembered. With `create`, a missing root is created and an untagged one
    /// tagged; a root that is not a kiln cache turns the cache off with a warning.
    pub(super) fn root_usable(&self, create: bool) -> bool {
        match self.root_state.load(Ordering::Relaxed) {
            KILN => return true,
            UNTAGGED if !create => return true,
            REFUSED => return false,
            _ => {}
        }
        let classified = classify(&self.root);
        if classified.is_ok() {
            // Taken as given: a root that is a link is judged by what it points to.
            if let Ok(m) = fs::metadata(&self.root) {
                if let Err(why) = trust::check_dir(&self.root, &m) {
                    self.refuse(format!(
                        "{why}: kiln loads nothing from it and stores nothing in it"
                    ));
                    return false;
                }
                if self.check_writable().is_ok() {
                    trust::narrow_dir(&self.root, &m);
                }
            }
        }
        let state = match classified {
            Ok(true) => KILN,
            Ok(false) if !create => UNTAGGED,
            Ok(false) => match self.write_tag() {
                Ok(()) => KILN,
                Err(e) => {
                    self.disable(format!("cannot write to `{}` ({e})", self.root.display()));
                    return false;
                }
            },
            // Nothing to read yet; a store creates it.
            Err(RootError::Missing(_)) if !create => return false,
            Err(RootError::Missing(_)) => {
                match self.check_writable().and_then(|()| trust::create_dir(&self.root, true)) {
                    Ok(()) => return self.root_usable(true),
                    Err(e) => {
                        self.disable(format!("cannot write to `{}` ({e})", self.root.display()));
                        return false;
                    }
                }
            }
            Err(RootError::NotADirectory(_)) if !create => return false,
            Err(e) => {
                self.disable(e.to_string());
                REFUSED
            }
        };
        self.root_state.store(state, Ordering::Relaxed);
        state != REFUSED
    }

    /// Makes the next [`root_usable`](Self::root_usable) look at the root (and its key)
    /// again.
    pub(super) fn forget_root(&self) {
        let _ =
            self.root_state.compare_exchange(KILN, UNCHECKED, Ordering::Relaxed, Ordering::Relaxed);
        *self.mac_key.lock() = None;
    }

    /// Writes the tag file (another process may have just done so: that is fine).
    fn write_tag(&self) -> std::io::Result<()> {
        self.check_writable()?;
        match entry::create_new(&self.root.join(TAG_NAME)) {
            Ok(mut f) => f.write_all(TAG.as_bytes()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::PersistentCache;
    use std::ffi::OsStr;
    use std::path::PathBuf;

    /// Only absolute values count; the first absolute one wins.
    #[test]
    fn default_root_follows_the_xdg_rule() {
        let root = |x: Option<&str>, h: Option<&str>| {
            PersistentCache::default_root_from(x.map(OsStr::new), h.map(OsStr::new))
        };
        assert_eq!(root(Some("/x"), Some("/h")), Ok(PathBuf::from("/x/kiln")));
        assert_eq!(root(Some("rel"), Some("/h")), Ok(PathBuf::from("/h/.cache/kiln")));
        assert_eq!(root(Some(""), Some("/h")), Ok(PathBuf::from("/h/.cache/kiln")));
        assert_eq!(root(None, Some("/h")), Ok(PathBuf::from("/h/.cache/kiln")));
        for (x, h) in
            [(None, None), (Some(""), Some("")), (Some("a/b"), Some("h")), (None, Some(""))]
        {
            let e = root(x, h).unwrap_err();
            assert!(e.starts_with("no directory for the persistent cache: "), "{e}");
        }
        assert!(root(Some("a/b"), None).unwrap_err().contains("XDG_CACHE_HOME=\"a/b\" is not an"));
    }
}
