//! Who may have written under the cache: the root and level directories must belong to
//! this process's effective user and be writable by no one else, or nothing in them is
//! loaded (another user could have planted machine code there) and nothing is stored.
//!
//! kiln creates its directories 0700 and its files 0600 whatever the umask, and narrows
//! directories it finds open to reading by others (0755, as earlier versions made them
//! under the usual umask) to 0700.

use std::fs::{self, DirBuilder, FileType, Metadata, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use super::{entry, PersistentCache};

/// The mode of every directory kiln creates in the cache.
const DIR_MODE: u32 = 0o700;
/// The mode of every file kiln creates in the cache.
const FILE_MODE: u32 = 0o600;

/// What the level directories between a root and an item directory are.
pub(super) enum Levels {
    /// All there: real directories that this user owns and no one else can write.
    Ok,
    /// One is missing (or the item directory is not under the root).
    Missing,
    /// One is not a directory (a link, a file): its path and type.
    Misplaced(PathBuf, FileType),
    /// One may have been written by someone else: why (naming it).
    Untrusted(String),
    /// One cannot be looked at.
    Unreadable(PathBuf, io::Error),
}

/// Looks at each level directory from `root` down to `dir`, never following a link; with
/// `narrow`, trusted ones that others may read are narrowed to 0700.
pub(super) fn levels(root: &Path, dir: &Path, narrow: bool) -> Levels {
    let Ok(rel) = dir.strip_prefix(root) else { return Levels::Missing };
    let mut p = root.to_path_buf();
    for c in rel.components() {
        p.push(c);
        match entry::metadata(&p) {
            Ok(Some(m)) if m.is_dir() => {
                if let Err(why) = check_dir(&p, &m) {
                    return Levels::Untrusted(why);
                }
                if narrow {
                    narrow_dir(&p, &m);
                }
            }
            Ok(Some(m)) => return Levels::Misplaced(p, m.file_type()),
            Ok(None) => return Levels::Missing,
            Err(e) => return Levels::Unreadable(p, e),
        }
    }
    Levels::Ok
}

/// `Err` naming the owner when `path` does not belong to this process's effective user.
#[cfg(unix)]
fn owned_by_me(path: &Path, meta: &Metadata) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    let me = euid();
    if meta.uid() != me {
        return Err(format!(
            "`{}` belongs to uid {}, not to this user (uid {me})",
            path.display(),
            meta.uid()
        ));
    }
    Ok(())
}

/// Why a directory's contents cannot be trusted (`Err`), judged from its metadata (of the
/// entry itself: a link is judged by [`super::entry`] first).
pub(super) fn check_dir(path: &Path, meta: &Metadata) -> Result<(), String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        owned_by_me(path, meta)?;
        let mode = meta.mode() & 0o7777;
        if mode & 0o022 != 0 {
            let who = match mode & 0o022 {
                0o020 => "its group",
                0o002 => "others",
                _ => "its group and others",
            };
            return Err(format!("`{}` is writable by {who} (mode {mode:04o})", path.display()));
        }
    }
    #[cfg(not(unix))]
    let _ = (path, meta);
    Ok(())
}

/// Why the key file cannot be trusted (`Err`): it must belong to this user and be
/// readable and writable by no one else.
pub(super) fn check_private_file(path: &Path, meta: &Metadata) -> Result<(), String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        owned_by_me(path, meta)?;
        let mode = meta.mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(format!(
                "`{}` is open to other users (mode {mode:04o}; kiln makes it 0600)",
                path.display()
            ));
        }
    }
    #[cfg(not(unix))]
    let _ = (path, meta);
    Ok(())
}

/// Narrows a trusted directory that others may read or enter to 0700 (best effort: a
/// read-only file system keeps it as it is, which [`check_dir`] already accepted).
pub(super) fn narrow_dir(path: &Path, meta: &Metadata) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        if meta.mode() & 0o077 != 0 {
            let _ = fs::set_permissions(path, fs::Permissions::from_mode(DIR_MODE));
        }
    }
    #[cfg(not(unix))]
    let _ = (path, meta);
}

/// Creates the directory `path` (with its missing parents when `parents`), 0700.
pub(super) fn create_dir(path: &Path, parents: bool) -> io::Result<()> {
    let mut b = DirBuilder::new();
    b.recursive(parents);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(DIR_MODE);
    }
    b.create(path)
}

/// Makes `opts` create files 0600 (the umask can only take bits away).
pub(super) fn private_file(opts: &mut OpenOptions) -> &mut OpenOptions {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(FILE_MODE);
    }
    opts
}

/// The effective user id of this process.
#[cfg(unix)]
fn euid() -> u32 {
    // SAFETY: geteuid takes no arguments, cannot fail and touches no memory of ours.
    unsafe { libc::geteuid() }
}

impl PersistentCache {
    /// Reports a level directory someone else may have written (once per directory).
    pub(super) fn warn_untrusted(&self, why: String) {
        self.warn_once(
            format!("untrusted {why}"),
            format!("{why}: kiln loads nothing from it and stores nothing in it; rebuilding"),
        );
    }

    /// Whether the level directories from the root down to `dir` all exist, are real
    /// directories (not links) and are trusted ([`levels`]; trusted ones that others may
    /// read are narrowed to 0700). A misplaced one is reported and removed where that
    /// loses nothing; an untrusted one is reported; either way the answer is `false`.
    pub(super) fn levels_ok(&self, dir: &Path) -> bool {
        match levels(&self.root, dir, self.check_writable().is_ok()) {
            Levels::Ok => true,
            Levels::Missing => false,
            Levels::Misplaced(p, ft) => {
                self.report_misplaced(&p, ft, "a directory");
                false
            }
            Levels::Untrusted(why) => {
                self.warn_untrusted(why);
                false
            }
            Levels::Unreadable(p, e) => {
                self.warn_once(
                    format!("read {}", p.display()),
                    format!("cannot read `{}`: {e}", p.display()),
                );
                false
            }
        }
    }
}
