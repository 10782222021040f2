//! A fresh directory for one test, removed on drop (shared by the persistent-cache tests).

use std::fs;
use std::path::PathBuf;

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// `kiln-<name>-<pid>`, emptied first.
    pub fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("kiln-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        fs::create_dir_all(&p).expect("creates a temporary directory");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
