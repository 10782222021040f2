//! Program build options: the one place where option words are recognized.
//!
//! Build options come from the API (`Context::build_program`'s `options`) and from
//! `KILN_PROGRAM_BUILD_OPTIONS`, are part of every program's cache key, and mean the same on
//! every device: a word that is not in [`OPTIONS`] is an error on every device (a typo must
//! not silently build something else, or split the cache).
//!
//! Adding an option is one line in [`OPTIONS`] (its spelling, what it means and what it sets
//! in [`BuildOptions`]), plus the field it sets.

/// What a list of build options asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildOptions {
    /// Run the default `-O` optimization pipeline before lowering (GPU devices; the
    /// interpreter always runs the IR as written).
    pub optimize: bool,
    /// Check every access and loop at run time (`-fsanitize=bounds`, see
    /// [`kiln_passes::sanitize`]).
    pub sanitize_bounds: bool,
}

impl Default for BuildOptions {
    fn default() -> BuildOptions {
        BuildOptions { optimize: true, sanitize_bounds: false }
    }
}

/// One known build option: its spelling, a one-line meaning, and its effect.
pub struct BuildOption {
    /// The word as written (`-O0`).
    pub name: &'static str,
    /// What it does, in one line (for help texts and errors).
    pub meaning: &'static str,
    /// Applies it.
    pub apply: fn(&mut BuildOptions),
}

/// Every build option kiln knows, in the order help texts list them.
pub const OPTIONS: &[BuildOption] = &[
    BuildOption {
        name: "-O0",
        meaning: "skip the optimization pipeline",
        apply: |o| o.optimize = false,
    },
    BuildOption { name: "-O", meaning: "optimize (the default)", apply: |o| o.optimize = true },
    BuildOption { name: "-O1", meaning: "same as -O", apply: |o| o.optimize = true },
    BuildOption { name: "-O2", meaning: "same as -O", apply: |o| o.optimize = true },
    BuildOption { name: "-O3", meaning: "same as -O", apply: |o| o.optimize = true },
    BuildOption {
        name: kiln_passes::sanitize::SANITIZE_BOUNDS,
        meaning: "check every access and loop at run time (docs/sanitize.md)",
        apply: |o| o.sanitize_bounds = true,
    },
];

/// The spellings of [`OPTIONS`], comma-separated.
pub fn known_options() -> String {
    OPTIONS.iter().map(|o| o.name).collect::<Vec<_>>().join(", ")
}

/// `options` without the word `option` (what a later stage is given once an earlier one has
/// applied it, as the sanitizer's rewrite does before a device compiles).
pub fn without(options: &str, option: &str) -> String {
    options.split_whitespace().filter(|o| *o != option).collect::<Vec<_>>().join(" ")
}

impl BuildOptions {
    /// Parses whitespace-separated option words, later words overriding earlier ones. An
    /// unknown word is an error naming it and the known ones.
    pub fn parse(text: &str) -> Result<BuildOptions, String> {
        let mut out = BuildOptions::default();
        for word in text.split_whitespace() {
            match OPTIONS.iter().find(|o| o.name == word) {
                Some(o) => (o.apply)(&mut out),
                None => {
                    return Err(format!(
                        "unknown build option `{word}` (known: {})",
                        known_options()
                    ))
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_known_and_refuses_unknown_options() {
        assert_eq!(BuildOptions::parse("").unwrap(), BuildOptions::default());
        assert!(!BuildOptions::parse(" -O0 ").unwrap().optimize);
        assert!(BuildOptions::parse("-O0 -O2").unwrap().optimize);
        assert!(BuildOptions::parse("-O0 -fsanitize=bounds").unwrap().sanitize_bounds);
        assert!(!BuildOptions::parse("-O0").unwrap().sanitize_bounds);
        assert!(BuildOptions::parse("-fsanitize=boundsx -O").is_err());
        assert_eq!(without(" -O0  -fsanitize=bounds -O3", "-fsanitize=bounds"), "-O0 -O3");
        let e = BuildOptions::parse("-O0 -O7").unwrap_err();
        assert_eq!(
            e,
            "unknown build option `-O7` (known: -O0, -O, -O1, -O2, -O3, -fsanitize=bounds)"
        );
    }
}
