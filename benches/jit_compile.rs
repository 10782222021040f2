//! How long kiln takes to build the kernels that matter, in process, split by stage:
//!
//! * `jit_gemm_4096_large`: the tuned 4096^3 SGEMM, the blocking `kiln gen gemm 4096 4096 4096
//!   --device cuda` picks for the H100 target (`tuner::first_choice`, today its large seed
//!   `--wg 16x8 --tile 8x16 --k-tile 8 --slm 2 --unroll --vec 4`): the generator, the `-O`
//!   pipeline, PTX emission, and all three (issue 26's target: at most 5 ms on the GPU
//!   machine's host), the last as a JIT chains them: `GemmProblem::generate_optimized`, which
//!   verifies the generator's kernel once, by `-O`'s verifier, then PTX;
//! * `jit_gemm_4096`: the same problem at the earlier fixed blocking `--wg 8x16 --tile 8x8
//!   --k-tile 8 --slm 2 --unroll --vec 4` (half the register block), to compare with;
//! * `jit_stencil`: the 2-D 5-point stencil (`examples/stencil2d.kir`) for the cpu device:
//!   the `-O` pipeline, x86 code generation of the optimized kernel, and the device's whole
//!   build (issue 24's target: at most 5 ms);
//!
//! then a closing line per kernel with the median of 21 runs of each stage and, for the
//! pipeline, a table of every step's median and share (`PassManager::run_timed`, as `kiln
//! opt --time-passes`).
//! Every stage's output is checked once first (it builds, verifies and is not empty).
//!
//! `cargo bench --bench jit_compile -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use kiln::backends::{ptx, x86};
use kiln::generator::tuner::{first_choice, Target};
use kiln::generator::{GemmConfig, GemmProblem};
use kiln::ir::{parse_module, Scalar, Verified};
use kiln::passes::pipeline::optimize;
use kiln::runtime::device::registry::{open, OpenOptions};

const STENCIL: &str = include_str!("../examples/stencil2d.kir");

#[path = "common/timing.rs"]
mod timing;
use timing::{emit, median21, ms, pass_table};

fn gemm(c: &mut Criterion) {
    let tuned = first_choice([4096; 3], &Target::h100());
    assert_eq!(tuned.split_k, 1, "one kernel to time, not split-K's pair");
    gemm_case(c, "jit_gemm_4096_large", &tuned);
    // `..default()`: the configuration may grow fields (split-K, ...) that keep defaults here.
    #[allow(clippy::needless_update)]
    let cfg = GemmConfig {
        wg_m: 8,
        wg_n: 16,
        tm: 8,
        tn: 8,
        k_tile: 8,
        slm_depth: 2,
        unroll: true,
        vec: 4,
        ..GemmConfig::default()
    };
    gemm_case(c, "jit_gemm_4096", &cfg);
}

/// One GEMM blocking's JIT stages, timed under `name`.
fn gemm_case(c: &mut Criterion, name: &str, cfg: &GemmConfig) {
    let problem =
        GemmProblem { m: 4096, n: 4096, k: 4096, trans_a: false, trans_b: false, ty: Scalar::F32 };
    let opts = ptx::Options::sm(90);
    // The three stages as a JIT chains them: the generator's kernel is verified once, by
    // `-O`'s verifier (`generate_optimized`), not by the generator as well.
    let all = || emit(problem.generate_optimized(cfg).expect("generates").kernel, &opts);
    let k = problem.generate(cfg).expect("generates").kernel;
    let opt = optimize(&k);
    assert!(kiln::ir::verify_kernel(&opt).is_ok(), "the optimized GEMM verifies");
    let chained = problem.generate_optimized(cfg).expect("generates").kernel;
    assert_eq!(chained.to_string(), opt.to_string(), "generate_optimized is -O of generate");
    assert!(all().contains(".entry"), "PTX with an entry point");

    let mut g = c.benchmark_group(name);
    g.sample_size(10);
    g.bench_function("generate", |b| b.iter(|| problem.generate(black_box(cfg)).expect("ok")));
    g.bench_function("O_pipeline", |b| b.iter(|| optimize(black_box(&k))));
    g.bench_function("ptx_emit", |b| b.iter(|| emit(black_box(opt.clone()), &opts)));
    g.bench_function("all_three", |b| b.iter(all));
    g.finish();
    println!(
        "\n{name} ({cfg}) medians of 21: generate {:.2} ms, -O {:.2} ms, PTX {:.2} ms, all three \
         {:.2} ms; -O by step:\n{}",
        ms(median21(|| {
            black_box(problem.generate(cfg).expect("ok"));
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
        pass_table(&k)
    );
}

fn stencil(c: &mut Criterion) {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    let k = parse_module(STENCIL).expect("parses").kernels.remove(0);
    let opt = optimize(&k);
    let x86_opts = x86::X86Options::default();
    let dev = open("cpu", &OpenOptions::default()).expect("the cpu device opens");
    let module = Verified::kernel(k.clone()).expect("verifies");
    let build = || dev.build(&module, &Default::default()).expect("builds");
    assert!(!build().is_empty(), "a program");
    assert!(x86::compile(&opt, &x86_opts).is_ok(), "x86 code");

    let mut g = c.benchmark_group("jit_stencil");
    g.bench_function("O_pipeline", |b| b.iter(|| optimize(black_box(&k))));
    g.bench_function("x86_codegen", |b| b.iter(|| x86::compile(black_box(&opt), &x86_opts)));
    g.bench_function("device_build", |b| b.iter(build));
    g.finish();
    println!(
        "\njit_stencil medians of 21: -O {:.3} ms, x86 codegen {:.3} ms, device build {:.3} ms; \
         -O by step:\n{}",
        ms(median21(|| {
            black_box(optimize(&k));
        })),
        ms(median21(|| {
            black_box(x86::compile(&opt, &x86_opts).expect("ok"));
        })),
        ms(median21(|| {
            black_box(build());
        })),
        pass_table(&k)
    );
}

criterion_group!(benches, gemm, stencil);
criterion_main!(benches);
