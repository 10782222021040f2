//! The Vulkan pipeline cache is stored next to its program in the persistent cache
//! (issue 13), so a warm process seeds the driver with it; data whose header names another
//! device is discarded with a warning, never handed to the driver.
//!
//! Without a Vulkan device the tests skip with a message, unless `KILN_REQUIRE_TOOLS` is
//! set (as `cargo xtask test` does), when they fail.

use std::sync::Arc;

use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{parse_module, Module};
use kiln_runtime::cache::PersistentCache;
use kiln_runtime::context::driver_cache_key;
use kiln_runtime::device::vulkan::VulkanDevice;
use kiln_runtime::{Context, ContextConfig};

fn device() -> Option<Arc<VulkanDevice>> {
    kiln_ir::testing::require("KILN_REQUIRE_TOOLS", VulkanDevice::open()).map(Arc::new)
}

fn module() -> Module {
    parse_module(
        "kernel twice(x: ptr<global, u32>) { let i: u32 = global_id(0); x[i] = x[i] * 2 + i; }",
    )
    .unwrap()
}

/// Builds (or loads) the program in a fresh context over `dir`, runs it, checks the
/// results; returns whether it came from disk and the cache's warnings. The context is
/// dropped, which stores the pipeline cache.
fn round(dev: &Arc<VulkanDevice>, dir: &std::path::Path) -> (bool, Vec<String>) {
    let cfg = ContextConfig {
        persistent: Some(PersistentCache::new(dir)),
        workers: 1,
        ..Default::default()
    };
    let ctx = Context::with_config(dev.clone(), cfg);
    let p = ctx.build_program(&module(), &[], "").unwrap();
    let k = ctx.device().kernel(&p.handle, "twice").unwrap();
    let mut bufs = vec![Buffer::from_slice(&[3u32; 128])];
    ctx.device().run(&k, &NdRange::new(&[128]), &[Arg::Buffer(0)], &mut bufs).unwrap();
    let want: Vec<u32> = (0..128).map(|i| 6 + i).collect();
    assert_eq!(bufs[0].to_vec::<u32>().unwrap(), want);
    let warnings = ctx.persistent_cache().unwrap().warnings();
    (p.from_disk, warnings)
}

fn stored(dev: &Arc<VulkanDevice>, dir: &std::path::Path) -> Option<Vec<u8>> {
    let ctx = Context::with_config(dev.clone(), ContextConfig::default());
    let key = ctx.program_key(&module(), &[], "").disk_key();
    PersistentCache::new(dir).get(&driver_cache_key(&key))
}

fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-vkpc-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Stores `data` for `key` in place of what is there (`put` keeps an existing item).
fn replace(cache: &PersistentCache, key: &kiln_runtime::cache::DiskKey, data: &[u8]) {
    std::fs::remove_dir_all(cache.item_dir(key)).unwrap();
    cache.put(key, data);
}

/// Issue 13: the pipeline cache is stored next to the program, with this device's header,
/// and a warm context loads both without a warning.
#[test]
fn vulkan_pipeline_cache_is_persisted_next_to_the_program() {
    let Some(dev) = device() else { return };
    let dir = scratch("persist");
    assert_eq!(round(&dev, &dir), (false, vec![]));
    let data = stored(&dev, &dir).expect("pipeline cache stored");
    assert!(data.len() >= 32, "{} bytes", data.len());
    assert_eq!(&data[0..8], &[32, 0, 0, 0, 1, 0, 0, 0], "a version-one header");
    assert_eq!(round(&dev, &dir), (true, vec![]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 13: pipeline cache data naming another device (or damaged) is discarded with a
/// warning and replaced, never given to the driver; the program still runs.
#[test]
fn vulkan_foreign_pipeline_cache_is_discarded_with_a_warning() {
    let Some(dev) = device() else { return };
    let dir = scratch("foreign");
    round(&dev, &dir);
    let ctx = Context::with_config(dev.clone(), ContextConfig::default());
    let key = driver_cache_key(&ctx.program_key(&module(), &[], "").disk_key());
    let cache = PersistentCache::new(&dir);
    let mut data = cache.get(&key).expect("stored");
    data[16] ^= 0xff; // another UUID
    replace(&cache, &key, &data);
    let (from_disk, warnings) = round(&dev, &dir);
    assert!(from_disk);
    assert!(warnings.iter().any(|w| w.contains("pipeline cache is for vendor")), "{warnings:?}");
    // Replaced by this device's data when the context was dropped.
    let now = stored(&dev, &dir).expect("stored again");
    assert_ne!(now[16], data[16]);
    assert_eq!(round(&dev, &dir), (true, vec![]));
    // Garbage in place of the header: the same.
    replace(&cache, &key, b"not a pipeline cache");
    assert_eq!(cache.get(&key).as_deref(), Some(&b"not a pipeline cache"[..]));
    let (_, warnings) = round(&dev, &dir);
    assert!(warnings.iter().any(|w| w.contains("pipeline cache header length")), "{warnings:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
