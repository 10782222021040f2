//! Emission time of the SPIR-V backend for every example kernel, in both flavours
//! (`cargo bench -p kiln-backends --bench spirv_emit`).

use criterion::{criterion_group, criterion_main, Criterion};
use kiln_backends::spirv::{emit, Flavour};
use kiln_ir::parse_module;

fn examples() -> Vec<kiln_ir::Kernel> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples");
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "kir"))
        .collect();
    paths.sort();
    paths
        .iter()
        .flat_map(|p| parse_module(&std::fs::read_to_string(p).unwrap()).unwrap().kernels)
        .collect()
}

fn bench(c: &mut Criterion) {
    let kernels = examples();
    let mut g = c.benchmark_group("spirv_emit");
    for k in &kernels {
        for (f, tag) in [(Flavour::Vulkan, "vk"), (Flavour::OpenCl, "cl")] {
            g.bench_function(format!("{}/{tag}", k.name()), |b| {
                b.iter(|| emit(std::hint::black_box(k), f).unwrap())
            });
        }
    }
    g.bench_function("all_examples/both", |b| {
        b.iter(|| {
            for k in &kernels {
                emit(k, Flavour::Vulkan).unwrap();
                emit(k, Flavour::OpenCl).unwrap();
            }
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
