//! `kiln cache`: look inside (and trim) the persistent program cache.

use clap::{Args, Subcommand};
use kiln::runtime::cache::{parse_size, PersistentCache, Scan};
use kiln::runtime::Config;

use super::Error;

#[derive(Args, Debug)]
pub struct CacheArgs {
    /// The cache root (default: `KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln` or
    /// `$HOME/.cache/kiln`, where only an absolute XDG_CACHE_HOME or HOME counts).
    #[arg(long, value_name = "DIR", global = true)]
    dir: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: CacheCommand,
}

#[derive(Subcommand, Debug)]
enum CacheCommand {
    /// List the items: KEY, size in bytes, seconds since last use.
    Ls,
    /// Show one item's full key and whether it is authenticated (kiln would load it).
    Show {
        /// An item key as `kiln cache ls` prints it.
        key: String,
    },
    /// Print the number of items and their total size.
    Stats,
    /// Remove every item (only what kiln's layout names; nothing else is touched).
    Clear,
    /// Remove least-recently-used items until the cache is at most SIZE bytes.
    Evict {
        /// The size to shrink to: bytes, or with a suffix K, M, G, T (powers of 1024),
        /// such as 64M (default: `KILN_CACHE_MAX_SIZE`).
        #[arg(long, value_name = "SIZE", value_parser = parse_size)]
        max_size: Option<u64>,
    },
}

/// The cache the command looks at: `--dir`, else the environment's root. The size
/// settings are checked either way, so a bad one is an error here as in `kiln run`; a
/// root that is missing or not a kiln cache is an error naming it.
fn open(a: &CacheArgs) -> Result<PersistentCache, Error> {
    let config = config()?;
    let cache = match (&a.dir, config.persistent_cache()) {
        (Some(d), _) => PersistentCache::new(d),
        (None, Some(c)) => c,
        (None, None) => {
            let why = config.cache_root().err().unwrap_or_default();
            return Err(Error::Message(format!("{why}, or pass --dir")));
        }
    };
    cache.check_root().map_err(|e| Error::Message(e.to_string()))?;
    Ok(cache)
}

/// kiln's settings, as the CLI read them at start.
fn config() -> Result<Config, Error> {
    Ok(super::config().clone())
}

/// Warns about what a walk found that is not an item: damaged entries (skipped) and
/// entries kiln did not create (left alone). `verb` says what happened to them.
fn report(scan: &Scan, verb: &str) {
    for (path, what) in &scan.damaged {
        eprintln!("kiln: warning: damaged item: `{}` is {what}; {verb}", path.display());
    }
    for path in &scan.foreign {
        eprintln!("kiln: warning: `{}` was not created by kiln; {verb}", path.display());
    }
}

fn preview(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= 12 {
        text.into_owned()
    } else {
        format!("{}\n... ({} more lines)", lines[..12].join("\n"), lines.len() - 12)
    }
}

pub fn main(a: &CacheArgs) -> Result<(), Error> {
    let cache = open(a)?;
    match &a.command {
        CacheCommand::Ls => {
            let mut scan = cache.scan();
            let mut items = std::mem::take(&mut scan.items);
            items.sort_by(|x, y| x.id.cmp(&y.id));
            let now = std::time::SystemTime::now();
            for i in items {
                let age = now.duration_since(i.last_used).map_or(0, |d| d.as_secs());
                outln!("{}  {} bytes  {}s ago", i.id, i.size, age);
            }
            report(&scan, "not listed");
        }
        CacheCommand::Show { key } => {
            let d = cache.show(key).ok_or_else(|| {
                Error::Message(format!(
                    "no cache item `{key}` in `{}` (see `kiln cache ls`)",
                    cache.root().display()
                ))
            })?;
            outln!("item: {key}");
            match d.key {
                Ok(k) => {
                    outln!("device: {}", k.device);
                    outln!("build options: {:?}", k.build_options);
                    outln!("spec constants: {} bytes", k.spec_consts.len());
                    outln!("image: {} bytes\n{}", k.image.len(), preview(&k.image));
                }
                Err(e) => outln!("key: damaged ({e})"),
            }
            match (d.artifact, d.authenticated) {
                (Ok(n), Ok(())) => outln!("artifact: {n} bytes, authenticated"),
                (Ok(n), Err(why)) => outln!("artifact: {n} bytes, {why}; kiln will not load it"),
                (Err(e), _) => outln!("artifact: damaged ({e})"),
            }
        }
        CacheCommand::Stats => {
            let scan = cache.scan();
            outln!("root: {}", cache.root().display());
            outln!("items: {}", scan.items.len());
            outln!("bytes: {}", scan.items.iter().map(|i| i.size).sum::<u64>());
            report(&scan, "not counted");
        }
        CacheCommand::Clear => {
            let n = cache.clear();
            outln!("removed {n} items");
            report(&cache.scan(), "left in place");
        }
        CacheCommand::Evict { max_size } => {
            let max = match max_size {
                Some(m) => *m,
                None => match config()?.cache_max_size {
                    // 0 is "no limit" for the setting, not "evict everything".
                    Some(0) => {
                        outln!("removed 0 items (KILN_CACHE_MAX_SIZE=0 means no limit)");
                        return Ok(());
                    }
                    Some(m) => m,
                    None => {
                        return Err(Error::Message(
                            "give --max-size or set KILN_CACHE_MAX_SIZE".into(),
                        ))
                    }
                },
            };
            let n = cache.evict(max);
            outln!("removed {n} items");
        }
    }
    for w in cache.warnings() {
        eprintln!("kiln: warning: {w}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use kiln::runtime::cache::DiskKey;

    #[derive(Parser, Debug)]
    struct T {
        #[command(flatten)]
        a: CacheArgs,
    }

    fn run(dir: &std::path::Path, args: &[&str]) -> Result<(), Error> {
        let mut v = vec!["kiln-cache", "--dir", dir.to_str().unwrap()];
        v.extend_from_slice(args);
        main(&T::try_parse_from(v).unwrap().a)
    }

    #[test]
    fn subcommands() {
        let dir = std::env::temp_dir().join(format!("kiln-cli-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let c = PersistentCache::new(&dir);
        for i in 0..3u8 {
            let key = DiskKey {
                device: "interp".into(),
                image: vec![b'k', i],
                spec_consts: vec![],
                build_options: String::new(),
            };
            c.put(&key, &[i; 40]);
        }
        let id = c.items()[0].id.clone();
        for args in [&["ls"][..], &["stats"], &["show", &id]] {
            assert!(run(&dir, args).is_ok(), "{args:?}");
        }
        assert!(matches!(run(&dir, &["show", "a/b/c/d/9"]), Err(Error::Message(_))));
        let one = c.items()[0].size;
        run(&dir, &["evict", "--max-size", &one.to_string()]).unwrap();
        assert_eq!(c.stats().items, 1);
        run(&dir, &["clear"]).unwrap();
        assert_eq!(c.stats().items, 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
