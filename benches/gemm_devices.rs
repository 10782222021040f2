//! Generated SGEMM against a naive kernel (one work-item per element of C, the whole K loop
//! from global memory) on the cpu device and on Vulkan (lavapipe here, a GPU's driver
//! elsewhere), same run. Each kernel's C is checked bit for bit against an exact reference
//! before it is timed. Throughput is in elements of 2·M·N·K, so criterion's `elem/s`
//! reads as FLOP/s. `cargo bench --bench gemm_devices -- --warm-up-time 1 --measurement-time 3`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kiln::backends::options::BuildOptions;
use kiln::generator::{GemmConfig, GemmProblem};
use kiln::ir::launch::{Arg, Buffer, NdRange};
use kiln::ir::{parse_module, Kernel, Scalar, Verified};
use kiln::runtime::device::registry::{open, OpenOptions};
use kiln::runtime::Device;

const N: i64 = 256;

fn naive() -> Kernel {
    let src = format!(
        "kernel naive(a: ptr<global, f32>, b: ptr<global, f32>, c: ptr<global, f32>, alpha: f32, beta: f32) {{
  let col: u32 = global_id(0);
  let row: u32 = global_id(1);
  var acc: f32 = 0.0;
  for k: u32 in 0u32 .. {N}u32 {{
    acc = fma(a[row * {N}u32 + k], b[k * {N}u32 + col], acc);
  }}
  c[row * {N}u32 + col] = alpha * acc;
}}"
    );
    parse_module(&src).unwrap().kernels.remove(0)
}

/// A and B: small integers, so that every product and partial sum is exact in f32 and any
/// summation order gives the same bits.
fn inputs() -> (Vec<f32>, Vec<f32>) {
    let n = (N * N) as usize;
    let a = (0..n).map(|i| ((i * 7 + 3) % 7) as f32 - 3.0).collect();
    let b = (0..n).map(|i| ((i * 5 + 1) % 5) as f32 - 2.0).collect();
    (a, b)
}

/// C = A·B (alpha 1, beta 0), computed here: exact (see [`inputs`]), so the reference for
/// every kernel's bits.
fn reference(a: &[f32], b: &[f32]) -> Vec<f32> {
    let n = N as usize;
    let mut c = vec![0f32; n * n];
    for row in 0..n {
        for k in 0..n {
            let x = a[row * n + k];
            for col in 0..n {
                c[row * n + col] += x * b[k * n + col];
            }
        }
    }
    c
}

/// Builds `k` on `dev`, runs it once and checks C against `want` bit for bit (a benchmark of
/// a wrong kernel measures nothing), then returns a closure that launches it once.
fn launcher<'d>(
    dev: &'d dyn Device,
    k: &Kernel,
    range: NdRange,
    want: &[f32],
) -> impl FnMut() + 'd {
    let m = Verified::kernel(k.clone()).unwrap();
    let bin = dev.build(&m, &BuildOptions::parse("-O").unwrap()).unwrap();
    let program = dev.load(&bin).unwrap();
    let kernel = dev.kernel(&program, k.name()).unwrap();
    let (a, b) = inputs();
    let mut bufs = vec![
        Buffer::from_slice(&a),
        Buffer::from_slice(&b),
        // Not an integer: an element the kernel does not write cannot match. (Not NaN:
        // beta·C must be 0.)
        Buffer::from_slice(&vec![-1000.5f32; (N * N) as usize]),
    ];
    let args =
        [Arg::Buffer(0), Arg::Buffer(1), Arg::Buffer(2), Arg::scalar(1.0f32), Arg::scalar(0.0f32)];
    dev.run(&kernel, &range, &args, &mut bufs).unwrap();
    let got = bufs[2].to_vec::<f32>().unwrap();
    let bad = got.iter().zip(want).position(|(g, w)| g.to_bits() != w.to_bits());
    if let Some(i) = bad {
        panic!("{} on {}: C[{i}] is {}, not {}", k.name(), dev.name(), got[i], want[i]);
    }
    move || dev.run(&kernel, &range, &args, &mut bufs).unwrap()
}

fn gemm(c: &mut Criterion) {
    let p = GemmProblem { m: N, n: N, k: N, trans_a: false, trans_b: false, ty: Scalar::F32 };
    let cfgs = [
        (
            "generated 16x16 wg 4x4 vec4",
            GemmConfig {
                wg_m: 16,
                wg_n: 16,
                tm: 4,
                tn: 4,
                k_tile: 16,
                slm_depth: 2,
                unroll: true,
                vec: 4,
                split_k: 1,
            },
        ),
        ("generated 8x8 wg 2x2", GemmConfig::default()),
    ];
    let (a, b) = inputs();
    let want = reference(&a, &b);
    for name in ["cpu", "vulkan"] {
        let dev = match open(name, &OpenOptions::default()) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("{name}: not benchmarked: {e}");
                continue;
            }
        };
        let mut g = c.benchmark_group(format!("sgemm {N}^3 on {name} ({})", dev.name()));
        g.throughput(Throughput::Elements(2 * (N * N * N) as u64));
        g.sample_size(10);
        let naive_range = NdRange::new(&[N as u32, N as u32]).with_local(&[16, 16]);
        let mut run = launcher(&*dev, &naive(), naive_range, &want);
        g.bench_function("naive", |b| b.iter(&mut run));
        for (label, cfg) in cfgs {
            let gen = p.generate(&cfg).unwrap();
            let range = NdRange::new(&gen.global).with_local(&gen.local);
            let mut run = launcher(&*dev, &gen.kernel, range, &want);
            g.bench_function(label, |b| b.iter(&mut run));
        }
        g.finish();
    }
}

criterion_group!(benches, gemm);
criterion_main!(benches);
