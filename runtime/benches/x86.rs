//! Issue 15's x86 numbers, every reference measured in the same run (ratios: run
//! `benches/x86_ratios.py`, which runs this bench and prints them):
//!
//! * `x86_chain`: the elementwise chain `t1 = a*b; t2 = t1+c; t3 = t2*s; out = t3-b` on 2^25
//!   f32 (`KILN_X86_BENCH_LOG2N` changes the exponent), as four kernels (unfused) and fused by
//!   the fusion pass with `x86_chain.toml` (what `kiln fuse` does), single thread and all
//!   threads, against a plain Rust loop compiled with the bench (rustc -O), one thread and
//!   all threads, and the machine's copy bandwidth (all threads copying a buffer of the same
//!   size, in this process).
//! * `x86_chain_interp`: the fused chain on the interpreter and on the JIT, 2^16 elements
//!   (the interpreter is too slow for 2^25); compare per element.
//! * `x86_examples`: the work-group reduction (`examples/reduce.kir`) and the 2-D stencil
//!   (`examples/stencil2d.kir`) on 2^22 elements, single thread, on the 8-lane code and
//!   on the scalar code alone, against rustc -O loops
//!   computing the same values in the same order.
//! * `x86_compile`: JIT compile time of the fused chain (after `-O`) to executable code,
//!   default (vector code; the scalar code is compiled when a launch first needs it) and
//!   scalar-only, against PTX emission of the same kernel.
//!
//! Every result is checked against the Rust loop, bit for bit, before anything is timed.
//! Run with `cargo bench -p kiln-runtime --bench x86`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kiln_backends::{ptx, x86};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{parse_module, Kernel, Module, Scalar};
use kiln_passes::fusion::{fuse_kernels, FusionSpec, RangeSpec};
use kiln_runtime::device::cpu::{CpuRun, CpuRunOptions};

const CHAIN: &str = include_str!("x86_chain.kir");
const CHAIN_SPEC: &str = include_str!("x86_chain.toml");
const REDUCE: &str = include_str!("../../examples/reduce.kir");
const STENCIL: &str = include_str!("../../examples/stencil2d.kir");

fn log2n() -> u32 {
    std::env::var("KILN_X86_BENCH_LOG2N").ok().and_then(|s| s.parse().ok()).unwrap_or(25)
}

fn threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn data(n: usize, seed: u32) -> Vec<f32> {
    (0..n as u32).map(|i| ((i.wrapping_mul(2654435761) ^ seed) % 1000) as f32 * 0.01).collect()
}

#[inline(never)]
fn rust_chain(a: &[f32], b: &[f32], c: &[f32], s: f32, out: &mut [f32]) {
    for i in 0..out.len() {
        out[i] = (a[i] * b[i] + c[i]) * s - b[i];
    }
}

/// `rust_chain` split over `t` scoped threads.
fn rust_chain_all(a: &[f32], b: &[f32], c: &[f32], s: f32, out: &mut [f32], t: usize) {
    let per = out.len().div_ceil(t);
    std::thread::scope(|sc| {
        for (k, o) in out.chunks_mut(per).enumerate() {
            let r = k * per..k * per + o.len();
            let (a, b, c) = (&a[r.clone()], &b[r.clone()], &c[r]);
            sc.spawn(move || rust_chain(a, b, c, s, o));
        }
    });
}

/// The machine's copy bandwidth: `src` into `dst` on `t` scoped threads.
fn copy_all(src: &[f32], dst: &mut [f32], t: usize) {
    let per = dst.len().div_ceil(t);
    std::thread::scope(|sc| {
        for (k, d) in dst.chunks_mut(per).enumerate() {
            let s = &src[k * per..k * per + d.len()];
            sc.spawn(move || d.copy_from_slice(s));
        }
    });
}

