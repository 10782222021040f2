//! Cache benchmarks, each reported against a reference measured in the same run:
//!
//! * `in_memory_hit/*`: the raw [`BuildCache`] hit (reference) against the calls a user
//!   makes per submission: [`Context::kernel_of`] on a prepared module, [`Context::kernel`]
//!   on a built program, and [`Context::get_kernel`] (which prints and hashes the module
//!   every time, to show why modules are prepared once).
//! * `program/<artifact>/{rebuild,persistent_hit}/<example>`: building the program binary
//!   as the device would (interp: verified IR text, loaded; ptx: `-O` pipeline + PTX
//!   emitter for sm_90; spirv: `-O` pipeline + Vulkan-flavour SPIR-V) against reading the
//!   same binary back from the persistent cache (key check, MACs, LRU stamp; the
//!   key's hashes computed once, as a `Context` does). PTX and
//!   SPIR-V are built without a GPU; loading them into a driver is the same on both sides
//!   and not measured.
//! * `context_vulkan/*`, `context_cuda/*` (where such a device exists; for CUDA the binary
//!   is the driver-assembled cubin, so `rebuild` includes the driver's PTX assembler and
//!   `persistent_hit` does not): the whole [`Context::program_of`]
//!   path after the in-memory caches are cleared: rebuild + load, or disk hit + load
//!   (`load_only`: the device's part of the latter).
//! * `hot_key/*`: get_or_build / kernel_of throughput with 1..4 threads on one hot key.
//!
//! `cargo bench -p kiln-runtime --bench cache -- --warm-up-time 1 --measurement-time 3`

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use kiln_ir::{parse_module, Module, Verified};
use kiln_runtime::cache::{BuildCache, KeyHashes, PersistentCache};
use kiln_runtime::device::cuda::{build_ptx_program, CudaDevice};
use kiln_runtime::device::vulkan::{build_spirv_program, VulkanDevice};
use kiln_runtime::{interp_device, BuildOptions, Context, ContextConfig, Device, ProgramKey};

const EXAMPLES: [&str; 4] = ["saxpy", "reduce", "stencil2d", "divergent"];

fn example(name: &str) -> Module {
    let p = format!("{}/../examples/{name}.kir", env!("CARGO_MANIFEST_DIR"));
    parse_module(&std::fs::read_to_string(p).expect("example file")).expect("example parses")
}

fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-bench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn hit_latency(c: &mut Criterion) {
    let m = example("saxpy");
    let key = ProgramKey::new(&m.to_string(), &[], "interp|kiln-interp|bench", "");
    let cache: BuildCache<ProgramKey, Arc<[u8]>, String> = BuildCache::new(0, |v| v.len());
    cache.get_or_build(&key, || Ok(Arc::from(&b"bin"[..]))).unwrap();
    let mut g = c.benchmark_group("in_memory_hit");
    g.bench_function("build_cache", |b| {
        b.iter(|| cache.get_or_build(std::hint::black_box(&key), || Err("miss".into())).unwrap())
    });
    let ctx = Context::with_config(interp_device(), ContextConfig::default());
    let prepared = ctx.prepare(&m, &[], "");
    ctx.kernel_of(&prepared, "saxpy").unwrap();
    g.bench_function("context_kernel_of", |b| {
        b.iter(|| ctx.kernel_of(std::hint::black_box(&prepared), "saxpy").unwrap())
    });
    let p = ctx.build_program(&m, &[], "").unwrap();
    ctx.kernel(&p, "saxpy").unwrap();
    g.bench_function("context_kernel", |b| {
        b.iter(|| ctx.kernel(std::hint::black_box(&p), "saxpy").unwrap())
    });
    g.bench_function("context_get_kernel_unprepared", |b| {
        b.iter(|| ctx.get_kernel(std::hint::black_box(&m), "saxpy").unwrap())
    });
    g.finish();
}

type Builder = Box<dyn Fn(&Module) -> Vec<u8>>;

/// A rebuild verifies, as a context's build does.
fn verified(m: &Module) -> Verified {
    Verified::new(m.clone()).unwrap()
}

