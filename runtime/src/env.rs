//! The `KILN_*` environment variables: one table of what each means and accepts, and the
//! parsers that read them. A value that is not understood is an error naming the variable
//! and what it accepts, the same for every device; nothing falls back silently.
//!
//! The table ([`VARIABLES`]) is what `kiln --help` prints and what the README's table must
//! list (a test checks both). [`crate::Config`] reads kiln's own variables, once.

use kiln_backends::options::BuildOptions;

/// A value of a `KILN_*` variable that is not understood.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvError {
    /// The variable.
    pub name: &'static str,
    /// Its value.
    pub value: String,
    /// What it accepts, or why the value is wrong.
    pub reason: String,
}

impl std::fmt::Display for EnvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={:?} is not understood: {}", self.name, self.value, self.reason)
    }
}

impl std::error::Error for EnvError {}

/// Who reads a variable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// kiln itself (the library and the CLI).
    Kiln,
    /// The test suite and `cargo xtask` only.
    Tests,
}

/// A check of one variable's value: `Err` names the variable, the value and what it accepts.
pub type Check = fn(&'static str, &str) -> Result<(), EnvError>;

/// One environment variable kiln or its tests read.
pub struct Variable {
    /// `KILN_...`.
    pub name: &'static str,
    /// Who reads it.
    pub scope: Scope,
    /// The values it accepts.
    pub accepts: &'static str,
    /// What it does, in one line.
    pub meaning: &'static str,
    /// Checks a value; `None` where any value is accepted (paths, test switches).
    pub check: Option<Check>,
}

fn check_flag(name: &'static str, v: &str) -> Result<(), EnvError> {
    parse_flag(name, v).map(|_| ())
}

fn check_size(name: &'static str, v: &str) -> Result<(), EnvError> {
    if v.trim().is_empty() {
        return Ok(());
    }
    crate::cache::parse_size(v).map(|_| ()).map_err(|reason| EnvError {
        name,
        value: v.into(),
        reason,
    })
}

fn check_build_options(name: &'static str, v: &str) -> Result<(), EnvError> {
    BuildOptions::parse(v).map(|_| ()).map_err(|reason| EnvError { name, value: v.into(), reason })
}

fn check_verbose(name: &'static str, v: &str) -> Result<(), EnvError> {
    match v {
        "" | "debuginfo" => Ok(()),
        _ => Err(EnvError { name, value: v.into(), reason: "accepted: debuginfo".into() }),
    }
}

fn check_count(name: &'static str, v: &str) -> Result<(), EnvError> {
    parse_u64(name, v).map(|_| ())
}

fn check_level(name: &'static str, v: &str) -> Result<(), EnvError> {
    match v.trim().parse::<u32>() {
        Ok(_) => Ok(()),
        Err(_) if v.trim().is_empty() => Ok(()),
        Err(_) => Err(EnvError { name, value: v.into(), reason: "accepted: 0, 1, 2, ...".into() }),
    }
}

/// Every `KILN_*` variable, kiln's own first.
pub const VARIABLES: &[Variable] = &[
    Variable {
        name: "KILN_CACHE_PERSISTENT",
        scope: Scope::Kiln,
        accepts: "1 or 0",
        meaning: "1 stores built programs in the on-disk cache and loads them from it",
        check: Some(check_flag),
    },
    Variable {
        name: "KILN_CACHE_DIR",
        scope: Scope::Kiln,
        accepts: "a directory",
        meaning: "the on-disk cache's root, taken as given (a relative one from the working \
                  directory); default $XDG_CACHE_HOME/kiln, else $HOME/.cache/kiln (absolute \
                  values only)",
        check: None,
    },
    Variable {
        name: "KILN_CACHE_MAX_SIZE",
        scope: Scope::Kiln,
        accepts: "bytes, or K/M/G/T (powers of 1024): 64M",
        meaning: "on-disk cache limit; least recently used programs are evicted past it",
        check: Some(check_size),
    },
    Variable {
        name: "KILN_CACHE_MAX_ITEM_SIZE",
        scope: Scope::Kiln,
        accepts: "bytes, or K/M/G/T (powers of 1024): 64M",
        meaning: "programs larger than this are not stored on disk (0: no limit)",
        check: Some(check_size),
    },
    Variable {
        name: "KILN_IN_MEM_CACHE_MAX",
        scope: Scope::Kiln,
        accepts: "bytes, or K/M/G/T (powers of 1024): 64M",
        meaning: "in-memory cache limit per cache (0: unlimited)",
        check: Some(check_size),
    },
    Variable {
        name: "KILN_PROGRAM_BUILD_OPTIONS",
        scope: Scope::Kiln,
        accepts: "-O0, -O, -O1, -O2, -O3, -fsanitize=bounds",
        meaning: "build options added to every program build (part of the cache key)",
        check: Some(check_build_options),
    },
    Variable {
        name: "KILN_VERBOSE",
        scope: Scope::Kiln,
        accepts: "debuginfo",
        meaning: "print the IR after every optimization pass to stderr",
        check: Some(check_verbose),
    },
    Variable {
        name: "KILN_RT_WARNING_LEVEL",
        scope: Scope::Kiln,
        accepts: "0, 1, 2, ... (0: silent)",
        meaning: "1 or more prints the runtime's warnings to stderr (a queue's fusion cancelled or refused, and why)",
        check: Some(check_level),
    },
    Variable {
        name: "KILN_TUNE",
        scope: Scope::Kiln,
        accepts: "1 or 0",
        meaning: "0 disables autotuning searches (a stored winner or the heuristic is used)",
        check: Some(check_flag),
    },
    Variable {
        name: "KILN_REQUIRE_TOOLS",
        scope: Scope::Tests,
        accepts: "any value",
        meaning: "a missing external tool or device fails a test instead of skipping it",
        check: None,
    },
    Variable {
        name: "KILN_SPIRV_VAL",
        scope: Scope::Tests,
        accepts: "a path",
        meaning: "spirv-val, to validate emitted SPIR-V",
        check: None,
    },
    Variable {
        name: "KILN_PTXAS",
        scope: Scope::Tests,
        accepts: "a path",
        meaning: "ptxas, to assemble emitted PTX",
        check: None,
    },
    Variable {
        name: "KILN_LLVM_MC",
        scope: Scope::Tests,
        accepts: "a path",
        meaning: "llvm-mc, to assemble emitted AMDGPU code",
        check: None,
    },
    Variable {
        name: "KILN_GDB",
        scope: Scope::Tests,
        accepts: "a path",
        meaning: "gdb, for the dump() debugger test",
        check: None,
    },
    Variable {
        name: "KILN_REQUIRE_CUDA",
        scope: Scope::Tests,
        accepts: "any value",
        meaning: "CUDA device tests fail instead of skipping when no GPU is found",
        check: None,
    },
    Variable {
        name: "KILN_REQUIRE_COOP_MATRIX",
        scope: Scope::Tests,
        accepts: "any value",
        meaning: "the Vulkan tensor-core GEMM test fails instead of skipping when the device \
                  offers no cooperative matrices",
        check: None,
    },
    Variable {
        name: "KILN_VK_TC_CONFIGS",
        scope: Scope::Tests,
        accepts: "comma-separated BMxBN:WMxWN:BK:STAGES",
        meaning: "benchmarks: the blockings benches/gpu/vk_tc.sh times on Vulkan (default \
                  128x128:2x4:32:2)",
        check: None,
    },
    Variable {
        name: "KILN_VK_TC_SIZES",
        scope: Scope::Tests,
        accepts: "comma-separated sizes",
        meaning: "benchmarks: the N of the N^3 GEMMs benches/gpu/vk_tc.sh times on Vulkan \
                  (default 4096)",
        check: None,
    },
    Variable {
        name: "KILN_CUDA_CASES",
        scope: Scope::Tests,
        accepts: "a count",
        meaning: "random cases per CUDA differential test",
        check: Some(check_count),
    },
    Variable {
        name: "KILN_PTX_CASES",
        scope: Scope::Tests,
        accepts: "a count",
        meaning: "random cases per ptxas test",
        check: Some(check_count),
    },
    Variable {
        name: "KILN_PASS_CASES",
        scope: Scope::Tests,
        accepts: "a count",
        meaning: "random cases per pass differential test",
        check: Some(check_count),
    },
    Variable {
        name: "KILN_BENCH_DEVICE",
        scope: Scope::Tests,
        accepts: "a device name",
        meaning: "the device the fusion-queue benchmark runs on (default cpu; benches/gpu runs it with cuda)",
        check: None,
    },
    Variable {
        name: "KILN_BLESS",
        scope: Scope::Tests,
        accepts: "1",
        meaning: "rewrite expected outputs of file tests instead of comparing",
        check: None,
    },
    Variable {
        name: "KILN_EXAMPLES_DIR",
        scope: Scope::Tests,
        accepts: "a directory",
        meaning: "where device tests find examples/ when run on another machine",
        check: None,
    },
    Variable {
        name: "KILN_MP_WORKER",
        scope: Scope::Tests,
        accepts: "a directory",
        meaning: "internal: makes a disk-cache test process a worker of the multi-process test",
        check: None,
    },
    Variable {
        name: "KILN_MP_SEED",
        scope: Scope::Tests,
        accepts: "a count",
        meaning: "internal: the multi-process test worker's seed",
        check: None,
    },
    Variable {
        name: "KILN_FAULTS_READER",
        scope: Scope::Tests,
        accepts: "a directory",
        meaning: "internal: makes a disk-fault test process the reader of a cache directory",
        check: None,
    },
];

/// The table entry of `name`.
fn variable(name: &str) -> Option<&'static Variable> {
    VARIABLES.iter().find(|v| v.name == name)
}