/// The chain's four kernels fused for a global size of `n` (the fusion pass, as `kiln fuse`).
fn fused_chain(m: &Module, n: u32) -> Kernel {
    let mut spec = FusionSpec::from_toml(CHAIN_SPEC).expect("spec parses");
    spec.ndranges = vec![RangeSpec::new(&[n]); 4];
    fuse_kernels(m, &spec).expect("fuses").kernel
}

fn chain(c: &mut Criterion) {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    let n = 1usize << log2n();
    let t = threads();
    let module = parse_module(CHAIN).expect("chain parses");
    let opts = x86::X86Options { optimize: true, ..x86::X86Options::default() };
    let fused = x86::compile(&fused_chain(&module, n as u32), &opts).expect("compiles");
    let parts: Vec<_> = ["mul", "add", "scale", "sub"]
        .iter()
        .map(|k| x86::compile(module.kernel(k).expect("kernel"), &opts).expect("compiles"))
        .collect();
    let (a, b, cc) = (data(n, 1), data(n, 2), data(n, 3));
    let s = 1.5f32;
    // Buffers: a, b, c, t1, t2, t3, out.
    let mut bufs = vec![
        Buffer::from_slice(&a),
        Buffer::from_slice(&b),
        Buffer::from_slice(&cc),
        Buffer::zeroed(Scalar::F32, n),
        Buffer::zeroed(Scalar::F32, n),
        Buffer::zeroed(Scalar::F32, n),
        Buffer::zeroed(Scalar::F32, n),
    ];
    let range = NdRange::new(&[n as u32]).with_local(&[256]);
    let fused_args =
        [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(s), Arg::Buffer(6)];
    let part_args = [
        vec![Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(3)],
        vec![Arg::Buffer(3), Arg::Buffer(2), Arg::Buffer(4)],
        vec![Arg::Buffer(4), Arg::scalar(s), Arg::Buffer(5)],
        vec![Arg::Buffer(5), Arg::Buffer(1), Arg::Buffer(6)],
    ];
    let none = CpuRunOptions::default();
    let run_fused = |bufs: &mut [Buffer], t: usize| {
        fused.run_parallel(&range, &fused_args, bufs, t, &none).expect("runs")
    };
    let run_parts = |bufs: &mut [Buffer], t: usize| {
        for (p, args) in parts.iter().zip(&part_args) {
            p.run_parallel(&range, args, bufs, t, &none).expect("runs");
        }
    };
    // Every way agrees, bit for bit, before anything is timed.
    let mut want = vec![0f32; n];
    rust_chain(&a, &b, &cc, s, &mut want);
    let mut out = vec![0f32; n];
    rust_chain_all(&a, &b, &cc, s, &mut out, t);
    assert!(out == want, "threaded Rust loop");
    for threads in [1, t] {
        bufs[6] = Buffer::zeroed(Scalar::F32, n);
        run_fused(&mut bufs, threads);
        assert!(bufs[6].to_vec::<f32>().expect("f32") == want, "fused, {threads} threads");
        bufs[6] = Buffer::zeroed(Scalar::F32, n);
        run_parts(&mut bufs, threads);
        assert!(bufs[6].to_vec::<f32>().expect("f32") == want, "unfused, {threads} threads");
    }
    assert!(fused.has_spmd() || !std::arch::is_x86_feature_detected!("avx2"));

    let mut g = c.benchmark_group("x86_chain");
    g.sample_size(10).throughput(Throughput::Elements(n as u64));
    g.bench_function("rustc_1t", |bch| {
        bch.iter(|| rust_chain(black_box(&a), &b, &cc, s, &mut out))
    });
    g.bench_function("fused_1t", |bch| bch.iter(|| run_fused(&mut bufs, 1)));
    g.bench_function("unfused_1t", |bch| bch.iter(|| run_parts(&mut bufs, 1)));
    g.bench_function("rustc_all", |bch| {
        bch.iter(|| rust_chain_all(black_box(&a), &b, &cc, s, &mut out, t))
    });
    g.bench_function("fused_all", |bch| bch.iter(|| run_fused(&mut bufs, t)));
    g.bench_function("unfused_all", |bch| bch.iter(|| run_parts(&mut bufs, t)));
    g.bench_function("copy_all", |bch| bch.iter(|| copy_all(black_box(&a), &mut out, t)));
    g.finish();
    drop(bufs);
    drop(out);

    // The interpreter, per element, on a size it can run in a sample.
    let small = 1usize << 16;
    let kernel = kiln_passes::pipeline::optimize(&fused_chain(&module, small as u32));
    let jit = x86::compile(&kernel, &x86::X86Options::default()).expect("compiles");
    let mut bufs: Vec<Buffer> = [&a, &b, &cc]
        .iter()
        .map(|v| Buffer::from_slice(&v[..small]))
        .chain((0..4).map(|_| Buffer::zeroed(Scalar::F32, small)))
        .collect();
    let range = NdRange::new(&[small as u32]).with_local(&[256]);
    kiln_ir::interp::run(&kernel, &range, &fused_args, &mut bufs).expect("interprets");
    assert!(bufs[6].to_vec::<f32>().expect("f32")[..] == want[..small], "interpreter");
    bufs[6] = Buffer::zeroed(Scalar::F32, small);
    jit.run(&range, &fused_args, &mut bufs).expect("runs");
    assert!(bufs[6].to_vec::<f32>().expect("f32")[..] == want[..small], "JIT, 2^16 elements");
    let mut g = c.benchmark_group("x86_chain_interp");
    g.sample_size(10).throughput(Throughput::Elements(small as u64));
    g.bench_function("interp_fused", |bch| {
        bch.iter(|| kiln_ir::interp::run(&kernel, &range, &fused_args, &mut bufs).expect("runs"))
    });
    g.bench_function("x86_fused_1t", |bch| {
        bch.iter(|| jit.run(&range, &fused_args, &mut bufs).expect("runs"))
    });
    g.finish();

    let optimized = kiln_passes::pipeline::optimize(&fused_chain(&module, n as u32));
    let ptx_opts = ptx::Options { sm: 90, ptx_version: None };
    let scalar = x86::X86Options { scalar: true, ..x86::X86Options::default() };
    let mut g = c.benchmark_group("x86_compile");
    g.bench_function("x86_jit", |bch| {
        bch.iter(|| x86::compile(black_box(&optimized), &x86::X86Options::default()).expect("ok"))
    });
    g.bench_function("x86_jit_scalar", |bch| {
        bch.iter(|| x86::compile(black_box(&optimized), &scalar).expect("compiles"))
    });
    g.bench_function("ptx_emit", |bch| {
        bch.iter(|| ptx::emit_kernel(black_box(&optimized), &ptx_opts).expect("emits"))
    });
    // A persistent-cache hit's share: mapping the stored image (both codes, checked) back.
    let image = x86::compile(&optimized, &x86::X86Options::default())
        .and_then(|p| p.to_image())
        .expect("an image");
    g.bench_function("x86_image_load", |bch| {
        bch.iter(|| x86::X86Program::from_image(&optimized, black_box(&image)).expect("loads"))
    });
    g.finish();
}

