//! The generator's own cost: building a GEMM kernel from views, then the `-O` pipeline, then
//! PTX emission, for a 1024^3 SGEMM with a GPU-sized blocking (16x16 work-items, 4x4
//! register blocks, k-tile 16, double buffering, unrolled) and a small one. Run with
//! `cargo bench -p kiln-gen --bench generate`. NVRTC's time for a CUDA C kernel of similar
//! size is measured by the GPU scripts (benches/gpu/), not here.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use kiln_gen::{ConvProblem, GemmConfig, GemmProblem};
use kiln_ir::Scalar;

fn generate(c: &mut Criterion) {
    let big =
        GemmProblem { m: 1024, n: 1024, k: 1024, trans_a: false, trans_b: false, ty: Scalar::F32 };
    let cfg = GemmConfig {
        wg_m: 16,
        wg_n: 16,
        tm: 4,
        tn: 4,
        k_tile: 16,
        slm_depth: 2,
        unroll: true,
        vec: 4,
        split_k: 1,
    };
    let small = GemmConfig {
        wg_m: 8,
        wg_n: 8,
        tm: 2,
        tn: 2,
        k_tile: 8,
        slm_depth: 2,
        unroll: false,
        vec: 1,
        split_k: 1,
    };
    let ptx = kiln_backends::ptx::Options::sm(90);
    let mut g = c.benchmark_group("gemm 1024^3");
    for (name, cfg) in [("16x16 wg, 4x4 block, unrolled", cfg), ("8x8 wg, 2x2 block", small)] {
        g.bench_function(format!("generate ({name})"), |b| {
            b.iter(|| black_box(&big).generate(black_box(&cfg)).expect("generates"))
        });
        let k = big.generate(&cfg).expect("generates").kernel;
        g.bench_function(format!("-O pipeline ({name})"), |b| {
            b.iter(|| kiln_passes::pipeline::optimize(black_box(&k)))
        });
        let opt = kiln_passes::pipeline::optimize(&k);
        g.bench_function(format!("PTX emission ({name})"), |b| {
            b.iter(|| kiln_backends::ptx::emit_kernel(black_box(&opt), &ptx).expect("emits").len())
        });
        g.bench_function(format!("all three ({name})"), |b| {
            b.iter(|| {
                let k = big.generate(&cfg).expect("generates").kernel;
                let k = kiln_passes::pipeline::optimize(&k);
                kiln_backends::ptx::emit_kernel(&k, &ptx).expect("emits").len()
            })
        });
    }
    g.finish();
    let conv = ConvProblem::new(32, 64, 56, 56, 64, 3, 3).with_padding(1, 1);
    let mut g = c.benchmark_group("conv resnet50 3x3 64->64 56x56 mb32");
    g.bench_function("generate", |b| {
        b.iter(|| black_box(&conv).generate(&cfg).expect("generates"))
    });
    g.finish();
}

criterion_group!(benches, generate);
criterion_main!(benches);
