//! Cache benchmarks: in-memory hit latency, persistent-cache hit vs rebuild for the
//! examples, and get_or_build throughput with 1..N threads on one hot key.
//!
//! `cargo bench -p kiln-runtime --bench cache`

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use kiln_ir::parse_module;
use kiln_runtime::cache::{BuildCache, PersistentCache};
use kiln_runtime::{interp_device, Context, ContextConfig, ProgramKey};

const EXAMPLES: [&str; 4] = ["saxpy", "reduce", "stencil2d", "divergent"];

fn example(name: &str) -> String {
    let p = format!("{}/../examples/{name}.kir", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(p).expect("example file")
}

fn hit_latency(c: &mut Criterion) {
    let src = example("saxpy");
    let key = ProgramKey::new(&src, &[], "interp|kiln-interp|bench", "");
    let cache: BuildCache<ProgramKey, Arc<[u8]>, String> = BuildCache::new(0, |v| v.len());
    cache.get_or_build(&key, || Ok(Arc::from(src.as_bytes()))).unwrap();
    c.bench_function("in_memory_hit/build_cache", |b| {
        b.iter(|| cache.get_or_build(std::hint::black_box(&key), || Err("miss".into())).unwrap())
    });
    let ctx = Context::with_config(interp_device(), ContextConfig::default());
    let m = parse_module(&src).unwrap();
    let p = ctx.build_program(&m, &[], "").unwrap();
    ctx.kernel(&p, "saxpy").unwrap();
    c.bench_function("in_memory_hit/context_kernel", |b| {
        b.iter(|| ctx.kernel(std::hint::black_box(&p), "saxpy").unwrap())
    });
}

fn persistent_vs_rebuild(c: &mut Criterion) {
    let dir = std::env::temp_dir().join(format!("kiln-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let dev = interp_device();
    let disk = PersistentCache::new(&dir);
    let mut g = c.benchmark_group("program");
    for name in EXAMPLES {
        let src = example(name);
        let m = parse_module(&src).unwrap();
        let key = ProgramKey::new(&m.to_string(), &[], &dev.identity(), "").disk_key();
        disk.put(&key, &dev.build(&m, "").unwrap());
        g.bench_with_input(BenchmarkId::new("rebuild", name), &m, |b, m| {
            b.iter(|| dev.load(&dev.build(m, "").unwrap()).unwrap())
        });
        g.bench_with_input(BenchmarkId::new("persistent_hit", name), &key, |b, key| {
            b.iter(|| dev.load(&disk.get(key).unwrap()).unwrap())
        });
        g.bench_with_input(BenchmarkId::new("persistent_read_only", name), &key, |b, key| {
            b.iter(|| disk.get(key).unwrap())
        });
    }
    g.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

fn hot_key_throughput(c: &mut Criterion) {
    let key = ProgramKey::new(&example("saxpy"), &[], "interp|kiln-interp|bench", "");
    let cache: Arc<BuildCache<ProgramKey, Arc<[u8]>, String>> =
        Arc::new(BuildCache::new(0, |v| v.len()));
    cache.get_or_build(&key, || Ok(Arc::from(&b"x"[..]))).unwrap();
    let mut g = c.benchmark_group("hot_key_get_or_build");
    for threads in [1usize, 2, 4] {
        g.bench_with_input(BenchmarkId::from_parameter(threads), &threads, |b, &t| {
            // Time for every thread to do `iters` lookups: per-iteration time is per lookup
            // per thread (lower is better; flat means lookups scale).
            b.iter_custom(|iters| {
                let start = Instant::now();
                std::thread::scope(|s| {
                    for _ in 0..t {
                        s.spawn(|| {
                            for _ in 0..iters {
                                std::hint::black_box(
                                    cache.get_or_build(&key, || Err("miss".into())).unwrap(),
                                );
                            }
                        });
                    }
                });
                start.elapsed()
            })
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
    targets = hit_latency, persistent_vs_rebuild, hot_key_throughput
}
criterion_main!(benches);