/// The tree sum of `examples/reduce.kir` for one group of 64, in the kernel's order.
fn rust_reduce(x: &[f32], partial: &mut [f32]) {
    for (g, p) in partial.iter_mut().enumerate() {
        let mut tile = [0f32; 64];
        tile.copy_from_slice(&x[g * 64..g * 64 + 64]);
        let mut stride = 32;
        while stride > 0 {
            for i in 0..stride {
                tile[i] += tile[i + stride];
            }
            stride /= 2;
        }
        *p = tile[0];
    }
}

/// `examples/stencil2d.kir` as a loop.
fn rust_stencil(src: &[f32], dst: &mut [f32], w: usize, h: usize) {
    for y in 0..h {
        for x in 0..w {
            let c = y * w + x;
            dst[c] = if x > 0 && x < w - 1 && y > 0 && y < h - 1 {
                0.5 * src[c] + 0.125 * (src[c - 1] + src[c + 1] + src[c - w] + src[c + w])
            } else {
                src[c]
            };
        }
    }
}

fn examples(c: &mut Criterion) {
    if !cfg!(target_arch = "x86_64") {
        return;
    }
    let opts = x86::X86Options { optimize: true, ..x86::X86Options::default() };
    let compile = |src: &str| {
        x86::compile(&parse_module(src).expect("parses").kernels[0], &opts).expect("compiles")
    };
    // The scalar code alone: what these kernels ran on before they got vector code.
    let scalar_opts = x86::X86Options { scalar: true, ..opts.clone() };
    let compile_scalar = |src: &str| {
        x86::compile(&parse_module(src).expect("parses").kernels[0], &scalar_opts)
            .expect("compiles")
    };
    let n = 1usize << 22;
    let x = data(n, 7);
    let mut g = c.benchmark_group("x86_examples");
    g.sample_size(10).throughput(Throughput::Elements(n as u64));

    let reduce = compile(REDUCE);
    let mut want = vec![0f32; n / 64];
    rust_reduce(&x, &mut want);
    let mut bufs = vec![Buffer::from_slice(&x), Buffer::zeroed(Scalar::F32, n / 64)];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(n as u32)];
    let range = NdRange::new(&[n as u32]).with_local(&[64]);
    reduce.run(&range, &args, &mut bufs).expect("runs");
    assert!(bufs[1].to_vec::<f32>().expect("f32") == want, "reduction");
    let mut got = vec![0f32; n / 64];
    g.bench_function("reduce_rustc", |bch| bch.iter(|| rust_reduce(black_box(&x), &mut got)));
    g.bench_function("reduce_x86_1t", |bch| {
        bch.iter(|| reduce.run(&range, &args, &mut bufs).expect("runs"))
    });
    let reduce_scalar = compile_scalar(REDUCE);
    bufs[1] = Buffer::zeroed(Scalar::F32, n / 64);
    reduce_scalar.run(&range, &args, &mut bufs).expect("runs");
    assert!(bufs[1].to_vec::<f32>().expect("f32") == want, "reduction, scalar code");
    g.bench_function("reduce_x86_scalar_1t", |bch| {
        bch.iter(|| reduce_scalar.run(&range, &args, &mut bufs).expect("runs"))
    });

    let stencil = compile(STENCIL);
    let (w, h) = (2048usize, n / 2048);
    let mut want = vec![0f32; n];
    rust_stencil(&x, &mut want, w, h);
    let mut bufs = vec![Buffer::from_slice(&x), Buffer::zeroed(Scalar::F32, n)];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(w as u32), Arg::scalar(h as u32)];
    let range = NdRange::new(&[w as u32, h as u32]).with_local(&[64, 1]);
    stencil.run(&range, &args, &mut bufs).expect("runs");
    assert!(bufs[1].to_vec::<f32>().expect("f32") == want, "stencil");
    let mut got = vec![0f32; n];
    g.bench_function("stencil_rustc", |bch| {
        bch.iter(|| rust_stencil(black_box(&x), &mut got, w, h))
    });
    g.bench_function("stencil_x86_1t", |bch| {
        bch.iter(|| stencil.run(&range, &args, &mut bufs).expect("runs"))
    });
    let stencil_scalar = compile_scalar(STENCIL);
    bufs[1] = Buffer::zeroed(Scalar::F32, n);
    stencil_scalar.run(&range, &args, &mut bufs).expect("runs");
    assert!(bufs[1].to_vec::<f32>().expect("f32") == want, "stencil, scalar code");
    g.bench_function("stencil_x86_scalar_1t", |bch| {
        bch.iter(|| stencil_scalar.run(&range, &args, &mut bufs).expect("runs"))
    });
    g.finish();
}

criterion_group!(benches, chain, examples);
criterion_main!(benches);
