//! Long straight-line kernels through every pass and the default pipeline (issue 12): 10^4
//! and 10^5 statements, so that a pass that is not near-linear shows (the 10^5 time should be
//! about ten times the 10^4 one). The kernel is the chain that made `let-opt` quadratic:
//! `let v1 = v0 op c; let v2 = v1 op c; ...` over a load, with a store every 100 lets.
//!
//! `cargo bench -p kiln-passes --bench long` (criterion, 10 samples each). Set
//! `KILN_BENCH_LONG_MAX` to a smaller statement count (e.g. `10000`) to skip the large size.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use kiln_ir::{AddrSpace, BinOp, Expr, Kernel, Scalar, Stmt, Type, Var};
use kiln_passes::manager::PASSES;
use kiln_passes::pipeline::optimize;

/// `n` chained lets over `x[global_id(0)]`, storing the running value every 100 lets.
fn long_kernel(n: usize) -> Kernel {
    let x = Var::new("x", Type::ptr(AddrSpace::Global, Scalar::I32));
    let g = Var::new("g", Type::U32);
    let mut body = vec![Stmt::let_(&g, Expr::global_id(0))];
    let mut prev = Var::new("v0", Type::I32);
    body.push(Stmt::let_(&prev, x.load(&g)));
    for i in 1..=n {
        let v = Var::new(format!("v{i}"), Type::I32);
        let op = [BinOp::Add, BinOp::Mul, BinOp::Xor, BinOp::Sub][i % 4];
        body.push(Stmt::let_(&v, Expr::binary(op, prev.expr(), Expr::i32((i % 7) as i32 + 1))));
        if i % 100 == 0 {
            body.push(Stmt::store(&x, &g, v.expr()));
        }
        prev = v;
    }
    body.push(Stmt::store(&x, &g, prev.expr()));
    Kernel::new("long", vec![x], Stmt::block(body))
}

/// One store of a single expression `n` levels deep (`x[g] op c op c ...`), which every pass
/// sees split into lets of depth `MAX_EXPR_DEPTH`: long code of another shape.
fn deep_kernel(n: usize) -> Kernel {
    let x = Var::new("x", Type::ptr(AddrSpace::Global, Scalar::I32));
    let g = Var::new("g", Type::U32);
    let mut e = x.load(&g);
    for i in 1..=n {
        let op = [BinOp::Add, BinOp::Mul, BinOp::Xor, BinOp::Sub][i % 4];
        e = Expr::binary(op, e, Expr::i32((i % 7) as i32 + 1));
    }
    let body = Stmt::block([Stmt::let_(&g, Expr::global_id(0)), Stmt::store(&x, &g, e)]);
    Kernel::new("deep", vec![x], body)
}

fn sizes() -> Vec<usize> {
    let max = std::env::var("KILN_BENCH_LONG_MAX").ok().and_then(|s| s.parse().ok());
    [10_000, 100_000].into_iter().filter(|&n| max.is_none_or(|m| n <= m)).collect()
}

/// One timed run of each pass and of `-O` per size, printed as a table before criterion's
/// measurement (which a filter can skip: `cargo bench --bench long -- nothing` prints only
/// this), so the 10^4 and 10^5 columns sit side by side.
fn single_runs(_: &mut Criterion) {
    println!("chained lets (statements):");
    table(&sizes().into_iter().map(|n| (n, long_kernel(n))).collect::<Vec<_>>());
    println!("one deep expression (levels):");
    table(&sizes().into_iter().map(|n| (n, deep_kernel(n))).collect::<Vec<_>>());
}

fn table(ks: &[(usize, Kernel)]) {
    let mut names: Vec<&str> = PASSES.iter().map(|p| p.0).collect();
    names.push("-O");
    println!("{:<12}{}", "pass", ks.iter().map(|(n, _)| format!("{n:>14}")).collect::<String>());
    for name in names {
        let mut row = format!("{name:<12}");
        for (_, k) in ks {
            let t = std::time::Instant::now();
            match PASSES.iter().find(|p| p.0 == name) {
                Some((_, pass, _)) => drop(black_box(pass(k))),
                None => drop(black_box(optimize(k))),
            }
            row += &format!("{:>12.1}ms", t.elapsed().as_secs_f64() * 1e3);
        }
        println!("{row}");
    }
}

fn bench_passes(c: &mut Criterion) {
    let mut group = c.benchmark_group("long");
    group.sample_size(10);
    for n in sizes() {
        for (shape, k) in [("lets", long_kernel(n)), ("deep", deep_kernel(n))] {
            for (name, pass, _) in PASSES {
                group.bench_with_input(
                    BenchmarkId::new(format!("{shape}/{name}"), n),
                    &k,
                    |b, k| b.iter(|| black_box(pass(k))),
                );
            }
            group.bench_with_input(BenchmarkId::new(format!("{shape}/-O"), n), &k, |b, k| {
                b.iter(|| black_box(optimize(k)))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, single_runs, bench_passes);
criterion_main!(benches);
