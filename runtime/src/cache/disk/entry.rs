//! File-system primitives of the persistent cache that never follow a symbolic link below
//! the root: opening a file the layout names, telling what an entry really is, and removing
//! an entry without touching what it might point to.
//!
//! The cache creates no links, so a link anywhere below its root was put there by someone
//! else (or by damage); following it could read, stamp or delete files outside the cache.

use std::fs::{self, File, FileType, Metadata, OpenOptions};
use std::io::{self, ErrorKind};
use std::path::Path;

/// What [`open`] found at a path.
#[derive(Debug)]
pub(super) enum Opened {
    /// A regular file, opened, and its length.
    File(File, u64),
    /// Nothing there (or a parent directory is missing).
    Missing,
    /// Something other than a regular file (its type), not opened or closed again.
    NotAFile(FileType),
}

/// Opens `path` as `opts` says, refusing to follow a symbolic link in its last component
/// and never blocking on a FIFO or device: what is not a regular file comes back as
/// [`Opened::NotAFile`], unopened (or closed again at once).
pub(super) fn open(path: &Path, opts: &mut OpenOptions) -> io::Result<Opened> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let file = match opts.open(path) {
        Ok(f) => f,
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            return Ok(Opened::Missing)
        }
        // ELOOP (a link under O_NOFOLLOW), EISDIR (a directory opened for writing), ENXIO
        // (a FIFO without reader or a socket): say what is really there.
        Err(e) => {
            return match fs::symlink_metadata(path) {
                Ok(m) if !m.is_file() => Ok(Opened::NotAFile(m.file_type())),
                _ => Err(e),
            }
        }
    };
    let meta = file.metadata()?;
    if meta.is_file() {
        Ok(Opened::File(file, meta.len()))
    } else {
        Ok(Opened::NotAFile(meta.file_type()))
    }
}

/// Creates `path` for writing, 0600; fails if anything (a link included) is already there.
pub(super) fn create_new(path: &Path) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    super::trust::private_file(opts.write(true).create_new(true));
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.custom_flags(libc::O_NOFOLLOW);
    }
    opts.open(path)
}

/// A file type in words, for messages.
pub(super) fn describe(ft: FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return "a FIFO";
        }
        if ft.is_socket() {
            return "a socket";
        }
        if ft.is_block_device() || ft.is_char_device() {
            return "a device node";
        }
    }
    if ft.is_symlink() {
        "a symbolic link"
    } else if ft.is_dir() {
        "a directory"
    } else if ft.is_file() {
        "a regular file"
    } else {
        "a special file"
    }
}

/// The type of the entry at `path` itself (a link is a link), `None` when there is none.
pub(super) fn kind(path: &Path) -> io::Result<Option<FileType>> {
    Ok(metadata(path)?.map(|m| m.file_type()))
}

/// The metadata of the entry at `path` itself (a link is a link), `None` when there is none.
pub(super) fn metadata(path: &Path) -> io::Result<Option<Metadata>> {
    match fs::symlink_metadata(path) {
        Ok(m) => Ok(Some(m)),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => Ok(None),
        Err(e) => Err(e),
    }
}

/// How [`remove_misplaced`] dealt with an entry.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Removal {
    /// The entry is gone (a link is unlinked, never its target).
    Removed,
    /// Left in place: it holds data kiln did not write (a regular file where a directory
    /// belongs, a directory that is not empty).
    Kept,
}

/// Removes an entry of the wrong type at a name the layout owns, where that loses no data:
/// a symbolic link (the link, not its target), an empty directory, a FIFO, socket or device
/// node. A regular file or a non-empty directory is kept: kiln deletes only what it wrote.
pub(super) fn remove_misplaced(path: &Path, ft: FileType) -> Removal {
    let gone = if ft.is_dir() {
        fs::remove_dir(path) // fails unless empty
    } else if ft.is_file() {
        return Removal::Kept;
    } else {
        fs::remove_file(path) // unlinks links and special files without following them
    };
    match gone {
        Ok(()) => Removal::Removed,
        Err(e) if e.kind() == ErrorKind::NotFound => Removal::Removed,
        Err(_) => Removal::Kept,
    }
}
