//! Persistent-cache faults beyond damaged files (see `disk_cache.rs` for those): a
//! read-only root, a disk that fills up mid-write, eviction while another process reads,
//! and a collision chain whose first item is gone. Each ends in a correct result and at
//! most a warning; a `Context` over such a cache still builds and runs.

use std::fs;
use std::path::Path;
use std::process::Command;

use kiln_ir::parse_module;
use kiln_runtime::cache::{DiskFault, DiskKey, PersistentCache};
use kiln_runtime::{interp_device, Context, ContextConfig};

#[path = "common/temp_dir.rs"]
mod temp_dir;
use temp_dir::TempDir;

fn key(i: u32) -> DiskKey {
    DiskKey {
        device: "interp|kiln-interp|faults".into(),
        image: format!("kernel k{i}() {{}}").into_bytes(),
        spec_consts: vec![],
        build_options: String::new(),
    }
}

fn artifact(i: u32) -> Vec<u8> {
    (0..(300 + i * 13)).map(|b| (b as u8).wrapping_mul(7) ^ (i as u8)).collect()
}

/// Every file under `dir`, recursively (relative names).
fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

#[test]
fn read_only_root_serves_hits_and_stores_nothing() {
    let t = TempDir::new("faults-ro");
    let rw = PersistentCache::new(&t.0);
    rw.put(&key(1), &artifact(1));
    let before = files(&t.0);
    let ro = PersistentCache::new(&t.0).with_fault(DiskFault::ReadOnly);
    // What is there is still served ...
    assert_eq!(ro.get(&key(1)), Some(artifact(1)));
    // ... a store is a warning (once), never an error, and writes nothing.
    ro.put(&key(2), &artifact(2));
    ro.put(&key(3), &artifact(3));
    assert!(ro.is_disabled());
    assert_eq!(ro.get(&key(2)), None);
    assert_eq!(ro.warnings().len(), 1, "{:?}", ro.warnings());
    assert!(ro.warnings()[0].contains("read-only file system"), "{:?}", ro.warnings());
    assert_eq!(ro.evict(0), 0);
    assert_eq!(files(&t.0), before);
    assert_eq!(ro.get(&key(1)), Some(artifact(1)));
}

#[test]
fn full_disk_leaves_no_partial_item() {
    let t = TempDir::new("faults-full");
    // Room for the first item (about 440 bytes: key file and artifact) but not the second.
    let c = PersistentCache::new(&t.0).with_fault(DiskFault::FullAfter(600));
    c.put(&key(1), &artifact(1));
    assert_eq!(c.get(&key(1)), Some(artifact(1)));
    c.put(&key(2), &artifact(2));
    assert!(c.is_disabled());
    assert_eq!(c.warnings().len(), 1, "{:?}", c.warnings());
    assert!(c.warnings()[0].contains("no space left"), "{:?}", c.warnings());
    // No temporary or partial file is left, and a healthy process sees one good item
    // and no damage.
    let left = files(&t.0);
    assert!(left.iter().all(|f| !f.contains(".tmp-")), "{left:?}");
    let fresh = PersistentCache::new(&t.0);
    assert_eq!(fresh.get(&key(1)), Some(artifact(1)));
    assert_eq!(fresh.get(&key(2)), None);
    assert_eq!(fresh.stats().items, 1);
    assert!(fresh.warnings().is_empty(), "{:?}", fresh.warnings());
}

/// A build through a `Context` whose persistent cache cannot store still succeeds.
#[test]
fn context_builds_over_a_failing_cache() {
    let t = TempDir::new("faults-ctx");
    let m = parse_module("kernel k(x: ptr<global, u32>) { x[global_id(0)] = 7; }").unwrap();
    for fault in [DiskFault::ReadOnly, DiskFault::FullAfter(10)] {
        let cfg = ContextConfig {
            persistent: Some(PersistentCache::new(&t.0).with_fault(fault)),
            workers: 1,
            ..Default::default()
        };
        let ctx = Context::with_config(interp_device(), cfg);
        let p = ctx.build_program(&m, &[], "").unwrap();
        assert!(!p.from_disk);
        ctx.kernel(&p, "k").unwrap();
        let w = ctx.persistent_cache().unwrap().warnings();
        assert_eq!(w.len(), 1, "{fault:?}: {w:?}");
        assert!(files(&t.0).iter().all(|f| !f.contains(".src")), "{fault:?}");
    }
}

