//! Time to fuse + optimize (the default post-fusion pipeline) 2, 4 and 10 kernels, and to
//! fuse + optimize + emit the three-kernel chain `t1 = a + b; t2 = t1 * c; out = t2 - a` as
//! `.kir` text (the PTX and SPIR-V numbers are in `kiln-backends`' `fuse_emit` bench).
//!
//! Run: `cargo bench -p kiln-passes --bench fusion`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use kiln_ir::{parse_module, Module};
use kiln_passes::fusion::{
    fuse_kernels, ConstValue, Constant, FusionSpec, ParamRef, PromoteTo, Promotion, RangeSpec,
};
use std::hint::black_box;

const CHAIN: &str = "
kernel add(a: ptr<global, f32>, b: ptr<global, f32>, t1: ptr<global, f32>) {
  let i: u32 = global_id(0);
  t1[i] = a[i] + b[i];
}
kernel mul(t1: ptr<global, f32>, c: ptr<global, f32>, t2: ptr<global, f32>) {
  let i: u32 = global_id(0);
  t2[i] = t1[i] * c[i];
}
kernel sub(t2: ptr<global, f32>, a: ptr<global, f32>, out: ptr<global, f32>) {
  let i: u32 = global_id(0);
  out[i] = t2[i] - a[i];
}
kernel axpy(x: ptr<global, f32>, y: ptr<global, f32>, s: f32, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    y[i] = s * x[i] + y[i];
  }
}
";

/// `n` axpy kernels over one buffer pair, each with its scale a constant.
fn n_spec(n: usize) -> FusionSpec {
    FusionSpec {
        name: "fused".into(),
        kernels: vec!["axpy".into(); n],
        ndranges: vec![RangeSpec::new(&[1024]); n],
        identical: vec![
            (0..n).map(|e| ParamRef::new(e, 0)).collect(),
            (0..n).map(|e| ParamRef::new(e, 1)).collect(),
            (0..n).map(|e| ParamRef::new(e, 3)).collect(),
        ],
        constants: (0..n)
            .map(|e| Constant { param: ParamRef::new(e, 2), value: ConstValue::Float(e as f64) })
            .collect(),
        ..FusionSpec::default()
    }
}

fn chain_spec() -> FusionSpec {
    FusionSpec {
        name: "chain".into(),
        kernels: vec!["add".into(), "mul".into(), "sub".into()],
        ndranges: vec![RangeSpec::new(&[1024]); 3],
        identical: vec![
            vec![ParamRef::new(0, 2), ParamRef::new(1, 0)],
            vec![ParamRef::new(1, 2), ParamRef::new(2, 0)],
            vec![ParamRef::new(0, 0), ParamRef::new(2, 1)],
        ],
        promote: vec![
            Promotion {
                param: ParamRef::new(0, 2),
                to: PromoteTo::Private,
                size: Some(1),
                buffer_len: None,
            },
            Promotion {
                param: ParamRef::new(1, 2),
                to: PromoteTo::Private,
                size: Some(1),
                buffer_len: None,
            },
        ],
        ..FusionSpec::default()
    }
}

fn bench(c: &mut Criterion) {
    let module: Module = parse_module(CHAIN).expect("parses");
    let mut g = c.benchmark_group("fuse_optimize");
    for n in [2usize, 4, 10] {
        let spec = n_spec(n);
        g.bench_with_input(BenchmarkId::from_parameter(n), &spec, |b, spec| {
            b.iter(|| fuse_kernels(black_box(&module), black_box(spec)).expect("fuses"))
        });
    }
    g.finish();
    let spec = chain_spec();
    c.bench_function("chain_fuse_optimize_emit_kir", |b| {
        b.iter(|| {
            let f = fuse_kernels(black_box(&module), black_box(&spec)).expect("fuses");
            f.kernel.to_string()
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
