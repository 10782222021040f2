//! [`Config`]: every setting kiln reads from `KILN_*` variables, in one type that the
//! environment fills once ([`Config::from_env`]) or code sets field by field, so an
//! embedding application never has to set environment variables.
//!
//! [`crate::env::VARIABLES`] documents each variable (the README and `kiln --help` print
//! the same table); this is the only place kiln's own code reads them.
//!
//! ```
//! use kiln_runtime::{interp_device, Config, Context};
//! let config = Config { in_mem_cache_max: 1 << 20, build_options: "-O0".into(), ..Config::default() };
//! let ctx = Context::with_config(interp_device(), config.context_config());
//! # let _ = ctx;
//! ```

use std::path::PathBuf;

use crate::cache::{parse_size, PersistentCache};
use crate::env::{self, EnvError};

/// kiln's settings. The default is what an empty environment means: no persistent cache, no
/// limits, no extra build options, no tracing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Store built programs in the on-disk cache and load them from it
    /// (`KILN_CACHE_PERSISTENT=1`).
    pub cache_persistent: bool,
    /// The on-disk cache's root (`KILN_CACHE_DIR`, taken as given: a relative path is
    /// relative to the working directory); `None` is [`PersistentCache::default_root`].
    pub cache_dir: Option<PathBuf>,
    /// On-disk cache limit in bytes; least recently used programs are evicted past it
    /// (`KILN_CACHE_MAX_SIZE`; `None` when unset, and both `None` and 0 mean no limit:
    /// `kiln cache evict` tells them apart).
    pub cache_max_size: Option<u64>,
    /// Programs larger than this are not stored on disk (`KILN_CACHE_MAX_ITEM_SIZE`; 0: no
    /// limit).
    pub cache_max_item_size: u64,
    /// In-memory cache limit per cache, in bytes (`KILN_IN_MEM_CACHE_MAX`; 0: unlimited).
    pub in_mem_cache_max: u64,
    /// Build options added to every program build, part of the cache key
    /// (`KILN_PROGRAM_BUILD_OPTIONS`).
    pub build_options: String,
    /// Print the IR after every optimization pass to stderr (`KILN_VERBOSE=debuginfo`);
    /// takes effect through [`Config::install`].
    pub verbose: bool,
    /// The runtime's warning level (`KILN_RT_WARNING_LEVEL`): 1 or more prints warnings
    /// such as a queue's fusion being cancelled early, naming the reason; 0 prints none.
    pub rt_warning_level: u32,
    /// Skip autotuning searches (`KILN_TUNE=0`): a tuner uses a stored winner or its
    /// heuristic and times nothing.
    pub tune_disabled: bool,
}

impl Config {
    /// The settings the environment gives; the first value that is not understood is an
    /// error naming the variable and what it accepts.
    pub fn from_env() -> Result<Config, EnvError> {
        Config::read(&env::lookup, &mut |e| Err(e))
    }

    /// The settings the environment gives, where a value that is not understood is printed
    /// to stderr as a warning and that setting keeps its default.
    pub fn from_env_lenient() -> Config {
        let mut warn = |e: EnvError| {
            eprintln!("kiln: warning: {e}; ignored");
            Ok(())
        };
        Config::read(&env::lookup, &mut warn).unwrap_or_default()
    }

    /// The settings that `lookup` gives for each variable name (`None`: unset), checked as
    /// [`Config::from_env`] checks the environment's: for settings kept elsewhere (a file,
    /// a command line), and for tests.
    ///
    /// ```
    /// use kiln_runtime::Config;
    /// let c = Config::from_lookup(|name| match name {
    ///     "KILN_CACHE_MAX_SIZE" => Some("64M".into()),
    ///     "KILN_VERBOSE" => Some("debuginfo".into()),
    ///     _ => None,
    /// }).unwrap();
    /// assert_eq!((c.cache_max_size, c.verbose), (Some(64 << 20), true));
    /// let e = Config::from_lookup(|n| (n == "KILN_CACHE_PERSISTENT").then(|| "yes".into()));
    /// assert!(e.unwrap_err().to_string().starts_with("KILN_CACHE_PERSISTENT=\"yes\""));
    /// ```
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, EnvError> {
        Config::read(&|name| Ok(lookup(name)), &mut |e| Err(e))
    }