#[test]
fn collision_chain_without_item_zero() {
    let t = TempDir::new("faults-chain");
    // Every key in one directory: items 0, 1, 2.
    let c = PersistentCache::new(&t.0).with_hash_bits(0);
    for i in 0..3 {
        c.put(&key(i), &artifact(i));
    }
    let dir = c.item_dir(&key(0));
    assert_eq!(c.item_dir(&key(2)), dir);
    // Item 0 goes (evicted by another process, say): the others are still found.
    fs::remove_file(dir.join("0.src")).unwrap();
    fs::remove_file(dir.join("0.bin")).unwrap();
    assert_eq!(c.get(&key(0)), None);
    assert_eq!(c.get(&key(1)), Some(artifact(1)));
    assert_eq!(c.get(&key(2)), Some(artifact(2)));
    // Re-storing key 0 appends after the last item, and all three load.
    c.put(&key(0), &artifact(0));
    assert!(dir.join("3.src").is_file());
    for i in 0..3 {
        assert_eq!(c.get(&key(i)), Some(artifact(i)));
    }
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
}

/// Reader process of `eviction_while_another_process_reads`; runs only when
/// `KILN_FAULTS_READER` names the cache directory.
#[test]
fn reader_worker() {
    let Ok(dir) = std::env::var("KILN_FAULTS_READER") else { return };
    let c = PersistentCache::new(Path::new(&dir));
    let (mut hits, mut misses) = (0u64, 0u64);
    for round in 0..2_000_000u32 {
        let i = round % 4;
        match c.get(&key(i)) {
            Some(a) => {
                assert_eq!(a, artifact(i), "loaded a wrong artifact");
                hits += 1;
            }
            None => misses += 1,
        }
        if hits >= 200 && misses >= 200 {
            break;
        }
    }
    println!("reader: {hits} hits, {misses} misses");
    assert!(
        hits > 0 && misses > 0,
        "the reader never saw both states: {hits} hits, {misses} misses"
    );
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
}

#[test]
fn eviction_while_another_process_reads() {
    let t = TempDir::new("faults-evict-read");
    let exe = std::env::current_exe().unwrap();
    let mut reader = Command::new(exe)
        .args(["--exact", "reader_worker", "--test-threads=1", "--nocapture"])
        .env("KILN_FAULTS_READER", &t.0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Store and evict everything, over and over, until the reader is done.
    let c = PersistentCache::new(&t.0);
    let mut cycles = 0;
    while reader.try_wait().unwrap().is_none() {
        for i in 0..4 {
            c.put(&key(i), &artifact(i));
        }
        std::thread::yield_now();
        c.evict(0);
        cycles += 1;
    }
    let out = reader.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "reader failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("reader:") && stdout.contains("1 passed"), "{stdout}");
    assert!(cycles > 0);
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
}

/// A stored binary that checks out but that the device cannot load (an incompatible build
/// wrote it, say) is reported, replaced by a rebuild, and loaded from then on.
#[test]
fn unloadable_binary_is_replaced() {
    let t = TempDir::new("faults-unloadable");
    let m = parse_module("kernel k(x: ptr<global, u32>) { x[global_id(0)] = 7; }").unwrap();
    let ctx = || {
        let cfg = ContextConfig {
            persistent: Some(PersistentCache::new(&t.0)),
            workers: 1,
            ..Default::default()
        };
        Context::with_config(interp_device(), cfg)
    };
    let c = ctx();
    let key = c.program_key(&m, &[], "").disk_key();
    c.persistent_cache().unwrap().put(&key, b"kernel is not what this is");
    let p = c.build_program(&m, &[], "").unwrap();
    assert!(!p.from_disk);
    c.kernel(&p, "k").unwrap();
    let w = c.persistent_cache().unwrap().warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("ignoring unloadable item"), "{w:?}");
    // The rebuilt binary took its place.
    let c2 = ctx();
    let p = c2.build_program(&m, &[], "").unwrap();
    assert!(p.from_disk);
    assert!(c2.persistent_cache().unwrap().warnings().is_empty());
    assert_eq!(c2.persistent_cache().unwrap().stats().items, 1);
}
