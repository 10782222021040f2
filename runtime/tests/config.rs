//! `Config`: every `KILN_*` setting of kiln's own is read (through a lookup, as from the
//! environment), a value that is not understood is an error naming the variable (or, in the
//! lenient reading a bare `Context` uses, the default), and the settings reach a context.

use std::collections::HashMap;

use kiln_runtime::env::{Scope, VARIABLES};
use kiln_runtime::Config;

fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> =
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |name| map.get(name).cloned()
}

#[test]
fn every_setting_is_read() {
    let c = Config::from_lookup(lookup(&[
        ("KILN_CACHE_PERSISTENT", "1"),
        ("KILN_CACHE_DIR", "/tmp/kiln-config-test"),
        ("KILN_CACHE_MAX_SIZE", "2M"),
        ("KILN_CACHE_MAX_ITEM_SIZE", "4K"),
        ("KILN_IN_MEM_CACHE_MAX", "1G"),
        ("KILN_PROGRAM_BUILD_OPTIONS", "-O0 -fsanitize=bounds"),
        ("KILN_VERBOSE", "debuginfo"),
        ("KILN_RT_WARNING_LEVEL", "2"),
        ("KILN_TUNE", "0"),
    ]))
    .unwrap();
    let want = Config {
        cache_persistent: true,
        cache_dir: Some("/tmp/kiln-config-test".into()),
        cache_max_size: Some(2 << 20),
        cache_max_item_size: 4 << 10,
        in_mem_cache_max: 1 << 30,
        build_options: "-O0 -fsanitize=bounds".into(),
        verbose: true,
        rt_warning_level: 2,
        tune_disabled: true,
    };
    assert_eq!(c, want);
    // Nothing set is the default, and the default is what `Config::default` says.
    assert_eq!(Config::from_lookup(|_| None).unwrap(), Config::default());
}

#[test]
fn every_kiln_variable_of_the_table_is_a_setting() {
    // A variable in the table that Config does not read would be documented but ignored:
    // give each a malformed value and require an error naming it (those that take any
    // value, a directory, are read by the first test).
    for v in VARIABLES.iter().filter(|v| v.scope == Scope::Kiln && v.check.is_some()) {
        let e =
            Config::from_lookup(|n| (n == v.name).then(|| "??garbage??".into())).expect_err(v.name);
        assert_eq!(e.name, v.name);
        assert!(e.to_string().contains("is not understood"), "{e}");
    }
}

#[test]
fn malformed_values_are_errors_naming_the_variable() {
    for (var, value, says) in [
        ("KILN_CACHE_PERSISTENT", "yes", "accepted: 1 (on) or 0 (off)"),
        ("KILN_CACHE_MAX_SIZE", "10KB", "ambiguous"),
        ("KILN_IN_MEM_CACHE_MAX", "-1", "expected a size in bytes"),
        ("KILN_PROGRAM_BUILD_OPTIONS", "-O7", "unknown build option `-O7`"),
        ("KILN_VERBOSE", "1", "debuginfo"),
    ] {
        let e = Config::from_lookup(lookup(&[(var, value)])).unwrap_err();
        let text = e.to_string();
        assert!(text.starts_with(&format!("{var}=")) && text.contains(says), "{text}");
    }
}

#[test]
fn settings_reach_the_context() {
    let dir = std::env::temp_dir().join(format!("kiln-config-ctx-{}", std::process::id()));
    let c = Config {
        cache_persistent: true,
        cache_dir: Some(dir.clone()),
        in_mem_cache_max: 12345,
        build_options: "-O0".into(),
        ..Config::default()
    };
    let cc = c.context_config();
    assert_eq!(cc.in_mem_max, 12345);
    assert_eq!(cc.env_build_options, "-O0");
    assert_eq!(cc.persistent.as_ref().map(|p| p.root().to_path_buf()), Some(dir.clone()));
    // Off: the cache is still there for tools that inspect it, but not for contexts.
    let off = Config { cache_persistent: false, ..c };
    assert!(off.context_config().persistent.is_none());
    assert_eq!(off.persistent_cache().map(|p| p.root().to_path_buf()), Some(dir));
}