/// The environment's value of `name` (`None` when unset); a value that is not UTF-8 is an
/// error. [`crate::Config`] is the one reader of kiln's own variables.
pub(crate) fn lookup(name: &'static str) -> Result<Option<String>, EnvError> {
    match std::env::var(name) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(not_unicode(name, v)),
    }
}

/// `value` of `name`, checked against the table's rule for it.
pub(crate) fn checked(
    name: &'static str,
    value: Option<String>,
) -> Result<Option<String>, EnvError> {
    if let (Some(v), Some(check)) = (&value, variable(name).and_then(|var| var.check)) {
        check(name, v)?;
    }
    Ok(value)
}

fn parse_flag(name: &'static str, v: &str) -> Result<bool, EnvError> {
    match v.trim() {
        "" | "0" => Ok(false),
        "1" => Ok(true),
        _ => Err(EnvError { name, value: v.into(), reason: "accepted: 1 (on) or 0 (off)".into() }),
    }
}

fn parse_u64(name: &'static str, v: &str) -> Result<u64, EnvError> {
    v.trim().parse().map_err(|_| EnvError {
        name,
        value: v.into(),
        reason: "accepted: a whole number of bytes (e.g. 1048576)".into(),
    })
}

fn not_unicode(name: &'static str, v: std::ffi::OsString) -> EnvError {
    EnvError { name, value: v.to_string_lossy().into_owned(), reason: "not valid UTF-8".into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_checked_with_the_variable_named() {
        assert_eq!(parse_flag("KILN_CACHE_PERSISTENT", "1"), Ok(true));
        assert_eq!(parse_flag("KILN_CACHE_PERSISTENT", " 0 "), Ok(false));
        let e = parse_flag("KILN_CACHE_PERSISTENT", "yes").unwrap_err();
        assert_eq!(
            e.to_string(),
            "KILN_CACHE_PERSISTENT=\"yes\" is not understood: accepted: 1 (on) or 0 (off)"
        );
        let e = check_build_options("KILN_PROGRAM_BUILD_OPTIONS", "-O7").unwrap_err();
        assert!(e.to_string().contains("unknown build option `-O7`"), "{e}");
        assert!(check_verbose("KILN_VERBOSE", "1").is_err());
        assert!(check_size("KILN_IN_MEM_CACHE_MAX", "1M").is_ok());
        assert!(check_size("KILN_CACHE_MAX_SIZE", "10KB").is_err());
        assert!(check_size("KILN_CACHE_MAX_SIZE", "-1").is_err());
        assert_eq!(parse_u64("KILN_IN_MEM_CACHE_MAX", "4096"), Ok(4096));
    }

    #[test]
    fn build_options_row_lists_the_known_options() {
        let row = variable("KILN_PROGRAM_BUILD_OPTIONS").unwrap();
        assert_eq!(row.accepts, kiln_backends::options::known_options());
    }

    #[test]
    fn table_names_are_unique_and_prefixed() {
        for (i, v) in VARIABLES.iter().enumerate() {
            assert!(v.name.starts_with("KILN_"), "{}", v.name);
            assert!(VARIABLES[..i].iter().all(|w| w.name != v.name), "{} twice", v.name);
        }
    }
}
