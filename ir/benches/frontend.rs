//! The front end and the oracle: parsing, verifying and printing the examples, and the
//! interpreter's throughput. Run with `cargo bench -p kiln-ir --bench frontend`.
//!
//! Each group also measures a reference in the same run, so results read as ratios: parsing
//! against a plain scan of the same bytes, and the interpreter against the same kernel
//! written in Rust.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{check_source, parse_module, verify_module};

const EXAMPLES: [(&str, &str); 4] = [
    ("saxpy", include_str!("../../examples/saxpy.kir")),
    ("stencil2d", include_str!("../../examples/stencil2d.kir")),
    ("reduce", include_str!("../../examples/reduce.kir")),
    ("divergent", include_str!("../../examples/divergent.kir")),
];

fn frontend(c: &mut Criterion) {
    let all: String = EXAMPLES.iter().map(|(_, s)| *s).collect::<Vec<_>>().join("\n");
    let mut g = c.benchmark_group("frontend");
    g.throughput(Throughput::Bytes(all.len() as u64));
    g.bench_function("reference: count tokens by whitespace", |b| {
        b.iter(|| black_box(&all).split_whitespace().count())
    });
    g.bench_function("parse", |b| {
        b.iter(|| parse_module(black_box(&all)).map(|m| m.kernels.len()))
    });
    g.bench_function("parse + verify (check_source)", |b| {
        b.iter(|| check_source("all.kir", black_box(&all)).map(|m| m.kernels.len()))
    });
    let module = parse_module(&all).expect("examples parse");
    g.bench_function("verify", |b| b.iter(|| verify_module(black_box(&module)).is_ok()));
    g.bench_function("print", |b| b.iter(|| black_box(&module).to_string().len()));
    g.finish();
}

fn interpreter(c: &mut Criterion) {
    const N: u32 = 1 << 14;
    let module = parse_module(EXAMPLES[0].1).expect("saxpy parses");
    let kernel = &module.kernels[0];
    let x: Vec<f32> = (0..N).map(|i| i as f32).collect();
    let y = vec![1.0f32; N as usize];
    let mut g = c.benchmark_group("interpreter");
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("reference: saxpy in Rust", |b| {
        b.iter(|| {
            let mut y = y.clone();
            for (yi, xi) in y.iter_mut().zip(&x) {
                *yi += 2.0 * xi;
            }
            black_box(y)
        })
    });
    g.bench_function("saxpy on the interpreter", |b| {
        b.iter(|| {
            let mut bufs = vec![Buffer::from_slice(&x), Buffer::from_slice(&y)];
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(2.0f32), Arg::scalar(N)];
            run(kernel, &NdRange::new(&[N]), &args, &mut bufs).expect("saxpy runs");
            black_box(bufs)
        })
    });
    let reduce = parse_module(EXAMPLES[2].1).expect("reduce parses");
    g.bench_function("reduce (local memory + barriers) on the interpreter", |b| {
        b.iter(|| {
            let mut bufs = vec![Buffer::from_slice(&x), Buffer::zeroed(kiln_ir::Scalar::F32, 256)];
            let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(N)];
            run(&reduce.kernels[0], &NdRange::new(&[N]), &args, &mut bufs).expect("reduce runs");
            black_box(bufs)
        })
    });
    g.finish();
}

criterion_group!(benches, frontend, interpreter);
criterion_main!(benches);
