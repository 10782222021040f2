//! Issue 15's x86 numbers: the elementwise chain `t1 = a*b; t2 = t1+c; t3 = t2*s; out = t3-b`
//! on 2^22 f32 (16 MiB per array; the 2^25 is too large for the shared 2-core
//! machine this is run on), single thread: the fused kernel and the four unfused kernels on
//! the x86 JIT, against a plain Rust loop compiled with the bench (rustc -O); and the JIT
//! compile time of the fused kernel against its PTX emission time.
//! Run with `cargo bench -p kiln-backends --bench x86`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use kiln_backends::{ptx, x86};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{parse_module, Module, Scalar};

const CHAIN: &str = include_str!("x86_chain.kir");
const N: usize = 1 << 22;

fn data(seed: u32) -> Vec<f32> {
    (0..N as u32).map(|i| ((i.wrapping_mul(2654435761) ^ seed) % 1000) as f32 * 0.01).collect()
}

#[inline(never)]
fn rust_chain(a: &[f32], b: &[f32], c: &[f32], s: f32, out: &mut [f32]) {
    for i in 0..out.len() {
        out[i] = (a[i] * b[i] + c[i]) * s - b[i];
    }
}

fn chain(c: &mut Criterion) {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    let module = parse_module(CHAIN).expect("chain parses");
    let k = |name: &str| module.kernel(name).expect("kernel").clone();
    let opts = x86::X86Options { optimize: true, ..x86::X86Options::default() };
    let fused = x86::compile(&k("chain"), &opts).expect("compiles");
    let parts: Vec<_> = ["mul", "add", "scale", "sub"]
        .iter()
        .map(|n| x86::compile(&k(n), &opts).expect("compiles"))
        .collect();
    let (a, b, cc) = (data(1), data(2), data(3));
    let s = 1.5f32;
    // Buffers: a, b, c, t1, t2, t3, out.
    let mut bufs = vec![
        Buffer::from_slice(&a),
        Buffer::from_slice(&b),
        Buffer::from_slice(&cc),
        Buffer::zeroed(Scalar::F32, N),
        Buffer::zeroed(Scalar::F32, N),
        Buffer::zeroed(Scalar::F32, N),
        Buffer::zeroed(Scalar::F32, N),
    ];
    let range = NdRange::new(&[N as u32]).with_local(&[256]);
    let fused_args =
        [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(s), Arg::Buffer(6)];
    let part_args = [
        vec![Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(3)],
        vec![Arg::Buffer(3), Arg::Buffer(2), Arg::Buffer(4)],
        vec![Arg::Buffer(4), Arg::scalar(s), Arg::Buffer(5)],
        vec![Arg::Buffer(5), Arg::Buffer(1), Arg::Buffer(6)],
    ];
    // The three ways agree before anything is timed.
    let mut want = vec![0f32; N];
    rust_chain(&a, &b, &cc, s, &mut want);
    fused.run(&range, &fused_args, &mut bufs).expect("runs");
    assert_eq!(bufs[6].to_vec::<f32>().expect("f32"), want);
    for (p, args) in parts.iter().zip(&part_args) {
        p.run(&range, args, &mut bufs).expect("runs");
    }
    assert_eq!(bufs[6].to_vec::<f32>().expect("f32"), want);

    let mut g = c.benchmark_group("x86 chain 2^22 f32, 1 thread");
    g.sample_size(10);
    g.bench_function("rustc -O loop", |bch| {
        let mut out = vec![0f32; N];
        bch.iter(|| rust_chain(black_box(&a), &b, &cc, s, &mut out))
    });
    g.bench_function("x86 JIT fused", |bch| {
        bch.iter(|| fused.run(&range, &fused_args, &mut bufs).expect("runs"))
    });
    g.bench_function("x86 JIT unfused (4 kernels)", |bch| {
        bch.iter(|| {
            for (p, args) in parts.iter().zip(&part_args) {
                p.run(&range, args, &mut bufs).expect("runs");
            }
        })
    });
    g.finish();

    let fused_k = k("chain");
    let optimized = kiln_passes::pipeline::optimize(&fused_k);
    let ptx_opts = ptx::Options { sm: 90, ptx_version: None };
    let mut g = c.benchmark_group("x86 chain compile");
    g.bench_function("x86 JIT compile (optimized kernel, to executable code)", |bch| {
        bch.iter(|| {
            x86::compile(black_box(&optimized), &x86::X86Options::default()).expect("compiles")
        })
    });
    g.bench_function("PTX emission (optimized kernel)", |bch| {
        bch.iter(|| ptx::emit_module(&Module::new(vec![black_box(&optimized).clone()]), &ptx_opts))
    });
    g.finish();
}

criterion_group!(benches, chain);
criterion_main!(benches);
