//! Issue 7's end-to-end number: the chain `t1 = a + b; t2 = t1 * c; out = t2 - a` fused,
//! optimized by the default pipeline and emitted as PTX and as SPIR-V, against the pieces on
//! their own in the same run. Run with `cargo bench -p kiln-backends --bench fuse_emit`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use kiln_backends::{ptx, spirv};
use kiln_ir::{parse_module, Module};
use kiln_passes::fusion::{fuse_kernels, fuse_kernels_with, identity, FuseOptions, FusionSpec};

const CHAIN: &str = include_str!("../../examples/fusion/chain.kir");
const SPEC: &str = include_str!("../../examples/fusion/chain.toml");

fn fuse_emit(c: &mut Criterion) {
    let module = parse_module(CHAIN).expect("chain parses");
    let spec = FusionSpec::from_toml(SPEC).expect("spec parses");
    let opts = ptx::Options { sm: 90, ptx_version: None };
    let unoptimized = FuseOptions { post_fusion: identity, ..FuseOptions::default() };
    let mut g = c.benchmark_group("chain");
    g.bench_function("fuse (no optimization)", |b| {
        b.iter(|| fuse_kernels_with(black_box(&module), &spec, &unoptimized).expect("fuses"))
    });
    g.bench_function("fuse + optimize", |b| {
        b.iter(|| fuse_kernels(black_box(&module), &spec).expect("fuses"))
    });
    g.bench_function("fuse + optimize + emit PTX", |b| {
        b.iter(|| {
            let f = fuse_kernels(black_box(&module), &spec).expect("fuses");
            ptx::emit_module(&Module::new(vec![f.kernel]), &opts).expect("emits")
        })
    });
    g.bench_function("fuse + optimize + emit SPIR-V (Vulkan)", |b| {
        b.iter(|| {
            let f = fuse_kernels(black_box(&module), &spec).expect("fuses");
            spirv::emit(&f.kernel, spirv::Flavour::Vulkan).expect("emits").to_bytes()
        })
    });
    g.bench_function("reference: emit the three unfused kernels as PTX", |b| {
        b.iter(|| ptx::emit_module(black_box(&module), &opts).expect("emits"))
    });
    g.finish();

    // The steps on their own, to see where the end-to-end time goes.
    let fused = fuse_kernels_with(&module, &spec, &unoptimized).expect("fuses").kernel;
    let optimized = kiln_passes::pipeline::optimize(&fused);
    let mut g = c.benchmark_group("chain steps");
    g.bench_function("verify the fused kernel", |b| {
        b.iter(|| kiln_ir::verify_kernel(black_box(&fused)).expect("verifies"))
    });
    g.bench_function("optimize the fused kernel", |b| {
        b.iter(|| kiln_passes::pipeline::optimize(black_box(&fused)))
    });
    g.bench_function("emit the optimized fused kernel as PTX", |b| {
        b.iter(|| ptx::emit_module(&Module::new(vec![black_box(&optimized).clone()]), &opts))
    });
    g.bench_function("emit the optimized fused kernel as SPIR-V (Vulkan)", |b| {
        b.iter(|| spirv::emit(black_box(&optimized), spirv::Flavour::Vulkan).expect("emits"))
    });
    g.finish();
}

criterion_group!(benches, fuse_emit);
criterion_main!(benches);