    /// Reads every variable once through `lookup`; `bad` decides what a value that is not
    /// understood does.
    fn read(
        lookup: &dyn Fn(&'static str) -> Result<Option<String>, EnvError>,
        bad: &mut dyn FnMut(EnvError) -> Result<(), EnvError>,
    ) -> Result<Config, EnvError> {
        let mut c = Config::default();
        let mut get = |name: &'static str| -> Result<Option<String>, EnvError> {
            match lookup(name).and_then(|v| env::checked(name, v)) {
                Ok(v) => Ok(v),
                Err(e) => bad(e).map(|()| None),
            }
        };
        c.cache_persistent = get("KILN_CACHE_PERSISTENT")?.is_some_and(|v| v.trim() == "1");
        c.cache_dir = get("KILN_CACHE_DIR")?.filter(|d| !d.is_empty()).map(PathBuf::from);
        let size = |v: Option<String>| v.and_then(|v| parse_size(&v).ok());
        c.cache_max_size = size(get("KILN_CACHE_MAX_SIZE")?);
        let size = |v| size(v).unwrap_or(0);
        c.cache_max_item_size = size(get("KILN_CACHE_MAX_ITEM_SIZE")?);
        c.in_mem_cache_max = size(get("KILN_IN_MEM_CACHE_MAX")?);
        c.build_options = get("KILN_PROGRAM_BUILD_OPTIONS")?.unwrap_or_default();
        c.verbose = get("KILN_VERBOSE")?.is_some_and(|v| v == "debuginfo");
        c.rt_warning_level =
            get("KILN_RT_WARNING_LEVEL")?.and_then(|v| v.trim().parse::<u32>().ok()).unwrap_or(0);
        c.tune_disabled = get("KILN_TUNE")?.is_some_and(|v| v.trim() == "0");
        Ok(c)
    }

    /// The on-disk cache's root: [`Config::cache_dir`], else the default; `Err` says why
    /// there is none (no absolute `XDG_CACHE_HOME` or `HOME`).
    pub fn cache_root(&self) -> Result<PathBuf, String> {
        self.cache_dir.clone().map_or_else(PersistentCache::default_root, Ok)
    }

    /// The on-disk cache at [`Config::cache_root`] with the configured limits, whether or
    /// not [`Config::cache_persistent`] is on (tools that inspect the cache want it either
    /// way); `None` where there is no root.
    pub fn persistent_cache(&self) -> Option<PersistentCache> {
        self.cache_root().ok().map(|root| {
            PersistentCache::new(root)
                .with_max_size(self.cache_max_size.unwrap_or(0))
                .with_max_item_size(self.cache_max_item_size)
        })
    }

    /// How a [`crate::Context`] is set up under these settings. With the persistent cache
    /// on but no directory for it, the context's cache is
    /// [`PersistentCache::unavailable`], whose warning says why.
    pub fn context_config(&self) -> ContextConfig {
        let persistent = match self.cache_root() {
            _ if !self.cache_persistent => None,
            Ok(_) => self.persistent_cache(),
            Err(why) => Some(PersistentCache::unavailable(&why)),
        };
        ContextConfig {
            in_mem_max: self.in_mem_cache_max,
            persistent,
            env_build_options: self.build_options.clone(),
            workers: 0,
            warning_level: self.rt_warning_level,
        }
    }

    /// Applies the process-wide settings (pass tracing) for everything that runs after.
    pub fn install(&self) {
        kiln_passes::manager::set_trace(self.verbose);
    }
}

/// How a [`crate::Context`] is set up; [`crate::Config::context_config`] makes one from kiln's
/// settings.
#[derive(Debug, Default)]
pub struct ContextConfig {
    /// In-memory cache limit in bytes, per map (0: unlimited).
    pub in_mem_max: u64,
    /// The persistent cache, if enabled.
    pub persistent: Option<PersistentCache>,
    /// Build options added to every build (`KILN_PROGRAM_BUILD_OPTIONS`).
    pub env_build_options: String,
    /// Worker threads running commands (0: the machine's parallelism, at least 2).
    pub workers: usize,
    /// The runtime's warning level (`KILN_RT_WARNING_LEVEL`): 1 or more prints warnings,
    /// such as a queue's fusion cancelled early, to stderr.
    pub warning_level: u32,
}