fn persistent_vs_rebuild(c: &mut Criterion) {
    let dir = scratch("disk");
    let disk = PersistentCache::new(&dir);
    let interp = interp_device();
    let builders: [(&str, String, Builder); 3] = [
        (
            "interp",
            interp.identity(),
            Box::new(move |m| {
                let d = interp_device();
                let bin = d.build(&verified(m), &BuildOptions::default()).unwrap();
                d.load(&bin).unwrap();
                bin
            }),
        ),
        (
            "ptx",
            "cuda|bench|sm_90".into(),
            Box::new(|m| build_ptx_program(&verified(m), &BuildOptions::default(), 90).unwrap()),
        ),
        (
            "spirv",
            "vulkan|bench".into(),
            Box::new(|m| build_spirv_program(&verified(m), &BuildOptions::default()).unwrap()),
        ),
    ];
    let mut g = c.benchmark_group("program");
    for (artifact, identity, build) in &builders {
        for name in EXAMPLES {
            let m = example(name);
            let key = ProgramKey::new(&m.to_string(), &[], identity, "").disk_key();
            // Hashed once, as a `Context` does for its keys.
            let hk = KeyHashes::of(&key);
            disk.put(&key, &build(&m));
            let id = format!("{artifact}/rebuild");
            g.bench_with_input(BenchmarkId::new(id, name), &m, |b, m| b.iter(|| build(m)));
            let id = format!("{artifact}/persistent_hit");
            if *artifact == "interp" {
                // The interpreter's "load" parses the text: count it on the hit side too.
                g.bench_with_input(BenchmarkId::new(id, name), &key, |b, key| {
                    b.iter(|| interp.load(&disk.get_hashed(key, &hk).unwrap()).unwrap())
                });
            } else {
                g.bench_with_input(BenchmarkId::new(id, name), &key, |b, key| {
                    b.iter(|| disk.get_hashed(key, &hk).unwrap())
                });
            }
        }
    }
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

fn context_vulkan(c: &mut Criterion) {
    match VulkanDevice::open() {
        Ok(d) => context_device(c, "context_vulkan", Arc::new(d)),
        Err(e) => eprintln!("skipping context_vulkan: {e}"),
    }
}

fn context_cuda(c: &mut Criterion) {
    match CudaDevice::open() {
        Ok(d) => context_device(c, "context_cuda", Arc::new(d)),
        Err(e) => eprintln!("skipping context_cuda: {e}"),
    }
}

/// Rebuild + load against persistent hit + load through a `Context` on a real device.
fn context_device(c: &mut Criterion, group: &str, dev: Arc<dyn Device>) {
    let dir = scratch(group);
    let cfg = |persistent: bool| ContextConfig {
        persistent: persistent.then(|| PersistentCache::new(&dir)),
        workers: 1,
        ..Default::default()
    };
    let (rebuild, hit) =
        (Context::with_config(dev.clone(), cfg(false)), Context::with_config(dev, cfg(true)));
    let mut g = c.benchmark_group(group);
    for name in EXAMPLES {
        let m = example(name);
        let (pr, ph) = (rebuild.prepare(&m, &[], ""), hit.prepare(&m, &[], ""));
        hit.program_of(&ph).unwrap();
        g.bench_with_input(BenchmarkId::new("rebuild", name), &pr, |b, p| {
            b.iter(|| {
                rebuild.clear_caches();
                rebuild.program_of(p).unwrap()
            })
        });
        // The device's share of a hit: turning the stored bytes into a program handle.
        let bin = hit.program_of(&ph).unwrap().binary.clone();
        let dev = hit.device().clone();
        g.bench_with_input(BenchmarkId::new("load_only", name), &bin, |b, bin| {
            b.iter(|| dev.load(bin).unwrap())
        });
        g.bench_with_input(BenchmarkId::new("persistent_hit", name), &ph, |b, p| {
            b.iter(|| {
                hit.clear_caches();
                let prog = hit.program_of(p).unwrap();
                assert!(prog.from_disk);
                prog
            })
        });
    }
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Time for every one of `t` threads to do `iters` calls of `f`: the per-iteration time is
/// per call per thread (flat across thread counts means lookups scale).
fn threads(t: usize, iters: u64, f: &(impl Fn() + Sync)) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..t {
            s.spawn(|| {
                for _ in 0..iters {
                    f();
                }
            });
        }
    });
    start.elapsed()
}

fn hot_key_throughput(c: &mut Criterion) {
    let m = example("saxpy");
    let key = ProgramKey::new(&m.to_string(), &[], "interp|kiln-interp|bench", "");
    let cache: BuildCache<ProgramKey, Arc<[u8]>, String> = BuildCache::new(0, |v| v.len());
    cache.get_or_build(&key, || Ok(Arc::from(&b"x"[..]))).unwrap();
    let ctx = Context::with_config(interp_device(), ContextConfig::default());
    let prepared = ctx.prepare(&m, &[], "");
    ctx.kernel_of(&prepared, "saxpy").unwrap();
    let mut g = c.benchmark_group("hot_key");
    for t in [1usize, 2, 4] {
        g.bench_with_input(BenchmarkId::new("build_cache", t), &t, |b, &t| {
            let f = || {
                std::hint::black_box(cache.get_or_build(&key, || Err("miss".into())).unwrap());
            };
            b.iter_custom(|iters| threads(t, iters, &f))
        });
        g.bench_with_input(BenchmarkId::new("context_kernel_of", t), &t, |b, &t| {
            let f = || {
                std::hint::black_box(ctx.kernel_of(&prepared, "saxpy").unwrap());
            };
            b.iter_custom(|iters| threads(t, iters, &f))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(1))
        .sample_size(20);
    targets = hit_latency, persistent_vs_rebuild, context_vulkan, context_cuda, hot_key_throughput
}
criterion_main!(benches);
