//! How long kiln takes, in process, to build the tensor-core GEMM of issue 27 for 4096^3
//! (`kiln gen tc-gemm 4096 4096 4096`, the default blocking, bf16 in and out, with and
//! without the fused bias + relu + scale epilogue): the generator, the `-O` pipeline, PTX
//! emission, and all three (the target: at most 5 ms), with a closing line of the
//! medians of 21 runs and the `-O` pipeline's time by step. Each stage's output is checked once first.
//!
//! `cargo bench --bench jit_tc -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use kiln::backends::ptx;
use kiln::generator::{Epilogue, TcConfig, TcGemmProblem};
use kiln::ir::Scalar;
use kiln::passes::pipeline::optimize;

#[path = "common/timing.rs"]
mod timing;
use timing::{emit, median21, ms, pass_table};

fn tc(c: &mut Criterion) {
    let cfg = TcConfig::default();
    let opts = ptx::Options::sm(80);
    for ep in ["", "bias,relu,scale"] {
        let p = TcGemmProblem {
            out: Scalar::BF16,
            epilogue: Epilogue::parse(ep).expect("epilogue"),
            ..TcGemmProblem::new(4096, 4096, 4096, Scalar::BF16)
        };
        let all = || {
            let k = optimize(&p.generate(&cfg).expect("generates").kernel);
            emit(k, &opts)
        };
        let k = p.generate(&cfg).expect("generates").kernel;
        let opt = optimize(&k);
        assert!(kiln::ir::verify_kernel(&opt).is_ok(), "the optimized GEMM verifies");
        assert!(all().contains("mma.sync"), "PTX with mma.sync");
        let name = format!("jit_tc_gemm_4096{}", p.epilogue.suffix());
        let mut g = c.benchmark_group(&name);
        g.sample_size(10);
        g.bench_function("generate", |b| b.iter(|| p.generate(black_box(&cfg)).expect("ok")));
        g.bench_function("O_pipeline", |b| b.iter(|| optimize(black_box(&k))));
        g.bench_function("ptx_emit", |b| b.iter(|| emit(black_box(opt.clone()), &opts)));
        g.bench_function("all_three", |b| b.iter(all));
        g.finish();
        println!(
            "\n{name} medians of 21: generate {:.2} ms, -O {:.2} ms, PTX {:.2} ms, all three \
             {:.2} ms; -O by step:\n{}",
            ms(median21(|| {
                black_box(p.generate(&cfg).expect("ok"));
            })),
            ms(median21(|| {
                black_box(optimize(&k));
            })),
            ms(median21(|| {
                black_box(emit(opt.clone(), &opts));
            })),
            ms(median21(|| {
                black_box(all());
            })),
            pass_table(&k),
        );
    }
}

criterion_group!(benches, tc);
criterion_main!(benches);
